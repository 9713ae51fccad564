//! Build script: rebuilds when idem's migration files change.
// `sqlx::migrate!` embeds the migration files at compile time; without this line a new
// file in migrations/ would not trigger a rebuild.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
