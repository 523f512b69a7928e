//! One worker thread per node, owning that node's connection and running its requests in order.

use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

use redlock_core::{Command, NodeErrorKind, Reply, RequestId};
use redlock_redis::{NodeAddr, Request, map_error, map_result, needs_new_connection};

/// What a waiting lock receives: a request's answer, or a release notice for its keys.
#[derive(Debug)]
pub(crate) enum Arrival {
    Reply(RequestId, Reply),
    Notice,
}

/// One request for a node: the answer goes to `reply_to` (if anyone still listens).
pub(crate) struct Job {
    pub(crate) id: RequestId,
    pub(crate) command: Command,
    pub(crate) reply_to: Sender<Arrival>,
}

/// A node's worker. Requests run one after another, in the order they were submitted, so a
/// lock's release always runs on a node after that node's earlier request of the same lock.
pub(crate) struct Node {
    jobs: Sender<Job>,
    addr: NodeAddr,
}

impl Node {
    pub(crate) fn spawn(addr: NodeAddr, io_timeout: Duration) -> Self {
        let (jobs, queue) = mpsc::channel();
        let label = addr.label().clone();
        let worker_addr = addr.clone();
        let name = format!("redlock-node-{label}");
        // The worker ends when the client (every sender) is gone.
        let spawned = thread::Builder::new()
            .name(name)
            .spawn(move || Worker::new(worker_addr, io_timeout).run(queue));
        if let Err(err) = spawned {
            tracing::error!(node = %label, %err, "could not start the node's worker thread");
        }
        Self { jobs, addr }
    }

    pub(crate) fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    /// Queues `job`; if the worker is gone, answers it with a connection error at once.
    pub(crate) fn submit(&self, job: Job) {
        if let Err(mpsc::SendError(job)) = self.jobs.send(job) {
            let _ = job.reply_to.send(Arrival::Reply(
                job.id,
                Reply::Error(NodeErrorKind::Connection),
            ));
        }
    }
}

struct Worker {
    addr: NodeAddr,
    io_timeout: Duration,
    conn: Option<redis::Connection>,
}

impl Worker {
    fn new(addr: NodeAddr, io_timeout: Duration) -> Self {
        Self {
            addr,
            io_timeout,
            conn: None,
        }
    }

    fn run(mut self, queue: Receiver<Job>) {
        for job in queue {
            let started = Instant::now();
            let reply = self.execute(&job.command);
            tracing::debug!(node = %self.addr.label(), ?reply, latency = ?started.elapsed(), "reply");
            let _ = job.reply_to.send(Arrival::Reply(job.id, reply));
        }
    }

    fn connect(&mut self) -> Result<&mut redis::Connection, redis::RedisError> {
        if self.conn.is_none() {
            let conn = self
                .addr
                .client()
                .get_connection_with_timeout(self.io_timeout)?;
            conn.set_read_timeout(Some(self.io_timeout))?;
            conn.set_write_timeout(Some(self.io_timeout))?;
            self.conn = Some(conn);
        }
        match self.conn.as_mut() {
            Some(conn) => Ok(conn),
            None => unreachable!("connected just above"),
        }
    }

    /// Runs `command`, never for longer than about two I/O timeouts (connect, then reply). A
    /// connection that failed or timed out is dropped, never reused: a late reply would be read
    /// as the answer to the next command.
    fn execute(&mut self, command: &Command) -> Reply {
        let request = Request::new(command);
        let result = match self.connect() {
            Ok(conn) => request.run(conn),
            Err(err) => Err(err),
        };
        match result {
            Err(err) if err.is_io_error() || err.is_timeout() || needs_new_connection(&err) => {
                self.conn = None;
                Reply::Error(map_error(&err))
            }
            result => map_result(result),
        }
    }
}
