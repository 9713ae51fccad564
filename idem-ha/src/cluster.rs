//! The highly available PostgreSQL the service runs on: one etcd member, two PostgreSQL
//! nodes managed by Patroni (a primary and a standby, synchronous or not), and HAProxy,
//! which routes each new connection to whichever node Patroni's REST API calls the primary
//! (`GET /primary` answers 200 only there). All on loopback ports in one temporary
//! directory, started by this program and removed when the value is dropped.

use std::fs;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idem_testkit::free_port;

use crate::host::{
    chown, euid_is_root, http_status, postgres_bin, postgres_ids, postmaster_pid, tail, which,
};

/// The PostgreSQL replication Patroni is told to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Replication {
    /// `synchronous_mode` and `synchronous_mode_strict`: a commit returns once the standby
    /// has it, and with the standby gone the primary waits for it to come back.
    Sync,
    /// Streaming replication without a synchronous standby: a commit returns once the
    /// primary has it.
    Async,
}

/// Patroni's leader key lives this long without renewal (seconds): the time a dead
/// primary keeps its role before the standby takes over.
const TTL: u64 = 10;

/// How long a component may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// Patroni's `maximum_lag_on_failover` (bytes): a standby further behind is not promoted.
const MAX_LAG_ON_FAILOVER: u64 = 1_048_576;

/// One PostgreSQL node and the Patroni that manages it.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) name: String,
    rest_port: u16,
    pg_port: u16,
    data: PathBuf,
    config: PathBuf,
    log: PathBuf,
    patroni: Option<Child>,
}

/// etcd, two Patroni nodes and HAProxy; everything is stopped and removed on drop.
#[derive(Debug)]
pub(crate) struct Ha {
    dir: PathBuf,
    etcd: Option<Child>,
    haproxy: Option<Child>,
    pub(crate) nodes: Vec<Node>,
    proxy_port: u16,
    owner: (u32, u32),
}

/// What a missing program is called in Debian, for the error message.
const PROGRAMS: [(&str, &str); 4] = [
    ("etcd", "etcd-server"),
    ("patroni", "patroni"),
    ("haproxy", "haproxy"),
    ("pg_rewind", "postgresql-15"),
];

impl Ha {
    /// Starts etcd, the first node (it bootstraps the cluster and becomes the primary),
    /// the second (a standby cloned from it) and HAProxy, and waits until the standby
    /// streams (and, with [`Replication::Sync`], is the synchronous one).
    pub(crate) fn start(replication: Replication) -> Result<Ha, String> {
        let bin = postgres_bin()?;
        for (program, package) in PROGRAMS {
            let found = if program == "pg_rewind" {
                bin.join(program).exists()
            } else {
                which(program).is_some()
            };
            if !found {
                return Err(format!(
                    "`{program}` not found: install it (Debian: apt-get install {package}); \
                     `bash .ci/run` does"
                ));
            }
        }
        // As root, Patroni (and so PostgreSQL, which refuses root) runs as `postgres`.
        let owner = if euid_is_root() {
            postgres_ids()?
        } else {
            (0, 0)
        };
        let dir = std::env::temp_dir().join(format!("idem-ha-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
        chown(&dir, owner)?;
        let mut ha = Ha {
            dir,
            etcd: None,
            haproxy: None,
            nodes: Vec::new(),
            proxy_port: free_port()?,
            owner,
        };
        let etcd_client = free_port()?;
        let etcd_peer = free_port()?;
        ha.start_etcd(etcd_client, etcd_peer)?;
        for i in 1..=2 {
            let node = ha.node_config(i, &bin, etcd_client, replication)?;
            ha.nodes.push(node);
        }
        ha.start_node(0)?;
        ha.wait_role(0, "primary")?;
        ha.start_node(1)?;
        ha.wait_standby(1, replication)?;
        ha.start_haproxy()?;
        Ok(ha)
    }

    /// The URL the example processes use: PostgreSQL through HAProxy.
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.proxy_port)
    }

    /// The node Patroni's REST API calls the primary, if one does.
    pub(crate) fn primary(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| self.has_role(i, "primary"))
    }

    /// Whether node `i`'s REST API answers 200 to `GET /<role>` (`primary`, `replica`,
    /// `sync`).
    fn has_role(&self, i: usize, role: &str) -> bool {
        http_status(self.nodes[i].rest_port, role) == Some(200)
    }

    /// Waits until node `i` has `role`.
    pub(crate) fn wait_role(&self, i: usize, role: &str) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.has_role(i, role) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "node {} did not become {role} within {START_TIMEOUT:?}; its log tail:\n{}",
            self.nodes[i].name,
            tail(&self.nodes[i].log)
        ))
    }

    /// Waits until node `i` streams from the primary, as the synchronous standby with
    /// [`Replication::Sync`].
    pub(crate) fn wait_standby(&self, i: usize, replication: Replication) -> Result<(), String> {
        match replication {
            Replication::Sync => self.wait_role(i, "sync"),
            Replication::Async => self.wait_role(i, "replica"),
        }
    }

    /// Waits until node `i` is a standby Patroni would promote: the synchronous standby,
    /// or an asynchronous one within `maximum_lag_on_failover` of the primary. A replica
    /// that has just rejoined answers `GET /replica` before it has replayed up to the
    /// primary, and Patroni refuses to promote it ("not the healthiest node"): a kill
    /// then leaves the cluster without a primary, which is an operator's problem, not
    /// the failover this harness measures.
    pub(crate) fn wait_promotable(&self, i: usize, replication: Replication) -> Result<(), String> {
        match replication {
            Replication::Sync => self.wait_role(i, "sync"),
            Replication::Async => self.wait_role(i, &format!("replica?lag={MAX_LAG_ON_FAILOVER}")),
        }
    }

    /// Crashes node `i` as a machine would: SIGKILL to its Patroni, its PostgreSQL
    /// postmaster and everything else in their process group.
    pub(crate) fn kill_node(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        if let Some(mut child) = node.patroni.take() {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = child.kill();
            let _ = child.wait();
        }
        // The postmaster, should Patroni have started it in a session of its own.
        if let Some(pid) = postmaster_pid(&node.data) {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    }

    /// Starts node `i`'s Patroni again (after [`kill_node`](Self::kill_node)): it rewinds
    /// the old primary's data directory if needed and follows the current primary.
    pub(crate) fn start_node(&mut self, i: usize) -> Result<(), String> {
        let owner = self.owner;
        let node = &mut self.nodes[i];
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .map_err(|e| format!("cannot open {}: {e}", node.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new(which("patroni").ok_or("patroni not found")?);
        if euid_is_root() {
            command.uid(owner.0).gid(owner.1);
        }
        let child = command
            .arg(&node.config)
            .env("HOME", self.dir.as_os_str())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start patroni: {e}"))?;
        node.patroni = Some(child);
        Ok(())
    }

    fn start_etcd(&mut self, client: u16, peer: u16) -> Result<(), String> {
        let log = fs::File::create(self.dir.join("etcd.log")).map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "etcd1", "--data-dir"])
            .arg(self.dir.join("etcd"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("etcd1={peer_url}")])
            .args(["--initial-cluster-state", "new"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start etcd: {e}"))?;
        self.etcd = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while http_status(client, "health") != Some(200) {
            if Instant::now() > deadline {
                return Err(format!(
                    "etcd did not answer on 127.0.0.1:{client}; its log tail:\n{}",
                    tail(&self.dir.join("etcd.log"))
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    fn node_config(
        &self,
        i: usize,
        bin: &Path,
        etcd: u16,
        replication: Replication,
    ) -> Result<Node, String> {
        let name = format!("pg{i}");
        let rest_port = free_port()?;
        let pg_port = free_port()?;
        let data = self.dir.join(&name);
        let config = self.dir.join(format!("{name}.yml"));
        let (sync, strict) = match replication {
            Replication::Sync => (true, true),
            Replication::Async => (false, false),
        };
        let dir = self.dir.display();
        // loop_wait + 2 * retry_timeout stays under ttl, as Patroni requires.
        let yaml = format!(
            "scope: idem-ha
name: {name}
restapi:
  listen: 127.0.0.1:{rest_port}
  connect_address: 127.0.0.1:{rest_port}
etcd3:
  hosts: 127.0.0.1:{etcd}
bootstrap:
  dcs:
    ttl: {TTL}
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: {MAX_LAG_ON_FAILOVER}
    synchronous_mode: {sync}
    synchronous_mode_strict: {strict}
    postgresql:
      use_pg_rewind: true
      parameters:
        synchronous_commit: 'on'
        wal_log_hints: 'on'
        max_connections: 200
  initdb:
    - encoding: UTF8
    - locale: C
    - auth: trust
  pg_hba:
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg_port}
  connect_address: 127.0.0.1:{pg_port}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {dir}/{name}.pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: {dir}
    fsync: 'off'
",
            data = data.display(),
            bin = bin.display(),
        );
        fs::write(&config, yaml).map_err(|e| format!("cannot write {}: {e}", config.display()))?;
        chown(&config, self.owner)?;
        Ok(Node {
            log: self.dir.join(format!("{name}.log")),
            name,
            rest_port,
            pg_port,
            data,
            config,
            patroni: None,
        })
    }

    fn start_haproxy(&mut self) -> Result<(), String> {
        let mut servers = String::new();
        for node in &self.nodes {
            servers.push_str(&format!(
                "    server {} 127.0.0.1:{} check port {}\n",
                node.name, node.pg_port, node.rest_port
            ));
        }
        // A node is taken out after two failed checks half a second apart, and the
        // sessions still open to it are cut: clients reconnect to the new primary.
        let config = format!(
            "global
    maxconn 2000
defaults
    mode tcp
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 1s
listen postgres
    bind 127.0.0.1:{port}
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
{servers}",
            port = self.proxy_port
        );
        let path = self.dir.join("haproxy.cfg");
        fs::write(&path, config).map_err(|e| e.to_string())?;
        let log = fs::File::create(self.dir.join("haproxy.log")).map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start haproxy: {e}"))?;
        self.haproxy = Some(child);
        // HAProxy counts every server up until its checks say otherwise: give them the
        // time to take the standby out (two checks half a second apart) before anyone
        // connects.
        std::thread::sleep(Duration::from_secs(3));
        let deadline = Instant::now() + START_TIMEOUT;
        while std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, self.proxy_port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!(
                    "haproxy did not listen on 127.0.0.1:{}; its log:\n{}",
                    self.proxy_port,
                    tail(&self.dir.join("haproxy.log"))
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// The tail of every component's log, for a failure message.
    pub(crate) fn logs(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            out.push_str(&format!("--- {}:\n{}\n", node.name, tail(&node.log)));
        }
        out.push_str(&format!(
            "--- haproxy:\n{}\n",
            tail(&self.dir.join("haproxy.log"))
        ));
        out
    }
}

impl Drop for Ha {
    fn drop(&mut self) {
        if let Some(mut child) = self.haproxy.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for i in 0..self.nodes.len() {
            self.kill_node(i);
        }
        if let Some(mut child) = self.etcd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Backends of a killed postmaster notice and exit on their own; give them a moment
        // before their directory goes.
        std::thread::sleep(Duration::from_millis(300));
        let _ = fs::remove_dir_all(&self.dir);
    }
}
