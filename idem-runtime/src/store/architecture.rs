//! Keeps ARCHITECTURE.md's lists of the store's traits and of the web adapters true to
//! the code, as `tests/msrv.rs` keeps the MSRV true.

use std::collections::BTreeSet;
use std::path::Path;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The names of the public traits `text` declares.
fn traits(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("pub trait "))
        .map(|rest| {
            rest.split([':', ' ', '<', '{'])
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

/// ARCHITECTURE.md's table of the store's capability traits names exactly the public
/// traits of `store/mod.rs` and `store/inbox.rs`, and "Adding a database" names the
/// file of each; and every adapter folder (one with a `framework.rs`) is named where
/// it says how to add a web framework.
#[test]
fn architecture_md_lists_the_store_traits_and_the_adapters() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let doc = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md"));
    let declared: BTreeSet<String> = traits(&read(&store.join("mod.rs")))
        .union(&traits(&read(&store.join("inbox.rs"))))
        .cloned()
        .collect();
    let tabled: BTreeSet<String> = doc
        .lines()
        .filter_map(|line| line.trim().strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` |"))
        .filter(|(_, rest)| rest.contains("store/<db>/"))
        .map(|(name, _)| name.to_owned())
        .collect();
    assert_eq!(tabled, declared, "ARCHITECTURE.md's trait table");
    let adding = doc
        .split("## Adding a database")
        .nth(1)
        .expect("ARCHITECTURE.md says how to add a database");
    for name in &declared {
        assert!(
            adding.contains(&format!("impl {name} for <db>")),
            "Adding a database: {name}"
        );
    }
    let adding_framework = doc
        .split("## Adding a web framework")
        .nth(1)
        .expect("ARCHITECTURE.md says how to add a web framework");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).expect("src/") {
        let dir = entry.expect("an entry").path();
        if dir.join("framework.rs").is_file() && dir.file_name() != Some("protocol".as_ref()) {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                adding_framework.contains(&format!("idem-runtime/src/{name}/")),
                "Adding a web framework names the adapter {name}/"
            );
        }
    }
}
