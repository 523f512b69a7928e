//! The lock's everyday surface on the two deployments a cluster serves, against real local
//! servers: a 3-master cluster as one node beside two standalone nodes, and one 3-master cluster
//! lending each lock three votes (`cluster_votes`). Each deployment has three votes, and every
//! check reads each vote's key on the server that holds it: a lock, a rival, an extension, an
//! expiry, a lock of several resources, hand-over by token, fencing tokens and mutual exclusion
//! under contention, with no lock key left behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Commands;
use redlock_core::{LockRequest, RetryPolicy, Vote, vote_slots};
use redlock_redis::Error;

use super::adapter::{Adapter, HeldLock, Options};
use super::scenarios::{count_under_lock, eventually};
use crate::{RedisCluster, RedisServer, Servers};

const TTL: Duration = Duration::from_secs(10);
/// Every deployment here has three votes.
const VOTES: usize = 3;

/// A deployment with a cluster in it.
#[derive(Clone, Copy, Debug)]
pub enum Setup {
    /// Node 0 is a 3-master cluster, nodes 1 and 2 standalone servers.
    BesideTwo,
    /// One 3-master cluster lends every lock three votes.
    ThreeVotes,
}

/// The servers of a [`Setup`].
struct Deployment {
    setup: Setup,
    cluster: RedisCluster,
    standalone: Servers,
}

impl Deployment {
    fn start(setup: Setup) -> Self {
        let standalone = match setup {
            Setup::BesideTwo => Servers::start(2),
            Setup::ThreeVotes => Servers::start(0),
        };
        Self {
            setup,
            cluster: RedisCluster::start(3, 0),
            standalone,
        }
    }

    /// A client of the deployment with `options` on top, every node trusted.
    fn client<A: Adapter>(&self, options: &Options) -> A {
        let mut urls = vec![self.cluster.masters()[1].url()];
        urls.extend(self.standalone.urls());
        let mut options = options.clone();
        if let Setup::ThreeVotes = self.setup {
            options.cluster_votes = vec![(0, VOTES)];
        }
        let client = A::build(&urls, &options)
            .unwrap_or_else(|err| panic!("{}: build failed: {err}", A::NAME));
        let votes = options.cluster_votes.first().map_or(1, |&(_, votes)| votes);
        client.trust_every_node(urls.len() - 1 + votes, "trust every node and slot");
        client
    }

    /// Each vote's server and key for lock key `key`.
    fn vote_keys(&self, key: &str) -> Vec<(&RedisServer, String)> {
        let on_cluster = |key: String| {
            let master = self.cluster.master_of(key.as_bytes());
            (&self.cluster.masters()[master], key)
        };
        match self.setup {
            Setup::BesideTwo => std::iter::once(on_cluster(key.to_owned()))
                .chain(
                    self.standalone
                        .servers()
                        .iter()
                        .map(|s| (s, key.to_owned())),
                )
                .collect(),
            Setup::ThreeVotes => vote_slots(VOTES)
                .map(|slot| on_cluster(format!("{{{}}}{key}", slot.tag())))
                .collect(),
        }
    }

    /// How many votes hold `key = token`.
    fn holding(&self, key: &str, token: &[u8]) -> usize {
        self.vote_keys(key)
            .into_iter()
            .filter(|(server, key)| server.get(key).as_deref() == Some(token))
            .count()
    }

    /// Asserts that every vote comes to hold `key = token` (a call returns on a quorum; the
    /// last vote's answer may still be on its way).
    fn assert_held(&self, key: &str, token: &[u8]) {
        let held = eventually(Duration::from_secs(5), || self.holding(key, token) == VOTES);
        assert!(held, "{key} is held on {} votes", self.holding(key, token));
    }

    /// Each vote's `PTTL` of `key`.
    fn pttls(&self, key: &str) -> Vec<i64> {
        self.vote_keys(key)
            .into_iter()
            .map(|(server, key)| server.pttl(key))
            .collect()
    }

    /// Every key on every server but the library's own (epochs, fence counters): what a lock
    /// left behind.
    fn lock_keys(&self) -> Vec<String> {
        let servers = self
            .cluster
            .masters()
            .iter()
            .chain(self.standalone.servers());
        servers
            .flat_map(|server| {
                let keys: Vec<String> = server.client().keys("*").expect("KEYS");
                keys.into_iter().filter(|key| !key.starts_with("redlock:"))
            })
            .collect()
    }

    fn assert_nothing_left(&self) {
        let clean = eventually(Duration::from_secs(5), || self.lock_keys().is_empty());
        assert!(clean, "lock keys left behind: {:?}", self.lock_keys());
    }
}

fn once() -> Options {
    Options {
        retry: Some(RetryPolicy::once()),
        ..Options::default()
    }
}

/// How many votes refused a failed acquisition.
fn refusals<L: std::fmt::Debug>(result: Result<L, Error>) -> usize {
    match result {
        Err(Error::Contended(detail) | Error::NotHeld(detail)) => detail
            .nodes
            .iter()
            .filter(|node| node.result == Vote::Refused)
            .count(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Lock, rival, extension, release, expiry, several resources of one hash tag, and mutual
/// exclusion under contention, on `setup`.
fn locks_extends_and_releases<A: Adapter>(setup: Setup) {
    let deployment = Deployment::start(setup);
    // Up to 2 s for each node's answer: the stale lock below lives 300 ms, whose default node
    // timeout (30 ms) a loaded machine can miss (a vote would count as timed out, not as held
    // by the other).
    let first: A = deployment.client(&Options {
        node_timeout: Some(Duration::from_secs(2)),
        ..Options::default()
    });
    let second: A = deployment.client(&once());

    let mut lock = first.lock("res", Duration::from_secs(2)).expect("lock");
    let token = lock.token();
    deployment.assert_held("res", &token);
    for pttl in deployment.pttls("res") {
        assert!(pttl > 0 && pttl <= 2_000, "PTTL {pttl}");
    }
    assert!(
        refusals(second.try_lock("res", TTL)) >= 2,
        "a rival is refused"
    );
    lock.extend(Duration::from_secs(20)).expect("extend");
    let refreshed = eventually(Duration::from_secs(5), || {
        let pttls = deployment.pttls("res");
        assert!(pttls.iter().all(|&p| p <= 20_000), "PTTL past the TTL");
        pttls.iter().all(|&p| p > 10_000)
    });
    assert!(refreshed, "PTTLs {:?}", deployment.pttls("res"));
    assert_eq!(lock.release().released(), VOTES);
    deployment.assert_nothing_left();

    // Held past its TTL: another client takes it; the first's extension is lost and its
    // release leaves the other's keys.
    let mut stale = first.lock("res", Duration::from_millis(300)).expect("lock");
    assert!(
        eventually(Duration::from_secs(10), || deployment
            .lock_keys()
            .is_empty()),
        "keys expire"
    );
    let fresh = second.lock("res", TTL).expect("free after expiry");
    // Every vote holds the fresh lock before the stale calls go out: the call returned on a
    // quorum, and a stale release that overtook the last vote's SET would find no key there.
    deployment.assert_held("res", &fresh.token());
    assert!(matches!(stale.extend(TTL), Err(Error::Lost(_))));
    let report = stale.release();
    assert_eq!(
        (report.released(), report.held_by_other()),
        (0, VOTES),
        "{report:?}"
    );
    deployment.assert_held("res", &fresh.token());
    fresh.release();

    // Several resources of one hash tag: all or nothing.
    let ab = first
        .acquire(LockRequest::new("{job}a", TTL).resource("{job}b"))
        .expect("lock a and b");
    let bc = LockRequest::new("{job}b", TTL)
        .resource("{job}c")
        .retry(RetryPolicy::once());
    assert!(matches!(
        second.acquire(bc.clone()),
        Err(Error::Contended(_))
    ));
    assert!(deployment.lock_keys().iter().all(|key| !key.ends_with('c')));
    ab.release();
    let bc = second.acquire(bc).expect("free after release");
    deployment.assert_held("{job}b", &bc.token());
    deployment.assert_held("{job}c", &bc.token());
    bc.release();
    deployment.assert_nothing_left();

    excludes_under_contention(&deployment, first);
}

/// 8 workers × 25 critical sections of a non-atomic `GET`/`SET` increment on a server of its
/// own: the counter ends at exactly 200.
fn excludes_under_contention<A: Adapter>(deployment: &Deployment, redlock: A) {
    const WORKERS: usize = 8;
    const SECTIONS: usize = 25;
    let counter = RedisServer::start();
    let count = count_under_lock(&Arc::new(redlock), &counter, WORKERS, SECTIONS, |redlock| {
        let retry = RetryPolicy::default()
            .unlimited()
            .delay(Duration::from_millis(1))
            .jitter(Duration::from_millis(10))
            .deadline(Duration::from_secs(120));
        redlock
            .acquire(LockRequest::new("counter", TTL).retry(retry))
            .expect("lock within the deadline")
    });
    assert_eq!(count, (WORKERS * SECTIONS) as u64);
    deployment.assert_nothing_left();
}

/// Hand-over by token (resume, release by token, a wrong token refused) and fencing tokens
/// that grow, on `setup`.
fn hands_over_and_fences<A: Adapter>(setup: Setup) {
    let deployment = Deployment::start(setup);
    let first: A = deployment.client(&Options::default());
    let second: A = deployment.client(&once());
    let fenced = |ttl| LockRequest::new("res", ttl).fenced();

    let short = Duration::from_secs(3);
    let taken = first.acquire(fenced(short)).expect("fenced lock");
    let fence = taken.fence().expect("a fence");
    let token = taken.token();
    let validity = taken.valid_until();
    deployment.assert_held("res", &token);
    // The process exits without releasing: its lock stays on the votes.
    std::mem::forget(taken);

    assert!(refusals(second.resume("res", b"not-the-token", TTL)) >= 2);
    let report = second
        .release_by_token("res", b"not-the-token")
        .expect("valid input");
    assert_eq!((report.released(), report.held_by_other()), (0, VOTES));
    let resumed = second.resume("res", &token, TTL).expect("resume by token");
    assert_eq!(resumed.token(), token);
    assert!(resumed.valid_until() > validity, "a fresh validity");
    assert!(resumed.valid_until() <= Instant::now() + TTL);
    let extended = eventually(Duration::from_secs(5), || {
        deployment.pttls("res").iter().all(|&p| p > 3_000)
    });
    assert!(extended, "PTTLs {:?}", deployment.pttls("res"));
    assert_eq!(resumed.release().released(), VOTES);
    deployment.assert_nothing_left();

    let taken = first.lock("job", TTL).expect("lock");
    let token = taken.token();
    deployment.assert_held("job", &token);
    std::mem::forget(taken);
    let report = second.release_by_token("job", &token).expect("valid input");
    assert_eq!(report.released(), VOTES, "{report:?}");
    deployment.assert_nothing_left();

    let mut last = fence;
    for _ in 0..3 {
        let lock = second.acquire(fenced(TTL)).expect("fenced lock");
        let next = lock.fence().expect("a fence");
        assert!(next > last, "fence {next} after {last}");
        last = next;
        lock.release();
    }
    deployment.assert_nothing_left();
}

/// Lock, rival, extension, release, expiry, several resources and mutual exclusion on a
/// cluster node beside two standalone nodes.
pub fn a_cluster_setup_beside_two_nodes_locks_extends_and_releases<A: Adapter>() {
    locks_extends_and_releases::<A>(Setup::BesideTwo);
}

/// Lock, rival, extension, release, expiry, several resources and mutual exclusion on one
/// cluster lending three votes.
pub fn a_cluster_setup_of_three_votes_locks_extends_and_releases<A: Adapter>() {
    locks_extends_and_releases::<A>(Setup::ThreeVotes);
}

/// Hand-over by token and fencing tokens on a cluster node beside two standalone nodes.
pub fn a_cluster_setup_beside_two_nodes_hands_over_and_fences<A: Adapter>() {
    hands_over_and_fences::<A>(Setup::BesideTwo);
}

/// Hand-over by token and fencing tokens on one cluster lending three votes.
pub fn a_cluster_setup_of_three_votes_hands_over_and_fences<A: Adapter>() {
    hands_over_and_fences::<A>(Setup::ThreeVotes);
}
