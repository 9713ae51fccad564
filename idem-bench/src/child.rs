//! The server child process: this binary re-executed as `idem-bench serve`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running server. Dropping it stops it.
#[derive(Debug)]
pub(crate) struct Server {
    child: Child,
    /// The child reads this until it closes, then stops: closing it is the stop signal,
    /// and it also closes when this process dies, so no server outlives the benchmark.
    lifeline: Option<ChildStdin>,
    pub(crate) addr: SocketAddr,
    /// The same handlers served by axum (`server_axum.rs`), in the same process.
    pub(crate) axum: SocketAddr,
}

impl Server {
    /// Starts a server on `url` with a pool of `pool` connections. `wrapper` runs it under
    /// another program (valgrind); `startup` is how long it may take to listen.
    pub(crate) fn start(
        url: &str,
        pool: u32,
        wrapper: &[String],
        startup: Duration,
    ) -> Result<Self, String> {
        Self::start_with(url, pool, true, wrapper, startup)
    }

    /// [`start`](Self::start), saying whether the server's pool pings connections it
    /// hands out (sqlx's default).
    pub(crate) fn start_with(
        url: &str,
        pool: u32,
        acquire_ping: bool,
        wrapper: &[String],
        startup: Duration,
    ) -> Result<Self, String> {
        Self::start_with_args(url, pool, acquire_ping, &[], wrapper, startup)
    }

    /// [`start_with`](Self::start_with), passing `args` on to `idem-bench serve`.
    pub(crate) fn start_with_args(
        url: &str,
        pool: u32,
        acquire_ping: bool,
        args: &[&str],
        wrapper: &[String],
        startup: Duration,
    ) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&exe);
                command
            }
            None => Command::new(&exe),
        };
        command
            .args(["serve", "--url", url, "--pool", &pool.to_string()])
            .args([
                "--acquire-ping",
                if acquire_ping { "true" } else { "false" },
            ])
            .args(args)
            // The server's own tracing is off: logging is not what is measured.
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start the server ({}): {e}", exe.display()))?;
        let lifeline = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // `axum <addr>` comes first, then `listening <addr>` once both accept.
            let mut axum = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("axum ") {
                    axum = addr.parse::<SocketAddr>().ok();
                } else if let Some(addr) = line.strip_prefix("listening ") {
                    let addrs = addr.parse::<SocketAddr>().map_err(|e| e.to_string());
                    let _ = tx.send(addrs.and_then(|addr| {
                        Ok((
                            addr,
                            axum.ok_or("no `axum <addr>` line before `listening`")?,
                        ))
                    }));
                }
            }
        });
        let mut server = Server {
            child,
            lifeline,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            axum: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        match rx.recv_timeout(startup) {
            Ok(Ok((addr, axum))) => {
                server.addr = addr;
                server.axum = axum;
                Ok(server)
            }
            Ok(Err(e)) => Err(format!("the server printed a bad address: {e}")),
            Err(_) => Err(format!(
                "the server did not start listening within {startup:?} (its errors are above)"
            )),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the server and waits for it, killing it if it does not stop in time.
    pub(crate) fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if self.lifeline.take().is_none() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shut_down();
    }
}
