//! `idem-bench`: what idempotency costs, measured against the code a user would otherwise
//! write and against the SQL the protocol needs.
//!
//! ```text
//! cargo run --release -p idem-bench             # full run; rewrites BENCHMARKS.md and benchmarks.svg
//! cargo run --release -p idem-bench -- --quick  # a few minutes, smaller tables; report under target/
//! ```
//!
//! The program starts what it needs: a PostgreSQL database (a fresh one on the server
//! `DATABASE_URL` names, or a private throwaway cluster) and a SQLite file in a temporary
//! directory, the HTTP server as a child process on each (this binary re-executed as
//! `idem-bench serve`, so its memory is its own), and a load generator here in the
//! parent. `--help` lists the options.

mod child;
mod cpu;
mod db;
mod expiry;
mod floor;
mod hand;
mod load;
mod memory;
mod options;
mod orders;
mod profile;
mod redis_rows;
mod report;
mod results;
mod run;
mod scale;
mod scenario;
mod server;
mod server_axum;
mod sqlite;
mod stats;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("serve") {
        return server::main(&args[1..]);
    }
    let options = match options::Options::parse(&args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{}", options::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("idem-bench: {error}\n\n{}", options::USAGE);
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("idem-bench: {error}");
            ExitCode::FAILURE
        }
    }
}
