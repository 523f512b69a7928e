//! The error type every adapter returns, with per-node detail.

use std::fmt;
use std::sync::Arc;

use redlock_core::{
    AcquireFailure, ConfigError, ExtendFailure, FailureReason, LossCause, NodeErrorKind, Vote,
};

/// One node's part in an outcome, the node named by `host:port` (never with credentials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport<T> {
    /// `host:port` of the node.
    pub node: Arc<str>,
    /// What it did.
    pub result: T,
}

/// Per-node detail of a lock operation that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockFailure {
    /// How many rounds ran (1 for an extension).
    pub attempts: u32,
    /// Each node's answer in the last round (empty when nothing was sent).
    pub nodes: Vec<NodeReport<Vote>>,
    /// Why an auto-extended lock was given up, for [`Error::Lost`] from `with_lock`.
    pub cause: Option<LossCause>,
}

impl LockFailure {
    /// Pairs `votes` with the node labels.
    pub(crate) fn new(labels: &[Arc<str>], votes: &[Vote], attempts: u32) -> Self {
        let nodes = labels
            .iter()
            .zip(votes)
            .map(|(node, vote)| NodeReport {
                node: node.clone(),
                result: *vote,
            })
            .collect();
        Self {
            attempts,
            nodes,
            cause: None,
        }
    }
}

impl fmt::Display for LockFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cause {
            Some(LossCause::NotHeld) => f.write_str("too few nodes still hold it; ")?,
            Some(LossCause::Expired) => f.write_str("its validity ran out; ")?,
            Some(LossCause::NoTimeLeft) => {
                f.write_str("no extension could finish before its validity ends; ")?
            }
            Some(cause) => write!(f, "{cause:?}; ")?,
            None => {}
        }
        write!(
            f,
            "{} round{}",
            self.attempts,
            if self.attempts == 1 { "" } else { "s" }
        )?;
        for (i, report) in self.nodes.iter().enumerate() {
            f.write_str(if i == 0 { "; " } else { ", " })?;
            write!(f, "{} ", report.node)?;
            match report.result {
                Vote::Pending => f.write_str("not waited for (the round was decided)"),
                Vote::Granted => f.write_str("granted"),
                Vote::Refused => f.write_str("held by another"),
                Vote::TimedOut => f.write_str("timed out"),
                Vote::Failed(kind) => write!(f, "failed ({kind})"),
                Vote::Ineligible { for_ms, cause } => {
                    write!(f, "not voting for {} more: {cause}", HumanMs(for_ms))
                }
                vote => write!(f, "{vote:?}"),
            }?;
        }
        if self
            .nodes
            .iter()
            .any(|report| matches!(report.result, Vote::Ineligible { .. }))
        {
            f.write_str(INELIGIBLE_REMEDY)?;
        }
        // Each remedy once, after the per-node list.
        for (kind, remedy) in [
            (NodeErrorKind::Cluster, CLUSTER_REMEDY),
            (NodeErrorKind::CrossSlot, CROSS_SLOT_REMEDY),
            (NodeErrorKind::SameCluster, SAME_CLUSTER_REMEDY),
            (NodeErrorKind::NotACluster, NOT_A_CLUSTER_REMEDY),
            (NodeErrorKind::SharedMaster, SHARED_MASTER_REMEDY),
            (NodeErrorKind::NoSafeForm, NO_SAFE_FORM_REMEDY),
        ] {
            if self.nodes.iter().any(|n| n.result == Vote::Failed(kind)) {
                f.write_str(remedy)?;
            }
        }
        Ok(())
    }
}

/// What to do about nodes that refuse to vote because they lost their memory, and when it is
/// safe: said once, after the per-node list, so that a fresh deployment's first error tells the
/// operator the way out and its one condition.
const INELIGIBLE_REMEDY: &str = "; if no lock can be live on those nodes (a fresh deployment, \
    or every holder stopped and its TTL passed), `redlock nodes trust` (or `trust_nodes()`) lets \
    them vote at once; otherwise wait: trusting a node that lost a live lock's key breaks mutual \
    exclusion";

/// What a cluster error means, and when it ends.
const CLUSTER_REMEDY: &str = "; a cluster node did not serve the key's slot (its master moved, \
    failed over or is down, even after the client learnt the slot map again): it votes again \
    once the cluster serves the slot";

/// What to do about a standalone server given several votes.
const NOT_A_CLUSTER_REMEDY: &str = "; `cluster_votes` names a node whose server does not run \
    in cluster mode, and a standalone server is one vote: give it one vote, or list a cluster";

/// What to do about two votes of one cluster on one master.
const SHARED_MASTER_REMEDY: &str = "; two votes of one cluster are on one master (a resharding, \
    or fewer masters than votes), and a master is one vote: move the votes' slots to masters of \
    their own (`redlock nodes check` shows where each lands), or lend fewer votes";

/// What a node without scripts cannot do, and the way out.
const NO_SAFE_FORM_REMEDY: &str = "; a node that runs no script (its user is denied \
    @scripting, or the server has no Lua) has no safe native form for this request (the \
    README's Server dialects table says what works without scripts; a restart-aware \
    acquisition there needs its connection's memory proof: RESP3 and `CLIENT TRACKING` for \
    the user); allow the lock user `EVAL`, `EVALSHA` and `SCRIPT`";

/// What to do about two node URLs that lead to one cluster.
const SAME_CLUSTER_REMEDY: &str = "; two node URLs lead to one cluster (they share a master), \
    and a cluster is one vote: list each cluster once";

/// What to do about a lock whose keys lie in several slots of a cluster node.
const CROSS_SLOT_REMEDY: &str = "; on a cluster node a lock's keys must share one hash slot: give \
    the resources a common {hash tag} (`{order-42}:invoice` and `{order-42}:stock`)";

/// Milliseconds for people: `850 ms`, `26 s`, `2 min 5 s`.
struct HumanMs(u64);

impl fmt::Display for HumanMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        match ms {
            0..1_000 => write!(f, "{ms} ms"),
            1_000..60_000 => write!(f, "{} s", ms.div_ceil(1_000)),
            _ => match ms.div_ceil(1_000) {
                s if s % 60 == 0 => write!(f, "{} min", s / 60),
                s => write!(f, "{} min {} s", s / 60, s % 60),
            },
        }
    }
}

/// Why a lock operation did not succeed. Its `Debug` starts with the message (and the remedy,
/// where there is one), as `Display` writes it, then the fields: a `main` that returns this
/// error prints what to do.
#[derive(Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another client holds the lock (on enough nodes to deny a quorum).
    #[error("lock is held by another client: {0}")]
    Contended(LockFailure),
    /// Too few nodes could vote to form a quorum: they failed, timed out, or sat out (a
    /// refusal to vote, restart-aware voting).
    #[error("too few nodes could vote: {0}")]
    Unavailable(LockFailure),
    /// A quorum agreed, but too late to leave the minimum validity.
    #[error("a quorum agreed too late: {0}")]
    TooSlow(LockFailure),
    /// The lock is no longer held (it expired, or too few nodes still hold its token).
    #[error("the lock was lost: {0}")]
    Lost(LockFailure),
    /// A lock to resume by its token is not held under that token on a quorum (a wrong token,
    /// or a lock that expired or was released). No key was changed.
    #[error("that token does not hold the lock: {0}")]
    NotHeld(LockFailure),
    /// An argument or setting is out of range.
    #[error("invalid input: {0}")]
    Config(#[from] ConfigError),
    /// A node URL could not be used.
    #[error("node #{index}: {reason}")]
    InvalidNode {
        /// Position of the URL in the list.
        index: usize,
        /// What is wrong (never the URL itself, which may hold a password).
        reason: String,
    },
    /// The operating system gave no entropy for a token, or the random generator repeated
    /// itself (a lifecycle id drawn three times over).
    #[error(
        "the operating system gave no entropy for the lock token, or the generator repeated itself"
    )]
    Entropy,
    /// The client's driver stopped before answering: the async runtime it ran on shut down (a
    /// later call starts a new driver on the caller's runtime), or its thread could not start.
    #[error("the client's driver stopped (its runtime shut down) before answering")]
    Stopped,
    /// The call was made where the client's driver cannot run: outside the adapter's async
    /// runtime, or on one without the timers it needs. Nothing was sent.
    #[error("{0}")]
    NoRuntime(&'static str),
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}\n\n")?;
        match self {
            Self::Contended(detail) => f.debug_tuple("Contended").field(detail).finish(),
            Self::Unavailable(detail) => f.debug_tuple("Unavailable").field(detail).finish(),
            Self::TooSlow(detail) => f.debug_tuple("TooSlow").field(detail).finish(),
            Self::Lost(detail) => f.debug_tuple("Lost").field(detail).finish(),
            Self::NotHeld(detail) => f.debug_tuple("NotHeld").field(detail).finish(),
            Self::Config(err) => f.debug_tuple("Config").field(err).finish(),
            Self::InvalidNode { index, reason } => f
                .debug_struct("InvalidNode")
                .field("index", index)
                .field("reason", reason)
                .finish(),
            Self::Entropy => f.write_str("Entropy"),
            Self::Stopped => f.write_str("Stopped"),
            Self::NoRuntime(_) => f.write_str("NoRuntime"),
        }
    }
}

impl Error {
    /// The error for an acquisition that failed.
    pub(crate) fn acquire_failed(labels: &[Arc<str>], failure: &AcquireFailure) -> Self {
        let detail = LockFailure::new(labels, &failure.votes, failure.attempts);
        match failure.reason {
            FailureReason::Contended => Self::Contended(detail),
            FailureReason::TooSlow => Self::TooSlow(detail),
            FailureReason::Unavailable => Self::Unavailable(detail),
            FailureReason::NotHeld => Self::NotHeld(detail),
            // A later engine's reason: no lock, and nothing more specific to say.
            _ => Self::Unavailable(detail),
        }
    }

    /// The error for an extension that failed.
    pub(crate) fn extend_failed(
        labels: &[Arc<str>],
        reason: ExtendFailure,
        votes: &[Vote],
    ) -> Self {
        let detail = LockFailure::new(labels, votes, 1);
        match reason {
            ExtendFailure::Unavailable => Self::Unavailable(detail),
            ExtendFailure::TooSlow => Self::TooSlow(detail),
            ExtendFailure::NotHeld | ExtendFailure::Expired => Self::Lost(detail),
            // A later engine's reason counts as a loss: the lock is not to be trusted.
            _ => Self::Lost(detail),
        }
    }

    /// The error for an auto-extended lock that could not be kept (whatever the cause: too few
    /// nodes still held it, its validity ran out, or no extension could finish in time).
    pub(crate) fn lost(labels: &[Arc<str>], cause: LossCause, votes: &[Vote]) -> Self {
        let mut detail = LockFailure::new(labels, votes, 1);
        detail.cause = Some(cause);
        Self::Lost(detail)
    }

    /// The per-node detail, for the lock-outcome variants.
    pub fn failure(&self) -> Option<&LockFailure> {
        match self {
            Self::Contended(f)
            | Self::Unavailable(f)
            | Self::TooSlow(f)
            | Self::Lost(f)
            | Self::NotHeld(f) => Some(f),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlock_core::{NodeErrorKind, SitOutCause};

    #[test]
    fn messages_name_each_node_and_its_answer() {
        let labels: Vec<Arc<str>> = vec![
            "127.0.0.1:1".into(),
            "127.0.0.1:2".into(),
            "127.0.0.1:3".into(),
        ];
        let failure = AcquireFailure {
            reason: FailureReason::Contended,
            votes: vec![
                Vote::Refused,
                Vote::TimedOut,
                Vote::Failed(NodeErrorKind::WrongType),
            ],
            attempts: 3,
        };
        let err = Error::acquire_failed(&labels, &failure);
        let ineligible = AcquireFailure {
            reason: FailureReason::Unavailable,
            votes: vec![
                Vote::Ineligible {
                    for_ms: 26_000,
                    cause: SitOutCause::Restart,
                },
                Vote::Granted,
                Vote::Granted,
            ],
            attempts: 1,
        };
        assert_eq!(
            Error::acquire_failed(&labels, &ineligible).to_string(),
            "too few nodes could vote: 1 round; 127.0.0.1:1 not voting for 26 s more: it is not \
             the process that stamped its epoch (a new run_id: a restart, from a snapshot or not, \
             or a failover to another server), 127.0.0.1:2 granted, 127.0.0.1:3 granted\
             ; if no lock can be live on those nodes (a fresh deployment, or every holder stopped \
             and its TTL passed), `redlock nodes trust` (or `trust_nodes()`) lets them vote at \
             once; otherwise wait: trusting a node that lost a live lock's key breaks mutual \
             exclusion"
        );
        assert!(
            !err.to_string().contains("trust"),
            "no remedy without an ineligible node"
        );
        // Debug, as a `main` returning the error prints it: the message and remedy first.
        let debug = format!("{:?}", Error::acquire_failed(&labels, &ineligible));
        assert!(
            debug.starts_with("too few nodes could vote: 1 round;")
                && debug.contains("`redlock nodes trust`")
                && debug.contains("Unavailable(LockFailure {"),
            "{debug}"
        );
        assert!(format!("{:?}", Error::Stopped).ends_with("\n\nStopped"));
        let scriptless = AcquireFailure {
            reason: FailureReason::Unavailable,
            votes: vec![
                Vote::Failed(NodeErrorKind::NoSafeForm),
                Vote::Failed(NodeErrorKind::NoSafeForm),
                Vote::Granted,
            ],
            attempts: 1,
        };
        let text = Error::acquire_failed(&labels, &scriptless).to_string();
        assert_eq!(
            text.matches("allow the lock user `EVAL`").count(),
            1,
            "the remedy once, after the list: {text}"
        );
        assert!(!err.to_string().contains("EVALSHA"), "no remedy without it");
        assert_eq!(
            err.to_string(),
            "lock is held by another client: 3 rounds; 127.0.0.1:1 held by another, 127.0.0.1:2 timed out, \
             127.0.0.1:3 failed (wrong type)"
        );
    }
}
