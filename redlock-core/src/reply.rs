//! What a node answered, reduced to what the algorithm needs.

/// A node's answer to one command. Adapters map their client library's values into this; the
/// [`resp`](crate::resp) module parses it from raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// The simple string `OK` (a `SET` that took effect).
    Ok,
    /// A null (a `SET NX` that found the key taken).
    Nil,
    /// An integer (every script answers with one, but a refusal to vote).
    Int(i64),
    /// A refusal to vote (restart-aware voting): the node's memory is too young for `for_ms`
    /// more, for `cause`. The checked scripts answer `{-ms, cause}`; a plain negative
    /// [`Int`](Self::Int) to an acquisition reads as this with
    /// [`SitOutCause::Unrecorded`](crate::SitOutCause::Unrecorded).
    Ineligible {
        /// How much longer the node refuses, in ms (at least 1).
        for_ms: u64,
        /// Why.
        cause: crate::SitOutCause,
    },
    /// The request failed on or on the way to this node.
    Error(NodeErrorKind),
    /// Any other shape (a bulk string, an array, another status). Never expected from a Redis
    /// server running our commands: counted as a protocol error.
    Other,
}

/// Why a request to a node failed. Server error codes map with [`NodeErrorKind::from_code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No connection: refused, reset, closed, or not yet re-established.
    Connection,
    /// The adapter's own I/O timeout fired (the engine's deadlines are separate).
    Timeout,
    /// Authentication failed or is missing (`NOAUTH`, `WRONGPASS`).
    Auth,
    /// The user may not run the command or touch the key (`NOPERM`).
    NoPermission,
    /// The script cache does not have the script (`NOSCRIPT`): flushed (`SCRIPT FLUSH`) while
    /// a request using it was on its way. The adapter loads it again; it runs a release, an
    /// extension or a fence's commit again too, but not an acquisition, which could land behind
    /// its own lock's release on a shared connection: that vote is lost, as to a node that
    /// failed.
    NoScript,
    /// A key holds a value of another type (`WRONGTYPE`).
    WrongType,
    /// The node is a replica (`READONLY`).
    ReadOnly,
    /// The node is out of memory (`OOM`).
    OutOfMemory,
    /// The node is busy running a script (`BUSY`).
    Busy,
    /// The node is loading its dataset (`LOADING`).
    Loading,
    /// An answer that cannot come from a Redis server running our commands, or one cut off
    /// part-way.
    Protocol,
    /// Any other server error.
    Other,
    /// The node can run neither the script this command needs nor a native command of the same
    /// meaning (no Lua, and an unproven restart-aware acquire, a fenced acquire, a fence commit,
    /// a multi-key acquire without `MSETEX`, or a release without `DELIFEQ`/`DELEX`): nothing
    /// was sent. The node needs scripting for this lock.
    NoSafeForm,
    /// The TLS handshake failed: the node's certificate is not trusted (wrong CA, wrong name),
    /// or the node wants a client certificate this client does not show.
    Tls,
    /// The node is a Redis or Valkey Cluster that did not serve the command (`MOVED` or `ASK`
    /// still after the client refreshed its slot map, `CLUSTERDOWN`, `TRYAGAIN`, `MASTERDOWN`),
    /// or a command this client cannot run on a cluster: nothing was granted there.
    Cluster,
    /// The lock's keys lie in different hash slots of a cluster node (`CROSSSLOT`, or seen
    /// before sending): a cluster locks several keys at once only within one slot. Nothing was
    /// sent; give the resources a common hash tag (`{order-42}:invoice`, `{order-42}:stock`).
    CrossSlot,
    /// The node's URL leads to a cluster another node of this client leads to already (they
    /// share a master): one cluster is one vote, so the node that learnt its slot map second
    /// refuses every request. Nothing was sent; list each cluster once.
    SameCluster,
    /// The node was given several votes over one cluster, and its URL leads to a server that
    /// does not run in cluster mode: one server never casts several votes. Nothing was sent.
    NotACluster,
    /// The node is one of several votes over one cluster, and its slot is served by the master
    /// of an earlier vote's slot (after a resharding, with fewer masters than votes, or an
    /// uneven layout): one master never casts two votes. Nothing was sent.
    SharedMaster,
}

impl NodeErrorKind {
    /// Maps a Redis error reply by its code (the first word, e.g. `WRONGTYPE`).
    pub fn from_code(code: &str) -> Self {
        match code {
            "NOAUTH" | "WRONGPASS" => Self::Auth,
            "NOPERM" => Self::NoPermission,
            "NOSCRIPT" => Self::NoScript,
            "WRONGTYPE" => Self::WrongType,
            "READONLY" => Self::ReadOnly,
            "OOM" => Self::OutOfMemory,
            "BUSY" => Self::Busy,
            "LOADING" => Self::Loading,
            "MOVED" | "ASK" | "CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN" => Self::Cluster,
            "CROSSSLOT" => Self::CrossSlot,
            _ => Self::Other,
        }
    }

    /// Maps a whole error line (`WRONGTYPE Operation against…`) by its first word. Errors raised
    /// inside a script keep the code of the command that failed.
    pub fn from_message(message: &str) -> Self {
        Self::from_code(message.split_ascii_whitespace().next().unwrap_or(""))
    }

    /// A short lowercase name for logs and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connection => "connection",
            Self::Timeout => "timeout",
            Self::Auth => "auth",
            Self::NoPermission => "no permission",
            Self::NoScript => "noscript",
            Self::WrongType => "wrong type",
            Self::ReadOnly => "read-only",
            Self::OutOfMemory => "out of memory",
            Self::Busy => "busy",
            Self::Loading => "loading",
            Self::Protocol => "protocol",
            Self::Other => "server error",
            Self::NoSafeForm => "no safe form: the node runs no script, and this needs one",
            Self::Tls => "TLS handshake: certificate not accepted",
            Self::Cluster => "cluster: the key's slot was not served (moved, down or failing over)",
            Self::SameCluster => "same cluster as another node: list each cluster once",
            Self::NotACluster => "not a cluster: only a cluster node lends several votes",
            Self::SharedMaster => "shared master: an earlier vote of this cluster is on its master",
            Self::CrossSlot => "cross-slot: on a cluster, the lock's keys need a common {hash tag}",
        }
    }
}

impl std::fmt::Display for NodeErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_map_by_their_code() {
        assert_eq!(
            NodeErrorKind::from_message(
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            ),
            NodeErrorKind::WrongType
        );
        assert_eq!(
            NodeErrorKind::from_message("NOSCRIPT No matching script."),
            NodeErrorKind::NoScript
        );
        assert_eq!(
            NodeErrorKind::from_message("WRONGPASS invalid username-password pair"),
            NodeErrorKind::Auth
        );
        assert_eq!(
            NodeErrorKind::from_message("OOM command not allowed"),
            NodeErrorKind::OutOfMemory
        );
        assert_eq!(
            NodeErrorKind::from_message("ERR something"),
            NodeErrorKind::Other
        );
        assert_eq!(NodeErrorKind::from_message(""), NodeErrorKind::Other);
        for line in [
            "MOVED 3999 127.0.0.1:6381",
            "ASK 3999 127.0.0.1:6381",
            "CLUSTERDOWN The cluster is down",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        ] {
            assert_eq!(
                NodeErrorKind::from_message(line),
                NodeErrorKind::Cluster,
                "{line}"
            );
        }
        assert_eq!(
            NodeErrorKind::from_message("CROSSSLOT Keys in request don't hash to the same slot"),
            NodeErrorKind::CrossSlot
        );
    }
}
