//! The check of an acquisition's trace against the reference reading: what a run must satisfy
//! ([`AcquireSpec`]), what a checked run yields ([`Acquired`]), and the walk through the trace
//! ([`check_acquire`]), one helper per kind of record.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redlock_core::{
    AcquireFailure, AcquireOutcome, Attempts, Command, Config, FailureReason, Lease, LockSpec, Op,
    Reply, RequestId, RetryPolicy, Vote,
};

use crate::reference::{Batch, Decision, decide, span};
use crate::world::{Rec, Source};
use crate::{At, MAX_TIME, Outcome};

/// What a run of one acquisition must satisfy.
#[derive(Debug, Clone)]
pub(crate) struct AcquireSpec {
    nodes: usize,
    quorum: usize,
    ttl: Duration,
    span: Duration,
    node_timeout: Duration,
    min_validity: Duration,
    retry: RetryPolicy,
    start: At,
    timer_lag: Duration,
}

impl AcquireSpec {
    pub(crate) fn new(
        config: &Config,
        ttl: Duration,
        retry: RetryPolicy,
        start: At,
        timer_lag: Duration,
    ) -> Self {
        Self {
            nodes: config.nodes(),
            quorum: config.quorum(),
            ttl,
            span: span(config, ttl),
            node_timeout: config.node_timeout(ttl),
            min_validity: config.min_validity(),
            retry,
            start,
            timer_lag,
        }
    }

    fn max_pause(&self) -> Duration {
        self.retry.delay + self.retry.jitter
    }

    /// The latest an acquisition may end: every allowed round running to its deadline, with
    /// the longest pauses, and never past the overall deadline (each wake-up as late as the
    /// driver's timer).
    fn time_bound(&self) -> Duration {
        let (round, lag) = (self.node_timeout.min(self.span), self.timer_lag);
        let by_attempts = match self.retry.attempts {
            Attempts::Limited(k) => Some((round + lag) * k + (self.max_pause() + lag) * (k - 1)),
            _ => None,
        };
        let rounds = match (by_attempts, self.retry.deadline.map(|d| d + lag)) {
            (Some(a), Some(d)) => a.min(d),
            (Some(a), None) => a,
            (None, Some(d)) => d,
            (None, None) => MAX_TIME,
        };
        // The last release's answers are awaited for up to one node timeout.
        rounds + self.node_timeout + lag
    }
}

/// What a checked acquisition yields for further checks.
#[derive(Debug, Clone)]
pub(crate) struct Acquired {
    pub(crate) done: At,
    pub(crate) outcome: AcquireOutcome,
    /// Each pause the machine asked for: from a round's last release to the instant it waited
    /// for.
    pub(crate) pauses: Vec<Duration>,
    /// Each pause as it happened: from a round's last release to the next round's first send.
    pub(crate) observed: Vec<Duration>,
}

/// Where the reading of an acquisition stands.
enum Phase {
    Start,
    Collecting(Batch),
    /// A lost round's release going out, to every node but those that refused (`refused`:
    /// they hold no key of the round, and are never asked).
    CleaningUp {
        batch: u32,
        seen: Vec<bool>,
        refused: Vec<bool>,
    },
    /// After a lost round's release went out at `since`: pausing before the next round, or,
    /// after the last round, waiting for the release's answers (`release`). Either way the
    /// machine waits for one instant, `until`, once it asks.
    Pausing {
        since: At,
        until: Option<At>,
        release: Batch,
        waited_when_settled: bool,
    },
    Over,
}

/// Checks an acquisition's whole trace against the reference reading.
pub(crate) fn check_acquire(
    trace: &[Rec<AcquireOutcome>],
    x: &AcquireSpec,
    base: Instant,
) -> Outcome<Acquired> {
    let mut reading = Reading::new(x, base);
    let mut previous: Option<&Rec<AcquireOutcome>> = None;
    for rec in trace {
        match rec {
            Rec::Send { at, id, command } => {
                let same_drain = matches!(previous, Some(Rec::Send { at: p, .. }) if p == at);
                reading.send(*at, *id, command, same_drain)?;
            }
            Rec::Reply {
                at,
                id,
                reply,
                source,
            } => reading.reply(*at, *id, *reply, *source),
            Rec::Timeout { .. } => {}
            Rec::Wait { at, until } => reading.wait(*at, *until)?,
            Rec::Done { at, outcome } => reading.done(*at, outcome)?,
        }
        previous = Some(rec);
    }
    reading
        .result
        .ok_or_else(|| TestCaseError::fail("no outcome"))
}

/// The reference reading of one acquisition, taken record by record.
struct Reading<'a> {
    x: &'a AcquireSpec,
    base: Instant,
    phase: Phase,
    /// The lock's keys, as the first command carried them.
    spec: Option<LockSpec>,
    /// The token of the latest round.
    round_token: Option<Vec<u8>>,
    /// How many rounds opened.
    rounds: u32,
    /// When the first round opened: the overall deadline counts from there.
    first_t0: Option<At>,
    last_batch: u32,
    /// Why the latest round given up was lost, and its votes.
    last_loss: Option<(FailureReason, Vec<Vote>)>,
    pauses: Vec<Duration>,
    observed: Vec<Duration>,
    result: Option<Acquired>,
}

impl<'a> Reading<'a> {
    fn new(x: &'a AcquireSpec, base: Instant) -> Self {
        Self {
            x,
            base,
            phase: Phase::Start,
            spec: None,
            round_token: None,
            rounds: 0,
            first_t0: None,
            last_batch: 0,
            last_loss: None,
            pauses: Vec::new(),
            observed: Vec::new(),
            result: None,
        }
    }

    /// The overall deadline, once the first round has opened (if the policy sets one).
    fn overall(&self) -> Option<At> {
        self.first_t0.zip(self.x.retry.deadline).map(|(t, d)| t + d)
    }

    /// A request: for the lock's keys, with its round's token, and one the phase allows.
    fn send(&mut self, at: At, id: RequestId, command: &Command, same_drain: bool) -> Outcome<()> {
        self.check_keys_and_token(id, command)?;
        match command.op() {
            Op::SetIfAbsent => self.send_set(at, id, command, same_drain),
            Op::DeleteIfEquals => self.send_delete(at, id, same_drain),
            op => Err(TestCaseError::fail(format!("an acquisition sent {op:?}"))),
        }
    }

    /// Every command is for the same keys; each round has a token of its own, and its clean-up
    /// carries that round's token.
    fn check_keys_and_token(&mut self, id: RequestId, command: &Command) -> Outcome<()> {
        let spec = self.spec.get_or_insert_with(|| command.spec().clone());
        prop_assert!(
            command.spec().keys().eq(spec.keys()),
            "every command is for the same keys"
        );
        let token = command.spec().token().as_bytes().to_vec();
        let opens_round = command.op() == Op::SetIfAbsent
            && !matches!(&self.phase, Phase::Collecting(round) if round.batch == id.batch());
        if opens_round {
            prop_assert!(
                self.round_token.as_ref() != Some(&token),
                "a new round reuses the previous round's token"
            );
            self.round_token = Some(token);
        } else {
            prop_assert_eq!(
                self.round_token.as_ref(),
                Some(&token),
                "a request of a round carries its token"
            );
        }
        Ok(())
    }

    /// A `SET NX`: one more request of the round being collected (in the same drain, to a node
    /// not asked yet), or the first of a new round.
    fn send_set(
        &mut self,
        at: At,
        id: RequestId,
        command: &Command,
        same_drain: bool,
    ) -> Outcome<()> {
        let node = id.node();
        if let Phase::Collecting(round) = &mut self.phase
            && round.batch == id.batch()
        {
            prop_assert!(same_drain, "a round's requests went out in separate drains");
            prop_assert!(
                round.mark_sent(node),
                "node {node} asked twice in one round"
            );
            return Ok(());
        }
        self.open_round(at, id, command)
    }

    /// A round opens at the first poll or once a pause is over, within the attempts and the
    /// overall deadline, under a batch id above every earlier one, with the request's TTL.
    fn open_round(&mut self, at: At, id: RequestId, command: &Command) -> Outcome<()> {
        self.settle_refused(at)?;
        let x = self.x;
        match &self.phase {
            Phase::Start => prop_assert_eq!(at, x.start, "the first round opens at the first poll"),
            Phase::Pausing { since, until, .. } => {
                let (since, until) = (*since, until.unwrap_or(*since));
                self.end_pause(at, since, until)?;
            }
            _ => {
                return Err(TestCaseError::fail(format!(
                    "round opened at {at:?} before the last one was released"
                )));
            }
        }
        if let Attempts::Limited(k) = x.retry.attempts {
            prop_assert!(self.rounds < k, "round {} of at most {k}", self.rounds + 1);
        }
        if let Some(deadline) = self.overall() {
            prop_assert!(
                at < deadline,
                "a round opened at {at:?}, past the deadline {deadline:?}"
            );
        }
        prop_assert!(id.batch() > self.last_batch, "batch ids increase");
        self.last_batch = id.batch();
        self.rounds += 1;
        let first = *self.first_t0.get_or_insert(at);
        let mut deadline = (at + x.node_timeout).min(at + x.span);
        if let Some(d) = x.retry.deadline {
            deadline = deadline.min((first + d).max(at));
        }
        let ms = u64::try_from(x.ttl.as_millis()).expect("small");
        prop_assert_eq!(command.ttl_ms(), Some(ms));
        let mut round = Batch::new(id.batch(), Op::SetIfAbsent, at, deadline, x.nodes);
        round.mark_sent(id.node());
        self.phase = Phase::Collecting(round);
        Ok(())
    }

    /// A pause from `since` until `until` ends with a round opening at `at`.
    fn end_pause(&mut self, at: At, since: At, until: At) -> Outcome<()> {
        let x = self.x;
        // The round opens when the pause is over, or a little later if the driver's timer is
        // late; a pause of zero asks no wait.
        prop_assert!(
            at >= until && at <= until + x.timer_lag,
            "round opened at {at:?}, pause until {until:?}"
        );
        let pause = until - since;
        prop_assert!(
            pause >= x.retry.delay && pause <= x.max_pause(),
            "pause {pause:?} outside [{:?}, {:?}]",
            x.retry.delay,
            x.max_pause()
        );
        self.pauses.push(pause);
        self.observed.push(at - since);
        Ok(())
    }

    /// A compare-and-delete: the first of a round given up, or one more of its release (in the
    /// same drain, to a node not released yet).
    fn send_delete(&mut self, at: At, id: RequestId, same_drain: bool) -> Outcome<()> {
        let (x, node) = (self.x, id.node());
        match &mut self.phase {
            Phase::Collecting(round) => {
                let loss = give_up(round, at, x)?;
                prop_assert!(
                    id.batch() > round.batch,
                    "the release has a batch of its own"
                );
                self.last_batch = id.batch();
                let refused: Vec<bool> = loss.1.iter().map(|v| *v == Vote::Refused).collect();
                prop_assert!(!refused[node], "node {node} refused and was released");
                let mut seen = refused.clone();
                seen[node] = true;
                self.last_loss = Some(loss);
                self.phase = Phase::CleaningUp {
                    batch: id.batch(),
                    seen,
                    refused,
                };
            }
            Phase::CleaningUp { batch, seen, .. } if *batch == id.batch() => {
                prop_assert!(same_drain, "a release went out in separate drains");
                prop_assert!(
                    !std::mem::replace(&mut seen[node], true),
                    "node {node} released twice or refused"
                );
            }
            _ => {
                return Err(TestCaseError::fail(format!(
                    "a release outside a lost round at {at:?}"
                )));
            }
        }
        self.pause_once_released(at);
        Ok(())
    }

    /// Once the release has gone to every node that did not refuse, the pause begins (after the
    /// last round: the wait for the release's answers, of which the refusing nodes' count as
    /// given: nothing of the round is there).
    fn pause_once_released(&mut self, at: At) {
        let x = self.x;
        if let Phase::CleaningUp {
            batch,
            seen,
            refused,
        } = &self.phase
            && seen.iter().all(|s| *s)
        {
            let mut release =
                Batch::new(*batch, Op::DeleteIfEquals, at, at + x.node_timeout, x.nodes);
            release.sent.fill(true);
            for (answer, _) in release.answers.iter_mut().zip(refused).filter(|(_, r)| **r) {
                *answer = Some((Reply::Int(0), Source::Node { foreign: true }));
            }
            self.phase = Phase::Pausing {
                since: at,
                until: None,
                release,
                waited_when_settled: false,
            };
        }
    }

    /// A round that every node refused is given up without a release (no node holds a key of
    /// it): once its last refusal is in, the pause begins with nothing to release. Called before
    /// each record that can follow such a round: a wait, a new round, the outcome.
    fn settle_refused(&mut self, at: At) -> Outcome<()> {
        let x = self.x;
        if let Phase::Collecting(round) = &self.phase
            && round.all_sent()
            && round.votes(at).iter().all(|v| *v == Vote::Refused)
        {
            self.last_loss = Some(give_up(round, at, x)?);
            self.phase = Phase::CleaningUp {
                batch: round.batch,
                seen: vec![true; x.nodes],
                refused: vec![true; x.nodes],
            };
            self.pause_once_released(at);
        }
        Ok(())
    }

    /// A reply counts towards the round being collected or the release being awaited.
    fn reply(&mut self, at: At, id: RequestId, reply: Reply, source: Source) {
        match &mut self.phase {
            Phase::Collecting(round) => round.record(at, id, reply, source),
            Phase::Pausing { release, .. } => release.record(at, id, reply, source),
            _ => {}
        }
    }

    /// A wait: on an open round, until no later than its deadline, or after a release, for one
    /// fixed instant.
    fn wait(&mut self, at: At, until: At) -> Outcome<()> {
        self.settle_refused(at)?;
        let x = self.x;
        match &mut self.phase {
            Phase::Collecting(round) => {
                prop_assert!(round.all_sent(), "waited before asking every node");
                let votes = round.votes(at);
                prop_assert_eq!(
                    decide(&votes, x.quorum),
                    Decision::Open,
                    "waited on a decided round at {:?}: {:?}",
                    at,
                    votes
                );
                prop_assert!(until <= round.deadline, "waits past the round's deadline");
            }
            Phase::Pausing {
                since,
                until: asked,
                release,
                waited_when_settled,
            } => {
                // Whether this is a pause or the wait for the last release's answers shows in
                // what comes next; both wait for one fixed instant.
                prop_assert!(
                    asked.is_none_or(|asked| asked == until),
                    "the wait after a release changed its end"
                );
                prop_assert!(
                    until <= *since + x.max_pause().max(x.node_timeout),
                    "waits too long after a release"
                );
                *waited_when_settled |=
                    release.answers.iter().all(Option::is_some) || at >= release.deadline;
                *asked = Some(until);
            }
            _ => {
                return Err(TestCaseError::fail(format!(
                    "a Wait at {at:?} outside a round or a pause"
                )));
            }
        }
        Ok(())
    }

    /// The outcome comes within the time bound and says what the reading says it must.
    fn done(&mut self, at: At, outcome: &AcquireOutcome) -> Outcome<()> {
        if matches!(outcome, AcquireOutcome::Failed(_)) {
            self.settle_refused(at)?;
        }
        let x = self.x;
        prop_assert!(
            at - x.start <= x.time_bound(),
            "done after {:?}, bound {:?}",
            at - x.start,
            x.time_bound()
        );
        match outcome {
            AcquireOutcome::Acquired(lease) => self.check_acquired(at, lease)?,
            AcquireOutcome::Failed(failure) => self.check_failed(at, failure)?,
        }
        self.result = Some(Acquired {
            done: at,
            outcome: outcome.clone(),
            pauses: self.pauses.clone(),
            observed: self.observed.clone(),
        });
        self.phase = Phase::Over;
        Ok(())
    }

    /// A lease: won by a quorum of the current round, valid from that round's start for the
    /// span, fresh enough, and for the lock's keys with the winning round's token.
    fn check_acquired(&self, at: At, lease: &Lease) -> Outcome<()> {
        let (x, spec, rounds) = (self.x, &self.spec, self.rounds);
        let Phase::Collecting(round) = &self.phase else {
            return Err(TestCaseError::fail("acquired outside a round"));
        };
        prop_assert!(round.all_sent());
        let votes = round.votes(at);
        prop_assert_eq!(
            decide(&votes, x.quorum),
            Decision::Won,
            "acquired without a quorum: {:?}",
            votes
        );
        prop_assert_eq!(lease.votes(), &votes[..]);
        let valid_until = lease.valid_until().saturating_duration_since(self.base);
        prop_assert_eq!(
            valid_until,
            round.t0 + x.span,
            "valid_until = t0 + ttl − drift of the winning round"
        );
        prop_assert!(
            at < valid_until && valid_until - at > x.min_validity,
            "stale at {at:?}"
        );
        prop_assert_eq!(lease.attempts(), rounds);
        prop_assert_eq!(
            lease.ttl(),
            Duration::from_millis(u64::try_from(x.ttl.as_millis()).expect("small"))
        );
        prop_assert!(
            spec.as_ref()
                .is_some_and(|s| lease.spec().keys().eq(s.keys()))
        );
        prop_assert_eq!(
            Some(lease.token().as_bytes()),
            self.round_token.as_deref(),
            "the lease carries the winning round's token"
        );
        Ok(())
    }

    /// A failure: after the last round's release settled, or once the overall deadline passed
    /// during a pause, with the last lost round's reason and votes, and only with no rounds or
    /// no time left.
    fn check_failed(&self, at: At, failure: &AcquireFailure) -> Outcome<()> {
        let (x, rounds) = (self.x, self.rounds);
        let Phase::Pausing {
            since,
            until,
            release,
            waited_when_settled,
        } = &self.phase
        else {
            return Err(TestCaseError::fail(
                "failed without releasing the last round",
            ));
        };
        // Either the last release settled (every node answered, or its deadline passed), and
        // the outcome came out at once when it did ...
        let settled = release.answers.iter().all(Option::is_some) || at >= release.deadline;
        let after_release = settled && !waited_when_settled && at <= release.deadline + x.timer_lag;
        // ... or a pause ended with the overall deadline passed (the driver woke up late): no
        // round may start any more.
        let gave_up = until.is_some_and(|until| {
            let pause = until - *since;
            pause >= x.retry.delay && pause <= x.max_pause() && at >= until
        }) && self.overall().is_some_and(|d| at >= d);
        prop_assert!(
            after_release || gave_up,
            "failed at {at:?}: release from {since:?} answered {:?}, \
             waited until {until:?}",
            release.answers
        );
        let since = *since;
        let Some((reason, votes)) = &self.last_loss else {
            return Err(TestCaseError::fail("failed without a lost round"));
        };
        prop_assert_eq!(failure.reason, *reason);
        prop_assert_eq!(&failure.votes, votes);
        prop_assert_eq!(failure.attempts, rounds);
        let exhausted = matches!(x.retry.attempts, Attempts::Limited(k) if rounds >= k);
        // ... or the refusals to vote the last round heard outlast the latest instant a later
        // round could start (a tenth of each left for the nodes' clocks): too few nodes are left
        // to form a quorum by then.
        let hopeless = {
            let by_rounds = match x.retry.attempts {
                Attempts::Limited(k) => Some(since + x.max_pause() * k.saturating_sub(rounds)),
                _ => None,
            };
            let last = match (self.overall(), by_rounds) {
                (Some(d), Some(b)) => Some(d.min(b)),
                (d, b) => d.or(b),
            };
            last.is_some_and(|last| {
                let window = last.saturating_sub(since);
                let out = votes
                    .iter()
                    .filter(|vote| {
                        matches!(vote, Vote::Ineligible { for_ms, .. }
                            if Duration::from_millis(for_ms - for_ms / 10) > window)
                    })
                    .count();
                votes.len() - out < x.quorum
            })
        };
        if !exhausted && !gave_up && !hopeless {
            let deadline = self.overall();
            prop_assert!(
                deadline.is_some_and(|d| since + x.max_pause() >= d),
                "stopped at {since:?} with rounds and time left"
            );
        }
        Ok(())
    }
}

/// Why a round given up at `at` was lost, with its votes: every node was asked, and the round
/// was decided, either lost or won with no more than the minimum validity left.
fn give_up(round: &Batch, at: At, x: &AcquireSpec) -> Outcome<(FailureReason, Vec<Vote>)> {
    prop_assert!(round.all_sent(), "released before asking every node");
    let votes = round.votes(at);
    let reason = match decide(&votes, x.quorum) {
        Decision::Open => {
            return Err(TestCaseError::fail(format!(
                "gave up an open round at {at:?}: {votes:?}"
            )));
        }
        Decision::Won => {
            let left = (round.t0 + x.span).saturating_sub(at);
            prop_assert!(
                left <= x.min_validity,
                "dropped a won round with {left:?} left"
            );
            FailureReason::TooSlow
        }
        Decision::Lost(reason) => reason,
    };
    Ok((reason, votes))
}
