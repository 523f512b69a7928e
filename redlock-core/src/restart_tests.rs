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
use crate::sit_out::SitOutCause;
use crate::testing::{FakeNode, Net, epoch, rng};
use crate::{ConfigError, EPOCH_ID_KEY, EPOCH_KEY, Op};

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
            let fresh = Vote::Ineligible {
                for_ms: 30_000,
                cause: SitOutCause::NoEpoch,
            };
            assert_eq!(failure.votes, [fresh; 5]);
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
            let lost = Vote::Ineligible {
                for_ms: 30_000,
                cause: SitOutCause::NoEpoch,
            };
            let ineligible = failure.votes.iter().filter(|v| **v == lost).count();
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

/// A holder takes `r` on five nodes; nodes 0, 1, 2 then restart from a snapshot taken before
/// the lock (or fail over to replicas that missed it): the lock key is gone, the epoch they
/// kept is old. Returns the holder and a rival's try 5 ms later.
fn snapshot_restart(nodes: &mut [FakeNode]) -> (crate::Lease, Option<LockEvent>, Duration) {
    let config = config(true);
    let mut net = Net::new(nodes, epoch());
    net.node_clock = true;
    let Some(LockEvent::Acquired(holder)) = try_lock(&mut net, &config, 4) else {
        panic!("the first client takes the lock");
    };
    for node in net.nodes.iter_mut().take(3) {
        node.restart_from_snapshot();
    }
    net.now += Duration::from_millis(5);
    let rival = try_lock(&mut net, &config, 5);
    (holder, rival, net.now - epoch())
}

#[test]
fn a_node_with_a_new_identity_sits_out_though_its_epoch_is_old() {
    let mut nodes = vec![FakeNode::default(); 5];
    let (holder, rival, _) = snapshot_restart(&mut nodes);
    match rival {
        Some(LockEvent::NotAcquired(failure)) => {
            let restarted = Vote::Ineligible {
                for_ms: 30_000,
                cause: SitOutCause::Restart,
            };
            let ineligible = failure.votes[..3]
                .iter()
                .filter(|v| **v == restarted)
                .count();
            assert_eq!(ineligible, 3, "{failure:?}");
        }
        other => panic!("a second holder inside {holder:?}'s validity: {other:?}"),
    }
    // A new epoch, stamped with the new identity: the next restart is caught again, and a
    // trust (which stamps the identity) ends the wait at once.
    assert!(matches!(nodes[0].epoch(), Some(crate::Epoch::Began(_))));
    let config = config(true);
    let mut net = Net::new(&mut nodes, epoch() + Duration::from_millis(10));
    net.node_clock = true;
    let mut trust = Lifecycle::trust(net.now, &config, &mut rng(2));
    assert!(matches!(
        net.next_event(&mut trust, None),
        Some(LockEvent::Trusted(_))
    ));
    net.nodes[1].restart_from_snapshot();
    match try_lock(&mut net, &config, 8) {
        Some(LockEvent::NotAcquired(failure)) => {
            assert!(
                matches!(failure.votes[1], Vote::Ineligible { .. }),
                "{failure:?}"
            );
        }
        other => panic!("held by no one but 4 nodes voted: {other:?}"),
    }
}

/// Fresh nodes sit out `max_ttl`: a lock whose retry budget ends sooner fails after its first
/// round, since no later round could win (issue 26: not after spending the whole budget), and
/// names the refusals. The control: a sit-out shorter than the budget is retried through, and
/// the lock is taken once it ends.
#[test]
fn a_lock_stops_retrying_when_no_round_in_its_budget_could_win() {
    let build = |max_ttl: Duration| {
        Config::builder(5)
            .retry(RetryPolicy::default().deadline(Duration::from_secs(5)))
            .max_ttl(max_ttl)
            .build()
            .expect("valid")
    };
    let fail_fast = build(MAX_TTL);
    let mut nodes = vec![FakeNode::fresh(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    net.node_clock = true;
    match try_lock(&mut net, &fail_fast, 1) {
        Some(LockEvent::NotAcquired(failure)) => {
            assert_eq!(failure.attempts, 1, "{failure:?}");
            assert_eq!(failure.reason, FailureReason::Unavailable);
            assert!(
                failure
                    .votes
                    .iter()
                    .all(|vote| matches!(vote, Vote::Ineligible { .. })),
                "{failure:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        net.now < epoch() + Duration::from_secs(1),
        "no pause was spent"
    );
    // A sit-out of 2 s inside a 5 s budget: retried until the nodes vote.
    let patient = build(Duration::from_secs(2));
    let mut nodes = vec![FakeNode::fresh(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    net.node_clock = true;
    let request = LockRequest::new("r", Duration::from_secs(1));
    let mut lock = Lifecycle::acquire(net.now, &patient, &request, &mut rng(2)).expect("ok");
    match net.next_event(&mut lock, None) {
        Some(LockEvent::Acquired(lease)) => assert!(lease.attempts() > 1, "{lease:?}"),
        other => panic!("the control: retried through the sit-out: {other:?}"),
    }
    assert!(net.now >= epoch() + Duration::from_secs(2));
}

#[test]
fn a_refusal_names_its_cause_until_the_sit_out_ends() {
    let config = config(true);
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    net.node_clock = true;
    assert!(matches!(
        try_lock(&mut net, &config, 1),
        Some(LockEvent::Acquired(_))
    ));
    // Each node loses its memory another way.
    net.nodes[0].promote(7);
    net.nodes[1].restart_from_snapshot();
    net.nodes[2].forget_all();
    net.nodes[3].evict_lock_keys();
    net.nodes[4].swap_database();
    let causes = [
        SitOutCause::Replication,
        SitOutCause::Restart,
        SitOutCause::NoEpoch,
        SitOutCause::Eviction,
        SitOutCause::SwappedDatabase,
    ];
    // Named when the new epoch is stamped, and by every refusal after it (the stamp keeps it).
    for (seed, left) in [(2, 30_000), (3, 20_000)] {
        match try_lock(&mut net, &config, seed) {
            Some(LockEvent::NotAcquired(failure)) => {
                let expected = causes.map(|cause| Vote::Ineligible {
                    for_ms: left,
                    cause,
                });
                assert_eq!(failure.votes, expected, "{failure:?}");
            }
            other => panic!("{other:?}"),
        }
        net.now += Duration::from_secs(10);
    }
    // Once the sit-out ends, the stamp's cause decides nothing.
    net.now += Duration::from_secs(10);
    assert!(matches!(
        try_lock(&mut net, &config, 4),
        Some(LockEvent::Acquired(_))
    ));
}

#[test]
fn an_epoch_without_an_identity_adopts_the_nodes_at_once() {
    // A fresh FakeNode is trusted without an identity (as `SET redlock:epoch 0` leaves it, or a
    // previous release): the first check adopts the node's identity and votes at once.
    let config = config(true);
    let mut nodes = vec![FakeNode::default(); 5];
    let mut net = Net::new(&mut nodes, epoch());
    net.node_clock = true;
    assert!(matches!(
        try_lock(&mut net, &config, 1),
        Some(LockEvent::Acquired(_))
    ));
    // A trust on a node without scripts (`MSET`) empties the identity: a script adopts the
    // node's new one, with no wait.
    let native = crate::Dialect {
        scripts: false,
        ..crate::Dialect::SCRIPTS
    };
    for node in net.nodes.iter_mut() {
        node.restart_from_snapshot();
        *node = node.clone().with_dialect(native);
    }
    let mut trust = Lifecycle::trust(net.now, &config, &mut rng(2));
    assert!(matches!(
        net.next_event(&mut trust, None),
        Some(LockEvent::Trusted(_))
    ));
    for node in net.nodes.iter_mut() {
        *node = node.clone().with_dialect(crate::Dialect::SCRIPTS);
    }
    net.now += TTL;
    assert!(matches!(
        try_lock(&mut net, &config, 3),
        Some(LockEvent::Acquired(_))
    ));
}

#[test]
fn without_the_identity_check_a_snapshot_restart_lets_a_second_holder_in() {
    // The negative control: the scripts as before the identity key.
    let mut nodes = vec![FakeNode::default().with_identity_check(false); 5];
    let (holder, rival, now) = snapshot_restart(&mut nodes);
    match rival {
        Some(LockEvent::Acquired(second)) => {
            assert!(
                holder.valid_until() > epoch() + now,
                "both believe they hold it"
            );
            assert_ne!(second.token(), holder.token());
        }
        other => panic!("{other:?}"),
    }
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
fn the_epoch_key_and_its_identity_cannot_be_locked() {
    // A cluster's per-slot epochs too (`Keyspace::Cluster`), whatever keyspace a node has.
    let cluster = crate::Keyspace::Cluster;
    let (slot_epoch, slot_epoch_id) = (cluster.epoch_key(b"x"), cluster.epoch_id_key(b"x"));
    for reserved in [EPOCH_KEY, EPOCH_ID_KEY, &slot_epoch[..], &slot_epoch_id[..]] {
        let config = Config::builder(3)
            .key_prefix(&reserved[..4])
            .build()
            .expect("valid");
        let request = LockRequest::new(&reserved[4..], TTL);
        let refused = Lifecycle::acquire(epoch(), &config, &request, &mut rng(0));
        assert_eq!(refused.err(), Some(ConfigError::ReservedKey { index: 0 }));
    }
}
