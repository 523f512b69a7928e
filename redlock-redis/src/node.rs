//! A node's address: parsed once, printed without credentials.

use std::fmt;
use std::sync::Arc;

use crate::error::Error;

/// One Redis master: its client (which never connects by itself) and a label for messages.
#[derive(Clone)]
pub struct NodeAddr {
    client: redis::Client,
    label: Arc<str>,
    /// The operator says nothing ever runs `SWAPDB` on this node
    /// ([`Builder::swapdb_never_runs_on`](crate::Builder::swapdb_never_runs_on)).
    swapdb_never_runs: bool,
    /// More URLs of the cluster this node leads to
    /// ([`Builder::cluster_seeds`](crate::Builder::cluster_seeds)).
    seeds: Arc<[NodeAddr]>,
    /// Which of the votes a cluster lends a lock this node is
    /// ([`Builder::cluster_votes`](crate::Builder::cluster_votes)), if it is one.
    vote: Option<ClusterVote>,
    /// How the client reaches the masters and replicas a cluster announces
    /// ([`Builder::cluster_addresses`](crate::Builder::cluster_addresses)).
    addresses: Option<AddressMap>,
}

/// Where the client reaches a cluster's node announced at `host:port`: for NAT and container
/// setups, where the announced address is not the one this client can reach.
#[derive(Clone)]
pub(crate) struct AddressMap(pub(crate) Arc<MapFn>);

/// `(host, port)` announced → `(host, port)` to dial.
pub(crate) type MapFn = dyn Fn(&str, u16) -> (String, u16) + Send + Sync;

impl fmt::Debug for AddressMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AddressMap(..)")
    }
}

/// One of the votes a cluster node lends a lock: vote `vote` (from 0) of `votes`, the first of
/// which is node `first` of the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClusterVote {
    pub(crate) first: usize,
    pub(crate) vote: usize,
    pub(crate) votes: usize,
}

impl NodeAddr {
    /// Parses `redis://[user:password@]host:port[/db]` (or `rediss://` with a TLS feature of the
    /// `redis` crate). The error names the node by position and never repeats the URL, which may
    /// hold a password.
    pub fn parse(index: usize, url: &str) -> Result<Self, Error> {
        missing_scheme(index, url)?;
        Self::parse_with_client(index, redis::Client::open(url))
    }

    /// [`NodeAddr::parse`] with TLS settings for `rediss://` URLs.
    #[cfg(feature = "tls")]
    pub fn parse_with(
        index: usize,
        url: &str,
        tls: Option<&crate::tls::Tls>,
    ) -> Result<Self, Error> {
        missing_scheme(index, url)?;
        match tls {
            Some(tls) => Self::parse_with_client(
                index,
                redis::Client::build_with_tls(url, tls.certificates()),
            ),
            None => Self::parse(index, url),
        }
    }

    fn parse_with_client(
        index: usize,
        client: redis::RedisResult<redis::Client>,
    ) -> Result<Self, Error> {
        let client = client.map_err(|err| Error::InvalidNode {
            index,
            reason: match err.kind() {
                redis::ErrorKind::InvalidClientConfig => {
                    "not a redis:// or rediss:// URL (or TLS support is not compiled in)".to_owned()
                }
                _ => err.category().to_owned(),
            },
        })?;
        let label = client.get_connection_info().addr().to_string().into();
        Ok(Self {
            client,
            label,
            swapdb_never_runs: false,
            seeds: Arc::new([]),
            vote: None,
            addresses: None,
        })
    }

    /// Parses a list of URLs. The same `host:port` twice is rejected: one server counted as two
    /// nodes would let a single failure decide a quorum.
    pub fn parse_all<I, S>(urls: I) -> Result<Vec<Self>, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::parse_all_by(urls, Self::parse)
    }

    /// [`NodeAddr::parse_all`] with TLS settings for `rediss://` URLs.
    #[cfg(feature = "tls")]
    pub fn parse_all_with<I, S>(urls: I, tls: Option<&crate::tls::Tls>) -> Result<Vec<Self>, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::parse_all_by(urls, |index, url| Self::parse_with(index, url, tls))
    }

    fn parse_all_by<I, S>(
        urls: I,
        parse: impl Fn(usize, &str) -> Result<Self, Error>,
    ) -> Result<Vec<Self>, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut nodes: Vec<Self> = Vec::new();
        for (index, url) in urls.into_iter().enumerate() {
            let node = parse(index, url.as_ref())?;
            if let Some(first) = nodes.iter().position(|n| n.label == node.label) {
                return Err(Error::InvalidNode {
                    index,
                    reason: format!(
                        "{} is node #{first} already; each node must be a different server",
                        node.label
                    ),
                });
            }
            nodes.push(node);
        }
        Ok(nodes)
    }

    /// The master at `host:port` of the cluster this node's URL leads to, reached as the URL
    /// says: same user, password, database and TLS settings (the certificate must name the
    /// announced host). Labelled by its own address.
    pub fn for_master(&self, host: &str, port: u16) -> redis::RedisResult<Self> {
        let (host, port) = match &self.addresses {
            Some(map) => (map.0)(host, port),
            None => (host.to_owned(), port),
        };
        let host = host.as_str();
        let info = self.client.get_connection_info();
        let addr = match info.addr() {
            redis::ConnectionAddr::Tcp(..) => redis::ConnectionAddr::Tcp(host.to_owned(), port),
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => {
                return Err((
                    redis::ErrorKind::InvalidClientConfig,
                    "a cluster node must be reached over TCP",
                )
                    .into());
            }
        };
        let client = redis::Client::open(info.clone().set_addr(addr))?;
        Ok(Self {
            label: client.get_connection_info().addr().to_string().into(),
            client,
            swapdb_never_runs: self.swapdb_never_runs,
            seeds: Arc::new([]),
            vote: None,
            addresses: self.addresses.clone(),
        })
    }

    /// The client for this node (connections are the adapter's business).
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// The host the URL names (empty for a Unix socket).
    pub fn host(&self) -> &str {
        match self.client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, _) | redis::ConnectionAddr::TcpTls { host, .. } => {
                host
            }
            _ => "",
        }
    }

    /// Whether the URL is `rediss://` (a cluster's masters are then reached on their TLS
    /// port).
    pub(crate) fn is_tls(&self) -> bool {
        matches!(
            self.client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        )
    }

    /// `host:port`, never with credentials.
    pub fn label(&self) -> &Arc<str> {
        &self.label
    }

    /// The database the URL selects (`/db`; 0 without one): what the node's memory identity is
    /// stamped with there ([`redlock_core::node_identity`]).
    pub fn database(&self) -> u32 {
        let db = self.client.get_connection_info().redis_settings().db();
        u32::try_from(db).unwrap_or_default()
    }

    /// This node with more URLs of its cluster.
    pub(crate) fn with_seeds(mut self, seeds: Vec<NodeAddr>) -> Self {
        self.seeds = seeds.into();
        self
    }

    /// This node as vote `vote.vote` of the votes its cluster lends a lock, labelled so
    /// (`host:port (vote 2 of 3)`, counted from 1).
    pub(crate) fn voting_as(mut self, vote: ClusterVote) -> Self {
        self.label = format!("{} (vote {} of {})", self.label, vote.vote + 1, vote.votes).into();
        self.vote = Some(vote);
        self
    }

    /// This node, reaching its cluster's announced nodes through `map`.
    pub(crate) fn with_addresses(mut self, map: AddressMap) -> Self {
        self.addresses = Some(map);
        self
    }

    /// Which of its cluster's votes this node is, if it is one.
    pub(crate) fn vote(&self) -> Option<ClusterVote> {
        self.vote
    }

    /// Which node of the client, at position `index`, speaks for this node's cluster: the
    /// first of its votes (all of a cluster's votes are one claim on it), else itself.
    pub(crate) fn cluster_owner(&self, index: usize) -> usize {
        self.vote.map_or(index, |vote| vote.first)
    }

    /// More URLs of the cluster this node leads to, to ask when its own does not answer.
    pub(crate) fn seeds(&self) -> &[NodeAddr] {
        &self.seeds
    }

    /// This node as the operator declared it: nothing ever runs `SWAPDB` on it.
    pub(crate) fn declared_never_swapped(mut self) -> Self {
        self.swapdb_never_runs = true;
        self
    }

    /// What a node of the `detected` dialect is to this client: in the URL's database, and
    /// unable to swap where the operator declared so (a node that can swap keeps its
    /// `detected.swapdb`).
    pub fn dialect(&self, detected: redlock_core::Dialect) -> redlock_core::Dialect {
        redlock_core::Dialect {
            database: self.database(),
            swapdb: detected.swapdb && !self.swapdb_never_runs,
            ..detected
        }
    }
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeAddr({})", self.label)
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

/// A node given as `host:port`, without a scheme: the error suggests the URL. It repeats the
/// input only when it cannot hold a password (no `@`, nothing but a host and a port). Also a
/// `rediss://` node without the `tls` feature.
fn missing_scheme(index: usize, url: &str) -> Result<(), Error> {
    // The `redis` crate may parse `rediss://` whatever our features (another crate of the build
    // can turn its TLS on): without ours, say what is missing rather than connect half-set-up.
    #[cfg(not(feature = "tls"))]
    if url.starts_with("rediss://") {
        return Err(Error::InvalidNode {
            index,
            reason: "a rediss:// (TLS) node needs the adapter's `tls` feature".to_owned(),
        });
    }
    if url.contains("://") {
        return Ok(());
    }
    // A host name or IPv4 address (letters, digits, `.`, `-`, `_`), or a bracketed IPv6 one:
    // nothing that could be a user or a password.
    let host_like = |host: &str| {
        let inner = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit() || b == b':'));
        inner.is_some()
            || (!host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')))
    };
    let plain = url.rsplit_once(':').is_some_and(|(host, port)| {
        host_like(host) && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
    });
    let reason = if plain {
        format!("not a URL: did you mean redis://{url} ?")
    } else {
        "not a URL: write redis://[user:password@]host:port[/db] (or rediss:// for TLS)".to_owned()
    };
    Err(Error::InvalidNode { index, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_errors_never_show_the_password() {
        let node = NodeAddr::parse(0, "redis://user:hunter2@127.0.0.1:7000/0").expect("valid");
        assert_eq!(&**node.label(), "127.0.0.1:7000");
        assert!(!format!("{node:?} {node}").contains("hunter2"));
        for bad in [
            "http://user:hunter2@host",
            "redis://:hunter2@",
            "hunter2",
            "",
        ] {
            let err = NodeAddr::parse(3, bad).expect_err("invalid");
            let text = err.to_string();
            assert!(text.starts_with("node #3"), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
        }
    }

    #[test]
    fn a_node_without_a_scheme_gets_the_url_it_meant() {
        let text = NodeAddr::parse(1, "10.0.0.1:6379")
            .expect_err("no scheme")
            .to_string();
        assert!(
            text.contains("did you mean redis://10.0.0.1:6379 ?"),
            "{text}"
        );
        let text = NodeAddr::parse(1, "[::1]:6379")
            .expect_err("no scheme")
            .to_string();
        assert!(text.contains("did you mean redis://[::1]:6379 ?"), "{text}");
        for secret in [
            "user:hunter2@10.0.0.1:6379",
            ":hunter2@host:1",
            "host:hunter2",
            "user:hunter2:6379",
            "host:6379:hunter2",
        ] {
            let text = NodeAddr::parse(1, secret)
                .expect_err("no scheme")
                .to_string();
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains("redis://[user:password@]host:port"), "{text}");
        }
    }
}
