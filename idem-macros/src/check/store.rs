//! The rules that follow from where a handler's keys live: `store = redis` never beside a
//! database transaction, `Steps` only with it, and the lease that both phased forms need.

use std::time::Duration;

use super::Params;
use crate::errors::Errors;
use crate::parse::{Arg, Args};
use crate::validate;

/// The seed's one exception, in the types: keys in Redis never beside a database
/// transaction (`Tx` or `Phases`), and `Steps` only with its keys in Redis.
pub(super) fn store_rules(args: &Args, params: &Params, errors: &mut Errors) {
    if args.store.given().is_some() {
        for param in [&params.tx, &params.phases].into_iter().flatten() {
            errors.push(syn::Error::new_spanned(
                &param.tokens,
                "keys in Redis cannot commit with your database writes; keep this \
                 endpoint's keys in PostgreSQL or SQLite, or move the effect out of the \
                 database",
            ));
        }
        if let Arg::Given(backend) = &args.backend {
            errors.push(syn::Error::new_spanned(
                backend,
                "`backend` names the database a handler's keys are in; with `store = redis` \
                 they are in Redis: remove `backend`",
            ));
        }
    } else if let (Arg::Absent, Some(steps)) = (&args.store, &params.steps) {
        errors.push(syn::Error::new_spanned(
            &steps.tokens,
            format!(
                "`{}: idem::redis::Steps` records its steps in Redis: add `store = redis` to \
                 the attribute for an effect that lives outside the database, or take \
                 `phases: idem::Phases` to keep the key with your database writes",
                steps.name
            ),
        ));
    }
}

/// The phased form's `lease`: required with a phases parameter or `store = redis`,
/// refused without either, at least a second and at most the retention (when that could
/// be read).
pub(super) fn lease(
    args: &Args,
    params: &Params,
    retention: Option<Duration>,
    errors: &mut Errors,
) -> Option<Duration> {
    let phases = params.phases.as_ref();
    if let Some(store) = args.store.given() {
        return match &args.lease {
            Arg::Given(lit) => {
                let retention = retention.map(|value| (value, args.retention.given()));
                validate::lease(lit, retention)
                    .map_err(|error| errors.push(error))
                    .ok()
            }
            Arg::Absent => {
                errors.push(syn::Error::new(
                    store.span(),
                    "`store = redis` holds each key under a lease: add e.g. `lease = \"30s\"`, \
                     longer than the handler's longest step; a retry takes over once it runs \
                     out",
                ));
                None
            }
            Arg::Unreadable => None,
        };
    }
    // A `store` that could not be read (its error is reported), or `Steps` without
    // `store = redis` (reported on its own): the lease is no second mistake.
    if matches!(args.store, Arg::Unreadable) || (phases.is_none() && params.steps.is_some()) {
        return None;
    }
    let result = match (&args.lease, phases) {
        (Arg::Given(lit), Some(_)) => {
            let retention = retention.map(|value| (value, args.retention.given()));
            validate::lease(lit, retention)
        }
        (Arg::Given(lit), None) => Err(syn::Error::new(
            lit.span(),
            "`lease` belongs to the phased form: add a parameter `phases: idem::Phases` \
             and run each step with `phases.run(..)`, or remove `lease`",
        )),
        (Arg::Absent, Some(phases)) => Err(syn::Error::new(
            args.span,
            format!(
                "`{}: idem::Phases` needs a lease: add e.g. `lease = \"30s\"`, longer than \
                 the handler's longest phase; a retry takes over once it runs out",
                phases.name
            ),
        )),
        (Arg::Absent, None) | (Arg::Unreadable, _) => return None,
    };
    result.map_err(|error| errors.push(error)).ok()
}
