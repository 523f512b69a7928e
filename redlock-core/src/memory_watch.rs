//! Restart-aware voting for the price of a plain `SET`: what one connection knows about its
//! node's memory.
//!
//! The restart check ([`ACQUIRE_CHECKED_SCRIPT`](crate::ACQUIRE_CHECKED_SCRIPT)) costs the node
//! a script per acquisition. A connection can prove the same thing once and then have the node
//! tell it when the proof may no longer hold:
//!
//! 1. The connection speaks RESP3 with client tracking on ([`MemoryWatch::tracking_on`]).
//! 2. **Prove**: it sends `CLIENT CACHING YES` and `GET` [`EPOCH_KEY`](crate::EPOCH_KEY) — which
//!    makes the node track that key, and only that key, for this connection — and then the
//!    acquisition with its restart check, as always.
//!    If the check says the node may vote and the node pushed nothing about the epoch key in
//!    between, the node's memory was at least that longest TTL old, and still is for as long
//!    as the epoch key stays untouched.
//! 3. **Vouched**: later acquisitions on this connection go out without the check (plain
//!    `SET NX PX`). Deleting, evicting or flushing the epoch key makes the node push an
//!    invalidation on this connection ahead of the reply to any command it runs after that
//!    change; a restart or a failover ends the connection. A vouched reply counts only if
//!    nothing was pushed, and the connection did not end, between the proof and that reply;
//!    otherwise it is a refusal to vote ([`Reply::Int`] of minus the longest TTL, as the
//!    script answers for a young memory) and the next acquisition proves again.
//!
//! The driver must hand this watch every push it read before a reply, before it hands the
//! reply on ([`MemoryWatch::handle_invalidation`]); a new connection starts with a new watch.
//! Everything else — which form each request takes, what goes ahead of a batch to prove, how
//! each answer counts — is [`NodeBatch`](crate::NodeBatch)'s: a driver's batch code goes
//! through it and calls no method of the watch.
//!
//! # The connection hears what its own commands cause
//! Tracking is `OPTIN` and without `NOLOOP`: the node pushes to this connection every change of
//! the epoch key, its own included. An eviction or a tracking-table trim that the connection's
//! own command sets off (a vouched `SET` on a node at its `maxmemory`) is pushed *before* that
//! command's reply, so the reply does not count; the connection's own write of the epoch (a
//! trust, the checked script stamping a missing epoch, a claim) is pushed right after its
//! reply, and the next reply does not count as vouched. Both checked on Redis 7.0 and Valkey
//! 9.1. With `NOLOOP`, none of these reaches the connection, and a write of its own even stops
//! the node tracking the key for it: a later eviction is never pushed. A trust also ends the
//! proof where the batch sees it go out, whatever the tracking.
//!
//! # Without scripts
//! A node that runs no script proves natively ([`NodeBatch`](crate::NodeBatch)): `GET` and
//! `PTTL` of the epoch key, `TIME`, `GET` of its identity and `INFO`, then
//! `SET epoch claimed NX PX 2^40` (the [`EPOCH_CLAIM`](crate::EPOCH_CLAIM)), then the
//! acquisition without the check, in one pipeline; the watch decides from the epoch, the
//! identities and the node's time, as the script would, and what the script would write is
//! sent right after ([`Stamp`](crate::Stamp)). A
//! missing epoch is so claimed by the node itself: its expiry, set by the node's own clock,
//! says when the claim was made — after the memory was lost, whatever ran in between — so no
//! time of the client's ever becomes an epoch, and nothing has to be undone. A claim reads as
//! the memory's beginning (`2^40 − PTTL` ago) from then on.
//!
//! # Cluster masters
//! A cluster keeps one epoch per slot (`redlock:epoch:{tag}`,
//! [`EpochNames::of_slot`](crate::EpochNames::of_slot)), and a connection to one of its masters
//! proves the slots it serves one by one: each proof reads one slot's epoch (the batch's first
//! acquisition that must prove, [`NodeBatch`](crate::NodeBatch)), and the watch keeps a proof
//! per slot. A push of one slot's epoch (a delete, an eviction, the slot migrated away) ends
//! that slot's proof alone; a flush, an eviction event or the connection's end ends every one.
//! A master that drops a lost slot's keys without a push (Redis,
//! [`Dialect::silent_slot_drops`](crate::Dialect::silent_slot_drops)) seals each vouched
//! acquisition with a read of the slot's epoch.
//!
//! What it never does: it never reads a clock or a socket, never vouches for a longer TTL than
//! it proved, and never lets a reply count across a push or a connection's end.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::command::EPOCH_KEY;
use crate::identity::Seal;
use crate::keyspace::EpochNames;
use crate::reply::Reply;
use crate::sit_out::SitOutCause;
use crate::slot::Slot;

/// One connection's knowledge of its node's memory: restart-aware voting for the price of a
/// plain `SET`, as the crate docs' *Restart-aware voting* section describes.
///
/// The protocol, in order: the connection turns client tracking on
/// ([`tracking_on`](Self::tracking_on)); every batch goes out through a
/// [`NodeBatch`](crate::NodeBatch), which says whether an acquisition must prove (`GET` of the
/// epoch key, then the checked acquisition) or is vouched for (plain `SET NX PX`) and counts
/// its answers; every push the connection reads goes to
/// [`handle_invalidation`](Self::handle_invalidation) and its end to
/// [`handle_closed`](Self::handle_closed) before the replies after them are counted.
#[derive(Debug, Clone, Default)]
pub struct MemoryWatch {
    /// Invalidations of the epoch key (flushes included) and connection ends seen so far.
    seen: u64,
    /// What the connection proved of the node's one epoch, if anything.
    proof: Option<Proven>,
    /// On a cluster master's connection, what it proved of each slot's epoch: a push of one
    /// slot's epoch ends that slot's proof alone.
    slots: HashMap<Slot, SlotWatch>,
    /// Whether the connection ended: nothing is vouched for any more.
    closed: bool,
    /// Negative controls only: what the watch fails to do.
    fault: Option<WatchFault>,
    /// Whether the connection subscribed to its node's eviction events
    /// ([`eviction_channel`](crate::eviction_channel)).
    subscribed: bool,
    /// Whether the node refused to say if it publishes them (`CONFIG GET` denied): the
    /// connection stops asking.
    notifications_denied: bool,
    /// Why the last proof ended, for the refusals of replies it voids (`None`: changed).
    ended_by: Option<SitOutCause>,
    /// Whether a seal found its proof's marker missing: a database swapped in, or a node that
    /// keeps no marker (an ACL that denies it, `maxmemory`). The connection's later proofs
    /// write none, and their seals read the epoch and its stamp.
    unmarked: bool,
}

/// A proof that holds: the node's memory was old enough for `ttl` when the watch had seen
/// `seen`, and the proof counts until `until` (half that TTL after the proving request went
/// out, on the driver's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Proven {
    seen: u64,
    ttl: u64,
    until: Instant,
    /// What each vouched acquisition reads with its `SET` (`None`: nothing, a plain `SET`).
    seal: Option<Seal>,
}

/// One cluster slot's epoch as a connection watches it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SlotWatch {
    /// Invalidations of this slot's epoch seen so far (never reset: what a request went out
    /// under is the watch's count plus this one).
    pushed: u64,
    /// What the connection proved of it, if anything.
    proof: Option<Proven>,
}

/// The engine's reply for a node that may not vote for `ms` more, for `cause`, as the checked
/// script answers for a young memory (at least 1 ms).
pub(crate) fn refusal(ms: u64, cause: SitOutCause) -> Reply {
    Reply::Ineligible {
        for_ms: ms.max(1),
        cause,
    }
}

/// How long a proof counts: this share of the TTL it proved. A node demoted to a replica and
/// promoted again keeps its connections open and pushes nothing, while a master promoted in
/// between may grant keys that never reach it; that master sits out the longest TTL after its
/// promotion (its identity is new) before it grants anything, so a vouched request sent within
/// half the longest TTL of its proof, and answered within the node timeout, ran before any
/// such key was granted. Then the connection proves again, and the re-promoted node's new
/// `master_replid` makes it sit out.
const PROOF_LIFETIME_DIVISOR: u32 = 2;

/// A watch with one of its safeguards switched off, for the negative controls that show what
/// that safeguard prevents. Each one also leaves vouched acquisitions unsealed (a plain `SET`,
/// as on a node that can neither swap databases nor evict), so that its control shows what its
/// own safeguard prevents where nothing else does. Never for use outside tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchFault {
    /// Invalidation pushes are not heard.
    Deaf,
    /// Tracking as before `OPTIN`: `NOLOOP` everywhere (the connection's own commands push
    /// nothing to it), and a trust over the connection keeps its proof.
    NoLoop,
    /// A proof counts for as long as the connection lives (no lifetime): a node demoted and
    /// promoted again under the connection keeps vouching.
    Ageless,
    /// Vouched acquisitions go out unsealed (a plain `SET`) on every node: a database swapped
    /// in, or a lock key evicted on its own, under a proven connection goes unseen.
    Unsealed,
}

/// How one restart-checked acquisition goes out on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemoryCheck {
    /// Without the check: the connection's proof covers it. Its reply goes through
    /// [`MemoryWatch::vouched_reply`].
    Vouched {
        /// What the watch had seen when the request went out.
        seen: u64,
        /// What it reads with its `SET`, atomically (`None`: nothing).
        seal: Option<Seal>,
    },
    /// With the check, after a `GET` of the epoch key in the same pipeline; its reply may prove
    /// the node's memory ([`MemoryWatch::handle_proof`]).
    Prove {
        /// What the watch had seen when the request went out.
        seen: u64,
    },
}

impl MemoryWatch {
    /// A watch for a new connection: nothing proven yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A watch that never hears an invalidation: the check with its safety switched off, for
    /// negative controls that show what the invalidations prevent.
    pub fn deaf() -> Self {
        Self::with_fault(Some(WatchFault::Deaf))
    }

    /// A watch with `fault` (none: a sound watch, as [`new`](Self::new)).
    pub fn with_fault(fault: Option<WatchFault>) -> Self {
        Self {
            fault,
            ..Self::default()
        }
    }

    /// The command that turns client tracking on for this watch's connection:
    /// `CLIENT TRACKING ON OPTIN` (the node then tracks only what the proof reads after
    /// `CLIENT CACHING YES`, and pushes the connection's own changes too; `NOLOOP` only for the
    /// [`WatchFault::NoLoop`] control).
    pub fn tracking_on(&self) -> &'static [&'static [u8]] {
        if self.opts_in() {
            &[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"]
        } else {
            &[b"CLIENT", b"TRACKING", b"ON", b"NOLOOP"]
        }
    }

    /// Whether the connection tracks in `OPTIN` mode (and so hears its own commands' pushes).
    pub(crate) fn opts_in(&self) -> bool {
        self.fault != Some(WatchFault::NoLoop)
    }

    /// The connection subscribed to its node's eviction events
    /// ([`eviction_channel`](crate::eviction_channel)) and every message on that channel goes
    /// to [`handle_eviction`](Self::handle_eviction): each proof then asks whether the node
    /// publishes them ([`ProofRead::Notifications`](crate::ProofRead::Notifications)), and
    /// where it does, vouched acquisitions read no eviction count.
    pub fn handle_subscribed(&mut self) {
        self.subscribed = true;
    }

    /// The node published an eviction (a message on
    /// [`eviction_channel`](crate::eviction_channel)): any key, since any could be another
    /// client's lock key. No reply after it counts as vouched; the next acquisition proves
    /// again (and the checked script, seeing the eviction count moved, stamps a new epoch).
    pub fn handle_eviction(&mut self) {
        if self.fault == Some(WatchFault::Deaf) {
            return;
        }
        self.end_proof(SitOutCause::Eviction);
    }

    /// Whether a proof asks the node if it publishes its evictions.
    pub(crate) fn asks_notifications(&self) -> bool {
        self.subscribed && !self.notifications_denied
    }

    /// The node may not tell this user its `notify-keyspace-events`: never asked again on this
    /// connection (its vouched acquisitions read the eviction count where the node evicts).
    pub(crate) fn handle_notifications_denied(&mut self) {
        self.notifications_denied = true;
    }

    /// The proof ends, for `cause`: no reply on its way counts as vouched.
    fn end_proof(&mut self, cause: SitOutCause) {
        self.seen += 1;
        self.proof = None;
        // A slot whose epoch was never pushed needs no entry: its count is the watch's.
        self.slots.retain(|_, slot| {
            slot.proof = None;
            slot.pushed > 0
        });
        self.ended_by = Some(cause);
    }

    /// Slot `slot`'s epoch changed (a push of its name): that slot's proof ends, no reply of
    /// it on its way counts as vouched; every other slot's stands.
    fn end_slot_proof(&mut self, slot: Slot) {
        let watch = self.slots.entry(slot).or_default();
        watch.pushed += 1;
        watch.proof = None;
        self.ended_by = Some(SitOutCause::Changed);
    }

    /// What a request about `epoch` goes out under: every push and end that voids its proof,
    /// counted.
    fn seen_of(&self, epoch: &EpochNames) -> u64 {
        let pushed = epoch.slot().and_then(|slot| self.slots.get(&slot));
        self.seen + pushed.map_or(0, |slot| slot.pushed)
    }

    /// What the connection proved of `epoch`.
    fn proof_of(&self, epoch: &EpochNames) -> Option<Proven> {
        match epoch.slot() {
            None => self.proof,
            Some(slot) => self.slots.get(&slot).and_then(|slot| slot.proof),
        }
    }

    /// The connection wrote the epoch itself (a trust): a connection that does not hear its own
    /// writes stops being told about the key, so its proof ends here.
    pub(crate) fn handle_own_epoch_write(&mut self) {
        if self.fault != Some(WatchFault::NoLoop) {
            self.end_proof(SitOutCause::Changed);
        }
    }

    /// Whether the connection vouches for the node's memory against `max_ttl_ms` now: a
    /// restart-checked acquisition with that longest TTL would go out without its check.
    pub fn vouches_for(&self, max_ttl_ms: u64, now: Instant) -> bool {
        let epoch = EpochNames::standalone();
        matches!(
            self.check(&epoch, max_ttl_ms, now),
            MemoryCheck::Vouched { .. }
        )
    }

    /// Whether the connection, to a cluster master, vouches for slot `slot`'s memory against
    /// `max_ttl_ms` now (see [`vouches_for`](Self::vouches_for)).
    pub fn vouches_for_slot(&self, slot: Slot, max_ttl_ms: u64, now: Instant) -> bool {
        let epoch = EpochNames::of_slot(slot);
        matches!(
            self.check(&epoch, max_ttl_ms, now),
            MemoryCheck::Vouched { .. }
        )
    }

    /// A watch that vouches for `max_ttl_ms` as if a proof sent at `at` had just succeeded
    /// (tests of the code that feeds a watch its pushes).
    #[cfg(any(test, feature = "testing"))]
    pub fn proven_for_tests(max_ttl_ms: u64, at: Instant) -> Self {
        let mut watch = Self::new();
        watch.prove(&EpochNames::standalone(), 0, max_ttl_ms, at, None);
        watch
    }

    /// The node pushed an invalidation: of every key (`everything`: `FLUSHALL`, `FLUSHDB`, or
    /// the end of tracking) or of `keys`. Only epochs matter: the node's one epoch key ends every
    /// proof, a cluster slot's epoch that slot's; any other key is ignored.
    pub fn handle_invalidation<'k>(
        &mut self,
        everything: bool,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) {
        if self.fault == Some(WatchFault::Deaf) {
            return;
        }
        if everything {
            return self.end_proof(SitOutCause::Changed);
        }
        for key in keys {
            if key == EPOCH_KEY {
                self.end_proof(SitOutCause::Changed);
            } else if let Some(slot) = EpochNames::slot_of_epoch(key) {
                self.end_slot_proof(slot);
            }
        }
    }

    /// The connection ended: no reply it still brings counts as vouched.
    pub fn handle_closed(&mut self) {
        self.closed = true;
        self.end_proof(SitOutCause::Changed);
    }

    /// How an acquisition whose memory `epoch` vouches for, checked against `max_ttl_ms`, goes
    /// out at `now`.
    pub(crate) fn check(&self, epoch: &EpochNames, max_ttl_ms: u64, now: Instant) -> MemoryCheck {
        let ageless = self.fault == Some(WatchFault::Ageless);
        let current = self.seen_of(epoch);
        match self.proof_of(epoch) {
            Some(Proven {
                seen,
                ttl,
                until,
                seal,
            }) if !self.closed
                && seen == current
                && ttl >= max_ttl_ms
                && (now < until || ageless) =>
            {
                // Every control goes unsealed: it shows what its own safeguard prevents where
                // nothing else does (a node that can neither swap nor evict).
                let seal = seal.filter(|_| self.fault.is_none());
                MemoryCheck::Vouched { seen, seal }
            }
            _ => MemoryCheck::Prove { seen: current },
        }
    }

    /// The engine's reply for a [`MemoryCheck::Vouched`] acquisition that went out when the
    /// watch had seen `seen`: the node's own reply, unless the node pushed an invalidation or
    /// the connection ended since — then a refusal to vote for `max_ttl_ms` (its key, if the
    /// node set one, is released like any other of a failed or finished lock).
    pub(crate) fn vouched_reply(
        &self,
        epoch: &EpochNames,
        seen: u64,
        reply: Reply,
        max_ttl_ms: u64,
    ) -> Reply {
        match reply {
            Reply::Error(_) => reply,
            _ if self.seen_of(epoch) == seen && !self.closed => reply,
            _ => refusal(max_ttl_ms, self.ended_by.unwrap_or(SitOutCause::Changed)),
        }
    }

    /// A [`MemoryCheck::Prove`] acquisition on a node that runs no script went out without the
    /// check, after the reads of the epoch (`epoch`: what it says, `None` when missing or
    /// unreadable, the node's memory beginning now for `cause`) and of the node's `TIME`
    /// (`node_ms`) in the same pipeline, when the watch had seen `seen`, at `at`. Returns the
    /// engine's reply — the node's own only if its memory is old enough for `max_ttl_ms` and
    /// nothing was pushed since; the connection then vouches for that TTL, sealing each
    /// vouched acquisition with `seal`. A refusal names `cause`.
    pub(crate) fn handle_native_proof(
        &mut self,
        epoch_names: &EpochNames,
        (seen, at, seal): (u64, Instant, Option<Seal>),
        (epoch, cause): (Option<crate::Epoch>, SitOutCause),
        node_ms: u64,
        reply: Reply,
        max_ttl_ms: u64,
    ) -> Reply {
        if let Reply::Error(_) = reply {
            return reply;
        }
        let Some(epoch) = epoch else {
            return refusal(max_ttl_ms, cause);
        };
        match epoch.refuses_for_ms(node_ms, max_ttl_ms) {
            Some(left) => refusal(left, cause),
            None if seen == self.seen_of(epoch_names) && !self.closed => {
                self.prove(epoch_names, seen, max_ttl_ms, at, seal);
                reply
            }
            None => refusal(max_ttl_ms, SitOutCause::Changed),
        }
    }

    /// The reply of a [`MemoryCheck::Prove`] acquisition that went out when the watch had seen
    /// `seen`, at `at`: when the check let the node vote (a non-negative answer) and nothing was pushed
    /// since, the connection vouches for `max_ttl_ms` from now on, sealing each vouched
    /// acquisition with `seal`.
    pub(crate) fn handle_proof(
        &mut self,
        epoch: &EpochNames,
        (seen, at, seal): (u64, Instant, Option<Seal>),
        reply: Reply,
        max_ttl_ms: u64,
    ) {
        if matches!(reply, Reply::Int(n) if n >= 0) {
            self.prove(epoch, seen, max_ttl_ms, at, seal);
        }
    }

    /// The node's memory was old enough for `max_ttl_ms` when the watch had seen `seen`, by a
    /// request that went out at `at`: the connection vouches for it, if nothing was pushed
    /// since, for half that TTL from `at` ([`PROOF_LIFETIME_DIVISOR`]), each vouched
    /// acquisition sealed with `seal`.
    pub(crate) fn prove(
        &mut self,
        epoch: &EpochNames,
        seen: u64,
        max_ttl_ms: u64,
        at: Instant,
        seal: Option<Seal>,
    ) {
        if self.closed || seen != self.seen_of(epoch) {
            return;
        }
        let current = self.proof_of(epoch);
        let ttl = match current {
            Some(proven) if proven.seen == seen => proven.ttl.max(max_ttl_ms),
            _ => max_ttl_ms,
        };
        // A lifetime past what an `Instant` holds: none at all (every acquisition proves). A
        // proof that keeps its marker keeps its lifetime too: the marker was set for it.
        let until = match current {
            Some(proven)
                if proven.seen == seen
                    && proven.seal == seal
                    && seal.is_some_and(|seal| seal.marker.is_some()) =>
            {
                proven.until
            }
            _ => at
                .checked_add(Duration::from_millis(max_ttl_ms) / PROOF_LIFETIME_DIVISOR)
                .unwrap_or(at),
        };
        let proven = Some(Proven {
            seen,
            ttl,
            until,
            seal,
        });
        match epoch.slot() {
            None => self.proof = proven,
            Some(slot) => self.slots.entry(slot).or_default().proof = proven,
        }
    }

    /// Why the proof the watch had when it had seen `seen` ended, if it ended since (a push,
    /// the connection's end, a broken seal).
    pub(crate) fn ended_since(&self, epoch: &EpochNames, seen: u64) -> Option<SitOutCause> {
        (self.seen_of(epoch) != seen).then(|| self.ended_by.unwrap_or(SitOutCause::Changed))
    }

    /// A sealed acquisition found that it ran outside the memory the connection proved (another
    /// database swapped in, or an eviction since the stamp): the proof ends, and the next
    /// acquisition proves again (and the checked script, seeing the identity changed, stamps a
    /// new epoch). A seal that read the proof's marker (`marked`) leaves markers off on this
    /// connection.
    ///
    /// On a cluster master the seal read one slot's epoch (`epoch`): a change there ends that
    /// slot's proof alone — but an eviction is the whole node's, and ends every one.
    pub(crate) fn handle_broken_seal(
        &mut self,
        epoch: &EpochNames,
        cause: SitOutCause,
        marked: bool,
    ) {
        self.unmarked |= marked;
        match epoch.slot() {
            Some(slot) if cause != SitOutCause::Eviction => {
                self.end_slot_proof(slot);
                self.ended_by = Some(cause);
            }
            _ => self.end_proof(cause),
        }
    }

    /// The node refused this user a proof's marker (an ACL): the connection's next proofs
    /// write none, and its seals read the epoch and its stamp.
    pub(crate) fn handle_markers_denied(&mut self) {
        self.unmarked = true;
    }

    /// Whether this connection's proofs write a marker for their seals to read
    /// ([`EPOCH_MARKER_PREFIX`](crate::EPOCH_MARKER_PREFIX)): until a seal found one missing,
    /// and never under a [`WatchFault`] (whose acquisitions go unsealed, and whose proofs read
    /// and write exactly what they did before markers).
    pub(crate) fn marks(&self) -> bool {
        !self.unmarked && self.fault.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 60_000;

    /// The node's one epoch: what a standalone node's acquisitions prove.
    fn one() -> EpochNames {
        EpochNames::standalone()
    }

    /// A refusal for `ms`, for `cause`.
    fn refused(ms: u64, cause: SitOutCause) -> Reply {
        Reply::Ineligible { for_ms: ms, cause }
    }

    /// The driver's clock when the tests' requests go out.
    fn now() -> Instant {
        crate::testing::epoch()
    }

    fn proven() -> MemoryWatch {
        let mut watch = MemoryWatch::new();
        let MemoryCheck::Prove { seen } = watch.check(&one(), MAX, now()) else {
            panic!("a new connection proves first");
        };
        watch.handle_proof(&one(), (seen, now(), None), Reply::Int(1), MAX);
        watch
    }

    #[test]
    fn a_new_connection_proves_before_it_vouches() {
        let watch = proven();
        assert_eq!(
            watch.check(&one(), MAX, now()),
            MemoryCheck::Vouched {
                seen: 0,
                seal: None
            }
        );
        assert_eq!(
            watch.check(&one(), MAX / 2, now()),
            MemoryCheck::Vouched {
                seen: 0,
                seal: None
            }
        );
        assert_eq!(
            watch.check(&one(), MAX + 1, now()),
            MemoryCheck::Prove { seen: 0 },
            "never for a longer TTL than proven"
        );
    }

    #[test]
    fn a_young_memory_or_a_push_during_the_proof_proves_nothing() {
        let mut young = MemoryWatch::new();
        young.handle_proof(&one(), (0, now(), None), Reply::Int(-5_000), MAX);
        assert_eq!(
            young.check(&one(), MAX, now()),
            MemoryCheck::Prove { seen: 0 }
        );
        young.handle_proof(
            &one(),
            (0, now(), None),
            refused(5_000, SitOutCause::Restart),
            MAX,
        );
        assert_eq!(
            young.check(&one(), MAX, now()),
            MemoryCheck::Prove { seen: 0 }
        );
        let mut pushed = MemoryWatch::new();
        pushed.handle_invalidation(true, []);
        pushed.handle_proof(&one(), (0, now(), None), Reply::Int(1), MAX);
        assert_eq!(
            pushed.check(&one(), MAX, now()),
            MemoryCheck::Prove { seen: 1 }
        );
    }

    #[test]
    fn an_invalidation_of_the_epoch_or_a_flush_voids_vouched_replies() {
        for everything in [false, true] {
            let mut watch = proven();
            let MemoryCheck::Vouched { seen, .. } = watch.check(&one(), MAX, now()) else {
                panic!("vouched");
            };
            watch.handle_invalidation(everything, [EPOCH_KEY]);
            assert_eq!(
                watch.vouched_reply(&one(), seen, Reply::Ok, MAX),
                refused(60_000, SitOutCause::Changed)
            );
            assert_eq!(
                watch.check(&one(), MAX, now()),
                MemoryCheck::Prove { seen: 1 }
            );
        }
    }

    #[test]
    fn other_keys_change_nothing_and_errors_stay_errors() {
        let mut watch = proven();
        watch.handle_invalidation(false, [&b"redlock:res"[..], b"other"]);
        assert_eq!(
            watch.check(&one(), MAX, now()),
            MemoryCheck::Vouched {
                seen: 0,
                seal: None
            }
        );
        assert_eq!(watch.vouched_reply(&one(), 0, Reply::Ok, MAX), Reply::Ok);
        assert_eq!(watch.vouched_reply(&one(), 0, Reply::Nil, MAX), Reply::Nil);
        let failed = Reply::Error(crate::NodeErrorKind::Timeout);
        assert_eq!(watch.vouched_reply(&one(), 7, failed, MAX), failed);
    }

    #[test]
    fn a_closed_connection_vouches_for_nothing_again() {
        let mut watch = proven();
        watch.handle_closed();
        assert_eq!(
            watch.vouched_reply(&one(), 0, Reply::Ok, MAX),
            refused(60_000, SitOutCause::Changed)
        );
        let MemoryCheck::Prove { seen } = watch.check(&one(), MAX, now()) else {
            panic!("prove again");
        };
        watch.handle_proof(&one(), (seen, now(), None), Reply::Int(1), MAX);
        assert_eq!(watch.check(&one(), MAX, now()), MemoryCheck::Prove { seen });
    }

    #[test]
    fn a_proof_counts_for_half_the_ttl_it_proved() {
        let watch = proven();
        let half = Duration::from_millis(MAX / 2);
        assert!(watch.vouches_for(MAX, now() + half - Duration::from_millis(1)));
        assert!(!watch.vouches_for(MAX, now() + half), "proves again");
        // A new proof starts a new lifetime.
        let mut watch = watch;
        watch.handle_proof(&one(), (0, now() + half, None), Reply::Int(1), MAX);
        assert!(watch.vouches_for(MAX, now() + half * 2 - Duration::from_millis(1)));
        // The control keeps a proof for as long as the connection lives.
        let mut ageless = MemoryWatch::with_fault(Some(WatchFault::Ageless));
        ageless.handle_proof(&one(), (0, now(), None), Reply::Int(1), MAX);
        assert!(ageless.vouches_for(MAX, now() + half * 1_000));
    }

    #[test]
    fn the_deaf_control_hears_nothing() {
        let mut watch = MemoryWatch::deaf();
        watch.handle_subscribed();
        watch.handle_proof(&one(), (0, now(), None), Reply::Int(1), MAX);
        watch.handle_invalidation(true, []);
        watch.handle_eviction();
        assert_eq!(watch.vouched_reply(&one(), 0, Reply::Ok, MAX), Reply::Ok);
    }

    #[test]
    fn an_eviction_voids_vouched_replies_and_is_named() {
        let mut watch = proven();
        watch.handle_eviction();
        assert_eq!(
            watch.vouched_reply(&one(), 0, Reply::Ok, MAX),
            refused(60_000, SitOutCause::Eviction)
        );
        assert_eq!(
            watch.check(&one(), MAX, now()),
            MemoryCheck::Prove { seen: 1 }
        );
        // The next end of a proof names its own cause.
        watch.handle_proof(&one(), (1, now(), None), Reply::Int(1), MAX);
        watch.handle_invalidation(false, [EPOCH_KEY]);
        assert_eq!(
            watch.vouched_reply(&one(), 1, Reply::Ok, MAX),
            refused(60_000, SitOutCause::Changed)
        );
    }

    #[test]
    fn a_node_without_scripts_proves_from_its_epoch_and_time() {
        use crate::Epoch;
        let mut watch = MemoryWatch::new();
        // Trusted, or old enough: the node's own reply counts, and the proof holds.
        let answer = watch.handle_native_proof(
            &one(),
            (0, now(), None),
            (Some(Epoch::Trusted), SitOutCause::Unrecorded),
            5,
            Reply::Ok,
            MAX,
        );
        assert_eq!(answer, Reply::Ok);
        assert_eq!(
            watch.check(&one(), MAX, now()),
            MemoryCheck::Vouched {
                seen: 0,
                seal: None
            }
        );
        let mut old = MemoryWatch::new();
        let began = Some(Epoch::Began(1_000));
        let cause = SitOutCause::Restart;
        assert_eq!(
            old.handle_native_proof(
                &one(),
                (0, now(), None),
                (began, cause),
                61_000,
                Reply::Nil,
                MAX
            ),
            Reply::Nil
        );
        // Young: refused for what is left, nothing proven.
        let mut young = MemoryWatch::new();
        let answer = young.handle_native_proof(
            &one(),
            (0, now(), None),
            (began, cause),
            31_000,
            Reply::Ok,
            MAX,
        );
        assert_eq!(
            answer,
            refused(30_000, cause),
            "named as the stamp recorded it"
        );
        assert_eq!(
            young.check(&one(), MAX, now()),
            MemoryCheck::Prove { seen: 0 }
        );
        // Missing: refused for the longest TTL.
        let mut fresh = MemoryWatch::new();
        let missing = (None, SitOutCause::NoEpoch);
        let answer =
            fresh.handle_native_proof(&one(), (0, now(), None), missing, 7_000, Reply::Ok, MAX);
        assert_eq!(answer, refused(60_000, SitOutCause::NoEpoch));
        // A push before the reply: nothing counts.
        fresh.handle_invalidation(true, []);
        let trusted = (Some(Epoch::Trusted), SitOutCause::Unrecorded);
        let answer =
            fresh.handle_native_proof(&one(), (0, now(), None), trusted, u64::MAX, Reply::Ok, MAX);
        assert_eq!(answer, refused(60_000, SitOutCause::Changed));
        let failed = Reply::Error(crate::NodeErrorKind::Timeout);
        assert_eq!(
            fresh.handle_native_proof(&one(), (1, now(), None), missing, 0, failed, MAX),
            failed
        );
    }
}
