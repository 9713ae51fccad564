//! The in-process integration tests, one module per behaviour, in one test binary: it is
//! built and linked once, and its tests run in parallel (`cargo test --test it -- replay::`
//! runs one module). Each module takes the shared helpers from the crate root
//! (`use crate::support;`).
//!
//! Tests that need a process of their own are other binaries: `tests/process/` (tests that
//! start the example binary or a private PostgreSQL cluster), and files left in `tests/`:
//! a global metrics recorder (`metrics.rs`), a tracing subscriber (`expiry_tracing.rs`), a
//! counting global allocator (`large_answer_buffers.rs`), the registry of every handler
//! linked into the program (`registry*.rs`, and `openapi*.rs` and `webhook.rs`, whose
//! OpenAPI documents are built from it); the compile-time cases are the `idem-ui` crate's.
//! `scope.rs`, `encryption.rs`, `compressed_body.rs` and `axum_webhook.rs` need no process
//! of their own and can move here.

#[path = "../axum_support/mod.rs"]
mod axum_support;
#[path = "../expiry_support/mod.rs"]
mod expiry_support;
#[path = "../large_support/mod.rs"]
mod large_support;
#[path = "../model_support/mod.rs"]
mod model_support;
#[path = "../phased_support/mod.rs"]
mod phased_support;
#[path = "../support/mod.rs"]
mod support;

mod axum;
mod axum_layer;
mod backend_choice;
mod bad_keys;
mod canonical_request;
mod commit_failure;
mod concurrency;
mod deterministic_4xx;
mod example_notifications;
mod expiry_batches;
mod expiry_concurrent;
mod expiry_index;
mod expiry_retention;
mod expiry_task;
mod handler_transaction;
mod in_flight;
mod inbox;
mod invalid_json_body;
mod isolation;
mod large_answer_drops;
mod large_answer_failures;
mod large_answer_orphans;
mod large_answers;
mod limits;
mod malformed_body;
mod migrations;
mod mismatch;
mod model_phased;
mod model_single;
mod msrv;
mod other_callers;
mod phased_derived_keys;
mod phased_failures;
mod phased_fencing;
mod phased_in_progress;
mod phased_outbox;
mod phased_oversize;
mod phased_takeover_race;
mod redis_web;
mod relay_exclusive;
mod replay;
mod retention_maximum;
mod rollback;
mod scope_attack;
mod sf_string;
mod sqlite_busy_timeout;
mod sqlite_one_connection;
mod transient_4xx;
