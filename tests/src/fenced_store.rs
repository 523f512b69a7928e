//! A protected resource that checks fencing tokens: a value in Redis, on a server of its own
//! (not one of the lock's nodes), that accepts a write only if its fence is at least the largest
//! fence it accepted before — the pattern to copy for a database row, a file or an API.
//!
//! The check and the write are one Lua script, so no other writer can slip in between.

use redis::Script;

/// `KEYS[1]` = the value, `KEYS[2]` = the largest fence accepted; `ARGV[1]` = the fence,
/// `ARGV[2]` = the value. Answers 1 (written) or 0 (rejected: an older holder's write).
const WRITE_IF_FENCE_SCRIPT: &str = "\
local last = tonumber(redis.call('GET', KEYS[2]))
local fence = tonumber(ARGV[1])
if last and fence < last then return 0 end
redis.call('SET', KEYS[2], fence)
redis.call('SET', KEYS[1], ARGV[2])
return 1
";

/// A fenced value on a Redis server of its own.
#[derive(Debug)]
pub struct FencedStore {
    client: redis::Client,
    name: String,
}

impl FencedStore {
    /// The value `name` on the server at `url`.
    ///
    /// # Panics
    /// If `url` is not a Redis URL.
    pub fn new(url: &str, name: &str) -> Self {
        Self {
            client: redis::Client::open(url).expect("a Redis URL"),
            name: name.to_owned(),
        }
    }

    fn connection(&self) -> redis::Connection {
        self.client
            .get_connection_with_timeout(std::time::Duration::from_secs(5))
            .expect("the fenced store answers")
    }

    /// Writes `value` if `fence` is at least the largest fence accepted so far; returns whether
    /// it was written.
    ///
    /// # Panics
    /// If the store's server does not answer.
    pub fn write(&self, fence: u64, value: &str) -> bool {
        let accepted: i64 = Script::new(WRITE_IF_FENCE_SCRIPT)
            .key(&self.name)
            .key(format!("{}:fence", self.name))
            .arg(fence)
            .arg(value)
            .invoke(&mut self.connection())
            .expect("the fenced store answers");
        accepted == 1
    }

    /// The value last written.
    ///
    /// # Panics
    /// If the store's server does not answer.
    pub fn value(&self) -> Option<String> {
        let value: Option<String> = redis::cmd("GET")
            .arg(&self.name)
            .query(&mut self.connection())
            .expect("the fenced store answers");
        value
    }
}
