//! What the clients do: a plan of critical sections drawn from each client's seeded stream, what
//! a section is, and the tallies the clients add to.
//!
//! This part is the same for every adapter, and so is the code that runs a section (the section
//! module); an adapter only supplies the calls (see the adapter module). Clients of every
//! [`AdapterKind`] run side by side against the same nodes, recorder and counters, and each
//! adapter has a [`Tally`] of its own.
//!
//! # A critical section
//! 1. Take the lock, one of four ways: `lock` (retries), `try_lock` (one round), `lock` cancelled
//!    after a short while (the dropped future must clean up; async adapters only: a blocking
//!    call cannot be abandoned, so a blocking client plans a plain `lock` instead), or
//!    `with_lock` (auto-extension).
//! 2. `GET` the resource's counter from the counter server (fault-free, not a lock node).
//! 3. Work (sleep) — usually a few milliseconds, sometimes a good part of the TTL or longer; a
//!    plain lock may `extend` half-way.
//! 4. Only if at least the write guard of validity is left (and, for `with_lock`, the lock is
//!    not lost): `SET` the counter to the value read plus one. Otherwise skip the write: the
//!    section is *abandoned*, as a correct client abandons work it can no longer protect.
//! 5. Release (or, sometimes, drop the lock unreleased) and record the window.
//!
//! Increments are not atomic (`GET`, pause, `SET`), so two sections that overlap lose one: the
//! counter ends equal to the number of written sections only if no two of them overlapped.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redlock_core::ReleaseReport;
use redlock_core::Vote;
use redlock_redis::Error;

use super::adapter::AdapterKind;
use super::bounds::{CallBounds, CallTimes};
use super::config::ChaosConfig;
use super::recorder::Recorder;
use crate::rng::TestRng;

/// How a section takes its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `lock`, retrying per policy.
    Lock,
    /// `try_lock`: one round.
    TryLock,
    /// `lock`, abandoned (the future dropped) if it has not finished after this long.
    Cancellable(Duration),
    /// `with_lock`: extended automatically while the work runs.
    WithLock,
}

impl Entry {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::TryLock => "try_lock",
            Self::Cancellable(_) => "lock (cancellable)",
            Self::WithLock => "with_lock",
        }
    }
}

/// One planned critical section.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    pub(crate) entry: Entry,
    pub(crate) resource: usize,
    pub(crate) ttl: Duration,
    /// For plain locks: extend between the two parts of the work, to this TTL.
    pub(crate) extend: Option<Duration>,
    /// The work, before and after the extension point.
    pub(crate) work: (Duration, Duration),
    /// For plain locks: drop the lock unreleased at the end instead of releasing it.
    pub(crate) drop_unreleased: bool,
    /// Pause after the section.
    pub(crate) think: Duration,
}

/// Draws one client's plan.
#[derive(Debug)]
pub(crate) struct Planner {
    rng: TestRng,
    resources: usize,
    ttl: (Duration, Duration),
    /// Whether the client's adapter can abandon an acquisition ([`AdapterKind::can_cancel`]).
    can_cancel: bool,
}

impl Planner {
    pub(crate) fn new(rng: TestRng, config: &ChaosConfig, adapter: AdapterKind) -> Self {
        Self {
            rng,
            resources: config.resources,
            ttl: config.ttl,
            can_cancel: adapter.can_cancel(),
        }
    }

    pub(crate) fn next_step(&mut self) -> Step {
        let ms = Duration::from_millis;
        let rng = &mut self.rng;
        let roll = rng.unit();
        let entry = if roll < 0.40 {
            Entry::Lock
        } else if roll < 0.55 {
            Entry::TryLock
        } else if roll < 0.65 {
            // Drawn either way, so that every adapter's stream has the same shape.
            let after = rng.duration_micros((ms(5), ms(600)));
            if self.can_cancel {
                Entry::Cancellable(after)
            } else {
                Entry::Lock
            }
        } else {
            Entry::WithLock
        };
        let resource = rng.index(self.resources);
        let ttl = rng.duration_micros(self.ttl);
        let plain = entry != Entry::WithLock;
        let extend = (plain && rng.chance(0.35)).then(|| rng.duration_micros(self.ttl));
        // Mostly short work; sometimes long enough for the validity to run out (plain locks) or
        // for auto-extension to kick in (with_lock).
        let total = if rng.chance(0.08) {
            ttl.mul_f64(0.3 + 1.1 * rng.unit())
        } else {
            rng.duration_micros((ms(2), ms(60)))
        };
        let first = total.mul_f64(rng.unit());
        Step {
            entry,
            resource,
            ttl,
            extend,
            work: (first, total - first),
            drop_unreleased: plain && rng.chance(0.05),
            think: rng.duration_micros((ms(0), ms(40))),
        }
    }
}

/// What every client shares: the checker, the tallies and the run's settings.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) recorder: Recorder,
    /// One tally per adapter in the run.
    pub(crate) tallies: BTreeMap<AdapterKind, Mutex<Tally>>,
    pub(crate) bounds: CallBounds,
    pub(crate) write_guard: Duration,
    pub(crate) stop_at: Instant,
    /// Resource names (the lock keys are the key prefix + these).
    pub(crate) resources: Vec<String>,
    /// The counter key of each resource, on the counter server.
    pub(crate) counters: Vec<String>,
}

impl Shared {
    /// Empty tallies for the adapters of `config`'s clients.
    pub(crate) fn tallies(config: &ChaosConfig) -> BTreeMap<AdapterKind, Mutex<Tally>> {
        config
            .clients
            .iter()
            .map(|kind| (*kind, Mutex::new(Tally::with_resources(config.resources))))
            .collect()
    }

    /// The tally of `adapter`'s clients.
    ///
    /// # Panics
    /// If no client of the run is of that adapter.
    pub(crate) fn tally(&self, adapter: AdapterKind) -> MutexGuard<'_, Tally> {
        self.tallies
            .get(&adapter)
            .unwrap_or_else(|| panic!("no {} client in the run", adapter.name()))
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of every adapter's tally.
    pub(crate) fn tally_by_adapter(&self) -> BTreeMap<AdapterKind, Tally> {
        self.tallies
            .keys()
            .map(|adapter| (*adapter, self.tally(*adapter).clone()))
            .collect()
    }
}

/// What clients did: those of one adapter, or (merged) all of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Locks obtained (by any entry).
    pub acquired: u64,
    /// Sections that wrote their counter: the number the counters must add up to.
    pub written: u64,
    /// `written`, per resource.
    pub written_per_resource: Vec<u64>,
    /// Sections that held a lock but skipped the write: too little validity left, or lost.
    pub abandoned: u64,
    /// Writes that completed only after the validity they were started under had passed (the
    /// client was slower than the write guard: scheduling, not the library; a counter mismatch
    /// with late writes may come from them).
    pub late_writes: u64,
    /// Acquisitions abandoned by dropping the `lock` future.
    pub cancelled: u64,
    /// Locks dropped unreleased (released in the background by the library).
    pub dropped: u64,
    /// Sections by entry.
    pub entries: BTreeMap<&'static str, u64>,
    /// Failed calls by `(call, error kind)`.
    pub errors: BTreeMap<(&'static str, &'static str), u64>,
    /// The nodes' answers in the last round of every failed call, by kind (`timed out`,
    /// `failed (connection)`, ...): what the faults looked like from the clients.
    pub votes: BTreeMap<String, u64>,
    /// Successful `extend` calls.
    pub extended: u64,
    /// `with_lock` sections told their lock was lost.
    pub lost: u64,
    /// Per-node outcomes of every release report: released, absent, held by another,
    /// unreachable.
    pub release_nodes: [u64; 4],
    /// How long calls took against their bounds.
    pub calls: CallTimes,
}

impl Tally {
    pub(crate) fn with_resources(resources: usize) -> Self {
        Self {
            written_per_resource: vec![0; resources],
            ..Self::default()
        }
    }

    pub(crate) fn error(&mut self, call: &'static str, err: &Error) {
        *self.errors.entry((call, error_kind(err))).or_default() += 1;
        for node in err.failure().map_or(&[][..], |f| &f.nodes[..]) {
            let vote = match node.result {
                Vote::Granted => "granted".to_owned(),
                Vote::Refused => "refused".to_owned(),
                Vote::TimedOut => "timed out".to_owned(),
                Vote::Pending => "pending".to_owned(),
                Vote::Failed(kind) => format!("failed ({kind})"),
                Vote::Ineligible { .. } => "ineligible (lost its memory)".to_owned(),
                vote => format!("{vote:?}"),
            };
            *self.votes.entry(vote).or_default() += 1;
        }
    }

    pub(crate) fn entry(&mut self, entry: Entry) {
        *self.entries.entry(entry.name()).or_default() += 1;
    }

    pub(crate) fn section_end(&mut self, resource: usize, wrote: bool) {
        if wrote {
            self.written += 1;
            self.written_per_resource[resource] += 1;
        } else {
            self.abandoned += 1;
        }
    }

    pub(crate) fn release(&mut self, report: &ReleaseReport) {
        let counts = [
            report.released(),
            report.absent(),
            report.held_by_other(),
            report.unreachable(),
        ];
        for (total, count) in self.release_nodes.iter_mut().zip(counts) {
            *total += u64::try_from(count).unwrap_or(u64::MAX);
        }
    }

    /// Adds `other`'s figures to these.
    pub fn merge(&mut self, other: &Self) {
        self.acquired += other.acquired;
        self.written += other.written;
        if self.written_per_resource.len() < other.written_per_resource.len() {
            self.written_per_resource
                .resize(other.written_per_resource.len(), 0);
        }
        for (total, n) in self
            .written_per_resource
            .iter_mut()
            .zip(&other.written_per_resource)
        {
            *total += n;
        }
        self.abandoned += other.abandoned;
        self.late_writes += other.late_writes;
        self.cancelled += other.cancelled;
        self.dropped += other.dropped;
        for (entry, n) in &other.entries {
            *self.entries.entry(entry).or_default() += n;
        }
        for (error, n) in &other.errors {
            *self.errors.entry(*error).or_default() += n;
        }
        for (vote, n) in &other.votes {
            *self.votes.entry(vote.clone()).or_default() += n;
        }
        self.extended += other.extended;
        self.lost += other.lost;
        for (total, n) in self.release_nodes.iter_mut().zip(other.release_nodes) {
            *total += n;
        }
        self.calls.merge(&other.calls);
    }

    /// Failed calls, of every kind.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The figures that tell adapters apart, on one line.
    pub fn summary(&self) -> String {
        let entries: Vec<String> = self
            .entries
            .iter()
            .map(|(entry, n)| format!("{entry} {n}"))
            .collect();
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|((call, kind), n)| format!("{call} {kind} {n}"))
            .collect();
        format!(
            "{} written of {} acquired ({} abandoned, {} late), {} cancelled, {} dropped, \
             {} extended, {} lost; entries: {}; errors {}: {}; call times: {}",
            self.written,
            self.acquired,
            self.abandoned,
            self.late_writes,
            self.cancelled,
            self.dropped,
            self.extended,
            self.lost,
            entries.join(", "),
            self.error_count(),
            errors.join(", "),
            self.calls
        )
    }

    /// Errors that must never happen in a run (bad configuration, no entropy, ...).
    pub fn unexpected_errors(&self) -> Vec<String> {
        self.errors
            .iter()
            .filter(|((_, kind), _)| !EXPECTED_ERRORS.contains(kind))
            .map(|((call, kind), n)| format!("{call}: {kind} ×{n}"))
            .collect()
    }
}

/// Error kinds faults and contention legitimately cause.
const EXPECTED_ERRORS: [&str; 4] = ["contended", "unavailable", "too slow", "lost"];

/// A short name for the kind of `err`.
pub(crate) fn error_kind(err: &Error) -> &'static str {
    match err {
        Error::Contended(_) => "contended",
        Error::Unavailable(_) => "unavailable",
        Error::TooSlow(_) => "too slow",
        Error::Lost(_) => "lost",
        Error::Config(_) => "config",
        Error::InvalidNode { .. } => "invalid node",
        Error::Entropy => "entropy",
        _ => "other",
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "sections: {} acquired, {} written {:?}, {} abandoned (validity too short or lost), \
             {} late writes, {} acquisitions cancelled, {} locks dropped unreleased",
            self.acquired,
            self.written,
            self.written_per_resource,
            self.abandoned,
            self.late_writes,
            self.cancelled,
            self.dropped
        )?;
        let entries: Vec<String> = self
            .entries
            .iter()
            .map(|(entry, n)| format!("{entry} {n}"))
            .collect();
        writeln!(f, "entries: {}", entries.join(", "))?;
        writeln!(
            f,
            "extend: {} ok; with_lock lost: {}; release per node: {} released, {} absent, \
             {} held by another, {} unreachable",
            self.extended,
            self.lost,
            self.release_nodes[0],
            self.release_nodes[1],
            self.release_nodes[2],
            self.release_nodes[3]
        )?;
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|((call, kind), n)| format!("{call} {kind} {n}"))
            .collect();
        writeln!(f, "errors: {}", errors.join(", "))?;
        let votes: Vec<String> = self
            .votes
            .iter()
            .map(|(vote, n)| format!("{vote} {n}"))
            .collect();
        writeln!(f, "node answers in failed calls: {}", votes.join(", "))?;
        write!(f, "call times: {}", self.calls)
    }
}
