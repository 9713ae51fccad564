//! Private `redis-server`s on free loopback ports, for one test, one test binary or one
//! durability run: a single node (in memory, or with an append-only file in a directory
//! of its own, to be killed and started again) and a Redis Cluster, with or without
//! replicas.

use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ports::free_port;

/// A `redis-server` of its own (the installed one, or `IDEM_TESTKIT_REDIS_SERVER`), on a
/// free port of 127.0.0.1; killed on drop, also when the test or run panics.
///
/// [`start`](Self::start) keeps nothing on disk; [`start_durable`](Self::start_durable)
/// keeps an append-only file in a directory, so that [`kill`](Self::kill) and
/// [`restart`](Self::restart) show what survives a crash.
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
    binary: PathBuf,
    /// Every argument after the port, so a restart starts the same server.
    args: Vec<String>,
}

impl RedisServer {
    /// Starts the server and waits until it takes connections.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server that keeps an append-only file (`appendonly yes`) in `dir`, with
    /// `appendfsync` set to `appendfsync` (`always`, `everysec` or `no`), and no RDB
    /// snapshots; after [`kill`](Self::kill), [`restart`](Self::restart) loads what the
    /// file kept.
    ///
    /// ```no_run
    /// let dir = std::env::temp_dir().join("idem-aof-example");
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let mut redis = idem_testkit::RedisServer::start_durable(&dir, "always");
    /// redis.kill();
    /// redis.restart();
    /// ```
    pub fn start_durable(dir: &Path, appendfsync: &str) -> Self {
        let dir = dir.to_str().expect("a UTF-8 directory for redis-server");
        Self::start_with(&[
            "--dir",
            dir,
            "--appendonly",
            "yes",
            "--appendfsync",
            appendfsync,
        ])
    }

    /// [`start`](Self::start) with more arguments for `redis-server` (a later argument
    /// overrides an earlier one of the same name).
    fn start_with(extra: &[&str]) -> Self {
        let binary = std::env::var_os("IDEM_TESTKIT_REDIS_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("redis-server"));
        let port = free_port().unwrap_or_else(|e| panic!("no port for redis-server: {e}"));
        let mut args: Vec<String> = ["--bind", "127.0.0.1", "--protected-mode", "no"]
            .into_iter()
            .chain(["--save", "", "--appendonly", "no"])
            .map(str::to_owned)
            .collect();
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let child = spawn(&binary, port, &args);
        let mut server = Self {
            child,
            port,
            binary,
            args,
        };
        server.wait_until_listening();
        server
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id (a benchmark counts its CPU time).
    ///
    /// ```no_run
    /// let redis = idem_testkit::RedisServer::start();
    /// assert!(std::path::Path::new(&format!("/proc/{}", redis.pid())).exists());
    /// ```
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server with SIGKILL (no shutdown, no last write to its files) and waits
    /// until it is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the server with SIGSTOP: it keeps its connections but reads and answers
    /// nothing (a stalled machine, or a replica fallen behind) until
    /// [`resume`](Self::resume).
    ///
    /// ```no_run
    /// let mut redis = idem_testkit::RedisServer::start();
    /// redis.pause();
    /// redis.resume();
    /// ```
    pub fn pause(&mut self) {
        self.signal("-STOP");
    }

    /// Lets a [`pause`](Self::pause)d server run again (SIGCONT).
    pub fn resume(&mut self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("kill {signal}: {e}"));
        assert!(
            status.success(),
            "kill {signal} {}: {status}",
            self.child.id()
        );
    }

    /// Starts the server again with the same port, arguments and directory, after
    /// [`kill`](Self::kill), and waits until it takes connections (it may still answer
    /// `LOADING` while it reads its files).
    pub fn restart(&mut self) {
        self.kill();
        self.child = spawn(&self.binary, self.port, &self.args);
        self.wait_until_listening();
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited at start ({status})", self.binary.display());
            }
            if TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not take connections on port {} within 20 s",
                self.binary.display(),
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn spawn(binary: &Path, port: u16, args: &[String]) -> Child {
    Command::new(binary)
        .args(["--port", &port.to_string()])
        .args(args)
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
        })
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis Cluster of three masters, each with `replicas` replicas, on free loopback
/// ports, made with `redis-cli --cluster create`; every server is killed on drop, also
/// when the test or run panics. The servers keep nothing but their cluster
/// configuration on disk (a temporary directory, removed on drop): a replica is a
/// master's only copy.
///
/// Panics with the reason when it cannot be made (no `redis-server` or `redis-cli`).
///
/// ```no_run
/// let mut cluster = idem_testkit::RedisCluster::start_with_replicas(1);
/// let master = cluster.master_of("idem:{acct:k1}");
/// cluster.kill(master);
/// let promoted = cluster.wait_for_promotion(master);
/// cluster.restart(master); // back as a replica of `promoted`
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    dir: PathBuf,
    /// Each killed node, with the replicas it had.
    killed: Vec<(usize, Vec<usize>)>,
}

impl RedisCluster {
    /// Starts three masters (no replicas), joins them and waits until the cluster serves
    /// every slot.
    pub fn start() -> Self {
        Self::start_with_replicas(0)
    }

    /// Starts `3 * (1 + replicas)` servers, joins them as three masters with `replicas`
    /// replicas each, and waits until the cluster serves every slot and every replica is
    /// in sync with its master.
    pub fn start_with_replicas(replicas: usize) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "idem-redis-cluster-{}-{}",
            std::process::id(),
            crate::names::nanos_since_epoch()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let dir_arg = dir.to_str().expect("a UTF-8 temp dir").to_owned();
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|i| {
                let conf = format!("nodes-{i}.conf");
                // The bus port would be the port plus 10000 otherwise: past 65535, or in the
                // kernel's ephemeral range, for the ports free_port picks.
                let bus = free_port()
                    .unwrap_or_else(|e| panic!("no port for the cluster bus: {e}"))
                    .to_string();
                RedisServer::start_with(&[
                    "--dir",
                    &dir_arg,
                    "--cluster-port",
                    &bus,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &conf,
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let cluster = Self {
            nodes,
            dir,
            killed: Vec::new(),
        };
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
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
        cluster.wait_until_ok(replicas);
        cluster
    }

    /// Waits until every live node reports `cluster_state:ok` and every master has
    /// `replicas` replicas online.
    fn wait_until_ok(&self, replicas: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = self.nodes.iter().all(|n| cluster_ok(n.port()))
                && self
                    .masters()
                    .iter()
                    .all(|&m| online_replicas(self.nodes[m].port()) >= replicas);
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not reach cluster_state:ok with {replicas} replicas in sync \
                 per master within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis://127.0.0.1:<port>` of each server, masters and replicas.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The indexes (into [`urls`](Self::urls)) of the servers that answer `ROLE` as a
    /// master.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| role(self.nodes[i].port()).as_deref() == Some("master"))
            .collect()
    }

    /// The index of the master that serves `key`'s slot, as the cluster reports it now.
    pub fn master_of(&self, key: &str) -> usize {
        let port = self.nodes[self.masters()[0]].port();
        let slot: u16 = redis_cli(port, &["cluster", "keyslot", key])
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("CLUSTER KEYSLOT {key}: {e}"));
        let nodes = redis_cli(port, &["cluster", "nodes"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| match range.split_once('-') {
                Some((lo, hi)) => {
                    lo.parse::<u16>().is_ok_and(|lo| lo <= slot)
                        && hi.parse::<u16>().is_ok_and(|hi| slot <= hi)
                }
                None => range.parse::<u16>() == Ok(slot),
            });
            if serves {
                let port = node_port(fields[1])
                    .unwrap_or_else(|| panic!("CLUSTER NODES: no port in {line}"));
                return self
                    .nodes
                    .iter()
                    .position(|n| n.port() == port)
                    .unwrap_or_else(|| panic!("slot {slot} served by a foreign node {port}"));
            }
        }
        panic!("no master serves slot {slot}:\n{nodes}")
    }

    /// SIGKILLs server `node` (see [`RedisServer::kill`]), having noted its replicas
    /// for [`wait_for_promotion`](Self::wait_for_promotion).
    pub fn kill(&mut self, node: usize) {
        let replicas = self.replicas_of(node);
        self.killed.retain(|(n, _)| *n != node);
        self.killed.push((node, replicas));
        self.nodes[node].kill();
    }

    /// The indexes of the servers that `CLUSTER NODES` on `master` lists as its replicas.
    ///
    /// ```no_run
    /// let cluster = idem_testkit::RedisCluster::start_with_replicas(1);
    /// let master = cluster.masters()[0];
    /// assert_eq!(cluster.replicas_of(master).len(), 1);
    /// ```
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        let port = self.nodes[master].port();
        let id = redis_cli(port, &["cluster", "myid"]).trim().to_owned();
        let nodes = redis_cli(port, &["cluster", "nodes"]);
        nodes
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.len() >= 4 && fields[2].contains("slave") && fields[3] == id)
                    .then(|| node_port(fields[1]))
                    .flatten()
            })
            .filter_map(|p| self.nodes.iter().position(|n| n.port() == p))
            .collect()
    }

    /// Waits until a replica of the master `dead`, killed by [`kill`](Self::kill), has
    /// been promoted and the cluster serves every slot again; returns the new master's
    /// index.
    pub fn wait_for_promotion(&self, dead: usize) -> usize {
        let replicas = self
            .killed
            .iter()
            .find(|(n, _)| *n == dead)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("node {dead} was not killed by RedisCluster::kill"));
        assert!(
            !replicas.is_empty(),
            "node {dead} had no replica to promote"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            for &i in &replicas {
                let port = self.nodes[i].port();
                if role(port).as_deref() == Some("master") && cluster_ok(port) {
                    return i;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no replica of node {dead} was promoted within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops server `node` with SIGSTOP (see [`RedisServer::pause`]).
    pub fn pause(&mut self, node: usize) {
        self.nodes[node].pause();
    }

    /// Lets a paused server `node` run again (see [`RedisServer::resume`]).
    pub fn resume(&mut self, node: usize) {
        self.nodes[node].resume();
    }

    /// Starts killed server `node` again on its port and cluster configuration; it
    /// rejoins as a replica of whoever took over its slots, and this waits until it is in
    /// sync.
    pub fn restart(&mut self, node: usize) {
        self.nodes[node].restart();
        let deadline = Instant::now() + Duration::from_secs(60);
        let port = self.nodes[node].port();
        loop {
            let info = redis_cli(port, &["info", "replication"]);
            if info.contains("role:slave") && info.contains("master_link_status:up") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {node} did not rejoin as a replica in sync within 60 s:\n{info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-cli -p <port> <args>`'s output; empty when it cannot run or the node is down.
fn redis_cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default()
}

/// The port of a CLUSTER NODES address, `ip:port@busport`.
fn node_port(address: &str) -> Option<u16> {
    address.split(['@', ':']).nth(1)?.parse().ok()
}

/// Whether the node on `port` reports `cluster_state:ok`.
fn cluster_ok(port: u16) -> bool {
    redis_cli(port, &["cluster", "info"]).contains("cluster_state:ok")
}

/// `master` or `slave`, as the node on `port` answers `ROLE`; `None` when it is down.
fn role(port: u16) -> Option<String> {
    redis_cli(port, &["role"]).lines().next().map(str::to_owned)
}

/// How many replicas the master on `port` lists as online.
fn online_replicas(port: u16) -> usize {
    redis_cli(port, &["info", "replication"])
        .lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .count()
}
