//! The consumer inbox against a real RabbitMQ (127.0.0.1:5672, guest/guest): 30 messages,
//! consumed by three consumer processes in turn. The first rejects the first delivery of
//! every 5th message after its commit (`basic.nack` with requeue) and is killed (SIGKILL)
//! after a commit and before its ack; the second is killed inside a transaction, after
//! the effect and before the commit; the third drains the queue. Every message's effect
//! happens exactly once, on PostgreSQL and on SQLite.
//!
//! The broker is found at its address, or started (`rabbitmq-server -detached`) when it is
//! installed and not running; the test fails, saying so, when neither works.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lapin::options::QueueDeleteOptions;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const CONSUMER: &str = env!("CARGO_BIN_EXE_inbox-consumer");
const MESSAGES: u64 = 30;
/// The id of the message that ends the draining consumer's run (`--until`).
const END: &str = "end-of-test";
/// A bound on each wait, so that a broken broker or consumer fails the test instead of
/// hanging it; nothing is asserted about how long anything takes.
const PATIENCE: Duration = Duration::from_secs(120);

/// A connection to the broker, starting it if it is installed and not running.
async fn broker() -> Connection {
    if let Ok(connection) = Connection::connect(AMQP_URL, ConnectionProperties::default()).await {
        return connection;
    }
    let server = [
        "/usr/sbin/rabbitmq-server",
        "/usr/lib/rabbitmq/bin/rabbitmq-server",
    ]
    .into_iter()
    .find(|path| std::path::Path::new(path).exists())
    .map(str::to_owned)
    .or_else(|| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("rabbitmq-server"))
                .find(|path| path.exists())
                .map(|path| path.display().to_string())
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "RabbitMQ is not reachable at {AMQP_URL} and rabbitmq-server is not installed: \
                 install it (apt-get install rabbitmq-server) or start it there"
        )
    });
    eprintln!("RabbitMQ is not running: starting `{server} -detached`");
    let status = std::process::Command::new(&server)
        .arg("-detached")
        .status()
        .unwrap_or_else(|error| panic!("cannot run {server} -detached: {error}"));
    assert!(status.success(), "{server} -detached failed: {status}");
    let started = Instant::now();
    loop {
        match Connection::connect(AMQP_URL, ConnectionProperties::default()).await {
            Ok(connection) => return connection,
            Err(error) if started.elapsed() > PATIENCE => panic!(
                "RabbitMQ started by `{server} -detached` is still not reachable at {AMQP_URL}: \
                 {error}"
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn declare(channel: &Channel, queue: &str, passive: bool) -> lapin::Queue {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare the queue")
}

struct Consumer {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl Consumer {
    fn start(database: &str, queue: &str, args: &[&str]) -> Self {
        let mut child = Command::new(CONSUMER)
            .arg(database)
            .arg(queue)
            .args(args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the consumer");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads the consumer's report until a line starts with `prefix`; returns that line.
    async fn until(&mut self, prefix: &str) -> String {
        let read = async {
            while let Some(line) = self.lines.next_line().await.expect("read the consumer") {
                self.seen.push(line.clone());
                if line.starts_with(prefix) {
                    return line;
                }
            }
            let status = self.child.wait().await.expect("the consumer's status");
            panic!(
                "the consumer ended ({status}) before reporting `{prefix}`; it reported {:#?}",
                self.seen
            )
        };
        tokio::time::timeout(PATIENCE, read)
            .await
            .unwrap_or_else(|_| panic!("no `{prefix}` from the consumer within {PATIENCE:?}"))
    }

    /// SIGKILL: no destructor, no ack, no rollback sent; the database and the broker find
    /// out from the closed connections.
    async fn kill(mut self) -> Vec<String> {
        self.child.kill().await.expect("SIGKILL the consumer");
        self.seen
    }
}

/// Waits until the broker has dropped the killed consumer, which puts its unacknowledged
/// message back in the queue.
async fn until_no_consumer(channel: &Channel, queue: &str) {
    let started = Instant::now();
    while declare(channel, queue, true).await.consumer_count() > 0 {
        assert!(
            started.elapsed() < PATIENCE,
            "RabbitMQ still lists the killed consumer after {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the database holds afterwards: the effects per message id, and the inbox's rows.
struct Outcome {
    effects: BTreeMap<String, i64>,
    inbox_entries: i64,
}

/// The scenario, with a database whose schema is ready at `database`; `outcome` reads it.
async fn run(backend: &str, database: &str, outcome: impl AsyncFn() -> Outcome) {
    let connection = broker().await;
    let channel = connection.create_channel().await.expect("a channel");
    let queue = format!(
        "idem-inbox-{backend}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos()
    );
    declare(&channel, &queue, false).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("publisher confirms");
    for n in 1..=MESSAGES {
        channel
            .basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                n.to_string().as_bytes(),
                BasicProperties::default().with_message_id(format!("msg-{n}").into()),
            )
            .await
            .expect("publish")
            .await
            .expect("the broker confirms the message");
    }

    // 1. Nacks the first delivery of msg-5, msg-10, ..; killed after its 12th commit.
    let mut first = Consumer::start(
        database,
        &queue,
        &["--nack-first", "5", "--stall", "after-commit", "12"],
    );
    let stalled = first.until("stalled ").await;
    let acked_never = stalled.trim_start_matches("stalled ").to_owned();
    let mut seen = first.kill().await;
    until_no_consumer(&channel, &queue).await;

    // 2. Killed inside its 5th effect's transaction.
    let mut second = Consumer::start(database, &queue, &["--stall", "before-commit", "5"]);
    let stalled = second.until("stalled ").await;
    let rolled_back = stalled.trim_start_matches("stalled ").to_owned();
    seen.extend(second.kill().await);
    until_no_consumer(&channel, &queue).await;

    // 3. Drains the queue, up to an end mark published now, behind every message the
    // killed consumers left (requeued messages go back ahead of it).
    channel
        .basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            b"end",
            BasicProperties::default().with_message_id(END.into()),
        )
        .await
        .expect("publish the end mark")
        .await
        .expect("the broker confirms the end mark");
    let mut third = Consumer::start(database, &queue, &["--until", END]);
    third.until("drained").await;
    let status = third
        .child
        .wait()
        .await
        .expect("the last consumer's status");
    assert!(status.success(), "the last consumer failed: {status}");
    seen.extend(third.seen);

    // Every message's effect exactly once.
    let Outcome {
        effects,
        inbox_entries,
    } = outcome().await;
    let expected: BTreeMap<String, i64> = (1..=MESSAGES).map(|n| (format!("msg-{n}"), 1)).collect();
    assert_eq!(
        effects, expected,
        "one effect per message; the consumers saw {seen:#?}"
    );
    assert_eq!(inbox_entries, i64::try_from(MESSAGES).unwrap());

    // And the redeliveries happened as forced.
    let has = |line: &str| seen.iter().any(|seen| seen == line);
    assert!(
        has("delivery msg-5 redelivered=false first")
            && has("delivery msg-5 redelivered=true duplicate"),
        "msg-5 was nacked after its commit and redelivered as a duplicate: {seen:#?}"
    );
    assert!(
        has(&format!(
            "delivery {acked_never} redelivered=true duplicate"
        )),
        "{acked_never}, committed and never acknowledged, came back as a duplicate: {seen:#?}"
    );
    assert!(
        has(&format!("delivery {rolled_back} redelivered=true first")),
        "{rolled_back}, killed before its commit, came back and was processed: {seen:#?}"
    );
    assert_eq!(
        declare(&channel, &queue, true).await.message_count(),
        0,
        "the queue is drained"
    );
    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("delete the queue");
}

const CREATE_EFFECTS: &str = "CREATE TABLE effects (message_id TEXT NOT NULL)";
const COUNT_EFFECTS: &str = "SELECT message_id, count(*) FROM effects GROUP BY message_id";
const COUNT_ENTRIES: &str = "SELECT count(*) FROM idem_inbox";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_every_message_has_its_effect_once_through_nacks_and_kills() {
    let db = idem_testkit::TestDb::new().await;
    let pool = db.pool(4).await;
    idem::migrate(&pool).await.expect("idem's migrations");
    sqlx::query(CREATE_EFFECTS)
        .execute(&pool)
        .await
        .expect("effects");
    run("postgres", db.url(), async || Outcome {
        effects: sqlx::query_as(COUNT_EFFECTS)
            .fetch_all(&pool)
            .await
            .expect("read the effects")
            .into_iter()
            .collect(),
        inbox_entries: sqlx::query_scalar(COUNT_ENTRIES)
            .fetch_one(&pool)
            .await
            .expect("count the inbox"),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_every_message_has_its_effect_once_through_nacks_and_kills() {
    let db = idem_testkit::TestSqlite::new();
    let pool = db.pool(4).await;
    idem::migrate(&pool).await.expect("idem's migrations");
    sqlx::query(CREATE_EFFECTS)
        .execute(&pool)
        .await
        .expect("effects");
    run("sqlite", &db.url(), async || Outcome {
        effects: sqlx::query_as(COUNT_EFFECTS)
            .fetch_all(&pool)
            .await
            .expect("read the effects")
            .into_iter()
            .collect(),
        inbox_entries: sqlx::query_scalar(COUNT_ENTRIES)
            .fetch_one(&pool)
            .await
            .expect("count the inbox"),
    })
    .await;
}
