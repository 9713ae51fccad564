//! `idem-bench serve`: the HTTP server under test, run as a child process so that its
//! peak memory is its own and not the load generator's.
//!
//! Serves the same handlers under axum too (`server_axum.rs`), on another port of the
//! same process and the same pool. Prints `axum <addr>`, then `listening <addr>` (the
//! actix-web one) on stdout once both accept connections, and stops when its stdin
//! closes, which happens when the parent exits for any reason.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use sqlx::Pool;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::orders::{self, Account, NewOrder, OrderStore, internal};
use crate::server_axum::AxumRoutes;

/// The size of the body the large-response scenarios answer with.
pub(crate) const BIG_BODY: usize = 1024 * 1024;

/// `POST /bare/orders`: the example's insert with no idempotency, one autocommit
/// statement.
async fn bare<DB: OrderStore>(
    account: Account,
    pool: web::Data<Pool<DB>>,
    order: web::Json<NewOrder>,
) -> actix_web::Result<HttpResponse> {
    let mut conn = pool.acquire().await.map_err(internal)?;
    let created = DB::insert_order(&mut conn, account, &order)
        .await
        .map_err(internal)?;
    Ok(orders::created(&created))
}

/// `POST /idem/orders`: the example's `create_order` (without its test hooks).
#[idem::idempotent(scope = account, retention = "24h")]
async fn with_idem<DB: OrderStore>(
    account: Account,
    tx: idem::Tx<'_, DB>,
    order: web::Json<NewOrder>,
) -> actix_web::Result<HttpResponse> {
    let created = DB::insert_order(&mut tx, account, &order)
        .await
        .map_err(internal)?;
    Ok(orders::created(&created))
}

/// `POST /phased/orders`: the phased form (issue 3) around the same insert, then a call
/// to a provider that does nothing, in a phase of its own: what the phases themselves
/// cost, with no provider latency in the way.
#[idem::idempotent(scope = account, retention = "24h", lease = "30s")]
async fn phased<DB: OrderStore>(
    account: Account,
    phases: idem::Phases<DB>,
    order: web::Json<NewOrder>,
) -> actix_web::Result<HttpResponse> {
    let created: orders::Order = phases
        .run("order_created", async |mut tx| {
            DB::insert_order(&mut tx, account, &order)
                .await
                .map_err(internal)
        })
        .await?;
    let provider_key = phases.derived_key("charge");
    phases
        .run("charged", async |_tx| {
            noop_provider(&provider_key).await;
            Ok::<_, actix_web::Error>(())
        })
        .await?;
    Ok(orders::created(&created))
}

/// The provider: accepts the derived key and answers at once.
async fn noop_provider(key: &str) {
    std::hint::black_box(key);
}

/// `POST /bare-big/orders`: `bare` answering with a 1 MiB body.
async fn bare_big<DB: OrderStore>(
    account: Account,
    pool: web::Data<Pool<DB>>,
    order: web::Json<NewOrder>,
) -> actix_web::Result<HttpResponse> {
    let mut conn = pool.acquire().await.map_err(internal)?;
    let created = DB::insert_order(&mut conn, account, &order)
        .await
        .map_err(internal)?;
    Ok(orders::created_big(&created, BIG_BODY))
}

/// `POST /idem-big/orders`: `idem` answering with a 1 MiB body, stored for replay.
#[idem::idempotent(scope = account, retention = "24h")]
async fn idem_big<DB: OrderStore>(
    account: Account,
    tx: idem::Tx<'_, DB>,
    order: web::Json<NewOrder>,
) -> actix_web::Result<HttpResponse> {
    let created = DB::insert_order(&mut tx, account, &order)
        .await
        .map_err(internal)?;
    Ok(orders::created_big(&created, BIG_BODY))
}

struct ServeArgs {
    url: String,
    pool: u32,
    acquire_ping: bool,
    /// SQLite's `synchronous`; `None`: sqlx's default (FULL), as the example has it.
    synchronous: Option<SqliteSynchronous>,
    /// Serve the Redis rows (`redis_rows.rs`) on this Redis.
    redis: Option<String>,
}

fn parse(args: &[String]) -> Result<ServeArgs, String> {
    let mut url = None;
    let mut pool = 20;
    let mut acquire_ping = true;
    let mut synchronous = None;
    let mut redis = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let value = args.next().ok_or_else(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--url" => url = Some(value.clone()),
            "--redis" => redis = Some(value.clone()),
            "--pool" => pool = value.parse().map_err(|_| format!("--pool {value}"))?,
            "--acquire-ping" => {
                acquire_ping = value
                    .parse()
                    .map_err(|_| format!("--acquire-ping {value}"))?
            }
            "--synchronous" => {
                synchronous = Some(
                    value
                        .parse()
                        .map_err(|_| format!("--synchronous {value}"))?,
                )
            }
            other => return Err(format!("serve: unknown argument `{other}`")),
        }
    }
    Ok(ServeArgs {
        url: url.ok_or("serve: --url is required")?,
        pool,
        acquire_ping,
        synchronous,
        redis,
    })
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    let args = match parse(args) {
        Ok(args) => args,
        Err(error) => {
            eprintln!("idem-bench serve: {error}");
            return ExitCode::from(2);
        }
    };
    match actix_web::rt::System::new().block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("idem-bench serve: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    if args.url.starts_with("sqlite:") {
        serve_on(sqlite_pool(&args).await?, args.redis.as_deref()).await
    } else {
        serve_on(postgres_pool(&args).await?, args.redis.as_deref()).await
    }
}

async fn postgres_pool(args: &ServeArgs) -> Result<Pool<sqlx::Postgres>, String> {
    PgPoolOptions::new()
        .max_connections(args.pool)
        // Every connection up front, so the first measured requests do not pay for them.
        .min_connections(args.pool)
        .acquire_timeout(Duration::from_secs(30))
        // sqlx's default pings every connection it hands out; `--acquire-ping` shows
        // what that round trip costs (it also pings every connection given back).
        .test_before_acquire(args.acquire_ping)
        .connect(&args.url)
        .await
        .map_err(|e| format!("cannot connect to the database: {e}"))
}

/// The pool as the example opens its SQLite file: WAL (reads go on while a request
/// writes), a 5 s busy timeout for the application's own statements.
async fn sqlite_pool(args: &ServeArgs) -> Result<Pool<sqlx::Sqlite>, String> {
    let mut options = args
        .url
        .parse::<SqliteConnectOptions>()
        .map_err(|e| format!("not a SQLite URL: {e}"))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(5));
    if let Some(synchronous) = args.synchronous {
        options = options.synchronous(synchronous);
    }
    SqlitePoolOptions::new()
        .max_connections(args.pool)
        .min_connections(args.pool)
        .acquire_timeout(Duration::from_secs(30))
        .test_before_acquire(args.acquire_ping)
        .connect_with(options)
        .await
        .map_err(|e| format!("cannot open the database: {e}"))
}

async fn serve_on<DB: AxumRoutes>(pool: Pool<DB>, redis: Option<&str>) -> Result<(), String> {
    let idem = idem::Idem::new(pool.clone())
        // Explicit, so the 1 MiB scenarios do not depend on the default limit.
        .max_stored_bytes(2 * BIG_BODY);
    let redis = match redis {
        Some(url) => Some(web::Data::new(
            crate::redis_rows::RedisRows::connect(url, idem.settings().clone()).await?,
        )),
        None => None,
    };
    let axum = crate::server_axum::start(pool.clone(), idem.clone(), workers())?;
    let data = web::Data::new(pool);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(idem.clone())
            .app_data(data.clone())
            .route("/bare/orders", web::post().to(bare::<DB>))
            .route(
                "/hand/orders",
                web::post().to(crate::hand::create_order::<DB>),
            )
            .route("/idem/orders", web::post().to(with_idem::<DB>))
            .route("/phased/orders", web::post().to(phased::<DB>))
            .route("/bare-big/orders", web::post().to(bare_big::<DB>))
            .route("/idem-big/orders", web::post().to(idem_big::<DB>))
            .configure(|cfg| {
                if let Some(rows) = &redis {
                    crate::redis_rows::routes(cfg, rows.clone());
                }
            })
    })
    .workers(workers())
    .bind(("127.0.0.1", 0))
    .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();

    // The parent holds our stdin; when it closes (the parent finished or died), stop.
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
        actix_web::rt::System::new().block_on(handle.stop(true));
    });
    let mut stdout = std::io::stdout();
    writeln!(stdout, "axum {axum}").map_err(|e| e.to_string())?;
    writeln!(stdout, "listening {addr}").map_err(|e| e.to_string())?;
    stdout.flush().map_err(|e| e.to_string())?;
    server.await.map_err(|e| format!("server failed: {e}"))
}

/// One worker per core, actix's own default, stated so the report can name it.
pub(crate) fn workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}
