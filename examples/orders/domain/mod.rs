//! The framework-free half of the orders service, shared line for line by the actix-web
//! binary (`examples/orders`) and the axum one (`examples/orders-axum`): the domain types
//! and their validation, the SQL of both databases, the payment provider's client, the
//! test hooks and every problem answer's status, slug and detail. Each binary adds only
//! its routes, its extractors and the conversion into its framework's response, so the two
//! cannot drift apart on what they answer.
//!
//! Nothing here names a web framework. The binaries include this folder with
//! `#[path = ".."] mod domain;`; the files name each other as `super::<file>`.

pub(crate) mod body;
pub(crate) mod notifications;
pub(crate) mod orders;
pub(crate) mod payment_store;
pub(crate) mod payments;
pub(crate) mod problem;
pub(crate) mod provider;
pub(crate) mod startup;
pub(crate) mod store;
pub(crate) mod webhooks;
