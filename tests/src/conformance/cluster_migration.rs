//! A cluster node in the middle of a legacy slot migration (`SETSLOT MIGRATING`/`IMPORTING`,
//! some keys moved by `MIGRATE`), against a real local cluster: the source master answers `ASK`
//! for the slot's keys it no longer holds, and the client follows it to the importing master.
//! After a migration or a failover, a waiter's release-notice subscription follows the slot.

use std::time::{Duration, Instant};

use redlock_core::Vote;

use super::adapter::{Adapter, HeldLock, Options};
use super::cluster::{build, once, one_per_master, sole_vote};
use super::cluster_failover::fail_over;
use super::notices::{has_shard_listener, patient, woken};
use super::scenarios::eventually;
use crate::{RedisCluster, RedisServer};

const TTL: Duration = Duration::from_secs(10);

/// A slot of master 0 half-way through its move to master 2: a held key moved, another held
/// key still on the source, a fresh key in neither. Following `ASK`, a plain acquisition of the
/// fresh key is granted on the importing master; the rival is refused for both held keys (the
/// moved one by the importing master, never an error vote); the holder extends and releases
/// its moved key there. A restart-aware acquisition in the slot is an error vote (its key and
/// its slot's epoch are split between two masters, which `TRYAGAIN`), never a grant. After the
/// migration ends, the slot's keys are locked on the new master through `MOVED`.
/// Without following `ASK`, the fresh key, the extension and the release are error votes.
pub fn a_cluster_slot_mid_migration_is_followed_through_ask<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    let (from, to) = (&cluster.masters()[0], &cluster.masters()[2]);
    // One hash tag: every key below shares one slot, served by master 0.
    let tag = (0..)
        .map(|i| format!("{{asked-{i}}}"))
        .find(|tag| cluster.master_of(tag.as_bytes()) == 0)
        .expect("some tag lands on master 0");
    let [moved, kept, fresh, after] =
        ["moved", "kept", "fresh", "after"].map(|k| format!("{tag}{k}"));
    let plain = Options {
        restart_aware: Some(false),
        ..once()
    };
    // Both clients learn the map from master 1, which takes no part in the migration.
    let seed = [cluster.masters()[1].url()];
    let holder: A = build(&seed, &plain);
    let rival: A = build(&seed, &plain);
    let checked: A = build(
        &seed,
        &Options {
            restart_aware: Some(true),
            ..once()
        },
    );
    let mut moved_lock = holder.lock(&moved, TTL).expect("granted by master 0");
    let kept_lock = holder.lock(&kept, TTL).expect("granted by master 0");

    let slot = cluster.keyslot(tag.as_bytes());
    cluster
        .begin_migration(slot, from, to)
        .expect("SETSLOT IMPORTING and MIGRATING");
    cluster
        .migrate_keys(from, to, &[moved.clone().into_bytes()])
        .expect("MIGRATE of the held key");
    assert_eq!(
        importing(to, "GET", &moved),
        Some(moved_lock.token()),
        "the key moved"
    );
    assert!(
        sends_on(from, &moved),
        "the source sends the moved key's commands on with ASK"
    );

    assert_eq!(
        sole_vote(rival.try_lock(&moved, TTL)),
        Vote::Refused,
        "{}: the importing master refuses the moved key",
        A::NAME
    );
    assert_eq!(
        sole_vote(rival.try_lock(&kept, TTL)),
        Vote::Refused,
        "{}: the source refuses the key it still holds",
        A::NAME
    );
    let fresh_lock = rival
        .try_lock(&fresh, TTL)
        .unwrap_or_else(|err| panic!("{}: the fresh key through ASK: {err}", A::NAME));
    assert_eq!(
        importing(to, "GET", &fresh),
        Some(fresh_lock.token()),
        "on the importing master"
    );
    assert!(sends_on(from, &fresh), "never on the source");
    let outcome = checked.try_lock(&format!("{tag}checked"), TTL);
    assert!(
        matches!(sole_vote(outcome), Vote::Failed(_)),
        "{}: a restart-aware acquisition mid-migration is an error vote",
        A::NAME
    );

    moved_lock
        .extend(2 * TTL)
        .unwrap_or_else(|err| panic!("{}: extending the moved key through ASK: {err}", A::NAME));
    let pttl: i64 = importing(to, "PTTL", &moved).expect("PTTL");
    assert!(
        pttl > i64::try_from(TTL.as_millis()).unwrap_or(i64::MAX),
        "the extension reached it ({pttl} ms)"
    );
    // A shorter extension cannot set the TTL exactly: the extend script, or without scripts a
    // `MULTI; PEXPIRE … GT; GET; EXEC` (one `ASKING` before its `MULTI`). It holds, and never
    // shortens the key.
    moved_lock
        .extend(TTL / 2)
        .unwrap_or_else(|err| panic!("{}: a shorter extension through ASK: {err}", A::NAME));
    let kept: i64 = importing(to, "PTTL", &moved).expect("PTTL");
    assert!(
        kept > i64::try_from(TTL.as_millis()).unwrap_or(i64::MAX),
        "never shortened ({kept} ms)"
    );
    assert_eq!(moved_lock.release().released(), 1, "released through ASK");
    assert_eq!(
        importing::<Vec<u8>>(to, "GET", &moved),
        None,
        "gone from the importing master"
    );
    assert_eq!(fresh_lock.release().released(), 1);
    assert_eq!(kept_lock.release().released(), 1, "released on the source");

    cluster.end_migration(slot, from, to).expect("SETSLOT NODE");
    let lock = holder
        .lock(&after, TTL)
        .expect("granted by the new master after MOVED");
    assert_eq!(to.get(&after), Some(lock.token()));
    assert_eq!(lock.release().released(), 1);
}

/// A scale-out: a master joins after the client learnt the slot map and imports a slot of
/// master 0. Each lock in that slot follows an `ASK` to a master the map does not know; they
/// all go over one connection to it (kept with the map), not one connection per batch.
/// Without keeping it, the joined master counts a connection per lock and release.
pub fn an_ask_to_a_master_the_map_does_not_know_reuses_one_connection<A: Adapter>() {
    const LOCKS: usize = 6;
    let mut cluster = RedisCluster::start(3, 0);
    let tag = (0..)
        .map(|i| format!("{{joined-{i}}}"))
        .find(|tag| cluster.master_of(tag.as_bytes()) == 0)
        .expect("some tag lands on master 0");
    let plain = Options {
        restart_aware: Some(false),
        ..once()
    };
    let client: A = build(&[cluster.masters()[1].url()], &plain);
    let warm = client
        .lock(&format!("{tag}warm"), TTL)
        .expect("granted by master 0: the client learns the map");
    assert_eq!(warm.release().released(), 1);

    cluster
        .join_master(&crate::ServerOptions::new())
        .expect("a master joins the cluster");
    let joined = &cluster.joined()[0];
    let slot = cluster.keyslot(tag.as_bytes());
    cluster
        .begin_migration(slot, &cluster.masters()[0], joined)
        .expect("SETSLOT IMPORTING and MIGRATING");
    // One connection of the test's own, kept open: it reads the count and the keys.
    let mut observer = joined.client();
    let received = |observer: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(observer)
            .expect("INFO stats");
        info.lines()
            .find_map(|line| line.strip_prefix("total_connections_received:"))
            .and_then(|count| count.trim().parse().ok())
            .expect("total_connections_received")
    };
    let before = received(&mut observer);
    for i in 0..LOCKS {
        let key = format!("{tag}fresh-{i}");
        let lock = client
            .try_lock(&key, TTL)
            .unwrap_or_else(|err| panic!("{}: {key} through ASK: {err}", A::NAME));
        let (_, held): ((), Option<Vec<u8>>) = redis::pipe()
            .cmd("ASKING")
            .cmd("GET")
            .arg(&key)
            .query(&mut observer)
            .expect("ASKING, GET on the joined master");
        assert_eq!(held, Some(lock.token()), "on the joined master");
        assert_eq!(lock.release().released(), 1, "released through ASK");
    }
    let opened = received(&mut observer) - before;
    assert!(
        opened <= 1,
        "{}: {opened} connections to the joined master for {LOCKS} locks and releases through \
         ASK (one is kept)",
        A::NAME
    );
}

/// A waiter's subscription follows its key's slot to another master. Master 0 serves the key
/// when the waiter subscribes; the slot then moves to master 1 with the held key, master 0
/// drops the subscription (`sunsubscribe`), and the waiter learns the map again and subscribes
/// on master 1, where the holder's release (after `MOVED`) is announced. Without subscribing
/// again the waiter would sleep out its pause.
pub fn a_release_notice_follows_its_slot_to_another_master<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    let (from, to) = (&cluster.masters()[0], &cluster.masters()[1]);
    let resource = one_per_master(&cluster, "follow").swap_remove(0);
    assert_notice_follows::<A>(&cluster, &resource, (from, to), || {
        let slot = cluster.keyslot(resource.as_bytes());
        cluster
            .migrate_slot(slot, from, to)
            .expect("the slot moves with its key");
    });
}

/// A waiter's subscription follows a planned failover: master 0's replica takes over
/// (`CLUSTER FAILOVER`) while the waiter listens on master 0; the demoted master drops the
/// subscription (`sunsubscribe`), the waiter learns the map again and subscribes on the
/// promoted replica, where the holder's release (after `MOVED`) is announced.
pub fn a_release_notice_follows_a_failover<A: Adapter>() {
    let cluster = RedisCluster::start(3, 1);
    let resource = one_per_master(&cluster, "failed-over").swap_remove(0);
    let (demoted, promoted) = (&cluster.masters()[0], &cluster.replicas_of(0)[0]);
    assert_notice_follows::<A>(&cluster, &resource, (demoted, promoted), || {
        fail_over(&cluster, promoted, None);
    });
}

/// A holder holds `resource`, served by `from`, while a waiter (30 s pause) listens there;
/// `moves` hands the slot to `to`. The waiter subscribes again on `to` (and `from` lets the
/// channel go), and the holder's release wakes it well within 15 s. Both clients learn the map
/// from master 2, which takes no part in the move.
fn assert_notice_follows<A: Adapter>(
    cluster: &RedisCluster,
    resource: &str,
    (from, to): (&RedisServer, &RedisServer),
    moves: impl FnOnce(),
) {
    let plain = Options {
        restart_aware: Some(false),
        ..Options::default()
    };
    let seed = [cluster.masters()[2].url()];
    let holder: A = build(&seed, &plain);
    let pause = Duration::from_secs(30);
    let waiter: A = build(
        &seed,
        &Options {
            retry: Some(patient(pause)),
            ..plain
        },
    );
    let held = holder.lock(resource, 6 * TTL).expect("lock");
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let lock = waiter.lock(resource, TTL);
            (Instant::now(), lock)
        });
        let subscribed = |server: &RedisServer| {
            eventually(Duration::from_secs(20), || {
                has_shard_listener(server, resource)
            })
        };
        assert!(subscribed(from), "the waiter subscribed on {}", from.addr());
        moves();
        assert!(
            subscribed(to),
            "the waiter subscribed again on {}",
            to.addr()
        );
        assert!(
            !has_shard_listener(from, resource),
            "{} let it go",
            from.addr()
        );
        let released_at = Instant::now();
        assert_eq!(held.release().released(), 1);
        let lock = woken::<A>(released_at, waiting.join().expect("waiter"), pause);
        assert_eq!(to.get(resource), Some(lock.token()));
        assert_eq!(lock.release().released(), 1);
    });
}

/// `command key` on the importing master `server`, after `ASKING` (without it, the master
/// sends the key's commands back to the source with `MOVED`).
fn importing<T: redis::FromRedisValue>(
    server: &RedisServer,
    command: &str,
    key: &str,
) -> Option<T> {
    let (_, value): ((), Option<T>) = redis::pipe()
        .cmd("ASKING")
        .cmd(command)
        .arg(key)
        .query(&mut server.client())
        .unwrap_or_else(|err| panic!("ASKING, {command} {key} on {}: {err}", server.addr()));
    value
}

/// Whether the migration's source `server` answers `ASK` for `key`: it does not hold the key.
fn sends_on(server: &RedisServer, key: &str) -> bool {
    let answer = redis::cmd("GET")
        .arg(key)
        .query::<Option<Vec<u8>>>(&mut server.client());
    answer.is_err_and(|err| err.code() == Some("ASK"))
}
