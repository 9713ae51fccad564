//! The checks that make the endpoint fail on purpose and look at what is left: a
//! transient failure, a crash between phases, and the end of the retention.

use std::cell::Cell;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;

use futures_util::future::poll_fn;

use super::{
    delta, distinct, effect_text, executed, in_progress, replay_differences, replayed, transient,
};
use crate::testing::outcome::describe;
use crate::testing::{CRASHED, Endpoint, Failed, Passed, Target, fresh_key};

impl Endpoint {
    /// **transient failure**: the request changed by the [failure
    /// hook](Self::fail_request) answers a 5xx or a transient 4xx. Then no key row is
    /// left and the effect counter did not move (an effect written outside idem's
    /// transaction shows here); for a [phased](Self::phased) endpoint the key stays in
    /// progress with its lease free instead. The retry with the same key executes once
    /// (effect +1 in all) and a further request with it is a replay.
    ///
    /// ```no_run
    /// # async fn check<M>(endpoint: idem_runtime::testing::Endpoint, app: impl idem_runtime::testing::Target<M>) {
    /// endpoint.transient_failure(&app).await.unwrap();
    /// # }
    /// ```
    pub async fn transient_failure<M>(&self, app: &impl Target<M>) -> Result<Passed, Failed> {
        const CHECK: &str = "transient_failure";
        let Some(hook) = &self.fail else {
            return Err(self.failed(
                CHECK,
                "a hook that makes the handler fail once (`.fail_request(..)`)",
                "no failure hook given",
            ));
        };
        let store = self.key_store(CHECK)?;
        let key = fresh_key(CHECK);
        let before = self.count().await;
        let failure = app.send(self.out(hook(self.keyed(&key)))).await;
        let change = delta(before, self.count().await);
        if !transient(failure.status()) || replayed(&failure) {
            return Err(self.failed(
                CHECK,
                "the request with the failure hook answers a 5xx or a transient 4xx (408, \
                 409, 423, 425, 429)",
                describe(&failure),
            ));
        }
        let row = store
            .key_row(&key)
            .await
            .map_err(|error| self.database(CHECK, error))?;
        let mut seen = vec![format!("failure: {}", describe(&failure))];
        let mut wrong = false;
        let expected = if self.phased {
            match &row {
                Some(row) if row.state == "started" && !row.leased => {
                    seen.push(format!(
                        "key in progress at {}, lease free",
                        row.recovery_point
                    ));
                }
                Some(row) => {
                    wrong = true;
                    seen.push(format!(
                        "key row {} at {}{}",
                        row.state,
                        row.recovery_point,
                        if row.leased { ", lease still held" } else { "" }
                    ));
                }
                None => {
                    wrong = true;
                    seen.push("no key row".to_owned());
                }
            }
            "after the failure the key stays in progress with its lease released; the \
             retry with the same key completes (effect counter +1 in all) and is replayed \
             after"
        } else {
            match &row {
                None => seen.push("no key row left".to_owned()),
                Some(row) => {
                    wrong = true;
                    seen.push(format!("a key row is left ({})", row.state));
                }
            }
            if change.is_some_and(|change| change != 0) {
                wrong = true;
                seen.push(format!(
                    "{} after the failed request: an effect written outside idem's \
                     transaction (on the pool instead of `tx`?) stays when the key rolls back",
                    effect_text(change)
                ));
            } else {
                seen.push(format!("{} after the failure", effect_text(change)));
            }
            "after the failure no key row is left and the effect counter did not move; the \
             retry with the same key executes once (effect counter +1) and is replayed after"
        };
        if wrong {
            return Err(self.failed(CHECK, expected, seen.join("; ")));
        }
        let retry = app.send(self.out(self.keyed(&key))).await;
        let change = delta(before, self.count().await);
        seen.push(format!("retry: {}", describe(&retry)));
        if !executed(&retry) {
            return Err(self.failed(CHECK, expected, seen.join("; ")));
        }
        let replay = app.send(self.out(self.keyed(&key))).await;
        let differences = replay_differences(&retry, &replay, &self.replay_headers);
        seen.push(format!("{} in all", effect_text(change)));
        if change.is_some_and(|change| change != 1) || !differences.is_empty() {
            seen.extend(differences);
            return Err(self.failed(CHECK, expected, seen.join("; ")));
        }
        self.passed(CHECK, seen.join("; "))
    }

    /// **crash-resume** (phased endpoints): the request changed by the [crash
    /// hook](Self::crash_after) is dropped where the handler calls [`crash`](crate::testing::crash),
    /// after the named phase committed. The key is then in progress at that phase with
    /// its lease held, and a retry answers 409; the harness ends the lease with a
    /// test-only store call (no sleeping), and a retry completes the operation exactly
    /// once (effect counter +1 in all), is replayed after, and sends the provider no key
    /// the crashed attempt had not (with [`derived_keys`](Self::derived_keys)).
    ///
    /// ```no_run
    /// # async fn check<M>(endpoint: idem_runtime::testing::Endpoint, app: impl idem_runtime::testing::Target<M>) {
    /// endpoint.crash_resume(&app).await.unwrap();
    /// # }
    /// ```
    pub async fn crash_resume<M>(&self, app: &impl Target<M>) -> Result<Passed, Failed> {
        const CHECK: &str = "crash_resume";
        let Some((phase, hook)) = &self.crash else {
            return Err(self.failed(
                CHECK,
                "a phased endpoint with a crash hook (`.crash_after(phase, ..)`)",
                "no crash hook given",
            ));
        };
        let store = self.key_store(CHECK)?;
        let key = fresh_key(CHECK);
        let before = self.count().await;
        let keys_before = self.provider_keys().await;

        let crashed = Rc::new(Cell::new(false));
        let answered = {
            let request = self.out(hook(self.keyed(&key)));
            let mut call = pin!(CRASHED.scope(Rc::clone(&crashed), app.send(request)));
            poll_fn(|cx| match call.as_mut().poll(cx) {
                Poll::Ready(answer) => Poll::Ready(Some(answer)),
                Poll::Pending if crashed.get() => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            })
            .await
            // The request is dropped here, in the middle of the handler.
        };
        let expected = format!(
            "the hooked request stops at idem::testing::crash() after phase `{phase}`, \
             leaving the key in progress at `{phase}` with its lease held (a retry answers \
             409); once the lease is ended a retry completes the operation exactly once \
             (effect counter +1 in all) with the same derived keys, and is replayed after"
        );
        if let Some(answer) = answered {
            return Err(self.failed(
                CHECK,
                &expected,
                format!(
                    "the crash hook did not stop the request: it answered {}",
                    describe(&answer)
                ),
            ));
        }
        let mut seen = vec!["crashed".to_owned()];
        let mut wrong = false;
        let row = store
            .key_row(&key)
            .await
            .map_err(|error| self.database(CHECK, error))?;
        let leased = match row {
            Some(row) if row.state == "started" && &row.recovery_point == phase => {
                seen.push(format!("key in progress at `{phase}`"));
                row.leased
            }
            Some(row) => {
                return Err(self.failed(
                    CHECK,
                    &expected,
                    format!(
                        "after the crash the key is {} at `{}`",
                        row.state, row.recovery_point
                    ),
                ));
            }
            None => return Err(self.failed(CHECK, &expected, "no key row after the crash")),
        };
        let keys_crashed = self.provider_keys().await;
        let mut took_over = None;
        if leased {
            let held = app.send(self.out(self.keyed(&key))).await;
            seen.push(format!("retry while leased: {}", describe(&held)));
            if in_progress(&held) {
                let ended = store
                    .end_lease(&key)
                    .await
                    .map_err(|error| self.database(CHECK, error))?;
                seen.push(format!("lease ended ({ended} row)"));
            } else if executed(&held) {
                // A lease shorter than this check's own steps ran out by itself and the
                // retry took over: it is the retry the check would have sent.
                seen.push("the lease ran out before the harness ended it".to_owned());
                took_over = Some(held);
            } else {
                wrong = true;
            }
        } else {
            seen.push("lease already free".to_owned());
        }
        let retry = match took_over {
            Some(retry) => retry,
            None => app.send(self.out(self.keyed(&key))).await,
        };
        seen.push(format!("retry: {}", describe(&retry)));
        if !executed(&retry) {
            return Err(self.failed(CHECK, &expected, seen.join("; ")));
        }
        let replay = app.send(self.out(self.keyed(&key))).await;
        let differences = replay_differences(&retry, &replay, &self.replay_headers);
        wrong |= !differences.is_empty();
        seen.extend(differences);
        let change = delta(before, self.count().await);
        if change.is_some_and(|change| change != 1) {
            wrong = true;
            seen.push(format!(
                "{} in all: the retry did again what the crashed attempt had done (a call \
                 outside a phase, or to a provider without Phases::derived_key?)",
                effect_text(change)
            ));
        } else {
            seen.push(format!("{} in all", effect_text(change)));
        }
        if let (Some(before), Some(crashed), Some(after)) =
            (keys_before, keys_crashed, self.provider_keys().await)
        {
            let (before, crashed_set, after) =
                (distinct(&before), distinct(&crashed), distinct(&after));
            let sent: Vec<&str> = crashed_set.difference(&before).copied().collect();
            let new: Vec<&str> = after.difference(&crashed_set).copied().collect();
            if !sent.is_empty() && !new.is_empty() {
                wrong = true;
                seen.push(format!(
                    "the retry sent the provider keys [{}] the crashed attempt had not (it sent \
                     [{}]): derive them with Phases::derived_key",
                    new.join(", "),
                    sent.join(", ")
                ));
            } else {
                seen.push(format!("provider keys: [{}]", sent.join(", ")));
            }
        }
        if wrong {
            return Err(self.failed(CHECK, &expected, seen.join("; ")));
        }
        self.passed(CHECK, seen.join("; "))
    }

    /// **expiry**: after a completed request the harness moves the key's retention into
    /// the past (a test-only store call); one sweep of [`Expiry`](crate::admin::Expiry)
    /// removes the key, and the index the sweep finds due keys by
    /// (`idem_keys_expires_at`) exists.
    ///
    /// ```no_run
    /// # async fn check<M>(endpoint: idem_runtime::testing::Endpoint, app: impl idem_runtime::testing::Target<M>) {
    /// endpoint.expiry(&app).await.unwrap();
    /// # }
    /// ```
    pub async fn expiry<M>(&self, app: &impl Target<M>) -> Result<Passed, Failed> {
        const CHECK: &str = "expiry";
        let expected = "the completed key, past its retention, is removed by one sweep, \
                        through the index idem_keys_expires_at";
        let store = self.key_store(CHECK)?;
        let key = fresh_key(CHECK);
        self.complete(CHECK, app, &key).await?;
        let database = |error: sqlx::Error| self.database(CHECK, error);
        match store.key_row(&key).await.map_err(database)? {
            Some(row) if row.state == "completed" => {}
            Some(row) => {
                return Err(self.failed(
                    CHECK,
                    expected,
                    format!("the key is {} after its answer", row.state),
                ));
            }
            None => {
                return Err(self.failed(
                    CHECK,
                    expected,
                    "no key row after a completed request: is the route idempotent?",
                ));
            }
        }
        store.age_key(&key).await.map_err(database)?;
        let report = store
            .sweep()
            .await
            .map_err(|error| self.failed(CHECK, expected, format!("the sweep failed: {error}")))?;
        let left = store.key_row(&key).await.map_err(database)?;
        let index = store.expiry_index().await.map_err(database)?;
        let seen = format!(
            "the sweep deleted {} row(s); the key {}; idem_keys_expires_at {}",
            report.rows_deleted,
            if left.is_some() {
                "is still there"
            } else {
                "is gone"
            },
            if index { "exists" } else { "is missing" }
        );
        if left.is_some() || !index {
            return Err(self.failed(CHECK, expected, seen));
        }
        self.passed(CHECK, seen)
    }
}
