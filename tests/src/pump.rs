//! One proxied connection and the loop that moves its bytes in one direction.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use crate::proxy::Shared;

/// Longest a pump waits for bytes before looking at its queue again while chunks are queued.
const TICK: Duration = Duration::from_millis(5);
/// Longest a pump with nothing queued blocks in a read (stops and partitions also shut its
/// sockets down, which wakes it at once).
const IDLE_WAIT: Duration = Duration::from_millis(100);
/// Timeout of one blocking write, after which the pump checks whether it should stop.
const WRITE_TIMEOUT: Duration = Duration::from_millis(100);
/// Size of one read.
const CHUNK: usize = 16 * 1024;

/// Which way a pump moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    ToServer,
    ToClient,
}

/// The two sockets of one proxied connection.
#[derive(Debug)]
pub(crate) struct Conn {
    client: TcpStream,
    server: TcpStream,
}

impl Conn {
    pub(crate) fn new(client: TcpStream, server: TcpStream) -> io::Result<Self> {
        for stream in [&client, &server] {
            stream.set_nonblocking(false)?;
            stream.set_nodelay(true)?;
            stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        }
        Ok(Self { client, server })
    }

    /// Shuts both sockets down, which ends both pumps.
    pub(crate) fn close(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }
}

/// What became of the connection after delivering.
enum Delivery {
    Open,
    /// A reply cut by `reset_after`: close the connection.
    Cut,
}

/// Moves bytes in `direction` until the source closes, an error occurs or the proxy stops,
/// applying the controls in force to every chunk.
pub(crate) fn run(shared: &Shared, conn: &Conn, direction: Direction) {
    let (mut src, dst) = match direction {
        Direction::ToServer => (&conn.client, &conn.server),
        Direction::ToClient => (&conn.server, &conn.client),
    };
    let mut queue = VecDeque::new();
    let mut buf = vec![0; CHUNK];
    let mut src_open = true;
    while !shared.is_stopped() {
        if src_open {
            let _ = src.set_read_timeout(Some(read_wait(&queue)));
            match src.read(&mut buf) {
                Ok(0) => src_open = false,
                Ok(n) => {
                    let due = Instant::now() + shared.controls().latency;
                    queue.push_back((due, buf[..n].to_vec()));
                }
                Err(err) if is_retryable(&err) => {}
                Err(_) => break,
            }
        } else {
            thread::sleep(TICK);
        }
        match deliver(shared, dst, direction, &mut queue) {
            Ok(Delivery::Open) => {}
            Ok(Delivery::Cut) | Err(_) => break,
        }
        if !src_open && queue.is_empty() && !shared.controls().stalled {
            // Pass the half-close on; the other direction may still be busy.
            let _ = dst.shutdown(Shutdown::Write);
            return;
        }
    }
    conn.close();
}

/// How long the next read may block: until the first queued chunk is due, at most a tick.
fn read_wait(queue: &VecDeque<(Instant, Vec<u8>)>) -> Duration {
    queue.front().map_or(IDLE_WAIT, |(due, _)| {
        due.saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), TICK)
    })
}

/// Writes every queued chunk that is due, unless stalled.
fn deliver(
    shared: &Shared,
    dst: &TcpStream,
    direction: Direction,
    queue: &mut VecDeque<(Instant, Vec<u8>)>,
) -> io::Result<Delivery> {
    while let Some((due, chunk)) = queue.front() {
        if *due > Instant::now() {
            break;
        }
        let limit = {
            let mut controls = shared.controls();
            if controls.stalled {
                break;
            }
            match direction {
                Direction::ToServer => None,
                Direction::ToClient => controls.take_reply_budget(chunk.len()),
            }
        };
        let Some((_, chunk)) = queue.pop_front() else {
            break;
        };
        let forwarded = &chunk[..limit.unwrap_or(chunk.len())];
        write_all(shared, dst, forwarded)?;
        let counter = match direction {
            Direction::ToServer => &shared.bytes_to_server,
            Direction::ToClient => &shared.bytes_to_client,
        };
        counter.fetch_add(forwarded.len() as u64, Ordering::Relaxed);
        if limit.is_some() {
            return Ok(Delivery::Cut);
        }
    }
    Ok(Delivery::Open)
}

/// `write_all` that gives up when the proxy stops instead of blocking forever.
fn write_all(shared: &Shared, mut dst: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        if shared.is_stopped() {
            return Err(io::Error::other("proxy stopped"));
        }
        match dst.write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(err) if is_retryable(&err) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

fn is_retryable(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}
