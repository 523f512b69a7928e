//! Unit tests of fencing tokens minted by a quorum: the fence of each holder is larger than
//! every earlier holder's, because commit quorums and grant quorums intersect.

use std::time::Duration;

use crate::Op;
use crate::config::Config;
use crate::event::LockEvent;
use crate::lease::Lease;
use crate::lifecycle::Lifecycle;
use crate::request::LockRequest;
use crate::retry::RetryPolicy;
use crate::testing::{FakeNode, Link, Net, epoch, rng};

const TTL: Duration = Duration::from_secs(10);

fn config() -> Config {
    Config::builder(5)
        .retry(RetryPolicy::once())
        .build()
        .expect("valid")
}

fn fenced_lock(net: &mut Net<'_>, seed: u64) -> Option<LockEvent> {
    let request = LockRequest::new("r", TTL).fenced();
    let mut lock = Lifecycle::acquire(net.now, &config(), &request, &mut rng(seed)).expect("ok");
    let event = net.next_event(&mut lock, None);
    if let Some(LockEvent::Acquired(_)) = &event {
        lock.release(net.now);
        assert!(matches!(
            net.next_event(&mut lock, None),
            Some(LockEvent::Released(_))
        ));
    }
    event
}

fn fence_of(event: Option<LockEvent>) -> u64 {
    match event {
        Some(LockEvent::Acquired(lease)) => lease.fence().expect("a fenced lock has a fence"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_fenced_lock_commits_its_fence_on_the_granting_nodes() {
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    net.node_clock = true;
    net.now += Duration::from_millis(1_234);
    let fence = fence_of(fenced_lock(&mut net, 1));
    // Node clocks read 1234 ms and no counter existed: the fence is the clock plus one.
    assert_eq!(fence, 1_235);
    for node in net.nodes.iter() {
        assert_eq!(
            node.fence_counter(Duration::from_millis(1_234), b"r"),
            Some(1_235)
        );
    }
    let ops: Vec<Op> = net.sent.iter().map(|(_, c)| c.op()).collect();
    assert_eq!(ops.iter().filter(|op| **op == Op::CommitFence).count(), 5);
    // One round trip more than a plain lock: acquire, commit, release.
    assert_eq!(ops.len(), 15);
}

#[test]
fn successive_holders_get_strictly_larger_fences_even_on_a_still_clock() {
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let fences: Vec<u64> = (0..5)
        .map(|seed| fence_of(fenced_lock(&mut net, seed)))
        .collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[test]
fn a_later_holder_sees_the_earlier_fence_through_the_quorum_intersection() {
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    // Holder A reaches only nodes 0, 1, 2.
    net.links = vec![Link::Up, Link::Up, Link::Up, Link::Silent, Link::Silent];
    let first = fence_of(fenced_lock(&mut net, 1));
    // Holder B reaches only nodes 2, 3, 4: node 2 carries A's fence.
    net.links = vec![Link::Silent, Link::Silent, Link::Up, Link::Up, Link::Up];
    let second = fence_of(fenced_lock(&mut net, 2));
    assert!(second > first, "{second} after {first}");
}

#[test]
fn without_the_commit_a_later_holder_could_reuse_a_fence() {
    // The negative control of the intersection argument: counters raised on nodes 0, 1 only
    // (a commit that did not reach a quorum) are not seen by a quorum on 2, 3, 4.
    let mut nodes = vec![FakeNode::default(); 5];
    nodes[0].set_fence_counter(b"r", 100);
    nodes[1].set_fence_counter(b"r", 100);
    let mut net = Net::new(&mut nodes, epoch());
    net.links = vec![Link::Silent, Link::Silent, Link::Up, Link::Up, Link::Up];
    let fence = fence_of(fenced_lock(&mut net, 3));
    assert!(
        fence <= 100,
        "only a committed quorum orders fences: {fence}"
    );
}

#[test]
fn a_commit_refused_by_a_quorum_means_not_acquired_and_released() {
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let request = LockRequest::new("r", TTL).fenced();
    let mut lock = Lifecycle::acquire(net.now, &config(), &request, &mut rng(4)).expect("ok");
    // Round 1 goes out and is answered; before the commit, three nodes lose our keys.
    let mut ids = Vec::new();
    while let crate::LockOutput::Send(t) = lock.poll_output(net.now) {
        let reply = net.nodes[t.id.node()].run(Duration::ZERO, &t.command);
        ids.push((t.id, reply));
    }
    for node in net.nodes.iter_mut().take(3) {
        node.keys.clear();
    }
    for (id, reply) in ids {
        lock.handle_reply(net.now, id, reply);
    }
    match net.next_event(&mut lock, None) {
        Some(LockEvent::NotAcquired(failure)) => assert_eq!(failure.attempts, 1),
        other => panic!("{other:?}"),
    }
    assert!(
        net.nodes
            .iter()
            .all(|n| n.keys.keys().all(|k| k.starts_with(b"redlock:fence:")))
    );
    assert!(net.sent.iter().any(|(_, c)| c.op() == Op::CommitFence));
    assert!(net.sent.iter().any(|(_, c)| c.op() == Op::DeleteIfEquals));
}

#[test]
fn a_plain_lock_has_no_fence_and_sends_no_commit() {
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    let mut lock = Lifecycle::acquire(net.now, &config(), &LockRequest::new("r", TTL), &mut rng(5))
        .expect("ok");
    let lease: Lease = match net.next_event(&mut lock, None) {
        Some(LockEvent::Acquired(lease)) => lease,
        other => panic!("{other:?}"),
    };
    assert_eq!(lease.fence(), None);
    assert!(
        net.sent
            .iter()
            .all(|(_, c)| c.op() == Op::SetIfAbsent && !c.is_fenced())
    );
}

#[test]
fn fence_counters_cannot_be_locked() {
    let request = LockRequest::new("redlock:fence:r", TTL);
    let refused = Lifecycle::acquire(epoch(), &config(), &request, &mut rng(0));
    assert_eq!(
        refused.err(),
        Some(crate::ConfigError::ReservedKey { index: 0 })
    );
}
