//! Every sweep emits one tracing event with its rows, batches and duration, so an
//! application's subscriber can log or count them.

mod expiry_support;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use expiry_support::{Keys, Lease};
use idem::admin::Expiry;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One event: its level, target and fields as text.
#[derive(Debug, Clone)]
struct Seen {
    level: Level,
    target: String,
    fields: BTreeMap<String, String>,
}

/// The smallest subscriber that keeps every event (no tracing-subscriber needed).
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(Seen {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            fields,
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Recorder {
    fn sweeps(&self) -> Vec<Seen> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|seen| seen.target.starts_with("idem_runtime::expiry"))
            .cloned()
            .collect()
    }
}

// Current-thread runtime: the subscriber set for this thread sees the sweep's events.
#[tokio::test(flavor = "current_thread")]
async fn each_sweep_emits_one_event_with_rows_batches_and_duration() {
    let keys = Keys::new(2).await;
    keys.insert("due", 25, -60, Lease::None).await;
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let expiry = Expiry::new(keys.pool.clone())
        .batch_size(10)
        .pause(Duration::ZERO);

    expiry.sweep_once().await.expect("sweep");
    let seen = recorder.sweeps();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let event = &seen[0];
    assert_eq!(
        event.level,
        Level::INFO,
        "a sweep that deleted rows is news"
    );
    assert_eq!(event.fields["rows_deleted"], "25");
    assert_eq!(event.fields["batches"], "3");
    let duration: f64 = event.fields["duration_ms"].parse().expect("a number");
    assert!(duration > 0.0, "{event:?}");
    assert!(event.fields["message"].contains("sweep"), "{event:?}");

    expiry.sweep_once().await.expect("idle sweep");
    let seen = recorder.sweeps();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1].level, Level::DEBUG, "an idle sweep is not news");
    assert_eq!(seen[1].fields["rows_deleted"], "0");

    sqlx::query("DROP TABLE idem_keys CASCADE")
        .execute(&keys.pool)
        .await
        .expect("drop");
    expiry.sweep_once().await.expect_err("no table");
    let seen = recorder.sweeps();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        seen[2].level,
        Level::WARN,
        "a failed sweep is logged as a warning"
    );
    assert!(
        seen[2].fields["error"].contains("idem_keys"),
        "{:?}",
        seen[2]
    );
}
