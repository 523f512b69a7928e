//! K independent `redis-server` processes: the N nodes of a Redlock deployment.

use std::net::SocketAddr;
use std::ops::{Index, IndexMut};

use redis::ToRedisArgs;

use crate::error::HarnessError;
use crate::options::ServerOptions;
use crate::server::{self, RedisServer};

/// Independent Redis nodes (not a Redis Servers), each a [`RedisServer`].
///
/// ```no_run
/// use redlock_local::Servers;
///
/// let mut nodes = Servers::start(5);
/// nodes[0].set("lock", "token");
/// nodes.kill(1);
/// assert_eq!(nodes.count_holding("lock", "token"), 1);
/// ```
#[derive(Debug)]
pub struct Servers {
    servers: Vec<RedisServer>,
}

impl Servers {
    /// Starts `count` servers with default options, all at once.
    ///
    /// # Panics
    /// If one cannot be started; the message says why.
    pub fn start(count: usize) -> Self {
        Self::start_with(count, &ServerOptions::new())
    }

    /// Starts `count` servers with `options`, all at once.
    ///
    /// # Panics
    /// If one cannot be started; the message says why.
    pub fn start_with(count: usize, options: &ServerOptions) -> Self {
        Self::try_start_with(count, options).unwrap_or_else(|err| panic!("{err}"))
    }

    /// Starts `count` servers with `options`: spawns every process, then waits for each.
    pub fn try_start_with(count: usize, options: &ServerOptions) -> Result<Self, HarnessError> {
        server::start_many(options, count).map(|servers| Self { servers })
    }

    /// Starts one server per entry of `each` (e.g. a mix of Redis and Valkey nodes).
    pub fn try_start_each(each: &[ServerOptions]) -> Result<Self, HarnessError> {
        server::start_each(each).map(|servers| Self { servers })
    }

    /// The number of servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are no servers.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The servers, in start order.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// Every server's [`RedisServer::url`].
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// Every server's address.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.servers.iter().map(RedisServer::addr).collect()
    }

    /// [`RedisServer::kill`] on server `index`.
    pub fn kill(&mut self, index: usize) {
        self.servers[index].kill();
    }

    /// [`RedisServer::restart_empty`] on server `index`.
    pub fn restart_empty(&mut self, index: usize) {
        self.servers[index].restart_empty();
    }

    /// [`RedisServer::restart_from_snapshot`] on server `index`.
    pub fn restart_from_snapshot(&mut self, index: usize, snapshot: &[u8]) {
        self.servers[index].restart_from_snapshot(snapshot);
    }

    /// [`RedisServer::pause`] on server `index`.
    pub fn pause(&mut self, index: usize) {
        self.servers[index].pause();
    }

    /// [`RedisServer::resume`] on server `index`.
    pub fn resume(&mut self, index: usize) {
        self.servers[index].resume();
    }

    /// How many servers hold `key` with exactly `value`. Killed and paused servers are not asked
    /// and count as not holding it.
    pub fn count_holding(&self, key: impl ToRedisArgs, value: impl ToRedisArgs) -> usize {
        let expected = value.to_redis_args().concat();
        self.serving()
            .filter(|server| server.get(&key).is_some_and(|held| held == expected))
            .count()
    }

    /// How many servers have `key`, whatever its value. Killed and paused servers are not asked.
    pub fn count_with_key(&self, key: impl ToRedisArgs) -> usize {
        self.serving().filter(|server| server.exists(&key)).count()
    }

    fn serving(&self) -> impl Iterator<Item = &RedisServer> {
        self.servers
            .iter()
            .filter(|server| server.is_running() && !server.is_paused())
    }
}

impl Index<usize> for Servers {
    type Output = RedisServer;

    fn index(&self, index: usize) -> &RedisServer {
        &self.servers[index]
    }
}

impl IndexMut<usize> for Servers {
    fn index_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.servers[index]
    }
}
