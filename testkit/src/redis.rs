//! A private `redis-server` on a free loopback port, for one test or one test binary.

use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ports::free_port;

/// A `redis-server` of its own (the installed one, or `IDEM_TESTKIT_REDIS_SERVER`),
/// keeping nothing on disk, on a free port of 127.0.0.1; killed on drop.
///
/// Panics with the reason when the server cannot be started: a test that needs Redis
/// fails without it, it is never skipped.
///
/// ```no_run
/// let redis = idem_testkit::RedisServer::start();
/// assert!(redis.url().starts_with("redis://127.0.0.1:"));
/// ```
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Starts the server and waits until it takes connections.
    pub fn start() -> Self {
        let binary = std::env::var_os("IDEM_TESTKIT_REDIS_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("redis-server"));
        let port = free_port().unwrap_or_else(|e| panic!("no port for redis-server: {e}"));
        let child = Command::new(&binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e}; these tests need Redis 7 or Valkey 8: install \
                     redis-server (apt-get install redis-server), or set \
                     IDEM_TESTKIT_REDIS_SERVER to the server binary",
                    binary.display()
                )
            });
        let mut server = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("{} exited at start ({status})", binary.display());
            }
            if TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not take connections on port {port} within 20 s",
                binary.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
