//! One `redis-server` process: start, kill, restart empty, pause and resume.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::error::HarnessError;
use crate::options::ServerOptions;
use crate::port::free_port;

/// How long a server may take to answer PING after it was spawned. Generous: CI is a loaded
/// 2-core machine starting many servers at once.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long [`RedisServer::restart_empty`] keeps retrying while its old port is still taken.
const RESTART_TIMEOUT: Duration = Duration::from_secs(10);
/// How many fresh ports a start tries when the chosen one was taken meanwhile.
const PORT_ATTEMPTS: usize = 5;
/// Pause between two readiness checks.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Timeout of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// What `redis-server` logs once it listens.
const READY_LINE: &str = "ready to accept connections";
/// What `redis-server` logs when its port is taken.
const PORT_IN_USE_LINE: &str = "address already in use";

/// A `redis-server` child process on a free loopback port, in its own temp dir.
///
/// Dropping it kills the process (SIGKILL, also when paused) and removes the temp dir. The harness
/// only ever signals processes it started, through their own handles.
///
/// ```no_run
/// use redlock_local::RedisServer;
///
/// let mut server = RedisServer::start();
/// server.pause();
/// server.resume();
/// server.restart_empty();
/// assert_eq!(server.dbsize(), 0);
/// ```
#[derive(Debug)]
pub struct RedisServer {
    options: ServerOptions,
    port: u16,
    /// `None` once killed.
    process: Option<Process>,
    paused: bool,
}

impl RedisServer {
    /// Starts a server with default [`ServerOptions`].
    ///
    /// # Panics
    /// If it cannot be started; the message says why, e.g. how to install `redis-server`.
    pub fn start() -> Self {
        ServerOptions::new().start()
    }

    /// The options this server was started with (and is restarted with).
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// The port it listens on; the same across [`RedisServer::restart_empty`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Whether the process is alive (a paused process is alive).
    pub fn is_running(&self) -> bool {
        self.process.as_ref().is_some_and(Process::is_alive)
    }

    /// Whether [`RedisServer::pause`] was called without a matching resume.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Kills the process with SIGKILL and reaps it: connections drop and new ones are refused.
    /// Does nothing if it is already killed.
    pub fn kill(&mut self) {
        self.process = None;
        self.paused = false;
    }

    /// Kills the process if it runs, then starts a fresh one with the same options on the same
    /// port and no data, and waits until it answers. It is **not** trusted: it lost its memory,
    /// so restart-aware clients refuse its vote for their longest TTL (call
    /// [`RedisServer::trust`] where the test knows no lock can be live on it).
    ///
    /// # Panics
    /// If the new process cannot be started.
    pub fn restart_empty(&mut self) {
        self.restart_with(None);
    }

    /// Saves an RDB snapshot (`SAVE`) and returns its bytes, for
    /// [`RedisServer::restart_from_snapshot`].
    ///
    /// # Panics
    /// If the server does not answer or its snapshot cannot be read.
    pub fn snapshot(&self) -> Vec<u8> {
        let _: () = redis::cmd("SAVE").query(&mut self.client()).expect("SAVE");
        let process = self.process.as_ref().expect("a running server");
        fs::read(process.dir.path().join(SNAPSHOT_FILE)).expect("reading the snapshot")
    }

    /// Kills the process if it runs, then starts a new one with the same options on the same
    /// port that loads `snapshot` (from [`RedisServer::snapshot`], of this server or another),
    /// as a node that restarts from its last RDB does: what was written after the snapshot is
    /// lost, what it holds comes back, and the process has a new `run_id`.
    ///
    /// # Panics
    /// If the new process cannot be started.
    pub fn restart_from_snapshot(&mut self, snapshot: &[u8]) {
        self.restart_with(Some(snapshot));
    }

    fn restart_with(&mut self, snapshot: Option<&[u8]>) {
        self.kill();
        let deadline = Instant::now() + RESTART_TIMEOUT;
        loop {
            let started =
                Process::spawn_with(&self.options, self.port, snapshot).and_then(|process| {
                    process
                        .wait_ready(self.port, self.options.is_tls())
                        .map(|()| process)
                });
            match started {
                Ok(process) => {
                    self.process = Some(process);
                    return;
                }
                Err(err) if is_port_in_use(&err) && Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(100));
                }
                Err(err) => panic!("restarting redis-server on port {}: {err}", self.port),
            }
        }
    }

    /// Marks the node trusted for restart-aware voting (`MSET redlock:epoch 0 redlock:epoch:id
    /// ""`, what the library's `trust_nodes` does on a node that runs no script: the next
    /// checked script adopts the node's identity): the harness just started it, so it knows
    /// no lock is live on it. Every server is trusted when [`RedisServer::start`]ed (if it accepts writes); one
    /// restarted empty is not.
    ///
    /// # Panics
    /// If the server does not answer.
    pub fn trust(&self) {
        self.try_trust()
            .unwrap_or_else(|err| panic!("trusting {}: {err}", self.addr()));
    }

    /// [`RedisServer::trust`], with the server's refusal as an error instead of a panic.
    pub fn try_trust(&self) -> redis::RedisResult<()> {
        redis::cmd("MSET")
            .arg(redlock_core::EPOCH_KEY)
            .arg(0)
            .arg(redlock_core::EPOCH_ID_KEY)
            .arg("")
            .query(&mut self.try_client()?)
    }

    /// Stops the process with SIGSTOP: it keeps its sockets and data but answers nothing.
    ///
    /// # Panics
    /// If the server was killed.
    pub fn pause(&mut self) {
        self.signal(Signal::SIGSTOP);
        self.paused = true;
    }

    /// Continues a paused process with SIGCONT.
    ///
    /// # Panics
    /// If the server was killed.
    pub fn resume(&mut self) {
        self.signal(Signal::SIGCONT);
        self.paused = false;
    }

    fn signal(&self, signal: Signal) {
        let Some(process) = &self.process else {
            panic!(
                "cannot send {signal} to redis-server on {}: it was killed",
                self.addr()
            );
        };
        if let Err(err) = signal::kill(process.pid, signal) {
            panic!("sending {signal} to redis-server on {}: {err}", self.addr());
        }
    }
}

/// Starts `count` servers: spawns every process first, then waits for each.
pub(crate) fn start_many(
    options: &ServerOptions,
    count: usize,
) -> Result<Vec<RedisServer>, HarnessError> {
    let each: Vec<ServerOptions> = (0..count).map(|i| options.mixed(i)).collect();
    start_each(&each)
}

/// Starts one server per entry of `each`: spawns every process first, then waits for each.
pub(crate) fn start_each(each: &[ServerOptions]) -> Result<Vec<RedisServer>, HarnessError> {
    let spawned = each
        .iter()
        .map(|options| {
            let port = free_port()?;
            Process::spawn(options, port).map(|process| (options, port, process))
        })
        .collect::<Result<Vec<_>, _>>()?;
    spawned
        .into_iter()
        .map(|(options, port, process)| finish_start(options, port, process))
        .collect()
}

/// Waits for a spawned server; if its port was taken meanwhile, starts it again on another one.
fn finish_start(
    options: &ServerOptions,
    mut port: u16,
    mut process: Process,
) -> Result<RedisServer, HarnessError> {
    let mut attempt = 1;
    loop {
        match process.wait_ready(port, options.is_tls()) {
            Ok(()) => {
                let server = RedisServer {
                    options: options.clone(),
                    port,
                    process: Some(process),
                    paused: false,
                };
                // A server that refuses writes (a replica, a full maxmemory) stays untrusted: the
                // tests that start one expect its votes to fail anyway.
                let _ = server.try_trust();
                return Ok(server);
            }
            Err(err) if is_port_in_use(&err) && attempt < PORT_ATTEMPTS => {
                attempt += 1;
                port = free_port()?;
                process = Process::spawn(options, port)?;
            }
            Err(err) => return Err(err),
        }
    }
}

fn is_port_in_use(err: &HarnessError) -> bool {
    matches!(err, HarnessError::Exited { log, .. } if log.to_lowercase().contains(PORT_IN_USE_LINE))
}

/// The RDB file a server saves to and loads from, in its dir (redis-server's default name).
const SNAPSHOT_FILE: &str = "dump.rdb";

/// A running child and the temp dir it works in. Dropping it kills and reaps the child, then
/// removes the dir.
#[derive(Debug)]
struct Process {
    child: Mutex<Child>,
    pid: Pid,
    spawned_at: Instant,
    dir: TempDir,
}

impl Process {
    fn spawn(options: &ServerOptions, port: u16) -> Result<Self, HarnessError> {
        Self::spawn_with(options, port, None)
    }

    /// [`Process::spawn`], its dir holding `snapshot` as the RDB file it loads at start.
    fn spawn_with(
        options: &ServerOptions,
        port: u16,
        snapshot: Option<&[u8]>,
    ) -> Result<Self, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("redlock-redis-")
            .tempdir()?;
        if let Some(snapshot) = snapshot {
            fs::write(dir.path().join(SNAPSHOT_FILE), snapshot)?;
        }
        let log = File::create(dir.path().join("redis.log"))?;
        let program = options.program();
        let child = Command::new(&program)
            .args(options.listen_args(port))
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(options.command_args())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|source| {
                let binary = program.to_string_lossy().into_owned();
                if source.kind() == io::ErrorKind::NotFound {
                    HarnessError::MissingBinary { binary }
                } else {
                    HarnessError::Spawn { binary, source }
                }
            })?;
        let Ok(pid) = i32::try_from(child.id()) else {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(format!("pid {} out of range", child.id())).into());
        };
        Ok(Self {
            child: Mutex::new(child),
            pid: Pid::from_raw(pid),
            spawned_at: Instant::now(),
            dir,
        })
    }

    /// Waits until the server logged that it listens and answers PING.
    fn wait_ready(&self, port: u16, tls: bool) -> Result<(), HarnessError> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        loop {
            let exited = self.lock_child().try_wait()?;
            if let Some(status) = exited {
                return Err(HarnessError::Exited {
                    addr,
                    status: status.to_string(),
                    log: self.log(),
                });
            }
            // A TLS port answers nothing to a plain PING: accepting the connection is enough.
            let answers = if tls {
                accepts(addr)
            } else {
                answers_ping(addr)
            };
            if self.log().to_lowercase().contains(READY_LINE) && answers {
                return Ok(());
            }
            let waited = self.spawned_at.elapsed();
            if waited > START_TIMEOUT {
                return Err(HarnessError::NotReady {
                    addr,
                    waited,
                    log: self.log(),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn is_alive(&self) -> bool {
        matches!(self.lock_child().try_wait(), Ok(None))
    }

    /// The server's output so far (empty if unreadable).
    fn log(&self) -> String {
        fs::read(self.dir.path().join("redis.log"))
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    fn lock_child(&self) -> std::sync::MutexGuard<'_, Child> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(PoisonError::into_inner);
        // SIGKILL ends a stopped (paused) process too, so the wait cannot hang.
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Whether something on `addr` accepts a connection.
fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).is_ok()
}

/// Whether something on `addr` answers a PING with any RESP reply (`-NOAUTH` counts).
fn answers_ping(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else {
        return false;
    };
    let mut first = [0_u8; 1];
    stream.set_read_timeout(Some(PROBE_TIMEOUT)).is_ok()
        && stream.set_write_timeout(Some(PROBE_TIMEOUT)).is_ok()
        && stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut first).is_ok()
        && matches!(first[0], b'+' | b'-')
}
