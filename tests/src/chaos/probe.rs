//! Questions the checks ask the servers after a run, on inspection connections.

use crate::RedisServer;

/// `connected_clients` from `INFO clients`, *including* the inspection connection asking.
///
/// # Panics
/// If the server cannot be asked or the field is missing.
pub(crate) fn connected_clients(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query(&mut server.client())
        .unwrap_or_else(|err| panic!("INFO clients on {}: {err}", server.addr()));
    info.lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no connected_clients in INFO clients of {}", server.addr()))
}

/// What the server says it is: `redis 7.0.15`, `valkey 8.1.8`.
///
/// # Panics
/// If the server cannot be asked.
pub(crate) fn server_name(server: &RedisServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.client())
        .unwrap_or_else(|err| panic!("INFO server on {}: {err}", server.addr()));
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(|value| value.trim().to_owned())
    };
    let name = field("server_name").unwrap_or_else(|| "redis".to_owned());
    let version = field(&format!("{name}_version"))
        .or_else(|| field("redis_version"))
        .unwrap_or_default();
    format!("{name} {version}")
}

/// The keys starting with `prefix` (`KEYS` skips keys whose TTL has passed).
///
/// # Panics
/// If the server cannot be asked.
pub(crate) fn keys_with_prefix(server: &RedisServer, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut server.client())
        .unwrap_or_else(|err| panic!("KEYS on {}: {err}", server.addr()));
    keys.sort();
    keys
}

/// The integer at `key` (0 if absent).
///
/// # Panics
/// If the server cannot be asked or the value is not an integer.
pub(crate) fn counter(server: &RedisServer, key: &str) -> i64 {
    let value: Option<i64> = redis::cmd("GET")
        .arg(key)
        .query(&mut server.client())
        .unwrap_or_else(|err| panic!("GET {key} on {}: {err}", server.addr()));
    value.unwrap_or(0)
}
