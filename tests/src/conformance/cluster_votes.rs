//! One cluster lending a lock several votes (`Builder::cluster_votes`), against real local
//! clusters: each vote's keys live in a slot of its own, served by a master of its own, so that
//! one master's failover costs a lock one vote instead of its only one.

use std::time::Duration;

use redlock_core::{Keyspace, LockRequest, NodeErrorKind, SitOutCause, Slot, Vote, vote_slots};
use redlock_redis::Error;

use super::adapter::{Adapter, HeldLock, Options};
use super::cluster::{build, failure_text, once};
use super::cluster_failover::{is_master, replica_get, sees_as_master};
use super::scenarios::{eventually, scripting_denied};
use crate::{CLUSTER_NODE_TIMEOUT, RedisCluster, ServerOptions, Servers};

const TTL: Duration = Duration::from_secs(10);

/// Vote `vote` of `votes`'s key for `key`: `{tag}key`, the tag of the vote's slot.
fn vote_key(votes: usize, vote: usize, key: &str) -> (Slot, String) {
    let slot = vote_slots(votes).nth(vote).expect("a vote");
    (slot, format!("{{{}}}{key}", slot.tag()))
}

/// A 3-master cluster lends each lock 3 votes: a lock of two resources with different hash
/// tags is held on every master (each vote's keys in its slot, checked on the servers), a
/// rival is refused, and when the master of vote 0 dies the lock is still extended by the other
/// two votes — at once, and after its replica (which sits out) took over — and a new lock is
/// granted. The cluster runs with `cluster-require-full-coverage no`: with the default `yes`,
/// every master refuses every key (`CLUSTERDOWN`) from the moment the cluster sees a master
/// fail until its replica takes over, and the votes fail together in that window. Negative
/// control: the same cluster as one vote cannot extend a lock whose slot was on that master
/// while it is down.
pub fn a_cluster_lends_votes_on_distinct_masters_and_a_lock_survives_a_failover<A: Adapter>() {
    let options = ServerOptions::new().args(["--cluster-require-full-coverage", "no"]);
    let mut cluster = RedisCluster::try_start_with(3, 1, &options).expect("a cluster");
    let seed = [cluster.masters()[2].url()];
    let options = Options {
        cluster_votes: vec![(0, 3)],
        ..once()
    };
    let client: A = build(&seed, &options);
    client.trust_every_node(3, "trust every vote's slots");
    let (stock, invoice) = ("{order-7}:stock", "invoice");
    assert_ne!(Slot::of(stock.as_bytes()), Slot::of(invoice.as_bytes()));
    let mut lock = client
        .acquire(LockRequest::new(stock, 6 * TTL).resource(invoice))
        .expect("granted by three votes");
    for vote in 0..3 {
        for resource in [stock, invoice] {
            let (slot, key) = vote_key(3, vote, resource);
            assert_eq!(
                cluster.master_of(key.as_bytes()),
                vote,
                "{slot} is on master {vote}"
            );
            // A lock is granted on a quorum: the last vote's write may still be on its way.
            assert!(
                eventually(Duration::from_secs(10), || {
                    cluster.masters()[vote].get(key.as_bytes()) == Some(lock.token())
                }),
                "vote {vote} holds {key}"
            );
        }
    }
    assert_eq!(
        cluster.get(stock.as_bytes()),
        None,
        "no key without a vote's tag"
    );
    let rival: A = build(&seed, &options);
    assert!(
        matches!(rival.try_lock(invoice, TTL), Err(Error::Contended(_))),
        "held"
    );

    // The same cluster as one vote, with a lock whose slot is on master 0.
    let single: A = build(&seed, &once());
    let on_master_0 = (0..)
        .map(|i| format!("single-{i}"))
        .find(|key| cluster.master_of(key.as_bytes()) == 0)
        .expect("a key on master 0");
    let mut single_lock = single.lock(&on_master_0, 6 * TTL).expect("granted");

    // The trust's epoch of vote 0's slot reached the replica: the promoted replica's sit-out
    // below is its identity's (`Restart`), not a missing epoch's.
    let (vote_0, _) = vote_key(3, 0, "after-failover");
    let epoch = Keyspace::Cluster.epoch_key(vote_0.tag().as_bytes());
    assert!(
        cluster.masters()[0].get(&*epoch).is_some(),
        "master 0 has vote 0's epoch"
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            replica_get(&cluster.replicas_of(0)[0], &epoch).is_some()
        }),
        "master 0's replica has vote 0's epoch"
    );
    cluster.kill_master(0);
    lock.extend(6 * TTL).unwrap_or_else(|err| {
        panic!(
            "{}: two of three votes extend while vote 0's master is down: {err}",
            A::NAME
        )
    });
    // Negative control: the same cluster as one vote cannot extend a lock on that master
    // while it is down — its only vote is gone.
    assert!(
        single_lock.extend(6 * TTL).is_err(),
        "{}: a single-vote lock on the dead master cannot be extended",
        A::NAME
    );
    let replica = &cluster.replicas_of(0)[0];
    assert!(
        eventually(CLUSTER_NODE_TIMEOUT * 10, || {
            is_master(replica) && sees_as_master(&cluster.masters()[2], replica)
        }),
        "the replica is promoted, and master 2 knows"
    );
    lock.extend(6 * TTL).unwrap_or_else(|err| {
        panic!(
            "{}: two of three votes extend after the failover: {err}",
            A::NAME
        )
    });
    let other = client
        .lock("after-failover", TTL)
        .expect("two of three votes grant");
    // The promoted replica sits out for the slots it took over: its vote does not count. A
    // master that runs scripts sets no key where it sits out; one without sets it in the
    // pipeline its reads are judged by (the release takes it with the others).
    assert_eq!(
        other.release().released(),
        if scripting_denied() { 3 } else { 2 },
        "released by the two voting masters (and, without scripts, the one sitting out)"
    );
    // With every vote needed, vote 0's sit-out shows: another process behind its slots' stamps.
    let every: A = build(
        &seed,
        &Options {
            cluster_votes: vec![(0, 3)],
            quorum: Some(3),
            ..once()
        },
    );
    match every.try_lock("after-failover", TTL) {
        Err(Error::Unavailable(detail)) => assert!(
            matches!(
                detail.nodes[0].result,
                Vote::Ineligible {
                    cause: SitOutCause::Restart,
                    ..
                }
            ),
            "{}: vote 0 sits out: {detail}",
            A::NAME
        ),
        other => panic!("{}: every vote needed: {other:?}", A::NAME),
    }
    let after = rival.try_lock(invoice, TTL);
    assert!(after.is_err(), "still held: {after:?}");
    assert!(lock.is_valid());
}

/// Votes need a cluster and one claim on it: a standalone server given votes refuses every
/// request (`not a cluster`, nothing set), bad settings are errors at build, and another URL
/// of a cluster that lends votes already is refused as the same cluster while the votes vote.
pub fn a_cluster_vote_needs_a_cluster_and_one_claim<A: Adapter>() {
    let standalone = Servers::start(1);
    let voted = Options {
        cluster_votes: vec![(0, 3)],
        restart_aware: Some(false),
        ..once()
    };
    let client: A = build(&standalone.urls(), &voted);
    let result = client.try_lock("lone", TTL);
    let text = failure_text(&result);
    match result {
        Err(Error::Unavailable(detail)) => {
            assert_eq!(detail.nodes.len(), 3, "three votes: {detail}");
            let votes: Vec<Vote> = detail.nodes.iter().map(|n| n.result).collect();
            let refused = Vote::Failed(NodeErrorKind::NotACluster);
            // The round ends once two refused: the third may not be waited for.
            assert!(
                votes.iter().filter(|&&v| v == refused).count() >= 2,
                "{detail}"
            );
            assert!(
                votes.iter().all(|&v| v == refused || v == Vote::Pending),
                "{detail}"
            );
        }
        other => panic!("{}: a standalone server cast votes: {other:?}", A::NAME),
    }
    assert!(
        text.contains("(vote 2 of 3)") && text.contains("failed (not a cluster"),
        "{text}"
    );
    assert!(
        text.contains("give it one vote, or list a cluster"),
        "{text}"
    );
    assert_eq!(standalone.servers()[0].dbsize(), 0, "nothing set");

    for (votes, expected) in [
        (vec![(0, 0)], "0 votes is not allowed; use 1 to 64"),
        (vec![(0, 65)], "65 votes is not allowed"),
        (
            vec![(1, 3)],
            "cluster_votes names node #1, but there are 1 node URLs",
        ),
        (vec![(0, 2), (0, 3)], "names this node twice"),
    ] {
        let options = Options {
            cluster_votes: votes,
            ..once()
        };
        match A::build(&standalone.urls(), &options) {
            Err(err) => assert!(err.to_string().contains(expected), "{err}"),
            Ok(_) => panic!("{}: built with {:?}", A::NAME, options.cluster_votes),
        }
    }

    // Which of the two claims the cluster first is a race; either way it never counts for
    // both: the votes' keys and the plain URL's key are never set together.
    let cluster = RedisCluster::start(3, 0);
    let urls = [cluster.masters()[0].url(), cluster.masters()[1].url()];
    let twice: A = build(&urls, &voted);
    let voted_keys: Vec<(usize, String)> = (0..3)
        .map(|vote| {
            let (slot, key) = vote_key(3, vote, "claimed");
            (cluster.master_of(slot.tag().as_bytes()), key)
        })
        .collect();
    let result = twice.try_lock("claimed", TTL);
    let text = failure_text(&result);
    match result {
        Ok(lock) => {
            // The votes claimed it: three votes of four, the plain URL refused.
            for (master, key) in &voted_keys {
                assert!(
                    eventually(Duration::from_secs(10), || {
                        cluster.masters()[*master].get(key) == Some(lock.token())
                    }),
                    "{key}"
                );
            }
            assert_eq!(cluster.get(b"claimed"), None, "the plain URL never voted");
        }
        Err(Error::Unavailable(detail)) => {
            // The plain URL claimed it: the votes refuse, and nothing of theirs is left.
            let votes: Vec<Vote> = detail.nodes.iter().map(|n| n.result).collect();
            let same = Vote::Failed(NodeErrorKind::SameCluster);
            assert!(votes[..3].contains(&same), "{detail}");
            assert!(
                votes[..3].iter().all(|&v| v == same || v == Vote::Pending),
                "{detail}"
            );
            assert!(text.contains("list each cluster once"), "{text}");
            for (master, key) in &voted_keys {
                assert_eq!(cluster.masters()[*master].get(key), None, "{key}");
            }
        }
        other => panic!("{}: one cluster claimed twice: {other:?}", A::NAME),
    }
}

/// A release by a client whose cluster lends 3 votes wakes a waiter of the same deployment:
/// each vote announces its own key (`{tag}key`) and the waiter listens on every vote's
/// channel. The waiter's pause is 30 s; it takes the lock well within 15 s of the release.
pub fn a_cluster_vote_release_wakes_a_waiter<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    let voted = Options {
        cluster_votes: vec![(0, 3)],
        restart_aware: Some(false),
        ..Options::default()
    };
    let resource = "voted-notice";
    // The waiter listens on every vote's channel: the third's names its tagged key.
    let keys: Vec<String> = (0..3).map(|vote| vote_key(3, vote, resource).1).collect();
    super::cluster::assert_release_wakes_waiter::<A>(&cluster, &voted, resource, &keys[2], &keys);
}

/// Votes that land on one master count it once: on a 2-master cluster lending 3 votes, the
/// third vote's slot (13653) is served by the second's master, so the third vote refuses every
/// request (`shared master`, nothing sent) and a lock is granted by the two others.
pub fn a_cluster_vote_on_an_earlier_votes_master_refuses<A: Adapter>() {
    let cluster = RedisCluster::start(2, 0);
    let seed = [cluster.masters()[0].url()];
    let voted = Options {
        cluster_votes: vec![(0, 3)],
        restart_aware: Some(false),
        ..once()
    };
    let all: A = build(
        &seed,
        &Options {
            quorum: Some(3),
            ..voted.clone()
        },
    );
    let result = all.try_lock("shared", TTL);
    let text = failure_text(&result);
    match result {
        Err(Error::Unavailable(detail)) => {
            assert_eq!(
                detail.nodes[2].result,
                Vote::Failed(NodeErrorKind::SharedMaster),
                "{detail}"
            );
        }
        other => panic!("{}: one master counted twice: {other:?}", A::NAME),
    }
    assert!(
        text.contains("move the votes' slots to masters of their own"),
        "{text}"
    );
    let client: A = build(&seed, &voted);
    let lock = client
        .lock("shared", TTL)
        .expect("two votes on two masters");
    for vote in 0..2 {
        let (_, key) = vote_key(3, vote, "shared");
        assert!(
            eventually(Duration::from_secs(10), || {
                cluster.masters()[vote].get(key.as_bytes()) == Some(lock.token())
            }),
            "vote {vote} holds {key}"
        );
    }
    let (_, third) = vote_key(3, 2, "shared");
    assert_eq!(
        cluster.masters()[1].get(third.as_bytes()),
        None,
        "never sent"
    );
}
