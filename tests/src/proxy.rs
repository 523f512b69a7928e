//! A TCP proxy that injects faults between a client and a `redis-server`.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::pump::{self, Conn};

/// How often the accept loop looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(5);
/// Timeout of the proxy's own connection to the target.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A TCP proxy on a free loopback port, forwarding to a target address, with faults that can be
/// switched at any time. Every control affects the open connections as well as new ones.
///
/// It runs on plain threads, so it works under any client runtime (tokio, async-std, blocking).
/// Dropping it closes every connection and joins its threads.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_tests::{FaultProxy, RedisServer};
///
/// let server = RedisServer::start();
/// let proxy = FaultProxy::start(server.addr());
/// let url = server.url_via(proxy.addr()); // give this to the client under test
/// proxy.set_latency(Duration::from_millis(50));
/// proxy.reset_after(0); // the next command runs, its reply is lost
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

/// State shared by the proxy handle, the accept loop and the pumps.
#[derive(Debug)]
pub(crate) struct Shared {
    target: Mutex<SocketAddr>,
    pub(crate) stopped: AtomicBool,
    controls: Mutex<Controls>,
    conns: Mutex<Vec<Weak<Conn>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) bytes_to_server: AtomicU64,
    pub(crate) bytes_to_client: AtomicU64,
    accepted: AtomicU64,
}

/// The faults in force.
#[derive(Debug, Default)]
pub(crate) struct Controls {
    /// Added to every chunk in each direction.
    pub(crate) latency: Duration,
    /// Hold every byte until healed.
    pub(crate) stalled: bool,
    /// Close new connections at once.
    partitioned: bool,
    /// Server-to-client bytes still allowed before the connection carrying the next one is cut.
    reset_budget: Option<u64>,
}

impl Controls {
    /// How much of a server-to-client chunk of `len` bytes may be forwarded: `None` for all of it,
    /// `Some(n)` for the first `n` bytes, after which the connection must be cut.
    pub(crate) fn take_reply_budget(&mut self, len: usize) -> Option<usize> {
        let budget = self.reset_budget?;
        let len_u64 = u64::try_from(len).unwrap_or(u64::MAX);
        if len_u64 <= budget {
            self.reset_budget = Some(budget - len_u64);
            None
        } else {
            self.reset_budget = None;
            Some(usize::try_from(budget).unwrap_or(len))
        }
    }
}

impl FaultProxy {
    /// Starts a proxy on `127.0.0.1:<free port>` forwarding to `target`, with no faults.
    ///
    /// # Panics
    /// If no loopback port can be bound or the accept thread cannot be spawned.
    pub fn start(target: SocketAddr) -> Self {
        Self::try_start(target).unwrap_or_else(|err| panic!("starting a proxy to {target}: {err}"))
    }

    /// Like [`FaultProxy::start`], returning the error.
    pub fn try_start(target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target: Mutex::new(target),
            stopped: AtomicBool::new(false),
            controls: Mutex::default(),
            conns: Mutex::default(),
            threads: Mutex::default(),
            bytes_to_server: AtomicU64::new(0),
            bytes_to_client: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        });
        let acceptor = thread::Builder::new()
            .name(format!("proxy-accept-{}", addr.port()))
            .spawn({
                let shared = Arc::clone(&shared);
                move || accept_loop(&shared, &listener)
            })?;
        Ok(Self {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:port/` without credentials; see
    /// [`RedisServer::url_via`](crate::RedisServer::url_via) for a URL with them.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// The address the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        self.shared.target()
    }

    /// Moves the address behind the proxy to `target`, as a failover moves a DNS name or a
    /// cloud "primary endpoint": every open connection is closed (the old target's clients
    /// see it end), and new ones reach `target`.
    pub fn retarget(&self, target: SocketAddr) {
        *self
            .shared
            .target
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = target;
        self.shared.close_all();
    }

    /// Delays every chunk read from then on, in each direction, by `latency` (order is kept).
    /// `Duration::ZERO` turns it off.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.controls().latency = latency;
    }

    /// Holds every byte in both directions, keeping the sockets open, until [`FaultProxy::heal`].
    pub fn stall(&self) {
        self.shared.controls().stalled = true;
    }

    /// Closes every open connection and, until [`FaultProxy::heal`], closes new ones as soon as
    /// they are accepted: a partition.
    pub fn drop_all(&self) {
        let mut controls = self.shared.controls();
        controls.partitioned = true;
        self.shared.close_all();
    }

    /// Arms a one-shot cut of replies: the next `n` bytes from the server (counted over all
    /// connections) are forwarded; the connection that carries any byte after them is closed
    /// instead, that byte and the rest undelivered. `reset_after(0)` makes the next command run
    /// on the server while its reply is lost.
    pub fn reset_after(&self, n: u64) {
        self.shared.controls().reset_budget = Some(n);
    }

    /// Ends a stall (held bytes are delivered), a partition and an armed reset. Latency stays.
    pub fn heal(&self) {
        let mut controls = self.shared.controls();
        controls.stalled = false;
        controls.partitioned = false;
        controls.reset_budget = None;
    }

    /// Bytes forwarded from clients to the server so far.
    pub fn bytes_to_server(&self) -> u64 {
        self.shared.bytes_to_server.load(Ordering::Relaxed)
    }

    /// Bytes forwarded from the server to clients so far.
    pub fn bytes_to_client(&self) -> u64 {
        self.shared.bytes_to_client.load(Ordering::Relaxed)
    }

    /// Client connections accepted so far, including ones closed at once by a partition.
    pub fn connections_accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Connections currently being forwarded.
    pub fn open_connections(&self) -> usize {
        self.shared
            .lock_conns()
            .iter()
            .filter(|conn| conn.strong_count() > 0)
            .count()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.drop_all();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        // Every pump blocks at most a short timeout and its sockets are shut down, so it ends.
        let threads = std::mem::take(&mut *self.shared.lock_threads());
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl Shared {
    pub(crate) fn controls(&self) -> MutexGuard<'_, Controls> {
        self.controls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where new connections go.
    pub(crate) fn target(&self) -> SocketAddr {
        *self.target.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    fn lock_conns(&self) -> MutexGuard<'_, Vec<Weak<Conn>>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_threads(&self) -> MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.threads.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn close_all(&self) {
        for conn in self
            .lock_conns()
            .drain(..)
            .filter_map(|conn| conn.upgrade())
        {
            conn.close();
        }
    }

    /// Registers a forwarded connection unless a partition or stop began meanwhile.
    fn register(&self, conn: &Arc<Conn>) -> bool {
        let controls = self.controls();
        if controls.partitioned || self.is_stopped() {
            return false;
        }
        let mut conns = self.lock_conns();
        conns.retain(|conn| conn.strong_count() > 0);
        conns.push(Arc::downgrade(conn));
        true
    }

    fn spawn(self: &Arc<Self>, name: String, work: impl FnOnce(&Arc<Self>) + Send + 'static) {
        let shared = Arc::clone(self);
        let spawned = thread::Builder::new()
            .name(name)
            .spawn(move || work(&shared));
        let mut threads = self.lock_threads();
        threads.retain(|thread| !thread.is_finished());
        // Out of threads: the connection is dropped, as a real network might.
        if let Ok(handle) = spawned {
            threads.push(handle);
        }
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    while !shared.is_stopped() {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                if !shared.controls().partitioned {
                    let name = format!("proxy-conn-{}", shared.accepted.load(Ordering::Relaxed));
                    shared.spawn(name, move |shared| serve(shared, client));
                }
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Connects to the target and forwards both ways until either side closes.
fn serve(shared: &Arc<Shared>, client: TcpStream) {
    let target = shared.target();
    let Ok(server) = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT) else {
        return;
    };
    let Ok(conn) = Conn::new(client, server).map(Arc::new) else {
        return;
    };
    if !shared.register(&conn) {
        conn.close();
        return;
    }
    let to_client = Arc::clone(&conn);
    shared.spawn("proxy-to-client".to_owned(), move |shared| {
        pump::run(shared, &to_client, pump::Direction::ToClient);
    });
    pump::run(shared, &conn, pump::Direction::ToServer);
}
