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
        Self::start_with(&[])
    }

    /// [`start`](Self::start) with more arguments for `redis-server`.
    fn start_with(extra: &[&str]) -> Self {
        let binary = std::env::var_os("IDEM_TESTKIT_REDIS_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("redis-server"));
        let port = free_port().unwrap_or_else(|e| panic!("no port for redis-server: {e}"));
        let child = Command::new(&binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(extra)
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

/// A Redis Cluster of three masters (no replicas) on free loopback ports, made with
/// `redis-cli --cluster create`; every server is killed on drop.
///
/// Panics with the reason when it cannot be made (no `redis-server` or `redis-cli`).
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts the three servers, joins them and waits until the cluster serves every slot.
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "idem-redis-cluster-{}-{}",
            std::process::id(),
            crate::names::nanos_since_epoch()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let nodes: Vec<RedisServer> = (0..3)
            .map(|i| {
                let conf = dir.join(format!("nodes-{i}.conf"));
                let conf = conf.to_str().expect("a UTF-8 temp dir");
                // The bus port would be the port plus 10000 otherwise: past 65535, or in the
                // kernel's ephemeral range, for the ports free_port picks.
                let bus = free_port()
                    .unwrap_or_else(|e| panic!("no port for the cluster bus: {e}"))
                    .to_string();
                RedisServer::start_with(&[
                    "--cluster-port",
                    &bus,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    conf,
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let cluster = Self { nodes, dir };
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run redis-cli: {e}; install redis-tools (apt-get install redis-server)"
                )
            });
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.nodes.iter().all(|n| cluster_ok(n.port())) {
            assert!(
                Instant::now() < deadline,
                "the cluster did not reach cluster_state:ok within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// `redis://127.0.0.1:<port>` of each master.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether the node on `port` reports `cluster_state:ok`.
fn cluster_ok(port: u16) -> bool {
    Command::new("redis-cli")
        .args(["-p", &port.to_string(), "cluster", "info"])
        .stdin(Stdio::null())
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok"))
        .unwrap_or(false)
}
