//! Unit tests of restart-aware voting: a node that lost its memory does not vote for the longest
//! TTL in use, by its own clock; a fresh node waits the same once, unless trusted.

use std::time::Duration;

use crate::config::Config;
use crate::event::{LockEvent, LockOutput};
use crate::lifecycle::Lifecycle;
use crate::quorum::FailureReason;
use crate::request::LockRequest;
use crate::retry::RetryPolicy;
use crate::round::Vote;
use crate::testing::{FakeNode, Net, epoch, rng};
use crate::{ConfigError, EPOCH_KEY, Op};

const TTL: Duration = Duration::from_secs(10);
const MAX_TTL: Duration = Duration::from_secs(30);

fn config(restart_aware: bool) -> Config {
    Config::builder(5)
        .retry(RetryPolicy::once())
        .max_ttl(MAX_TTL)
        .restart_aware(restart_aware)
        .build()
        .expect("valid")
}

fn try_lock(net: &mut Net<'_>, config: &Config, seed: u64) -> Option<LockEvent> {
    let request = LockRequest::new("r", TTL);
    let mut lock = Lifecycle::acquire(net.now, config, &request, &mut rng(seed)).expect("ok");
    net.next_event(&mut lock, None)
}

#[test]
fn fresh_nodes_wait_out_the_longest_ttl_once_unless_trusted() {
    let config = config(true);
    let mut nodes = vec![FakeNode::fresh(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    net.node_clock = true;
    match try_lock(&mut net, &config, 1) {
        Some(LockEvent::NotAcquired(failure)) => {
            assert_eq!(failure.reason, FailureReason::Unavailable);
            assert_eq!(failure.votes, [Vote::Ineligible { for_ms: 30_000 }; 5]);
        }
        other => panic!("{other:?}"),
    }
    // An operator who knows no lock is live trusts them: they vote at once.
    let mut trust = Lifecycle::trust(net.now, &config, &mut rng(2));
    match net.next_event(&mut trust, None) {
        Some(LockEvent::Trusted(votes)) => assert_eq!(votes, [Vote::Granted; 5]),
        other => panic!("{other:?}"),
    }
    assert!(net.sent.iter().any(|(_, c)| c.op() == Op::Trust));
    assert!(matches!(
        try_lock(&mut net, &config, 3),
        Some(LockEvent::Acquired(_))
    ));
}

#[test]
fn a_node_that_lost_its_memory_does_not_vote_for_the_longest_ttl_by_its_clock() {
    let config = config(true);
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    net.node_clock = true;
    let Some(LockEvent::Acquired(holder)) = try_lock(&mut net, &config, 4) else {
        panic!("the first client takes the lock");
    };
    // Nodes 0, 1, 2 restart empty at once (or are flushed): the Redis page's failure.
    for node in net.nodes.iter_mut().take(3) {
        node.forget_all();
    }
    net.now += Duration::from_millis(5);
    match try_lock(&mut net, &config, 5) {
        Some(LockEvent::NotAcquired(failure)) => {
            let ineligible = failure
                .votes
                .iter()
                .filter(|v| matches!(v, Vote::Ineligible { for_ms } if *for_ms == 30_000))
                .count();
            assert_eq!(ineligible, 3, "{failure:?}");
        }
        other => panic!("a second holder inside the first one's validity: {other:?}"),
    }
    // They keep refusing until MAX_TTL has passed on their clock (since their first acquire
    // after the loss), which is after the holder's validity ended.
    net.now += MAX_TTL - Duration::from_millis(10);
    assert!(holder.valid_until() < net.now);
    assert!(matches!(
        try_lock(&mut net, &config, 6),
        Some(LockEvent::NotAcquired(_))
    ));
    net.now += Duration::from_millis(10);
    assert!(matches!(
        try_lock(&mut net, &config, 7),
        Some(LockEvent::Acquired(_))
    ));
}

#[test]
fn without_restart_aware_voting_the_redis_page_failure_happens() {
    // The negative control: the same schedule with the feature off grants a second holder
    // while the first is still valid.
    let config = config(false);
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    net.node_clock = true;
    let Some(LockEvent::Acquired(holder)) = try_lock(&mut net, &config, 4) else {
        panic!("the first client takes the lock");
    };
    for node in net.nodes.iter_mut().take(3) {
        node.forget_all();
    }
    net.now += Duration::from_millis(5);
    match try_lock(&mut net, &config, 5) {
        Some(LockEvent::Acquired(second)) => {
            assert!(holder.valid_until() > net.now, "both believe they hold it");
            assert_ne!(second.token(), holder.token());
        }
        other => panic!("{other:?}"),
    }
    let mut acquires = net.sent.iter().filter(|(_, c)| c.op() == Op::SetIfAbsent);
    assert!(
        acquires.all(|(_, c)| matches!(c.redis_form(), crate::RedisForm::Set { .. })),
        "without the feature an acquire is a plain SET NX PX"
    );
}

#[test]
fn every_ttl_is_bounded_by_the_longest_ttl_in_use() {
    let t0 = epoch();
    let request = LockRequest::new("r", MAX_TTL + Duration::from_millis(1));
    let refused = Lifecycle::acquire(t0, &config(true), &request, &mut rng(0));
    assert_eq!(
        refused.err(),
        Some(ConfigError::TtlAboveMax {
            got: MAX_TTL + Duration::from_millis(1),
            max_ttl: MAX_TTL
        })
    );
    assert!(Lifecycle::acquire(t0, &config(false), &request, &mut rng(0)).is_ok());
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, t0);
    let config = config(true);
    let mut lock =
        Lifecycle::acquire(t0, &config, &LockRequest::new("r", TTL), &mut rng(1)).expect("ok");
    assert!(matches!(
        net.next_event(&mut lock, None),
        Some(LockEvent::Acquired(_))
    ));
    assert!(matches!(
        lock.extend(t0, MAX_TTL * 2),
        Err(ConfigError::TtlAboveMax { .. })
    ));
    assert_eq!(lock.poll_output(t0), LockOutput::Idle, "nothing was sent");
}

#[test]
fn the_epoch_key_cannot_be_locked() {
    let config = Config::builder(3)
        .key_prefix(&EPOCH_KEY[..4])
        .build()
        .expect("valid");
    let request = LockRequest::new(&EPOCH_KEY[4..], TTL);
    let refused = Lifecycle::acquire(epoch(), &config, &request, &mut rng(0));
    assert_eq!(refused.err(), Some(ConfigError::ReservedKey { index: 0 }));
}
