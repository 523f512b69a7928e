//! The error type every adapter returns, with per-node detail.

use std::fmt;
use std::sync::Arc;

use redlock_core::{AcquireFailure, ConfigError, ExtendFailure, FailureReason, NodeRelease, Vote};

/// One node's part in an outcome, the node named by `host:port` (never with credentials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport<T> {
    /// `host:port` of the node.
    pub node: Arc<str>,
    /// What it did.
    pub result: T,
}

/// Per-node detail of a lock operation that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockFailure {
    /// How many rounds ran (1 for an extension).
    pub attempts: u32,
    /// Each node's answer in the last round (empty when nothing was sent).
    pub nodes: Vec<NodeReport<Vote>>,
}

impl LockFailure {
    /// Pairs `votes` with the node labels.
    pub fn new(labels: &[Arc<str>], votes: &[Vote], attempts: u32) -> Self {
        let nodes = labels
            .iter()
            .zip(votes)
            .map(|(node, vote)| NodeReport {
                node: node.clone(),
                result: *vote,
            })
            .collect();
        Self { attempts, nodes }
    }
}

impl fmt::Display for LockFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
                Vote::Pending => f.write_str("no answer yet"),
                Vote::Granted => f.write_str("granted"),
                Vote::Refused => f.write_str("held by another"),
                Vote::TimedOut => f.write_str("timed out"),
                Vote::Failed(kind) => write!(f, "failed ({kind})"),
                _ => f.write_str("?"),
            }?;
        }
        Ok(())
    }
}

/// Why a lock operation did not succeed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another client holds the lock (on enough nodes to deny a quorum).
    #[error("lock is held by another client: {0}")]
    Contended(LockFailure),
    /// Too few nodes answered to form a quorum.
    #[error("not enough nodes answered: {0}")]
    Unavailable(LockFailure),
    /// A quorum agreed, but too late to leave the minimum validity.
    #[error("a quorum agreed too late: {0}")]
    TooSlow(LockFailure),
    /// The lock is no longer held (it expired, or too few nodes still hold its token).
    #[error("the lock was lost: {0}")]
    Lost(LockFailure),
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
    /// The operating system gave no entropy for a token.
    #[error("the operating system gave no entropy for the lock token")]
    Entropy,
}

impl Error {
    /// The error for an acquisition that failed.
    pub fn acquire_failed(labels: &[Arc<str>], failure: &AcquireFailure) -> Self {
        let detail = LockFailure::new(labels, &failure.votes, failure.attempts);
        match failure.reason {
            FailureReason::Contended => Self::Contended(detail),
            FailureReason::TooSlow => Self::TooSlow(detail),
            _ => Self::Unavailable(detail),
        }
    }

    /// The error for an extension that failed.
    pub fn extend_failed(labels: &[Arc<str>], reason: ExtendFailure, votes: &[Vote]) -> Self {
        let detail = LockFailure::new(labels, votes, 1);
        match reason {
            ExtendFailure::Unavailable => Self::Unavailable(detail),
            ExtendFailure::TooSlow => Self::TooSlow(detail),
            _ => Self::Lost(detail),
        }
    }

    /// The per-node detail, for the lock-outcome variants.
    pub fn failure(&self) -> Option<&LockFailure> {
        match self {
            Self::Contended(f) | Self::Unavailable(f) | Self::TooSlow(f) | Self::Lost(f) => Some(f),
            _ => None,
        }
    }
}

/// What each node did with a release. Releasing a lock that expired is a normal report
/// (`Absent` or `HeldByOther`), not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseReport {
    /// One entry per node, in the order the nodes were given.
    pub nodes: Vec<NodeReport<NodeRelease>>,
}

impl ReleaseReport {
    /// Pairs the engine's per-node results with node labels.
    pub fn new(labels: &[Arc<str>], report: &redlock_core::ReleaseReport) -> Self {
        let nodes = labels
            .iter()
            .zip(&report.nodes)
            .map(|(node, result)| NodeReport {
                node: node.clone(),
                result: *result,
            })
            .collect();
        Self { nodes }
    }

    /// How many nodes deleted our keys.
    pub fn released(&self) -> usize {
        self.count(|r| r == NodeRelease::Released)
    }

    /// How many nodes hold a key under another token (left alone).
    pub fn held_by_other(&self) -> usize {
        self.count(|r| r == NodeRelease::HeldByOther)
    }

    /// How many nodes had none of our keys.
    pub fn absent(&self) -> usize {
        self.count(|r| r == NodeRelease::Absent)
    }

    /// How many nodes failed or did not answer in time (their keys, if any, expire by TTL).
    pub fn unreachable(&self) -> usize {
        self.count(|r| {
            matches!(
                r,
                NodeRelease::Failed(_) | NodeRelease::TimedOut | NodeRelease::Pending
            )
        })
    }

    fn count(&self, f: impl Fn(NodeRelease) -> bool) -> usize {
        self.nodes.iter().filter(|n| f(n.result)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlock_core::NodeErrorKind;

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
        assert_eq!(
            err.to_string(),
            "lock is held by another client: 3 rounds; 127.0.0.1:1 held by another, 127.0.0.1:2 timed out, \
             127.0.0.1:3 failed (wrong type)"
        );
    }
}
