//! Looking into a [`RedisServer`]: URLs, a sync client with timeouts, and small queries.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use redis::{
    Connection, ConnectionAddr, ConnectionInfo, FromRedisValue, IntoConnectionInfo,
    RedisConnectionInfo, RedisResult, ToRedisArgs,
};

use crate::server::RedisServer;

/// Connect, read and write timeout of inspection clients, so a paused server cannot hang a test.
pub const INSPECT_TIMEOUT: Duration = Duration::from_secs(5);

impl RedisServer {
    /// `redis://127.0.0.1:port/`, with the credentials from its options (if any) as userinfo:
    /// the URL a client under test should use.
    pub fn url(&self) -> String {
        self.url_via(self.addr())
    }

    /// Like [`RedisServer::url`] but pointing at `addr`, e.g. a fault-injecting proxy
    /// in front of this server.
    pub fn url_via(&self, addr: SocketAddr) -> String {
        let credentials = self.options().credentials();
        let mut userinfo = String::new();
        if let Some(password) = &credentials.password {
            let username = credentials.username.as_deref().unwrap_or("");
            userinfo = format!("{}:{}@", percent_encode(username), percent_encode(password));
        }
        let scheme = if self.options().is_tls() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{userinfo}{addr}/")
    }

    /// Connection settings for the redis crate, with credentials, pointing at `addr`.
    pub fn connection_info_via(&self, addr: SocketAddr) -> ConnectionInfo {
        Self::info_with(addr, &self.options().credentials())
    }

    fn info_with(addr: SocketAddr, credentials: &crate::options::Credentials) -> ConnectionInfo {
        let mut settings = RedisConnectionInfo::default().set_skip_set_lib_name();
        if let Some(username) = &credentials.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &credentials.password {
            settings = settings.set_password(password);
        }
        let tcp = ConnectionAddr::Tcp(addr.ip().to_string(), addr.port());
        match tcp.into_connection_info() {
            Ok(info) => info.set_redis_settings(settings),
            Err(err) => unreachable!("a TCP address is always valid connection info: {err}"),
        }
    }

    /// A new sync connection, logged in, with [`INSPECT_TIMEOUT`] on connect, reads and writes.
    pub fn try_client(&self) -> RedisResult<Connection> {
        #[cfg(feature = "tls")]
        let client = match self.options().tls_settings() {
            Some(tls) => {
                redis::Client::build_with_tls(self.url(), tls.files.client_certificates())?
            }
            None => redis::Client::open(Self::info_with(
                self.addr(),
                &self.options().inspection_credentials(),
            ))?,
        };
        #[cfg(not(feature = "tls"))]
        let client = redis::Client::open(Self::info_with(
            self.addr(),
            &self.options().inspection_credentials(),
        ))?;
        let connection = client.get_connection_with_timeout(INSPECT_TIMEOUT)?;
        connection.set_read_timeout(Some(INSPECT_TIMEOUT))?;
        connection.set_write_timeout(Some(INSPECT_TIMEOUT))?;
        Ok(connection)
    }

    /// Like [`RedisServer::try_client`].
    ///
    /// # Panics
    /// If the server is killed or paused, or the connection fails.
    pub fn client(&self) -> Connection {
        self.ensure_serving("connect to");
        self.try_client()
            .unwrap_or_else(|err| panic!("connecting to redis-server on {}: {err}", self.addr()))
    }

    /// Calls of `command` the server ran so far, as `INFO commandstats` names it (`set`,
    /// `evalsha`, `script|load`; 0 for one never called). The `INFO` itself counts after it.
    pub fn calls(&self, command: &str) -> u64 {
        let stats: String = self.run(redis::cmd("INFO").arg("commandstats"), "INFO commandstats");
        let prefix = format!("cmdstat_{command}:calls=");
        stats
            .lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split(',').next())
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(0)
    }

    /// `GET key`.
    pub fn get(&self, key: impl ToRedisArgs) -> Option<Vec<u8>> {
        self.query("GET", key)
    }

    /// `SET key value`.
    pub fn set(&self, key: impl ToRedisArgs, value: impl ToRedisArgs) {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(value);
        self.run::<()>(&cmd, "SET");
    }

    /// `PTTL key`: milliseconds left, -1 without expiry, -2 if the key does not exist.
    pub fn pttl(&self, key: impl ToRedisArgs) -> i64 {
        self.query("PTTL", key)
    }

    /// Whether `key` exists.
    pub fn exists(&self, key: impl ToRedisArgs) -> bool {
        self.query::<i64>("EXISTS", key) == 1
    }

    /// The number of keys (`KEYS *`: the test servers hold few), not counting the
    /// restart-aware voting epoch key and its identity, which every node that ever voted keeps
    /// for good, nor the markers of proofs (which expire after the longest TTL).
    pub fn dbsize(&self) -> i64 {
        let all: Vec<Vec<u8>> = self.query("KEYS", "*");
        let kept = |key: &[u8]| {
            key == redlock_core::EPOCH_KEY
                || key == redlock_core::EPOCH_ID_KEY
                || key.starts_with(redlock_core::EPOCH_MARKER_PREFIX)
        };
        let counted = all.iter().filter(|key| !kept(key)).count();
        i64::try_from(counted).unwrap_or(i64::MAX)
    }

    /// Runs `name key` on a fresh inspection connection.
    fn query<T: FromRedisValue>(&self, name: &str, key: impl ToRedisArgs) -> T {
        let mut cmd = redis::cmd(name);
        cmd.arg(key);
        self.run(&cmd, name)
    }

    fn run<T: FromRedisValue>(&self, cmd: &redis::Cmd, name: &str) -> T {
        let mut connection = self.client();
        cmd.query(&mut connection)
            .unwrap_or_else(|err| panic!("{name} on redis-server {}: {err}", self.addr()))
    }

    fn ensure_serving(&self, what: &str) {
        assert!(
            self.is_running(),
            "cannot {what} redis-server on {}: it is not running",
            self.addr()
        );
        assert!(
            !self.is_paused(),
            "cannot {what} redis-server on {}: it is paused, resume it first",
            self.addr()
        );
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}
