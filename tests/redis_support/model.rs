//! Model-based test of the Redis store: proptest generates sequences of claims (with the
//! same or another request), takeovers, phase records, completions and releases by any
//! attempt seen so far (so stale holders write too), lease ends and retention ends in the
//! middle of an operation, and runs them against a real server. After every step the
//! store's answer is checked against a reference model:
//!
//! - only the attempt holding the key writes; every other attempt's write is refused;
//! - tokens only grow, and a takeover keeps the operation's generation;
//! - a takeover hands over exactly the phases recorded in the operation, in order;
//! - a completed key replays the answer of the attempt that completed it, until Redis
//!   expires it; a different request under a live key is a mismatch.
//!
//! `IDEM_MODEL_CASES` sets the number of sequences (default 24).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem::redis::{Attempt, RedisClaim, Released};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::{Server, request};

const LEASE: Duration = Duration::from_secs(60);
const RETENTION: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone)]
enum Step {
    /// A request with body 1 (the operation's) or 2 (another).
    Claim(u8),
    /// A retry of the operation that takes it over if the lease ended.
    TakeOver,
    Record {
        attempt: usize,
        phase: u8,
    },
    Complete {
        attempt: usize,
    },
    Release {
        attempt: usize,
    },
    /// Redis ends the lease (its TTL passes).
    EndLease,
    /// Redis ends the key's retention, whatever state it is in.
    Expire,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1u8..=2).prop_map(Step::Claim),
        2 => Just(Step::TakeOver),
        3 => (0usize..4, 0u8..3).prop_map(|(attempt, phase)| Step::Record { attempt, phase }),
        2 => (0usize..4).prop_map(|attempt| Step::Complete { attempt }),
        1 => (0usize..4).prop_map(|attempt| Step::Release { attempt }),
        2 => Just(Step::EndLease),
        1 => Just(Step::Expire),
    ]
}

#[derive(Debug, Clone, PartialEq)]
enum Model {
    Free,
    Started {
        /// Index of the holding attempt.
        holder: usize,
        generation: i64,
        phases: Vec<(String, String)>,
        /// The phase written last: a re-recorded phase keeps its place in `phases` but
        /// becomes the recovery point, as in the SQL stores.
        point: Option<String>,
        lease_live: bool,
    },
    Completed {
        generation: i64,
        body: Vec<u8>,
    },
}

pub(crate) fn explore() {
    let cases = std::env::var("IDEM_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(Server::start());
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    static CASE: AtomicU32 = AtomicU32::new(0);
    runner
        .run(&proptest::collection::vec(step(), 1..30), |steps| {
            let key = format!("model-{}", CASE.fetch_add(1, Ordering::Relaxed));
            rt.block_on(run(&server, &key, &steps));
            Ok(())
        })
        .unwrap();
}

async fn run(server: &Server, key: &str, steps: &[Step]) {
    let store = &server.store;
    let ours = request(key, 1, LEASE, RETENTION);
    let record = server.record(key);
    let mut model = Model::Free;
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut last_token = 0i64;
    for (n, step) in steps.iter().enumerate() {
        let at = format!("step {n} {step:?} in {model:?}");
        match *step {
            Step::Claim(body) => {
                let req = request(key, body, LEASE, RETENTION);
                let got = store.claim(&req).await.unwrap();
                match (&model, got) {
                    (Model::Free, RedisClaim::Claimed(attempt)) => {
                        assert!(attempt.fencing_token > last_token, "{at}");
                        last_token = attempt.fencing_token;
                        // A new operation, under this step's request.
                        if body == 1 {
                            model = Model::Started {
                                holder: attempts.len(),
                                generation: attempt.generation,
                                phases: Vec::new(),
                                point: None,
                                lease_live: true,
                            };
                            attempts.push(attempt);
                        } else {
                            // Keep the model's operation the body-1 one: give it back.
                            assert_eq!(store.release(&attempt).await.unwrap(), Released::Deleted);
                        }
                    }
                    (
                        Model::Started { .. } | Model::Completed { .. },
                        RedisClaim::Mismatch { .. },
                    ) if body != 1 => {}
                    (
                        Model::Started {
                            lease_live: true, ..
                        },
                        RedisClaim::InFlight { .. },
                    ) => {}
                    (
                        Model::Started {
                            holder,
                            lease_live: false,
                            ..
                        },
                        RedisClaim::LeaseEnded { fencing_token },
                    ) => assert_eq!(fencing_token, attempts[*holder].fencing_token, "{at}"),
                    (Model::Completed { generation, body }, RedisClaim::Completed(answer)) => {
                        assert_eq!(
                            (answer.generation, &answer.body[..]),
                            (*generation, &body[..]),
                            "{at}"
                        );
                    }
                    (_, got) => panic!("{at}: got {got:?}"),
                }
            }
            Step::TakeOver => {
                let Model::Started {
                    holder,
                    generation,
                    phases,
                    point,
                    lease_live: false,
                } = &model
                else {
                    continue;
                };
                let seen = attempts[*holder].fencing_token;
                let attempt = store.take_over(&ours, seen).await.unwrap().expect(&at);
                assert!(attempt.fencing_token > last_token, "{at}");
                last_token = attempt.fencing_token;
                assert_eq!(attempt.generation, *generation, "{at}");
                assert_eq!(&attempt.recorded, phases, "{at}");
                assert_eq!(&attempt.recovery_point, point, "{at}");
                // The same token again loses.
                assert!(
                    store.take_over(&ours, seen).await.unwrap().is_none(),
                    "{at}"
                );
                model = Model::Started {
                    holder: attempts.len(),
                    generation: *generation,
                    phases: phases.clone(),
                    point: point.clone(),
                    lease_live: true,
                };
                attempts.push(attempt);
            }
            Step::Record { attempt, phase } => {
                let Some(a) = attempts.get(attempt) else {
                    continue;
                };
                let name = format!("p{phase}");
                let output = format!("\"{attempt}:{phase}\"");
                let done = store.record_phase(a, &name, &output).await.unwrap();
                let holds = matches!(&model, Model::Started { holder, .. } if *holder == attempt);
                assert_eq!(done, holds, "{at}");
                if let Model::Started {
                    phases,
                    point,
                    lease_live,
                    ..
                } = &mut model
                    && done
                {
                    *lease_live = true;
                    *point = Some(name.clone());
                    match phases.iter_mut().find(|p| p.0 == name) {
                        Some(p) => p.1 = output,
                        None => phases.push((name, output)),
                    }
                }
            }
            Step::Complete { attempt } => {
                let Some(a) = attempts.get(attempt) else {
                    continue;
                };
                let body = format!("answer of {attempt}").into_bytes();
                let done = store.complete(a, 201, b"", &body).await.unwrap();
                match &model {
                    Model::Started {
                        holder, generation, ..
                    } if *holder == attempt => {
                        assert!(done, "{at}");
                        model = Model::Completed {
                            generation: *generation,
                            body,
                        };
                    }
                    _ => assert!(!done, "{at}"),
                }
            }
            Step::Release { attempt } => {
                let Some(a) = attempts.get(attempt) else {
                    continue;
                };
                let got = store.release(a).await.unwrap();
                match &mut model {
                    Model::Started {
                        holder,
                        phases,
                        lease_live,
                        ..
                    } if *holder == attempt => {
                        if phases.is_empty() {
                            assert_eq!(got, Released::Deleted, "{at}");
                            model = Model::Free;
                        } else {
                            assert_eq!(got, Released::LeaseEnded, "{at}");
                            *lease_live = false;
                        }
                    }
                    _ => assert_eq!(got, Released::Fenced, "{at}"),
                }
            }
            Step::EndLease => {
                if let Model::Started { lease_live, .. } = &mut model {
                    let lease = format!("{record}:lease");
                    if *lease_live {
                        server.expire_now(&lease).await;
                    }
                    *lease_live = false;
                }
            }
            Step::Expire => {
                if model == Model::Free {
                    continue;
                }
                // The record, its lease, list and phases share the retention; Redis ends
                // them together.
                for suffix in [
                    "",
                    ":lease",
                    ":phases",
                    ":phase:p0",
                    ":phase:p1",
                    ":phase:p2",
                ] {
                    let name = format!("{record}{suffix}");
                    if server.pttl(&name).await != -2 {
                        server.expire_now(&name).await;
                    }
                }
                model = Model::Free;
            }
        }
    }
}
