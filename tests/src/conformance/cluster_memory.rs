//! A cluster master's memory under open, proven connections: each master's connection proves
//! the slots it serves one by one (`CLIENT CACHING YES`, then the slot's epoch), and the node
//! pushes a change of any of those epochs to it. A slot that loses its memory while the
//! connection stays open (its epoch and a held key gone: evicted, deleted) ends that slot's
//! proof alone; the next acquisition there proves again, finds no epoch, and sits out. The
//! negative control ignores the pushes: the rival's vouched `SET` gets the lock the holder
//! still holds.

use std::time::Duration;

use redlock_core::{Keyspace, SitOutCause, Slot, Vote, WatchFault};

use super::adapter::{Adapter, HeldLock, Options};
use super::cluster::{build, once, sole_vote};
use super::scenarios::scripting_denied;
use crate::{RedisCluster, RedisServer};

const TTL: Duration = Duration::from_secs(10);

/// Two resources served by master 0 when the cluster formed, in two slots of their own.
fn two_slots_on_master_0(cluster: &RedisCluster) -> [String; 2] {
    let mut found: Vec<String> = Vec::new();
    for i in 0.. {
        let key = format!("memory-{i}");
        let slot = cluster.keyslot(key.as_bytes());
        if cluster.master_of(key.as_bytes()) == 0
            && found.iter().all(|k| cluster.keyslot(k.as_bytes()) != slot)
        {
            found.push(key);
            if found.len() == 2 {
                break;
            }
        }
    }
    [found[0].clone(), found[1].clone()]
}

/// A holder that trusted every slot, and a rival (with `fault`, if any), both seeded with
/// master `seed`.
fn holder_and_rival<A: Adapter>(
    cluster: &RedisCluster,
    seed: usize,
    fault: Option<WatchFault>,
) -> (A, A) {
    let seed = [cluster.masters()[seed].url()];
    let holder: A = build(&seed, &once());
    holder.trust_every_node(1, "trust every slot");
    let rival: A = build(
        &seed,
        &Options {
            memory_watch_fault: fault,
            ..once()
        },
    );
    (holder, rival)
}

/// The proofs `master` ran so far (each starts with `CLIENT CACHING YES`).
fn proofs(master: &RedisServer) -> u64 {
    master.calls("client|caching")
}

/// A holder's key of `resources[0]` on master 0, under a rival whose connection proved both
/// resources' slots there (with `fault`, if any); then that slot's epoch and the key are
/// deleted (a loss of the slot's memory the connection stays open through). Returns the
/// holder's lock and the rival's try.
fn rival_after_a_slot_loss<A: Adapter>(
    fault: Option<WatchFault>,
) -> (
    A::Lock,
    Result<A::Lock, redlock_redis::Error>,
    A,
    RedisCluster,
) {
    let cluster = RedisCluster::start(3, 0);
    let resources = two_slots_on_master_0(&cluster);
    let (holder, rival) = holder_and_rival::<A>(&cluster, 1, fault);
    let master = &cluster.masters()[0];
    let before = proofs(master);
    for resource in &resources {
        let lock = rival.lock(resource, TTL).expect("granted");
        assert_eq!(lock.release().released(), 1);
    }
    assert!(proofs(master) >= before + 2, "the rival proved both slots");
    let lock = holder.lock(&resources[0], 6 * TTL).expect("granted");
    let epoch = Keyspace::Cluster.epoch_key(Slot::of(resources[0].as_bytes()).tag().as_bytes());
    let deleted: u64 = redis::cmd("DEL")
        .arg(&*epoch)
        .arg(&resources[0])
        .query(&mut master.client())
        .expect("DEL");
    assert_eq!(deleted, 2, "the slot's epoch and the held key");
    let outcome = rival.try_lock(&resources[0], TTL);
    (lock, outcome, rival, cluster)
}

/// The slot's epoch pushed: the rival's proof of that slot ends, its next acquisition proves,
/// finds no epoch and sits out — refused while the holder is valid. The other slot's proof on
/// the same connection stands: its next lock goes without a proof.
pub fn a_cluster_slot_that_lost_its_memory_refuses_a_proven_connection<A: Adapter>() {
    let (lock, outcome, rival, cluster) = rival_after_a_slot_loss::<A>(None);
    // A connection that read the push before the acquisition went out proves again and finds
    // no epoch; one that reads it with the reply to its vouched `SET` refuses that reply.
    match sole_vote(outcome) {
        Vote::Ineligible {
            cause: SitOutCause::NoEpoch | SitOutCause::Changed,
            ..
        } => {}
        other => panic!("{}: the slot must sit out, got {other:?}", A::NAME),
    }
    assert!(lock.is_valid(), "the holder is still valid");
    let master = &cluster.masters()[0];
    let other = &two_slots_on_master_0(&cluster)[1];
    let before = proofs(master);
    let second = rival.lock(other, TTL).expect("the other slot votes");
    assert_eq!(
        proofs(master),
        before,
        "{}: the other slot's proof stood",
        A::NAME
    );
    assert_eq!(second.release().released(), 1);
}

/// Negative control: the same loss with the pushes ignored — the rival's vouched `SET` gets
/// the lock the holder still holds.
pub fn a_cluster_slot_that_lost_its_memory_votes_for_a_deaf_connection<A: Adapter>() {
    let (lock, outcome, _, _) = rival_after_a_slot_loss::<A>(Some(WatchFault::Deaf));
    let second = outcome
        .unwrap_or_else(|err| panic!("{}: deaf, the rival should get the lock: {err}", A::NAME));
    assert!(lock.is_valid() && second.is_valid(), "two holders");
}

/// Many first locks at once, each of its own slot on master 0, from a fresh client: however
/// the driver batches them, each lock is granted in its one round — on a master without
/// scripts a batch proves one slot and sends the acquisitions of the others again as batches of
/// their own (never a `no safe form` vote), so every slot proves.
pub fn a_cluster_master_proves_each_slot_of_concurrent_first_locks<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    let mut resources: Vec<String> = Vec::new();
    for i in 0.. {
        let key = format!("spread-{i}");
        let slot = cluster.keyslot(key.as_bytes());
        if cluster.master_of(key.as_bytes()) == 0
            && resources
                .iter()
                .all(|k| cluster.keyslot(k.as_bytes()) != slot)
        {
            resources.push(key);
            if resources.len() == 16 {
                break;
            }
        }
    }
    let seed = [cluster.masters()[1].url()];
    build::<A>(&seed, &once()).trust_every_node(1, "trust every slot");
    for round in 0..3 {
        let client: A = build(&seed, &once());
        let before = proofs(&cluster.masters()[0]);
        std::thread::scope(|scope| {
            let locks: Vec<_> = resources
                .iter()
                .map(|resource| scope.spawn(|| client.lock(resource, TTL)))
                .collect();
            for (resource, lock) in resources.iter().zip(locks) {
                let lock = lock
                    .join()
                    .expect("a locking thread")
                    .unwrap_or_else(|err| panic!("{}: round {round}, {resource}: {err}", A::NAME));
                assert_eq!(lock.release().released(), 1);
            }
        });
        // Without scripts each slot proved (nothing else checks a slot); with scripts an
        // acquisition batched beside another slot's proof runs its checked script instead.
        let made = proofs(&cluster.masters()[0]) - before;
        let least = if scripting_denied() { 16 } else { 1 };
        assert!(
            made >= least,
            "{}: at least {least} of the 16 slots proved on the new connection ({made})",
            A::NAME
        );
    }
}

/// A holder's key of a resource on master 0, under a rival whose connection proved its slot
/// (with `fault`, if any); then master 1 claims the slot (master 0 drops the slot's keys, the
/// epoch with them) and master 0 takes it back, empty. Returns the holder's lock and the
/// rival's try.
fn rival_after_a_slot_drop<A: Adapter>(
    fault: Option<WatchFault>,
) -> (A::Lock, Result<A::Lock, redlock_redis::Error>) {
    let cluster = RedisCluster::start(3, 0);
    let resource = two_slots_on_master_0(&cluster)[0].clone();
    let slot = cluster.keyslot(resource.as_bytes());
    let (holder, rival) = holder_and_rival::<A>(&cluster, 2, fault);
    let master = &cluster.masters()[0];
    let before = proofs(master);
    let first = rival.lock(&resource, TTL).expect("granted");
    assert_eq!(first.release().released(), 1);
    assert!(proofs(master) > before, "the rival proved the slot");
    let lock = holder.lock(&resource, 6 * TTL).expect("granted");
    cluster
        .claim_slot(slot, &cluster.masters()[1])
        .expect("master 1 claims the slot");
    cluster
        .claim_slot(slot, master)
        .expect("master 0 takes it back");
    assert_eq!(master.get(&resource), None, "the slot came back empty");
    let outcome = rival.try_lock(&resource, TTL);
    (lock, outcome)
}

/// A slot its master lost and got back empty under a rival's connection that proved it before:
/// refused while the holder is valid — on Valkey the drop is pushed (the next acquisition
/// proves and finds no epoch), on Redis, which drops the slot's keys unheard, the vouched `SET`
/// reads the slot's epoch with it and finds it gone.
pub fn a_cluster_slot_dropped_and_given_back_refuses_a_proven_connection<A: Adapter>() {
    let (lock, outcome) = rival_after_a_slot_drop::<A>(None);
    match sole_vote(outcome) {
        Vote::Ineligible { .. } => {}
        other => panic!("{}: the slot's master must sit out, got {other:?}", A::NAME),
    }
    assert!(lock.is_valid(), "the holder is still valid");
}

/// Negative control: the same with the pushes ignored and no seal — two holders.
pub fn a_cluster_slot_dropped_and_given_back_votes_for_a_deaf_connection<A: Adapter>() {
    let (lock, outcome) = rival_after_a_slot_drop::<A>(Some(WatchFault::Deaf));
    let second = outcome.unwrap_or_else(|err| {
        panic!(
            "{}: deaf and unsealed, the rival should get the lock: {err}",
            A::NAME
        )
    });
    assert!(lock.is_valid() && second.is_valid(), "two holders");
}
