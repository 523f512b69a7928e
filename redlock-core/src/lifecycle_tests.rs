//! Unit tests of the lifecycle, stepping virtual time over in-memory nodes.

use super::*;
use crate::command::{Command, Op};
use crate::event::WakeReason;
use crate::retry::RetryPolicy;
use crate::round::NodeRelease;
use crate::testing::{FakeNode, Link, Net, epoch, rng};

const TTL: Duration = Duration::from_secs(10);

fn config(policy: RetryPolicy) -> Config {
    Config::builder(5).retry(policy).build().expect("valid")
}

/// `total` nodes, the first `held` of them holding resource `r` for another token.
fn held_by_another(held: usize, total: usize) -> Vec<FakeNode> {
    let mut nodes = vec![FakeNode::default(); total];
    for node in nodes.iter_mut().take(held) {
        node.put(b"r".to_vec(), b"other".to_vec());
    }
    nodes
}

/// An acquisition of resource `r` under `policy`, its jitter drawn from `seed`.
fn acquiring(t0: Instant, policy: RetryPolicy, seed: u64) -> Lifecycle {
    Lifecycle::acquire(
        t0,
        &config(policy),
        &LockRequest::new("r", TTL),
        &mut rng(seed),
    )
    .expect("ok")
}

fn acquired(event: Option<LockEvent>) -> Lease {
    match event {
        Some(LockEvent::Acquired(lease)) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

#[test]
fn acquire_extend_release_in_order_with_ids_naming_lock_and_operation() {
    let config = config(RetryPolicy::default());
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let request = LockRequest::new("r", TTL);
    let mut lock = Lifecycle::acquire(net.now, &config, &request, &mut rng(1)).expect("valid");
    let lease = acquired(net.next_event(&mut lock, None));
    assert!(lock.is_held());
    assert_eq!(lock.lease(), Some(&lease));
    assert_eq!(
        net.next_event(&mut lock, None),
        None,
        "held, no auto-extension: idle"
    );

    net.now += Duration::from_secs(1);
    lock.extend(net.now, TTL).expect("valid TTL");
    match net.next_event(&mut lock, None) {
        Some(LockEvent::Extended {
            outcome: ExtendOutcome::Extended { valid_until, .. },
            trigger: Trigger::Caller,
        }) => assert!(valid_until > lease.valid_until()),
        other => panic!("{other:?}"),
    }
    assert!(lock.lease().expect("held").valid_until() > lease.valid_until());

    lock.release(net.now);
    match net.next_event(&mut lock, None) {
        Some(LockEvent::Released(report)) => assert_eq!(report.released(), 5),
        other => panic!("{other:?}"),
    }
    assert!(lock.has_ended());
    assert!(net.nodes.iter().all(|n| n.keys.is_empty()));
    // One lock id; operations 1 (acquire), 2 (extend), 3 (release), in that order.
    let lock_id = net.sent[0].0.origin().lock();
    let operations: Vec<(u32, Op)> = net
        .sent
        .iter()
        .map(|(id, cmd)| {
            assert_eq!(id.origin().lock(), lock_id);
            (id.origin().operation(), cmd.op())
        })
        .collect();
    let mut expected = vec![(1, Op::SetIfAbsent); 5];
    expected.extend([(2, Op::ExpireIfEquals); 5]);
    expected.extend([(3, Op::DeleteIfEquals); 5]);
    assert_eq!(operations, expected);
}

#[test]
fn a_late_reply_of_the_acquisition_never_counts_in_the_extension() {
    let config = config(RetryPolicy::default());
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let mut lock =
        Lifecycle::acquire(net.now, &config, &LockRequest::new("r", TTL), &mut rng(2)).expect("ok");
    acquired(net.next_event(&mut lock, None));
    let acquire_ids: Vec<RequestId> = net.sent.iter().map(|(id, _)| id.to_owned()).collect();
    lock.extend(net.now, TTL).expect("valid");
    // The extension's requests go out; before their replies, stragglers of the acquisition
    // (same lock, same nodes, batch numbers that an operation-blind filter would confuse)
    // answer "refused". They must not decide the extension.
    let mut extend_ids = Vec::new();
    while let LockOutput::Send(t) = lock.poll_output(net.now) {
        extend_ids.push(t.id);
    }
    assert_eq!(extend_ids.len(), 5);
    for id in &acquire_ids {
        lock.handle_reply(net.now, *id, Reply::Int(0));
    }
    for id in &extend_ids {
        lock.handle_reply(net.now, *id, Reply::Int(1));
    }
    match lock.poll_output(net.now) {
        LockOutput::Event(LockEvent::Extended {
            outcome: ExtendOutcome::Extended { votes, .. },
            ..
        }) => assert_eq!(votes, [Vote::Granted; 5]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_reply_for_another_lock_never_counts() {
    let config = config(RetryPolicy::once());
    let t0 = epoch();
    let request = LockRequest::new("r", TTL);
    let mut a = Lifecycle::acquire(t0, &config, &request, &mut rng(3)).expect("ok");
    let mut b = Lifecycle::acquire(t0, &config, &request, &mut rng(4)).expect("ok");
    let sends = |lock: &mut Lifecycle| {
        std::iter::from_fn(|| match lock.poll_output(t0) {
            LockOutput::Send(t) => Some(t.id),
            _ => None,
        })
        .collect::<Vec<_>>()
    };
    let (a_ids, b_ids) = (sends(&mut a), sends(&mut b));
    assert_ne!(a_ids[0].origin(), b_ids[0].origin());
    // b's grants handed to a (a driver mixing up locks) change nothing for a.
    for id in &b_ids {
        a.handle_reply(t0, *id, Reply::Ok);
    }
    assert!(matches!(a.poll_output(t0), LockOutput::Wait { .. }));
    assert!(!a.is_held());
}

#[test]
fn auto_extension_keeps_the_lock_then_reports_it_lost_before_validity_ends() {
    let config = config(RetryPolicy::default());
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let request = LockRequest::new("r", TTL).auto_extend();
    let mut lock = Lifecycle::acquire(net.now, &config, &request, &mut rng(5)).expect("ok");
    let lease = acquired(net.next_event(&mut lock, None));
    for _ in 0..3 {
        match net.next_event(&mut lock, None) {
            Some(LockEvent::Extended {
                outcome: ExtendOutcome::Extended { .. },
                trigger: Trigger::Renewal,
            }) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(net.waits.contains(&WakeReason::AutoExtend));
    let valid_until = lock.lease().expect("held").valid_until();
    assert!(valid_until > lease.valid_until());
    // Three nodes lose the key (another client could now take them): the next extension is
    // refused by a quorum, and the lock is reported lost at once, inside its validity.
    for node in net.nodes.iter_mut().take(3) {
        node.keys.clear();
    }
    match net.next_event(&mut lock, None) {
        Some(LockEvent::Extended {
            outcome:
                ExtendOutcome::NotExtended {
                    reason: ExtendFailure::NotHeld,
                    ..
                },
            trigger: Trigger::Renewal,
        }) => {}
        other => panic!("{other:?}"),
    }
    match net.next_event(&mut lock, None) {
        Some(LockEvent::Lost {
            cause: LossCause::NotHeld,
            votes,
        }) => assert_eq!(votes.iter().filter(|v| **v == Vote::Refused).count(), 3),
        other => panic!("{other:?}"),
    }
    assert!(net.now < valid_until);
    assert!(!lock.is_held());
    assert_eq!(
        net.next_event(&mut lock, None),
        None,
        "lost is reported once"
    );
}

#[test]
fn unreachable_nodes_make_the_lock_lost_before_its_validity_ends() {
    let config = config(RetryPolicy::default());
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let request = LockRequest::new("r", Duration::from_secs(2)).auto_extend();
    let mut lock = Lifecycle::acquire(net.now, &config, &request, &mut rng(6)).expect("ok");
    let lease = acquired(net.next_event(&mut lock, None));
    net.links = vec![Link::Silent; 5];
    let mut failures = 0;
    let cause = loop {
        match net.next_event(&mut lock, None) {
            Some(LockEvent::Extended {
                outcome: ExtendOutcome::NotExtended { reason, .. },
                ..
            }) => {
                assert_eq!(reason, ExtendFailure::Unavailable);
                failures += 1;
            }
            Some(LockEvent::Lost { cause, .. }) => break cause,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(cause, LossCause::NoTimeLeft);
    assert!(
        failures >= 2,
        "retried while a retry could finish: {failures}"
    );
    assert!(
        net.now < lease.valid_until(),
        "lost is declared before validity ends"
    );
}

#[test]
fn a_wake_ends_the_retry_pause_early() {
    let config = config(
        RetryPolicy::default()
            .delay(Duration::from_secs(5))
            .no_deadline(),
    );
    let mut nodes = held_by_another(5, 5);
    let t0 = epoch();
    let mut lock =
        Lifecycle::acquire(t0, &config, &LockRequest::new("r", TTL), &mut rng(7)).expect("ok");
    let mut net = Net::new(&mut nodes, t0);
    // Round 1 is refused; the lifecycle pauses before round 2.
    let pause_until = t0 + Duration::from_secs(5);
    assert_eq!(
        net.next_event(&mut lock, Some(t0 + Duration::from_secs(1))),
        None
    );
    assert_eq!(net.waits.last(), Some(&WakeReason::RetryPause));
    // The holder releases; a notification wakes the waiter at once.
    for node in net.nodes.iter_mut() {
        node.keys.clear();
    }
    lock.handle_wake(net.now);
    let lease = acquired(net.next_event(&mut lock, None));
    assert!(
        net.now < pause_until,
        "round 2 ran before the jittered pause ended"
    );
    assert_eq!(lease.attempts(), 2);
}

#[test]
fn a_wake_outside_a_pause_changes_nothing() {
    let config = config(RetryPolicy::once());
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let mut lock =
        Lifecycle::acquire(net.now, &config, &LockRequest::new("r", TTL), &mut rng(8)).expect("ok");
    lock.handle_wake(net.now);
    acquired(net.next_event(&mut lock, None));
    lock.handle_wake(net.now);
    assert_eq!(net.next_event(&mut lock, None), None);
    assert_eq!(net.sent.len(), 5);
}

#[test]
fn a_lock_resumed_by_its_token_is_held_with_a_fresh_validity_and_can_be_released() {
    let config = config(RetryPolicy::default());
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let mut first =
        Lifecycle::acquire(net.now, &config, &LockRequest::new("r", TTL), &mut rng(9)).expect("ok");
    let lease = acquired(net.next_event(&mut first, None));
    let token = lease.token().as_bytes().to_vec();
    drop(first); // the process that took it is gone; its keys stay

    net.now += Duration::from_secs(3);
    let request = LockRequest::new("r", TTL).token(token.clone());
    let mut second = Lifecycle::resume(net.now, &config, &request, &mut rng(10)).expect("ok");
    let resumed = acquired(net.next_event(&mut second, None));
    assert_eq!(resumed.token().as_bytes(), &token[..]);
    assert_eq!(
        resumed.valid_until(),
        net.now + TTL - Duration::from_millis(102),
        "validity counts from the resume round"
    );
    second.release(net.now);
    match net.next_event(&mut second, None) {
        Some(LockEvent::Released(report)) => assert_eq!(report.released(), 5),
        other => panic!("{other:?}"),
    }
    assert!(net.nodes.iter().all(|n| n.keys.is_empty()));
}

#[test]
fn a_wrong_token_resumes_nothing_and_touches_nothing() {
    let config = config(RetryPolicy::default());
    let mut nodes = vec![FakeNode::default(); 5];
    for node in nodes.iter_mut() {
        node.put(b"r".to_vec(), b"holder".to_vec());
    }
    let before = nodes.clone();
    let mut net = Net::new(&mut nodes, epoch());
    let request = LockRequest::new("r", TTL).token("not-the-holder");
    let mut lock = Lifecycle::resume(net.now, &config, &request, &mut rng(11)).expect("ok");
    match net.next_event(&mut lock, None) {
        Some(LockEvent::NotAcquired(failure)) => {
            assert_eq!(failure.reason, FailureReason::NotHeld);
            assert_eq!(failure.votes, [Vote::Refused; 5]);
        }
        other => panic!("{other:?}"),
    }
    assert!(lock.has_ended());
    assert!(
        net.sent.iter().all(|(_, c)| c.op() == Op::ExpireIfEquals),
        "only the compare-and-extend went out"
    );
    for (node, was) in net.nodes.iter().zip(&before) {
        assert_eq!(node.keys, was.keys);
    }
}

#[test]
fn resume_needs_a_token() {
    let config = config(RetryPolicy::default());
    let result = Lifecycle::resume(epoch(), &config, &LockRequest::new("r", TTL), &mut rng(0));
    assert_eq!(result.err(), Some(ConfigError::ResumeWithoutToken));
}

#[test]
fn releasing_during_acquisition_cleans_up_what_was_sent() {
    let config = config(RetryPolicy::default());
    let mut nodes = vec![FakeNode::default(); 5];
    let t0 = epoch();
    let mut lock =
        Lifecycle::acquire(t0, &config, &LockRequest::new("r", TTL), &mut rng(12)).expect("ok");
    // Nothing sent yet: releasing just ends it.
    let mut untouched =
        Lifecycle::acquire(t0, &config, &LockRequest::new("r", TTL), &mut rng(13)).expect("ok");
    untouched.release(t0);
    assert!(untouched.has_ended());
    assert_eq!(untouched.poll_output(t0), LockOutput::Idle);
    // Requests out, SETs landed, answers not in yet: the caller gives up.
    let mut ids = Vec::new();
    while let LockOutput::Send(t) = lock.poll_output(t0) {
        nodes[t.id.node()].run(Duration::ZERO, &t.command);
        ids.push(t.id);
    }
    lock.release(t0);
    let mut net = Net::new(&mut nodes, t0);
    match net.next_event(&mut lock, None) {
        Some(LockEvent::Released(report)) => {
            assert_eq!(report.nodes, [NodeRelease::Released; 5]);
        }
        other => panic!("{other:?}"),
    }
    assert!(net.nodes.iter().all(|n| n.keys.is_empty()));
}

#[test]
fn extending_a_lock_that_is_not_held_sends_nothing() {
    let config = config(RetryPolicy::once());
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let mut lock = Lifecycle::acquire(net.now, &config, &LockRequest::new("r", TTL), &mut rng(14))
        .expect("ok");
    acquired(net.next_event(&mut lock, None));
    lock.release(net.now);
    assert!(matches!(
        net.next_event(&mut lock, None),
        Some(LockEvent::Released(_))
    ));
    let sent = net.sent.len();
    assert!(
        lock.extend(net.now, Duration::ZERO).is_err(),
        "a bad TTL is an error"
    );
    lock.extend(net.now, TTL).expect("valid TTL");
    match net.next_event(&mut lock, None) {
        Some(LockEvent::Extended {
            outcome:
                ExtendOutcome::NotExtended {
                    reason: ExtendFailure::Expired,
                    votes,
                },
            trigger: Trigger::Caller,
        }) => assert!(votes.is_empty()),
        other => panic!("{other:?}"),
    }
    assert_eq!(net.sent.len(), sent);
}

#[test]
fn a_caller_extension_asked_during_a_renewal_runs_after_it() {
    let config = config(RetryPolicy::default());
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let request = LockRequest::new("r", TTL).auto_extend();
    let mut lock = Lifecycle::acquire(net.now, &config, &request, &mut rng(15)).expect("ok");
    acquired(net.next_event(&mut lock, None));
    // Run to the renewal's first request, then ask for an extension of our own.
    loop {
        match lock.poll_output(net.now) {
            LockOutput::Wait { at, .. } => {
                net.now = at;
                lock.handle_timeout(at);
            }
            LockOutput::Send(t) => {
                let node = t.id.node();
                let reply = net.nodes[node].run(Duration::ZERO, &t.command);
                lock.extend(net.now, Duration::from_secs(20))
                    .expect("valid");
                lock.handle_reply(net.now, t.id, reply);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    // The renewal's other four requests, then its outcome, then ours.
    let mut triggers = Vec::new();
    while triggers.len() < 2 {
        match net.next_event(&mut lock, None) {
            Some(LockEvent::Extended { trigger, outcome }) => {
                assert!(
                    matches!(outcome, ExtendOutcome::Extended { .. }),
                    "{outcome:?}"
                );
                triggers.push(trigger);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(triggers, [Trigger::Renewal, Trigger::Caller]);
    assert_eq!(lock.lease().expect("held").ttl(), Duration::from_secs(20));
}

#[test]
fn release_by_token_deletes_only_keys_under_that_token() {
    let config = config(RetryPolicy::default());
    let mut nodes = vec![FakeNode::default(); 5];
    for (i, node) in nodes.iter_mut().enumerate() {
        let token: &[u8] = if i < 3 { b"mine" } else { b"theirs" };
        node.put(b"r".to_vec(), token.to_vec());
    }
    let mut net = Net::new(&mut nodes, epoch());
    let request = LockRequest::new("r", TTL).token("mine");
    let mut lock =
        Lifecycle::release_by_token(net.now, &config, &request, &mut rng(16)).expect("ok");
    match net.next_event(&mut lock, None) {
        Some(LockEvent::Released(report)) => {
            assert_eq!((report.released(), report.held_by_other()), (3, 2));
        }
        other => panic!("{other:?}"),
    }
    let left: Vec<&[u8]> = net.nodes.iter().filter_map(|n| n.token(b"r")).collect();
    assert_eq!(left, [&b"theirs"[..], &b"theirs"[..]]);
    assert!(
        Lifecycle::release_by_token(net.now, &config, &LockRequest::new("r", TTL), &mut rng(0))
            .is_err()
    );
}

#[test]
fn a_wake_starts_the_next_round_within_the_wake_jitter_and_only_once_per_pause() {
    let wake_jitter = Duration::from_millis(3);
    let policy = RetryPolicy::default()
        .delay(Duration::from_secs(5))
        .no_deadline()
        .wake_jitter(wake_jitter);
    for seed in 0..20 {
        // Three nodes held by another: each round sets keys on the other two and loses.
        let mut nodes = held_by_another(3, 5);
        let t0 = epoch();
        let mut lock = acquiring(t0, policy, seed);
        let mut net = Net::new(&mut nodes, t0);
        assert_eq!(
            net.next_event(&mut lock, Some(t0 + Duration::from_secs(1))),
            None
        );
        for node in net.nodes.iter_mut() {
            node.keys.clear();
        }
        let woken_at = net.now;
        lock.handle_wake(woken_at);
        // Every node announces the release: later notices must not pull the round earlier.
        let at = match lock.poll_output(woken_at) {
            LockOutput::Wait { at, reason } => {
                assert_eq!(reason, WakeReason::RetryPause);
                at
            }
            other => panic!("{other:?}"),
        };
        assert!(
            at >= woken_at && at <= woken_at + wake_jitter,
            "seed {seed}"
        );
        for _ in 0..4 {
            lock.handle_wake(woken_at);
            match lock.poll_output(woken_at) {
                LockOutput::Wait { at: again, .. } => assert_eq!(again, at, "seed {seed}"),
                other => panic!("{other:?}"),
            }
        }
        let lease = acquired(net.next_event(&mut lock, None));
        assert_eq!(lease.attempts(), 2);
    }
}

/// Runs `lock`'s woken round 2 on `nodes` (three held by another) up to its replies: the
/// requests reach the nodes, then the holder releases; `heard` says whether the release's
/// notice arrives while the round is out. Returns the instant of the pause after the lost
/// round, and when the round was lost.
fn lose_a_round_to_a_release_behind_it(seed: u64, heard: bool) -> (Instant, Instant) {
    let policy = RetryPolicy::default()
        .delay(Duration::from_secs(5))
        .no_deadline()
        .wake_jitter(Duration::from_millis(3));
    let mut nodes = held_by_another(3, 5);
    let t0 = epoch();
    let mut lock = acquiring(t0, policy, seed);
    let mut net = Net::new(&mut nodes, t0);
    // Round 1 is refused; a notice (of some earlier release) starts round 2 early.
    assert_eq!(
        net.next_event(&mut lock, Some(t0 + Duration::from_secs(1))),
        None
    );
    lock.handle_wake(net.now);
    let mut now = net.now;
    let mut replies = Vec::new();
    loop {
        match lock.poll_output(now) {
            LockOutput::Wait { at, .. } if replies.is_empty() => {
                now = at;
                lock.handle_timeout(now);
            }
            LockOutput::Send(t) => {
                let reply = net.nodes[t.id.node()].run(Duration::ZERO, &t.command);
                replies.push((t.id, reply));
            }
            LockOutput::Wait { .. } => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(replies.len(), 5, "round 2 is out");
    // The holder releases after round 2's `SET NX` reached its nodes.
    for node in net.nodes.iter_mut() {
        node.keys.retain(|_, (token, _)| token != b"other");
    }
    if heard {
        lock.handle_wake(now);
    }
    for (id, reply) in replies {
        lock.handle_reply(now, id, reply);
    }
    loop {
        match lock.poll_output(now) {
            LockOutput::Send(_) => {}
            LockOutput::Wait { at, reason } => {
                assert_eq!(reason, WakeReason::RetryPause);
                return (at, now);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_release_heard_while_a_round_is_out_ends_the_pause_after_it_is_lost() {
    for seed in 0..20 {
        let (at, lost_at) = lose_a_round_to_a_release_behind_it(seed, true);
        // The round was started by a wake-up and lost: the window doubled.
        assert!(
            at <= lost_at + Duration::from_millis(6),
            "seed {seed}: the next round starts within the wake window, not after the pause"
        );
        // The control: without the notice, the lost round sleeps out its pause.
        let (at, lost_at) = lose_a_round_to_a_release_behind_it(seed, false);
        assert!(at >= lost_at + Duration::from_secs(1), "seed {seed}");
    }
}

#[test]
fn a_held_lock_release_announces_itself_and_a_lost_rounds_clean_up_does_not() {
    let config = config(RetryPolicy::once());
    let mut nodes = held_by_another(3, 5);
    let mut net = Net::new(&mut nodes, epoch());
    // Lost on 3 of 5: the 2 keys it set are cleaned up, without a notice (and the 3 nodes
    // that refused are not asked: they hold nothing of this round).
    let mut lost = Lifecycle::acquire(net.now, &config, &LockRequest::new("r", TTL), &mut rng(11))
        .expect("ok");
    assert!(matches!(
        net.next_event(&mut lost, None),
        Some(LockEvent::NotAcquired(_))
    ));
    let cleanups: Vec<&Command> = net
        .sent
        .iter()
        .map(|(_, c)| c)
        .filter(|c| c.op() == Op::DeleteIfEquals)
        .collect();
    assert_eq!(cleanups.len(), 2);
    assert!(cleanups.iter().all(|c| !c.notifies()));
    assert!(net.nodes[3..].iter().all(|n| n.keys.is_empty()));

    for node in net.nodes.iter_mut() {
        node.keys.clear();
    }
    net.sent.clear();
    let mut held = Lifecycle::acquire(net.now, &config, &LockRequest::new("r", TTL), &mut rng(12))
        .expect("ok");
    acquired(net.next_event(&mut held, None));
    let channels: Vec<Vec<u8>> = held.spec().expect("held").released_channels().collect();
    held.release(net.now);
    assert!(matches!(
        net.next_event(&mut held, None),
        Some(LockEvent::Released(_))
    ));
    let releases: Vec<&Command> = net
        .sent
        .iter()
        .map(|(_, c)| c)
        .filter(|c| c.op() == Op::DeleteIfEquals)
        .collect();
    assert_eq!(releases.len(), 5);
    assert!(releases.iter().all(|c| c.notifies()));
    assert_eq!(channels, vec![b"redlock:released:r".to_vec()]);
}

/// A held lock's release does not ask the nodes that refused its winning round: another's key
/// was there and ours never reaches them (a compare-and-delete would delete nothing, and,
/// announced, wake every waiter for a lock that is no freer). A node that answered an
/// extension "not held" is asked: the report says whose key is there now. A caller's token may
/// be held where it was refused (an earlier round's key under it), so a lock taken with one
/// releases everywhere.
#[test]
fn a_release_skips_the_nodes_its_own_token_was_refused_by() {
    let config = config(RetryPolicy::once());
    let mut nodes = held_by_another(2, 5);
    let mut net = Net::new(&mut nodes, epoch());
    let mut lock = Lifecycle::acquire(net.now, &config, &LockRequest::new("r", TTL), &mut rng(21))
        .expect("ok");
    acquired(net.next_event(&mut lock, None));
    // Node 2 loses our key; an extension hears "not held" there.
    net.nodes[2].keys.remove(&b"r"[..]);
    lock.extend(net.now, TTL).expect("valid TTL");
    net.next_event(&mut lock, None);
    let from = net.sent.len();
    lock.release(net.now);
    match net.next_event(&mut lock, None) {
        Some(LockEvent::Released(report)) => assert_eq!(
            report.nodes,
            [
                NodeRelease::HeldByOther,
                NodeRelease::HeldByOther,
                NodeRelease::Absent,
                NodeRelease::Released,
                NodeRelease::Released
            ]
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(release_targets(&net, from), [2, 3, 4]);
    let left: Vec<&[u8]> = net.nodes.iter().filter_map(|n| n.token(b"r")).collect();
    assert_eq!(left, [&b"other"[..], &b"other"[..]]);

    // A caller's token: every node is asked, and a leftover key of it goes.
    let mut nodes = held_by_another(2, 5);
    nodes[1].put(b"r".to_vec(), b"mine".to_vec());
    let mut net = Net::new(&mut nodes, epoch());
    let request = LockRequest::new("r", TTL).token("mine");
    let mut lock = Lifecycle::acquire(net.now, &config, &request, &mut rng(22)).expect("ok");
    acquired(net.next_event(&mut lock, None));
    let from = net.sent.len();
    lock.release(net.now);
    match net.next_event(&mut lock, None) {
        Some(LockEvent::Released(report)) => assert_eq!(report.released(), 4),
        other => panic!("{other:?}"),
    }
    assert_eq!(release_targets(&net, from), [0, 1, 2, 3, 4]);
    let left: Vec<&[u8]> = net.nodes.iter().filter_map(|n| n.token(b"r")).collect();
    assert_eq!(left, [&b"other"[..]]);
}

#[test]
fn rounds_started_by_wakes_and_lost_announce_their_clean_up_and_widen_the_wake_window() {
    let wake_jitter = Duration::from_millis(1);
    let policy = RetryPolicy::default()
        .delay(Duration::from_secs(5))
        .no_deadline()
        .wake_jitter(wake_jitter);
    let mut widest_after_three = Duration::ZERO;
    for seed in 0..20 {
        // Three nodes held by another: each round sets keys on the other two and loses.
        let mut nodes = held_by_another(3, 5);
        let t0 = epoch();
        let mut lock = acquiring(t0, policy, seed);
        let mut net = Net::new(&mut nodes, t0);
        // Round 1, started by no notice, is lost: its clean-up is quiet.
        assert_eq!(
            net.next_event(&mut lock, Some(t0 + Duration::from_secs(1))),
            None
        );
        let quiet = |net: &Net<'_>| {
            net.sent
                .iter()
                .filter(|(_, c)| c.op() == Op::DeleteIfEquals)
                .all(|(_, c)| !c.notifies())
        };
        assert!(quiet(&net));
        for lost in 1..=3_u32 {
            // The woken round is lost too: its clean-up of the two keys it set is announced.
            let (pause, cleanups) = lose_a_woken_round(&mut net, &mut lock);
            let window = wake_jitter * (1 << (lost - 1));
            assert!(pause <= window, "seed {seed}, round {lost}");
            if lost == 3 {
                widest_after_three = widest_after_three.max(pause);
            }
            assert_eq!(
                cleanups,
                [(3, true), (4, true)],
                "seed {seed}, round {lost}"
            );
        }
    }
    assert!(
        widest_after_three > wake_jitter * 2,
        "after two lost woken rounds the window is 4x: {widest_after_three:?}"
    );
}

/// A woken round is lost as soon as a quorum cannot form, often before every node answered.
/// Its clean-up asks every node it may have set keys on to announce what it frees: the release
/// script announces only what it deleted. The native form (`DELIFEQ` then `PUBLISH`) announces
/// whether or not it deleted anything, so it announces only on the nodes heard granting: a
/// node not heard from mostly refused too, and would wake every waiter for a lock that is no
/// freer. A node heard granting in a later round is announced again.
#[test]
fn a_lost_rounds_native_clean_up_announces_only_on_nodes_heard_granting() {
    let policy = RetryPolicy::default()
        .delay(Duration::from_secs(5))
        .no_deadline()
        .wake_jitter(Duration::from_millis(1));
    let mut nodes = held_by_another(3, 5);
    let t0 = epoch();
    let mut lock = acquiring(t0, policy, 4);
    let mut net = Net::new(&mut nodes, t0);
    net.links[4] = Link::Silent;
    assert_eq!(
        net.next_event(&mut lock, Some(t0 + Duration::from_secs(1))),
        None
    );
    let native = crate::Dialect {
        delete_if_eq: crate::DeleteIfEq::DelIfEq,
        ..crate::Dialect::SCRIPTS
    };
    // Each clean-up: its node, whether its native form announces, the script's `ARGV[2]`.
    let forms = |net: &Net<'_>| -> Vec<(usize, bool, Vec<u64>)> {
        net.sent
            .iter()
            .filter(|(_, c)| c.op() == Op::DeleteIfEquals)
            .map(|(id, c)| {
                let announces = matches!(
                    c.redis_form_on(&native),
                    crate::RedisForm::DeleteEach { notify: true, .. }
                );
                let crate::RedisForm::Script { args, .. } = c.redis_form() else {
                    panic!("the release script");
                };
                (id.node(), announces, args.numbers().collect())
            })
            .collect()
    };
    let (_, cleanups) = lose_a_woken_round(&mut net, &mut lock);
    assert_eq!(cleanups, [(3, true), (4, true)]);
    assert_eq!(forms(&net), [(3, true, vec![1]), (4, false, vec![1])]);
    // Node 4 answers again: heard granting, its clean-up announces natively too.
    net.links[4] = Link::Up;
    lose_a_woken_round(&mut net, &mut lock);
    assert_eq!(forms(&net), [(3, true, vec![1]), (4, true, vec![1])]);
}

/// Wakes `lock` in its pause and lets the round the wake starts run and lose: how long the
/// wake left it pausing first, and each clean-up it sent (node, whether it announces).
fn lose_a_woken_round(net: &mut Net<'_>, lock: &mut Lifecycle) -> (Duration, Vec<(usize, bool)>) {
    let woken_at = net.now;
    lock.handle_wake(woken_at);
    let LockOutput::Wait { at, .. } = lock.poll_output(woken_at) else {
        panic!("a pause");
    };
    net.sent.clear();
    assert_eq!(
        net.next_event(lock, Some(at + Duration::from_millis(1))),
        None
    );
    let cleanups = net
        .sent
        .iter()
        .filter(|(_, c)| c.op() == Op::DeleteIfEquals)
        .map(|(id, c)| (id.node(), c.notifies()))
        .collect();
    (at - woken_at, cleanups)
}

/// A woken round that every node refused frees nothing: it sends no release, so it announces
/// nothing, and the other waiters that heard the same notice are not woken again for a lock
/// that is no freer (the loop that made 16 contending waiters send ~70 rounds per hand-over).
#[test]
fn a_round_every_node_refused_releases_and_announces_nothing() {
    let policy = RetryPolicy::default()
        .delay(Duration::from_secs(5))
        .no_deadline();
    let mut nodes = held_by_another(5, 5);
    let t0 = epoch();
    let mut lock = Lifecycle::acquire(
        t0,
        &config(policy),
        &LockRequest::new("r", TTL),
        &mut rng(3),
    )
    .expect("ok");
    let mut net = Net::new(&mut nodes, t0);
    assert_eq!(
        net.next_event(&mut lock, Some(t0 + Duration::from_secs(1))),
        None
    );
    for _ in 0..3 {
        let woken_at = net.now;
        lock.handle_wake(woken_at);
        let LockOutput::Wait { at, .. } = lock.poll_output(woken_at) else {
            panic!("a pause");
        };
        assert_eq!(
            net.next_event(&mut lock, Some(at + Duration::from_millis(1))),
            None
        );
    }
    let ops: Vec<Op> = net.sent.iter().map(|(_, c)| c.op()).collect();
    assert_eq!(
        ops,
        [Op::SetIfAbsent; 20],
        "four rounds of sets, no release"
    );
    assert!(
        net.nodes
            .iter()
            .all(|n| n.token(b"r") == Some(&b"other"[..]))
    );
}

/// The exact-TTL flag of each extension command sent so far.
fn exact_flags(net: &Net<'_>) -> Vec<bool> {
    net.sent
        .iter()
        .filter(|(_, cmd)| cmd.op() == Op::ExpireIfEquals)
        .map(|(_, cmd)| cmd.sets_exact_ttl())
        .collect()
}

fn extended(event: Option<LockEvent>) {
    match event {
        Some(LockEvent::Extended {
            outcome: ExtendOutcome::Extended { .. },
            ..
        }) => {}
        other => panic!("expected Extended, got {other:?}"),
    }
}

/// Five nodes that run `SET … IFEQ … PX` (an extension marked exact sets its TTL outright).
fn nodes_setting_exact_ttls() -> Vec<FakeNode> {
    let native = crate::Dialect {
        set_if_eq: true,
        ..crate::Dialect::SCRIPTS
    };
    vec![FakeNode::default().with_dialect(native); 5]
}

/// A node that runs `SET … IFEQ … PX` sets an extension's TTL exactly, so the engine lets an
/// extension take that form only when no key of the lock can hold a longer TTL: never below
/// the longest TTL its own rounds set, never for a lock resumed by token.
#[test]
fn an_extension_sets_its_ttl_exactly_only_when_no_key_can_hold_a_longer_one() {
    let config = config(RetryPolicy::default());
    let mut nodes = nodes_setting_exact_ttls();
    let mut net = Net::new(&mut nodes, epoch());
    let mut lock =
        Lifecycle::acquire(net.now, &config, &LockRequest::new("r", TTL), &mut rng(3)).expect("ok");
    let lease = acquired(net.next_event(&mut lock, None));
    // The nodes' clock stays at zero here: a key's expiry is the TTL it was last given.
    let mut expiries = Vec::new();
    for ttl in [TTL, 2 * TTL, TTL, 2 * TTL] {
        net.now += Duration::from_millis(500);
        lock.extend(net.now, ttl).expect("valid TTL");
        extended(net.next_event(&mut lock, None));
        expiries.push(net.nodes[0].keys[&b"r"[..]].1);
    }
    // Same TTL: exact. Longer: exact, and the ceiling rises. Shorter than the ceiling: the
    // script, which never shortens (the key keeps 2 × TTL). Back at the ceiling: exact again.
    assert_eq!(
        exact_flags(&net),
        [[true; 5], [true; 5], [false; 5], [true; 5]].concat()
    );
    assert_eq!(expiries, [TTL, 2 * TTL, 2 * TTL, 2 * TTL]);

    // Resumed by token: the TTL history is unknown, so never exact.
    let token = lease.token().as_bytes().to_vec();
    drop(lock);
    let sent_before = exact_flags(&net).len();
    let request = LockRequest::new("r", TTL).token(token);
    let mut resumed = Lifecycle::resume(net.now, &config, &request, &mut rng(4)).expect("ok");
    acquired(net.next_event(&mut resumed, None));
    net.now += Duration::from_millis(500);
    resumed.extend(net.now, 3 * TTL).expect("valid TTL");
    extended(net.next_event(&mut resumed, None));
    assert!(exact_flags(&net)[sent_before..].iter().all(|exact| !exact));
}

/// Negative control for the flag: a shorter extension sent in the exact form would cut the
/// keys below the validity the lease keeps — which is what the engine's refusal prevents.
#[test]
fn a_shorter_extension_in_the_exact_form_would_shorten_the_keys() {
    let config = config(RetryPolicy::default());
    let mut nodes = nodes_setting_exact_ttls();
    let mut net = Net::new(&mut nodes, epoch());
    let mut lock =
        Lifecycle::acquire(net.now, &config, &LockRequest::new("r", TTL), &mut rng(5)).expect("ok");
    acquired(net.next_event(&mut lock, None));
    let before = net.nodes[0].keys[&b"r"[..]].1;
    lock.extend(net.now, TTL / 4).expect("valid TTL");
    extended(net.next_event(&mut lock, None));
    assert_eq!(
        net.nodes[0].keys[&b"r"[..]].1,
        before,
        "the script kept the longer TTL"
    );
    // The same command, forced into the exact form, shortens the key.
    let (_, shorter) = net.sent.last().cloned().expect("sent");
    let mut forced = shorter.clone();
    forced.force_exact_ttl_for_tests();
    let mut node = net.nodes[0].clone();
    assert_eq!(node.run(Duration::ZERO, &forced), Reply::Int(1));
    assert!(
        node.keys[&b"r"[..]].1 < before,
        "an exact shorter TTL cuts the key"
    );
}

/// Five nodes that run no script (Valkey 9.1 without Lua), nodes 0 and 1 holding `r` for
/// another client until 1 s on their clocks.
fn nodes_without_scripts() -> Vec<FakeNode> {
    let no_lua = crate::Dialect {
        scripts: false,
        delete_if_eq: crate::DeleteIfEq::DelIfEq,
        set_if_eq: true,
        msetex: true,
        ..crate::Dialect::SCRIPTS
    };
    let mut nodes = vec![FakeNode::default().with_dialect(no_lua); 5];
    for node in nodes.iter_mut().take(2) {
        node.keys
            .insert(b"r".to_vec(), (b"other".to_vec(), Duration::from_secs(1)));
    }
    nodes
}

/// Five nodes, no restart check (the nodes without scripts above have no proof to offer).
fn config_without_restart_check() -> Config {
    Config::builder(5)
        .restart_aware(false)
        .build()
        .expect("valid")
}

/// The nodes each command of `op` that `net` sent went to, from `from` on.
fn targets(net: &Net<'_>, from: usize, op: Op) -> Vec<usize> {
    net.sent[from..]
        .iter()
        .filter(|(_, cmd)| cmd.op() == op)
        .map(|(id, _)| id.node())
        .collect()
}

fn extension_targets(net: &Net<'_>, from: usize) -> Vec<usize> {
    targets(net, from, Op::ExpireIfEquals)
}

fn release_targets(net: &Net<'_>, from: usize) -> Vec<usize> {
    targets(net, from, Op::DeleteIfEquals)
}

/// On nodes that run no script an extension of unknown TTL history raises each key's TTL
/// before it reads whose key it is (`MULTI; PEXPIRE … GT; GET …; EXEC`). A node that said our
/// token does not hold the lock — by refusing the acquisition or answering an extension "not
/// held" — is never asked again, so another holder's key there is never lengthened.
#[test]
fn a_node_that_said_not_held_is_never_asked_to_extend_again() {
    let config = config_without_restart_check();
    let mut nodes = nodes_without_scripts();
    let mut net = Net::new(&mut nodes, epoch());
    let mut lock =
        Lifecycle::acquire(net.now, &config, &LockRequest::new("r", TTL), &mut rng(6)).expect("ok");
    acquired(net.next_event(&mut lock, None));
    // A shorter extension: not exact, so the PEXPIRE GT form, asked of the 3 that granted.
    let from = net.sent.len();
    lock.extend(net.now, TTL / 2).expect("valid TTL");
    extended(net.next_event(&mut lock, None));
    assert_eq!(extension_targets(&net, from), [2, 3, 4]);
    for node in &net.nodes[..2] {
        assert_eq!(
            node.keys[&b"r"[..]],
            (b"other".to_vec(), Duration::from_secs(1)),
            "the other holder's key is untouched"
        );
    }
    // Node 2 loses our key: it answers "not held" once, and is never asked again.
    net.nodes[2].keys.remove(&b"r"[..]);
    let from = net.sent.len();
    lock.extend(net.now, TTL / 2).expect("valid TTL");
    net.next_event(&mut lock, None);
    assert_eq!(extension_targets(&net, from), [2, 3, 4]);
    let from = net.sent.len();
    lock.extend(net.now, TTL / 2).expect("valid TTL");
    net.next_event(&mut lock, None);
    assert_eq!(extension_targets(&net, from), [3, 4]);

    // Negative control: the same extension sent to node 0 lengthens the other holder's key.
    let (_, shorter) = net.sent.last().cloned().expect("sent");
    let mut node = net.nodes[0].clone();
    assert_eq!(node.run(Duration::ZERO, &shorter), Reply::Int(0));
    assert!(
        node.keys[&b"r"[..]].1 > Duration::from_secs(1),
        "the form raises a key it does not hold"
    );
}

/// On nodes that run no script a lock is resumed by its token (the form above), extended
/// again, and its keys never shortened.
#[test]
fn a_lock_is_resumed_and_extended_on_nodes_that_run_no_script() {
    let config = config_without_restart_check();
    let mut nodes = nodes_without_scripts();
    for node in &mut nodes {
        node.keys.clear();
    }
    let mut net = Net::new(&mut nodes, epoch());
    let mut lock = Lifecycle::acquire(
        net.now,
        &config,
        &LockRequest::new("r", 2 * TTL),
        &mut rng(7),
    )
    .expect("ok");
    let lease = acquired(net.next_event(&mut lock, None));
    let token = lease.token().as_bytes().to_vec();
    drop(lock);
    let request = LockRequest::new("r", TTL).token(token.clone());
    let mut resumed = Lifecycle::resume(net.now, &config, &request, &mut rng(8)).expect("ok");
    acquired(net.next_event(&mut resumed, None));
    resumed.extend(net.now, TTL).expect("valid TTL");
    extended(net.next_event(&mut resumed, None));
    for node in net.nodes.iter() {
        assert_eq!(
            node.keys[&b"r"[..]],
            (token.clone(), 2 * TTL),
            "held, and never shortened below the first TTL"
        );
    }
    // A wrong token resumes nothing and raises nothing but the TTL of the keys it asked about.
    let wrong = LockRequest::new("r", 3 * TTL).token(b"wrong".to_vec());
    let mut stranger = Lifecycle::resume(net.now, &config, &wrong, &mut rng(9)).expect("ok");
    match net.next_event(&mut stranger, None) {
        Some(LockEvent::NotAcquired(failure)) => {
            assert_eq!(failure.reason, FailureReason::NotHeld);
        }
        other => panic!("expected NotAcquired, got {other:?}"),
    }
    assert!(net.nodes.iter().all(|n| n.keys[&b"r"[..]].0 == token));
}

fn any_link() -> impl proptest::strategy::Strategy<Value = Link> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Link::Up),
        Just(Link::LostReply),
        Just(Link::Silent),
        Just(Link::Refused)
    ]
}

proptest::proptest! {
    /// However the nodes answer an acquisition (another token's key on some, replies lost,
    /// silent or refused links, several rounds), once it ends — acquired then released over
    /// working links, or not acquired — no node holds a key of any of its rounds' tokens, and
    /// every other token's key is untouched: the release's skip of the nodes that refused its
    /// winning round never leaves one of ours behind.
    #[test]
    fn a_drawn_token_lock_leaves_no_key_of_its_own(
        held in proptest::collection::vec(proptest::prelude::any::<bool>(), 5),
        links in proptest::collection::vec(any_link(), 5),
        attempts in 1_u32..4,
        seed in proptest::prelude::any::<u64>(),
    ) {
        let policy = RetryPolicy::default().attempts(attempts).no_deadline();
        let mut nodes = vec![FakeNode::default(); 5];
        for (node, held) in nodes.iter_mut().zip(&held) {
            if *held {
                node.put(b"r".to_vec(), b"other".to_vec());
            }
        }
        let mut net = Net::new(&mut nodes, epoch());
        net.links = links;
        let mut lock = acquiring(net.now, policy, seed);
        if let Some(LockEvent::Acquired(_)) = net.next_event(&mut lock, None) {
            net.links = vec![Link::Up; 5];
            lock.release(net.now);
            let released = net.next_event(&mut lock, None);
            proptest::prop_assert!(matches!(released, Some(LockEvent::Released(_))));
        }
        for (node, held) in net.nodes.iter().zip(&held) {
            let expected: Option<&[u8]> = held.then_some(&b"other"[..]);
            proptest::prop_assert_eq!(node.token(b"r"), expected);
        }
    }
}
