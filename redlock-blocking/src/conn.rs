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
    jobs: Sender<Task>,
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

    /// Returns a receiver that answers once every request queued so far has run (or at once
    /// if the worker is gone).
    pub(crate) fn barrier(&self) -> Receiver<()> {
        let (done, wait) = mpsc::channel();
        let _ = self.jobs.send(Task::Barrier(done));
        wait
    }

    /// Queues `job`; if the worker is gone, answers it with a connection error at once.
    pub(crate) fn submit(&self, job: Job) {
        if let Err(mpsc::SendError(Task::Run(job))) = self.jobs.send(Task::Run(job)) {
            let _ = job.reply_to.send(Arrival::Reply(
                job.id,
                Reply::Error(NodeErrorKind::Connection),
            ));
        }
    }
}

/// What a node's worker is asked to do.
enum Task {
    Run(Job),
    /// Answer once everything queued before has run.
    Barrier(Sender<()>),
}

/// The most requests one pipeline carries.
const MAX_BATCH: usize = 256;

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

    /// Runs requests until the client is gone: one at a time when they come one at a time, and
    /// everything that queued up meanwhile as one pipeline (one round trip, same order), so
    /// that many threads locking through one client do not queue behind each other's round
    /// trips.
    ///
    /// A pipeline carries at most one request per lock: a request the node answers `NOSCRIPT`
    /// runs again after the pipeline, and a later request of the same lock (its release) must
    /// not have run before it.
    fn run(mut self, queue: Receiver<Task>) {
        let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
        let mut next = None;
        loop {
            let first = match next.take() {
                Some(task) => task,
                None => match queue.recv() {
                    Ok(task) => task,
                    Err(_) => return,
                },
            };
            match first {
                Task::Run(job) => batch.push(job),
                Task::Barrier(done) => {
                    let _ = done.send(());
                    continue;
                }
            }
            while batch.len() < MAX_BATCH {
                let Ok(task) = queue.try_recv() else { break };
                match task {
                    Task::Run(job)
                        if !batch
                            .iter()
                            .any(|queued| queued.id.origin().lock() == job.id.origin().lock()) =>
                    {
                        batch.push(job);
                    }
                    // A second request of a lock already in the pipeline, or a barrier: after it.
                    task => {
                        next = Some(task);
                        break;
                    }
                }
            }
            let started = Instant::now();
            let replies = if let [job] = &batch[..] {
                vec![self.execute(&job.command)]
            } else {
                self.execute_batch(&batch)
            };
            for (job, reply) in batch.drain(..).zip(replies) {
                tracing::debug!(node = %self.addr.label(), ?reply, latency = ?started.elapsed(), "reply");
                redlock_redis::telemetry::node_reply(self.addr.label(), started.elapsed(), &reply);
                let _ = job.reply_to.send(Arrival::Reply(job.id, reply));
            }
        }
    }

    /// Runs `batch` as one pipeline; a command whose script the node does not know (`NOSCRIPT`)
    /// runs again on its own, which loads the script. One reply per job, in order.
    fn execute_batch(&mut self, batch: &[Job]) -> Vec<Reply> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for job in batch {
            pipe.add_command(Request::pipelined(&job.command));
        }
        let result: Result<Vec<redis::Value>, _> = match self.connect() {
            Ok(conn) => pipe.query(conn),
            Err(err) => Err(err),
        };
        match result {
            Ok(values) if values.len() == batch.len() => values
                .into_iter()
                .zip(batch)
                .map(|(value, job)| match &value {
                    redis::Value::ServerError(err) if err.code() == "NOSCRIPT" => {
                        self.execute(&job.command)
                    }
                    _ => map_result(Ok(value)),
                })
                .collect(),
            Ok(_) => {
                // Not one answer per command: the connection cannot be trusted any more.
                self.conn = None;
                vec![Reply::Error(NodeErrorKind::Protocol); batch.len()]
            }
            Err(err) => {
                if err.is_io_error() || err.is_timeout() || needs_new_connection(&err) {
                    self.conn = None;
                }
                let reply = Reply::Error(map_error(&err));
                vec![reply; batch.len()]
            }
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
