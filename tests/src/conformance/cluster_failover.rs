//! A cluster node's memory across failovers, failbacks and slot migrations, against real local
//! clusters: a master that may lack a held key sits out for the slots concerned, and a rival is
//! refused while the holder is valid. Each scenario has its negative control: the same steps
//! without restart-aware voting give the lock to a second holder.

use std::time::Duration;

use redlock_core::{Keyspace, SitOutCause, Slot, Vote};

use super::adapter::{Adapter, HeldLock, Options};
use super::cluster::{build, once, one_per_master, sole_vote};
use super::scenarios::eventually;
use crate::{CLUSTER_NODE_TIMEOUT, RedisCluster, RedisServer};

const TTL: Duration = Duration::from_secs(10);

/// Asserts that `outcome`, the rival's, is refused because the only node sits out for a restart
/// (a new replication history or process behind the slot's stamp) — or, on a connection that
/// proved the slot before and stayed open, because the node pushed a change of the slot's epoch
/// (the failover's resynchronisation) while its vouched `SET` was on its way: that reply is
/// refused as `Changed` (a connection that read the push before sending proves again instead,
/// and finds the restart).
fn assert_sits_out<L: std::fmt::Debug>(outcome: Result<L, redlock_redis::Error>, what: &str) {
    match sole_vote(outcome) {
        Vote::Ineligible {
            cause: SitOutCause::Restart | SitOutCause::Changed,
            ..
        } => {}
        other => panic!("{what}: the master must sit out, got {other:?}"),
    }
}

/// The rival's `outcome` while `lock` is held on a master that lost its key: refused because
/// the master sits out with restart-aware voting, else granted — two holders (the negative
/// control).
fn judge_rival<A: Adapter>(
    outcome: Result<A::Lock, redlock_redis::Error>,
    lock: &A::Lock,
    restart_aware: bool,
) {
    if restart_aware {
        assert_sits_out(outcome, A::NAME);
        assert!(lock.is_valid(), "the holder is still valid");
    } else {
        let second = outcome.expect("without the check, a second holder");
        assert!(lock.is_valid() && second.is_valid(), "two holders");
    }
}

/// The failover the Redis page warns of, on a cluster: a holder's key on master 0, whose
/// replica is promoted when master 0 dies — here the key is gone from the promoted replica, as
/// when replication had not carried it yet. The promoted replica is another process than the
/// one that stamped its slot's epoch: it sits out, and the rival is refused while the holder is
/// valid. Negative control: without restart-aware voting the rival gets the lock — two holders.
pub fn a_promoted_replica_sits_out_for_its_slots<A: Adapter>() {
    // One cluster, two failovers: master 0's with the check, master 1's without it. The
    // clients learn the map from master 2, which stays.
    let mut cluster = RedisCluster::start(3, 1);
    let resources = one_per_master(&cluster, "failover");
    for (master, restart_aware) in [(0, true), (1, false)] {
        let resource = &resources[master];
        let options = Options {
            restart_aware: Some(restart_aware),
            ..once()
        };
        let holder: A = build(&[cluster.masters()[2].url()], &options);
        holder.trust_every_node(1, "trust");
        // The trust stamps each slot's epoch with its master's identity (never an empty one,
        // which the first acquisition would adopt in the same script as its key: a failover
        // that lost both would leave the replica adopting its own identity, and voting).
        let stamp = Keyspace::Cluster.epoch_id_key(Slot::of(resource.as_bytes()).tag().as_bytes());
        let stamped = cluster.masters()[master].get(&*stamp);
        assert!(
            stamped.as_ref().is_some_and(|id| id.len() > 80),
            "the master's identity: {stamped:?}"
        );
        // Longer than every wait below (a slow failover must not end the holder's validity).
        let lock = holder.lock(resource, 6 * TTL).expect("granted");
        let replica = &cluster.replicas_of(master)[0];
        assert!(
            eventually(Duration::from_secs(10), || replica_has(replica, resource)),
            "the replica has the key"
        );

        cluster.kill_master(master);
        let replica = &cluster.replicas_of(master)[0];
        assert!(
            eventually(CLUSTER_NODE_TIMEOUT * 10, || {
                is_master(replica) && sees_as_master(&cluster.masters()[2], replica)
            }),
            "the replica is promoted, and master 2 knows"
        );
        // The key the replica never got.
        let _: () = redis::cmd("DEL")
            .arg(resource)
            .query(&mut replica.client())
            .expect("DEL");

        let rival: A = build(&[cluster.masters()[2].url()], &options);
        judge_rival::<A>(rival.try_lock(resource, TTL), &lock, restart_aware);
    }
}

/// A node demoted and promoted again under open connections, on a cluster: `CLUSTER FAILOVER`
/// makes master `m` a replica of its replica `r`; `r` grants the holder a lock while `m` is
/// stopped and cut off (the key never reaches it); `r` dies and `m` takes its slots back
/// (`CLUSTER FAILOVER TAKEOVER`). The rival, whose connection to `m` stayed open since before
/// the failover and who never learnt of `r`, is refused while the holder is valid: `m` now has
/// a new replication history, not the one that stamped the slot. The planned failover's cost
/// is shown too: `r` sits out for the slots it took over until trusted. Negative control:
/// without restart-aware voting the rival gets the lock — two holders.
pub fn a_cluster_failover_and_failback_under_open_connections_sits_out<A: Adapter>() {
    let mut cluster = RedisCluster::start(3, 1);
    let resources = one_per_master(&cluster, "failback");
    for (master, restart_aware) in [(0, true), (1, false)] {
        let resource = &resources[master];
        let options = Options {
            restart_aware: Some(restart_aware),
            ..once()
        };
        let seed = [cluster.masters()[2].url()];
        let holder: A = build(&seed, &options);
        let rival: A = build(&seed, &options);
        holder.trust_every_node(1, "trust");
        // The rival's connection to `m`, used once: it stays open to the end.
        let first = rival.lock(resource, TTL).expect("granted by m");
        assert_eq!(first.release().released(), 1);

        // The planned failover: `r` serves the slots, `m` replicates it.
        fail_over(&cluster, &cluster.replicas_of(master)[0], None);
        let outcome = holder.try_lock(resource, TTL);
        if restart_aware {
            assert_sits_out(outcome, "a new master after a planned failover");
            holder.trust_every_node(1, "trust the new master");
        } else {
            let probe = outcome.expect("granted by r");
            assert_eq!(probe.release().released(), 1);
        }
        let stamp = Keyspace::Cluster.epoch_id_key(Slot::of(resource.as_bytes()).tag().as_bytes());
        let stamped = cluster.replicas_of(master)[0].get(&*stamp);
        assert!(
            eventually(Duration::from_secs(10), || {
                replica_get(&cluster.masters()[master], &stamp) == stamped
            }),
            "m has r's stamp"
        );

        // `m` stops and `r` drops its replication stream: the holder's key never reaches `m`
        // (which reads, once resumed, only what was sent before); `r` dies with the only copy.
        cluster.master_mut(master).pause();
        let _: redis::Value = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut cluster.replicas_of(master)[0].client())
            .expect("CLIENT KILL TYPE replica");
        let lock = holder.lock(resource, 6 * TTL).expect("granted by r");
        cluster.replica_mut(master, 0).kill();
        cluster.master_mut(master).resume();
        fail_over(&cluster, &cluster.masters()[master], Some("TAKEOVER"));
        assert_eq!(
            cluster.masters()[master].get(resource),
            None,
            "the key never reached m"
        );

        judge_rival::<A>(rival.try_lock(resource, TTL), &lock, restart_aware);
    }
}

/// Slots move to another master with the keys of held locks in them: the legacy steps of
/// `redis-cli --cluster reshard` on every server, and Valkey 9's atomic `CLUSTER MIGRATESLOTS`
/// on Valkey 9. The slot's epoch moves with its keys, stamped by the source: the target sits
/// out for that slot (the false positive of an import) and the rival is refused while the
/// holder is valid; without restart-aware voting the moved key refuses it. A migration that
/// lost the held key is refused the same way; negative control: without restart-aware voting
/// the rival gets that lock — two holders.
pub fn a_cluster_slot_migrated_with_a_held_key_keeps_exclusion<A: Adapter>() {
    let cluster = RedisCluster::start(3, 0);
    let atomic = is_valkey_9(&cluster.masters()[0]);
    let to = &cluster.masters()[2];
    for (master, restart_aware) in [(0, true), (1, false)] {
        let from = &cluster.masters()[master];
        let options = Options {
            restart_aware: Some(restart_aware),
            ..once()
        };
        let seed = [to.url()];
        let holder: A = build(&seed, &options);
        let rival: A = build(&seed, &options);
        holder.trust_every_node(1, "trust");
        let [kept, lost, moved_atomically] = on_master(&cluster, master, "migrated");
        let locks: Vec<_> = [&kept, &lost, &moved_atomically]
            .into_iter()
            .map(|resource| holder.lock(resource, 6 * TTL).expect("granted"))
            .collect();
        // The rival's connection to the source, used once before the migrations.
        assert!(rival.try_lock(&kept, TTL).is_err(), "held");

        let slot = |key: &str| cluster.keyslot(key.as_bytes());
        cluster
            .migrate_slot(slot(&kept), from, to)
            .expect("the legacy migration");
        let _: () = redis::cmd("DEL")
            .arg(&lost)
            .query(&mut from.client())
            .expect("DEL");
        cluster
            .migrate_slot(slot(&lost), from, to)
            .expect("the legacy migration of a slot that lost its key");
        assert_eq!(to.get(&kept), Some(locks[0].token()), "the key moved");
        assert_eq!(to.get(&lost), None, "the key was lost");

        let kept_outcome = rival.try_lock(&kept, TTL);
        let lost_outcome = rival.try_lock(&lost, TTL);
        if restart_aware {
            assert_sits_out(kept_outcome, "an import");
            assert_sits_out(lost_outcome, "an import that lost the key");
        } else {
            assert_eq!(
                sole_vote(kept_outcome),
                Vote::Refused,
                "the moved key refuses"
            );
            let second = lost_outcome.expect("without the check, a second holder");
            assert!(locks[1].is_valid() && second.is_valid(), "two holders");
        }
        if atomic {
            cluster
                .migrate_slot_atomically(slot(&moved_atomically), from, to)
                .expect("CLUSTER MIGRATESLOTS");
            assert_eq!(to.get(&moved_atomically), Some(locks[2].token()));
            let outcome = rival.try_lock(&moved_atomically, TTL);
            if restart_aware {
                assert_sits_out(outcome, "an atomic import");
            } else {
                assert_eq!(sole_vote(outcome), Vote::Refused, "the moved key refuses");
            }
        }
        assert!(locks.iter().all(HeldLock::is_valid), "the holder is valid");
    }
}

/// Three resources on master `master` when the cluster formed, each in a slot of its own.
fn on_master(cluster: &RedisCluster, master: usize, prefix: &str) -> [String; 3] {
    let mut found: Vec<(String, u16)> = Vec::new();
    for i in 0.. {
        let key = format!("{prefix}-{master}-{i}");
        let slot = cluster.keyslot(key.as_bytes());
        if cluster.master_of(key.as_bytes()) == master && found.iter().all(|(_, s)| *s != slot) {
            found.push((key, slot));
            if found.len() == 3 {
                break;
            }
        }
    }
    let mut keys = found.into_iter().map(|(key, _)| key);
    std::array::from_fn(|_| keys.next().unwrap_or_default())
}

/// Whether `server` is Valkey 9 or later (which has `CLUSTER MIGRATESLOTS`).
fn is_valkey_9(server: &RedisServer) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.client())
        .expect("INFO server");
    info.lines()
        .find_map(|line| line.strip_prefix("valkey_version:"))
        .and_then(|version| version.split('.').next()?.trim().parse::<u32>().ok())
        .is_some_and(|major| major >= 9)
}

/// Sends `CLUSTER FAILOVER [how]` to replica `node`, and waits until it is a master and the
/// cluster's last master (which stays through every scenario here) says so.
pub(super) fn fail_over(cluster: &RedisCluster, node: &RedisServer, how: Option<&str>) {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("FAILOVER");
    if let Some(how) = how {
        cmd.arg(how);
    }
    let _: () = cmd
        .query(&mut node.client())
        .unwrap_or_else(|err| panic!("CLUSTER FAILOVER on {}: {err}", node.addr()));
    let observer = cluster.masters().last().expect("a master");
    assert!(
        eventually(CLUSTER_NODE_TIMEOUT * 10, || {
            is_master(node) && sees_as_master(observer, node)
        }),
        "{} took over, and {} knows",
        node.addr(),
        observer.addr()
    );
}

/// Whether replica `replica` holds `key` (read with `READONLY`: a cluster replica redirects
/// reads otherwise).
fn replica_has(replica: &RedisServer, key: &str) -> bool {
    replica_get(replica, key.as_bytes()).is_some()
}

/// `GET key` on replica `replica`, with `READONLY`.
pub(super) fn replica_get(replica: &RedisServer, key: &[u8]) -> Option<Vec<u8>> {
    redis::pipe()
        .cmd("READONLY")
        .ignore()
        .cmd("GET")
        .arg(key)
        .query::<(Option<Vec<u8>>,)>(&mut replica.client())
        .ok()
        .and_then(|(value,)| value)
}

/// Whether `observer`'s `CLUSTER NODES` lists `node` as a master.
pub fn sees_as_master(observer: &RedisServer, node: &RedisServer) -> bool {
    let listing: redis::RedisResult<String> = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut observer.client());
    let port = format!(":{}@", node.port());
    listing.is_ok_and(|listing| {
        listing.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 2
                && fields[1].contains(&port)
                && fields[2].split(',').any(|flag| flag == "master")
        })
    })
}

/// Whether `server` says it is a master.
pub fn is_master(server: &RedisServer) -> bool {
    server
        .try_client()
        .and_then(|mut conn| redis::cmd("ROLE").query::<redis::Value>(&mut conn))
        .is_ok_and(|role| match role {
            redis::Value::Array(fields) => {
                matches!(fields.first(), Some(redis::Value::BulkString(word)) if word == b"master")
            }
            _ => false,
        })
}
