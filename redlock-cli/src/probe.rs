//! Direct reads of the nodes, past the lock client: what `status` and `nodes check` show. A probe
//! only reads (`PING`, `INFO`, `CONFIG GET`, `TIME`, `GET`, `PTTL`, a script that returns 1); it never changes a
//! key, and its messages never carry a password.

use std::time::{Duration, Instant};

use redis::{Connection, ErrorKind, RedisError};
use redlock_core::{Epoch, Keyspace, SitOutCause};
use redlock_redis::NodeAddr;

use crate::cli::Global;
use crate::{Failure, USAGE};

/// How long one probe waits to connect, and for each reply.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The nodes of the global options, parsed (duplicates and bad URLs are usage errors).
pub(crate) fn nodes(global: &Global) -> Result<Vec<NodeAddr>, Failure> {
    if global.nodes.is_empty() {
        return Err((
            USAGE,
            "no nodes: give --node URL (once per node) or REDLOCK_NODES=URL,URL,...".to_owned(),
        ));
    }
    NodeAddr::parse_all(&global.nodes).map_err(|err| (USAGE, err.to_string()))
}

/// A connection to one node, logged in.
pub(crate) struct Probe {
    connection: Connection,
}

impl Probe {
    /// Connects and logs in; the error says which, in words without the URL.
    pub(crate) fn connect(node: &NodeAddr) -> Result<Self, String> {
        let connection = node
            .client()
            .get_connection_with_timeout(PROBE_TIMEOUT)
            .map_err(|err| describe(node, &err))?;
        connection
            .set_read_timeout(Some(PROBE_TIMEOUT))
            .and_then(|()| connection.set_write_timeout(Some(PROBE_TIMEOUT)))
            .map_err(|err| describe(node, &err))?;
        Ok(Self { connection })
    }

    /// Runs one command; errors are described without the URL.
    pub(crate) fn query<T: redis::FromRedisValue>(
        &mut self,
        node: &NodeAddr,
        command: &redis::Cmd,
    ) -> Result<T, String> {
        command
            .query(&mut self.connection)
            .map_err(|err| describe(node, &err))
    }

    /// Runs a pipeline; errors are described without the URL.
    pub(crate) fn query_pipe<T: redis::FromRedisValue>(
        &mut self,
        node: &NodeAddr,
        pipe: &redis::Pipeline,
    ) -> Result<T, String> {
        pipe.query(&mut self.connection)
            .map_err(|err| describe(node, &err))
    }

    /// The node's default `INFO`, or `None` when the user may not run it (`NOPERM`: an ACL
    /// without `+info`); any other failure is an error.
    pub(crate) fn info(&mut self, node: &NodeAddr) -> Result<Option<String>, String> {
        match redis::cmd("INFO").query(&mut self.connection) {
            Ok(info) => Ok(Some(info)),
            Err(err) if err.code() == Some("NOPERM") => Ok(None),
            Err(err) => Err(describe(node, &err)),
        }
    }

    /// The node's clock, in ms since the Unix epoch (`TIME`).
    pub(crate) fn time_ms(&mut self, node: &NodeAddr) -> Result<u64, String> {
        let (secs, micros): (u64, u64) = self.query(node, &redis::cmd("TIME"))?;
        Ok(secs.saturating_mul(1000).saturating_add(micros / 1000))
    }

    /// The median round trip of `count` PINGs.
    pub(crate) fn latency(&mut self, node: &NodeAddr, count: usize) -> Result<Duration, String> {
        let mut samples = Vec::with_capacity(count);
        for _ in 0..count.max(1) {
            let started = Instant::now();
            let _: String = self.query(node, &redis::cmd("PING"))?;
            samples.push(started.elapsed());
        }
        samples.sort_unstable();
        Ok(samples[samples.len() / 2])
    }
}

/// A node error in words: refused, timed out, login failed… The redis crate's messages name
/// the address at most, never the URL's password, but the password is scrubbed anyway.
fn describe(node: &NodeAddr, err: &RedisError) -> String {
    let what = match err.kind() {
        ErrorKind::AuthenticationFailed => format!("login failed: {err}"),
        ErrorKind::Io if err.is_timeout() => "no answer in time".to_owned(),
        ErrorKind::Io if err.is_connection_refusal() => "connection refused".to_owned(),
        _ => err.to_string(),
    };
    scrub(node, what)
}

/// Removes the node's password from a message, should a message ever contain it.
pub(crate) fn scrub(node: &NodeAddr, message: String) -> String {
    match node
        .client()
        .get_connection_info()
        .redis_settings()
        .password()
    {
        Some(password) if !password.is_empty() => message.replace(password, "***"),
        _ => message,
    }
}

/// What to do about nodes that will not vote at once (no epoch yet, a sit-out, a new
/// identity), named by `host:port`, and the one condition under which it is safe; `None` when
/// every node given votes.
pub(crate) fn sit_out_remedy<'a>(
    nodes: impl IntoIterator<Item = (&'a str, Eligibility)>,
) -> Option<String> {
    let waiting: Vec<&str> = nodes
        .into_iter()
        .filter(|(_, eligibility)| {
            !matches!(eligibility, Eligibility::Trusted | Eligibility::Eligible)
        })
        .map(|(label, _)| label)
        .collect();
    if waiting.is_empty() {
        return None;
    }
    Some(format!(
        "{} will not vote until --max-ttl has passed (a first lock on fresh nodes fails for that \
         long). If no lock can be live on them — a fresh deployment, or every holder stopped and \
         its TTL passed — `redlock nodes trust {}` lets them vote at once; otherwise wait: \
         trusting a node that lost a live lock's key breaks mutual exclusion",
        waiting.join(", "),
        waiting.join(" ")
    ))
}

/// Restart-aware voting state of a node, from its epoch key and clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Eligibility {
    /// Epoch 0: an operator said no lock was live (`nodes trust`).
    Trusted,
    /// Its memory began more than the longest TTL ago.
    Eligible,
    /// Its memory began less than the longest TTL ago: it refuses to vote for this many ms, for
    /// the cause its stamp recorded.
    Ineligible { for_ms: u64, cause: SitOutCause },
    /// No epoch yet (new, restarted or flushed): its first acquire starts the wait.
    Unknown,
    /// Its epoch was stamped by another life of the node (`cause`: it restarted, a replica was
    /// promoted in its place, another database was swapped in, or it evicted keys): its next
    /// proof stamps a new epoch and it refuses to vote for the longest TTL from then.
    NewIdentity { cause: SitOutCause },
}

impl Eligibility {
    /// Reads it on a standalone node: `GET` and `PTTL` of `redlock:epoch` and `TIME` on the node, judged by the
    /// engine's own rule ([`Epoch::refuses_for_ms`], the acquire script's check).
    pub(crate) fn read(
        probe: &mut Probe,
        node: &NodeAddr,
        max_ttl: Duration,
    ) -> Result<Self, String> {
        Self::read_for(probe, node, max_ttl, Keyspace::Standalone, b"")
    }

    /// [`read`](Self::read) for lock key `key` of a node of `keyspace`: on a cluster, the
    /// epoch of the key's slot (on the master `probe` reaches).
    pub(crate) fn read_for(
        probe: &mut Probe,
        node: &NodeAddr,
        max_ttl: Duration,
        keyspace: Keyspace,
        key: &[u8],
    ) -> Result<Self, String> {
        let epoch_key = keyspace.epoch_key(key);
        let value: Option<Vec<u8>> = probe.query(node, redis::cmd("GET").arg(&*epoch_key))?;
        let Some(value) = value else {
            return Ok(Self::Unknown);
        };
        // The claim of a node without scripts tells its age by its TTL (read before the time).
        let pttl: i64 = probe.query(node, redis::cmd("PTTL").arg(&*epoch_key))?;
        let now = probe.time_ms(node)?;
        let Some(epoch) = Epoch::read(&value, Some(pttl), now) else {
            return Ok(Self::Unknown);
        };
        let (changed, recorded) = Self::stamp(probe, node, &keyspace.epoch_id_key(key))?;
        if let Some(cause) = changed {
            return Ok(Self::NewIdentity { cause });
        }
        let max_ttl = u64::try_from(max_ttl.as_millis()).unwrap_or(u64::MAX);
        Ok(match (epoch, epoch.refuses_for_ms(now, max_ttl)) {
            (Epoch::Trusted, _) => Self::Trusted,
            (_, Some(for_ms)) => Self::Ineligible {
                for_ms,
                cause: recorded.unwrap_or(SitOutCause::Unrecorded),
            },
            (_, None) => Self::Eligible,
        })
    }

    /// What the stamp of the epoch (`redlock:epoch:id`) says against the node's identity now
    /// (`INFO server replication stats`), as the checks on the node decide: what changed
    /// (`None` when nothing did, `INFO` is denied, or the stamp is empty: a native trust,
    /// adopted; a missing stamp differs only on a node that evicted keys, since the stamp itself
    /// may have been evicted), and the cause of the sit-out the stamp recorded, if any.
    fn stamp(
        probe: &mut Probe,
        node: &NodeAddr,
        id_key: &[u8],
    ) -> Result<(Option<SitOutCause>, Option<SitOutCause>), String> {
        let stamped: Option<Vec<u8>> = probe.query(node, redis::cmd("GET").arg(id_key))?;
        let recorded = stamped
            .as_deref()
            .and_then(|stamped| redlock_core::split_stamp(stamped).1);
        let info: Result<Vec<u8>, String> = probe.query(
            node,
            redis::cmd("INFO")
                .arg("server")
                .arg("replication")
                .arg("stats"),
        );
        let changed = info
            .ok()
            .and_then(|info| redlock_core::node_identity(&info, node.database()))
            .and_then(|identity| redlock_core::stamp_change(stamped.as_deref(), &identity));
        Ok((changed, recorded))
    }

    /// One word for JSON.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Self::Trusted => "trusted",
            Self::Eligible => "eligible",
            Self::Ineligible { .. } => "ineligible",
            Self::Unknown => "unknown",
            Self::NewIdentity { .. } => "new-identity",
        }
    }

    /// A phrase for people.
    pub(crate) fn describe(self) -> String {
        match self {
            Self::Ineligible { for_ms, cause } => format!(
                "ineligible for {}: {cause}",
                crate::output::human_ms(for_ms)
            ),
            Self::Unknown => "no epoch yet (waits --max-ttl after its first acquire)".to_owned(),
            Self::NewIdentity { cause } => {
                format!("{cause} (waits --max-ttl after its next acquire)")
            }
            other => other.word().to_owned(),
        }
    }

    /// The cause a refusal of the node names (or will name, for a new identity), if any.
    pub(crate) fn cause(self) -> Option<SitOutCause> {
        match self {
            Self::Ineligible { cause, .. } | Self::NewIdentity { cause } => Some(cause),
            _ => None,
        }
    }
}
