//! One multiplexed connection per node, made again when it breaks, and writing a batch on it.
//!
//! Not the `redis` crate's `ConnectionManager`: that one reconnects silently and relays pushes
//! through a task of its own, so a push could reach us after the reply it came before, and a
//! reply on a new connection could be counted as if the old one had carried it. Here each
//! connection has its own [`Tracking`], fed in the connection's read loop (the `redis` crate
//! calls the push sender there, before it completes any later reply), and a connection that
//! broke is dropped and closed for its watch before the next batch makes a new one.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::{
    Answers, BatchReplies, NodeAddr, Tracking, detect_dialect_async, resp3_client, run_batch_async,
    speaks_no_resp3,
};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redlock_core::Batch;

type Connected = crate::Connected<MultiplexedConnection>;

/// A node and its connection, made on first use (a node that is down at start is not an error:
/// its requests fail until it comes back).
pub(crate) struct Node {
    addr: NodeAddr,
    io_timeout: Duration,
    /// How the connection watches its node's memory.
    watch: crate::MemoryWatchSettings,
    connected: Mutex<Option<Connected>>,
}

impl Node {
    pub(crate) fn new(
        addr: NodeAddr,
        io_timeout: Duration,
        watch: crate::MemoryWatchSettings,
    ) -> Self {
        Self {
            addr,
            io_timeout,
            watch,
            connected: Mutex::new(None),
        }
    }

    pub(crate) fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    pub(crate) fn io_timeout(&self) -> Duration {
        self.io_timeout
    }

    fn config(&self) -> AsyncConnectionConfig {
        // One attempt per request (the engine decides about retries), bounded by the I/O timeout.
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.io_timeout))
            .set_response_timeout(Some(self.io_timeout))
    }

    /// The shared connection, made when there is none: one TCP connection per node for the
    /// whole client. RESP3 with client tracking where the node has them; RESP2, untracked,
    /// where it does not speak RESP3.
    async fn connection(&self) -> Result<Connected, redis::RedisError> {
        if let Some(connected) = &*self
            .connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            return Ok(connected.clone());
        }
        let connected = match self.watch.untracked {
            true => self.connect_untracked().await?,
            false => match self.connect_tracked().await {
                Ok(connected) => connected,
                Err(err) if !speaks_no_resp3(&err) => return Err(err),
                // No RESP3 (`HELLO 3` refused): the plain connection, restart checks by script.
                Err(_) => self.connect_untracked().await?,
            },
        };
        let mut slot = self
            .connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(slot.get_or_insert(connected).clone())
    }

    /// A connection without client tracking: every restart-checked acquisition is checked on
    /// its own.
    async fn connect_untracked(&self) -> Result<Connected, redis::RedisError> {
        let mut conn = self
            .addr
            .client()
            .get_multiplexed_async_connection_with_config(&self.config())
            .await?;
        let dialect = self.addr.dialect(detect_dialect_async(&mut conn).await?);
        Connected::new(conn, dialect, None, self.addr.label())
    }

    async fn connect_tracked(&self) -> Result<Connected, redis::RedisError> {
        let tracking = Tracking::new(self.watch.fault, self.addr.database());
        let heard = tracking.clone();
        let config = self.config().set_push_sender(move |push: redis::PushInfo| {
            heard.handle_push(&push);
            Ok::<(), std::convert::Infallible>(())
        });
        let mut conn = resp3_client(self.addr.client())?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let dialect = self.addr.dialect(detect_dialect_async(&mut conn).await?);
        let tracked = tracking.tracking_on().query_async::<()>(&mut conn).await;
        if tracked.is_ok() {
            // The node's eviction events, heard on this connection before any later reply; a
            // user denied the channel is not an error: its acquisitions read the count.
            match conn.subscribe(tracking.eviction_channel()).await {
                Ok(()) => tracking.subscribed(),
                Err(err) => tracing::debug!(node = %self.addr.label(), %err, "no eviction events"),
            }
        }
        Connected::new(conn, dialect, Some((tracking, tracked)), self.addr.label())
    }

    /// Drops the connection (the next batch makes a new one); its watch vouches for nothing
    /// any more.
    fn forget_connection(&self) {
        let gone = self
            .connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(connected) = gone {
            connected.close();
        }
    }

    /// Writes `batch` as one pipeline and reads its replies, one per request. The connection's
    /// response timeout (the I/O timeout) bounds every read and its connection timeout bounds
    /// connecting: no timer of ours. A failed transport is an error reply for each request, and
    /// the connection is made again for the next batch; a timeout keeps it (the reply is
    /// matched and dropped when it comes, and this node's requests stay in order).
    pub(crate) async fn run(&self, batch: Batch) -> Answers {
        let sent = Instant::now();
        let replies = match self.connection().await {
            Ok(Connected {
                mut conn,
                dialect,
                tracking,
            }) => run_batch_async(&mut conn, &batch.transmits, &dialect, tracking.as_ref()).await,
            Err(err) => BatchReplies::failed(&batch.transmits, &err),
        };
        if replies.reconnect || replies.rebuild {
            self.forget_connection();
        }
        replies.trace(self.addr.label(), sent.elapsed());
        replies.answers
    }
}
