//! The integration tests that start the example binary, or a PostgreSQL cluster of their
//! own, as processes: SIGKILL, database restarts and outages, many instances, the client
//! against a real server. One binary, apart from the in-process tests (`tests/it/`), so
//! these run beside each other and nothing else; `cargo test --test process -- fault_sigkill::`
//! runs one module.

#[path = "../fault_support/mod.rs"]
mod fault_support;
#[path = "../phased_support/mod.rs"]
mod phased_support;
#[path = "../support/mod.rs"]
mod support;

mod client;
mod example_observability;
mod example_process;
mod fault_client_disconnect;
mod fault_db_restart;
mod fault_db_unreachable;
mod fault_many_instances;
mod fault_sigkill;
mod huge_headers;
mod key_flood;
mod phased_crash_resume;
mod phased_retention;
