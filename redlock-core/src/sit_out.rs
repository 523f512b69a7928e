//! Why a node sits out: the cause a refusal to vote names (restart-aware voting).
//!
//! When a checked script (or a native proof) stamps a new epoch, it writes the cause after the
//! identity in [`EPOCH_ID_KEY`](crate::EPOCH_ID_KEY) — `run_id:master_replid:db:evicted cause`
//! — so that every refusal until the sit-out ends, on any client, names it, and answers
//! `{-ms, cause}`. An identity adopted or trusted carries no cause.
//!
//! What it never does: a cause never decides anything. Whether a node votes is decided by its
//! epoch and identity alone; the cause only tells an operator why it waits.

use std::fmt;

/// Why a node refuses to vote: what made its memory young.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SitOutCause {
    /// The node had no epoch: a new node, a flush, a restart without persistence, or its epoch
    /// key deleted or evicted.
    NoEpoch,
    /// The node is not the process that stamped its epoch (a new `run_id`): it restarted, from
    /// a snapshot or not, or its address now leads to another server (a failover).
    Restart,
    /// The node's replication history changed since (a new `master_replid`, the same process):
    /// a promotion, a demotion, or a master whose first replica attached.
    Replication,
    /// Another database was swapped in (`SWAPDB`): its stamp names another number, or it holds
    /// no marker of the connection's proof ([`EPOCH_MARKER_PREFIX`](crate::EPOCH_MARKER_PREFIX)).
    SwappedDatabase,
    /// The node evicted keys since its epoch was stamped (`evicted_keys` moved).
    Eviction,
    /// This connection saw its proof of the node's memory end (an invalidation of the epoch
    /// pushed, the connection ended, or a sealed acquisition read another epoch): the next
    /// acquisition reads the node's memory again.
    Changed,
    /// The epoch is young, and no cause was recorded with it (stamped by an earlier release, by
    /// a node whose `INFO` is denied, or by hand).
    Unrecorded,
}

impl SitOutCause {
    /// Every cause, in the order the docs list them.
    pub const ALL: [Self; 7] = [
        Self::NoEpoch,
        Self::Restart,
        Self::Replication,
        Self::SwappedDatabase,
        Self::Eviction,
        Self::Changed,
        Self::Unrecorded,
    ];

    /// The word the checked scripts write in the stamp and answer with a refusal, and the
    /// value of the `cause` label of the `redlock_node_sit_outs_total` metric.
    pub fn word(self) -> &'static str {
        match self {
            Self::NoEpoch => "no-epoch",
            Self::Restart => "restart",
            Self::Replication => "replication",
            Self::SwappedDatabase => "database",
            Self::Eviction => "eviction",
            Self::Changed => "changed",
            Self::Unrecorded => "unrecorded",
        }
    }

    /// The cause a script's word names; [`Unrecorded`](Self::Unrecorded) for any other.
    pub fn from_word(word: &[u8]) -> Self {
        Self::ALL
            .into_iter()
            .find(|cause| cause.word().as_bytes() == word)
            .unwrap_or(Self::Unrecorded)
    }

    /// Why a node whose epoch was stamped with identity `was` (`None`: no stamp, on a node
    /// that evicted keys) and whose identity is `now` sits out: the first of its `run_id`,
    /// `master_replid` and database that differs, else its eviction count. As the scripts
    /// decide it.
    pub fn of_change(was: Option<&[u8]>, now: &[u8]) -> Self {
        let Some(was) = was else {
            return Self::Eviction;
        };
        let mut was = was.split(|&b| b == b':');
        let mut now = now.split(|&b| b == b':');
        for cause in [Self::Restart, Self::Replication, Self::SwappedDatabase] {
            if was.next() != now.next() {
                return cause;
            }
        }
        Self::Eviction
    }
}

impl fmt::Display for SitOutCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoEpoch => {
                "it had no epoch (a new node, a flush, a restart without persistence, or the \
                 epoch key deleted or evicted)"
            }
            Self::Restart => {
                "it is not the process that stamped its epoch (a new run_id: a restart, from a \
                 snapshot or not, or a failover to another server)"
            }
            Self::Replication => {
                "its replication history changed since its epoch was stamped (a new \
                 master_replid: a promotion, a demotion, or its first replica attached)"
            }
            Self::SwappedDatabase => "another database was swapped in (SWAPDB)",
            Self::Eviction => "it evicted keys since its epoch was stamped",
            Self::Changed => {
                "its memory changed under this client's connection (the next request reads it \
                 again)"
            }
            Self::Unrecorded => "its memory is young (no cause recorded)",
        })
    }
}

/// Whether the stamp read back (`stamped`, `None`: missing) still names the node's memory
/// whose identity is now `identity`, as the checked scripts decide: `None` when it is the same
/// identity, or one the node adopts (empty: a native trust; missing on a node that never
/// evicted a key); otherwise why the node sits out (a missing stamp on a node that evicted
/// keys may itself have been evicted).
pub fn stamp_change(stamped: Option<&[u8]>, identity: &[u8]) -> Option<SitOutCause> {
    match stamped.map(|stamped| split_stamp(stamped).0) {
        Some([]) => None,
        Some(was) if was == identity => None,
        None if identity.ends_with(b":0") => None,
        was => Some(SitOutCause::of_change(was, identity)),
    }
}

/// A stamp ([`EPOCH_ID_KEY`](crate::EPOCH_ID_KEY)) read back: the identity, and the cause of
/// the sit-out that stamped it, if one was recorded.
pub fn split_stamp(stamp: &[u8]) -> (&[u8], Option<SitOutCause>) {
    match stamp.iter().position(|&b| b == b' ') {
        Some(space) => (
            &stamp[..space],
            Some(SitOutCause::from_word(&stamp[space + 1..])),
        ),
        None => (stamp, None),
    }
}

/// The stamp of a new epoch: `identity`, a space, and the cause's word.
pub(crate) fn stamp_with_cause(identity: &[u8], cause: SitOutCause) -> Vec<u8> {
    let mut stamp = Vec::with_capacity(identity.len() + 12);
    stamp.extend_from_slice(identity);
    stamp.push(b' ');
    stamp.extend_from_slice(cause.word().as_bytes());
    stamp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_field_that_differs_names_the_cause() {
        let was = b"aaaa:bbbb:0:3";
        assert_eq!(
            SitOutCause::of_change(Some(was), b"cccc:dddd:0:0"),
            SitOutCause::Restart
        );
        assert_eq!(
            SitOutCause::of_change(Some(was), b"aaaa:dddd:0:3"),
            SitOutCause::Replication
        );
        assert_eq!(
            SitOutCause::of_change(Some(was), b"aaaa:bbbb:1:3"),
            SitOutCause::SwappedDatabase
        );
        assert_eq!(
            SitOutCause::of_change(Some(was), b"aaaa:bbbb:0:4"),
            SitOutCause::Eviction
        );
        assert_eq!(
            SitOutCause::of_change(None, b"aaaa:bbbb:0:4"),
            SitOutCause::Eviction
        );
    }

    #[test]
    fn a_stamp_changes_unless_it_is_the_identity_or_adopted() {
        let now = b"aaaa:bbbb:0:3";
        assert_eq!(stamp_change(Some(now), now), None);
        assert_eq!(stamp_change(Some(b"aaaa:bbbb:0:3 restart"), now), None);
        assert_eq!(
            stamp_change(Some(b""), now),
            None,
            "a native trust: adopted"
        );
        assert_eq!(
            stamp_change(None, b"aaaa:bbbb:0:0"),
            None,
            "never evicted: adopted"
        );
        assert_eq!(stamp_change(None, now), Some(SitOutCause::Eviction));
        assert_eq!(
            stamp_change(Some(b"cccc:bbbb:0:3 eviction"), now),
            Some(SitOutCause::Restart)
        );
    }

    #[test]
    fn words_round_trip_and_stamps_split() {
        for cause in SitOutCause::ALL
            .into_iter()
            .filter(|cause| *cause != SitOutCause::Unrecorded)
        {
            assert_eq!(SitOutCause::from_word(cause.word().as_bytes()), cause);
            let stamp = stamp_with_cause(b"a:b:0:0", cause);
            assert_eq!(split_stamp(&stamp), (&b"a:b:0:0"[..], Some(cause)));
        }
        assert_eq!(SitOutCause::from_word(b"other"), SitOutCause::Unrecorded);
        assert_eq!(SitOutCause::from_word(b""), SitOutCause::Unrecorded);
        assert_eq!(split_stamp(b"a:b:0:0"), (&b"a:b:0:0"[..], None));
        assert_eq!(split_stamp(b""), (&b""[..], None));
    }
}
