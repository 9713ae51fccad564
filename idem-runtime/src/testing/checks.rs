//! The checks: what each sends, and what it expects of the answers, the effect counter
//! and the key table.

use std::collections::BTreeSet;

use bytes::Bytes;
use futures_util::future::join_all;
use http::header::{
    CONTENT_LOCATION, CONTENT_TYPE, ETAG, HeaderName, LAST_MODIFIED, LOCATION, RETRY_AFTER,
};
use http::{HeaderMap, StatusCode};

use super::outcome::{describe, excerpt};
use super::store::KeyStore;
use super::{Endpoint, Failed, Passed, Target, TestRequest, fresh_key};
use crate::protocol::flow::IDEMPOTENT_REPLAYED;
use crate::protocol::headers::IDEMPOTENCY_KEY;
use crate::protocol::problem::ProblemKind;

mod faults;

type Response = http::Response<Bytes>;

/// The headers idem stores and replays unless the application adds more
/// (`Idem::new`'s defaults).
const REPLAYED_BY_DEFAULT: [HeaderName; 6] = [
    LOCATION,
    CONTENT_TYPE,
    CONTENT_LOCATION,
    ETAG,
    LAST_MODIFIED,
    RETRY_AFTER,
];

/// idem's default transient 4xx statuses (`Idem::transient_statuses`): with a 5xx, what
/// leaves a key to be retried.
const TRANSIENT_4XX: [u16; 5] = [408, 409, 423, 425, 429];

fn replayed(response: &Response) -> bool {
    response
        .headers()
        .get(IDEMPOTENT_REPLAYED)
        .is_some_and(|value| value == "true")
}

/// idem's "another request holds this key" answer.
fn in_progress(response: &Response) -> bool {
    response.status() == StatusCode::CONFLICT
        && response.headers().contains_key(RETRY_AFTER)
        && !replayed(response)
}

fn transient(status: StatusCode) -> bool {
    status.is_server_error() || TRANSIENT_4XX.contains(&status.as_u16())
}

/// An answer of the handler that completes the key: not a replay, not "try again".
fn executed(response: &Response) -> bool {
    !replayed(response) && !transient(response.status())
}

fn problem_type(response: &Response) -> Option<String> {
    let body: serde_json::Value = serde_json::from_slice(response.body()).ok()?;
    body.get("type")?.as_str().map(str::to_owned)
}

fn values(headers: &HeaderMap, name: &HeaderName) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .collect()
}

fn shown(values: &[String]) -> String {
    if values.is_empty() {
        "none".to_owned()
    } else {
        values.join(", ")
    }
}

/// `after - before`, when there is a counter.
fn delta(before: Option<i64>, after: Option<i64>) -> Option<i64> {
    Some(after? - before?)
}

fn effect_text(delta: Option<i64>) -> String {
    match delta {
        Some(delta) => format!("effect counter {delta:+}"),
        None => "effect not counted (no .effect)".to_owned(),
    }
}

/// Where `replay` differs from `first`, as idem's replay must not.
fn replay_differences(
    first: &Response,
    replay: &Response,
    extra_headers: &[HeaderName],
) -> Vec<String> {
    let mut differences = Vec::new();
    if !replayed(replay) {
        differences.push("no `Idempotent-Replayed: true` on the replay".to_owned());
    }
    if replay.status() != first.status() {
        differences.push(format!(
            "status {} instead of {}",
            replay.status().as_u16(),
            first.status().as_u16()
        ));
    }
    if replay.body() != first.body() {
        differences.push(format!(
            "body {} instead of {}",
            excerpt(replay.body()),
            excerpt(first.body())
        ));
    }
    for name in REPLAYED_BY_DEFAULT.iter().chain(extra_headers) {
        let (was, is) = (
            values(first.headers(), name),
            values(replay.headers(), name),
        );
        if was != is {
            differences.push(format!("{name}: {} instead of {}", shown(&is), shown(&was)));
        }
    }
    differences
}

fn distinct(keys: &[String]) -> BTreeSet<&str> {
    keys.iter().map(String::as_str).collect()
}

impl Endpoint {
    fn name(&self) -> String {
        format!("{} {}", self.request.method, self.request.uri)
    }

    fn failed(&self, check: &'static str, expected: &str, seen: impl Into<String>) -> Failed {
        Failed::new(check, self.name(), expected, seen)
    }

    fn passed(&self, check: &'static str, seen: String) -> Result<Passed, Failed> {
        Ok(Passed::new(check, self.name(), seen))
    }

    fn keyed(&self, key: &str) -> TestRequest {
        self.request.clone().header(self.key_header.as_str(), key)
    }

    /// `request` as sent: signed last, when the endpoint signs its requests.
    fn out(&self, request: TestRequest) -> http::Request<Bytes> {
        match &self.sign {
            Some(sign) => sign(request).into_http(),
            None => request.into_http(),
        }
    }

    async fn count(&self) -> Option<i64> {
        match &self.effect {
            Some(count) => Some(count().await),
            None => None,
        }
    }

    async fn provider_keys(&self) -> Option<Vec<String>> {
        match &self.derived_keys {
            Some(keys) => Some(keys().await),
            None => None,
        }
    }

    fn key_store(&self, check: &'static str) -> Result<&KeyStore, Failed> {
        self.store.as_ref().ok_or_else(|| {
            self.failed(
                check,
                "the endpoint's pool, to read the key table (`.store(&pool)`)",
                "no pool given",
            )
        })
    }

    fn database(&self, check: &'static str, error: impl std::fmt::Display) -> Failed {
        self.failed(
            check,
            "the key table readable through the endpoint's pool",
            format!("the database failed: {error}"),
        )
    }

    /// The first request of a check, with a fresh key: it must run the handler to a
    /// completed answer.
    async fn complete<M>(
        &self,
        check: &'static str,
        app: &impl Target<M>,
        key: &str,
    ) -> Result<Response, Failed> {
        let first = app.send(self.out(self.keyed(key))).await;
        if executed(&first) {
            Ok(first)
        } else {
            Err(self.failed(
                check,
                "the request with a fresh key runs the handler to a completed answer (not a \
                 replay, not a 5xx, 408, 409, 423, 425 or 429)",
                describe(&first),
            ))
        }
    }

    /// **concurrency**: [`parallel`](Self::parallel) copies (20 by default) of one keyed
    /// request at once. Exactly one first execution (an answer without
    /// `Idempotent-Replayed` that completes the key); every other answer a replay of it
    /// (same status and body bytes, `Idempotent-Replayed: true`) or 409 with
    /// `Retry-After`; the effect counter +1 exactly.
    ///
    /// ```no_run
    /// # async fn check<M>(endpoint: idem_runtime::testing::Endpoint, app: impl idem_runtime::testing::Target<M>) {
    /// endpoint.concurrency(&app).await.unwrap();
    /// # }
    /// ```
    pub async fn concurrency<M>(&self, app: &impl Target<M>) -> Result<Passed, Failed> {
        const CHECK: &str = "concurrency";
        let key = fresh_key(CHECK);
        let before = self.count().await;
        let sends = (0..self.parallel).map(|_| app.send(self.out(self.keyed(&key))));
        let answers = join_all(sends).await;
        let change = delta(before, self.count().await);

        let (replays, rest): (Vec<&Response>, Vec<&Response>) =
            answers.iter().partition(|answer| replayed(answer));
        let (waits, firsts): (Vec<&Response>, Vec<&Response>) =
            rest.into_iter().partition(|answer| in_progress(answer));
        let summary = format!(
            "{} first execution(s), {} replay(s), {} answered 409 with Retry-After; {}",
            firsts.len(),
            replays.len(),
            waits.len(),
            effect_text(change)
        );
        let expected = format!(
            "of {} copies at once, exactly one first execution, every other answer a replay \
             of it (same status and body bytes, Idempotent-Replayed: true) or 409 with \
             Retry-After; effect counter +1",
            self.parallel
        );
        let [first] = firsts[..] else {
            let shown: Vec<String> = firsts.iter().take(3).map(|r| describe(r)).collect();
            return Err(self.failed(
                CHECK,
                &expected,
                format!("{summary}; first executions: [{}]", shown.join("] [")),
            ));
        };
        if transient(first.status()) {
            return Err(self.failed(
                CHECK,
                &expected,
                format!(
                    "{summary}; the first execution did not complete: {}",
                    describe(first)
                ),
            ));
        }
        if let Some(other) = replays
            .iter()
            .find(|r| r.status() != first.status() || r.body() != first.body())
        {
            return Err(self.failed(
                CHECK,
                &expected,
                format!(
                    "{summary}; a replay differs from the first execution: first [{}], replay [{}]",
                    describe(first),
                    describe(other)
                ),
            ));
        }
        if change.is_some_and(|change| change != 1) {
            return Err(self.failed(CHECK, &expected, summary));
        }
        self.passed(CHECK, format!("{summary}; first: {}", describe(first)))
    }

    /// **replay**: the same request after completion. Identical status and body bytes,
    /// the same `Location` and other replayed headers (idem's defaults and those named
    /// with [`replay_header`](Self::replay_header)), plus `Idempotent-Replayed: true`;
    /// the effect counter unchanged by the replay.
    ///
    /// ```no_run
    /// # async fn check<M>(endpoint: idem_runtime::testing::Endpoint, app: impl idem_runtime::testing::Target<M>) {
    /// endpoint.replay(&app).await.unwrap();
    /// # }
    /// ```
    pub async fn replay<M>(&self, app: &impl Target<M>) -> Result<Passed, Failed> {
        const CHECK: &str = "replay";
        let key = fresh_key(CHECK);
        let first = self.complete(CHECK, app, &key).await?;
        let before = self.count().await;
        let replay = app.send(self.out(self.keyed(&key))).await;
        let change = delta(before, self.count().await);

        let mut differences = replay_differences(&first, &replay, &self.replay_headers);
        if change.is_some_and(|change| change != 0) {
            differences.push(format!("{} on the replay", effect_text(change)));
        }
        let seen = format!(
            "first [{}], replay [{}]",
            describe(&first),
            describe(&replay)
        );
        if !differences.is_empty() {
            return Err(self.failed(
                CHECK,
                "the same request after completion answers the first answer again: its \
                 status, body bytes and replayed headers (Location, Content-Type, ..), with \
                 Idempotent-Replayed: true; effect counter unchanged",
                format!("{seen}: {}", differences.join("; ")),
            ));
        }
        self.passed(CHECK, format!("{seen}; {}", effect_text(change)))
    }

    /// **mismatch**: the same key with the [second body](Self::mismatch_json) answers 422
    /// `idempotency-key-reused`; so does the same key on the [other
    /// route](Self::other_route), when one is given. Neither runs the handler.
    ///
    /// ```no_run
    /// # async fn check<M>(endpoint: idem_runtime::testing::Endpoint, app: impl idem_runtime::testing::Target<M>) {
    /// endpoint.mismatch(&app).await.unwrap();
    /// # }
    /// ```
    pub async fn mismatch<M>(&self, app: &impl Target<M>) -> Result<Passed, Failed> {
        const CHECK: &str = "mismatch";
        if self.mismatch_body.is_none() && self.other_route.is_none() {
            return Err(self.failed(
                CHECK,
                "a second body (`.mismatch_json(..)`) or another route (`.other_route(..)`) \
                 to send with the same key",
                "neither was given",
            ));
        }
        let key = fresh_key(CHECK);
        self.complete(CHECK, app, &key).await?;
        let before = self.count().await;
        let reused = ProblemKind::KeyReused.type_uri();
        let mut seen = Vec::new();
        let mut wrong = false;
        let mut sent = Vec::new();
        if let Some(body) = &self.mismatch_body {
            sent.push(("another body", self.keyed(&key).body(body.clone())));
        }
        if let Some(route) = &self.other_route {
            sent.push(("another route", self.keyed(&key).uri(route)));
        }
        for (what, request) in sent {
            let answer = app.send(self.out(request)).await;
            let problem = problem_type(&answer);
            wrong |= answer.status() != StatusCode::UNPROCESSABLE_ENTITY
                || problem.as_deref() != Some(reused.as_str());
            seen.push(format!("{what}: {}", describe(&answer)));
        }
        let change = delta(before, self.count().await);
        wrong |= change.is_some_and(|change| change != 0);
        seen.push(effect_text(change));
        if wrong {
            return Err(self.failed(
                CHECK,
                &format!(
                    "the same key with another body, or on another route, answers 422 with \
                     type {reused}; effect counter unchanged"
                ),
                seen.join("; "),
            ));
        }
        self.passed(CHECK, seen.join("; "))
    }

    /// **missing key**: the request without an `Idempotency-Key` answers 400
    /// `idempotency-key-missing` and runs nothing; without the [key
    /// header](Self::key_header) of a webhook receiver, 400 `event-id-missing`.
    ///
    /// ```no_run
    /// # async fn check<M>(endpoint: idem_runtime::testing::Endpoint, app: impl idem_runtime::testing::Target<M>) {
    /// endpoint.missing_key(&app).await.unwrap();
    /// # }
    /// ```
    pub async fn missing_key<M>(&self, app: &impl Target<M>) -> Result<Passed, Failed> {
        const CHECK: &str = "missing_key";
        let before = self.count().await;
        let request = self.request.clone().remove_header(self.key_header.as_str());
        let answer = app.send(self.out(request)).await;
        let change = delta(before, self.count().await);
        let missing = if self.key_header == IDEMPOTENCY_KEY {
            ProblemKind::KeyMissing.type_uri()
        } else {
            ProblemKind::EventIdMissing.type_uri()
        };
        let seen = format!("{}; {}", describe(&answer), effect_text(change));
        if answer.status() != StatusCode::BAD_REQUEST
            || problem_type(&answer).as_deref() != Some(missing.as_str())
            || change.is_some_and(|change| change != 0)
        {
            return Err(self.failed(
                CHECK,
                &format!("400 with type {missing}; effect counter unchanged"),
                seen,
            ));
        }
        self.passed(CHECK, seen)
    }

    /// Every check that applies to the endpoint, in this order: concurrency, replay,
    /// missing key, mismatch (with a second body or another route), transient failure
    /// (with a failure hook and the pool), crash-resume (phased, with a crash hook and
    /// the pool), expiry (with the pool). Stops at the first failure; the [`Passed`]
    /// says which checks ran and which did not apply.
    ///
    /// ```no_run
    /// # async fn check<M>(endpoint: idem_runtime::testing::Endpoint, app: impl idem_runtime::testing::Target<M>) {
    /// let passed = endpoint.all(&app).await.unwrap();
    /// println!("{passed}");
    /// # }
    /// ```
    pub async fn all<M>(&self, app: &impl Target<M>) -> Result<Passed, Failed> {
        let mut ran = vec!["concurrency", "replay", "missing_key"];
        let mut skipped = Vec::new();
        self.concurrency(app).await?;
        self.replay(app).await?;
        self.missing_key(app).await?;
        if self.mismatch_body.is_some() || self.other_route.is_some() {
            self.mismatch(app).await?;
            ran.push("mismatch");
        } else {
            skipped.push("mismatch (no second body or other route)");
        }
        match (&self.fail, &self.store) {
            (Some(_), Some(_)) => {
                self.transient_failure(app).await?;
                ran.push("transient_failure");
            }
            _ => skipped.push("transient_failure (needs .fail_request and .store)"),
        }
        if self.phased {
            match (&self.crash, &self.store) {
                (Some(_), Some(_)) => {
                    self.crash_resume(app).await?;
                    ran.push("crash_resume");
                }
                _ => skipped.push("crash_resume (needs .crash_after and .store)"),
            }
        }
        if self.store.is_some() {
            self.expiry(app).await?;
            ran.push("expiry");
        } else {
            skipped.push("expiry (needs .store)");
        }
        let mut seen = format!("ran {}", ran.join(", "));
        if !skipped.is_empty() {
            seen.push_str(&format!("; not run: {}", skipped.join(", ")));
        }
        self.passed("all", seen)
    }
}
