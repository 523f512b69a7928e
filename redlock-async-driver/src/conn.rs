//! One reconnecting, multiplexed connection per node, and writing a batch on it.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redlock_core::Batch;
use redlock_redis::Answers;
use redlock_redis::{BatchReplies, NodeAddr, run_batch_async};

/// A node and its connection, made on first use (a node that is down at start is not an error:
/// its requests fail until it comes back).
pub(crate) struct Node {
    addr: NodeAddr,
    io_timeout: Duration,
    manager: Mutex<Option<ConnectionManager>>,
}

impl Node {
    pub(crate) fn new(addr: NodeAddr, io_timeout: Duration) -> Self {
        Self {
            addr,
            io_timeout,
            manager: Mutex::new(None),
        }
    }

    pub(crate) fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    pub(crate) fn io_timeout(&self) -> Duration {
        self.io_timeout
    }

    /// The shared connection, made lazily: one TCP connection per node for the whole client.
    fn connection(&self) -> Result<ConnectionManager, redis::RedisError> {
        let mut slot = self.manager.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(manager) = &*slot {
            return Ok(manager.clone());
        }
        // One attempt per request (the engine decides about retries), bounded by the I/O timeout.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_connection_timeout(Some(self.io_timeout))
            .set_response_timeout(Some(self.io_timeout));
        let manager = self.addr.client().get_connection_manager_lazy(config)?;
        *slot = Some(manager.clone());
        Ok(manager)
    }

    fn forget_connection(&self) {
        *self.manager.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Writes `batch` as one pipeline and reads its replies, one per request. The connection's
    /// response timeout (the I/O timeout) bounds every read and its connection timeout bounds
    /// connecting: no timer of ours. A failed transport is an error reply for each request.
    pub(crate) async fn run(&self, batch: Batch) -> Answers {
        let sent = Instant::now();
        let replies = match self.connection() {
            Ok(mut conn) => run_batch_async(&mut conn, &batch.transmits).await,
            Err(err) => BatchReplies::failed(&batch.transmits, &err),
        };
        if replies.rebuild {
            self.forget_connection();
        }
        replies.trace(self.addr.label(), sent.elapsed());
        replies.answers
    }
}
