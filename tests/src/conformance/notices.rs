//! Release notices, on every adapter: a waiter whose pause is far longer than the test hears the
//! holder's release and takes the lock long before the pause could end — and, as the control, a
//! key that disappears without a release (expiry, a manual `DEL`) wakes nobody.
//!
//! No assertion bounds a latency: the pauses are 30 s and 6 s, the checks allow a large share of
//! them, so the outcomes cannot come from a pause ending on a loaded machine.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use redlock_core::{RetryPolicy, released_channel};

use super::adapter::{Adapter, HeldLock, Options};
use super::scenarios::eventually;
use crate::{RedisServer, ServerOptions, Servers};

const TTL: Duration = Duration::from_secs(60);

/// A waiter's retry policy: only after `pause` (no jitter), with no deadline. Ten attempts:
/// each node's (or vote's) release notice can wake the waiter before the holder's release
/// reached the other nodes, and so can the notice of the waiter's own undo of a failed round;
/// a fast waiter spends a round on each such wake-up (three did not always last, under load).
/// A round that no notice woke waits out `pause`, which the tests' timing assertion catches.
pub(super) fn patient(pause: Duration) -> RetryPolicy {
    RetryPolicy::default()
        .delay(pause)
        .jitter(Duration::ZERO)
        .no_deadline()
        .attempts(10)
}

/// A waiter that only retries after `pause`.
fn waiter<A: Adapter>(nodes: &Servers, pause: Duration) -> A {
    let options = Options {
        retry: Some(patient(pause)),
        ..Options::default()
    };
    A::build(&nodes.urls(), &options).unwrap_or_else(|err| panic!("{}: {err}", A::NAME))
}

/// Whether `server` has a subscriber on `key`'s release channel.
pub(super) fn has_listener(server: &RedisServer, key: &str) -> bool {
    listeners(server, key) >= 1
}

/// How many subscribers `server` has on `key`'s release channel (0 if it cannot say).
fn listeners(server: &RedisServer, key: &str) -> i64 {
    let channel = released_channel(key.as_bytes());
    // A flat [channel, count] answer.
    let answer: redis::RedisResult<HashMap<Vec<u8>, i64>> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(&channel)
        .query(&mut server.client());
    answer.map_or(0, |counts| counts.get(&channel).copied().unwrap_or(0))
}

/// Whether `server` (a cluster master) has a subscriber on `key`'s sharded release channel
/// (`SSUBSCRIBE`, in `key`'s slot).
pub(super) fn has_shard_listener(server: &RedisServer, key: &str) -> bool {
    let channel = redlock_core::Keyspace::Cluster.released_channel(key.as_bytes());
    // A flat [channel, count] answer.
    let answer: redis::RedisResult<HashMap<Vec<u8>, i64>> = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(&channel)
        .query(&mut server.client());
    answer.is_ok_and(|counts| counts.get(&channel).is_some_and(|n| *n >= 1))
}

/// Waits until every node has a subscriber on `key`'s release channel (the waiter lost its
/// first round and listens).
fn wait_for_listener(nodes: &Servers, key: &str) {
    let listening = eventually(Duration::from_secs(20), || {
        nodes
            .servers()
            .iter()
            .all(|server| has_listener(server, key))
    });
    assert!(listening, "the waiter subscribed on every node");
}

/// The waiter's lock from `waited` (when its `lock` call returned, and what it returned),
/// asserting that it came well within half its `pause` of `released_at`: woken by the release,
/// not by its pause.
pub(super) fn woken<A: Adapter>(
    released_at: Instant,
    waited: (Instant, Result<A::Lock, redlock_redis::Error>),
    pause: Duration,
) -> A::Lock {
    let (acquired_at, lock) = waited;
    let lock = lock.unwrap_or_else(|err| panic!("{}: the waiter failed: {err}", A::NAME));
    assert!(
        acquired_at.duration_since(released_at) < pause / 2,
        "{}: woken by the release, not by its {pause:?} pause",
        A::NAME
    );
    lock
}

/// A waiter with a 30 s pause takes the lock well within 15 s of the holder's release; an
/// uncontended lock before that subscribed to nothing.
pub fn a_release_wakes_a_waiter_long_before_its_pause_ends<A: Adapter>() {
    let nodes = Servers::start(5);
    let holder: A = A::build(&nodes.urls(), &Options::default()).expect("client");
    let pause = Duration::from_secs(30);
    let waiter: A = waiter(&nodes, pause);
    // Uncontended, a lock listens to no release notice (each tracked connection listens to its
    // node's eviction events, which are no notice).
    waiter.lock("solo", TTL).expect("lock").release();
    for server in nodes.servers() {
        let channels: Vec<Vec<u8>> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg([&released_channel(b"")[..], b"*"].concat())
            .query(&mut server.client())
            .expect("PUBSUB CHANNELS");
        assert!(
            channels.is_empty(),
            "{}: an uncontended lock subscribed: {channels:?}",
            A::NAME
        );
    }
    let held = holder.lock("notice", TTL).expect("lock");
    thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let lock = waiter.lock("notice", TTL);
            (Instant::now(), lock)
        });
        wait_for_listener(&nodes, "notice");
        let released_at = Instant::now();
        let report = held.release();
        // A quorum answered in time (on a loaded machine a straggler may answer after the
        // release's deadline; its key goes all the same).
        assert!(report.released() >= 3, "{report:?}");
        let lock = woken::<A>(released_at, waiting.join().expect("waiter"), pause);
        lock.release();
    });
}

/// Whether `server`'s ACL log has refused the client a subscription to `key`'s release channel.
fn refused_listener(server: &RedisServer, key: &str) -> bool {
    let channel = String::from_utf8_lossy(&released_channel(key.as_bytes())).into_owned();
    let log: redis::RedisResult<Vec<HashMap<String, redis::Value>>> =
        redis::cmd("ACL").arg("LOG").query(&mut server.client());
    log.is_ok_and(|entries| {
        entries.iter().any(|entry| {
            entry.get("object").is_some_and(|object| {
                redis::from_redis_value_ref::<String>(object).is_ok_and(|o| o == channel)
            })
        })
    })
}

/// A release wakes a waiter of its own client with no word from any node: the user may neither
/// publish nor subscribe to a release channel (so no notice exists), and the waiter, with a
/// 30 s pause, takes the lock well within 15 s of the release. The client knows its own
/// release, and the waiter's round queues behind it on every node. The notice test above uses
/// two clients, so it still proves the node's notice.
pub fn a_release_wakes_the_same_clients_waiter_without_a_notice<A: Adapter>() {
    let rules: Vec<&str> = super::errors::LOCK_USER
        .into_iter()
        .filter(|rule| !rule.starts_with("&redlock:released:"))
        .collect();
    let server_options = ServerOptions::new().deny_scripting(false).args(rules);
    let nodes = Servers::start_with(3, &server_options);
    let pause = Duration::from_secs(30);
    let options = Options {
        key_prefix: Some(b"locks:".to_vec()),
        retry: Some(patient(pause)),
        ..Options::default()
    };
    let client: A = A::build(&super::errors::as_locker(&nodes), &options)
        .unwrap_or_else(|err| panic!("{}: {err}", A::NAME));
    // No warm-up: the connections loaded every script when they were made. A release that
    // met `NOSCRIPT` would load it and run again after the waiter's round on an async client
    // (its batches share the connection), and two of the three votes would be refused.
    let held = client.lock("own", TTL).expect("lock");
    thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let lock = client.lock("own", TTL);
            (Instant::now(), lock)
        });
        // The waiter lost its first round: it asked every node for the release channel, and
        // each refused it.
        let refused = eventually(Duration::from_secs(20), || {
            nodes
                .servers()
                .iter()
                .all(|server| refused_listener(server, "locks:own"))
        });
        assert!(
            refused,
            "{}: the waiter tried to listen on every node",
            A::NAME
        );
        let released_at = Instant::now();
        let report = held.release();
        assert!(report.released() >= 2, "{report:?}");
        let lock = woken::<A>(released_at, waiting.join().expect("waiter"), pause);
        lock.release();
    });
}

/// A release hands the keys to its client's waiters one at a time, in the order they called:
/// two waiters of the holder's client, each with a 30 s pause, the first already listening
/// when the second calls; the holder's release gives the lock to the first, well within 15 s,
/// while the second keeps pausing, and the first's release gives it to the second. (Woken
/// together, as before the hand-over, the second won the first release about half the time.)
pub fn a_release_hands_the_keys_to_the_same_clients_waiters_in_turn<A: Adapter>() {
    let nodes = Servers::start(3);
    let pause = Duration::from_secs(30);
    let client: A = waiter(&nodes, pause);
    let held = client.lock("turn", TTL).expect("lock");
    thread::scope(|scope| {
        let (acquired, first_acquired) = std::sync::mpsc::channel::<Instant>();
        let (go, first_may_release) = std::sync::mpsc::channel::<()>();
        let client = &client;
        let first = scope.spawn(move || {
            let lock = client.lock("turn", TTL);
            let lock = lock.unwrap_or_else(|err| panic!("{}: the first waiter: {err}", A::NAME));
            acquired.send(Instant::now()).expect("the test waits");
            first_may_release.recv().expect("told to release");
            let released_at = Instant::now();
            lock.release();
            released_at
        });
        // The first lost its round and listens on every node before the second calls.
        wait_for_listener(&nodes, "turn");
        thread::sleep(Duration::from_millis(300));
        let second = scope.spawn(move || {
            let lock = client.lock("turn", TTL);
            (Instant::now(), lock)
        });
        // The second lost its first round too, and pauses (far longer than this wait).
        thread::sleep(Duration::from_secs(1));
        assert!(!second.is_finished(), "{}: the second waits", A::NAME);
        let released_at = Instant::now();
        let report = held.release();
        assert!(report.released() >= 2, "{report:?}");
        let first_at = first_acquired
            .recv_timeout(pause / 2)
            .unwrap_or_else(|_| panic!("{}: the first was not handed the keys", A::NAME));
        assert!(first_at.duration_since(released_at) < pause / 2);
        // Ample time for a second waiter woken with the first to have run its round.
        thread::sleep(Duration::from_millis(500));
        assert!(
            !second.is_finished(),
            "{}: the second waiter did not wait for the first",
            A::NAME
        );
        go.send(()).expect("the first waits");
        let first_released = first.join().expect("first waiter");
        let lock = woken::<A>(first_released, second.join().expect("second waiter"), pause);
        lock.release();
    });
}

/// How long a test leaves a client after its subscriber connections answered every
/// `SUBSCRIBE`, for the confirmations to reach its driver: far more than they take.
const CONFIRMED: Duration = Duration::from_secs(2);

/// What a node ran for a release, counted by `INFO commandstats` between two moments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReleaseCalls {
    publish: u64,
    numsub: u64,
}

/// Each node's counts so far.
fn release_calls(nodes: &Servers) -> Vec<ReleaseCalls> {
    nodes
        .servers()
        .iter()
        .map(|server| ReleaseCalls {
            publish: server.calls("publish"),
            numsub: server.calls("pubsub|numsub"),
        })
        .collect()
}

/// Each node's address with what it ran between `before` and `after` (`after` - `before`).
fn release_deltas(
    nodes: &Servers,
    before: &[ReleaseCalls],
    after: &[ReleaseCalls],
) -> Vec<(String, ReleaseCalls)> {
    nodes
        .servers()
        .iter()
        .zip(before.iter().zip(after))
        .map(|(server, (b, a))| {
            let delta = ReleaseCalls {
                publish: a.publish - b.publish,
                numsub: a.numsub - b.numsub,
            };
            (server.addr().to_string(), delta)
        })
        .collect()
}

/// A lock waiting on its own client's release (its pause 30 s) takes the lock well within 15 s
/// of it, and its release announces nothing: the client's own subscriber is the only one
/// listening, and the release counts the listeners before it publishes (inside the release
/// script, or, natively, `PUBSUB NUMSUB` after `DELIFEQ` in one pipeline).
pub fn a_release_only_its_own_client_hears_publishes_nothing<A: Adapter>() {
    let nodes = Servers::start(3);
    let pause = Duration::from_secs(30);
    let client: A = waiter(&nodes, pause);
    let held = client.lock("alone", TTL).expect("lock");
    thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let lock = client.lock("alone", TTL);
            (Instant::now(), lock)
        });
        wait_for_listener(&nodes, "alone");
        thread::sleep(CONFIRMED);
        let before = release_calls(&nodes);
        let released_at = Instant::now();
        let report = held.release();
        assert!(report.released() >= 2, "{report:?}");
        let lock = woken::<A>(released_at, waiting.join().expect("waiter"), pause);
        // Scripted or native (`DELIFEQ`, then `PUBSUB NUMSUB` in its pipeline), alike.
        for (node, ran) in release_deltas(&nodes, &before, &release_calls(&nodes)) {
            let name = format!("{}: {node}: {ran:?}", A::NAME);
            assert_eq!(
                ran.publish, 0,
                "{name}: a release only its client hears published"
            );
            assert!(ran.numsub > 0, "{name}: the release counted no listener");
        }
        lock.release();
    });
}

/// A release that its own client hears (a lock of the client waits on the key too) still
/// announces itself where another client's waiter listens: every node counts two listeners,
/// and publishes (inside the release script, or natively in a pipeline after the count).
/// Whichever waiter takes the lock holds it meanwhile, so no other release can be what
/// published; the other client's waiter, pausing 30 s, takes the lock well within 15 s of the
/// release that freed it for it (this one, or the own waiter's after it).
pub fn a_release_its_own_client_hears_still_wakes_another_clients_waiter<A: Adapter>() {
    let nodes = Servers::start(3);
    let pause = Duration::from_secs(30);
    let (holder, other): (A, A) = (waiter(&nodes, pause), waiter(&nodes, pause));
    let held = holder.lock("shared", TTL).expect("lock");
    thread::scope(|scope| {
        // Both ends inside the scope: a failed assertion drops `let_go`, the own waiter lets
        // go, and the other client's waiter ends; nothing hangs.
        let (took, taken) = std::sync::mpsc::channel();
        let (let_go, go) = std::sync::mpsc::channel::<()>();
        let holder = &holder;
        let own = scope.spawn(move || {
            let lock = holder.lock("shared", TTL).expect("the holder's own waiter");
            let _ = took.send(());
            let _ = go.recv();
            lock.release();
        });
        wait_for_listener(&nodes, "shared");
        let foreign = scope.spawn(|| {
            let lock = other.lock("shared", TTL);
            (Instant::now(), lock)
        });
        let both = eventually(Duration::from_secs(20), || {
            nodes
                .servers()
                .iter()
                .all(|server| listeners(server, "shared") >= 2)
        });
        assert!(both, "{}: both clients listen on every node", A::NAME);
        thread::sleep(CONFIRMED);
        let before = release_calls(&nodes);
        let released_at = Instant::now();
        let report = held.release();
        assert!(report.released() >= 2, "{report:?}");
        let mut own_took = false;
        let taken_by_one = eventually(Duration::from_secs(20), || {
            own_took |= taken.try_recv().is_ok();
            own_took || foreign.is_finished()
        });
        assert!(taken_by_one, "{}: a waiter takes the lock", A::NAME);
        let announced = eventually(Duration::from_secs(10), || {
            release_deltas(&nodes, &before, &release_calls(&nodes))
                .iter()
                .all(|(_, ran)| ran.numsub > 0 && ran.publish > 0)
        });
        let ran = release_deltas(&nodes, &before, &release_calls(&nodes));
        assert!(
            announced,
            "{}: every node counts two listeners and announces: {ran:?}",
            A::NAME
        );
        let freed_at = match own_took {
            true => Instant::now(),
            false => released_at,
        };
        let_go.send(()).expect("the own waiter runs");
        let lock = woken::<A>(freed_at, foreign.join().expect("waiter"), pause);
        lock.release();
        own.join().expect("the holder's own waiter");
    });
}

/// The control: keys deleted by hand (as if expired) announce nothing, and the waiter is still
/// in its 6 s pause 2 s later.
pub fn a_key_gone_without_a_release_wakes_nobody<A: Adapter>() {
    let nodes = Servers::start(5);
    let holder: A = A::build(&nodes.urls(), &Options::default()).expect("client");
    let pause = Duration::from_secs(6);
    let waiter: A = waiter(&nodes, pause);
    let held = holder.lock("quiet", TTL).expect("lock");
    thread::scope(|scope| {
        let waiting = scope.spawn(|| waiter.lock("quiet", TTL));
        wait_for_listener(&nodes, "quiet");
        // The keys vanish as if expired: no release, so no notice.
        for server in nodes.servers() {
            let _: i64 = redis::cmd("DEL")
                .arg("quiet")
                .query(&mut server.client())
                .expect("DEL");
        }
        thread::sleep(pause / 3);
        assert!(
            !waiting.is_finished(),
            "{}: nothing announced a release, so the waiter sleeps out its pause",
            A::NAME
        );
        let lock = waiting
            .join()
            .expect("waiter")
            .expect("taken after its pause");
        lock.release();
    });
    drop(held);
}
