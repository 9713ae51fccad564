//! A queue consumer that applies each message's effect once with `idem::Inbox`, for
//! `tests/rabbitmq.rs`, which starts it and kills it (SIGKILL) at the moments it announces.
//!
//! `inbox-consumer <database url> <queue> [--nack-first N] [--stall after-commit|before-commit K] [--until ID]`
//!
//! For each delivery: begin, `Inbox::receive` with the message's `message_id`, the
//! effect (a row in `effects`) when it is the first, commit, then acknowledge. Every
//! delivery is reported on stdout as `delivery <id> redelivered=<bool> <first|duplicate>`.
//! - `--nack-first N`: the first delivery of every N-th message is rejected with requeue
//!   after its commit (`basic.nack`), so the broker delivers it again.
//! - `--stall after-commit K`: after the K-th commit, prints `stalled <id>` and waits to be
//!   killed, without acknowledging: the broker redelivers the message to the next
//!   consumer.
//! - `--stall before-commit K`: the same after the K-th effect, inside the transaction:
//!   the kill rolls it back.
//!
//! - `--until ID`: the message with id `ID` ends the run: it is acknowledged without the
//!   inbox, `drained` is printed and the consumer exits 0. The test publishes it behind
//!   every other message, so with one message in hand at a time it comes last. (The
//!   queue's ready count is no end mark: with a prefetch of one, the broker may already
//!   have handed the next message to this consumer when the count reads 0.)

use std::process::ExitCode;

use futures_util::StreamExt;
use idem::{Delivery, Inbox};
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use sqlx::{Pool, Postgres, Sqlite, Transaction};

/// The broker's address on these machines (RabbitMQ's defaults).
pub const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stall {
    AfterCommit,
    BeforeCommit,
}

struct Options {
    database: String,
    queue: String,
    nack_every: Option<u64>,
    stall: Option<(Stall, u64)>,
    until: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let database = args
        .next()
        .ok_or("usage: inbox-consumer <database url> <queue> ..")?;
    let queue = args
        .next()
        .ok_or("usage: inbox-consumer <database url> <queue> ..")?;
    let mut options = Options {
        database,
        queue,
        nack_every: None,
        stall: None,
        until: None,
    };
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--nack-first" => {
                let n = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--nack-first N")?;
                options.nack_every = Some(n);
            }
            "--stall" => {
                let when = match args.next().as_deref() {
                    Some("after-commit") => Stall::AfterCommit,
                    Some("before-commit") => Stall::BeforeCommit,
                    _ => return Err("--stall after-commit|before-commit K".to_owned()),
                };
                let k = args
                    .next()
                    .and_then(|k| k.parse().ok())
                    .ok_or("--stall .. K")?;
                options.stall = Some((when, k));
            }
            "--until" => options.until = Some(args.next().ok_or("--until ID")?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

/// The effect, in the consumer's transaction: the same SQL on both databases.
trait Effects: idem::Backend {
    fn apply(
        tx: &mut Transaction<'_, Self>,
        message_id: &str,
    ) -> impl Future<Output = sqlx::Result<()>>;
}

macro_rules! effects {
    ($db:ty) => {
        impl Effects for $db {
            async fn apply(tx: &mut Transaction<'_, Self>, message_id: &str) -> sqlx::Result<()> {
                sqlx::query("INSERT INTO effects (message_id) VALUES ($1)")
                    .bind(message_id)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }
        }
    };
}

effects!(Postgres);
effects!(Sqlite);

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("inbox-consumer: {error}");
            return ExitCode::from(2);
        }
    };
    let result = if options.database.starts_with("sqlite:") {
        match Pool::<Sqlite>::connect(&options.database).await {
            Ok(pool) => consume(pool, &options).await,
            Err(error) => Err(error.to_string()),
        }
    } else {
        match Pool::<Postgres>::connect(&options.database).await {
            Ok(pool) => consume(pool, &options).await,
            Err(error) => Err(error.to_string()),
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("inbox-consumer: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn consume<DB: Effects>(pool: Pool<DB>, options: &Options) -> Result<(), String> {
    let broker = |error: lapin::Error| format!("RabbitMQ at {AMQP_URL}: {error}");
    let connection = Connection::connect(AMQP_URL, ConnectionProperties::default())
        .await
        .map_err(broker)?;
    let channel = connection.create_channel().await.map_err(broker)?;
    // One message at a time: a kill leaves exactly the message in hand unacknowledged.
    channel
        .basic_qos(1, BasicQosOptions::default())
        .await
        .map_err(broker)?;
    let mut deliveries = channel
        .basic_consume(
            options.queue.as_str().into(),
            "inbox-consumer".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(broker)?;
    let inbox = Inbox::new("rabbitmq-test");
    let db = |error: sqlx::Error| format!("database: {error}");
    let (mut effects, mut commits) = (0_u64, 0_u64);
    while let Some(delivery) = deliveries.next().await {
        let delivery = delivery.map_err(broker)?;
        let id = delivery
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.as_str().to_owned())
            .ok_or("a message without message_id")?;
        if options.until.as_deref() == Some(id.as_str()) {
            delivery
                .ack(BasicAckOptions::default())
                .await
                .map_err(broker)?;
            println!("drained");
            return Ok(());
        }
        let mut tx = pool.begin().await.map_err(db)?;
        let outcome = inbox.receive(&mut tx, &id).await.map_err(db)?;
        if outcome == Delivery::First {
            DB::apply(&mut tx, &id).await.map_err(db)?;
            effects += 1;
            if options.stall == Some((Stall::BeforeCommit, effects)) {
                println!("stalled {id}");
                std::future::pending::<()>().await;
            }
        }
        tx.commit().await.map_err(db)?;
        commits += 1;
        let word = if outcome == Delivery::First {
            "first"
        } else {
            "duplicate"
        };
        println!("delivery {id} redelivered={} {word}", delivery.redelivered);
        if options.stall == Some((Stall::AfterCommit, commits)) {
            println!("stalled {id}");
            std::future::pending::<()>().await;
        }
        let number: u64 = id.trim_start_matches("msg-").parse().unwrap_or(0);
        let nack = options
            .nack_every
            .is_some_and(|n| number.is_multiple_of(n) && !delivery.redelivered);
        if nack {
            delivery
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await
                .map_err(broker)?;
            continue;
        }
        delivery
            .ack(BasicAckOptions::default())
            .await
            .map_err(broker)?;
    }
    Err("the broker ended the consumer".to_owned())
}
