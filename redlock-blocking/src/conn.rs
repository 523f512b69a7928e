//! One worker thread per node, owning that node's connection and writing the batches the driver
//! sends it, in order.

use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

use redlock_core::Dialect;
use redlock_core::{Batch, NodeErrorKind, Reply, Transmit};
use redlock_redis::{BatchReplies, NodeAddr, detect_dialect, run_batch};

use crate::driver::Input;

/// The most requests one pipeline carries.
const MAX_BATCH: usize = 256;

/// A node's worker, as the driver reaches it.
pub(crate) struct Worker {
    batches: Sender<Batch>,
}

impl Worker {
    /// Starts the worker thread of node `addr`; its replies go to `driver`. It ends when the
    /// driver is gone.
    pub(crate) fn spawn(addr: NodeAddr, io_timeout: Duration, driver: Sender<Input>) -> Self {
        let (batches, queue) = mpsc::channel();
        let label = addr.label().clone();
        let spawned = thread::Builder::new()
            .name(format!("redlock-node-{label}"))
            .spawn(move || Connection::new(addr, io_timeout).run(&queue, &driver));
        if let Err(err) = spawned {
            tracing::error!(node = %label, %err, "could not start the node's worker thread");
        }
        Self { batches }
    }

    /// Hands `batch` to the worker; if it is gone, answers every request with a connection
    /// error at once (no request may stay unanswered: its node would stay busy for its lock).
    pub(crate) fn send(&self, batch: Batch, driver: &Sender<Input>) {
        if let Err(mpsc::SendError(batch)) = self.batches.send(batch) {
            let failed = Reply::Error(NodeErrorKind::Connection);
            let replies = batch.transmits.iter().map(|t| (t.id, failed));
            let _ = driver.send(Input::Replies(replies.collect()));
        }
    }
}

struct Connection {
    addr: NodeAddr,
    io_timeout: Duration,
    /// The connection and what its node can run, learnt when it was made.
    conn: Option<(redis::Connection, Dialect)>,
}

impl Connection {
    fn new(addr: NodeAddr, io_timeout: Duration) -> Self {
        Self {
            addr,
            io_timeout,
            conn: None,
        }
    }

    /// Writes batches until the driver is gone: what queued up meanwhile goes out together, as
    /// one pipeline (one round trip, same order). The driver never puts two requests of one
    /// lock in flight on a node, so joining batches never lets a request overtake another of
    /// its lock.
    fn run(mut self, queue: &Receiver<Batch>, driver: &Sender<Input>) {
        while let Ok(first) = queue.recv() {
            let mut transmits = first.transmits;
            while transmits.len() < MAX_BATCH {
                let Ok(more) = queue.try_recv() else { break };
                transmits.extend(more.transmits);
            }
            let started = Instant::now();
            // A panic inside the redis crate must not leave these requests unanswered (their
            // locks would stay busy on this node for good): they fail, and the connection goes.
            let run =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute(&transmits)));
            let replies = run.unwrap_or_else(|_| {
                tracing::error!(node = %self.addr.label(), "a request panicked: answered as failed");
                self.conn = None;
                BatchReplies::panicked(&transmits)
            });
            replies.trace(self.addr.label(), started.elapsed());
            let answered = replies.answers;
            if driver.send(Input::Replies(answered)).is_err() {
                return;
            }
        }
    }

    /// Runs `batch`, never for longer than about two I/O timeouts (connect, then reply). A
    /// connection whose transport broke is dropped; one whose reply timed out is kept, and the
    /// late reply is skipped when it comes (never read as another request's answer), so that
    /// every request of this node still runs in the order it was sent ([`run_batch`]).
    fn execute(&mut self, batch: &[Transmit]) -> BatchReplies {
        let io_timeout = self.io_timeout;
        let replies = match self.connect() {
            Ok((conn, dialect)) => run_batch(conn, batch, dialect, io_timeout),
            Err(err) => BatchReplies::failed(batch, &err),
        };
        if replies.reconnect {
            self.conn = None;
        }
        replies
    }

    fn connect(&mut self) -> Result<(&mut redis::Connection, &Dialect), redis::RedisError> {
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => {
                let mut conn = self
                    .addr
                    .client()
                    .get_connection_with_timeout(self.io_timeout)?;
                conn.set_read_timeout(Some(self.io_timeout))?;
                conn.set_write_timeout(Some(self.io_timeout))?;
                let dialect = detect_dialect(&mut conn)?;
                tracing::debug!(node = %self.addr.label(), ?dialect, "connected");
                (conn, dialect)
            }
        };
        let (conn, dialect) = self.conn.insert(conn);
        Ok((conn, dialect))
    }
}
