//! Acquire, extend and release a lock over plain `std::net::TcpStream`s, with nothing but
//! `redlock-core` and its `resp` module: the model for a driver of your own.
//!
//! ```text
//! cargo run -p redlock-core --example tcp_lock -- 127.0.0.1:6379 127.0.0.1:6380 127.0.0.1:6381
//! ```
//!
//! Node addresses come from the command line; with none, three local redis-servers are started
//! for the run. A node that refuses
//! the connection answers every request with `Error(Connection)`; a node that does not answer
//! holds nothing up: the lock's lifecycle decides as soon as the other nodes settle a round, or
//! at its deadline. One reader thread per connection turns bytes into replies; the main thread
//! only ever blocks in `recv_timeout` until the instant the lifecycle is waiting for.
// A driver, not the engine: it reads the clock, draws OS entropy and uses sockets. The bans in
// clippy.toml are for the engine's code.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use chacha20::ChaCha8Rng;
use rand_core::SeedableRng;
use redlock_core::{
    Config, ExtendOutcome, Lifecycle, LockEvent, LockOutput, LockRequest, NodeErrorKind, Reply,
    RequestId, Transmit, resp,
};

/// A reply read from node `.0`, or `None` when its connection is gone.
type Incoming = (usize, Option<Reply>);

/// One connection per node (or none), and the ids of its requests still awaiting a reply, in
/// order: Redis answers the commands of one connection in the order they came.
struct Nodes {
    streams: Vec<Option<TcpStream>>,
    in_flight: Vec<VecDeque<RequestId>>,
    replies: Receiver<Incoming>,
}

/// What a node that cannot be reached answers.
const UNREACHABLE: Reply = Reply::Error(NodeErrorKind::Connection);

impl Nodes {
    fn connect(addrs: &[String]) -> Self {
        let (tx, replies) = channel();
        let mut streams = Vec::new();
        for (node, addr) in addrs.iter().enumerate() {
            let stream = connect(addr).and_then(|stream| {
                read_replies(node, stream.try_clone()?, tx.clone());
                Ok(stream)
            });
            match &stream {
                Ok(_) => println!("node {node} ({addr}): connected"),
                Err(err) => println!("node {node} ({addr}): {err}; it votes \"connection error\""),
            }
            streams.push(stream.ok());
        }
        let in_flight = vec![VecDeque::new(); streams.len()];
        Self {
            streams,
            in_flight,
            replies,
        }
    }

    /// Writes the request to its node; a node without a connection answers at once.
    fn send(&mut self, lock: &mut Lifecycle, transmit: Transmit) {
        let node = transmit.id.node();
        let mut bytes = Vec::new();
        resp::encode(&transmit.command, &mut bytes);
        let written = self.streams[node]
            .as_mut()
            .map(|stream| stream.write_all(&bytes));
        if let Some(Ok(())) = written {
            self.in_flight[node].push_back(transmit.id);
        } else {
            self.streams[node] = None;
            lock.handle_reply(Instant::now(), transmit.id, UNREACHABLE);
        }
    }

    /// Hands a reply to the lifecycle under the id of the oldest request of its node. A late
    /// reply to an earlier operation's request carries that operation's id, which the
    /// lifecycle ignores.
    fn deliver(&mut self, lock: &mut Lifecycle, (node, reply): Incoming) {
        let Some(reply) = reply else {
            self.streams[node] = None;
            for id in self.in_flight[node].drain(..) {
                lock.handle_reply(Instant::now(), id, UNREACHABLE);
            }
            return;
        };
        if let Some(id) = self.in_flight[node].pop_front() {
            lock.handle_reply(Instant::now(), id, reply);
        }
    }
}

fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let addr = addr
        .to_socket_addrs()?
        .next()
        .ok_or(std::io::ErrorKind::NotFound)?;
    let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(Duration::from_millis(200)))?;
    Ok(stream)
}

/// Reads `stream` until it closes, parsing replies as they complete; each goes to `tx`.
fn read_replies(node: usize, mut stream: TcpStream, tx: Sender<Incoming>) {
    std::thread::spawn(move || {
        let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
        loop {
            match resp::parse_reply(&buf) {
                Ok(Some((reply, used))) => {
                    buf.drain(..used);
                    if tx.send((node, Some(reply))).is_err() {
                        return;
                    }
                }
                Ok(None) => match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                },
                Err(_) => break, // not RESP: the connection is useless
            }
        }
        let _ = tx.send((node, None));
    });
}

/// The driver loop: drain outputs; on `Wait`, block until a reply comes or the instant passes.
/// Returns the next event, or `None` once the lifecycle is idle.
fn next_event(lock: &mut Lifecycle, nodes: &mut Nodes) -> Option<LockEvent> {
    loop {
        let now = Instant::now();
        match lock.poll_output(now) {
            LockOutput::Send(transmit) => nodes.send(lock, transmit),
            LockOutput::Wait { at, .. } => {
                match nodes
                    .replies
                    .recv_timeout(at.saturating_duration_since(now))
                {
                    Ok(incoming) => nodes.deliver(lock, incoming),
                    Err(_) => lock.handle_timeout(Instant::now()),
                }
            }
            LockOutput::Event(event) => return Some(event),
            LockOutput::Idle => return None,
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut addrs: Vec<String> = std::env::args().skip(1).collect();
    // No addresses: three local servers, stopped when `_local` is dropped at the end.
    let _local = if addrs.is_empty() {
        let servers =
            redlock_local::Servers::try_start_with(3, &redlock_local::ServerOptions::new())?;
        addrs = servers.addrs().iter().map(ToString::to_string).collect();
        Some(servers)
    } else {
        None
    };
    let mut nodes = Nodes::connect(&addrs);
    let config = Config::new(addrs.len())?;
    // Tokens must be unguessable: a CSPRNG seeded from the OS.
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)?;
    let mut rng = ChaCha8Rng::from_seed(seed);

    let ttl = Duration::from_secs(10);
    let request = LockRequest::new("redlock-example", ttl);
    let start = Instant::now();
    let mut lock = Lifecycle::acquire(start, &config, &request, &mut rng)?;
    let lease = match next_event(&mut lock, &mut nodes) {
        Some(LockEvent::Acquired(lease)) => lease,
        Some(LockEvent::NotAcquired(failure)) => {
            println!(
                "not acquired after {} round(s): {:?}",
                failure.attempts, failure.reason
            );
            println!("  votes: {:?}", failure.votes);
            return Ok(());
        }
        other => return Err(format!("unexpected: {other:?}").into()),
    };
    println!(
        "acquired in {:?} after {} round(s); valid for {:?}",
        start.elapsed(),
        lease.attempts(),
        lease.remaining(Instant::now())
    );
    println!("  votes: {:?}", lease.votes());

    // ... the protected work runs here, and must end before the lease's `valid_until()` ...

    lock.extend(Instant::now(), ttl)?;
    match next_event(&mut lock, &mut nodes) {
        Some(LockEvent::Extended {
            outcome: ExtendOutcome::Extended { votes, .. },
            ..
        }) => println!("extended; votes: {votes:?}"),
        Some(LockEvent::Extended {
            outcome: ExtendOutcome::NotExtended { reason, votes },
            ..
        }) => println!("not extended ({reason:?}); votes: {votes:?}"),
        other => return Err(format!("unexpected: {other:?}").into()),
    }
    // A failed extension leaves the lease as it was; a successful one never shortens it.
    if let Some(lease) = lock.lease() {
        println!("  valid for {:?}", lease.remaining(Instant::now()));
    }

    lock.release(Instant::now());
    match next_event(&mut lock, &mut nodes) {
        Some(LockEvent::Released(report)) => println!(
            "released on {} of {} node(s): {:?}",
            report.released(),
            addrs.len(),
            report.nodes
        ),
        other => return Err(format!("unexpected: {other:?}").into()),
    }
    Ok(())
}
