//! Chaos on a cluster node: one Redis or Valkey Cluster of 3 masters with a replica each,
//! lending every lock 3 votes (`cluster_votes`), while a seeded schedule fails shards over
//! (`CLUSTER FAILOVER`), moves the votes' slots between masters with their held keys (the
//! legacy `SETSLOT`/`MIGRATE` steps) and once fails a shard over losing writes (its replica cut
//! off, the master killed with `kill -9`, the replica taking over without the master's last
//! keys). Clients on two adapters (`redlock-blocking` threads, `redlock-tokio`) take locks and
//! write a counter under them, as in the main run.
//!
//! What is checked ([`ClusterChaosReport::violations`]): no two windows of one resource
//! overlap ([`Recorder`], whose negative control is the restart scenario), and each counter
//! equals the sections that wrote it. With 3 votes, one lossy vote alone cannot give a rival
//! a quorum, so this run has no negative control of its own: the single-vote failover canaries
//! (`a_promoted_replica_sits_out_for_its_slots` and its siblings) show the double holder
//! without restart-aware voting. The test also checks that the run was busy: sections
//! written by every client kind, and every fault kind injected.
//!
//! No proxies here: a cluster node's client reaches every master at the address the cluster
//! announces, so link faults are the main run's business.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlock_core::{RetryPolicy, Slot, vote_slots};

use super::recorder::{Recorder, Window};
use crate::conformance::{Adapter, Blocking, HeldLock, Options, Tokio};
use crate::rng::TestRng;
use crate::{CLUSTER_NODE_TIMEOUT, RedisCluster, RedisServer, ServerOptions};

/// Votes the cluster lends each lock (one per master).
const VOTES: usize = 3;
/// Resources the clients compete for.
const RESOURCES: usize = 2;
/// TTLs are drawn from this range; its upper end is the clients' longest TTL.
const TTL: (Duration, Duration) = (Duration::from_millis(1500), Duration::from_millis(3000));
/// A section writes its counter only with this much validity left.
const WRITE_GUARD: Duration = Duration::from_millis(500);
/// Pause between two faults.
const FAULT_GAP: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(4));

/// The faults of a cluster chaos run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClusterFault {
    /// `CLUSTER FAILOVER` on a shard's replica: a planned failover.
    Failover,
    /// A vote's slot moved to another master with its keys.
    Migration,
    /// A lossy failover, once per run: a master whose replica is stopped and cut off keeps
    /// granting, dies by `kill -9`, and the replica takes over without those keys.
    Kill,
}

impl ClusterFault {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::Failover, Self::Migration, Self::Kill];
}

/// What a cluster chaos run found.
#[derive(Debug)]
pub struct ClusterChaosReport {
    /// Seeds the fault schedule and the clients' choices.
    pub seed: u64,
    /// Sections that wrote their counter, per client kind (`blocking`, `tokio`).
    pub written: Vec<(&'static str, u64)>,
    /// Lock calls that failed (no quorum in time): allowed, counted.
    pub failed: u64,
    /// Faults injected, per kind.
    pub faults: Vec<(ClusterFault, u64)>,
    /// Faults tried (some find nothing to do, e.g. while a shard fails over).
    pub attempts: u64,
    /// Descriptions of overlapping windows.
    pub overlaps: Vec<String>,
    /// `(resource, counter, sections that wrote it)`.
    pub counters: Vec<(usize, i64, u64)>,
}

impl ClusterChaosReport {
    /// Every broken invariant, in words.
    pub fn violations(&self) -> Vec<String> {
        let mut found = self.overlaps.clone();
        for (resource, counter, written) in &self.counters {
            if u64::try_from(*counter).ok() != Some(*written) {
                found.push(format!(
                    "resource {resource}: the counter is {counter}, but {written} sections wrote it"
                ));
            }
        }
        found
    }
}

impl std::fmt::Display for ClusterChaosReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {}; written {:?}; failed calls {}; faults {:?} of {} tried; counters {:?}; {} \
             overlap(s)",
            self.seed,
            self.written,
            self.failed,
            self.faults,
            self.attempts,
            self.counters,
            self.overlaps.len()
        )
    }
}

/// Runs clients and faults on a local cluster for `duration` from `seed`.
///
/// # Panics
/// If the cluster or the counter server cannot be started, or a client cannot be built.
pub fn cluster_run(seed: u64, duration: Duration) -> ClusterChaosReport {
    let options = ServerOptions::new().args(["--cluster-require-full-coverage", "no"]);
    let mut cluster = RedisCluster::try_start_with(VOTES, 1, &options)
        .unwrap_or_else(|err| panic!("a local cluster: {err}"));
    let counter = RedisServer::start();
    let urls: Vec<String> = cluster.urls();
    let recorder = Arc::new(Recorder::new());
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let written: Arc<Vec<AtomicU64>> =
        Arc::new((0..RESOURCES).map(|_| AtomicU64::new(0)).collect());
    let mut rng = TestRng::new(seed);
    let counter_url = counter.url();
    let mut clients = Vec::new();
    for client in 0..4 {
        let (urls, counter_url, recorder, stop, failed, written) = (
            urls.clone(),
            counter_url.clone(),
            recorder.clone(),
            stop.clone(),
            failed.clone(),
            written.clone(),
        );
        let rng = rng.fork();
        clients.push(thread::spawn(move || {
            let work = Work {
                client,
                urls: &urls,
                counter_url: &counter_url,
                recorder: &recorder,
                stop: &stop,
                failed: &failed,
                written: &written,
            };
            if client % 2 == 0 {
                ("blocking", work.run::<Blocking>(rng))
            } else {
                ("tokio", work.run::<Tokio>(rng))
            }
        }));
    }
    let started = Instant::now();
    let mut faults = vec![
        (ClusterFault::Failover, 0),
        (ClusterFault::Migration, 0),
        (ClusterFault::Kill, 0),
    ];
    let mut killed = false;
    let mut attempts = 0_u64;
    while started.elapsed() < duration {
        thread::sleep(rng.duration(FAULT_GAP));
        attempts += 1;
        // Failovers and migrations in turn, and one lossy failover once a quarter has passed
        // (it is retried until it happens).
        let fault = match attempts % 2 {
            _ if !killed && started.elapsed() > duration / 4 => ClusterFault::Kill,
            0 => ClusterFault::Migration,
            _ => ClusterFault::Failover,
        };
        let done = match fault {
            ClusterFault::Failover => fail_over(&cluster, &mut rng),
            ClusterFault::Migration => migrate(&cluster, &mut rng),
            ClusterFault::Kill => {
                killed = kill(&mut cluster, &mut rng);
                killed
            }
        };
        if let Some((_, count)) = faults.iter_mut().find(|(kind, _)| done && *kind == fault) {
            *count += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let by_client: Vec<(&'static str, u64)> = clients
        .into_iter()
        .map(|client| client.join().expect("a chaos client panicked"))
        .collect();
    let mut written_by = vec![("blocking", 0), ("tokio", 0)];
    for (kind, count) in by_client {
        if let Some((_, total)) = written_by.iter_mut().find(|(k, _)| *k == kind) {
            *total += count;
        }
    }
    let counters = (0..RESOURCES)
        .map(|resource| {
            let value: Option<i64> = counter
                .get(counter_key(resource))
                .and_then(|bytes| String::from_utf8(bytes).ok()?.parse().ok());
            (
                resource,
                value.unwrap_or(0),
                written[resource].load(Ordering::Relaxed),
            )
        })
        .collect();
    ClusterChaosReport {
        seed,
        written: written_by,
        failed: failed.load(Ordering::Relaxed),
        faults,
        attempts,
        overlaps: recorder
            .overlaps()
            .iter()
            .map(|overlap| recorder.describe(overlap))
            .collect(),
        counters,
    }
}

fn counter_key(resource: usize) -> String {
    format!("counter:{resource}")
}

/// One client's loop.
struct Work<'a> {
    client: usize,
    urls: &'a [String],
    counter_url: &'a str,
    recorder: &'a Recorder,
    stop: &'a AtomicBool,
    failed: &'a AtomicU64,
    written: &'a [AtomicU64],
}

impl Work<'_> {
    /// Takes locks until told to stop; returns how many sections wrote their counter.
    fn run<A: Adapter>(&self, mut rng: TestRng) -> u64 {
        let options = Options {
            cluster_votes: vec![(0, VOTES)],
            max_ttl: Some(TTL.1),
            retry: Some(RetryPolicy::default().attempts(5)),
            ..Options::default()
        };
        let client = A::build(&self.urls[..1], &options)
            .unwrap_or_else(|err| panic!("{}: a chaos client: {err}", A::NAME));
        if self.client == 0 {
            // Every slot trusted once, before any lock: the cluster is fresh.
            // Not asserted to trust every vote: the faults may already run (a vote whose
            // master fails over mid-trust is not trusted, and its slots sit out).
            client.trust_nodes().expect("trust every slot");
        }
        let mut counter = redis::Client::open(self.counter_url)
            .and_then(|c| c.get_connection())
            .expect("the counter server");
        let mut mine = 0;
        while !self.stop.load(Ordering::Relaxed) {
            let resource = rng.index(RESOURCES);
            let ttl = rng.duration(TTL);
            let name = format!("chaos-cluster:{resource}");
            let taken = match rng.chance(0.5) {
                true => client.lock(&name, ttl),
                false => client.try_lock(&name, ttl),
            };
            let Ok(lock) = taken else {
                self.failed.fetch_add(1, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(20));
                continue;
            };
            let acquired_at = Instant::now();
            let key = counter_key(resource);
            let value: Option<i64> = redis::cmd("GET")
                .arg(&key)
                .query(&mut counter)
                .ok()
                .flatten();
            thread::sleep(rng.duration((Duration::ZERO, Duration::from_millis(30))));
            if lock.valid_until() > Instant::now() + WRITE_GUARD {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(value.unwrap_or(0) + 1)
                    .query(&mut counter)
                    .expect("SET the counter");
                self.written[resource].fetch_add(1, Ordering::Relaxed);
                mine += 1;
            }
            self.recorder.record(Window {
                client: self.client,
                resource,
                how: A::NAME,
                acquired_at,
                valid_until: lock.valid_until(),
                ended_at: Instant::now(),
            });
            lock.release();
        }
        mine
    }
}

/// The running nodes that say they are masters, and the others that run (replicas).
fn roles(cluster: &RedisCluster) -> (Vec<&RedisServer>, Vec<&RedisServer>) {
    cluster
        .masters()
        .iter()
        .chain(cluster.replicas())
        .filter(|node| node.is_running())
        .partition(|node| crate::conformance::cluster_failover::is_master(node))
}

/// `CLUSTER FAILOVER` on a random replica; whether it took over within the limit.
fn fail_over(cluster: &RedisCluster, rng: &mut TestRng) -> bool {
    let (_, replicas) = roles(cluster);
    let Some(&replica) = replicas.get(rng.index(replicas.len())) else {
        return false;
    };
    let asked: redis::RedisResult<()> = replica
        .try_client()
        .and_then(|mut conn| redis::cmd("CLUSTER").arg("FAILOVER").query(&mut conn));
    asked.is_ok()
        && crate::conformance::scenarios::eventually(CLUSTER_NODE_TIMEOUT * 5, || {
            crate::conformance::cluster_failover::is_master(replica)
        })
}

/// Moves a random vote's slot, with its keys, to another master.
fn migrate(cluster: &RedisCluster, rng: &mut TestRng) -> bool {
    let (masters, _) = roles(cluster);
    let slot: Slot = vote_slots(VOTES)
        .nth(rng.index(VOTES))
        .expect("a vote slot");
    let owner = masters.iter().position(|master| {
        redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot.get())
            .query::<i64>(&mut master.client())
            .is_ok()
            && serves(master, slot)
    });
    let Some(from) = owner else { return false };
    let others: Vec<usize> = (0..masters.len()).filter(|&m| m != from).collect();
    let Some(&to) = others.get(rng.index(others.len())) else {
        return false;
    };
    cluster
        .migrate_slot(slot.get(), masters[from], masters[to])
        .is_ok()
}

/// Whether `master` serves `slot` (a `GET` of a key there is not redirected).
fn serves(master: &RedisServer, slot: Slot) -> bool {
    redis::cmd("GET")
        .arg(format!("{{{}}}probe", slot.tag()))
        .query::<Option<Vec<u8>>>(&mut master.client())
        .is_ok()
}

/// A lossy failover: a random shard's replica is stopped and cut off from its master, the
/// master keeps granting for a moment (those keys never reach the replica), then dies by
/// `kill -9`, and the replica takes over (`CLUSTER FAILOVER TAKEOVER`) without them — the
/// failover the Redis page warns of. Whether it happened.
fn kill(cluster: &mut RedisCluster, rng: &mut TestRng) -> bool {
    let shard = rng.index(cluster.masters().len());
    let (first, second) = (&cluster.masters()[shard], &cluster.replicas_of(shard)[0]);
    if !first.is_running() || !second.is_running() {
        return false;
    }
    let first_is_master = crate::conformance::cluster_failover::is_master(first);
    let (victim, partner) = match first_is_master {
        true => (Side::Master, Side::Replica),
        false => (Side::Replica, Side::Master),
    };
    // The replica stops first, then loses its stream: it cannot reconnect in between.
    partner.of(cluster, shard).pause();
    let cut: redis::RedisResult<redis::Value> =
        victim.of(cluster, shard).try_client().and_then(|mut conn| {
            redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("replica")
                .query(&mut conn)
        });
    if cut.is_err() {
        partner.of(cluster, shard).resume();
        return false;
    }
    thread::sleep(Duration::from_millis(300));
    victim.of(cluster, shard).kill();
    partner.of(cluster, shard).resume();
    let partner = partner.of(cluster, shard);
    let took_over: redis::RedisResult<()> = partner.try_client().and_then(|mut conn| {
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .arg("TAKEOVER")
            .query(&mut conn)
    });
    took_over.is_ok()
        && crate::conformance::scenarios::eventually(CLUSTER_NODE_TIMEOUT * 5, || {
            crate::conformance::cluster_failover::is_master(partner)
        })
}

/// Which node of a shard, as the cluster formed.
#[derive(Debug, Clone, Copy)]
enum Side {
    Master,
    Replica,
}

impl Side {
    fn of(self, cluster: &mut RedisCluster, shard: usize) -> &mut RedisServer {
        match self {
            Self::Master => cluster.master_mut(shard),
            Self::Replica => cluster.replica_mut(shard, 0),
        }
    }
}
