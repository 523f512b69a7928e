//! A node's memory identity ([`EPOCH_ID_KEY`](crate::EPOCH_ID_KEY)) and the seal of a vouched
//! acquisition: how a node whose memory lost acknowledged writes, while its epoch looks old, is
//! told apart from one whose memory is whole.
//!
//! The identity is `run_id:master_replid:database:evicted_keys`:
//! - `run_id` is new after every restart, from a snapshot or not;
//! - `master_replid` is new after a promotion, or any change of the replication history;
//! - `database` is the database the client selected: a database swapped in by `SWAPDB` carries
//!   the number it was stamped in, never this one;
//! - `evicted_keys` moves with every eviction (and `CONFIG RESETSTAT` zeroes it), so a lock
//!   key evicted on its own — under `volatile-lru`, say, where the epoch (no TTL) stays — makes
//!   the identity differ from the one stamped.
//!
//! A checked script compares it whole; a native proof does the same from the `INFO` it reads.
//! A proven connection whose node could lose keys without telling it (a `SWAPDB` the node can
//! run, an evicting `maxmemory-policy`) seals each vouched acquisition instead: the `SET` goes
//! out in a `MULTI` with `EXISTS` of the marker its proof wrote (a node that does not evict,
//! [`EPOCH_MARKER_PREFIX`](crate::EPOCH_MARKER_PREFIX)), or else an `MGET` of
//! the epoch and its stamp and, on an evicting node, `INFO stats` ([`SealRead`]); it counts
//! only if the marker is there, or the epoch is the one proven, the stamp names this database
//! and, where read, the eviction count has not moved ([`seal_breach`]).
//!
//! What it never does: it never reads a socket, and never takes an identity it cannot parse
//! as one (`None`: the node votes under its epoch alone, as where `INFO` is denied).

use crate::command::{EPOCH_ID_KEY, EPOCH_KEY};
use crate::epoch::EPOCH_CLAIM;
use crate::sit_out::{SitOutCause, split_stamp};

/// A node's memory identity as its `INFO server replication stats` (`info`) tells it, in
/// `database`: `run_id:master_replid:database:evicted_keys`, as the checked scripts stamp it;
/// `None` when `info` lacks any of them (a user denied `INFO`).
pub fn node_identity(info: &[u8], database: u32) -> Option<Vec<u8>> {
    let hex = |name: &[u8]| {
        let value = field(info, name)?;
        let value = value.get(..40)?;
        value.iter().all(u8::is_ascii_hexdigit).then_some(value)
    };
    let run = hex(b"run_id")?;
    let repl = hex(b"master_replid")?;
    let evicted = evicted_keys(info)?;
    let mut identity = Vec::with_capacity(100);
    identity.extend_from_slice(run);
    identity.push(b':');
    identity.extend_from_slice(repl);
    identity.extend_from_slice(format!(":{database}:").as_bytes());
    identity.extend_from_slice(evicted);
    Some(identity)
}

/// Whether the node evicts keys at its `maxmemory` (any `maxmemory_policy` but `noeviction`),
/// as its `INFO memory` (`info`) tells; `None` when `info` does not say.
pub fn evicts(info: &[u8]) -> Option<bool> {
    field(info, b"maxmemory_policy").map(|policy| policy != b"noeviction")
}

/// The channel on which a node publishes the keys it evicts from `database`, when its
/// `notify-keyspace-events` says so ([`notifies_evictions`]): `__keyevent@<db>__:evicted`. A
/// connection subscribed to it (RESP3, on the connection that acquires) is told of an eviction
/// before the reply to any command the node runs after it, the eviction's own command included.
pub fn eviction_channel(database: u32) -> Vec<u8> {
    format!("__keyevent@{database}__:evicted").into_bytes()
}

/// Whether `notify-keyspace-events` (`flags`, as `CONFIG GET` answers it) publishes evictions
/// on [`eviction_channel`]: key-event notifications (`E`) of the evicted class (`e`, or `A`,
/// which includes it).
pub fn notifies_evictions(flags: &[u8]) -> bool {
    flags.contains(&b'E') && (flags.contains(&b'e') || flags.contains(&b'A'))
}

/// `evicted_keys` of `INFO stats` (`info`): its digits, `None` when missing.
fn evicted_keys(info: &[u8]) -> Option<&[u8]> {
    let value = field(info, b"evicted_keys")?;
    (!value.is_empty() && value.iter().all(u8::is_ascii_digit)).then_some(value)
}

/// The value of `name:` on a line of `INFO` text, up to the line's end.
fn field<'i>(info: &'i [u8], name: &[u8]) -> Option<&'i [u8]> {
    info.split(|&b| b == b'\n').find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.strip_prefix(name)?.strip_prefix(b":")
    })
}

/// A read inside a sealed acquisition's `MULTI`, after the acquisition itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealRead {
    /// `EXISTS` of the marker the connection's proof wrote
    /// ([`EPOCH_MARKER_PREFIX`](crate::EPOCH_MARKER_PREFIX)): whether the acquisition ran in
    /// the database the proof read. Its arguments come from
    /// [`NodeBatch::seal_args`](crate::NodeBatch::seal_args).
    Marker,
    /// `MGET` of [`EPOCH_KEY`](crate::EPOCH_KEY) and [`EPOCH_ID_KEY`](crate::EPOCH_ID_KEY):
    /// the epoch the connection proved, and the identity the database was stamped with.
    Stamps,
    /// `PTTL` of the epoch key, where the connection proved an
    /// [`EPOCH_CLAIM`](crate::EPOCH_CLAIM) (a claim made again reads the same value).
    ClaimTtl,
    /// `INFO stats`: the node's eviction count now (on a node that evicts).
    Evictions,
}

impl SealRead {
    /// The command's arguments; the marker's name follows `EXISTS` for [`SealRead::Marker`]
    /// ([`NodeBatch::seal_args`](crate::NodeBatch::seal_args) gives them whole).
    pub fn args(self) -> &'static [&'static [u8]] {
        match self {
            Self::Marker => &[b"EXISTS"],
            Self::Stamps => &[b"MGET", EPOCH_KEY, EPOCH_ID_KEY],
            Self::ClaimTtl => &[b"PTTL", EPOCH_KEY],
            Self::Evictions => &[b"INFO", b"stats"],
        }
    }
}

/// What a sealed acquisition's reads answered inside its `EXEC` (`None`: nil, not read, or
/// failed), for [`NodeBatch::handle_seal`](crate::NodeBatch::handle_seal).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SealReplies<'a> {
    /// Whether the proof's marker exists ([`SealRead::Marker`]: `EXISTS` answered 1).
    pub marker: Option<bool>,
    /// The epoch's value ([`SealRead::Stamps`]).
    pub epoch: Option<&'a [u8]>,
    /// The identity the database was stamped with ([`SealRead::Stamps`]).
    pub stamped: Option<&'a [u8]>,
    /// The epoch's `PTTL` ([`SealRead::ClaimTtl`]).
    pub claim_ttl: Option<i64>,
    /// The `INFO stats` text ([`SealRead::Evictions`]).
    pub evictions: Option<&'a [u8]>,
}

/// The epoch a connection proved, as a seal compares it: a new epoch always reads otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SealEpoch {
    /// A number (the ms its memory began, or 0: trusted). A new one is stamped with the node's
    /// time, after the proof, so never with this number again.
    Number(u64),
    /// An [`EPOCH_CLAIM`](crate::EPOCH_CLAIM) whose `PTTL` was at most this: a claim made
    /// again starts over at 2^40 ms, above it.
    Claim {
        /// The claim's `PTTL` at the proof.
        pttl: i64,
    },
    /// Unreadable: no seal holds (every vouched acquisition is refused, and proves again).
    Unknown,
}

impl SealEpoch {
    /// The epoch a proof read: its value and, for a claim, its `PTTL`.
    pub(crate) fn of(value: Option<&[u8]>, pttl: Option<i64>) -> Self {
        match (value, pttl) {
            (Some(EPOCH_CLAIM), Some(pttl)) if pttl >= 0 => Self::Claim { pttl },
            (Some(value), _) => number(value).map_or(Self::Unknown, Self::Number),
            (None, _) => Self::Unknown,
        }
    }
}

/// An epoch's value as a number, as the scripts read it.
fn number(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

/// What a proven connection's vouched acquisitions read with their `SET`, atomically: the
/// proof's marker; or the epoch and the stamp, a claim's `PTTL`, and on a node that evicts
/// the eviction count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Seal {
    /// Whether the node evicts: `INFO stats` goes in too.
    pub(crate) evictions: bool,
    /// The epoch the connection proved.
    pub(crate) epoch: SealEpoch,
    /// The marker the proof wrote (named once, at the proof: its checked script, or a native
    /// proof's transaction), where the seal reads it alone: a node that does not evict.
    pub(crate) marker: Option<MarkerKey>,
}

/// A proof's marker key, `redlock:epoch:m:<nonce>`
/// ([`EPOCH_MARKER_PREFIX`](crate::EPOCH_MARKER_PREFIX)), kept without an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct MarkerKey {
    bytes: [u8; 36],
    len: u8,
}

impl MarkerKey {
    /// The marker of `nonce`, as the checked scripts name it.
    pub(crate) fn of(nonce: u64) -> Self {
        let prefix = crate::EPOCH_MARKER_PREFIX;
        let digits = Decimal::of(nonce);
        let digits = digits.as_bytes();
        let mut bytes = [0; 36];
        bytes[..prefix.len()].copy_from_slice(prefix);
        let len = prefix.len() + digits.len();
        bytes[prefix.len()..len].copy_from_slice(digits);
        Self {
            bytes,
            len: u8::try_from(len).unwrap_or(36),
        }
    }

    /// The key's name.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// A number in decimal, as a command's argument, kept without an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Decimal {
    digits: [u8; 20],
    /// Where the digits start.
    at: u8,
}

impl Decimal {
    /// `n` in decimal.
    pub(crate) fn of(n: u64) -> Self {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = n;
        loop {
            at -= 1;
            // A digit: below 10 by construction.
            digits[at] = b'0' + u8::try_from(n % 10).unwrap_or(0);
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Self {
            digits,
            at: u8::try_from(at).unwrap_or(0),
        }
    }

    /// The digits.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.digits[usize::from(self.at)..]
    }
}

impl Seal {
    /// The reads, in the order they go after the acquisition.
    pub(crate) fn reads(self) -> &'static [SealRead] {
        use SealRead::{ClaimTtl, Evictions, Marker, Stamps};
        if self.marker.is_some() {
            return &[Marker];
        }
        let claim = matches!(self.epoch, SealEpoch::Claim { .. });
        match (claim, self.evictions) {
            (false, false) => &[Stamps],
            (false, true) => &[Stamps, Evictions],
            (true, false) => &[Stamps, ClaimTtl],
            (true, true) => &[Stamps, ClaimTtl, Evictions],
        }
    }
}

/// Whether a sealed acquisition ran in the memory its connection proved: the proof's marker
/// exists, where the seal reads it; otherwise the epoch is the one proven (the same number; a
/// claim no younger), the stamp names `database`, and where the node's eviction count was
/// read, it is the count the stamp holds. `None` when it did;
/// otherwise what differs (anything unreadable, or another epoch: [`SitOutCause::Changed`]).
pub(crate) fn seal_breach(
    seal: Seal,
    replies: SealReplies<'_>,
    database: u32,
) -> Option<SitOutCause> {
    // The marker alone: only the database the proof read holds it.
    if seal.marker.is_some() {
        return (replies.marker != Some(true)).then_some(SitOutCause::SwappedDatabase);
    }
    let epoch_held = match seal.epoch {
        SealEpoch::Number(n) => replies.epoch.and_then(number) == Some(n),
        SealEpoch::Claim { pttl } => {
            replies.epoch == Some(EPOCH_CLAIM)
                && replies
                    .claim_ttl
                    .is_some_and(|now| (0..=pttl).contains(&now))
        }
        SealEpoch::Unknown => false,
    };
    let Some((stamped, _)) = replies.stamped.map(split_stamp) else {
        return Some(SitOutCause::Changed);
    };
    let mut parts = stamped.rsplitn(3, |&b| b == b':');
    let (Some(evicted), Some(db), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
        return Some(SitOutCause::Changed);
    };
    // As the scripts write it (no sign, no leading zero), compared without an allocation.
    // Checked first: a database swapped in also brings another epoch, and this names why.
    let canonical = db.len() == 1 || db.first() != Some(&b'0');
    let number = std::str::from_utf8(db)
        .ok()
        .and_then(|db| db.parse::<u32>().ok());
    if !canonical || db.first() == Some(&b'+') || number != Some(database) {
        return Some(SitOutCause::SwappedDatabase);
    }
    if !epoch_held {
        return Some(SitOutCause::Changed);
    }
    let evictions_held =
        !seal.evictions || replies.evictions.and_then(evicted_keys) == Some(evicted);
    (!evictions_held).then_some(SitOutCause::Eviction)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(run: &str, repl: &str, evicted: u64) -> String {
        format!(
            "# Server\r\nredis_version:7.0.15\r\nrun_id:{run}\r\ntcp_port:6379\r\n\r\n\
             # Replication\r\nrole:master\r\nmaster_replid:{repl}\r\nmaster_replid2:{}\r\n\r\n\
             # Stats\r\nexpired_keys:3\r\nevicted_keys:{evicted}\r\nevicted_clients:0\r\n",
            "0".repeat(40)
        )
    }

    #[test]
    fn the_identity_is_run_id_master_replid_database_and_evictions() {
        let run = "a".repeat(40);
        let repl = "0123456789".repeat(4);
        assert_eq!(
            node_identity(info(&run, &repl, 17).as_bytes(), 3),
            Some(format!("{run}:{repl}:3:17").into_bytes())
        );
        // Denied, cut short, not hex, or without the eviction count: unknown.
        assert_eq!(node_identity(b"NOPERM", 0), None);
        assert_eq!(node_identity(format!("\nrun_id:{run}").as_bytes(), 0), None);
        let short = format!("\nrun_id:abc\r\n\nmaster_replid:{repl}\r\nevicted_keys:0\r\n");
        assert_eq!(node_identity(short.as_bytes(), 0), None);
        let no_stats = format!("\nrun_id:{run}\r\nmaster_replid:{repl}\r\n");
        assert_eq!(node_identity(no_stats.as_bytes(), 0), None);
    }

    #[test]
    fn evictions_are_published_only_as_key_events_of_the_evicted_class() {
        assert_eq!(eviction_channel(3), b"__keyevent@3__:evicted");
        for heard in [&b"Ee"[..], b"eE", b"AE", b"KEA", b"Exe"] {
            assert!(notifies_evictions(heard), "{heard:?}");
        }
        // Keyspace events only, another class, or nothing.
        for deaf in [&b""[..], b"Ke", b"KA", b"Ex", b"E", b"e"] {
            assert!(!notifies_evictions(deaf), "{deaf:?}");
        }
    }

    #[test]
    fn a_node_evicts_under_any_policy_but_noeviction() {
        assert_eq!(
            evicts(b"# Memory\r\nmaxmemory_policy:noeviction\r\n"),
            Some(false)
        );
        assert_eq!(
            evicts(b"maxmemory:0\r\nmaxmemory_policy:volatile-lru\r\n"),
            Some(true)
        );
        assert_eq!(evicts(b"maxmemory_policy:allkeys-lfu"), Some(true));
        assert_eq!(evicts(b"NOPERM this user has no permissions"), None);
    }

    /// What a seal read: the epoch `epoch` and the stamp `stamped`.
    fn read<'a>(epoch: &'a [u8], stamped: &'a [u8]) -> SealReplies<'a> {
        SealReplies {
            epoch: Some(epoch),
            stamped: Some(stamped),
            ..SealReplies::default()
        }
    }

    #[test]
    fn a_seal_holds_only_in_the_database_epoch_and_eviction_count_it_proved() {
        use SitOutCause::{Changed, Eviction, SwappedDatabase};
        let stamped = format!("{}:{}:2:5", "a".repeat(40), "b".repeat(40)).into_bytes();
        let plain = Seal {
            evictions: false,
            epoch: SealEpoch::Number(1_700),
            marker: None,
        };
        assert_eq!(seal_breach(plain, read(b"1700", &stamped), 2), None);
        // A stamp with the cause of the sit-out that made it reads as its identity.
        let with_cause = [&stamped[..], b" restart"].concat();
        assert_eq!(seal_breach(plain, read(b"1700", &with_cause), 2), None);
        // A database swapped in from elsewhere, or none at all.
        let breach = |replies, database| seal_breach(plain, replies, database);
        assert_eq!(breach(read(b"1700", &stamped), 0), Some(SwappedDatabase));
        assert_eq!(breach(read(b"1700", &with_cause), 0), Some(SwappedDatabase));
        assert_eq!(breach(SealReplies::default(), 2), Some(Changed));
        assert_eq!(breach(read(b"1700", b"x:y"), 2), Some(Changed));
        assert_eq!(breach(read(b"1700", b""), 2), Some(Changed));
        let padded = format!("{}:{}:02:5", "a".repeat(40), "b".repeat(40)).into_bytes();
        let signed = format!("{}:{}:+2:5", "a".repeat(40), "b".repeat(40)).into_bytes();
        assert_eq!(breach(read(b"1700", &padded), 2), Some(SwappedDatabase));
        assert_eq!(breach(read(b"1700", &signed), 2), Some(SwappedDatabase));
        // A new epoch since the proof (stamped again by another client: the same identity).
        assert_eq!(breach(read(b"1800", &stamped), 2), Some(Changed));
        // Another epoch in a database swapped in: named by its stamp.
        assert_eq!(breach(read(b"1800", &stamped), 0), Some(SwappedDatabase));
        assert_eq!(breach(read(b"0", &stamped), 2), Some(Changed));
        // An eviction since the stamp, a reset count, an unreadable one.
        let evicting = Seal {
            evictions: true,
            ..plain
        };
        let counts: Vec<Vec<u8>> = [5, 6, 0]
            .iter()
            .map(|n| format!("# Stats\r\nevicted_keys:{n}\r\n").into_bytes())
            .collect();
        let with = |evictions: Option<&[u8]>| {
            let replies = SealReplies {
                evictions,
                ..read(b"1700", &stamped)
            };
            seal_breach(evicting, replies, 2)
        };
        assert_eq!(with(Some(&counts[0])), None);
        assert_eq!(with(Some(&counts[1])), Some(Eviction));
        assert_eq!(with(Some(&counts[2])), Some(Eviction));
        assert_eq!(with(Some(b"NOPERM")), Some(Eviction));
        assert_eq!(with(None), Some(Eviction));
        // A claim proven at PTTL p holds while its PTTL only falls; made again, it is above p.
        let claim = Seal {
            evictions: false,
            epoch: SealEpoch::of(Some(EPOCH_CLAIM), Some(1_000)),
            marker: None,
        };
        let ttl = |pttl| {
            let replies = SealReplies {
                claim_ttl: Some(pttl),
                ..read(b"claimed", &stamped)
            };
            seal_breach(claim, replies, 2)
        };
        assert_eq!(ttl(900), None);
        assert_eq!(ttl(1_001), Some(Changed));
        assert_eq!(ttl(-2), Some(Changed));
        let unknown = Seal {
            evictions: false,
            epoch: SealEpoch::of(Some(b"x"), None),
            marker: None,
        };
        assert_eq!(seal_breach(unknown, read(b"x", &stamped), 2), Some(Changed));
    }

    #[test]
    fn a_seal_reads_the_stamps_a_claims_ttl_and_on_an_evicting_node_the_eviction_count() {
        let number = Seal {
            evictions: false,
            epoch: SealEpoch::Number(5),
            marker: None,
        };
        assert_eq!(number.reads(), &[SealRead::Stamps]);
        let claim = Seal {
            evictions: true,
            epoch: SealEpoch::Claim { pttl: 5 },
            marker: None,
        };
        assert_eq!(
            claim.reads(),
            &[SealRead::Stamps, SealRead::ClaimTtl, SealRead::Evictions]
        );
        assert_eq!(
            SealRead::Stamps.args(),
            &[&b"MGET"[..], EPOCH_KEY, EPOCH_ID_KEY]
        );
        // With a marker, it alone (the node evicts nothing and runs scripts).
        let marked = Seal {
            marker: Some(MarkerKey::of(7)),
            ..number
        };
        assert_eq!(marked.reads(), &[SealRead::Marker]);
    }

    /// A seal that reads the proof's marker holds exactly when `EXISTS` found it: another
    /// database (no marker of this proof), an expired or refused marker, or an unread reply is
    /// a breach, whatever the epoch and stamp say.
    #[test]
    fn a_marked_seal_holds_only_where_its_marker_exists() {
        let stamped = format!("{}:{}:2:5", "a".repeat(40), "b".repeat(40)).into_bytes();
        let marked = Seal {
            evictions: false,
            epoch: SealEpoch::Number(1_700),
            marker: Some(MarkerKey::of(42)),
        };
        let with = |marker| SealReplies {
            marker,
            ..read(b"1700", &stamped)
        };
        assert_eq!(seal_breach(marked, with(Some(true)), 2), None);
        let swapped = Some(SitOutCause::SwappedDatabase);
        assert_eq!(seal_breach(marked, with(Some(false)), 2), swapped);
        assert_eq!(seal_breach(marked, with(None), 2), swapped);
        assert_eq!(seal_breach(marked, SealReplies::default(), 2), swapped);
    }

    #[test]
    fn a_marker_key_is_the_prefix_and_the_nonce_in_decimal() {
        assert_eq!(MarkerKey::of(0).as_bytes(), b"redlock:epoch:m:0");
        assert_eq!(MarkerKey::of(1234).as_bytes(), b"redlock:epoch:m:1234");
        assert_eq!(
            MarkerKey::of(u64::MAX).as_bytes(),
            b"redlock:epoch:m:18446744073709551615"
        );
    }
}
