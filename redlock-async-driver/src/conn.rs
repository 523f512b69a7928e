//! One reconnecting, multiplexed connection per node, and writing a batch on it.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redlock_core::Batch;
use redlock_core::Dialect;
use redlock_redis::Answers;
use redlock_redis::{BatchReplies, NodeAddr, detect_dialect_async, run_batch_async};

/// A node and its connection, made on first use (a node that is down at start is not an error:
/// its requests fail until it comes back).
pub(crate) struct Node {
    addr: NodeAddr,
    io_timeout: Duration,
    /// The connection and what its node can run, learnt when it was first made.
    manager: Mutex<Option<(ConnectionManager, Dialect)>>,
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
    /// Its node's dialect is asked once, on its first use.
    async fn connection(&self) -> Result<(ConnectionManager, Dialect), redis::RedisError> {
        let made = {
            let slot = self.manager.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(made) = &*slot {
                return Ok(made.clone());
            }
            // One attempt per request (the engine decides about retries), bounded by the I/O
            // timeout.
            let config = ConnectionManagerConfig::new()
                .set_number_of_retries(0)
                .set_connection_timeout(Some(self.io_timeout))
                .set_response_timeout(Some(self.io_timeout));
            self.addr.client().get_connection_manager_lazy(config)?
        };
        let mut manager = made;
        // A node that does not answer is asked again with the next batch (this one will most
        // likely fail the same way).
        let dialect = detect_dialect_async(&mut manager).await?;
        tracing::debug!(node = %self.addr.label(), ?dialect, "connected");
        let mut slot = self.manager.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(slot.get_or_insert((manager, dialect)).clone())
    }

    fn forget_connection(&self) {
        *self.manager.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Writes `batch` as one pipeline and reads its replies, one per request. The connection's
    /// response timeout (the I/O timeout) bounds every read and its connection timeout bounds
    /// connecting: no timer of ours. A failed transport is an error reply for each request.
    pub(crate) async fn run(&self, batch: Batch) -> Answers {
        let sent = Instant::now();
        let replies = match self.connection().await {
            Ok((mut conn, dialect)) => run_batch_async(&mut conn, &batch.transmits, &dialect).await,
            Err(err) => BatchReplies::failed(&batch.transmits, &err),
        };
        if replies.rebuild {
            self.forget_connection();
        }
        replies.trace(self.addr.label(), sent.elapsed());
        replies.answers
    }
}
