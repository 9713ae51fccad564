//! The guide: how idem works and how to use it, one page per topic.
//!
//! Each page is a markdown file under `docs/guide/` in the repository, pulled in here
//! with `include_str!`, so the text exists once and reads the same on GitHub and here.
//! Its examples are compiled as doctests.
//!
//! | page | what it covers |
//! |---|---|
//! | [`protocol`] | the requests and answers, the key contract, the fingerprint, the limits, and the pictures |
//! | [`databases`] | SQLite or PostgreSQL, and choosing one with the features |
//! | [`attributes`] | the attribute's arguments, and exempt handlers |
//! | [`phased`] | the phased form for handlers that call other services, the outbox, the schema |
//! | [`webhooks`] | webhook receivers, queue consumers and the trust boundaries |
#![cfg_attr(
    feature = "axum",
    doc = "| [`axum`](self::axum) | axum handlers: the attribute or the layer (feature `axum`) |"
)]
//! | [`adopting`] | adopting idem in an existing service, and `idem audit` |
//! | [`operations`] | expiry and the `idem` command |
//! | [`client`] | calling idempotent endpoints from Rust with `idem-client` |
#![cfg_attr(
    feature = "metrics",
    doc = "| [`metrics`](self::metrics) | counters and a histogram (feature `metrics`) |"
)]
#![cfg_attr(
    feature = "openapi",
    doc = "| [`openapi`](self::openapi) | the OpenAPI document (feature `openapi`) |"
)]
#![cfg_attr(
    feature = "encryption",
    doc = "| [`encryption`](self::encryption) | stored responses encrypted at rest (feature `encryption`) |"
)]
//! | [`deployment`] | failover, PgBouncer and distributed SQL |
//!
//! The pages of optional features are here when their feature is on; docs.rs builds
//! with every feature.
//!
//! Beside the guide, in the repository: [RELIABILITY.md] (the fault and hostile-input
//! tests, the soak, their latest figures), [BENCHMARKS.md] (what idempotency costs) and
//! [ARCHITECTURE.md] (the layout of the code, for contributors).
//!
//! [RELIABILITY.md]: https://github.com/idem-rs/idem/blob/main/RELIABILITY.md
//! [BENCHMARKS.md]: https://github.com/idem-rs/idem/blob/main/BENCHMARKS.md
//! [ARCHITECTURE.md]: https://github.com/idem-rs/idem/blob/main/ARCHITECTURE.md

#[doc = include_str!("../../docs/guide/protocol.md")]
// The pictures inline: docs.rs serves no file of the repository beside the page, so an
// image link would not resolve there. In a `<div>` block, so that markdown leaves the SVG
// as it is (its first tag spans two lines, which would make it text of a paragraph).
#[doc = ""]
#[doc = "# The pictures"]
#[doc = ""]
#[doc = "## The single-transaction and phased state machines"]
#[doc = ""]
#[doc = "<div>"]
#[doc = include_str!("../../docs/protocol.svg")]
#[doc = "</div>"]
#[doc = ""]
#[doc = "## One request's way through the rooms"]
#[doc = ""]
#[doc = "<div>"]
#[doc = include_str!("../../docs/request.svg")]
#[doc = "</div>"]
pub mod protocol {}

#[doc = include_str!("../../docs/guide/databases.md")]
pub mod databases {}

#[doc = include_str!("../../docs/guide/attributes.md")]
pub mod attributes {}

#[doc = include_str!("../../docs/guide/phased.md")]
pub mod phased {}

#[doc = include_str!("../../docs/guide/webhooks.md")]
pub mod webhooks {}

#[cfg(feature = "axum")]
#[doc = include_str!("../../docs/guide/axum.md")]
pub mod axum {}

#[doc = include_str!("../../docs/guide/adopting.md")]
pub mod adopting {}

#[doc = include_str!("../../docs/guide/operations.md")]
pub mod operations {}

#[doc = include_str!("../../docs/guide/client.md")]
pub mod client {}

#[cfg(feature = "metrics")]
#[doc = include_str!("../../docs/guide/metrics.md")]
pub mod metrics {}

#[cfg(feature = "openapi")]
#[doc = include_str!("../../docs/guide/openapi.md")]
pub mod openapi {}

#[cfg(feature = "encryption")]
#[doc = include_str!("../../docs/guide/encryption.md")]
pub mod encryption {}

#[doc = include_str!("../../docs/guide/deployment.md")]
pub mod deployment {}
