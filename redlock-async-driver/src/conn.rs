//! One reconnecting, multiplexed connection per node, and running a command on it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redlock_core::{Command, Reply};
use redlock_redis::{NodeAddr, Request, map_error, map_result, needs_new_connection};

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

    pub(crate) fn label(&self) -> &Arc<str> {
        self.addr.label()
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

    /// Runs `command`. The connection's own response timeout (the I/O timeout) bounds each
    /// request it sends (a script the node does not know takes two: `EVALSHA`, then loading
    /// it), and its connection timeout bounds connecting: no timer of ours per request.
    pub(crate) async fn run(&self, command: &Command) -> Reply {
        let request = Request::new(command);
        let mut conn = match self.connection() {
            Ok(conn) => conn,
            Err(err) => return Reply::Error(map_error(&err)),
        };
        match request.run_async(&mut conn).await {
            Err(err) if needs_new_connection(&err) => {
                self.forget_connection();
                Reply::Error(map_error(&err))
            }
            result => map_result(result),
        }
    }
}
