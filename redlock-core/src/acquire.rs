//! The acquire machine: rounds of `SET NX PX` on every node, quorum counting, validity, clean-up
//! of failed rounds, and jittered retries.
//!
//! Steps 1 to 4 of the Redlock description. Each round starts at the `now` of the poll that opens
//! it (`t0`), sends one request to every node before asking to wait, and is decided as soon as
//! the outcome is certain. A won round yields a [`Lease`] valid until `t0 + ttl − drift`; a lost
//! round releases on every node that may hold one of its keys (a request that timed out may still
//! have set its key; a node that refused a round's own token did not), then pauses
//! `delay + U[0, jitter]` and tries again, as the [`RetryPolicy`] allows.

#![cfg_attr(not(any(test, feature = "testing")), allow(unreachable_pub))]

use std::time::{Duration, Instant};

use rand_core::CryptoRng;

use crate::command::{Extras, Op};
use crate::config::Config;
use crate::error::ConfigError;
use crate::id::{Origin, RequestId};
use crate::jitter::Jitter;
use crate::lease::Lease;
use crate::output::Output;
use crate::quorum::{Decision, FailureReason};
use crate::release::Release;
use crate::reply::Reply;
use crate::request::LockRequest;
use crate::retry::{Attempts, RetryPolicy};
use crate::round::{NodeAnswer, NodeRelease, Round, Vote};
use crate::spec::LockSpec;
use crate::token::Token;
use crate::validity::Ttl;

/// Why an acquisition ended without the lock, with the last round's per-node detail.
#[derive(Debug, Clone, PartialEq)]
pub struct AcquireFailure {
    /// Why the last round was lost.
    pub reason: FailureReason,
    /// Each node's answer in the last round.
    pub votes: Vec<Vote>,
    /// How many rounds ran.
    pub attempts: u32,
}

/// How an acquisition ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AcquireOutcome {
    /// A quorum granted the lock in time.
    Acquired(Lease),
    /// No round won; every round's keys were released.
    Failed(AcquireFailure),
}

#[derive(Debug)]
enum Phase {
    /// The next poll opens a round.
    Open,
    /// A round's requests are out.
    Collecting,
    /// The round was won; the fence's commit requests are out (fenced locks only): the lock is
    /// held only with a quorum of commits, inside the validity.
    Committing,
    /// A lost round's release goes out; then pause until the instant and retry, or (after the
    /// last round) wait for the release's answers and finish.
    CleaningUp(Option<Instant>),
    /// Pausing before the next round.
    Pausing(Instant),
    /// Finished; the outcome until it is taken.
    Done(Option<AcquireOutcome>),
}

/// Acquires a lock. Inputs: [`handle_reply`](Acquire::handle_reply),
/// [`handle_timeout`](Acquire::handle_timeout). Output: [`poll_output`](Acquire::poll_output), to
/// drain after creation and after every input until it says `Wait`, `Done` or `Idle`.
#[derive(Debug)]
pub struct Acquire {
    /// The current round's keys and token.
    spec: LockSpec,
    /// The generated token that each round's token derives from; `None` for a caller's token.
    base_token: Option<Token>,
    ttl: Ttl,
    quorum: usize,
    node_timeout: Duration,
    min_validity: Duration,
    retry: RetryPolicy,
    jitter: Jitter,
    /// Whether a wake-up already shortened the current pause (one per pause: a release is
    /// announced by every node, and each announcement must not draw a new, earlier instant).
    woken: bool,
    /// Whether the current round was started early by a wake-up.
    round_woken: bool,
    /// Whether a wake-up came while the current round was out: the release it announces may
    /// have reached a node after the round's request did, so a lost round's pause ends soon,
    /// as if that wake-up had come during it.
    heard: bool,
    /// How many rounds started by a wake-up were lost: each doubles the window the next
    /// wake-up draws from, so that the more waiters collide, the further apart they start.
    contention: u32,
    /// Set when the first round opens.
    deadline: Option<Instant>,
    attempts: u32,
    batches: u32,
    round: Round<Vote>,
    /// The fence commit of a won round (fenced locks); made by the first commit, and kept for
    /// the next.
    commit: Option<Round<Vote>>,
    /// The fence being committed.
    fence: Option<u64>,
    /// The release of a lost round's keys; made by the first lost round, and kept for the next
    /// (an acquisition won at once never makes one).
    cleanup: Option<Round<NodeRelease>>,
    last_failure: Option<AcquireFailure>,
    phase: Phase,
}

impl Acquire {
    /// Checks `request` against `config` and prepares the acquisition; nothing is sent until the
    /// first [`poll_output`](Acquire::poll_output). `rng` makes the token (unless the request
    /// brings one) and seeds the retry jitter.
    pub fn new<R: CryptoRng + ?Sized>(
        now: Instant,
        config: &Config,
        request: &LockRequest,
        rng: &mut R,
    ) -> Result<Self, ConfigError> {
        let ttl = Ttl::for_config(now, config, request.ttl)?;
        let mut retry = request.retry.unwrap_or(*config.retry());
        if let Some(deadline) = request.deadline {
            retry.deadline = Some(deadline);
        }
        retry.check()?;
        let (token, base_token) = match &request.token {
            Some(bytes) => (Token::new(bytes.clone())?, None),
            None => {
                let token = Token::generate(rng);
                (token.clone(), Some(token))
            }
        };
        let spec = LockSpec::new(config.key_prefix(), &request.resources, token)?;
        let mut round = Round::new(0, Op::SetIfAbsent, ttl.ms, config, now, now);
        round.set_extras(Extras {
            max_ttl_ms: config.max_ttl_ms(),
            fenced: request.fenced,
            ..Extras::default()
        });
        Ok(Self {
            spec,
            base_token,
            ttl,
            quorum: config.quorum(),
            node_timeout: config.node_timeout(ttl.duration()),
            min_validity: config.min_validity(),
            retry,
            jitter: Jitter::new(rng),
            woken: false,
            round_woken: false,
            heard: false,
            contention: 0,
            deadline: None,
            attempts: 0,
            batches: 0,
            round,
            commit: None,
            fence: None,
            cleanup: None,
            last_failure: None,
            phase: Phase::Open,
        })
    }

    /// The keys and token being acquired.
    pub fn spec(&self) -> &LockSpec {
        &self.spec
    }

    /// Rounds started so far.
    #[cfg(any(test, feature = "testing"))]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Names the lock and operation its requests belong to (set by the lifecycle before the
    /// first poll).
    pub(crate) fn set_origin(&mut self, origin: Origin) {
        // The commit and cleanup rounds, made later, take it from the round.
        self.round.set_origin(origin);
        if let Some(commit) = &mut self.commit {
            commit.set_origin(origin);
        }
        if let Some(cleanup) = &mut self.cleanup {
            cleanup.set_origin(origin);
        }
    }

    /// Whether the machine's current wait is the pause between rounds (rather than replies).
    pub(crate) fn is_pausing(&self) -> bool {
        matches!(self.phase, Phase::Pausing(_) | Phase::CleaningUp(Some(_)))
    }

    /// Ends the pause before the next round soon (a push notification said the lock may be
    /// free): at `now + U[0, wake_jitter]` ([`RetryPolicy::wake_jitter`]) if that is earlier, so
    /// that waiters woken by one release do not all collide in the same instant. Only the first
    /// wake-up of a pause counts. A wake-up while a round is out is kept: if that round is lost,
    /// its pause ends as if woken when it was lost (the release may have reached a node after
    /// the round's `SET NX`; without this the waiter would sleep out its pause on a free lock).
    /// Harmless in any other phase; the deadline and the attempt limit still hold (a round
    /// started early is a round).
    pub fn handle_wake(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Collecting | Phase::Committing) {
            self.heard = true;
            return;
        }
        if self.woken {
            return;
        }
        let window = self.wake_window();
        if let Phase::Pausing(at) | Phase::CleaningUp(Some(at)) = &mut self.phase {
            let soon = now.checked_add(self.jitter.within(window)).unwrap_or(now);
            *at = (*at).min(soon);
            self.woken = true;
        }
    }

    /// This client released the keys this acquisition waits for and hands them to it: if it
    /// pauses between rounds, its next round starts now, with no jitter (it queues behind the
    /// release on every node, so no other waiter of the client runs into it), counted as a
    /// woken round. Whether it did: `false` while a round is out, or in any other phase, and
    /// nothing changes then. The retry policy's attempts and deadline still hold.
    pub fn handle_handover(&mut self, now: Instant) -> bool {
        let (Phase::Pausing(at) | Phase::CleaningUp(Some(at))) = &mut self.phase else {
            return false;
        };
        *at = (*at).min(now);
        self.woken = true;
        true
    }

    /// The span a wake-up draws its start from: [`RetryPolicy::wake_jitter`], doubled for each
    /// round a wake-up started and lost (waiters colliding: spread them further), never longer
    /// than the pause itself could be.
    fn wake_window(&self) -> Duration {
        let doubled = self
            .retry
            .wake_jitter
            .saturating_mul(1_u32 << self.contention.min(16));
        let longest = self.retry.delay.saturating_add(self.retry.jitter);
        doubled.min(longest.max(self.retry.wake_jitter))
    }

    /// Hands in the reply to request `id`. Replies from an earlier round, duplicates, replies at
    /// or after their deadline and unknown ids are ignored.
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        match self.phase {
            Phase::Collecting => {
                self.round.record(now, id, reply);
            }
            Phase::Committing => {
                if let Some(commit) = &mut self.commit {
                    commit.record(now, id, reply);
                }
            }
            Phase::CleaningUp(None) => {
                if let Some(cleanup) = &mut self.cleanup {
                    cleanup.record(now, id, reply);
                }
            }
            _ => {}
        }
    }

    /// Lets deadlines pass: call when the instant of the last `Wait` has come. Harmless at any
    /// other time.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::Collecting => self.round.expire(now),
            Phase::Committing => {
                if let Some(commit) = &mut self.commit {
                    commit.expire(now);
                }
            }
            Phase::CleaningUp(None) => {
                if let Some(cleanup) = &mut self.cleanup {
                    cleanup.expire(now);
                }
            }
            _ => {}
        }
    }

    /// The next thing to do. See [`Output`].
    pub fn poll_output(&mut self, now: Instant) -> Output<AcquireOutcome> {
        loop {
            match &mut self.phase {
                Phase::Open => self.open_round(now),
                Phase::Collecting => {
                    if let Some(transmit) = self.round.next_transmit(&self.spec) {
                        return Output::Send(transmit);
                    }
                    self.round.expire(now);
                    match self.round.tally().decide(self.quorum) {
                        Decision::Open => return Output::Wait(self.round.deadline),
                        Decision::Won if self.round_is_fenced() => self.start_commit(now),
                        Decision::Won => self.won(now, None),
                        Decision::Lost(reason) => self.lose_round(now, reason),
                    }
                }
                Phase::Committing => {
                    let commit = made(&mut self.commit, &self.round, Op::CommitFence);
                    if let Some(transmit) = commit.next_transmit(&self.spec) {
                        return Output::Send(transmit);
                    }
                    commit.expire(now);
                    match commit.tally().decide(self.quorum) {
                        Decision::Open => return Output::Wait(commit.deadline),
                        Decision::Won => self.won(now, self.fence),
                        Decision::Lost(reason) => self.lose_round(now, reason),
                    }
                }
                Phase::CleaningUp(retry_at) => {
                    let cleanup = made(&mut self.cleanup, &self.round, Op::DeleteIfEquals);
                    if let Some(transmit) = cleanup.next_transmit(&self.spec) {
                        return Output::Send(transmit);
                    }
                    if let Some(at) = *retry_at {
                        self.phase = Phase::Pausing(at);
                        continue;
                    }
                    cleanup.expire(now);
                    if cleanup.has_pending() {
                        return Output::Wait(cleanup.deadline);
                    }
                    self.phase = Phase::Done(self.last_failure.take().map(AcquireOutcome::Failed));
                }
                Phase::Pausing(at) => {
                    if now < *at {
                        return Output::Wait(*at);
                    }
                    // The pause ended before the deadline, but a driver that wakes up late may
                    // poll after it: no round starts past the deadline.
                    if self.deadline.is_some_and(|deadline| now >= deadline) {
                        self.phase =
                            Phase::Done(self.last_failure.take().map(AcquireOutcome::Failed));
                        continue;
                    }
                    self.phase = Phase::Open;
                }
                Phase::Done(outcome) => {
                    return outcome.take().map_or(Output::Idle, Output::Done);
                }
            }
        }
    }

    /// Gives up: a release of everything this acquisition may have set, to run in place of it
    /// (for a cancelled `lock()`). `None` when no request was ever sent, or the lock was
    /// acquired and handed out (release the [`Lease`] instead).
    pub fn abandon(&self, now: Instant, config: &Config) -> Option<Release> {
        let sent_something = self.attempts > 0;
        let handed_out = matches!(self.phase, Phase::Done(None));
        (sent_something && !handed_out)
            .then(|| Release::for_spec(now, config, self.spec.clone(), self.ttl.duration()))
    }

    /// Whether this acquisition drew its own token (one per round), rather than taking the
    /// caller's: a node that refused one of its rounds holds another token's key, never this
    /// round's.
    pub(crate) fn draws_its_tokens(&self) -> bool {
        self.base_token.is_some()
    }

    fn round_is_fenced(&self) -> bool {
        self.round.fences.iter().any(Option::is_some)
    }

    /// A quorum granted (and, for a fenced lock, committed the fence): held, if enough validity
    /// is left; otherwise the round is lost as too slow.
    fn won(&mut self, now: Instant, fence: Option<u64>) {
        match self.ttl.grant(self.round.started, now, self.min_validity) {
            Some(valid_until) => {
                self.phase = Phase::Done(Some(AcquireOutcome::Acquired(Lease {
                    spec: self.spec.clone(),
                    ttl: self.ttl.duration(),
                    valid_until,
                    votes: self.round.answers.to_vec(),
                    attempts: self.attempts,
                    fence,
                })));
            }
            None => self.lose_round(now, FailureReason::TooSlow),
        }
    }

    /// The fenced round was won: the fence is one more than the largest counter (or clock) any
    /// granting node reported, committed on those nodes before the validity ends.
    ///
    /// # Implementation note
    /// Any later holder's granting quorum intersects this commit quorum; on a node of the
    /// intersection the commit ran while our key was there, hence before that holder's grant,
    /// so that holder reads a counter of at least our fence and takes a larger one.
    fn start_commit(&mut self, now: Instant) {
        let fence = self
            .round
            .answers
            .iter()
            .zip(&self.round.fences)
            .filter(|(vote, _)| **vote == Vote::Granted)
            .filter_map(|(_, seen)| *seen)
            .max()
            .unwrap_or(0)
            .saturating_add(1);
        self.fence = Some(fence);
        self.batches += 1;
        let mut reply_by = self.ttl.valid_until(self.round.started);
        if let Some(by) = now.checked_add(self.node_timeout) {
            reply_by = reply_by.min(by);
        }
        if let Some(deadline) = self.deadline {
            reply_by = reply_by.min(deadline.max(now));
        }
        let granted: Vec<bool> = self
            .round
            .answers
            .iter()
            .map(|vote| *vote == Vote::Granted)
            .collect();
        let commit = made(&mut self.commit, &self.round, Op::CommitFence);
        commit.restart(self.batches, Op::CommitFence, now, reply_by);
        commit.set_extras(Extras {
            fence: Some(fence),
            ..Extras::default()
        });
        commit.ask_only(&granted, Vote::Refused);
        self.phase = Phase::Committing;
    }

    fn open_round(&mut self, now: Instant) {
        self.attempts += 1;
        self.batches += 1;
        self.round_woken = self.woken;
        self.heard = false;
        if let (Some(base), true) = (&self.base_token, self.attempts > 1) {
            self.spec = self.spec.with_token(base.for_round(self.attempts));
        }
        if self.attempts == 1 {
            self.deadline = self
                .retry
                .deadline
                .map(|d| now.checked_add(d).unwrap_or(now));
        }
        // Never wait for an answer past the validity it would grant, nor past the deadline.
        let mut reply_by = self.ttl.valid_until(now);
        if let Some(by) = now.checked_add(self.node_timeout) {
            reply_by = reply_by.min(by);
        }
        if let Some(deadline) = self.deadline {
            reply_by = reply_by.min(deadline.max(now));
        }
        self.round
            .restart(self.batches, Op::SetIfAbsent, now, reply_by);
        self.phase = Phase::Collecting;
    }

    /// The latest instant a later round could start: the deadline, and with a limited number of
    /// rounds, the longest pauses of the rounds left (`None`: unbounded).
    fn last_start(&self, now: Instant) -> Option<Instant> {
        let by_rounds = match self.retry.attempts {
            Attempts::Limited(max) => {
                let left = max.saturating_sub(self.attempts);
                let longest = self.retry.delay.saturating_add(self.retry.jitter);
                Some(now.checked_add(longest.saturating_mul(left)).unwrap_or(now))
            }
            Attempts::Unlimited => None,
        };
        match (self.deadline, by_rounds) {
            (Some(deadline), Some(by)) => Some(deadline.min(by)),
            (deadline, by) => deadline.or(by),
        }
    }

    /// Whether a quorum could still form in a later round: enough nodes did not refuse to vote
    /// for longer than [`last_start`](Self::last_start) is away. A refusal's time is the
    /// node's; a tenth of it is left for the nodes' clocks running faster than ours.
    fn quorum_may_form(&self, now: Instant) -> bool {
        let Some(last) = self.last_start(now) else {
            return true;
        };
        let window = last.saturating_duration_since(now);
        let sitting_out = self
            .round
            .answers
            .iter()
            .filter(|vote| match vote {
                Vote::Ineligible { for_ms, .. } => {
                    let sure = Duration::from_millis(for_ms - for_ms / 10);
                    sure > window
                }
                _ => false,
            })
            .count();
        self.round.answers.len().saturating_sub(sitting_out) >= self.quorum
    }

    /// Records a lost round, queues its release on every node that may hold one of its keys,
    /// and schedules the next round if the policy allows one that can start before the
    /// deadline, and a quorum could still form by then.
    fn lose_round(&mut self, now: Instant, reason: FailureReason) {
        self.last_failure = Some(AcquireFailure {
            reason,
            votes: self.round.answers.to_vec(),
            attempts: self.attempts,
        });
        let retry_at = if self.retry.allows(self.attempts + 1) {
            let at = now.checked_add(self.jitter.pause(&self.retry));
            at.filter(|at| self.deadline.is_none_or(|deadline| *at < deadline))
        } else {
            None
        };
        // Nodes that refused to vote for longer than any later round could wait: when too few
        // are left to form a quorum, no retry can win, and the caller hears it now.
        let retry_at = retry_at.filter(|_| self.quorum_may_form(now));
        self.batches += 1;
        // Before a retry the release's answers are not awaited (the next round's requests follow
        // it on each node). After the last round they are, for up to one node timeout (which may
        // run past the overall deadline), so that a failed acquisition returns with its keys gone
        // from every node that answers.
        let settle_by = match retry_at {
            Some(_) => now,
            None => now.checked_add(self.node_timeout).unwrap_or(now),
        };
        // A round a release notice started, lost: other waiters heard the same notice, so the
        // keys it frees are announced (if every waiter that took some nodes kept quiet, a split
        // vote would leave all of them sleeping out their pauses on a free lock). A round the
        // timer started frees keys quietly: waiters fighting over a minority of nodes while the
        // holder keeps the majority would otherwise wake each other in a loop. The loop that
        // announcing can start is damped by the doubling wake window.
        if self.round_woken {
            self.contention = self.contention.saturating_add(1);
        }
        let cleanup = made(&mut self.cleanup, &self.round, Op::DeleteIfEquals);
        cleanup.set_extras(Extras {
            notify: self.round_woken,
            ..Extras::default()
        });
        cleanup.restart(self.batches, Op::DeleteIfEquals, now, settle_by);
        // A node that refused (its `SET NX` set nothing: the keys were held) holds no key of
        // this round's token, so its release would delete nothing and, announced, wake every
        // waiter for a lock that is no freer. Every other answer is released: a grant, a
        // failure, a timeout, and a sit-out (a vouched reply voided by a push may have set the
        // key). Only where each round has a token of its own: a caller's token is every round's,
        // and a refusal may be an earlier round's key under it, whose release failed.
        //
        // The others (no answer yet — a round is lost as soon as a quorum cannot form — a
        // failure, a timeout, a sit-out, a refusal of a caller's token) mostly set nothing.
        // The release script announces only what it deleted, so it is told to announce as on
        // any node; the native form (`DELIFEQ` then `PUBLISH`) would announce unconditionally
        // and wake every waiter for a lock that is no freer, so it announces nothing there
        // (`Extras::unheard`). A split vote whose grants were all still unheard at every waiter
        // is then announced by no native release: those waiters fall back to their pauses.
        let own_tokens = self.base_token.is_some();
        for (node, vote) in self.round.answers.iter().enumerate() {
            match vote {
                Vote::Granted => {}
                Vote::Refused if own_tokens => cleanup.leave_out(node, NodeRelease::Absent),
                _ => cleanup.mark_unheard(node),
            }
        }
        self.phase = Phase::CleaningUp(retry_at);
        self.woken = false;
        if std::mem::take(&mut self.heard) {
            self.handle_wake(now);
        }
    }
}

crate::machine::impl_machine!(Acquire, AcquireOutcome);

/// The round in `slot`, made beside `round` (its nodes, lock and TTL) for `op` the first time.
fn made<'a, B: NodeAnswer>(
    slot: &'a mut Option<Round<B>>,
    round: &Round<Vote>,
    op: Op,
) -> &'a mut Round<B> {
    slot.get_or_insert_with(|| round.sibling(op))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{FakeNode, Link, drive, rng};

    const TTL: Duration = Duration::from_secs(10);

    fn setup(policy: RetryPolicy) -> (Config, Vec<FakeNode>, Instant) {
        let config = Config::builder(5).retry(policy).build().expect("valid");
        (
            config,
            vec![FakeNode::default(); 5],
            crate::testing::epoch(),
        )
    }

    fn acquire(config: &Config, request: &LockRequest, now: Instant) -> Acquire {
        Acquire::new(now, config, request, &mut rng(1)).expect("valid request")
    }

    #[test]
    fn all_nodes_up_grants_with_validity_from_the_round_start() {
        let (config, mut nodes, t0) = setup(RetryPolicy::default());
        let mut machine = acquire(&config, &LockRequest::new("r", TTL), t0);
        let (outcome, took, sent) = drive(&mut machine, &mut nodes, &[Link::Up; 5], t0);
        let AcquireOutcome::Acquired(lease) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(lease.valid_until(), t0 + TTL - Duration::from_millis(102));
        assert_eq!(lease.votes(), [Vote::Granted; 5]);
        assert_eq!((lease.attempts(), took, sent.len()), (1, Duration::ZERO, 5));
        assert!(nodes.iter().all(|n| n.keys.contains_key(&b"r"[..])));
        assert!(matches!(machine.poll_output(t0), Output::Idle));
    }

    #[test]
    fn a_quorum_decides_without_waiting_for_stragglers() {
        let (config, mut nodes, t0) = setup(RetryPolicy::default());
        let mut machine = acquire(&config, &LockRequest::new("r", TTL), t0);
        let links = [Link::Silent, Link::Up, Link::Silent, Link::Up, Link::Up];
        let (outcome, took, _) = drive(&mut machine, &mut nodes, &links, t0);
        let AcquireOutcome::Acquired(lease) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(took, Duration::ZERO);
        assert_eq!(lease.votes()[0], Vote::Pending);
    }

    #[test]
    fn a_caller_token_refused_by_its_own_leftover_key_is_released_there() {
        // Node 4 still holds the caller's token from an earlier round whose release failed:
        // its `SET NX` refuses the round, and the round's release (same token) removes it.
        let policy = RetryPolicy::once();
        let (config, mut nodes, t0) = setup(policy);
        for node in &mut nodes[..3] {
            node.put(b"r".to_vec(), b"someone-else".to_vec());
        }
        nodes[4].put(b"r".to_vec(), b"mine".to_vec());
        let mut machine = acquire(&config, &LockRequest::new("r", TTL).token("mine"), t0);
        let (outcome, _, sent) = drive(&mut machine, &mut nodes, &[Link::Up; 5], t0);
        assert!(matches!(outcome, AcquireOutcome::Failed(_)), "{outcome:?}");
        let released: Vec<usize> = sent
            .iter()
            .filter(|(_, c)| c.op() == Op::DeleteIfEquals)
            .map(|(id, _)| id.node())
            .collect();
        assert_eq!(
            released,
            [0, 1, 2, 3, 4],
            "a caller's token is released everywhere"
        );
        assert_eq!(nodes[4].token(b"r"), None, "the leftover key is gone");
        assert_eq!(nodes[3].token(b"r"), None, "the round's own key is gone");
        assert!(
            nodes[..3]
                .iter()
                .all(|n| n.token(b"r") == Some(&b"someone-else"[..]))
        );
    }

    #[test]
    fn a_contended_lock_retries_then_fails_releasing_every_round() {
        let policy = RetryPolicy::default().attempts(3);
        let (config, mut nodes, t0) = setup(policy);
        for node in &mut nodes[..3] {
            node.put(b"r".to_vec(), b"someone-else".to_vec());
        }
        let mut machine = acquire(&config, &LockRequest::new("r", TTL), t0);
        let (outcome, took, sent) = drive(&mut machine, &mut nodes, &[Link::Up; 5], t0);
        let AcquireOutcome::Failed(failure) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(
            (failure.reason, failure.attempts),
            (FailureReason::Contended, 3)
        );
        // 3 rounds × (5 sets + 2 releases), releases right after each lost round, on the two
        // nodes that granted: the three that refused hold no key of ours.
        let ops: Vec<(usize, Op)> = sent.iter().map(|(id, c)| (id.node(), c.op())).collect();
        for round in ops.chunks(7) {
            let sets: Vec<(usize, Op)> = (0..5).map(|node| (node, Op::SetIfAbsent)).collect();
            assert_eq!(&round[..5], sets);
            assert_eq!(
                &round[5..],
                [(3, Op::DeleteIfEquals), (4, Op::DeleteIfEquals)]
            );
        }
        assert_eq!(ops.len(), 21);
        // Two pauses of 200..=300 ms; none after the last round.
        assert!(
            took >= Duration::from_millis(400) && took <= Duration::from_millis(600),
            "{took:?}"
        );
        // The other holder's keys survive; ours are gone.
        assert!(
            nodes[..3]
                .iter()
                .all(|n| n.token(b"r") == Some(&b"someone-else"[..]))
        );
        assert!(nodes[3..].iter().all(|n| n.keys.is_empty()));
    }

    #[test]
    fn too_few_answers_is_unavailable_after_the_node_timeout() {
        let (config, mut nodes, t0) = setup(RetryPolicy::once());
        let mut machine = acquire(&config, &LockRequest::new("r", TTL), t0);
        let links = [
            Link::Silent,
            Link::Refused,
            Link::Silent,
            Link::Up,
            Link::Up,
        ];
        let (outcome, took, sent) = drive(&mut machine, &mut nodes, &links, t0);
        let AcquireOutcome::Failed(failure) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(failure.reason, FailureReason::Unavailable);
        // One node timeout for the round, one for the silent nodes' part of the clean-up.
        assert_eq!(took, config.node_timeout(TTL) * 2);
        assert_eq!(
            sent.iter()
                .filter(|(_, c)| c.op() == Op::DeleteIfEquals)
                .count(),
            5
        );
        assert!(
            nodes.iter().all(|n| n.keys.is_empty()),
            "granted keys were released"
        );
    }

    #[test]
    fn a_lost_reply_still_gets_the_release() {
        let (config, mut nodes, t0) = setup(RetryPolicy::once());
        let mut machine = acquire(&config, &LockRequest::new("r", TTL), t0);
        let links = [
            Link::LostReply,
            Link::LostReply,
            Link::LostReply,
            Link::Up,
            Link::Up,
        ];
        let (outcome, ..) = drive(&mut machine, &mut nodes, &links, t0);
        assert!(matches!(outcome, AcquireOutcome::Failed(_)));
        assert!(nodes.iter().all(|n| n.keys.is_empty()), "{nodes:?}");
    }

    #[test]
    fn the_overall_deadline_bounds_unlimited_retries() {
        let policy = RetryPolicy::default()
            .unlimited()
            .deadline(Duration::from_secs(2));
        let (config, mut nodes, t0) = setup(policy);
        for node in &mut nodes {
            node.put(b"r".to_vec(), b"other".to_vec());
        }
        let mut machine = acquire(&config, &LockRequest::new("r", TTL), t0);
        let (outcome, took, _) = drive(&mut machine, &mut nodes, &[Link::Up; 5], t0);
        let AcquireOutcome::Failed(failure) = outcome else {
            panic!("{outcome:?}")
        };
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert!(failure.attempts >= 6, "{failure:?}");
    }

    #[test]
    fn a_quorum_too_late_for_the_minimum_validity_is_too_slow() {
        let config = Config::builder(3)
            .min_validity(Duration::from_millis(50))
            .node_timeout(Duration::from_millis(80))
            .retry(RetryPolicy::once())
            .build()
            .expect("valid");
        let t0 = crate::testing::epoch();
        let mut machine = acquire(
            &config,
            &LockRequest::new("r", Duration::from_millis(100)),
            t0,
        );
        let ids: Vec<RequestId> = (0..3)
            .map(|_| match machine.poll_output(t0) {
                Output::Send(t) => t.id,
                other => panic!("{other:?}"),
            })
            .collect();
        let late = t0 + Duration::from_millis(60);
        for id in ids {
            machine.handle_reply(late, id, Reply::Ok);
        }
        let mut releases = 0;
        let outcome = loop {
            match machine.poll_output(late) {
                Output::Send(t) if t.command.op() == Op::DeleteIfEquals => {
                    releases += 1;
                    machine.handle_reply(late, t.id, Reply::Int(1));
                }
                Output::Done(outcome) => break outcome,
                other => panic!("{other:?}"),
            }
        };
        let AcquireOutcome::Failed(failure) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!((failure.reason, releases), (FailureReason::TooSlow, 3));
    }

    #[test]
    fn multi_resource_locks_are_all_or_nothing() {
        let (config, mut nodes, t0) = setup(RetryPolicy::once());
        for node in &mut nodes {
            node.put(b"b".to_vec(), b"other".to_vec());
        }
        let request = LockRequest::new("a", TTL).resource("b");
        let mut machine = acquire(&config, &request, t0);
        let (outcome, ..) = drive(&mut machine, &mut nodes, &[Link::Up; 5], t0);
        assert!(matches!(
            outcome,
            AcquireOutcome::Failed(AcquireFailure {
                reason: FailureReason::Contended,
                ..
            })
        ));
        assert!(nodes.iter().all(|n| !n.keys.contains_key(&b"a"[..])));
    }

    #[test]
    fn bad_requests_are_errors() {
        let (config, _, t0) = setup(RetryPolicy::default());
        let mut rng = rng(0);
        let bad = [
            LockRequest::new("r", Duration::ZERO),
            LockRequest::new("r", Duration::MAX),
            LockRequest::new("r", Duration::from_millis(2)),
            LockRequest::new("", TTL),
            LockRequest::new("r", TTL).resource("r"),
            LockRequest::new("r", TTL).token(Vec::new()),
            LockRequest::new("r", TTL).retry(RetryPolicy::default().attempts(0)),
            LockRequest::new("r", TTL).deadline(Duration::ZERO),
        ];
        for request in bad {
            assert!(
                Acquire::new(t0, &config, &request, &mut rng).is_err(),
                "{request:?}"
            );
        }
    }

    #[test]
    fn abandoning_releases_what_was_sent() {
        let (config, _, t0) = setup(RetryPolicy::default());
        let mut machine = acquire(&config, &LockRequest::new("r", TTL), t0);
        assert!(machine.abandon(t0, &config).is_none(), "nothing sent yet");
        assert!(matches!(machine.poll_output(t0), Output::Send(_)));
        let mut release = machine.abandon(t0, &config).expect("a request went out");
        let sends = std::iter::from_fn(|| match release.poll_output(t0) {
            Output::Send(t) => Some(t),
            _ => None,
        });
        assert_eq!(
            sends
                .filter(|t| t.command.op() == Op::DeleteIfEquals)
                .count(),
            5
        );
    }

    #[test]
    fn a_caller_token_is_used_as_given() {
        let (config, mut nodes, t0) = setup(RetryPolicy::default());
        let mut machine = acquire(&config, &LockRequest::new("r", TTL).token("mine"), t0);
        let (outcome, ..) = drive(&mut machine, &mut nodes, &[Link::Up; 5], t0);
        let AcquireOutcome::Acquired(lease) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(lease.token().as_bytes(), b"mine");
        assert_eq!(nodes[0].token(b"r"), Some(&b"mine"[..]));
    }
}

#[cfg(test)]
mod round_tokens {
    use super::*;
    use crate::testing::{FakeNode, Link, drive, rng};

    #[test]
    fn each_round_has_its_own_token_so_a_late_release_cannot_hit_a_later_round() {
        let policy = RetryPolicy::default().attempts(3);
        let config = Config::builder(3).retry(policy).build().expect("valid");
        let mut nodes = vec![FakeNode::default(); 3];
        for node in &mut nodes {
            node.put(b"r".to_vec(), b"other".to_vec());
        }
        let t0 = crate::testing::epoch();
        let request = LockRequest::new("r", Duration::from_secs(10));
        let mut machine = Acquire::new(t0, &config, &request, &mut rng(5)).expect("valid");
        let (_, _, sent) = drive(&mut machine, &mut nodes, &[Link::Up; 3], t0);
        let mut tokens: Vec<Vec<u8>> = sent
            .iter()
            .filter(|(_, c)| c.op() == Op::SetIfAbsent)
            .map(|(_, c)| c.spec().token().as_bytes().to_vec())
            .collect();
        tokens.dedup();
        assert_eq!(tokens.len(), 3, "one token per round");
        assert!(tokens[1].starts_with(&tokens[0]) && tokens[1].ends_with(b".2"));
        // Each round's clean-up carries that round's token.
        for (_, cmd) in sent.iter().filter(|(_, c)| c.op() == Op::DeleteIfEquals) {
            assert!(tokens.contains(&cmd.spec().token().as_bytes().to_vec()));
        }
    }
}
