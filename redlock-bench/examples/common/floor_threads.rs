//! The threads floor the blocking example side measures against: the commands of
//! [`super::floor`]'s floor (`SET key token NX PX 10000`, then the release script), handed by
//! the caller's thread to one thread and blocking connection per node at once, the caller
//! waiting until all 5 answered. The fan-out of redlock-bench's threads floor, without its
//! pipelining of concurrent calls (one caller here). Never asserts a time.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};

use redlock_core::RELEASE_SCRIPT;

/// One thread and connection per node; the threads end when this is dropped.
pub(crate) struct FloorThreads {
    nodes: Vec<(Sender<Arc<Call>>, JoinHandle<()>)>,
}

/// One command for every node, and how many answered.
struct Call {
    release: bool,
    key: String,
    token: String,
    answered: Mutex<usize>,
    all_answered: Condvar,
}

impl FloorThreads {
    /// Connects to the nodes at `urls`, one thread each.
    pub(crate) fn connect(urls: Vec<String>) -> Self {
        let nodes = urls
            .into_iter()
            .map(|url| {
                let client = redis::Client::open(url).expect("url");
                let mut conn = client.get_connection().expect("connect");
                let (calls, queue) = mpsc::channel();
                let thread = thread::spawn(move || serve(&mut conn, &queue));
                (calls, thread)
            })
            .collect();
        Self { nodes }
    }

    /// One cycle: `key` set to `token` on every node, then released on every node.
    pub(crate) fn cycle(&self, key: &str, token: &str) {
        self.fan_out(false, key, token);
        self.fan_out(true, key, token);
    }

    fn fan_out(&self, release: bool, key: &str, token: &str) {
        let call = Arc::new(Call {
            release,
            key: key.to_owned(),
            token: token.to_owned(),
            answered: Mutex::new(0),
            all_answered: Condvar::new(),
        });
        for (calls, _) in &self.nodes {
            calls.send(call.clone()).expect("a node thread");
        }
        let answered = call.answered.lock().unwrap_or_else(PoisonError::into_inner);
        let _answered = call
            .all_answered
            .wait_while(answered, |answered| *answered < self.nodes.len())
            .unwrap_or_else(PoisonError::into_inner);
    }
}

impl Drop for FloorThreads {
    fn drop(&mut self) {
        for (calls, thread) in self.nodes.drain(..) {
            drop(calls);
            let _ = thread.join();
        }
    }
}

/// A node thread: runs each call on `conn` and counts its answer, until the floor is dropped.
fn serve(conn: &mut redis::Connection, queue: &Receiver<Arc<Call>>) {
    let release = redis::Script::new(RELEASE_SCRIPT);
    while let Ok(call) = queue.recv() {
        if call.release {
            let _: i64 = release
                .key(&call.key)
                .arg(&call.token)
                .invoke(conn)
                .expect("release script");
        } else {
            let _: Option<String> = redis::cmd("SET")
                .arg(&call.key)
                .arg(&call.token)
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query(conn)
                .expect("SET");
        }
        *call.answered.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        call.all_answered.notify_one();
    }
}
