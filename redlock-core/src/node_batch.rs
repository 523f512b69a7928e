//! One batch on one connection to a node: each request's form there, the reads that prove the
//! node's memory, and how each answer counts — the memory-proof protocol of
//! [`MemoryWatch`](crate::MemoryWatch), sans-IO.
//!
//! See [`NodeBatch`] for the protocol.

use std::time::Instant;

use smallvec::SmallVec;

use crate::command::{Command, Op, RedisForm};
use crate::dialect::Dialect;
use crate::epoch::{EPOCH_CLAIM, Epoch};
use crate::identity::{
    Decimal, MarkerKey, Seal, SealEpoch, SealRead, SealReplies, evicts, node_identity,
    notifies_evictions, seal_breach,
};
use crate::keyspace::{EpochNames, Keyspace};
use crate::memory_watch::{MemoryCheck, MemoryWatch, refusal};
use crate::output::Transmit;
use crate::reply::{NodeErrorKind, Reply};
use crate::sit_out::{SitOutCause, split_stamp, stamp_change, stamp_with_cause};

/// A command sent ahead of a batch's requests to prove the node's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProofRead {
    /// `CLIENT CACHING YES`, on a connection that tracks in `OPTIN` mode: the node tracks what
    /// the next command reads (the epoch) for this connection. Its reply goes to
    /// [`NodeBatch::handle_caching`].
    Caching,
    /// `GET` of the epoch key: the node's epoch, and (under client tracking) the node tracks the
    /// key for this connection from then on. Its reply goes to [`NodeBatch::handle_epoch`].
    Epoch,
    /// `PTTL` of the epoch key, on a node that runs no script: how old an
    /// [`EPOCH_CLAIM`](crate::EPOCH_CLAIM) is. Its reply goes to [`NodeBatch::handle_pttl`].
    Pttl,
    /// `TIME`: the node's clock, on a node that runs no script. Its reply goes to
    /// [`NodeBatch::handle_time`].
    Time,
    /// `GET` of [`EPOCH_ID_KEY`](crate::EPOCH_ID_KEY), on a node that runs no script: the
    /// identity the epoch was stamped with. Its reply goes to [`NodeBatch::handle_stamped`].
    Stamped,
    /// `INFO server replication stats memory`: the node's identity now (which a node without
    /// scripts compares with the stamped one), and whether it evicts keys (which decides what
    /// the connection's vouched acquisitions read, [`SealRead`]). Its reply goes to
    /// [`NodeBatch::handle_info`].
    Info,
    /// `SET` of the epoch key to [`EPOCH_CLAIM`](crate::EPOCH_CLAIM) `NX PX 2^40`, on a node
    /// that runs no script: a missing epoch is claimed, by the node's own clock. Its reply
    /// (whether it wrote) goes to [`NodeBatch::handle_claim`].
    Claim,
    /// `MULTI`, on a native proof that writes a marker ([`NodeBatch::mark`]): the reads up to
    /// [`ProofRead::Exec`] run as one transaction, in one database, with the marker's write.
    /// Its reply decides nothing; the queued reads' replies come in the `EXEC`'s array (see
    /// [`NodeBatch`]).
    Multi,
    /// `SET redlock:epoch:m:<nonce> 1 PX <longest TTL>`, in a native proof's transaction: the
    /// proof's marker ([`EPOCH_MARKER_PREFIX`](crate::EPOCH_MARKER_PREFIX)), written in the
    /// database the transaction reads, whatever it finds (a marker of a proof that does not
    /// let the node vote is never read). Its arguments are [`NodeBatch::read_args`]; its reply
    /// goes to [`NodeBatch::handle_marker`].
    Marker,
    /// `EXEC`, which ends a native proof's transaction ([`ProofRead::Multi`]).
    Exec,
    /// `SET redlock:epoch:m:0 1 PX 1 XX` (a write that never happens: no proof's marker has
    /// that name), on a proof by script that writes a marker ([`NodeBatch::mark`]): whether
    /// this user may write the markers now (asked at each proof, beside [`Dialect::markers`]
    /// at connect, so an ACL changed since costs no sit-out: a seal that found its marker
    /// missing would refuse)
    /// ([`EPOCH_MARKER_PREFIX`](crate::EPOCH_MARKER_PREFIX); an ACL may deny them). Where it
    /// may not, the connection's seals read the epoch and its stamp. Its reply goes to
    /// [`NodeBatch::handle_markable`].
    Markable,
    /// `CONFIG GET notify-keyspace-events`, on a connection subscribed to its node's eviction
    /// events ([`eviction_channel`](crate::eviction_channel)): whether the node publishes them
    /// ([`notifies_evictions`](crate::notifies_evictions)). Where it does, the connection hears
    /// every eviction before the reply to any later command, and its vouched acquisitions read
    /// no eviction count. Its reply goes to [`NodeBatch::handle_notifications`].
    Notifications,
}

/// A write that follows a native proof's replies on the same connection, right away
/// ([`NodeBatch::stamps`]): what the checked script does in one call, in the two steps a node
/// without scripts allows. Each writes only what the proof read, so a stamp that arrives after
/// the node changed again at worst makes it wait once more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    /// `SET` of the epoch key to [`EPOCH_CLAIM`](crate::EPOCH_CLAIM) `PX 2^40`, `IFEQ` the
    /// value the proof read where the node has `IFEQ`: the node's identity changed, its memory
    /// begins now.
    Restamp {
        /// The epoch as the proof read it (`None`: overwrite whatever is there).
        read: Option<Vec<u8>>,
        /// Which epoch: the node's, or a cluster slot's.
        names: EpochNames,
    },
    /// `SET` of [`EPOCH_ID_KEY`](crate::EPOCH_ID_KEY) to the identity the proof read: after a
    /// restamp or a claim, or (`NX`) for an epoch that has none yet, which adopts it.
    Identity {
        /// `run_id:master_replid:database:evicted_keys`, as [`node_identity`] reads it; for a
        /// new epoch followed by a space and why the node sits out ([`SitOutCause::word`]).
        identity: Vec<u8>,
        /// Only where the key is missing (`NX`).
        if_missing: bool,
        /// Which epoch's identity: the node's, or a cluster slot's.
        names: EpochNames,
    },
}

impl Stamp {
    /// The command's arguments.
    pub fn args(&self) -> SmallVec<[&[u8]; 7]> {
        match self {
            Self::Restamp { read, names } => {
                let mut args: SmallVec<[&[u8]; 7]> =
                    SmallVec::from_slice(&[b"SET", names.epoch(), EPOCH_CLAIM, b"PX", CLAIM_TTL]);
                if let Some(read) = read {
                    args.extend_from_slice(&[b"IFEQ", read]);
                }
                args
            }
            Self::Identity {
                identity,
                if_missing,
                names,
            } => {
                let mut args: SmallVec<[&[u8]; 7]> =
                    SmallVec::from_slice(&[b"SET", names.id(), identity]);
                if *if_missing {
                    args.push(b"NX");
                }
                args
            }
        }
    }
}

/// `EPOCH_CLAIM_TTL_MS` in decimal, for the claim's `PX`.
const CLAIM_TTL: &[u8] = b"1099511627776";

impl ProofRead {
    /// The command's arguments on a standalone node; for [`ProofRead::Marker`], whose
    /// arguments name the proof's marker, only its first: use [`NodeBatch::read_args`], which
    /// gives every read's (on a cluster, the reads of an epoch name the slot's).
    pub fn args(self) -> &'static [&'static [u8]] {
        match self {
            Self::Caching => &[b"CLIENT", b"CACHING", b"YES"],
            Self::Epoch => &[b"GET", crate::EPOCH_KEY],
            Self::Pttl => &[b"PTTL", crate::EPOCH_KEY],
            Self::Time => &[b"TIME"],
            Self::Stamped => &[b"GET", crate::EPOCH_ID_KEY],
            Self::Info => &[b"INFO", b"server", b"replication", b"stats", b"memory"],
            Self::Claim => &[
                b"SET",
                crate::EPOCH_KEY,
                EPOCH_CLAIM,
                b"NX",
                b"PX",
                CLAIM_TTL,
            ],
            Self::Notifications => &[b"CONFIG", b"GET", b"notify-keyspace-events"],
            Self::Markable => &[b"SET", b"redlock:epoch:m:0", b"1", b"PX", b"1", b"XX"],
            Self::Multi => &[b"MULTI"],
            Self::Exec => &[b"EXEC"],
            // Named per proof: see `NodeBatch::read_args`.
            Self::Marker => &[b"SET"],
        }
    }
}

/// What goes ahead of a batch that proves: whether the node publishes its evictions (only on a
/// connection subscribed to them: without, each list goes from its second read), the epoch
/// (tracked for this connection alone on an `OPTIN` connection), the node's `INFO`, and on a
/// node without scripts the epoch's age, its stamp, the time and the claim.
const PROVE_BY_SCRIPT: &[ProofRead] = &[
    ProofRead::Notifications,
    ProofRead::Caching,
    ProofRead::Epoch,
    ProofRead::Info,
];
const PROVE_BY_SCRIPT_NOLOOP: &[ProofRead] =
    &[ProofRead::Notifications, ProofRead::Epoch, ProofRead::Info];
const PROVE_BY_SCRIPT_MARKED: &[ProofRead] = &[
    ProofRead::Notifications,
    ProofRead::Caching,
    ProofRead::Epoch,
    ProofRead::Info,
    ProofRead::Markable,
];
const PROVE_BY_SCRIPT_NOLOOP_MARKED: &[ProofRead] = &[
    ProofRead::Notifications,
    ProofRead::Epoch,
    ProofRead::Info,
    ProofRead::Markable,
];
const PROVE_NATIVELY: &[ProofRead] = &[
    ProofRead::Notifications,
    ProofRead::Caching,
    ProofRead::Epoch,
    ProofRead::Pttl,
    ProofRead::Time,
    ProofRead::Stamped,
    ProofRead::Info,
    ProofRead::Claim,
];
const PROVE_NATIVELY_NOLOOP: &[ProofRead] = &[
    ProofRead::Notifications,
    ProofRead::Epoch,
    ProofRead::Pttl,
    ProofRead::Time,
    ProofRead::Stamped,
    ProofRead::Info,
    ProofRead::Claim,
];
/// A native proof that writes a marker reads its database in one transaction with the
/// marker's write (no swap between them), and `INFO` after it: a refused `INFO` (an ACL)
/// would abort the transaction, and an eviction after the reads moves the count it reads.
/// `CLIENT CACHING YES` right before `MULTI` tracks every key the transaction reads (the epoch
/// and its stamp; checked on Redis 7.0, Valkey 8.1 and 9.1, the servers CI runs; the watch
/// ignores a push of the stamp).
const PROVE_NATIVELY_MARKED: &[ProofRead] = &[
    ProofRead::Notifications,
    ProofRead::Caching,
    ProofRead::Multi,
    ProofRead::Epoch,
    ProofRead::Pttl,
    ProofRead::Time,
    ProofRead::Stamped,
    ProofRead::Claim,
    ProofRead::Marker,
    ProofRead::Exec,
    ProofRead::Info,
];
const PROVE_NATIVELY_NOLOOP_MARKED: &[ProofRead] = &[
    ProofRead::Notifications,
    ProofRead::Multi,
    ProofRead::Epoch,
    ProofRead::Pttl,
    ProofRead::Time,
    ProofRead::Stamped,
    ProofRead::Claim,
    ProofRead::Marker,
    ProofRead::Exec,
    ProofRead::Info,
];

/// Not answered (yet): what a read is until its reply is handed in.
const UNANSWERED: NodeErrorKind = NodeErrorKind::Protocol;

/// The reads of a proving batch, as they came back, and the marker a native proof writes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proof {
    /// Whether the node runs no script: the watch decides from the epoch and the time.
    native: bool,
    /// Whether `CLIENT CACHING YES` goes first (an `OPTIN` connection).
    opts_in: bool,
    /// How `CLIENT CACHING YES` went (`Ok` when not sent).
    caching: Result<(), NodeErrorKind>,
    /// The epoch's value (`None`: missing), or why it could not be read.
    epoch: Result<Option<Vec<u8>>, NodeErrorKind>,
    /// The epoch's `PTTL` in ms (`None`: another shape).
    pttl: Result<Option<i64>, NodeErrorKind>,
    /// The node's time in ms, when it was read.
    time: Result<Option<u64>, NodeErrorKind>,
    /// The identity the epoch was stamped with (`None`: missing), or why it could not be read.
    stamped: Result<Option<Vec<u8>>, NodeErrorKind>,
    /// The node's identity now (`None`: `INFO` denied or unreadable — the node votes under its
    /// epoch alone, as the scripts decide).
    identity: Option<Vec<u8>>,
    /// Whether the node evicts keys (`None`: unread).
    evicts: Option<bool>,
    /// Whether this proof's claim wrote the epoch.
    claimed: bool,
    /// Whether it asks the node whether it publishes its evictions (a subscribed connection).
    asks_notifications: bool,
    /// What the node said: it publishes its evictions (`Ok(true)`), it does not or said
    /// something else (`Ok(false)`), or the read failed.
    notifications: Result<bool, NodeErrorKind>,
    /// Whether the proof's marker is there for its seals: this user may touch markers
    /// ([`ProofRead::Markable`]), or a native proof's transaction wrote it
    /// ([`ProofRead::Marker`]); unread, no.
    markable: bool,
    /// Whether the node refused this user the marker (`NOPERM`, an ACL), which aborts a native
    /// proof's transaction: the connection's next proofs write none.
    markers_denied: bool,
    /// A native proof's marker write: the marker, and its TTL (the longest of the batch's
    /// proving acquisitions) in decimal, for [`NodeBatch::read_args`].
    marker: Option<(MarkerKey, Decimal)>,
}

/// What a native proof's reads say.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NativeReads {
    /// The epoch (`None`: missing or unreadable).
    epoch: Option<Epoch>,
    /// The node's time, in ms.
    now: u64,
    /// Whether the node's identity differs from the one the epoch was stamped with.
    changed: bool,
    /// Why the node would sit out: its epoch missing, what changed in its identity, or the
    /// cause its stamp recorded.
    cause: SitOutCause,
}

impl Proof {
    /// What the connection's vouched acquisitions read with their `SET` once this proof holds:
    /// nothing where the node can neither swap databases nor evict (nor, a cluster master,
    /// drop a lost slot's keys unheard: there, the stamps); the marker of `nonce` where
    /// the node can swap and does not evict (and the proof wrote it); the stamp, and on a node that evicts
    /// (or does not say) its eviction count, otherwise. Nothing either where the
    /// node's identity is unknown: no stamp to read, it votes under its epoch alone.
    fn seal(&self, dialect: &Dialect, nonce: Option<u64>) -> Option<Seal> {
        self.identity.as_ref()?;
        // A connection that hears every eviction needs no eviction count.
        let evictions = self.evicts != Some(false) && self.notifications != Ok(true);
        let value = self.epoch.as_ref().ok().and_then(Option::as_deref);
        let pttl = self.pttl.ok().flatten();
        (dialect.swapdb || evictions || dialect.silent_slot_drops).then_some(Seal {
            evictions,
            epoch: SealEpoch::of(value, pttl),
            // The checked script wrote the marker where the node let it vote, a native proof's
            // transaction wherever it ran; an evicting node's seal reads the stamp's eviction
            // count anyway.
            marker: nonce
                .filter(|_| !evictions && self.markable)
                .map(MarkerKey::of),
        })
    }

    /// Whether this proof may make the connection vouch: not on a cluster master that drops a
    /// lost slot's keys unheard ([`Dialect::silent_slot_drops`]) where the node's identity is
    /// unknown (`INFO` denied, or a Redis before 7.0 that reads one section only) — its seal
    /// needs the identity, so every acquisition there keeps its check.
    fn may_vouch(&self, dialect: &Dialect) -> bool {
        !dialect.silent_slot_drops || self.identity.is_some()
    }

    /// What the reads say, or why they cannot be trusted.
    fn native_reads(&self) -> Result<NativeReads, NodeErrorKind> {
        self.caching?;
        let value = self.epoch.clone()?;
        let pttl = self.pttl?;
        let now = self.time?.ok_or(NodeErrorKind::Protocol)?;
        let stamped = self.stamped.as_ref().map_err(|failed| *failed)?;
        let epoch = value.and_then(|value| Epoch::read(&value, pttl, now));
        let stamped = stamped.as_deref();
        let change = self
            .identity
            .as_deref()
            .and_then(|identity| stamp_change(stamped, identity))
            .filter(|_| epoch.is_some());
        let cause = match change {
            _ if epoch.is_none() => SitOutCause::NoEpoch,
            Some(change) => change,
            None => stamped
                .and_then(|stamped| split_stamp(stamped).1)
                .unwrap_or(SitOutCause::Unrecorded),
        };
        Ok(NativeReads {
            epoch,
            now,
            changed: change.is_some(),
            cause,
        })
    }
}

/// One batch on one connection to a node: each request's form there, the reads that prove the
/// node's memory, and how each answer counts.
///
/// A driver that sends a [`Batch`](crate::Batch) to a node builds a [`NodeBatch`] from it, the
/// node's [`Dialect`] and the connection's watch (none when the connection is not tracked), and
/// then only carries bytes:
///
/// 1. on a batch that proves (its [`NodeBatch::reads`] are not empty) it names the proof's
///    marker with a fresh random number ([`NodeBatch::mark`]); it writes the reads (each as
///    [`NodeBatch::read_args`]), then every request's [`NodeBatch::form`] (a sealed one in a
///    `MULTI` with its [`NodeBatch::seal_args`]), all in one pipeline — where the batch
///    [embeds](NodeBatch::embeds) its requests, their parts go right before the reads'
///    [`ProofRead::Exec`] instead;
/// 2. it hands the reads' replies to [`NodeBatch::handle_caching`],
///    [`NodeBatch::handle_epoch`], [`NodeBatch::handle_pttl`], [`NodeBatch::handle_time`],
///    [`NodeBatch::handle_stamped`], [`NodeBatch::handle_info`], [`NodeBatch::handle_claim`],
///    [`NodeBatch::handle_markable`] and [`NodeBatch::handle_marker`], a sealed request's
///    reads to [`NodeBatch::handle_seal`], and every push it read before the replies to the
///    watch. The reads between [`ProofRead::Multi`] and [`ProofRead::Exec`] are a
///    transaction: their replies are the `EXEC`'s array, in order (the `MULTI`'s and the
///    `QUEUED` replies decide nothing); where it failed (a read refused while queued, an
///    `EXEC` without an array), each read gets its own refusal, or else the first read's
///    refusal (what the node refused: `OOM`, `READONLY`), or else what the `EXEC` said, through
///    [`NodeBatch::handle_failed`];
/// 3. it sends [`NodeBatch::stamps`], if any, on the same connection right away (a node that
///    runs no script stamps its epoch and identity in these separate writes);
/// 4. it makes each request's answer of its parts ([`RedisForm::answer`]) and lets
///    [`NodeBatch::finish`] count them: a vouched answer counts only if the node pushed nothing
///    since the request went out, and a proving one may make the connection vouch.
///
/// # What it never does
/// It never reads a clock or a socket, never lets an answer count for more than the
/// connection has proven, never decides from a read that failed, and never makes an epoch of
/// a time the client read: a node without scripts claims its own ([`ProofRead::Claim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeBatch {
    dialect: Dialect,
    /// The epoch this batch proves: the node's, or on a cluster master the slot of the batch's
    /// first acquisition that must prove (the others of another slot keep their check).
    epoch: EpochNames,
    /// On a cluster master, each request's epoch (its slot's); empty on a standalone node,
    /// whose one epoch every request's is.
    epochs: SmallVec<[EpochNames; 1]>,
    /// The requests this batch does not run ([`NodeBatch::deferred`]).
    deferred: Vec<usize>,
    /// Each request's restart check on this connection, with its longest TTL (`None`: not a
    /// restart-checked acquisition, or an untracked connection).
    checks: SmallVec<[Option<(MemoryCheck, u64)>; 1]>,
    /// The reads ahead of the batch, when an acquisition proves (boxed: most batches prove
    /// nothing, and every batch is moved about whole).
    proof: Option<Box<Proof>>,
    /// Per request: what its seal found changed (`None`: it held), as
    /// [`NodeBatch::handle_seal`] read it; not read counts as changed.
    seal_breach: SmallVec<[Option<SitOutCause>; 1]>,
    /// Whether the batch writes the epoch itself (a trust): the proof ends with it.
    trusts: bool,
    /// Whether a proof here writes a marker ([`MemoryWatch::marks`], a node that can swap).
    marks: bool,
    /// The nonce of this batch's proof marker ([`NodeBatch::mark`]).
    nonce: Option<u64>,
    /// The one request whose checked script writes the marker: the batch's last that proves
    /// the node's memory anew (one database, one marker: no swap between two scripts can put
    /// one name in two databases). `None` on a native proof: its transaction writes it.
    marked: Option<usize>,
    /// Whether every request proves, each one plain command (`SET NX PX`, `MSETEX`): a native
    /// proof's transaction can then hold them ([`NodeBatch::embeds`]).
    plain_proving: bool,
    /// The requests the connection vouched for that prove anyway, each with the seal it keeps
    /// (none in a batch of plain acquisitions: no allocation).
    kept: Vec<(usize, Seal)>,

    /// When the batch went out, on the driver's clock: a proof counts from then.
    sent_at: Instant,
}

/// Request `index`'s epoch: its slot's on a cluster master (`epochs`), else the node's one.
fn epoch_at(epochs: &[EpochNames], index: usize) -> EpochNames {
    epochs
        .get(index)
        .copied()
        .unwrap_or_else(EpochNames::standalone)
}

impl NodeBatch {
    /// The batch `transmits`, going out at `now` on the driver's clock, on a connection to a
    /// node of `dialect` whose watch over the node's memory is `watch` (`None`: the connection
    /// is not tracked, and every restart-checked acquisition keeps its check).
    pub fn new(
        transmits: &[Transmit],
        dialect: &Dialect,
        watch: Option<&MemoryWatch>,
        now: Instant,
    ) -> Self {
        let checked = transmits
            .iter()
            .any(|transmit| transmit.command.restart_check_ms().is_some());
        match checked || dialect.keyspace == Keyspace::Cluster {
            true => Self::planned(transmits, dialect, watch, now),
            false => Self::unchecked(transmits, dialect, watch, now),
        }
    }

    /// [`new`](Self::new) for a batch of which no request is restart-checked (releases,
    /// extensions, acquisitions with restart-aware voting off), on a standalone node: no epoch,
    /// check, seal or proof to plan. Exactly what [`planned`](Self::planned) makes of it,
    /// without its passes over the batch (a release batch is half of every lock's).
    fn unchecked(
        transmits: &[Transmit],
        dialect: &Dialect,
        watch: Option<&MemoryWatch>,
        now: Instant,
    ) -> Self {
        let count = transmits.len();
        Self {
            dialect: *dialect,
            epoch: EpochNames::standalone(),
            epochs: SmallVec::new(),
            deferred: Vec::new(),
            checks: SmallVec::from_elem(None, count),
            proof: None,
            seal_breach: SmallVec::from_elem(Some(SitOutCause::Changed), count),
            trusts: transmits.iter().any(|t| t.command.op() == Op::Trust),
            marks: dialect.swapdb && dialect.markers && watch.is_some_and(MemoryWatch::marks),
            nonce: None,
            marked: None,
            // Every request proves a plain command: vacuously, of none.
            plain_proving: count == 0,
            kept: Vec::new(),
            sent_at: now,
        }
    }

    /// [`new`](Self::new), planned in full.
    fn planned(
        transmits: &[Transmit],
        dialect: &Dialect,
        watch: Option<&MemoryWatch>,
        now: Instant,
    ) -> Self {
        // A standalone node has one epoch; a cluster master one per slot: each acquisition is
        // checked against its own slot's (vouched where that slot is proven), and a batch
        // proves one slot, its first acquisition's that must prove. An acquisition that must
        // prove another slot keeps its check (the checked script reads its own slot's epoch).
        let epochs: SmallVec<[EpochNames; 1]> = match dialect.keyspace {
            Keyspace::Standalone => SmallVec::new(),
            Keyspace::Cluster => transmits
                .iter()
                .map(|transmit| {
                    let key = transmit.command.spec().keys().next().unwrap_or_default();
                    EpochNames::of(Keyspace::Cluster, key)
                })
                .collect(),
        };
        let epoch_of = |index: usize| epoch_at(&epochs, index);
        // Per request: its check, and for a request the connection vouched for that proves
        // anyway (a form with no seal), the seal its proof keeps.
        let mut kept: Vec<(usize, Seal)> = Vec::new();
        let mut checks: SmallVec<[Option<(MemoryCheck, u64)>; 1]> = transmits
            .iter()
            .enumerate()
            .map(|(index, transmit)| {
                let max_ttl = transmit.command.restart_check_ms()?;
                let check = match watch?.check(&epoch_of(index), max_ttl, now) {
                    // Only a plain `SET` (or `MSETEX`, or the fenced transaction that holds
                    // one) goes in a `MULTI` with its seal; any other form proves instead, its
                    // checked script reading the identity.
                    MemoryCheck::Vouched {
                        seen,
                        seal: Some(seal),
                    } if !matches!(
                        transmit.command.redis_form_vouched(dialect),
                        RedisForm::Set { .. }
                            | RedisForm::MSetEx { .. }
                            | RedisForm::FencedSet { .. }
                    ) =>
                    {
                        kept.push((index, seal));
                        MemoryCheck::Prove { seen }
                    }
                    check => check,
                };
                Some((check, max_ttl))
            })
            .collect();
        let proving = |check: &Option<(MemoryCheck, u64)>| {
            matches!(check, Some((MemoryCheck::Prove { .. }, _)))
        };
        let epoch = checks
            .iter()
            .position(proving)
            .map_or_else(EpochNames::standalone, epoch_of);
        let mut deferred = Vec::new();
        if dialect.keyspace == Keyspace::Cluster {
            for (index, check) in checks.iter_mut().enumerate() {
                if proving(check) && epoch_of(index) != epoch {
                    *check = None;
                    kept.retain(|(at, _)| *at != index);
                    // Without scripts it has no check of its own: it waits for a batch that
                    // proves its slot.
                    if !dialect.scripts {
                        deferred.push(index);
                    }
                }
            }
        }
        let seal_breach = checks.iter().map(|_| Some(SitOutCause::Changed)).collect();
        let proves = checks
            .iter()
            .any(|check| matches!(check, Some((MemoryCheck::Prove { .. }, _))));
        let opts_in = watch.is_some_and(MemoryWatch::opts_in);
        let proof = proves.then(|| {
            Box::new(Proof {
                native: !dialect.scripts,
                opts_in,
                caching: if opts_in { Err(UNANSWERED) } else { Ok(()) },
                epoch: Err(UNANSWERED),
                pttl: if dialect.scripts {
                    Ok(None)
                } else {
                    Err(UNANSWERED)
                },
                time: Err(UNANSWERED),
                stamped: if dialect.scripts {
                    Ok(None)
                } else {
                    Err(UNANSWERED)
                },
                identity: None,
                evicts: None,
                claimed: false,
                asks_notifications: watch.is_some_and(MemoryWatch::asks_notifications),
                notifications: Err(UNANSWERED),
                markable: false,
                markers_denied: false,
                marker: None,
            })
        });
        let trusts = transmits.iter().any(|t| t.command.op() == Op::Trust);
        let plain_proving = kept.is_empty()
            && transmits.iter().zip(&checks).all(|(transmit, check)| {
                matches!(check, Some((MemoryCheck::Prove { .. }, _)))
                    && matches!(
                        transmit.command.redis_form_vouched(dialect),
                        RedisForm::Set { .. } | RedisForm::MSetEx { .. }
                    )
            });
        Self {
            dialect: *dialect,
            epoch,
            epochs,
            deferred,
            checks,
            proof,
            seal_breach,
            trusts,
            marks: dialect.swapdb && dialect.markers && watch.is_some_and(MemoryWatch::marks),
            nonce: None,
            marked: None,
            plain_proving,
            kept,
            sent_at: now,
        }
    }

    /// The requests (indexes into the batch) this batch does not run: on a cluster master that
    /// runs no script, the acquisitions that must prove a slot other than the one this batch
    /// proves (a native proof reads one slot's epoch, and such an acquisition has no checked
    /// form). Nothing of theirs goes out and their answers here mean nothing: the driver sends
    /// them again, on the same connection, as a batch of their own once this one is done —
    /// which proves the first one's slot, and defers the others of yet another slot. Empty
    /// everywhere else (a node that runs scripts checks such an acquisition by script).
    pub fn deferred(&self) -> &[usize] {
        &self.deferred
    }

    /// The commands to send ahead of the requests, in this order.
    pub fn reads(&self) -> &'static [ProofRead] {
        match &self.proof {
            None => &[],
            Some(proof) => {
                let marked = self.nonce.is_some();
                let reads = match (proof.native, proof.opts_in, marked) {
                    (true, true, false) => PROVE_NATIVELY,
                    (true, false, false) => PROVE_NATIVELY_NOLOOP,
                    (true, true, true) => PROVE_NATIVELY_MARKED,
                    (true, false, true) => PROVE_NATIVELY_NOLOOP_MARKED,
                    (false, true, false) => PROVE_BY_SCRIPT,
                    (false, false, false) => PROVE_BY_SCRIPT_NOLOOP,
                    (false, true, true) => PROVE_BY_SCRIPT_MARKED,
                    (false, false, true) => PROVE_BY_SCRIPT_NOLOOP_MARKED,
                };
                // Each list starts with the notifications' read.
                if proof.asks_notifications {
                    reads
                } else {
                    &reads[1..]
                }
            }
        }
    }

    /// The seal request `index` keeps, where the connection vouched for it and it proves
    /// anyway (a form with no seal).
    fn kept_seal(&self, index: usize) -> Option<Seal> {
        let kept = self.kept.iter().find(|(at, _)| *at == index);
        kept.map(|(_, seal)| *seal)
    }

    /// Names this batch's proof marker: `nonce`, a random number of its own (the driver draws
    /// it from the operating system's entropy for each proving batch, before writing anything).
    /// A proving acquisition's checked script then writes the marker
    /// ([`EPOCH_MARKER_PREFIX`](crate::EPOCH_MARKER_PREFIX)) in the database it reads — on a
    /// node without scripts, the proof's reads and the marker's write go in one transaction
    /// ([`ProofRead::Multi`]) — and the connection's vouched acquisitions read `EXISTS` of it
    /// alone ([`SealRead::Marker`]), where the node can swap and does not evict. Without it (or
    /// on a batch that does not prove), nothing changes: seals read the epoch and its stamp.
    pub fn mark(&mut self, nonce: u64) {
        let marks = self.marks;
        let Some(proof) = self.proof.as_deref_mut().filter(|_| marks) else {
            return;
        };
        if proof.native {
            let longest = self.checks.iter().flatten();
            let longest = longest.filter_map(|(check, max_ttl)| match check {
                MemoryCheck::Prove { .. } => Some(*max_ttl),
                MemoryCheck::Vouched { .. } => None,
            });
            if let Some(ttl) = longest.max() {
                self.nonce = Some(nonce);
                proof.marker = Some((MarkerKey::of(nonce), Decimal::of(ttl)));
            }
            return;
        }
        self.marked = (0..self.checks.len()).rev().find(|&index| {
            matches!(self.checks[index], Some((MemoryCheck::Prove { .. }, _)))
                && self.kept_seal(index).is_none()
        });
        if self.marked.is_some() {
            self.nonce = Some(nonce);
        }
    }

    /// Whether the requests go inside the proof's transaction, right before its
    /// [`ProofRead::Exec`] (each part `QUEUED`, its reply among the `EXEC`'s last items, after
    /// the reads'): a native proof that writes a marker, in a batch whose every request is a
    /// proving acquisition of one plain command. Its reads, its marker and its acquisitions then
    /// run in one database at one moment (no swap or eviction between them), and a transaction
    /// the node refuses sets no key. Otherwise the requests follow the reads, as listed.
    pub fn embeds(&self) -> bool {
        self.plain_proving
            && self
                .proof
                .as_ref()
                .is_some_and(|proof| proof.native && proof.marker.is_some())
    }

    /// The arguments of the proof read `read` (one of [`reads`](Self::reads)): its
    /// [`ProofRead::args`] with the names of the epoch the batch proves (on a cluster master,
    /// its slot's), and for [`ProofRead::Marker`] the write of this proof's marker.
    pub fn read_args(&self, read: ProofRead) -> SmallVec<[&[u8]; 6]> {
        let (epoch, id) = (self.epoch.epoch(), self.epoch.id());
        let marker = self.proof.as_ref().and_then(|proof| proof.marker.as_ref());
        match (read, marker) {
            (ProofRead::Marker, Some((marker, ttl))) => {
                SmallVec::from_slice(&[b"SET", marker.as_bytes(), b"1", b"PX", ttl.as_bytes()])
            }
            (ProofRead::Epoch, _) => SmallVec::from_slice(&[b"GET", epoch]),
            (ProofRead::Pttl, _) => SmallVec::from_slice(&[b"PTTL", epoch]),
            (ProofRead::Stamped, _) => SmallVec::from_slice(&[b"GET", id]),
            (ProofRead::Claim, _) => {
                SmallVec::from_slice(&[b"SET", epoch, EPOCH_CLAIM, b"NX", b"PX", CLAIM_TTL])
            }
            _ => SmallVec::from_slice(read.args()),
        }
    }

    /// How request `index` (its command: `command`) goes out: vouched for, a restart-checked
    /// acquisition goes without its check (plain `SET NX PX` for one key); proving on a node
    /// that runs no script, it goes without it too and the reads decide; anything else takes its
    /// usual form on the node ([`Command::redis_form_on`]).
    pub fn form<'c>(&self, index: usize, command: &'c Command) -> RedisForm<'c> {
        match self.checks.get(index).copied().flatten() {
            Some((MemoryCheck::Vouched { .. }, _)) => command.redis_form_vouched(&self.dialect),
            Some((MemoryCheck::Prove { .. }, _)) if !self.dialect.scripts => {
                command.redis_form_vouched(&self.dialect)
            }
            Some((MemoryCheck::Prove { .. }, _)) => match self.nonce {
                Some(nonce) if self.marked == Some(index) => {
                    command.redis_form_on(&self.dialect).marked(nonce)
                }
                _ => command.redis_form_on(&self.dialect),
            },
            _ => command.redis_form_on(&self.dialect),
        }
    }

    /// Whether request `index` is an acquisition the connection vouches for: it goes out
    /// without its restart check (for traces and counts).
    pub fn vouched(&self, index: usize) -> bool {
        matches!(
            self.checks.get(index),
            Some(Some((MemoryCheck::Vouched { .. }, _)))
        )
    }

    /// How many commands go on the wire for `transmits` (the reads and every part of every
    /// form, an [embedded](Self::embeds) part once, inside the proof's transaction), and so
    /// how many replies come back.
    pub fn wire_len(&self, transmits: &[Transmit]) -> usize {
        let forms = transmits.iter().enumerate();
        self.wire_len_of(forms.map(|(index, transmit)| self.form(index, &transmit.command)))
    }

    /// [`wire_len`](Self::wire_len) for the requests' forms as [`form`](Self::form) gave them,
    /// in order (a shell that keeps them does not plan them again).
    pub fn wire_len_of<'c>(&self, forms: impl IntoIterator<Item = RedisForm<'c>>) -> usize {
        self.reads().len()
            + forms
                .into_iter()
                .enumerate()
                .map(|(index, form)| match self.seal_reads(index) {
                    [] if form.is_transaction() => form.parts() + 2,
                    [] => form.parts(),
                    reads => form.parts() + reads.len() + 2,
                })
                .sum::<usize>()
    }

    /// What request `index` reads with its `SET`, atomically: empty when it goes out on its
    /// own; otherwise it goes as `MULTI`, its form's parts, these reads, `EXEC`, and the
    /// `EXEC`'s answers to the reads go to [`handle_seal`](Self::handle_seal). A vouched
    /// acquisition on a node that can swap databases or evicts keys is sealed so.
    pub fn seal_reads(&self, index: usize) -> &'static [SealRead] {
        match self.checks.get(index).copied().flatten() {
            Some((
                MemoryCheck::Vouched {
                    seal: Some(seal), ..
                },
                _,
            )) => seal.reads(),
            _ => &[],
        }
    }

    /// The arguments of request `index`'s seal read `read` (one of [`seal_reads`](Self::seal_reads)):
    /// [`SealRead::args`] with the names of the epoch the batch vouches with (on a cluster
    /// master, its slot's), and for [`SealRead::Marker`] the marker's name after `EXISTS`.
    pub fn seal_args(&self, index: usize, read: SealRead) -> SmallVec<[&[u8]; 3]> {
        // A standalone node's names are the reads' own.
        let mut args: SmallVec<[&[u8]; 3]> = match (read, self.epochs.get(index)) {
            (SealRead::Stamps, Some(names)) => {
                SmallVec::from_slice(&[b"MGET", names.epoch(), names.id()])
            }
            (SealRead::ClaimTtl, Some(names)) => SmallVec::from_slice(&[b"PTTL", names.epoch()]),
            _ => SmallVec::from_slice(read.args()),
        };
        if read == SealRead::Marker
            && let Some(Some((
                MemoryCheck::Vouched {
                    seal:
                        Some(Seal {
                            marker: Some(marker),
                            ..
                        }),
                    ..
                },
                _,
            ))) = self.checks.get(index)
        {
            args.push(marker.as_bytes());
        }
        args
    }

    /// What request `index`'s [seal reads](Self::seal_reads) answered inside its `EXEC`.
    /// Unless they show the memory the connection proved — its epoch, a stamp of this database
    /// and, where read, the eviction count stamped — the request's answer is a refusal to vote
    /// and the proof ends. Not handing them in counts as broken.
    pub fn handle_seal(&mut self, index: usize, replies: SealReplies<'_>) {
        if let Some(Some((
            MemoryCheck::Vouched {
                seal: Some(seal), ..
            },
            _,
        ))) = self.checks.get(index)
            && let Some(breach) = self.seal_breach.get_mut(index)
        {
            *breach = seal_breach(*seal, replies, self.dialect.database);
        }
    }

    /// The reply to [`ProofRead::Markable`]: `Ok` when the node answered the `SET … XX` (nil:
    /// this user may write the markers), else why not.
    pub fn handle_markable(&mut self, read: Result<(), NodeErrorKind>) {
        if let Some(proof) = &mut self.proof {
            proof.markable = read.is_ok();
        }
    }

    /// The reply to [`ProofRead::Marker`] inside the `EXEC`: `Ok` when the marker was written,
    /// else why not (a refusal while queued — `NoPermission`: an ACL — stops the connection's
    /// next proofs writing one; it aborts this proof's transaction).
    pub fn handle_marker(&mut self, written: Result<(), NodeErrorKind>) {
        if let Some(proof) = &mut self.proof {
            proof.markable = written.is_ok();
            proof.markers_denied = written == Err(NodeErrorKind::NoPermission);
        }
    }

    /// The proof read `read` failed with `failed` without a reply of its own (its transaction
    /// did not run): each read counts as it counts when its reply is that error.
    pub fn handle_failed(&mut self, read: ProofRead, failed: NodeErrorKind) {
        match read {
            ProofRead::Caching => self.handle_caching(Err(failed)),
            ProofRead::Epoch => self.handle_epoch(Err(failed)),
            ProofRead::Pttl => self.handle_pttl(Err(failed)),
            ProofRead::Claim => self.handle_claim(false),
            ProofRead::Time => self.handle_time(Err(failed)),
            ProofRead::Stamped => self.handle_stamped(Err(failed)),
            ProofRead::Info => self.handle_info(None),
            ProofRead::Notifications => self.handle_notifications(Err(failed)),
            ProofRead::Markable => self.handle_markable(Err(failed)),
            ProofRead::Marker => self.handle_marker(Err(failed)),
            ProofRead::Multi | ProofRead::Exec => {}
        }
    }

    /// The reply to [`ProofRead::Caching`]: when it failed, the node may not track the epoch
    /// for this connection, and nothing is proven.
    pub fn handle_caching(&mut self, read: Result<(), NodeErrorKind>) {
        if let Some(proof) = &mut self.proof {
            proof.caching = read;
        }
    }

    /// The reply to [`ProofRead::Epoch`]: the value (`None`: nil), or the error it failed with.
    /// A value that is neither a number nor a claim reads as missing, as the acquire script
    /// reads it.
    pub fn handle_epoch(&mut self, read: Result<Option<&[u8]>, NodeErrorKind>) {
        if let Some(proof) = &mut self.proof {
            proof.epoch = read.map(|value| value.map(<[u8]>::to_vec));
        }
    }

    /// The reply to [`ProofRead::Pttl`]: the key's TTL in ms (`-1`: none, `-2`: no key;
    /// `None`: another shape), or the error it failed with.
    pub fn handle_pttl(&mut self, read: Result<Option<i64>, NodeErrorKind>) {
        if let Some(proof) = &mut self.proof {
            proof.pttl = read;
        }
    }

    /// The reply to [`ProofRead::Time`]: the node's `[seconds, microseconds]`, or the error it
    /// failed with (`Ok(None)`: a reply of another shape).
    pub fn handle_time(&mut self, read: Result<Option<(u64, u64)>, NodeErrorKind>) {
        if let Some(proof) = &mut self.proof {
            proof.time = read.map(|time| {
                let (secs, micros) = time?;
                secs.checked_mul(1000)?.checked_add(micros / 1000)
            });
        }
    }

    /// The reply to [`ProofRead::Stamped`]: the identity the epoch was stamped with (`None`:
    /// nil), or the error it failed with.
    pub fn handle_stamped(&mut self, read: Result<Option<&[u8]>, NodeErrorKind>) {
        if let Some(proof) = &mut self.proof {
            proof.stamped = read.map(|value| value.map(<[u8]>::to_vec));
        }
    }

    /// The reply to [`ProofRead::Info`]: its text, or `None` when it failed or came back in
    /// another shape (a user denied `INFO`: the node votes under its epoch alone).
    pub fn handle_info(&mut self, read: Option<&[u8]>) {
        if let Some(proof) = &mut self.proof {
            proof.identity = read.and_then(|info| node_identity(info, self.dialect.database));
            proof.evicts = read.and_then(evicts);
        }
    }

    /// The reply to [`ProofRead::Notifications`]: the value of `notify-keyspace-events`
    /// (`Ok(None)`: a reply of another shape), or the error it failed with (`NoPermission`: the
    /// connection stops asking).
    pub fn handle_notifications(&mut self, read: Result<Option<&[u8]>, NodeErrorKind>) {
        if let Some(proof) = &mut self.proof {
            proof.notifications = read.map(|flags| flags.is_some_and(notifies_evictions));
        }
    }

    /// The reply to [`ProofRead::Claim`]: whether it wrote the epoch (`OK`; nil when the key
    /// was there, or when it failed).
    pub fn handle_claim(&mut self, wrote: bool) {
        if let Some(proof) = &mut self.proof {
            proof.claimed = wrote;
        }
    }

    /// The writes to send on the connection right after this batch's replies were read (and
    /// before [`finish`](Self::finish) counts them), when a native proof read that the node's
    /// identity changed ([`Stamp::Restamp`], then its identity), that its claim wrote the
    /// epoch (its identity), or that the epoch has no identity yet (adopted, `NX`). Their
    /// replies decide nothing: the next proof reads what they left. Empty on a node that runs
    /// scripts (the checked script stamps), or where the node's identity is unknown.
    pub fn stamps(&self) -> SmallVec<[Stamp; 2]> {
        let mut stamps = SmallVec::new();
        let Some(proof) = self.proof.as_ref().filter(|proof| proof.native) else {
            return stamps;
        };
        let (Some(identity), Ok(reads)) = (&proof.identity, proof.native_reads()) else {
            return stamps;
        };
        // A new epoch's stamp records why the node sits out; an adopted one records nothing.
        let names = self.epoch;
        let stamp = |if_missing, cause: Option<SitOutCause>| Stamp::Identity {
            identity: match cause {
                Some(cause) => stamp_with_cause(identity, cause),
                None => identity.clone(),
            },
            if_missing,
            names,
        };
        if reads.changed {
            let read = proof.epoch.clone().ok().flatten();
            stamps.push(Stamp::Restamp {
                read: read.filter(|_| self.dialect.set_if_eq),
                names,
            });
            stamps.push(stamp(false, Some(reads.cause)));
        } else if proof.claimed {
            stamps.push(stamp(false, Some(SitOutCause::NoEpoch)));
        } else if reads.epoch.is_some() {
            match proof.stamped.as_ref().ok().and_then(Option::as_deref) {
                None => stamps.push(stamp(true, None)),
                Some([]) => stamps.push(stamp(false, None)),
                Some(_) => {}
            }
        }
        stamps
    }

    /// Counts each request's answer, in order (`answers`: each request's answer made of its
    /// parts, replaced in place by the engine's reply), under the connection's watch, to which
    /// every push read before these replies was handed first.
    pub fn finish(self, mut watch: Option<&mut MemoryWatch>, answers: &mut [Reply]) {
        if let Some(watch) = watch.as_deref_mut().filter(|_| self.trusts) {
            watch.handle_own_epoch_write();
        }
        if let (Some(watch), Some(proof)) = (watch.as_deref_mut(), &self.proof)
            && proof.notifications == Err(NodeErrorKind::NoPermission)
        {
            watch.handle_notifications_denied();
        }
        if let (Some(watch), Some(proof)) = (watch.as_deref_mut(), &self.proof)
            && proof.markers_denied
        {
            watch.handle_markers_denied();
        }
        let native = self.proof.as_ref().is_some_and(|proof| proof.native);
        let seal_of = |index: usize| match self.kept_seal(index) {
            Some(kept) => Some(kept),
            None => {
                // A native proof's marker holds for each of its acquisitions.
                let nonce = self.nonce.filter(|_| native || self.marked == Some(index));
                self.proof
                    .as_ref()
                    .and_then(|proof| proof.seal(&self.dialect, nonce))
            }
        };
        for (index, (check, answer)) in self.checks.iter().zip(answers.iter_mut()).enumerate() {
            let (Some((check, max_ttl)), Some(watch)) = (check, watch.as_deref_mut()) else {
                continue;
            };
            *answer = match (*check, &self.proof) {
                (MemoryCheck::Vouched { seen, seal }, _) => {
                    // Unsealed: nothing to breach; sealed: what its reads found (not read:
                    // changed).
                    let breach = seal.and_then(|_| {
                        let read = self.seal_breach.get(index).copied();
                        read.unwrap_or(Some(SitOutCause::Changed))
                    });
                    let marked = seal.is_some_and(|seal| seal.marker.is_some());
                    match (*answer, breach) {
                        // A node that refuses this user the marker (an ACL) refuses the whole
                        // transaction: the connection's next proofs write none.
                        (Reply::Error(NodeErrorKind::NoPermission), _) if marked => {
                            let epoch = epoch_at(&self.epochs, index);
                            watch.handle_broken_seal(&epoch, SitOutCause::Changed, true);
                            *answer
                        }
                        (Reply::Error(_), _) => *answer,
                        (_, None) => {
                            let epoch = epoch_at(&self.epochs, index);
                            watch.vouched_reply(&epoch, seen, *answer, *max_ttl)
                        }
                        // Another database, or an eviction: the node's memory is not the one
                        // proven (its key, if it set one, is released as any failed lock's).
                        (_, Some(cause)) => {
                            // A missing marker says only that the memory changed: where a push
                            // said how (an eviction the acquisition set off, say), that names
                            // it, and markers stay on.
                            let epoch = epoch_at(&self.epochs, index);
                            let pushed = watch.ended_since(&epoch, seen).filter(|_| marked);
                            watch.handle_broken_seal(
                                &epoch,
                                pushed.unwrap_or(cause),
                                pushed.is_none() && marked,
                            );
                            refusal(*max_ttl, pushed.unwrap_or(cause))
                        }
                    }
                }
                // The checked script answered: its answer counts as it is, and may prove.
                (MemoryCheck::Prove { seen }, Some(proof)) if !proof.native => {
                    if proof.caching.is_ok()
                        && proof.epoch.is_ok()
                        && proof.may_vouch(&self.dialect)
                    {
                        let sent = (seen, self.sent_at, seal_of(index));
                        watch.handle_proof(&self.epoch, sent, *answer, *max_ttl);
                    }
                    *answer
                }
                (MemoryCheck::Prove { seen }, Some(proof)) => match proof.native_reads() {
                    Ok(reads) => {
                        // Another life of the node stamped the epoch: its memory begins now.
                        let epoch = reads.epoch.filter(|_| !reads.changed);
                        let sent = (seen, self.sent_at, seal_of(index));
                        let read = (epoch, reads.cause);
                        let epoch = &self.epoch;
                        // Where the proof may not vouch, it still decides this vote.
                        let mut scratch;
                        let watch = match proof.may_vouch(&self.dialect) {
                            true => &mut *watch,
                            false => {
                                scratch = watch.clone();
                                &mut scratch
                            }
                        };
                        watch.handle_native_proof(epoch, sent, read, reads.now, *answer, *max_ttl)
                    }
                    // The proof's own reads failed: the node's vote cannot count (a request
                    // the node refused says why itself: a key outside the user's ACL, say).
                    Err(failed) => match *answer {
                        refused @ Reply::Error(_) => refused,
                        _ => Reply::Error(failed),
                    },
                },
                (MemoryCheck::Prove { .. }, None) => *answer,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Config;
    use crate::request::LockRequest;
    use crate::{EPOCH_ID_KEY, EPOCH_KEY};

    const MAX: u64 = 60_000;

    /// A refusal for `ms`, for `cause`.
    fn refused(ms: u64, cause: SitOutCause) -> Reply {
        Reply::Ineligible { for_ms: ms, cause }
    }

    /// The driver's clock when the tests' batches go out.
    fn now() -> std::time::Instant {
        crate::testing::epoch()
    }

    /// A restart-checked acquisition of `resource`, then its release.
    fn commands(resource: &str) -> (Transmit, Transmit) {
        let config = Config::builder(1)
            .max_ttl(Duration::from_millis(MAX))
            .build()
            .expect("valid");
        let now = crate::testing::epoch();
        let request = LockRequest::new(resource, Duration::from_secs(10));
        let mut rng = crate::testing::rng(1);
        let mut acquire = crate::Acquire::new(now, &config, &request, &mut rng).expect("valid");
        let crate::Output::Send(transmit) = acquire.poll_output(now) else {
            panic!("an acquisition sends");
        };
        let mut release = crate::Release::new(now, &config, &crate::fake::lease(now, None));
        let crate::Output::Send(released) = release.poll_output(now) else {
            panic!("a release sends");
        };
        (transmit, released)
    }

    fn native() -> Dialect {
        Dialect {
            scripts: false,
            delete_if_eq: crate::DeleteIfEq::DelIfEq,
            ..Dialect::SCRIPTS
        }
    }

    /// Runs `batch` on a connection watched by `watch` whose reads return `epoch` (with a
    /// `PTTL` of -1) and `time` and whose requests answer `answers`.
    fn run(
        transmits: &[Transmit],
        dialect: &Dialect,
        watch: &mut MemoryWatch,
        epoch: Option<&[u8]>,
        time: (u64, u64),
        answers: &mut [Reply],
    ) {
        run_with_ttl(transmits, dialect, watch, (epoch, -1), time, answers);
    }

    /// [`run`], the epoch read with its `PTTL`.
    fn run_with_ttl(
        transmits: &[Transmit],
        dialect: &Dialect,
        watch: &mut MemoryWatch,
        (epoch, pttl): (Option<&[u8]>, i64),
        time: (u64, u64),
        answers: &mut [Reply],
    ) {
        let mut batch = NodeBatch::new(transmits, dialect, Some(watch), now());
        for read in batch.reads() {
            match read {
                ProofRead::Caching => batch.handle_caching(Ok(())),
                ProofRead::Epoch => batch.handle_epoch(Ok(epoch)),
                ProofRead::Pttl => batch.handle_pttl(Ok(Some(pttl))),
                ProofRead::Time => batch.handle_time(Ok(Some(time))),
                ProofRead::Stamped => batch.handle_stamped(Ok(None)),
                ProofRead::Info => batch.handle_info(None),
                ProofRead::Claim => batch.handle_claim(false),
                ProofRead::Notifications => batch.handle_notifications(Ok(None)),
                ProofRead::Markable => batch.handle_markable(Ok(())),
                ProofRead::Marker => batch.handle_marker(Ok(())),
                ProofRead::Multi | ProofRead::Exec => {}
            }
        }
        batch.finish(Some(watch), answers);
    }

    #[test]
    fn a_batch_with_nothing_checked_is_planned_as_in_full() {
        let (_, release) = commands("r");
        // An acquisition with restart-aware voting off: not checked.
        let config = Config::builder(1)
            .restart_aware(false)
            .build()
            .expect("valid");
        let request = LockRequest::new("u", Duration::from_secs(10));
        let mut rng = crate::testing::rng(2);
        let mut acquire = crate::Acquire::new(now(), &config, &request, &mut rng).expect("valid");
        let crate::Output::Send(unchecked) = acquire.poll_output(now()) else {
            panic!("an acquisition sends");
        };
        assert_eq!(unchecked.command.restart_check_ms(), None);
        let swapping = Dialect {
            swapdb: true,
            markers: true,
            ..Dialect::SCRIPTS
        };
        // A trust and an extension of the released lock: not checked either.
        let like = |op, ttl_ms| Transmit {
            id: release.id,
            command: Command::new(
                op,
                release.command.spec().clone(),
                ttl_ms,
                crate::command::Extras::default(),
            ),
        };
        let (trust, extend) = (like(Op::Trust, 0), like(Op::ExpireIfEquals, 10_000));
        let (watch, at) = (MemoryWatch::new(), now());
        let batches: [&[Transmit]; 6] = [
            &[],
            std::slice::from_ref(&release),
            &[release.clone(), unchecked.clone()],
            &[unchecked.clone(), release.clone(), release.clone()],
            std::slice::from_ref(&trust),
            &[extend.clone(), trust.clone()],
        ];
        for transmits in batches {
            for dialect in [Dialect::SCRIPTS, native(), swapping] {
                for watch in [None, Some(&watch)] {
                    assert_eq!(
                        NodeBatch::unchecked(transmits, &dialect, watch, at),
                        NodeBatch::planned(transmits, &dialect, watch, at),
                        "{} requests on {dialect:?}, watched: {}",
                        transmits.len(),
                        watch.is_some(),
                    );
                }
            }
        }
        // And `new` takes the full plan wherever anything is checked, or on a cluster master
        // (whose every request has its slot's epoch).
        let (checked, _) = commands("c");
        let mixed = [checked, release.clone()];
        for (transmits, dialect) in [
            (&mixed[..], Dialect::SCRIPTS),
            (std::slice::from_ref(&release), cluster()),
            (std::slice::from_ref(&trust), cluster()),
        ] {
            for watch in [None, Some(&watch)] {
                assert_eq!(
                    NodeBatch::new(transmits, &dialect, watch, at),
                    NodeBatch::planned(transmits, &dialect, watch, at),
                );
            }
        }
        assert_ne!(
            NodeBatch::unchecked(std::slice::from_ref(&release), &cluster(), None, at),
            NodeBatch::planned(std::slice::from_ref(&release), &cluster(), None, at),
            "a cluster master's plan differs: the dispatch must not skip it",
        );
    }

    #[test]
    fn untracked_connections_keep_every_check() {
        let (acquire, release) = commands("r");
        let batch = NodeBatch::new(
            &[acquire.clone(), release.clone()],
            &Dialect::SCRIPTS,
            None,
            now(),
        );
        assert!(batch.reads().is_empty());
        assert!(matches!(
            batch.form(0, &acquire.command),
            RedisForm::Script {
                script: crate::Script::AcquireChecked,
                ..
            }
        ));
        let mut answers = [Reply::Int(-5), Reply::Int(1)];
        batch.finish(None, &mut answers);
        assert_eq!(answers, [Reply::Int(-5), Reply::Int(1)], "unchanged");
    }

    #[test]
    fn a_scripted_proof_then_a_vouched_set() {
        let (acquire, release) = commands("r");
        let mut watch = MemoryWatch::new();
        let transmits = [acquire.clone(), release];
        let batch = NodeBatch::new(&transmits, &Dialect::SCRIPTS, Some(&watch), now());
        assert_eq!(
            batch.reads(),
            &[ProofRead::Caching, ProofRead::Epoch, ProofRead::Info]
        );
        assert_eq!(batch.wire_len(&transmits), 5);
        let mut answers = [Reply::Int(1), Reply::Int(1)];
        run(
            &transmits,
            &Dialect::SCRIPTS,
            &mut watch,
            Some(b"5"),
            (0, 0),
            &mut answers,
        );
        assert_eq!(answers, [Reply::Int(1), Reply::Int(1)]);
        // Proven: a plain SET NX PX, no reads, and its answer counts while nothing is pushed.
        let vouched = NodeBatch::new(&transmits[..1], &Dialect::SCRIPTS, Some(&watch), now());
        assert!(vouched.reads().is_empty());
        assert!(matches!(
            vouched.form(0, &acquire.command),
            RedisForm::Set { .. }
        ));
        let mut answer = [Reply::Ok];
        vouched.clone().finish(Some(&mut watch), &mut answer);
        assert_eq!(answer, [Reply::Ok]);
        // A push between the request and its reply: a refusal for the longest TTL.
        watch.handle_invalidation(false, [EPOCH_KEY]);
        let mut answer = [Reply::Ok];
        vouched.finish(Some(&mut watch), &mut answer);
        assert_eq!(answer, [refused(60_000, SitOutCause::Changed)]);
        let again = NodeBatch::new(&transmits[..1], &Dialect::SCRIPTS, Some(&watch), now());
        assert!(!again.reads().is_empty(), "proves again");
    }

    #[test]
    fn a_proof_of_the_nodes_epoch_vouches_for_no_cluster_slot() {
        let (acquire, release) = commands("r");
        let mut watch = MemoryWatch::new();
        let transmits = [acquire.clone(), release];
        // Proven as in `a_scripted_proof_then_a_vouched_set`.
        let mut answers = [Reply::Int(1); 2];
        run(
            &transmits,
            &Dialect::SCRIPTS,
            &mut watch,
            Some(b"5"),
            (0, 0),
            &mut answers,
        );
        // Proven for `redlock:epoch`, which vouches for no slot of a cluster: an acquisition
        // there runs its checked script against its own slot's epoch (proving that slot where
        // the connection is tracked).
        let standalone = NodeBatch::new(&transmits[..1], &Dialect::SCRIPTS, Some(&watch), now());
        assert!(matches!(
            standalone.form(0, &acquire.command),
            RedisForm::Set { .. }
        ));
        for watch in [Some(&watch), None] {
            let batch = NodeBatch::new(&transmits[..1], &cluster(), watch, now());
            assert_eq!(batch.reads().is_empty(), watch.is_none());
            assert!(matches!(
                batch.form(0, &acquire.command),
                RedisForm::Script {
                    script: crate::Script::AcquireChecked,
                    ..
                }
            ));
        }
    }

    /// A cluster master that runs scripts: one epoch per slot, no `SWAPDB`.
    fn cluster() -> Dialect {
        Dialect {
            keyspace: Keyspace::Cluster,
            swapdb: false,
            ..Dialect::SCRIPTS
        }
    }

    /// Runs `transmits` on a cluster master's connection watched by `watch`, every check
    /// letting the node vote (an old epoch, every request granted).
    fn prove_on_cluster(transmits: &[Transmit], watch: &mut MemoryWatch) {
        let mut answers = vec![Reply::Int(1); transmits.len()];
        run(
            transmits,
            &cluster(),
            watch,
            Some(b"5"),
            (0, 0),
            &mut answers,
        );
        assert!(
            answers.iter().all(|answer| *answer == Reply::Int(1)),
            "{answers:?}"
        );
    }

    /// The slot of `transmit`'s key.
    fn slot_of(transmit: &Transmit) -> crate::Slot {
        crate::Slot::of(transmit.command.spec().keys().next().expect("a key"))
    }

    #[test]
    fn a_cluster_master_proves_each_slot_on_its_own() {
        let ((a, _), (b, _)) = (commands("r"), commands("s"));
        let (slot_a, slot_b) = (slot_of(&a), slot_of(&b));
        assert_ne!(slot_a, slot_b, "two slots");
        let names_a = EpochNames::of_slot(slot_a);
        let mut watch = MemoryWatch::new();
        // A batch proves its first acquisition's slot: the reads name that slot's epoch, and
        // an acquisition of another slot keeps its checked script.
        let batch = NodeBatch::new(&[a.clone(), b.clone()], &cluster(), Some(&watch), now());
        assert_eq!(
            batch.reads(),
            &[ProofRead::Caching, ProofRead::Epoch, ProofRead::Info]
        );
        assert_eq!(
            batch.read_args(ProofRead::Epoch).as_slice(),
            [&b"GET"[..], names_a.epoch()]
        );
        prove_on_cluster(&[a.clone(), b.clone()], &mut watch);
        assert!(watch.vouches_for_slot(slot_a, MAX, now()));
        assert!(!watch.vouches_for_slot(slot_b, MAX, now()));
        assert!(
            !watch.vouches_for(MAX, now()),
            "the node's own epoch is not a slot's"
        );
        // A batch of a proven slot's acquisition and another's: the first vouched (a plain
        // `SET`), the second proves its own slot (the reads name it); a third slot's keeps its
        // checked script.
        let (c, _) = commands("t");
        assert!(![slot_a, slot_b].contains(&slot_of(&c)), "a third slot");
        let mixed = [a.clone(), b.clone(), c.clone()];
        let batch = NodeBatch::new(&mixed, &cluster(), Some(&watch), now());
        assert!(matches!(batch.form(0, &a.command), RedisForm::Set { .. }));
        assert!(batch.vouched(0) && !batch.vouched(1) && !batch.vouched(2));
        assert_eq!(
            batch.read_args(ProofRead::Epoch).as_slice(),
            [&b"GET"[..], EpochNames::of_slot(slot_b).epoch()]
        );
        assert!(matches!(
            batch.form(2, &c.command),
            RedisForm::Script {
                script: crate::Script::AcquireChecked,
                ..
            }
        ));
        // Slot A vouched (a plain `SET`), slot B proves in a batch of its own.
        let vouched = NodeBatch::new(std::slice::from_ref(&a), &cluster(), Some(&watch), now());
        assert!(vouched.reads().is_empty());
        assert!(matches!(vouched.form(0, &a.command), RedisForm::Set { .. }));
        prove_on_cluster(std::slice::from_ref(&b), &mut watch);
        assert!(watch.vouches_for_slot(slot_b, MAX, now()));
        // A push of slot B's identity, of the node's epoch name, or of a lock key changes
        // nothing; a push of B's epoch ends B's proof alone, and a vouched reply of A on its
        // way still counts.
        let in_flight = NodeBatch::new(std::slice::from_ref(&a), &cluster(), Some(&watch), now());
        let names_b = EpochNames::of_slot(slot_b);
        watch.handle_invalidation(false, [names_b.id(), b"redlock:r"]);
        assert!(watch.vouches_for_slot(slot_b, MAX, now()));
        watch.handle_invalidation(false, [names_b.epoch()]);
        assert!(!watch.vouches_for_slot(slot_b, MAX, now()));
        assert!(watch.vouches_for_slot(slot_a, MAX, now()));
        let mut answer = [Reply::Ok];
        in_flight.clone().finish(Some(&mut watch), &mut answer);
        assert_eq!(answer, [Reply::Ok]);
        // A push of A's epoch after A's request went out: refused, as on a standalone node.
        watch.handle_invalidation(false, [names_a.epoch()]);
        let mut answer = [Reply::Ok];
        in_flight.finish(Some(&mut watch), &mut answer);
        assert_eq!(answer, [refused(MAX, SitOutCause::Changed)]);
        // Everything pushed (a flush) or the connection's end ends every slot's proof.
        for end in 0..2 {
            let mut watch = MemoryWatch::new();
            for acquire in [&a, &b] {
                prove_on_cluster(std::slice::from_ref(acquire), &mut watch);
            }
            assert!(watch.vouches_for_slot(slot_a, MAX, now()));
            assert!(watch.vouches_for_slot(slot_b, MAX, now()));
            if end == 0 {
                watch.handle_invalidation(true, []);
            } else {
                watch.handle_closed();
            }
            assert!(!watch.vouches_for_slot(slot_a, MAX, now()));
            assert!(!watch.vouches_for_slot(slot_b, MAX, now()));
        }
    }

    #[test]
    fn an_evicting_cluster_masters_seals_read_each_requests_own_slot() {
        let ((a, _), (b, _)) = (commands("r"), commands("s"));
        let evicting = String::from_utf8(info('a'))
            .expect("ASCII")
            .replace("noeviction", "allkeys-lru")
            .into_bytes();
        let mut watch = MemoryWatch::new();
        for acquire in [&a, &b] {
            let transmits = std::slice::from_ref(acquire);
            let mut batch = NodeBatch::new(transmits, &cluster(), Some(&watch), now());
            for read in batch.reads() {
                match read {
                    ProofRead::Caching => batch.handle_caching(Ok(())),
                    ProofRead::Epoch => batch.handle_epoch(Ok(Some(b"5"))),
                    ProofRead::Info => batch.handle_info(Some(&evicting)),
                    other => panic!("{other:?} is not read on a scripted cluster"),
                }
            }
            let mut answer = [Reply::Int(1)];
            batch.finish(Some(&mut watch), &mut answer);
        }
        let batch = NodeBatch::new(&[a.clone(), b.clone()], &cluster(), Some(&watch), now());
        assert!(batch.reads().is_empty(), "both slots proven");
        for (index, acquire) in [&a, &b].into_iter().enumerate() {
            assert!(batch.seal_reads(index).contains(&SealRead::Stamps));
            let names = EpochNames::of_slot(slot_of(acquire));
            assert_eq!(
                batch.seal_args(index, SealRead::Stamps).as_slice(),
                [&b"MGET"[..], names.epoch(), names.id()]
            );
        }
        // Slot A's seal finds its epoch gone (the slot dropped): A's vote is refused and A's
        // proof ends, B's stands; an eviction (the whole node's) ends both.
        let (a_stamp, stats) = (identity('a'), b"# Stats\r\nevicted_keys:0\r\n".to_vec());
        let held = SealReplies {
            epoch: Some(b"5"),
            stamped: Some(&a_stamp),
            evictions: Some(&stats),
            ..SealReplies::default()
        };
        for (gone, evicted) in [(true, false), (false, true)] {
            let mut watch = watch.clone();
            let mut batch =
                NodeBatch::new(std::slice::from_ref(&a), &cluster(), Some(&watch), now());
            let moved = b"# Stats\r\nevicted_keys:3\r\n".to_vec();
            batch.handle_seal(
                0,
                SealReplies {
                    epoch: if gone { None } else { held.epoch },
                    evictions: if evicted {
                        Some(&moved)
                    } else {
                        held.evictions
                    },
                    ..held
                },
            );
            let mut answer = [Reply::Ok];
            batch.finish(Some(&mut watch), &mut answer);
            assert!(matches!(answer[0], Reply::Ineligible { .. }), "{answer:?}");
            assert!(!watch.vouches_for_slot(slot_of(&a), MAX, now()));
            assert_eq!(watch.vouches_for_slot(slot_of(&b), MAX, now()), !evicted);
        }
    }

    #[test]
    fn a_redis_cluster_master_vouches_only_sealed() {
        let (a, _) = commands("r");
        let redis = Dialect {
            silent_slot_drops: true,
            ..cluster()
        };
        // The identity known: vouched, each acquisition sealed with its slot's epoch and stamp.
        for (info, vouches) in [(Some(info('a')), true), (None, false)] {
            let mut watch = MemoryWatch::new();
            let transmits = std::slice::from_ref(&a);
            let mut batch = NodeBatch::new(transmits, &redis, Some(&watch), now());
            for read in batch.reads() {
                match read {
                    ProofRead::Caching => batch.handle_caching(Ok(())),
                    ProofRead::Epoch => batch.handle_epoch(Ok(Some(b"5"))),
                    ProofRead::Info => batch.handle_info(info.as_deref()),
                    other => panic!("{other:?} is not read on a scripted cluster"),
                }
            }
            let mut answer = [Reply::Int(1)];
            batch.finish(Some(&mut watch), &mut answer);
            assert_eq!(answer, [Reply::Int(1)], "the checked script's vote counts");
            assert_eq!(watch.vouches_for_slot(slot_of(&a), MAX, now()), vouches);
            if vouches {
                let next = NodeBatch::new(transmits, &redis, Some(&watch), now());
                assert!(next.seal_reads(0).contains(&SealRead::Stamps), "sealed");
            }
        }
    }

    #[test]
    fn a_cluster_master_without_scripts_proves_its_slot_natively() {
        let (a, _) = commands("r");
        let names = EpochNames::of_slot(slot_of(&a));
        let dialect = Dialect {
            keyspace: Keyspace::Cluster,
            swapdb: false,
            ..native()
        };
        let mut watch = MemoryWatch::new();
        let transmits = std::slice::from_ref(&a);
        let batch = NodeBatch::new(transmits, &dialect, Some(&watch), now());
        // No marker (a cluster cannot swap), and every read of an epoch names the slot's.
        let mut batch_marked = batch.clone();
        batch_marked.mark(7);
        assert_eq!(batch_marked, batch, "no marker on a cluster");
        let args = |read| {
            batch
                .read_args(read)
                .iter()
                .map(|a| a.to_vec())
                .collect::<Vec<_>>()
        };
        let (epoch, id) = (names.epoch().to_vec(), names.id().to_vec());
        assert_eq!(args(ProofRead::Epoch), [b"GET".to_vec(), epoch.clone()]);
        assert_eq!(args(ProofRead::Pttl), [b"PTTL".to_vec(), epoch.clone()]);
        assert_eq!(args(ProofRead::Stamped), [b"GET".to_vec(), id.clone()]);
        assert_eq!(
            args(ProofRead::Claim)[..2],
            [b"SET".to_vec(), epoch.clone()]
        );
        assert!(matches!(batch.form(0, &a.command), RedisForm::Set { .. }));
        // An old epoch proves the slot; the identity it adopts goes to the slot's name.
        let old = Some(&b"1000"[..]);
        let (a_id, info_a) = (identity('a'), info('a'));
        let mut batch = NodeBatch::new(transmits, &dialect, Some(&watch), now());
        for read in batch.reads() {
            match read {
                ProofRead::Caching => batch.handle_caching(Ok(())),
                ProofRead::Epoch => batch.handle_epoch(Ok(old)),
                ProofRead::Pttl => batch.handle_pttl(Ok(Some(-1))),
                ProofRead::Time => batch.handle_time(Ok(Some((61, 0)))),
                ProofRead::Stamped => batch.handle_stamped(Ok(None)),
                ProofRead::Info => batch.handle_info(Some(&info_a)),
                ProofRead::Claim => batch.handle_claim(false),
                other => panic!("{other:?} is not read on a cluster"),
            }
        }
        let stamps = batch.stamps();
        assert_eq!(stamps.len(), 1);
        assert_eq!(
            stamps[0].args().as_slice(),
            [&b"SET"[..], &id[..], &a_id[..], b"NX"]
        );
        let mut answer = [Reply::Ok];
        batch.finish(Some(&mut watch), &mut answer);
        assert_eq!(answer, [Reply::Ok]);
        assert!(watch.vouches_for_slot(slot_of(&a), MAX, now()));
        // Acquisitions of two more slots beside a vouched one: the batch proves the first of
        // them and defers the second (no checked form without scripts), which then proves in
        // a batch of its own; where scripts run, nothing is deferred.
        let ((b, _), (c, _)) = (commands("s"), commands("t"));
        let three = [a.clone(), b.clone(), c.clone()];
        let batch = NodeBatch::new(&three, &dialect, Some(&watch), now());
        assert!(batch.vouched(0));
        assert_eq!(batch.deferred(), [2]);
        assert_eq!(
            batch.read_args(ProofRead::Epoch)[1],
            EpochNames::of_slot(slot_of(&b)).epoch()
        );
        let later = NodeBatch::new(&three[2..], &dialect, Some(&watch), now());
        assert!(later.deferred().is_empty());
        assert_eq!(
            later.read_args(ProofRead::Epoch)[1],
            EpochNames::of_slot(slot_of(&c)).epoch()
        );
        let scripted = NodeBatch::new(&three, &cluster(), Some(&watch), now());
        assert!(scripted.deferred().is_empty());
    }

    #[test]
    fn a_refusal_or_a_failed_read_proves_nothing() {
        let (acquire, _) = commands("r");
        let transmits = [acquire];
        let mut young = MemoryWatch::new();
        let mut answer = [Reply::Int(-5_000)];
        run(
            &transmits,
            &Dialect::SCRIPTS,
            &mut young,
            Some(b"5"),
            (0, 0),
            &mut answer,
        );
        assert_eq!(answer, [Reply::Int(-5_000)]);
        let mut failed = MemoryWatch::new();
        let mut batch = NodeBatch::new(&transmits, &Dialect::SCRIPTS, Some(&failed), now());
        batch.handle_caching(Ok(()));
        batch.handle_epoch(Err(NodeErrorKind::Timeout));
        let mut answer = [Reply::Int(1)];
        batch.finish(Some(&mut failed), &mut answer);
        assert_eq!(
            answer,
            [Reply::Int(1)],
            "the script's own answer still counts"
        );
        // `CLIENT CACHING YES` failed or never answered: the epoch may be untracked.
        let mut uncached = MemoryWatch::new();
        let mut batch = NodeBatch::new(&transmits, &Dialect::SCRIPTS, Some(&uncached), now());
        batch.handle_caching(Err(NodeErrorKind::Other));
        batch.handle_epoch(Ok(Some(b"0")));
        batch.finish(Some(&mut uncached), &mut [Reply::Int(1)]);
        let mut unanswered = MemoryWatch::new();
        let mut batch = NodeBatch::new(&transmits, &Dialect::SCRIPTS, Some(&unanswered), now());
        batch.handle_epoch(Ok(Some(b"0")));
        batch.finish(Some(&mut unanswered), &mut [Reply::Int(1)]);
        // The control: both reads answered, the proof holds.
        let mut proven = MemoryWatch::new();
        let mut answer = [Reply::Int(1)];
        run(
            &transmits,
            &Dialect::SCRIPTS,
            &mut proven,
            Some(b"0"),
            (0, 0),
            &mut answer,
        );
        assert!(proven.vouches_for(MAX, now()));
        for watch in [young, failed, uncached, unanswered] {
            assert!(!watch.vouches_for(MAX, now()), "not proven: {watch:?}");
        }
    }

    #[test]
    fn a_node_without_scripts_proves_from_its_epoch_and_time() {
        let (acquire, _) = commands("r");
        let transmits = [acquire.clone()];
        let mut watch = MemoryWatch::new();
        let batch = NodeBatch::new(&transmits, &native(), Some(&watch), now());
        assert_eq!(
            batch.reads(),
            &[
                ProofRead::Caching,
                ProofRead::Epoch,
                ProofRead::Pttl,
                ProofRead::Time,
                ProofRead::Stamped,
                ProofRead::Info,
                ProofRead::Claim
            ]
        );
        assert_eq!(batch.wire_len(&transmits), 8);
        assert!(matches!(
            batch.form(0, &acquire.command),
            RedisForm::Set { .. }
        ));
        // Old enough: the node's own answer counts, and the connection vouches.
        let mut answer = [Reply::Ok];
        let old = (Some(&b"1000"[..]), -1);
        run_with_ttl(&transmits, &native(), &mut watch, old, (61, 0), &mut answer);
        assert_eq!(answer, [Reply::Ok]);
        assert!(watch.vouches_for(MAX, now()));
        // Young: refused for what is left.
        let mut young = MemoryWatch::new();
        let mut answer = [Reply::Ok];
        run(
            &transmits,
            &native(),
            &mut young,
            Some(b"1000"),
            (31, 0),
            &mut answer,
        );
        assert_eq!(answer, [refused(30_000, SitOutCause::Unrecorded)]);
        // Missing, or no number: refused for the longest TTL (the claim in the same pipeline
        // stamps it by the node's clock).
        for epoch in [None, Some(&b"x"[..])] {
            let mut fresh = MemoryWatch::new();
            let mut answer = [Reply::Ok];
            run(
                &transmits,
                &native(),
                &mut fresh,
                epoch,
                (7, 500),
                &mut answer,
            );
            assert_eq!(answer, [refused(60_000, SitOutCause::NoEpoch)], "{epoch:?}");
            assert!(!fresh.vouches_for(MAX, now()));
        }
        // A claim 45 s old by its TTL: refused for 15 s more; 61 s old: the node votes.
        let claim_ttl = i64::try_from(crate::EPOCH_CLAIM_TTL_MS).expect("fits");
        let young = refused(15_000, SitOutCause::Unrecorded);
        for (age_ms, expected) in [(45_000, young), (61_000, Reply::Ok)] {
            let mut watch = MemoryWatch::new();
            let mut answer = [Reply::Ok];
            let claim = (Some(EPOCH_CLAIM), claim_ttl - age_ms);
            run_with_ttl(
                &transmits,
                &native(),
                &mut watch,
                claim,
                (100, 0),
                &mut answer,
            );
            assert_eq!(answer, [expected], "{age_ms}");
        }
        // A read that failed or came back in another shape: the vote is an error.
        for (epoch, time, expected) in [
            (
                Err(NodeErrorKind::Timeout),
                Ok(Some((1, 0))),
                NodeErrorKind::Timeout,
            ),
            (
                Ok(Some(&b"0"[..])),
                Err(NodeErrorKind::Connection),
                NodeErrorKind::Connection,
            ),
            (Ok(Some(&b"0"[..])), Ok(None), NodeErrorKind::Protocol),
        ] {
            let mut watch = MemoryWatch::new();
            let mut batch = NodeBatch::new(&transmits, &native(), Some(&watch), now());
            batch.handle_caching(Ok(()));
            batch.handle_epoch(epoch);
            batch.handle_pttl(Ok(Some(-1)));
            batch.handle_time(time);
            let mut answer = [Reply::Ok];
            batch.finish(Some(&mut watch), &mut answer);
            assert_eq!(answer, [Reply::Error(expected)]);
        }
        // CLIENT CACHING unanswered: the epoch may be untracked, the vote is an error.
        let mut watch = MemoryWatch::new();
        let mut batch = NodeBatch::new(&transmits, &native(), Some(&watch), now());
        batch.handle_epoch(Ok(Some(b"0")));
        batch.handle_pttl(Ok(Some(-1)));
        batch.handle_time(Ok(Some((1, 0))));
        let mut answer = [Reply::Ok];
        batch.finish(Some(&mut watch), &mut answer);
        assert_eq!(answer, [Reply::Error(UNANSWERED)]);
    }

    /// `INFO` text naming identity `id` (40 hex digits each, `run_id` and `master_replid`; no
    /// evictions).
    fn info(id: char) -> Vec<u8> {
        let hex = id.to_string().repeat(40);
        format!(
            "# Server\r\nrun_id:{hex}\r\n# Replication\r\nmaster_replid:{hex}\r\n\
             # Stats\r\nevicted_keys:0\r\n# Memory\r\nmaxmemory_policy:noeviction\r\n"
        )
        .into_bytes()
    }

    /// The identity [`info`] names, in database 0.
    fn identity(id: char) -> Vec<u8> {
        let hex = id.to_string().repeat(40);
        format!("{hex}:{hex}:0:0").into_bytes()
    }

    /// A native proof of an acquisition that read the epoch `1000` (61 s ago, so old enough)
    /// or none, the identity `stamped`, `INFO` `info` and whether its claim wrote: the
    /// answer, the stamps to send, and whether the connection vouches afterwards.
    fn native_proof(
        epoch: Option<&[u8]>,
        stamped: Option<&[u8]>,
        info: Option<&[u8]>,
        claimed: bool,
    ) -> (Reply, SmallVec<[Stamp; 2]>, bool) {
        let (acquire, _) = commands("r");
        let transmits = [acquire];
        let dialect = Dialect {
            set_if_eq: true,
            ..native()
        };
        let mut watch = MemoryWatch::new();
        let mut batch = NodeBatch::new(&transmits, &dialect, Some(&watch), now());
        batch.handle_caching(Ok(()));
        batch.handle_epoch(Ok(epoch));
        batch.handle_pttl(Ok(Some(-1)));
        batch.handle_time(Ok(Some((61, 0))));
        batch.handle_stamped(Ok(stamped));
        batch.handle_info(info);
        batch.handle_claim(claimed);
        let stamps = batch.stamps();
        let mut answer = [Reply::Ok];
        batch.finish(Some(&mut watch), &mut answer);
        (answer[0], stamps, watch.vouches_for(MAX, now()))
    }

    #[test]
    fn a_node_without_scripts_sees_its_identity() {
        let (old, a, b) = (Some(&b"1000"[..]), identity('a'), identity('b'));
        let stamp = |id: &[u8], if_missing| Stamp::Identity {
            identity: id.to_vec(),
            if_missing,
            names: EpochNames::standalone(),
        };
        // The same identity: the node votes, nothing to write.
        let same = native_proof(old, Some(&a), Some(&info('a')), false);
        assert_eq!(same, (Reply::Ok, SmallVec::new(), true));
        // Another life of the node stamped the epoch: refused for the longest TTL, and the
        // epoch is restamped (only if it still holds what was read), then the identity.
        let (answer, stamps, vouches) = native_proof(old, Some(&b), Some(&info('a')), false);
        assert_eq!(answer, refused(60_000, SitOutCause::Restart));
        assert!(!vouches);
        let restamp = Stamp::Restamp {
            read: Some(b"1000".to_vec()),
            names: EpochNames::standalone(),
        };
        let new_epoch = |cause| stamp(&stamp_with_cause(&a, cause), false);
        assert_eq!(
            stamps.as_slice(),
            [restamp.clone(), new_epoch(SitOutCause::Restart)]
        );
        // A stamp that recorded its cause reads as its identity: the same node votes.
        let recorded = stamp_with_cause(&a, SitOutCause::Eviction);
        let same = native_proof(old, Some(&recorded), Some(&info('a')), false);
        assert_eq!(same, (Reply::Ok, SmallVec::new(), true));
        assert_eq!(
            restamp.args().as_slice(),
            [
                &b"SET"[..],
                EPOCH_KEY,
                EPOCH_CLAIM,
                b"PX",
                CLAIM_TTL,
                b"IFEQ",
                b"1000"
            ]
        );
        // No identity yet: adopted (NX), no wait; an empty one (a native trust): overwritten.
        let adopt = native_proof(old, None, Some(&info('a')), false);
        assert_eq!((adopt.0, adopt.2), (Reply::Ok, true));
        assert_eq!(adopt.1.as_slice(), [stamp(&a, true)]);
        assert_eq!(
            stamp(&a, true).args().as_slice(),
            [&b"SET"[..], EPOCH_ID_KEY, &a, b"NX"]
        );
        let trusted = native_proof(old, Some(b""), Some(&info('a')), false);
        assert_eq!(trusted.1.as_slice(), [stamp(&a, false)]);
        // No identity on a node that evicted keys: the identity itself may have been evicted
        // (with the lock keys, the epoch kept), so the node sits out instead of adopting.
        let evicted = String::from_utf8(info('a'))
            .expect("utf-8")
            .replace("evicted_keys:0", "evicted_keys:3");
        let (answer, stamps, vouches) = native_proof(old, None, Some(evicted.as_bytes()), false);
        assert_eq!(
            (answer, vouches),
            (refused(60_000, SitOutCause::Eviction), false)
        );
        let restamped = identity('a')
            .strip_suffix(b":0")
            .expect("no evictions")
            .to_vec();
        let restamped = [restamped, b":3 eviction".to_vec()].concat();
        assert_eq!(stamps.last(), Some(&stamp(&restamped, false)));
        // The proof's own claim wrote a missing epoch: it is stamped with the identity read.
        let claimed = native_proof(None, Some(&b), Some(&info('a')), true);
        assert_eq!(claimed.0, refused(60_000, SitOutCause::NoEpoch));
        assert_eq!(claimed.1.as_slice(), [new_epoch(SitOutCause::NoEpoch)]);
        // INFO denied or unreadable: the epoch alone decides, nothing is written.
        let unknown = native_proof(old, Some(&b), Some(b"NOPERM"), false);
        assert_eq!(unknown, (Reply::Ok, SmallVec::new(), true));
        let unknown = native_proof(old, Some(&b), None, false);
        assert_eq!(unknown, (Reply::Ok, SmallVec::new(), true));
    }

    /// Runs `transmit` at `at` on `node` through a batch on the connection watched by `watch`
    /// (a node that runs scripts: the proof reads the epoch and `INFO`), as a driver does, a
    /// sealed request's reads right after it.
    fn on_node(
        node: &mut crate::fake::FakeNode,
        watch: &mut MemoryWatch,
        transmit: &Transmit,
        at: std::time::Instant,
    ) -> Reply {
        on_node_marked(node, watch, transmit, at, None)
    }

    /// The batch `transmit` would go out in next on a node with scripts, under `watch`.
    fn next_batch(watch: &MemoryWatch, transmit: &Transmit) -> NodeBatch {
        NodeBatch::new(
            std::slice::from_ref(transmit),
            &Dialect::SCRIPTS,
            Some(watch),
            now(),
        )
    }

    /// [`on_node`], a proving batch marked with `nonce` ([`NodeBatch::mark`]) where given.
    fn on_node_marked(
        node: &mut crate::fake::FakeNode,
        watch: &mut MemoryWatch,
        transmit: &Transmit,
        at: std::time::Instant,
        nonce: Option<u64>,
    ) -> Reply {
        let transmits = std::slice::from_ref(transmit);
        let mut batch = NodeBatch::new(transmits, &Dialect::SCRIPTS, Some(watch), at);
        if let Some(nonce) = nonce {
            batch.mark(nonce);
        }
        let node_now = at - now();
        for read in batch.reads() {
            match read {
                ProofRead::Caching => batch.handle_caching(Ok(())),
                ProofRead::Epoch => batch.handle_epoch(Ok(node.epoch_value().as_deref())),
                ProofRead::Info => batch.handle_info(Some(&node.info_value())),
                ProofRead::Markable => batch.handle_markable(Ok(())),
                other => panic!("a node with scripts is not asked {other:?}"),
            }
        }
        let mut answer = [node.run_form(
            node_now,
            &transmit.command,
            batch.form(0, &transmit.command),
        )];
        if !batch.seal_reads(0).is_empty() {
            let (epoch, stamped, stats) =
                (node.epoch_value(), node.stamped_value(), node.stats_value());
            let marker = batch
                .seal_args(0, SealRead::Marker)
                .get(1)
                .map(|key| node.exists(node_now, key));
            let replies = SealReplies {
                marker,
                epoch: epoch.as_deref(),
                stamped: stamped.as_deref(),
                claim_ttl: Some(node.epoch_pttl(node_now)),
                evictions: Some(&stats),
            };
            batch.handle_seal(0, replies);
        }
        batch.finish(Some(watch), &mut answer);
        answer[0]
    }

    /// Where the node publishes its evictions to a subscribed connection, the connection hears
    /// each one before the reply to its next command: its vouched acquisitions on an evicting
    /// node read no eviction count (the seal reads the stamps alone, for a swap), and an
    /// eviction voids the proof, named as one. A node that does not publish them, or will not
    /// say (`CONFIG` denied: not asked again), seals with the count.
    #[test]
    fn a_connection_that_hears_evictions_reads_no_eviction_count() {
        use crate::fake::FakeNode;
        let (acquire, _) = commands("r");
        let transmits = [acquire];
        let mut node = FakeNode::new();
        node.set_evicting(true);
        let prove = |watch: &mut MemoryWatch, flags: Result<Option<&[u8]>, NodeErrorKind>| {
            let mut batch = NodeBatch::new(&transmits, &Dialect::SCRIPTS, Some(watch), now());
            let reads = batch.reads();
            assert_eq!(
                reads.first() == Some(&ProofRead::Notifications),
                watch.asks_notifications()
            );
            for read in reads {
                match read {
                    ProofRead::Notifications => batch.handle_notifications(flags),
                    ProofRead::Caching => batch.handle_caching(Ok(())),
                    ProofRead::Epoch => batch.handle_epoch(Ok(node.epoch_value().as_deref())),
                    ProofRead::Info => batch.handle_info(Some(&node.info_value())),
                    other => panic!("a node with scripts is not asked {other:?}"),
                }
            }
            let mut answer = [Reply::Int(1)];
            batch.finish(Some(watch), &mut answer);
            assert_eq!(answer, [Reply::Int(1)]);
            NodeBatch::new(&transmits, &Dialect::SCRIPTS, Some(watch), now())
                .seal_reads(0)
                .to_vec()
        };
        let counted = [SealRead::Stamps, SealRead::Evictions];
        // Not subscribed: never asked, the count is read.
        let mut unsubscribed = MemoryWatch::new();
        assert_eq!(prove(&mut unsubscribed, Ok(Some(b"Ee"))), counted);
        // Subscribed, and the node publishes its evictions: the stamps alone.
        let mut heard = MemoryWatch::new();
        heard.handle_subscribed();
        assert_eq!(prove(&mut heard, Ok(Some(b"KEA"))), [SealRead::Stamps]);
        let MemoryCheck::Vouched { seen, .. } = heard.check(&EpochNames::standalone(), MAX, now())
        else {
            panic!("vouched");
        };
        heard.handle_eviction();
        assert_eq!(
            heard.vouched_reply(&EpochNames::standalone(), seen, Reply::Ok, MAX),
            refused(MAX, SitOutCause::Eviction)
        );
        assert!(!heard.vouches_for(MAX, now()), "proves again");
        // Subscribed, but the node publishes no evictions, or another class only.
        for flags in [&b""[..], b"Kx"] {
            let mut silent = MemoryWatch::new();
            silent.handle_subscribed();
            assert_eq!(prove(&mut silent, Ok(Some(flags))), counted, "{flags:?}");
        }
        // CONFIG denied to this user: the count, and never asked again.
        let mut denied = MemoryWatch::new();
        denied.handle_subscribed();
        let refused_config = Err(NodeErrorKind::NoPermission);
        assert_eq!(prove(&mut denied, refused_config), counted);
        assert!(!denied.asks_notifications());
        // Any other failure of the read: the count, and asked again next time.
        let mut failed = MemoryWatch::new();
        failed.handle_subscribed();
        assert_eq!(prove(&mut failed, Err(NodeErrorKind::Timeout)), counted);
        assert!(failed.asks_notifications());
    }

    /// Scenarios 6 and 3 of issue 21: a database swapped in by `SWAPDB`, or a lock key evicted
    /// on its own (`volatile-lru`: the epoch, without a TTL, stays), under a proven connection
    /// push nothing. Each vouched acquisition on a node that can swap or evicts is sealed: its
    /// `MULTI` reads the stamp (and on an evicting node `INFO stats`), which names another
    /// database or another eviction count; the vote is refused, and the proof that follows
    /// sees the identity changed and sits out. The `Unsealed` control lets the second holder
    /// in.
    #[test]
    fn a_swapped_database_or_a_lone_eviction_breaks_the_seal() {
        type Loss = fn(&mut crate::fake::FakeNode);
        let losses: [(&str, bool, Loss, SitOutCause); 2] = [
            (
                "swapdb",
                false,
                crate::fake::FakeNode::swap_database,
                SitOutCause::SwappedDatabase,
            ),
            (
                "eviction",
                true,
                crate::fake::FakeNode::evict_lock_keys,
                SitOutCause::Eviction,
            ),
        ];
        for (loss_name, evicting, loss, cause) in losses {
            // Named by the seal, and by the checked script that restamps the epoch after it.
            let refusal = refused(MAX, cause);
            for fault in [None, Some(crate::WatchFault::Unsealed)] {
                let name = format!("{loss_name}, {fault:?}");
                let mut node = crate::fake::FakeNode::new();
                node.set_evicting(evicting);
                let mut watch = MemoryWatch::with_fault(fault);
                let (first, _) = commands("first");
                assert_eq!(on_node(&mut node, &mut watch, &first, now()), Reply::Int(1));
                let (held, _) = commands("held");
                let sealed = next_batch(&watch, &held);
                let expected: &[SealRead] = match (fault, evicting) {
                    (Some(_), _) => &[],
                    (None, false) => &[SealRead::Stamps],
                    (None, true) => &[SealRead::Stamps, SealRead::Evictions],
                };
                assert_eq!(sealed.seal_reads(0), expected, "{name}");
                assert_eq!(
                    sealed.wire_len(std::slice::from_ref(&held)),
                    1 + expected.len() + if expected.is_empty() { 0 } else { 2 }
                );
                assert_eq!(
                    on_node(&mut node, &mut watch, &held, now()),
                    Reply::Ok,
                    "{name}"
                );
                loss(&mut node);
                let (rival, _) = commands("held");
                let answer = on_node(&mut node, &mut watch, &rival, now());
                if fault.is_some() {
                    assert_eq!(
                        answer,
                        Reply::Ok,
                        "{name}: the control lets a second holder in"
                    );
                    continue;
                }
                assert_eq!(answer, refusal, "{name}");
                assert!(!watch.vouches_for(MAX, now()), "{name}: the proof ended");
                let (next, _) = commands("next");
                assert_eq!(
                    on_node(&mut node, &mut watch, &next, now()),
                    refusal,
                    "{name}: sits out"
                );
            }
        }
    }

    /// Where the node runs scripts, can swap and does not evict, a proof's checked script
    /// writes the proof's marker in the database it reads, and each vouched acquisition reads
    /// `EXISTS` of it alone (one small read, where the stamps took an `MGET` of two keys). A
    /// database swapped in holds no marker of this proof, and the vote is refused as the
    /// stamps' seal refuses it. A seal that finds its marker missing leaves markers off on the
    /// connection: its next proofs write none, and its seals read the stamps.
    #[test]
    fn a_marked_seal_reads_its_marker_alone_and_a_swapped_in_database_holds_none() {
        for marked in [true, false] {
            {
                let name = format!("swapdb, marked: {marked}");
                let mut node = crate::fake::FakeNode::new();
                let mut watch = MemoryWatch::new();
                let (first, _) = commands("first");
                let nonce = marked.then_some(7);
                let proved = on_node_marked(&mut node, &mut watch, &first, now(), nonce);
                assert_eq!(proved, Reply::Int(1), "{name}");
                assert_eq!(
                    node.exists(Duration::ZERO, b"redlock:epoch:m:7"),
                    marked,
                    "{name}: the script wrote the marker"
                );
                let (held, _) = commands("held");
                let sealed = next_batch(&watch, &held);
                if marked {
                    assert_eq!(sealed.seal_reads(0), &[SealRead::Marker], "{name}");
                    assert_eq!(
                        sealed.seal_args(0, SealRead::Marker).as_slice(),
                        [&b"EXISTS"[..], b"redlock:epoch:m:7"]
                    );
                } else {
                    assert_eq!(sealed.seal_reads(0), &[SealRead::Stamps], "{name}");
                }
                assert_eq!(sealed.wire_len(std::slice::from_ref(&held)), 4);
                assert_eq!(
                    on_node(&mut node, &mut watch, &held, now()),
                    Reply::Ok,
                    "{name}: the proven database holds the marker"
                );
                node.swap_database();
                let (rival, _) = commands("held");
                let answer = on_node(&mut node, &mut watch, &rival, now());
                assert_eq!(answer, refused(MAX, SitOutCause::SwappedDatabase), "{name}");
                assert!(!watch.vouches_for(MAX, now()), "{name}: the proof ended");
                assert_eq!(
                    watch.marks(),
                    !marked,
                    "{name}: markers off after a missing one"
                );
                // The next proof sees the stamp of another database: the node sits out.
                let (next, _) = commands("next");
                let answer = on_node_marked(&mut node, &mut watch, &next, now(), Some(8));
                assert_eq!(answer, refused(MAX, SitOutCause::SwappedDatabase), "{name}");
            }
        }
    }

    /// One marker per batch: of two requests that prove in one batch, only the last one's
    /// script writes it, so no swap between their scripts can put one name in two databases.
    #[test]
    fn only_the_last_proving_request_of_a_batch_writes_the_marker() {
        let (a, _) = commands("a");
        let (b, _) = commands("b");
        let transmits = [a, b];
        let watch = MemoryWatch::new();
        let mut batch = NodeBatch::new(&transmits, &Dialect::SCRIPTS, Some(&watch), now());
        batch.mark(5);
        let nonce = |index: usize| match batch.form(index, &transmits[index].command) {
            RedisForm::Script { args, .. } => args.numbers().nth(3),
            _ => None,
        };
        assert_eq!((nonce(0), nonce(1)), (None, Some(5)));
    }

    /// A proof by script marks only where the node may need a seal against a swap (it can run
    /// `SWAPDB`), and a marker this user may not touch (`EXISTS` refused by an ACL) is never
    /// read: the seals read the stamps.
    #[test]
    fn a_marker_is_written_only_where_a_swap_can_happen_and_read_only_where_allowed() {
        let (acquire, _) = commands("r");
        let transmits = [acquire];
        let prove = |dialect: &Dialect, markable: Result<(), NodeErrorKind>| {
            let mut watch = MemoryWatch::new();
            let mut batch = NodeBatch::new(&transmits, dialect, Some(&watch), now());
            batch.mark(9);
            let marked = batch.reads().contains(&ProofRead::Markable);
            batch.handle_caching(Ok(()));
            batch.handle_epoch(Ok(Some(b"0")));
            batch.handle_info(Some(&info('a')));
            batch.handle_markable(markable);
            let mut answer = [Reply::Int(1)];
            batch.finish(Some(&mut watch), &mut answer);
            let next = NodeBatch::new(&transmits, dialect, Some(&watch), now());
            (marked, next.seal_reads(0).to_vec())
        };
        assert_eq!(
            prove(&Dialect::SCRIPTS, Ok(())),
            (true, vec![SealRead::Marker])
        );
        assert_eq!(
            prove(&Dialect::SCRIPTS, Err(NodeErrorKind::NoPermission)),
            (true, vec![SealRead::Stamps])
        );
        let renamed = Dialect {
            swapdb: false,
            ..Dialect::SCRIPTS
        };
        assert_eq!(prove(&renamed, Ok(())), (false, vec![]));
    }

    /// A native proof that marks reads its database in one transaction with its marker's write
    /// (`MULTI` … `EXEC`, then `INFO`): no swap comes between the reads that judged the
    /// database and the marker its seals then read. The proof's vouched acquisitions read
    /// `EXISTS` of that marker alone; a database swapped in holds none and the vote is refused.
    /// A node that refuses this user the marker (an ACL: the transaction aborts) leaves
    /// markers off on the connection, whose next proof reads as it did before markers.
    #[test]
    fn a_native_proof_writes_its_marker_in_one_transaction_with_its_reads() {
        let (first, _) = commands("first");
        let transmits = std::slice::from_ref(&first);
        let dialect = native();
        let at = Duration::from_secs(61);
        let mut node = crate::fake::FakeNode::new();
        let aborted = NodeErrorKind::from_code("EXECABORT");
        // Runs a proving batch on `node` (marked with `nonce`), the marker's write answered
        // `marker` (`Ok`: run on the node); the answer and the reads it went out with.
        let prove = |node: &mut crate::fake::FakeNode,
                     watch: &mut MemoryWatch,
                     marker: Result<(), NodeErrorKind>| {
            let mut batch = NodeBatch::new(transmits, &dialect, Some(watch), now());
            batch.mark(9);
            let reads = batch.reads();
            let time = (at.as_secs(), 0);
            let failed = marker.err().map(|_| aborted);
            for read in reads {
                match (read, failed) {
                    (ProofRead::Marker, _) => {
                        let wrote =
                            marker.is_ok() && node.run_marker_write(at, &batch.read_args(*read));
                        batch.handle_marker(marker.map(|()| assert!(wrote)));
                    }
                    // The transaction's other reads fail with it (`CLIENT CACHING` and
                    // `INFO` are outside it).
                    (read, Some(failed))
                        if !matches!(
                            read,
                            ProofRead::Marker | ProofRead::Caching | ProofRead::Info
                        ) =>
                    {
                        batch.handle_failed(*read, failed);
                    }
                    (ProofRead::Epoch, None) => {
                        batch.handle_epoch(Ok(node.epoch_value().as_deref()));
                    }
                    (ProofRead::Caching, _) => batch.handle_caching(Ok(())),
                    (ProofRead::Pttl, _) => batch.handle_pttl(Ok(Some(node.epoch_pttl(at)))),
                    (ProofRead::Time, _) => batch.handle_time(Ok(Some(time))),
                    (ProofRead::Stamped, _) => {
                        batch.handle_stamped(Ok(node.stamped_value().as_deref()));
                    }
                    (ProofRead::Info, _) => batch.handle_info(Some(&node.info_value())),
                    (ProofRead::Claim, _) => batch.handle_claim(false),
                    (other, _) => assert!(
                        matches!(other, ProofRead::Multi | ProofRead::Exec),
                        "a native proof does not read {other:?}"
                    ),
                }
            }
            let form = batch.form(0, &first.command);
            // An acquisition inside the proof's transaction runs only if the transaction does.
            let mut answer = match failed {
                Some(failed) if batch.embeds() => [Reply::Error(failed)],
                _ => [node.run_form(at, &first.command, form)],
            };
            let wire = batch.wire_len(transmits);
            batch.finish(Some(watch), &mut answer);
            (answer[0], reads, wire)
        };
        let mut watch = MemoryWatch::new();
        let (answer, reads, wire) = prove(&mut node, &mut watch, Ok(()));
        assert_eq!(answer, Reply::Ok, "the trusted epoch votes at once");
        assert_eq!(
            reads,
            [
                ProofRead::Caching,
                ProofRead::Multi,
                ProofRead::Epoch,
                ProofRead::Pttl,
                ProofRead::Time,
                ProofRead::Stamped,
                ProofRead::Claim,
                ProofRead::Marker,
                ProofRead::Exec,
                ProofRead::Info,
            ]
        );
        assert_eq!(wire, reads.len() + 1, "the reads, with the acquisition");
        // A batch of proving acquisitions goes inside the proof's transaction; one with a
        // release beside it keeps its order (the requests follow the reads), as does a proof
        // that writes no marker, or one by script.
        let embeds = |transmits: &[Transmit], dialect: &Dialect, nonce: Option<u64>| {
            let mut batch = NodeBatch::new(transmits, dialect, Some(&MemoryWatch::new()), now());
            if let Some(nonce) = nonce {
                batch.mark(nonce);
            }
            batch.embeds()
        };
        let (second, release) = commands("second");
        assert!(embeds(&[first.clone(), second.clone()], &dialect, Some(9)));
        assert!(!embeds(&[first.clone(), release], &dialect, Some(9)));
        assert!(!embeds(transmits, &dialect, None));
        assert!(!embeds(transmits, &Dialect::SCRIPTS, Some(9)));
        let batch = NodeBatch::new(transmits, &dialect, Some(&watch), now());
        let mut marked = batch;
        marked.mark(9);
        assert!(marked.reads().is_empty(), "the connection vouches");
        assert_eq!(marked.seal_reads(0), &[SealRead::Marker]);
        assert_eq!(
            marked.seal_args(0, SealRead::Marker).as_slice(),
            [&b"EXISTS"[..], b"redlock:epoch:m:9"]
        );
        assert!(
            node.exists(at, b"redlock:epoch:m:9"),
            "written in the proven database"
        );
        // Its TTL is the longest in use: it outlives the proof.
        let mut probe = NodeBatch::new(transmits, &dialect, Some(&MemoryWatch::new()), now());
        probe.mark(9);
        assert_eq!(
            probe.read_args(ProofRead::Marker).as_slice(),
            [&b"SET"[..], b"redlock:epoch:m:9", b"1", b"PX", b"60000"]
        );
        // A database swapped in holds no marker of this proof: refused.
        node.swap_database();
        let (rival, _) = commands("first");
        let mut sealed =
            NodeBatch::new(std::slice::from_ref(&rival), &dialect, Some(&watch), now());
        let form = sealed.form(0, &rival.command);
        let mut answer = [node.run_form(at, &rival.command, form)];
        let marker = sealed.seal_args(0, SealRead::Marker)[1].to_vec();
        let replies = SealReplies {
            marker: Some(node.exists(at, &marker)),
            epoch: None,
            stamped: None,
            claim_ttl: None,
            evictions: None,
        };
        sealed.handle_seal(0, replies);
        sealed.finish(Some(&mut watch), &mut answer);
        assert_eq!(answer, [refused(MAX, SitOutCause::SwappedDatabase)]);
        // Markers refused by an ACL: the transaction aborts (an error vote, this once) and the
        // connection's next proof reads without one; its seals read the stamps.
        let mut fresh = crate::fake::FakeNode::new();
        let mut watch = MemoryWatch::new();
        let (answer, _, _) = prove(&mut fresh, &mut watch, Err(NodeErrorKind::NoPermission));
        assert_eq!(answer, Reply::Error(aborted));
        assert!(!watch.marks(), "markers off");
        // The refused transaction held the acquisition and set no key: the next proof gets it.
        let (answer, reads, _) = prove(&mut fresh, &mut watch, Ok(()));
        assert_eq!(answer, Reply::Ok);
        assert!(!reads.contains(&ProofRead::Multi), "{reads:?}");
        let next = NodeBatch::new(transmits, &dialect, Some(&watch), now());
        assert_eq!(next.seal_reads(0), &[SealRead::Stamps]);
        // Where no swap can happen, or the connection found the markers refused when it was
        // made (`Dialect::markers`), no marker and no transaction.
        let renamed = Dialect {
            swapdb: false,
            ..dialect
        };
        let unmarked = Dialect {
            markers: false,
            ..dialect
        };
        for dialect in [renamed, unmarked] {
            let mut batch = NodeBatch::new(transmits, &dialect, Some(&MemoryWatch::new()), now());
            batch.mark(9);
            assert!(!batch.reads().contains(&ProofRead::Multi), "{dialect:?}");
        }
    }

    /// The adopt rule, as the checked script keeps it: an epoch with no stamp on a node that
    /// evicted keys sits out (the stamp may have been evicted with the lock keys); an empty
    /// stamp (a native trust's `MSET`) is adopted whatever the node evicted.
    #[test]
    fn a_missing_stamp_after_evictions_sits_out_and_an_empty_one_is_adopted() {
        let (first, _) = commands("first");
        let refusal = refused(MAX, SitOutCause::Eviction);
        let mut evicted = crate::fake::FakeNode::new();
        evicted.evict_lock_keys();
        assert_eq!(evicted.stamped_value(), None);
        let mut watch = MemoryWatch::new();
        assert_eq!(on_node(&mut evicted, &mut watch, &first, now()), refusal);
        let mut trusted = crate::fake::FakeNode::new();
        trusted.evict_lock_keys();
        let answer = trusted.run_form(Duration::ZERO, &first.command, RedisForm::SetTrusted);
        assert_eq!(answer, Reply::Int(1));
        assert_eq!(trusted.stamped_value(), Some(Vec::new()));
        let mut watch = MemoryWatch::new();
        assert_eq!(
            on_node(&mut trusted, &mut watch, &first, now()),
            Reply::Int(1)
        );
        assert_eq!(trusted.stamped_value(), Some(trusted.identity_value()));
    }

    #[test]
    fn a_node_that_cannot_swap_nor_evict_vouches_with_a_plain_set() {
        let (acquire, _) = commands("r");
        let transmits = [acquire];
        let proven = |dialect: &Dialect| {
            let mut watch = MemoryWatch::new();
            let mut batch = NodeBatch::new(&transmits, dialect, Some(&watch), now());
            batch.handle_caching(Ok(()));
            batch.handle_epoch(Ok(Some(b"0")));
            batch.handle_info(Some(&info('a')));
            let mut answer = [Reply::Int(1)];
            batch.finish(Some(&mut watch), &mut answer);
            watch
        };
        let renamed = Dialect {
            swapdb: false,
            ..Dialect::SCRIPTS
        };
        let vouched = NodeBatch::new(&transmits, &renamed, Some(&proven(&renamed)), now());
        assert!(vouched.reads().is_empty() && vouched.seal_reads(0).is_empty());
        assert_eq!(vouched.wire_len(&transmits), 1);
        // The same node where SWAPDB can run: sealed with the stamp only.
        let mut watch = proven(&Dialect::SCRIPTS);
        let swaps = NodeBatch::new(&transmits, &Dialect::SCRIPTS, Some(&watch), now());
        assert_eq!(swaps.seal_reads(0), &[SealRead::Stamps]);
        // A seal whose reads never came back counts as broken: a refusal, never a vote.
        let mut answer = [Reply::Ok];
        swaps.finish(Some(&mut watch), &mut answer);
        assert_eq!(answer, [refused(60_000, SitOutCause::Changed)]);
    }

    /// Scenario 7 of issue 21: a node demoted and promoted again under an open, proven
    /// connection pushes nothing and ends nothing. The connection proves again once half the
    /// longest TTL has passed since its proof, and the node's new identity (a promotion changes
    /// its `master_replid`) makes it sit out; the `Ageless` control keeps vouching.
    #[test]
    fn a_proof_expires_so_a_repromoted_node_is_checked_again() {
        let half = Duration::from_millis(MAX / 2);
        for (fault, sits_out) in [(None, true), (Some(crate::WatchFault::Ageless), false)] {
            let mut node = crate::fake::FakeNode::new();
            let mut watch = MemoryWatch::with_fault(fault);
            let (first, _) = commands("first");
            assert_eq!(on_node(&mut node, &mut watch, &first, now()), Reply::Int(1));
            assert!(watch.vouches_for(MAX, now()), "proven");
            // Demoted, then promoted again: keys another master granted meanwhile are not here.
            node.promote(2);
            let (again, _) = commands("again");
            let answer = on_node(&mut node, &mut watch, &again, now() + half);
            assert_eq!(
                answer == refused(MAX, SitOutCause::Replication),
                sits_out,
                "{fault:?}: {answer:?}"
            );
        }
    }

    #[test]
    fn the_claim_is_set_by_the_nodes_clock() {
        assert_eq!(
            std::str::from_utf8(CLAIM_TTL).ok(),
            Some(crate::EPOCH_CLAIM_TTL_MS.to_string().as_str())
        );
        assert_eq!(
            ProofRead::Claim.args(),
            [&b"SET"[..], EPOCH_KEY, EPOCH_CLAIM, b"NX", b"PX", CLAIM_TTL]
        );
    }

    #[test]
    fn tracking_is_optin_except_for_the_control() {
        let watch = MemoryWatch::new();
        assert_eq!(
            watch.tracking_on(),
            [&b"CLIENT"[..], b"TRACKING", b"ON", b"OPTIN"]
        );
        let legacy = MemoryWatch::with_fault(Some(crate::WatchFault::NoLoop));
        assert_eq!(legacy.tracking_on()[3], b"NOLOOP");
        let (acquire, _) = commands("r");
        let batch = NodeBatch::new(
            std::slice::from_ref(&acquire),
            &Dialect::SCRIPTS,
            Some(&legacy),
            now(),
        );
        assert_eq!(
            batch.reads(),
            &[ProofRead::Epoch, ProofRead::Info],
            "no CLIENT CACHING without OPTIN"
        );
        let batch = NodeBatch::new(&[acquire], &native(), Some(&legacy), now());
        assert_eq!(batch.reads()[0], ProofRead::Epoch);
    }

    /// A trust over a proven connection ends its proof, on every kind of node; the control
    /// (tracking as before OPTIN) keeps it.
    #[test]
    fn a_trust_ends_the_proof() {
        let config = Config::builder(1).build().expect("valid");
        let mut trust = crate::Trust::new(now(), &config);
        let crate::Output::Send(trusting) = trust.poll_output(now()) else {
            panic!("a trust sends");
        };
        for (dialect, fault, ends) in [
            (Dialect::SCRIPTS, None, true),
            (native(), None, true),
            (Dialect::SCRIPTS, Some(crate::WatchFault::NoLoop), false),
        ] {
            let mut watch = MemoryWatch::with_fault(fault);
            watch.prove(&EpochNames::standalone(), 0, MAX, now(), None);
            let batch = NodeBatch::new(
                std::slice::from_ref(&trusting),
                &dialect,
                Some(&watch),
                now(),
            );
            assert!(batch.reads().is_empty());
            batch.finish(Some(&mut watch), &mut [Reply::Int(1)]);
            assert_eq!(
                !watch.vouches_for(MAX, now()),
                ends,
                "{dialect:?} {fault:?}"
            );
        }
    }
}
