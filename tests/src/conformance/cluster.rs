//! A Redis or Valkey Cluster as one node of a lock, against real local clusters: each key goes
//! to its slot's master, the cluster is one vote, every name beside a key lives in its slot,
//! a moved slot is followed, and a promoted replica sits out for the slots it took over.

use std::time::Duration;

use redlock_core::{Keyspace, LockRequest, NodeErrorKind, RetryPolicy, SitOutCause, Slot, Vote};
use redlock_redis::Error;

use super::adapter::{Adapter, HeldLock, Options};
use super::scenarios::eventually;
use crate::{CLUSTER_NODE_TIMEOUT, RedisCluster, RedisServer, ServerOptions, Servers};

const TTL: Duration = Duration::from_secs(10);

pub(super) fn once() -> Options {
    Options {
        retry: Some(RetryPolicy::once()),
        ..Options::default()
    }
}

pub(super) fn build<A: Adapter>(urls: &[String], options: &Options) -> A {
    A::build(urls, options).unwrap_or_else(|err| panic!("{}: build failed: {err}", A::NAME))
}

/// A resource per master, the `m`-th served by master `m` when the cluster formed.
pub(super) fn one_per_master(cluster: &RedisCluster, prefix: &str) -> Vec<String> {
    (0..cluster.masters().len())
        .map(|master| {
            (0..)
                .map(|i| format!("{prefix}-{i}"))
                .find(|key| cluster.master_of(key.as_bytes()) == master)
                .expect("some key lands on every master")
        })
        .collect()
}

/// The only node's vote in a failed acquisition.
pub(super) fn sole_vote<L: std::fmt::Debug>(result: Result<L, Error>) -> Vote {
    match result {
        Err(Error::Unavailable(detail) | Error::Contended(detail)) => detail.nodes[0].result,
        other => panic!("expected a failed acquisition, got {other:?}"),
    }
}

/// The error text of a failed acquisition (empty when it succeeded).
pub(super) fn failure_text<L>(result: &Result<L, Error>) -> String {
    result
        .as_ref()
        .err()
        .map(Error::to_string)
        .unwrap_or_default()
}

/// A cluster node's epoch of `slot`, read on master `master`.
fn slot_epoch(master: &RedisServer, slot: Slot) -> Option<Vec<u8>> {
    master.get(&*Keyspace::Cluster.epoch_key(slot.tag().as_bytes()))
}

/// A cluster of 3 masters, given by one seed (not the master of the first key), is one node:
/// a fresh slot sits out and stamps its own epoch, a trust stamps every slot's, and then a lock
/// of a key on any master is granted there — refused to a rival while held, gone on release. In
/// a deployment that needs every vote, the cluster's is one of them. On nodes that run no
/// script, each master's connection proves its slots natively, the same way.
pub fn a_cluster_node_votes_for_keys_on_every_master<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    let resources = one_per_master(&cluster, "job");
    let client: A = build(&[cluster.masters()[1].url()], &once());
    let first = Slot::of(resources[0].as_bytes());
    let fresh = client.try_lock(&resources[0], TTL);
    match sole_vote(fresh) {
        Vote::Ineligible {
            cause: SitOutCause::NoEpoch,
            ..
        } => {}
        other => panic!("{}: a fresh slot sits out, got {other:?}", A::NAME),
    }
    assert!(
        slot_epoch(&cluster.masters()[0], first).is_some(),
        "the slot's own epoch is stamped on its master"
    );
    assert_eq!(cluster.get(resources[0].as_bytes()), None, "nothing locked");

    client.trust_every_node(1, "trust");
    for master in 0..3 {
        let (from, to) = cluster.slots_of(master);
        for slot in [from, from + 1, (from + to) / 2, to] {
            let slot = Slot::new(slot).expect("a slot");
            assert_eq!(
                slot_epoch(&cluster.masters()[master], slot).as_deref(),
                Some(&b"0"[..]),
                "{slot} trusted on master {master}"
            );
        }
    }

    let rival: A = build(&[cluster.masters()[2].url()], &once());
    for resource in &resources {
        let lock = client.lock(resource, TTL).expect("granted by the cluster");
        assert_eq!(cluster.get(resource.as_bytes()), Some(lock.token()));
        assert_eq!(sole_vote(rival.try_lock(resource, TTL)), Vote::Refused);
        assert_eq!(lock.release().released(), 1);
        assert_eq!(cluster.get(resource.as_bytes()), None, "released");
    }

    // Each master's connection proved the slot it served above: the next lock of each resource
    // is a plain `SET NX PX` there, with no proof (a proof starts with `CLIENT CACHING YES`,
    // then reads the slot's epoch). Control: a new client's first lock proves.
    for resource in &resources {
        let master = &cluster.masters()[cluster.master_of(resource.as_bytes())];
        let fresh: A = build(&[cluster.masters()[1].url()], &once());
        for (who, vouched) in [(&fresh, false), (&client, true), (&fresh, true)] {
            let (proofs, sets) = (master.calls("client|caching"), master.calls("set"));
            let lock = who.lock(resource, TTL).expect("granted by the cluster");
            assert_eq!(lock.release().released(), 1);
            let proved = master.calls("client|caching") > proofs;
            assert_eq!(proved, !vouched, "{}: {resource} proved: {proved}", A::NAME);
            if vouched {
                assert_eq!(master.calls("set"), sets + 1, "{}: one SET NX PX", A::NAME);
            }
        }
    }

    // With two standalone nodes and quorum 3, no lock without the cluster's vote.
    let nodes = Servers::start(2);
    let mut urls = nodes.urls();
    urls.push(cluster.masters()[0].url());
    let strict: A = build(
        &urls,
        &Options {
            quorum: Some(3),
            ..once()
        },
    );
    strict.trust_every_node(3, "trust");
    let lock = strict.lock(&resources[2], TTL).expect("all three grant");
    assert_eq!(nodes.count_with_key(&resources[2]), 2);
    assert_eq!(cluster.get(resources[2].as_bytes()), Some(lock.token()));
    assert_eq!(lock.release().released(), 3);
}

/// A lock of several resources on a cluster node: keys that share a hash tag lock together on
/// their slot's master; keys of different slots get a clear error naming the fix — nothing is
/// sent, never a lock of some of them.
pub fn a_cluster_node_locks_several_keys_only_within_one_slot<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    let client: A = build(
        &[cluster.masters()[0].url()],
        &Options {
            restart_aware: Some(false),
            ..once()
        },
    );
    let [a, b] = ["stock", "invoice"];
    assert_ne!(Slot::of(a.as_bytes()), Slot::of(b.as_bytes()));
    let result = client.acquire(LockRequest::new(a, TTL).resource(b));
    let text = failure_text(&result);
    assert_eq!(sole_vote(result), Vote::Failed(NodeErrorKind::CrossSlot));
    assert!(text.contains("common {hash tag}"), "{text}");
    for key in [a, b] {
        assert_eq!(cluster.get(key.as_bytes()), None, "nothing set for {key}");
    }
    let (a, b) = ("{order-42}:stock", "{order-42}:invoice");
    let lock = client
        .acquire(LockRequest::new(a, TTL).resource(b))
        .expect("one slot, one lock");
    for key in [a, b] {
        assert_eq!(cluster.get(key.as_bytes()), Some(lock.token()), "{key}");
    }
    assert_eq!(lock.release().released(), 1);

    // Two URLs of one cluster are one node: the one that learns the slot map second never
    // votes, so the cluster never counts twice.
    let standalone = Servers::start(1);
    let urls = [
        cluster.masters()[0].url(),
        cluster.masters()[1].url(),
        standalone.urls()[0].clone(),
    ];
    let twice: A = build(
        &urls,
        &Options {
            quorum: Some(3),
            restart_aware: Some(false),
            ..once()
        },
    );
    for _ in 0..2 {
        match twice.try_lock("twice", TTL) {
            Err(err @ Error::Unavailable(_)) => {
                let text = err.to_string();
                let Error::Unavailable(detail) = err else {
                    unreachable!()
                };
                let refused = detail.nodes[..2]
                    .iter()
                    .filter(|n| n.result == Vote::Failed(NodeErrorKind::SameCluster))
                    .count();
                assert_eq!(refused, 1, "{detail}");
                assert!(text.contains("list each cluster once"), "{text}");
            }
            other => panic!("{}: one cluster counted twice: {other:?}", A::NAME),
        }
    }
    assert_eq!(
        cluster.get(b"twice"),
        None,
        "the failed round was cleaned up"
    );
}

/// A slot moved to another master after the client learnt the map: the old master answers
/// `MOVED`, the client learns the map again and the lock is granted by the new master.
pub fn a_cluster_node_follows_a_moved_slot<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    let client: A = build(
        &[cluster.masters()[1].url()],
        &Options {
            restart_aware: Some(false),
            ..once()
        },
    );
    let resource = &one_per_master(&cluster, "moved")[0];
    let lock = client.lock(resource, TTL).expect("granted by master 0");
    assert_eq!(lock.release().released(), 1);

    // The slot is empty now: it moves to master 2, told to every master.
    let slot = cluster.keyslot(resource.as_bytes());
    let mut target = cluster.masters()[2].client();
    let id: String = redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut target)
        .expect("CLUSTER MYID");
    for master in cluster.masters() {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&id)
            .query(&mut master.client())
            .unwrap_or_else(|err| panic!("CLUSTER SETSLOT on {}: {err}", master.addr()));
    }
    let _: redis::Value = redis::cmd("CLUSTER")
        .arg("BUMPEPOCH")
        .query(&mut target)
        .expect("CLUSTER BUMPEPOCH");
    let moved = redis::cmd("GET")
        .arg(resource)
        .query::<Option<Vec<u8>>>(&mut cluster.masters()[0].client());
    assert!(
        moved.is_err_and(|err| err.code() == Some("MOVED")),
        "the old master sends the key away"
    );

    let lock = client
        .lock(resource, TTL)
        .expect("granted by the new master");
    assert_eq!(cluster.masters()[2].get(resource), Some(lock.token()));
    assert_eq!(lock.release().released(), 1);

    // A master gone without a replica: the cluster stops serving (`CLUSTERDOWN`), an error
    // vote that says when it ends.
    let mut cluster = cluster;
    cluster.kill_master(2);
    let other = &one_per_master(&cluster, "down")[1];
    assert!(
        eventually(CLUSTER_NODE_TIMEOUT * 10, || {
            let info: redis::RedisResult<String> = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut cluster.masters()[1].client());
            info.is_ok_and(|info| info.contains("cluster_state:fail"))
        }),
        "the cluster sees its slots uncovered"
    );
    let result = client.try_lock(other, TTL);
    let text = failure_text(&result);
    assert_eq!(sole_vote(result), Vote::Failed(NodeErrorKind::Cluster));
    assert!(text.contains("did not serve the key's slot"), "{text}");
}

/// A cluster node whose own URL does not answer (a seed down at start) learns the map from
/// its other seeds, and votes; without them its every vote is an error. A seed that is another
/// node's address, or a position past the list, is an error at build.
pub fn a_cluster_node_asks_its_other_seeds_when_its_url_is_down<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    let down = Refuser::start();
    // The node URL's user and password reach the masters: a master's URL with the port of a
    // listener that hangs up on every connection.
    let seed = cluster.masters()[0].url();
    let port = cluster.masters()[0].port();
    let dead = seed.replace(&format!(":{port}"), &format!(":{}", down.port()));
    let resource = &one_per_master(&cluster, "seeded")[0];
    let plain = Options {
        restart_aware: Some(false),
        ..once()
    };
    let alone: A = build(std::slice::from_ref(&dead), &plain);
    assert_eq!(
        sole_vote(alone.try_lock(resource, TTL)),
        Vote::Failed(NodeErrorKind::Connection)
    );
    let seeds = vec![cluster.masters()[1].url(), cluster.masters()[2].url()];
    let seeded: A = build(
        std::slice::from_ref(&dead),
        &Options {
            cluster_seeds: vec![(0, seeds.clone())],
            ..plain.clone()
        },
    );
    for _ in 0..2 {
        let lock = seeded
            .lock(resource, TTL)
            .expect("the map from another seed");
        assert_eq!(cluster.get(resource.as_bytes()), Some(lock.token()));
        assert_eq!(lock.release().released(), 1);
    }

    let twice = A::build(
        &[seed, seeds[0].clone()],
        &Options {
            cluster_seeds: vec![(0, vec![seeds[0].clone()])],
            ..plain.clone()
        },
    );
    let text = twice.err().map(|err| err.to_string()).unwrap_or_default();
    assert!(text.contains("is node #1's address"), "{text}");
    let past = A::build(
        std::slice::from_ref(&dead),
        &Options {
            cluster_seeds: vec![(1, seeds)],
            ..plain
        },
    );
    let text = past.err().map(|err| err.to_string()).unwrap_or_default();
    assert!(text.contains("cluster_seeds names node #1"), "{text}");
}

/// A release wakes a waiter whose node URL is another master: the release's `SPUBLISH` goes to
/// the key's slot's master, and the waiter `SSUBSCRIBE`s there, through its slot map. The
/// waiter's pause is 30 s; it takes the lock well within 15 s of the release (no latency
/// bound: see `notices.rs`). No master has a classic subscriber: the cluster bus relays
/// nothing.
pub fn a_release_on_one_master_wakes_a_waiter_on_another<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    let resource = &one_per_master(&cluster, "notice")[0];
    let plain = Options {
        restart_aware: Some(false),
        ..Options::default()
    };
    assert_release_wakes_waiter::<A>(&cluster, &plain, resource, resource, &[resource.into()]);
}

/// A holder (seed: master 1) releases `resource`, held under every one of `keys` (one per
/// vote), while a waiter (seed: master 2, built with `options` and a 30 s pause) listens on
/// `channel_key`'s sharded release channel on the master of its slot, and on no classic channel
/// anywhere: the waiter takes the lock well within 15 s of the release, on a quorum of the keys
/// (the first notice may wake it before the holder's release reached every vote, so a vote may
/// refuse it), and its release reports a quorum and leaves none of them behind.
pub(super) fn assert_release_wakes_waiter<A: Adapter>(
    cluster: &RedisCluster,
    options: &Options,
    resource: &str,
    channel_key: &str,
    keys: &[String],
) {
    let holder: A = build(&[cluster.masters()[1].url()], options);
    let pause = Duration::from_secs(30);
    let waiter: A = build(
        &[cluster.masters()[2].url()],
        &Options {
            retry: Some(super::notices::patient(pause)),
            ..options.clone()
        },
    );
    let held = holder.lock(resource, 6 * TTL).expect("lock");
    // The holder's key on every vote first (its lock call returned at a quorum): else the
    // waiter's first round may take a vote whose `SET` of the holder's is still on its way,
    // and the release finds the waiter's key there.
    let everywhere = eventually(Duration::from_secs(20), || {
        keys.iter().all(|key| {
            cluster.masters()[cluster.master_of(key.as_bytes())]
                .get(key)
                .is_some()
        })
    });
    assert!(everywhere, "the holder's key on every vote");
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let lock = waiter.lock(resource, TTL);
            (std::time::Instant::now(), lock)
        });
        let master = &cluster.masters()[cluster.master_of(channel_key.as_bytes())];
        let listening = eventually(Duration::from_secs(20), || {
            super::notices::has_shard_listener(master, channel_key)
        });
        assert!(listening, "the waiter subscribed on the slot's master");
        for master in cluster.masters() {
            assert!(
                !super::notices::has_listener(master, channel_key),
                "a classic subscription on {}",
                master.addr()
            );
        }
        let released_at = std::time::Instant::now();
        assert_eq!(held.release().released(), keys.len());
        let waited = waiting.join().expect("waiter");
        let lock = super::notices::woken::<A>(released_at, waited, pause);
        let token = lock.token();
        let released = lock.release().released();
        assert!(released > keys.len() / 2, "released {released} of {keys:?}");
        for key in keys {
            assert_ne!(cluster.get(key.as_bytes()), Some(token.clone()), "{key}");
        }
    });
}

/// The README's ACL for a lock user with key prefix `locks:` on a cluster node: the per-slot
/// names instead of the standalone epoch and fence patterns.
const CLUSTER_LOCK_USER: [&str; 13] = [
    "--user",
    "locker",
    "on",
    ">locker-pw",
    "~locks:*",
    "~redlock:epoch:{*}",
    "~redlock:epoch:id:{*}",
    "~redlock:fence:{*}locks:*",
    "&redlock:released:{*}locks:*",
    "&__keyevent@*__:evicted",
    "+@all",
    "-@dangerous",
    "+info",
];

/// A user granted exactly the README's cluster ACL runs every operation on a cluster node:
/// trust (every slot), a fenced restart-aware acquisition, contention, extension, release.
/// Negative control: the same user without `~redlock:epoch:id:{*}` gets only `NOPERM` votes.
pub fn a_cluster_lock_user_with_the_documented_acl_runs_every_operation<A: Adapter>() {
    let options = Options {
        key_prefix: Some(b"locks:".to_vec()),
        ..once()
    };
    let as_locker =
        |cluster: &RedisCluster| vec![format!("redis://locker:locker-pw@{}/", cluster.addrs()[1])];
    let granted = ServerOptions::new()
        .deny_scripting(false)
        .args(CLUSTER_LOCK_USER);
    let cluster =
        RedisCluster::try_start_with(3, 0, &granted).unwrap_or_else(|err| panic!("{err}"));
    let client: A = build(&as_locker(&cluster), &options);
    client.trust_every_node(1, "every slot trusted");
    let lock = client
        .acquire(LockRequest::new("job", TTL).fenced())
        .unwrap_or_else(|err| panic!("{}: fenced lock: {err}", A::NAME));
    assert!(lock.fence().is_some(), "a fence");
    let rival: A = build(&as_locker(&cluster), &options);
    assert_eq!(sole_vote(rival.try_lock("job", TTL)), Vote::Refused);
    lock.extend_shared(2 * TTL).expect("extended");
    assert_eq!(lock.release().released(), 1);

    let mut narrower: Vec<&str> = CLUSTER_LOCK_USER.to_vec();
    narrower.retain(|rule| *rule != "~redlock:epoch:id:{*}");
    let denied = ServerOptions::new().deny_scripting(false).args(narrower);
    let cluster = RedisCluster::try_start_with(3, 0, &denied).unwrap_or_else(|err| panic!("{err}"));
    let client: A = build(&as_locker(&cluster), &options);
    assert_eq!(
        sole_vote(client.try_lock("job", TTL)),
        Vote::Failed(NodeErrorKind::NoPermission)
    );
}

/// A loopback listener that accepts every connection and hangs up at once: a node that is down,
/// on a port nothing else can take while it lives.
struct Refuser {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Refuser {
    fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("bound").port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => drop(conn),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Self {
            port,
            stop,
            thread: Some(thread),
        }
    }

    fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Refuser {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A cluster that announces endpoints this client cannot reach (here host names under
/// `.invalid`, which never resolve, as a cluster in containers announces its internal names):
/// without a map every vote for a key on another master fails; with `cluster_addresses`
/// mapping them to the reachable host, the lock is granted there.
pub fn a_cluster_node_reaches_announced_addresses_through_its_map<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    for (index, master) in cluster.masters().iter().enumerate() {
        for (name, value) in [
            (
                "cluster-announce-hostname",
                format!("master-{index}.invalid"),
            ),
            ("cluster-preferred-endpoint-type", "hostname".to_owned()),
        ] {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(&value)
                .query(&mut master.client())
                .unwrap_or_else(|err| panic!("CONFIG SET {name}: {err}"));
        }
    }
    assert!(
        eventually(Duration::from_secs(30), || {
            let slots: redis::RedisResult<Vec<Vec<redis::Value>>> = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query(&mut cluster.masters()[1].client());
            slots.is_ok_and(|ranges| {
                ranges.iter().all(|range| match range.get(2) {
                    Some(redis::Value::Array(master)) => matches!(
                        master.first(),
                        Some(redis::Value::BulkString(host)) if host.ends_with(b".invalid")
                    ),
                    _ => false,
                })
            })
        }),
        "every master is announced by its host name"
    );
    let resource = &one_per_master(&cluster, "announced")[0];
    let options = Options {
        restart_aware: Some(false),
        io_timeout: Some(Duration::from_millis(500)),
        ..once()
    };
    let unmapped: A = build(&[cluster.masters()[1].url()], &options);
    match sole_vote(unmapped.try_lock(resource, TTL)) {
        Vote::Failed(NodeErrorKind::Connection | NodeErrorKind::Timeout) | Vote::TimedOut => {}
        other => panic!("{}: an unreachable master voted: {other:?}", A::NAME),
    }
    let mapped: A = build(
        &[cluster.masters()[1].url()],
        &Options {
            cluster_host: Some("127.0.0.1".to_owned()),
            ..options
        },
    );
    let lock = mapped.lock(resource, TTL).expect("granted through the map");
    assert_eq!(cluster.masters()[0].get(resource), Some(lock.token()));
    assert_eq!(lock.release().released(), 1);
}
