//! Unit tests of the multiplexer, stepping virtual time over in-memory nodes.

use super::*;
use crate::command::Op;
use crate::renewal::LossCause;
use crate::retry::RetryPolicy;
use crate::testing::{FakeNode, epoch, rng};

const TTL: Duration = Duration::from_secs(10);

/// A multiplexer over in-memory nodes; requests wait "on the wire" until delivered.
struct World {
    mux: Multiplexer<chacha20::ChaCha8Rng>,
    nodes: Vec<FakeNode>,
    now: Instant,
    /// Requests sent and not answered yet, in order.
    wire: Vec<Transmit>,
    batches: Vec<Batch>,
}

impl World {
    fn new(nodes: usize) -> Self {
        Self::with(Config::builder(nodes).build().expect("valid"), nodes)
    }

    fn with(config: Config, nodes: usize) -> Self {
        Self {
            mux: Multiplexer::new(config, rng(3)),
            nodes: vec![FakeNode::default(); nodes],
            now: epoch(),
            wire: Vec::new(),
            batches: Vec::new(),
        }
    }

    /// Puts every batch there is on the wire.
    fn send(&mut self) {
        while let Some(batch) = self.mux.poll_transmit() {
            self.wire.extend(batch.transmits.iter().cloned());
            self.batches.push(batch);
        }
    }

    /// Delivers the requests on the wire that `deliver` picks: runs them on their node and
    /// hands the replies in.
    fn answer(&mut self, deliver: impl Fn(&Transmit) -> bool) {
        let wire = std::mem::take(&mut self.wire);
        for transmit in wire {
            if deliver(&transmit) {
                let reply = self.nodes[transmit.id.node()].run(Duration::ZERO, &transmit.command);
                self.mux.handle_reply(self.now, transmit.id, reply);
            } else {
                self.wire.push(transmit);
            }
        }
    }

    /// Sends and answers everything until nothing is left to send.
    fn settle(&mut self) {
        loop {
            self.send();
            if self.wire.is_empty() {
                return;
            }
            self.answer(|_| true);
        }
    }

    fn events(&mut self) -> Vec<(LockId, LockEvent)> {
        std::iter::from_fn(|| self.mux.poll_event()).collect()
    }

    /// Jumps to the next timeout and lets it pass.
    fn tick(&mut self) -> Timeout {
        let timeout = self.mux.poll_timeout().expect("something scheduled");
        assert_eq!(self.mux.next_timeout_at(), Some(timeout.at));
        self.now = self.now.max(timeout.at);
        self.mux.handle_timeout(self.now);
        timeout
    }
}

/// Retries that pause 3 s between rounds, without jitter: a waiter stays paused until told.
fn paused() -> RetryPolicy {
    RetryPolicy::default()
        .delay(Duration::from_secs(3))
        .jitter(Duration::ZERO)
}

fn count(events: &[(LockId, LockEvent)], f: impl Fn(&LockEvent) -> bool) -> usize {
    events.iter().filter(|(_, e)| f(e)).count()
}

fn is_acquired(e: &LockEvent) -> bool {
    matches!(e, LockEvent::Acquired(_))
}

#[test]
fn locks_share_one_batch_per_node_and_each_is_acquired() {
    let mut w = World::new(5);
    for (id, resource) in [(1, "a"), (2, "b"), (3, "c")] {
        w.mux
            .start(
                w.now,
                LockId::new(id),
                Start::Acquire,
                &LockRequest::new(resource, TTL),
            )
            .expect("valid");
    }
    w.send();
    assert_eq!(w.batches.len(), 5, "one write per node");
    assert!(w.batches.iter().all(|b| b.transmits.len() == 3));
    w.answer(|_| true);
    let events = w.events();
    assert_eq!(count(&events, is_acquired), 3);
    assert!(w.nodes.iter().all(|n| n.token(b"a").is_some()));
}

#[test]
fn a_lock_has_one_request_per_node_in_flight_and_the_next_goes_out_on_its_reply() {
    let mut w = World::new(3);
    let (a, b) = (LockId::new(1), LockId::new(2));
    w.mux
        .start(w.now, a, Start::Acquire, &LockRequest::new("a", TTL))
        .expect("valid");
    w.send();
    // Nodes 0 and 1 answer; node 2's SET is still on the wire when the lock is released.
    w.answer(|t| t.id.node() != 2);
    assert_eq!(count(&w.events(), is_acquired), 1);
    w.mux.release(w.now, a);
    w.mux
        .start(w.now, b, Start::Acquire, &LockRequest::new("b", TTL))
        .expect("valid");
    w.batches.clear();
    w.send();
    let on_2: Vec<_> = w.batches.iter().filter(|b| b.node == 2).collect();
    assert_eq!(on_2.len(), 1);
    assert_eq!(
        on_2[0].transmits.len(),
        1,
        "lock a's release waits behind its SET on node 2; lock b's SET is not held up"
    );
    assert_eq!(on_2[0].transmits[0].command.op(), Op::SetIfAbsent);
    assert!(w.mux.has_requests());
    // The straggler answers: the queued release goes out in the very next batch, no timer.
    w.batches.clear();
    w.answer(|t| t.id.node() == 2 && t.command.spec().keys().any(|k| k == b"a"));
    w.send();
    let release: Vec<_> = w
        .batches
        .iter()
        .flat_map(|b| &b.transmits)
        .filter(|t| t.id.node() == 2)
        .collect();
    assert_eq!(release.len(), 1);
    assert_eq!(release[0].command.op(), Op::DeleteIfEquals);
    w.settle();
    assert!(
        w.nodes.iter().all(|n| n.token(b"a").is_none()),
        "released everywhere"
    );
    let released = count(&w.events(), |e| matches!(e, LockEvent::Released(_)));
    assert_eq!(released, 1);
    assert_eq!(w.mux.len(), 1, "lock a is gone, lock b runs");
}

#[test]
fn caller_extensions_run_one_by_one_and_each_gets_its_own_answer() {
    let mut w = World::new(3);
    let a = LockId::new(7);
    w.mux
        .start(w.now, a, Start::Acquire, &LockRequest::new("a", TTL))
        .expect("valid");
    w.settle();
    w.events();
    w.batches.clear();
    w.mux.extend(w.now, a, TTL * 2).expect("valid");
    w.mux.extend(w.now, a, TTL * 3).expect("valid");
    w.mux.extend(w.now, a, TTL).expect("valid");
    w.settle();
    let extends = w
        .batches
        .iter()
        .flat_map(|b| &b.transmits)
        .filter(|t| t.command.op() == Op::ExpireIfEquals)
        .count();
    assert_eq!(extends, 9, "three extensions, none merged");
    let answers = count(&w.events(), |e| {
        matches!(
            e,
            LockEvent::Extended {
                trigger: Trigger::Caller,
                outcome: ExtendOutcome::Extended { .. }
            }
        )
    });
    assert_eq!(answers, 3);
    assert!(w.mux.extend(w.now, a, Duration::ZERO).is_err());
}

#[test]
fn extensions_not_run_before_a_release_are_answered_and_never_sent() {
    let mut w = World::new(3);
    let a = LockId::new(1);
    w.mux
        .start(w.now, a, Start::Acquire, &LockRequest::new("a", TTL))
        .expect("valid");
    w.settle();
    w.events();
    w.mux.extend(w.now, a, TTL).expect("valid");
    w.mux.extend(w.now, a, TTL).expect("valid");
    w.mux.release(w.now, a);
    w.settle();
    let events = w.events();
    let expired = count(&events, |e| {
        matches!(
            e,
            LockEvent::Extended {
                outcome: ExtendOutcome::NotExtended {
                    reason: ExtendFailure::Expired,
                    ..
                },
                ..
            }
        )
    });
    assert_eq!(expired, 2, "both calls answered: {events:?}");
    assert_eq!(count(&events, |e| matches!(e, LockEvent::Released(_))), 1);
    // Unknown locks are answered too, never left waiting.
    w.mux.extend(w.now, LockId::new(99), TTL).expect("valid");
    w.mux.release(w.now, LockId::new(99));
    assert_eq!(w.events().len(), 2);
}

#[test]
fn auto_extension_runs_with_nobody_calling() {
    let mut w = World::new(3);
    let a = LockId::new(1);
    let ttl = Duration::from_secs(1);
    w.mux
        .start(
            w.now,
            a,
            Start::Acquire,
            &LockRequest::new("a", ttl).auto_extend(),
        )
        .expect("valid");
    w.settle();
    let start = w.now;
    let mut renewals = 0;
    while w.now < start + ttl * 5 {
        let timeout = w.tick();
        assert_eq!(
            timeout.reason,
            TimeoutReason::Lock {
                lock: a,
                reason: WakeReason::AutoExtend
            }
        );
        w.settle();
        renewals += count(&w.events(), |e| {
            matches!(
                e,
                LockEvent::Extended {
                    trigger: Trigger::Renewal,
                    outcome: ExtendOutcome::Extended { .. }
                }
            )
        });
    }
    assert!(renewals >= 5, "renewed {renewals} times in 5 TTLs");
    let lease = w.mux.lock(a).and_then(Lifecycle::lease).expect("held");
    assert!(lease.is_valid(w.now));
}

#[test]
fn an_abandoned_acquisition_releases_what_it_set_and_says_nothing() {
    let mut w = World::new(3);
    let a = LockId::new(1);
    w.mux
        .start(w.now, a, Start::Acquire, &LockRequest::new("a", TTL))
        .expect("valid");
    w.send();
    w.answer(|t| t.id.node() == 0);
    w.mux.abandon(w.now, a);
    w.settle();
    assert!(w.events().is_empty());
    assert!(w.nodes.iter().all(|n| n.token(b"a").is_none()));
    assert!(w.mux.is_idle());
    // A held lock is left alone.
    w.mux
        .start(w.now, a, Start::Acquire, &LockRequest::new("a", TTL))
        .expect("the id is free again");
    w.settle();
    w.mux.abandon(w.now, a);
    w.settle();
    assert!(w.nodes.iter().all(|n| n.token(b"a").is_some()));
}

#[test]
fn a_detached_lock_stays_on_the_nodes_and_goes_quiet() {
    let mut w = World::new(3);
    let a = LockId::new(1);
    w.mux
        .start(
            w.now,
            a,
            Start::Acquire,
            &LockRequest::new("a", Duration::from_secs(1)).auto_extend(),
        )
        .expect("valid");
    w.send();
    w.answer(|t| t.id.node() != 2);
    w.mux.detach(w.now, a);
    assert!(w.mux.has_requests(), "node 2's SET is still in flight");
    w.settle();
    assert_eq!(w.mux.poll_timeout(), None, "no renewal of a detached lock");
    assert!(w.nodes.iter().all(|n| n.token(b"a").is_some()));
    assert!(w.mux.is_idle());
}

#[test]
fn a_paused_lock_listens_and_a_notice_starts_its_next_round() {
    let config = Config::builder(3).retry(paused()).build().expect("valid");
    let mut w = World::with(config, 3);
    for node in &mut w.nodes {
        node.put(b"a".to_vec(), b"other".to_vec());
    }
    let a = LockId::new(1);
    w.mux
        .start(w.now, a, Start::Acquire, &LockRequest::new("a", TTL))
        .expect("valid");
    w.settle();
    let channel = w.mux.channels().next().expect("listening").to_vec();
    assert!(channel.starts_with(crate::RELEASED_CHANNEL_PREFIX) && channel.ends_with(b"a"));
    assert_eq!(
        w.mux.poll_subscription(),
        Some(Change::Subscribe(channel.clone()))
    );
    for node in &mut w.nodes {
        node.forget_all();
        node.trust();
    }
    w.mux.handle_notice(w.now, b"not ours");
    w.send();
    assert!(
        w.wire.is_empty(),
        "a notice for another channel wakes nobody"
    );
    w.mux.handle_notice(w.now, &channel);
    let wake = w.mux.poll_timeout().expect("the woken round is scheduled");
    assert!(wake.at < w.now + Duration::from_secs(1), "{wake:?}");
    w.now = wake.at;
    w.mux.handle_timeout(w.now);
    w.settle();
    assert_eq!(count(&w.events(), is_acquired), 1);
    // The channel lingers, then goes.
    assert_eq!(w.mux.poll_subscription(), None);
    let linger = w.tick();
    assert_eq!(linger.reason, TimeoutReason::Linger);
    assert_eq!(
        w.mux.poll_subscription(),
        Some(Change::Unsubscribe(channel))
    );
}

/// Three nodes, retries that pause 3 s: lock 1 holds "a", and lock 2 of the same client
/// waits for it, pausing.
fn a_holder_and_its_waiter() -> (World, LockId, LockId) {
    a_holder_and_its_waiter_retrying(paused())
}

/// [`a_holder_and_its_waiter`], with the waiter retrying by `retry`.
fn a_holder_and_its_waiter_retrying(retry: RetryPolicy) -> (World, LockId, LockId) {
    let config = Config::builder(3).retry(retry).build().expect("valid");
    let mut w = World::with(config, 3);
    let (holder, waiter) = (LockId::new(1), LockId::new(2));
    for id in [holder, waiter] {
        w.mux
            .start(w.now, id, Start::Acquire, &LockRequest::new("a", TTL))
            .expect("valid");
        w.settle();
    }
    (w, holder, waiter)
}

/// The acquisition requests (`SET NX`) of `lock` sent from batch `from` on.
fn rounds_sent(w: &World, lock: LockId, from: usize) -> usize {
    let origin = w.mux.lock(lock).expect("running").id();
    w.batches[from..]
        .iter()
        .flat_map(|batch| &batch.transmits)
        .filter(|t| t.id.origin().lock() == origin && t.command.op() == Op::SetIfAbsent)
        .count()
}

/// A release of this client hands its keys to its longest-waiting waiter: that one's round
/// starts at once, queued behind the release (no node's word, no time passing), and the
/// others keep pausing, sending nothing, until the next release hands the keys on.
#[test]
fn a_release_hands_its_keys_to_the_same_clients_longest_waiting_waiter_at_once() {
    let (mut w, holder, first) = a_holder_and_its_waiter();
    let second = LockId::new(3);
    w.mux
        .start(w.now, second, Start::Acquire, &LockRequest::new("a", TTL))
        .expect("valid");
    w.settle();
    assert_eq!(count(&w.events(), is_acquired), 1, "the holder's");
    assert!(!w.mux.lock(first).expect("waiting").is_held());
    let pause = w.mux.poll_timeout().expect("the waiters' pauses").at;
    assert!(pause >= w.now + Duration::from_secs(1), "{pause:?}");
    assert!(w.mux.channels().next().is_some(), "the waiters listen");
    // No server says anything, and no time passes: the holder's own release is the news.
    let sent = w.batches.len();
    w.mux.release(w.now, holder);
    w.settle();
    let acquired = |events: &[(LockId, LockEvent)]| -> Vec<LockId> {
        let mut ids: Vec<LockId> = events
            .iter()
            .filter(|(_, e)| is_acquired(e))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    };
    let events = w.events();
    assert_eq!(
        acquired(&events),
        [first],
        "handed to the first: {events:?}"
    );
    assert_eq!(rounds_sent(&w, first, sent), 3, "one round, on every node");
    assert_eq!(rounds_sent(&w, second, sent), 0, "the second kept pausing");
    // The next release hands the keys on, again at once.
    let sent = w.batches.len();
    w.mux.release(w.now, first);
    w.settle();
    let events = w.events();
    assert_eq!(acquired(&events), [second], "handed on: {events:?}");
    assert_eq!(rounds_sent(&w, second, sent), 3);
}

/// A release while the client's only waiter has a round out (it can start no round now):
/// the waiter is woken as at a notice, so that round, lost, ends its pause soon.
#[test]
fn a_release_wakes_a_waiter_whose_round_is_out() {
    // Long enough for a third round.
    let (mut w, holder, waiter) =
        a_holder_and_its_waiter_retrying(paused().deadline(Duration::from_secs(60)));
    assert_eq!(count(&w.events(), is_acquired), 1, "the holder's");
    let pause = w.mux.poll_timeout().expect("the waiter's pause").at;
    w.now = pause;
    w.mux.handle_timeout(w.now);
    w.send();
    assert_eq!(rounds_sent(&w, waiter, 0), 6, "its second round is out");
    w.mux.release(w.now, holder);
    // The round reaches the nodes before the release: refused everywhere, lost.
    w.answer(|t| t.command.op() == Op::SetIfAbsent);
    assert_eq!(count(&w.events(), is_acquired), 0, "the round lost");
    w.settle();
    let wake = w.mux.poll_timeout().expect("the woken round").at;
    assert!(
        wake < w.now + Duration::from_secs(1),
        "the lost round's pause ends early: {wake:?}"
    );
    w.now = wake;
    w.mux.handle_timeout(w.now);
    w.settle();
    assert_eq!(count(&w.events(), is_acquired), 1, "the waiter holds it");
}

/// The releases of `lock` on the wire, by node: whether each counts on the own subscriber.
fn releases_heard(w: &World, lock: LockId) -> Vec<(usize, bool)> {
    let origin = w.mux.lock(lock).expect("running").id();
    let mut heard: Vec<(usize, bool)> = w
        .wire
        .iter()
        .filter(|t| t.id.origin().lock() == origin && t.command.op() == Op::DeleteIfEquals)
        .map(|t| (t.id.node(), t.command.heard_by_own_subscriber()))
        .collect();
    heard.sort_unstable();
    heard
}

#[test]
fn a_release_counts_on_the_own_subscriber_only_where_it_confirmed_every_channel() {
    let config = Config::builder(4).retry(paused()).build().expect("valid");
    let mut w = World::with(config, 4);
    let (holder, waiter, other) = (LockId::new(1), LockId::new(2), LockId::new(3));
    for (id, key) in [(holder, "a"), (other, "b")] {
        w.mux
            .start(w.now, id, Start::Acquire, &LockRequest::new(key, TTL))
            .expect("valid");
    }
    w.settle();
    w.mux
        .start(w.now, waiter, Start::Acquire, &LockRequest::new("a", TTL))
        .expect("valid");
    w.settle();
    assert!(matches!(
        w.mux.poll_subscription(),
        Some(Change::Subscribe(_))
    ));
    assert_eq!(w.mux.subscriptions_handed(), 1);
    // Node 0 confirmed the subscription; node 1 only what came before it; node 2 confirmed,
    // then lost its connection; node 3 never had a subscriber. A confirmation claims no
    // change not yet handed out.
    w.mux.handle_subscribed(0, 1);
    w.mux.handle_subscribed(1, 0);
    w.mux.handle_subscribed(2, 1);
    w.mux.handle_subscriber_ended(2);
    w.mux.handle_subscribed(9, 1);
    w.mux.release(w.now, holder);
    w.send();
    assert_eq!(
        releases_heard(&w, holder),
        [(0, true), (1, false), (2, false), (3, false)]
    );
    // A release by token wakes none of this client's waiters: its notice is their word.
    let by_token = LockRequest::new("a", TTL).token("someone's");
    let token_release = LockId::new(7);
    w.mux
        .start(w.now, token_release, Start::ReleaseByToken, &by_token)
        .expect("valid");
    w.send();
    assert!(
        releases_heard(&w, token_release)
            .iter()
            .all(|(_, heard)| !heard),
        "a release by token counts on no subscriber"
    );
    // A key nobody of this client listens for announces itself to everyone, even on node 0.
    w.mux.release(w.now, other);
    w.send();
    assert_eq!(
        releases_heard(&w, other),
        [(0, false), (1, false), (2, false), (3, false)]
    );
    w.answer(|_| true);
    // A change not yet handed out, or handed and not confirmed, withdraws node 0's claim.
    let (again, third) = (LockId::new(4), LockId::new(5));
    for (id, key) in [(again, "a"), (third, "c")] {
        w.mux
            .start(w.now, id, Start::Acquire, &LockRequest::new(key, TTL))
            .expect("valid");
    }
    w.settle();
    let _ = w.events();
    for node in &mut w.nodes {
        node.put(b"c".to_vec(), b"another".to_vec());
    }
    let waiting = LockId::new(6);
    w.mux
        .start(w.now, waiting, Start::Acquire, &LockRequest::new("c", TTL))
        .expect("valid");
    w.settle();
    w.mux.release(w.now, again);
    w.send();
    assert!(
        releases_heard(&w, again).iter().all(|(_, heard)| !heard),
        "a change is pending"
    );
    w.answer(|_| true);
    assert!(w.mux.poll_subscription().is_some());
    assert_eq!(w.mux.subscriptions_handed(), 2);
    w.mux.handle_subscribed(0, 1);
    w.mux.release(w.now, third);
    w.send();
    assert!(
        releases_heard(&w, third).iter().all(|(_, heard)| !heard),
        "not confirmed yet"
    );
}

/// How long after the last answer to its holder's release a waiter of the same client waits:
/// the holder releases "a" with nodes 0 and 1 confirmed (counting on the own subscriber),
/// node 2 not; the waiter, handed the keys at the release (its round goes out with it), loses
/// that round before the release reaches the nodes, and pauses again; then every node answers
/// the release (the marked ones having deleted the key only where `deleted_where_marked`), and
/// the waiter then wins.
fn wait_after_counted_release(deleted_where_marked: bool) -> Duration {
    let (mut w, holder, waiter) = a_holder_and_its_waiter();
    assert!(!w.mux.lock(waiter).expect("waiting").is_held());
    assert_eq!(count(&w.events(), is_acquired), 1, "the holder's");
    assert!(w.mux.poll_subscription().is_some());
    w.mux.handle_subscribed(0, 1);
    w.mux.handle_subscribed(1, 1);
    w.mux.release(w.now, holder);
    w.send();
    assert_eq!(
        releases_heard(&w, holder),
        [(0, true), (1, true), (2, false)]
    );
    assert_eq!(
        w.wire
            .iter()
            .filter(|t| t.command.op() == Op::SetIfAbsent)
            .count(),
        3,
        "the waiter's round left with the release"
    );
    w.answer(|t| t.command.op() != Op::DeleteIfEquals);
    assert_eq!(count(&w.events(), is_acquired), 0, "the round lost");
    if !deleted_where_marked {
        w.nodes[0].remove(b"a");
        w.nodes[1].remove(b"a");
    }
    w.answer(|t| t.command.op() == Op::DeleteIfEquals);
    assert!(w.wire.is_empty());
    let wake = w.mux.poll_timeout().expect("the waiter's next round");
    let wait = wake.at.saturating_duration_since(w.now);
    w.now = wake.at;
    w.mux.handle_timeout(w.now);
    w.settle();
    assert_eq!(count(&w.events(), is_acquired), 1, "the waiter holds it");
    wait
}

/// A release that counted on the own subscriber of a node: that node's answer wakes this
/// client's waiters again, as the notice it no longer sends did. An unmarked node's answer
/// (its own notice comes), or a marked one's that deleted nothing, wakes nobody: the waiter
/// then sleeps out its pause.
#[test]
fn a_release_counting_on_the_own_subscriber_wakes_its_waiters_again_at_that_nodes_answer() {
    let echoed = wait_after_counted_release(true);
    assert!(echoed < Duration::from_secs(1), "woken early: {echoed:?}");
    let unechoed = wait_after_counted_release(false);
    assert!(
        unechoed >= Duration::from_secs(2),
        "no answer stands for a notice: {unechoed:?}"
    );
}

#[test]
fn replies_for_gone_or_unknown_locks_only_free_their_node() {
    let mut w = World::new(3);
    let a = LockId::new(1);
    w.mux
        .start(w.now, a, Start::Acquire, &LockRequest::new("a", TTL))
        .expect("valid");
    assert!(
        w.mux
            .start(w.now, a, Start::Acquire, &LockRequest::new("b", TTL))
            .is_err(),
        "an id in use is refused"
    );
    w.send();
    let stale = w.wire[0].id;
    w.answer(|_| true);
    w.mux.handle_reply(w.now, stale, Reply::Ok);
    w.mux.release(w.now, a);
    w.settle();
    w.mux.handle_reply(w.now, stale, Reply::Ok);
    assert!(w.mux.is_idle());
}

#[test]
fn a_lock_without_auto_extension_reports_its_loss_when_its_validity_ends() {
    let mut w = World::new(3);
    let (a, b) = (LockId::new(1), LockId::new(2));
    let ttl = Duration::from_secs(1);
    for id in [a, b] {
        w.mux
            .start(
                w.now,
                id,
                Start::Acquire,
                &LockRequest::new(format!("r{}", id.get()), ttl),
            )
            .expect("valid");
    }
    w.settle();
    w.events();
    // Lock b is extended on time: its end moves, and only lock a is lost at first.
    w.mux.extend(w.now, b, ttl * 3).expect("valid");
    w.settle();
    w.events();
    let first = w.tick();
    assert_eq!(first.reason, TimeoutReason::Expiry { lock: a });
    let events = w.events();
    assert!(
        matches!(
            &events[..],
            [(lock, LockEvent::Lost { cause: LossCause::Expired, .. })] if *lock == a
        ),
        "{events:?}"
    );
    assert!(!w.mux.lock(a).is_some_and(Lifecycle::is_held));
    let second = w.tick();
    assert_eq!(second.reason, TimeoutReason::Expiry { lock: b });
    assert!(
        second.at >= first.at + ttl,
        "b's end moved with its extension"
    );
    assert_eq!(w.events().len(), 1);
    // A released lock is never reported lost.
    let c = LockId::new(3);
    w.mux
        .start(w.now, c, Start::Acquire, &LockRequest::new("c", ttl))
        .expect("valid");
    w.settle();
    w.mux.release(w.now, c);
    w.settle();
    w.events();
    w.now += ttl * 2;
    w.mux.handle_timeout(w.now);
    assert!(w.events().is_empty());
}

#[test]
fn a_stuck_node_queues_one_extension_per_lock_however_many_renewals_pass() {
    let mut w = World::new(3);
    let a = LockId::new(1);
    let ttl = Duration::from_secs(1);
    w.mux
        .start(
            w.now,
            a,
            Start::Acquire,
            &LockRequest::new("a", ttl).auto_extend(),
        )
        .expect("valid");
    w.send();
    // Node 2 never answers its SET: every renewal's extension queues behind it there.
    w.answer(|t| t.id.node() != 2);
    for _ in 0..10 {
        w.tick();
        w.send();
        w.answer(|t| t.id.node() != 2);
    }
    assert_eq!(
        w.mux.nodes[2].queued.len(),
        1,
        "only the newest extension waits on the stuck node"
    );
    assert!(
        w.mux.lock(a).is_some_and(Lifecycle::is_held),
        "kept by nodes 0 and 1"
    );
}

#[test]
fn an_abandoned_resumption_never_sends_what_was_still_queued() {
    let mut w = World::new(3);
    let (a, b) = (LockId::new(1), LockId::new(2));
    w.mux
        .start(w.now, a, Start::Acquire, &LockRequest::new("r", TTL))
        .expect("valid");
    w.settle();
    let token = w.events().iter().find_map(|(_, e)| match e {
        LockEvent::Acquired(lease) => Some(lease.token().as_bytes().to_vec()),
        _ => None,
    });
    let token = token.expect("acquired");
    w.mux
        .start(
            w.now,
            b,
            Start::Resume,
            &LockRequest::new("r", TTL * 3).token(token),
        )
        .expect("valid");
    // The driver has not turned yet: the resumption's requests are queued, not sent.
    let queued_before: usize = w.mux.nodes.iter().map(|n| n.queued.len()).sum();
    assert_eq!(queued_before, 3);
    w.mux.abandon(w.now, b);
    let queued_after: usize = w.mux.nodes.iter().map(|n| n.queued.len()).sum();
    assert_eq!(queued_after, 0, "never sent, so never lengthening a key");
    assert!(w.events().is_empty());
}

#[test]
fn a_lock_reported_lost_is_not_extended_any_more() {
    let mut w = World::new(3);
    let a = LockId::new(1);
    let ttl = Duration::from_secs(1);
    w.mux
        .start(w.now, a, Start::Acquire, &LockRequest::new("a", ttl))
        .expect("valid");
    w.settle();
    w.events();
    w.tick();
    assert!(matches!(&w.events()[..], [(_, LockEvent::Lost { .. })]));
    w.batches.clear();
    w.mux.extend(w.now, a, ttl).expect("valid");
    w.send();
    assert!(w.batches.is_empty(), "nothing sent for a lost lock");
    assert!(matches!(
        &w.events()[..],
        [(
            _,
            LockEvent::Extended {
                outcome: ExtendOutcome::NotExtended {
                    reason: ExtendFailure::Expired,
                    ..
                },
                trigger: Trigger::Caller,
            }
        )]
    ));
}

#[test]
fn a_node_with_a_key_slot_gets_every_key_in_that_slot_and_its_release_wakes_a_waiter() {
    // Nodes 1 and 2 are two votes of one cluster, each with a slot of its own.
    let slots: Vec<crate::Slot> = crate::vote_slots(2).collect();
    let config = Config::builder(3)
        .key_slot(1, slots[0])
        .key_slot(2, slots[1])
        .retry(paused())
        .build()
        .expect("valid");
    let mut w = World::with(config, 3);
    let holder = LockId::new(1);
    let request = LockRequest::new("{t}a", TTL).resource("b");
    w.mux
        .start(w.now, holder, Start::Acquire, &request)
        .expect("valid");
    w.settle();
    let events = w.events();
    assert_eq!(count(&events, is_acquired), 1);
    let Some((_, LockEvent::Acquired(held))) = events.iter().find(|(_, e)| is_acquired(e)) else {
        panic!("the holder's lease: {events:?}");
    };
    let held = held.token().as_bytes().to_vec();
    let tagged = |slot: crate::Slot, key: &str| format!("{{{}}}{key}", slot.tag()).into_bytes();
    assert!(w.nodes[0].token(b"{t}a").is_some() && w.nodes[0].token(b"b").is_some());
    for (node, &slot) in [1, 2].iter().zip(&slots) {
        let keys = [tagged(slot, "{t}a"), tagged(slot, "b")];
        assert!(
            keys.iter().all(|key| w.nodes[*node].token(key).is_some()),
            "node {node} holds its slot's keys"
        );
        assert!(
            w.nodes[*node].token(b"b").is_none(),
            "and never the plain ones"
        );
        assert!(keys.iter().all(|key| crate::Slot::of(key) == slot));
    }

    // A waiter listens on every vote's channel; the release announced on a vote's wakes it.
    let waiter = LockId::new(2);
    w.mux
        .start(w.now, waiter, Start::Acquire, &LockRequest::new("b", TTL))
        .expect("valid");
    w.settle();
    let channels: Vec<Vec<u8>> = w.mux.channels().map(<[u8]>::to_vec).collect();
    let on_vote = crate::released_channel(&tagged(slots[1], "b"));
    assert!(
        channels.contains(&crate::released_channel(b"b")),
        "{channels:?}"
    );
    assert!(channels.contains(&on_vote), "{channels:?}");
    w.mux.release(w.now, holder);
    w.settle();
    let holds = |node: &crate::fake::FakeNode, key: &[u8]| node.token(key) == Some(&held[..]);
    assert!(!holds(&w.nodes[0], b"b"));
    for (node, &slot) in [1, 2].iter().zip(&slots) {
        assert!(
            !holds(&w.nodes[*node], &tagged(slot, "b")),
            "the release deletes node {node}'s keys"
        );
    }

    // The release handed the keys to the waiter itself (a release of this client needs no
    // notice): its round ran at once, behind the release on every node, and the notice
    // changes nothing. Once more with a release by token, which wakes nobody here: only the
    // notice on a vote's channel ends the next waiter's pause.
    let events = w.events();
    let Some(LockEvent::Acquired(lease)) = events
        .iter()
        .find(|(id, e)| *id == waiter && is_acquired(e))
        .map(|(_, e)| e)
    else {
        panic!("the waiter takes the lock at the release: {events:?}");
    };
    for (node, &slot) in [1, 2].iter().zip(&slots) {
        assert_eq!(
            w.nodes[*node].token(&tagged(slot, "b")),
            Some(lease.token().as_bytes()),
            "node {node} holds the waiter's key"
        );
    }
    w.mux.handle_notice(w.now, &on_vote);
    let by_token = LockRequest::new("b", TTL).token(lease.token().as_bytes().to_vec());
    let next = LockId::new(3);
    w.mux
        .start(w.now, next, Start::Acquire, &LockRequest::new("b", TTL))
        .expect("valid");
    w.settle();
    w.mux
        .start(w.now, LockId::new(4), Start::ReleaseByToken, &by_token)
        .expect("valid");
    w.settle();
    for (node, &slot) in [1, 2].iter().zip(&slots) {
        assert!(w.nodes[*node].token(&tagged(slot, "b")).is_none());
    }
    let paused = w.mux.poll_timeout().expect("the next waiter's pause");
    assert!(
        paused.at >= w.now + Duration::from_secs(1),
        "a release by token wakes nobody: {paused:?}"
    );
    w.mux.handle_notice(w.now, &on_vote);
    let wake = w.mux.poll_timeout().expect("the woken round is scheduled");
    assert!(wake.at < w.now + Duration::from_secs(1), "{wake:?}");
}

/// Three nodes, retries 10 ms apart; nodes 0 and 1 hold "a" for someone else, so they refuse
/// every round of lock 1, which starts acquiring "a".
fn refused_by_two_of_three() -> (World, LockId) {
    let config = Config::builder(3)
        .retry(
            RetryPolicy::default()
                .delay(Duration::from_millis(10))
                .jitter(Duration::ZERO),
        )
        .build()
        .expect("valid");
    let mut w = World::with(config, 3);
    for node in &mut w.nodes[..2] {
        node.put(b"a".to_vec(), b"someone-else".to_vec());
    }
    let a = LockId::new(1);
    w.mux
        .start(w.now, a, Start::Acquire, &LockRequest::new("a", TTL))
        .expect("valid");
    (w, a)
}

#[test]
fn a_slow_node_queues_one_round_of_a_lock_however_many_rounds_are_lost_meanwhile() {
    let (mut w, _) = refused_by_two_of_three();
    // Nodes 0 and 1 refuse every round at once; node 2 answers nothing while 40 rounds are
    // lost. Only its first round's SET ever left the queue.
    for _ in 0..40 {
        w.send();
        while w.wire.iter().any(|t| t.id.node() != 2) {
            w.answer(|t| t.id.node() != 2);
            w.send();
        }
        assert!(w.events().is_empty(), "still trying");
        w.tick();
    }
    let queued = &w.mux.nodes[2].queued;
    assert!(
        queued.len() <= 3,
        "the slow node keeps the first round's clean-up and the newest round, got {} queued",
        queued.len()
    );
    assert_eq!(
        queued.front().map(|t| t.command.op()),
        Some(Op::DeleteIfEquals),
        "the clean-up of the SET that was sent stays first"
    );
    assert_eq!(
        queued
            .iter()
            .filter(|t| t.command.op() == Op::SetIfAbsent)
            .count(),
        1,
        "one round's SET waits"
    );
    // The holder lets go and node 2 catches up: the lock is won, and node 2 holds the winning
    // token only (the first round's key was cleaned up before the newest round's SET ran).
    for node in &mut w.nodes[..2] {
        node.remove(b"a");
    }
    let mut acquired = None;
    for _ in 0..10 {
        w.settle();
        if let Some(lease) = w.events().into_iter().find_map(|(_, e)| match e {
            LockEvent::Acquired(lease) => Some(lease),
            _ => None,
        }) {
            acquired = Some(lease);
            break;
        }
        w.tick();
    }
    let lease = acquired.expect("acquired once the holder let go");
    for node in &w.nodes {
        assert_eq!(node.token(b"a"), Some(lease.token().as_bytes()));
    }
}

#[test]
fn an_abandoned_acquisition_still_cleans_up_an_earlier_rounds_key_on_a_slow_node() {
    let (mut w, a) = refused_by_two_of_three();
    // Round 1 is lost on nodes 0 and 1 while node 2 has not run its SET yet; round 2 starts.
    w.send();
    w.answer(|t| t.id.node() != 2);
    w.send();
    w.tick();
    w.send();
    assert_eq!(
        w.mux.nodes[2]
            .queued
            .iter()
            .map(|t| t.command.op())
            .collect::<Vec<_>>(),
        [Op::DeleteIfEquals, Op::SetIfAbsent],
        "round 1's clean-up and round 2's SET wait behind round 1's SET on node 2"
    );
    w.mux.abandon(w.now, a);
    // Node 2 runs round 1's SET (granted: its key is round 1's token), then the clean-up.
    w.settle();
    assert!(w.events().is_empty());
    assert_eq!(w.nodes[2].token(b"a"), None, "round 1's key is cleaned up");
    assert!(w.mux.is_idle());
}
