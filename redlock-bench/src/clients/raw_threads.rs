//! The blocking floor's nodes: one thread and one blocking `redis::Connection` per node.
//!
//! A caller hands its command to the 5 node threads at once and waits until all 5 answered:
//! the fan-out of the async floors, with threads. A node thread writes what queued up while it
//! waited as one pipeline (one write, replies in order): what the multiplexed connection of the
//! async floors does for concurrent tasks, and what redlock-blocking's node workers do. Without
//! it, 64 threads would queue behind one round trip at a time per node, and the floor would be
//! a ceiling.
//!
//! Its futures block in their first poll and are always ready after it: [`RawClient`]'s one
//! lock logic runs on the caller's thread through [`now`], never on an executor.

use std::future::Future;
use std::pin::pin;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::{self, JoinHandle};

use redis::{Pipeline, Script, Value};

use super::raw::{
    NODES, Nodes, RawClient, RawHeld, granted, native_release, release_invocation, release_script,
    set_command,
};
use super::{AsyncClient, BlockingClient};

/// The most commands one pipeline carries.
const MAX_PIPELINE: usize = 256;

/// One thread and connection per node; the threads end when this is dropped.
pub(crate) struct NodeThreads {
    workers: Vec<Worker>,
}

struct Worker {
    calls: Sender<Arc<Call>>,
    thread: JoinHandle<()>,
}

/// One command for every node, and the tally of their answers.
struct Call {
    release: bool,
    key: String,
    token: String,
    tally: Mutex<Tally>,
    all_answered: Condvar,
}

#[derive(Default)]
struct Tally {
    answered: usize,
    granted: usize,
}

impl Call {
    fn answer(&self, granted: bool) {
        let mut tally = self.tally.lock().unwrap_or_else(PoisonError::into_inner);
        tally.answered += 1;
        tally.granted += usize::from(granted);
        if tally.answered == NODES {
            self.all_answered.notify_one();
        }
    }

    /// Waits until every node answered; how many granted.
    fn wait(&self) -> usize {
        let tally = self.tally.lock().unwrap_or_else(PoisonError::into_inner);
        let tally = self
            .all_answered
            .wait_while(tally, |tally| tally.answered < NODES)
            .unwrap_or_else(PoisonError::into_inner);
        tally.granted
    }
}

impl NodeThreads {
    /// Connects to every node at `urls`, one thread each.
    ///
    /// # Panics
    /// Unless there are exactly [`NODES`] reachable nodes: the bench starts them itself.
    pub(crate) fn connect(urls: &[String]) -> Self {
        assert_eq!(
            urls.len(),
            NODES,
            "the raw floor needs {NODES} nodes, got {}",
            urls.len()
        );
        let workers = urls
            .iter()
            .enumerate()
            .map(|(index, url)| {
                let client = redis::Client::open(url.as_str()).expect("a node URL the bench made");
                let conn = client
                    .get_connection()
                    .expect("a connection to a local redis-server the bench started");
                let (calls, queue) = mpsc::channel();
                let mut node = Node {
                    client,
                    conn: Some(conn),
                    release: release_script(),
                };
                let thread = thread::Builder::new()
                    .name(format!("raw-node-{index}"))
                    .spawn(move || node.serve(&queue))
                    .expect("a thread for a node of the blocking floor");
                Worker { calls, thread }
            })
            .collect();
        Self { workers }
    }

    /// Hands one command to every node thread and waits for all their answers.
    fn fan_out(&self, release: bool, key: &str, token: &str) -> usize {
        let call = Arc::new(Call {
            release,
            key: key.to_owned(),
            token: token.to_owned(),
            tally: Mutex::new(Tally::default()),
            all_answered: Condvar::new(),
        });
        for worker in &self.workers {
            if let Err(mpsc::SendError(call)) = worker.calls.send(Arc::clone(&call)) {
                call.answer(false);
            }
        }
        call.wait()
    }
}

impl Drop for NodeThreads {
    fn drop(&mut self) {
        for Worker { calls, thread } in self.workers.drain(..) {
            drop(calls);
            // A node thread that panicked has already said so on stderr.
            let _ = thread.join();
        }
    }
}

impl Nodes for NodeThreads {
    async fn set_all(&self, key: &str, token: &str) -> usize {
        self.fan_out(false, key, token)
    }

    async fn release_all(&self, key: &str, token: &str) {
        self.fan_out(true, key, token);
    }
}

/// A node thread's side: its connection (made again after a failure) and the script.
struct Node {
    client: redis::Client,
    conn: Option<redis::Connection>,
    release: Script,
}

impl Node {
    /// Answers calls until the client is gone; what queued up meanwhile goes out together.
    fn serve(&mut self, queue: &Receiver<Arc<Call>>) {
        let mut calls = Vec::with_capacity(MAX_PIPELINE);
        while let Ok(first) = queue.recv() {
            calls.push(first);
            while calls.len() < MAX_PIPELINE {
                let Ok(more) = queue.try_recv() else { break };
                calls.push(more);
            }
            self.run(&calls);
            calls.clear();
        }
    }

    /// Runs `calls` (one command alone, several as one pipeline) and answers each of them.
    fn run(&mut self, calls: &[Arc<Call>]) {
        let conn = match self.conn.take() {
            Some(conn) => Ok(conn),
            None => self.client.get_connection(),
        };
        let Ok(mut conn) = conn else {
            calls.iter().for_each(|call| call.answer(false));
            return;
        };
        let healthy = match calls {
            [call] => {
                let reply: redis::RedisResult<Value> = if call.release {
                    match native_release(&call.key, &call.token) {
                        Some(cmd) => cmd.query(&mut conn),
                        None => release_invocation(&self.release, &call.key, &call.token)
                            .invoke(&mut conn),
                    }
                } else {
                    set_command(&call.key, &call.token).query(&mut conn)
                };
                call.answer(!call.release && granted(&reply));
                // A server's error reply leaves the connection in step; anything else may not.
                !matches!(&reply, Err(err) if !matches!(err.kind(), redis::ErrorKind::Server(_)))
            }
            _ => self.run_pipeline(calls, &mut conn),
        };
        // A connection that failed is never read again: a late reply would answer the next call.
        if healthy {
            self.conn = Some(conn);
        }
    }

    fn run_pipeline(&self, calls: &[Arc<Call>], conn: &mut redis::Connection) -> bool {
        let mut pipeline = Pipeline::with_capacity(calls.len());
        pipeline.ignore_errors();
        for call in calls {
            pipeline.add_command(if call.release {
                native_release(&call.key, &call.token)
                    .unwrap_or_else(|| evalsha(&self.release, &call.key, &call.token))
            } else {
                set_command(&call.key, &call.token)
            });
        }
        let Ok(replies) = pipeline.query::<Vec<Value>>(conn) else {
            calls.iter().for_each(|call| call.answer(false));
            return false;
        };
        let mut replies = replies.into_iter();
        for call in calls {
            // One reply per command; a missing one is a refusal, never a caller left waiting.
            let Some(reply) = replies.next() else {
                call.answer(false);
                continue;
            };
            if call.release {
                if matches!(&reply, Value::ServerError(err) if err.code() == "NOSCRIPT") {
                    // As `invoke` does alone: load the script, run it again.
                    let _: redis::RedisResult<Value> =
                        release_invocation(&self.release, &call.key, &call.token).invoke(conn);
                }
                call.answer(false);
            } else {
                call.answer(granted(&Ok(reply)));
            }
        }
        true
    }
}

/// The release script by hash, as a command of a pipeline (what `invoke` sends first).
fn evalsha(script: &Script, key: &str, token: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(1).arg(key).arg(token);
    cmd
}

/// The value of a future that is ready at its first poll, on this thread.
///
/// # Panics
/// If it is not ready: only the blocking floor's futures go through here.
fn now<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("the blocking floor's nodes answer within the first poll"),
    }
}

impl BlockingClient for RawClient<NodeThreads> {
    type Held = RawHeld;

    fn lock_key(&self, key: &str) -> Result<RawHeld, String> {
        now(AsyncClient::lock_key(self, key))
    }

    fn unlock(&self, held: RawHeld) {
        now(AsyncClient::unlock(self, held));
    }
}
