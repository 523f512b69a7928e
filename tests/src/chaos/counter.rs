//! The clients' connections to the counter server: the non-atomic `GET` / `SET` of a critical
//! section. The counter server is fault-free and not under test, so its errors panic.

use std::future::Future;

use redis::aio::MultiplexedConnection;

/// A connection to the counter server.
pub(crate) trait Counter: Send {
    /// The integer at `key` (0 if absent).
    fn get(&mut self, key: &str) -> impl Future<Output = i64> + Send;
    /// Sets `key` to `value`.
    fn set(&mut self, key: &str, value: i64) -> impl Future<Output = ()> + Send;
}

/// The async clients' connection (on whichever runtime it was made on).
impl Counter for MultiplexedConnection {
    async fn get(&mut self, key: &str) -> i64 {
        let value: Option<i64> = redis::cmd("GET")
            .arg(key)
            .query_async(self)
            .await
            .unwrap_or_else(|err| panic!("GET {key} on the counter server: {err}"));
        value.unwrap_or(0)
    }

    async fn set(&mut self, key: &str, value: i64) {
        let () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query_async(self)
            .await
            .unwrap_or_else(|err| panic!("SET {key} on the counter server: {err}"));
    }
}

/// The blocking clients' connection: the futures block, then are ready on their first poll.
impl Counter for redis::Connection {
    async fn get(&mut self, key: &str) -> i64 {
        let value: Option<i64> = redis::cmd("GET")
            .arg(key)
            .query(self)
            .unwrap_or_else(|err| panic!("GET {key} on the counter server: {err}"));
        value.unwrap_or(0)
    }

    async fn set(&mut self, key: &str, value: i64) {
        let () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(self)
            .unwrap_or_else(|err| panic!("SET {key} on the counter server: {err}"));
    }
}
