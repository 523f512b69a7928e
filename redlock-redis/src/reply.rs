//! `redis::Value` and `RedisError` as engine replies.

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use redlock_core::{NodeErrorKind, Reply, SitOutCause};

/// Maps a command's result.
pub(crate) fn map_result(result: Result<Value, RedisError>) -> Reply {
    match result {
        Ok(Value::Okay) => Reply::Ok,
        Ok(Value::SimpleString(s)) if s == "OK" => Reply::Ok,
        Ok(Value::Nil) => Reply::Nil,
        Ok(Value::Int(n)) => Reply::Int(n),
        Ok(Value::ServerError(err)) => Reply::Error(NodeErrorKind::from_code(err.code())),
        Ok(Value::Array(parts)) => refusal(&parts).unwrap_or(Reply::Other),
        Ok(_) => Reply::Other,
        Err(err) => Reply::Error(map_error(&err)),
    }
}

/// A checked script's refusal to vote, `{-ms, why}`.
fn refusal(parts: &[Value]) -> Option<Reply> {
    let [Value::Int(ms), why] = parts else {
        return None;
    };
    let why: &[u8] = match why {
        Value::BulkString(word) => word,
        Value::SimpleString(word) => word.as_bytes(),
        _ => return None,
    };
    (*ms < 0).then(|| Reply::Ineligible {
        for_ms: ms.unsigned_abs(),
        cause: SitOutCause::from_word(why),
    })
}

/// Whether a connection that produced `err` must be rebuilt rather than reused: the `redis`
/// crate's connection manager keeps failing with a setup error forever, since only I/O errors
/// make it reconnect. That covers a wrong password, a bad TLS configuration, and a connection
/// whose handshake reply was cut part-way (a parse error: the chaos test found clients that had
/// lost a node for good this way).
pub(crate) fn needs_new_connection(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::AuthenticationFailed
            | ErrorKind::InvalidClientConfig
            | ErrorKind::RESP3NotSupported
            | ErrorKind::Parse
    ) || err.code() == Some("WRONGPASS")
}

/// Maps a failed request to why it failed.
pub(crate) fn map_error(err: &RedisError) -> NodeErrorKind {
    if err.is_timeout() {
        return NodeErrorKind::Timeout;
    }
    if err.is_io_error() && is_tls_failure(&err.to_string()) {
        return NodeErrorKind::Tls;
    }
    if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
        return NodeErrorKind::Connection;
    }
    match err.kind() {
        ErrorKind::AuthenticationFailed => NodeErrorKind::Auth,
        ErrorKind::Server(ServerErrorKind::NoScript) => NodeErrorKind::NoScript,
        ErrorKind::Server(ServerErrorKind::ReadOnly) => NodeErrorKind::ReadOnly,
        ErrorKind::Server(ServerErrorKind::NoPerm) => NodeErrorKind::NoPermission,
        ErrorKind::Server(ServerErrorKind::BusyLoading) => NodeErrorKind::Loading,
        ErrorKind::Server(
            ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::TryAgain
            | ServerErrorKind::MasterDown,
        ) => NodeErrorKind::Cluster,
        ErrorKind::Server(ServerErrorKind::CrossSlot) => NodeErrorKind::CrossSlot,
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => NodeErrorKind::Protocol,
        _ => err
            .code()
            .map_or(NodeErrorKind::Other, NodeErrorKind::from_code),
    }
}

/// Whether an I/O error's text is rustls refusing the handshake (`invalid peer certificate: …`,
/// `received fatal alert: CertificateRequired`, …), rather than the network failing.
fn is_tls_failure(text: &str) -> bool {
    [
        "peer certificate",
        "fatal alert",
        "certificate",
        "handshake",
    ]
    .iter()
    .any(|marker| text.contains(marker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_map_to_replies() {
        assert_eq!(map_result(Ok(Value::Okay)), Reply::Ok);
        assert_eq!(map_result(Ok(Value::Nil)), Reply::Nil);
        assert_eq!(map_result(Ok(Value::Int(-1))), Reply::Int(-1));
        assert_eq!(
            map_result(Ok(Value::BulkString(b"x".to_vec()))),
            Reply::Other
        );
        let refusal = |why: &[u8]| {
            map_result(Ok(Value::Array(vec![
                Value::Int(-5_000),
                Value::BulkString(why.to_vec()),
            ])))
        };
        assert_eq!(
            refusal(b"eviction"),
            Reply::Ineligible {
                for_ms: 5_000,
                cause: SitOutCause::Eviction
            }
        );
        assert_eq!(
            refusal(b""),
            Reply::Ineligible {
                for_ms: 5_000,
                cause: SitOutCause::Unrecorded
            }
        );
        let granted = Value::Array(vec![Value::Int(5), Value::BulkString(b"x".to_vec())]);
        assert_eq!(map_result(Ok(granted)), Reply::Other);
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(
            map_result(Err(refused)),
            Reply::Error(NodeErrorKind::Connection)
        );
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(map_error(&timeout), NodeErrorKind::Timeout);
        let auth = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(map_error(&auth), NodeErrorKind::Auth);
        // What rustls says for a wrong CA and for a missing client certificate.
        for text in [
            "invalid peer certificate: BadSignature",
            "received fatal alert: CertificateRequired",
        ] {
            let tls = RedisError::from(std::io::Error::other(text));
            assert_eq!(map_error(&tls), NodeErrorKind::Tls, "{text}");
        }
    }
}
