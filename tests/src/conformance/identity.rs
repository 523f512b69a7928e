//! A node's memory identity (`redlock_core::EPOCH_ID_KEY`): a node that restarted from a
//! snapshot, or a replica promoted in its place, keeps an epoch that looks old but lost the
//! lock keys written after it. The checked scripts see the node's new `run_id` or
//! `master_replid` and stamp a new epoch: the node sits out the longest TTL. Each case has its
//! negative control: with the identity key made to match by hand (the check as before the
//! identity), the same loss lets a second holder in.
//!
//! In every case client A holds `res` on all five nodes; three of them then lose it. Client B
//! is new: the loss ended every connection to those nodes. Where clients may not run scripts,
//! the native proof reads the identity (`INFO`) and restamps in writes of its own
//! (`redlock_core::Stamp`): the same cases hold there.

use std::time::Duration;

use redlock_core::{RetryPolicy, SitOutCause, Vote};

use super::adapter::{Adapter, HeldLock, Options};
use super::memory::{
    Outcome, Rival, client, expect_every_node_refuses, expect_refused_by, expect_second_holder,
    expect_votes_again, wait_for_every_node,
};
use crate::{FaultProxy, Servers};
use redlock_local::RedisServer;

const TTL: Duration = Duration::from_secs(30);

/// The three nodes that lose `res`.
const LOSERS: [usize; 3] = [0, 1, 2];

/// The node's identity as the checked scripts and native proofs read it in database 0:
/// `run_id:master_replid:0:evicted_keys`.
fn identity(server: &RedisServer) -> String {
    super::sealed::identity_in(server, 0)
}

/// The node's epoch carries its identity now, as a proof stamped (or adopted) it.
fn assert_stamped(server: &RedisServer) {
    let expected = identity(server);
    let stamped = super::scenarios::eventually(Duration::from_secs(5), || {
        server.get(redlock_core::EPOCH_ID_KEY) == Some(expected.clone().into_bytes())
    });
    assert!(
        stamped,
        "the proof stamped the node's identity: {:?}",
        server.get(redlock_core::EPOCH_ID_KEY)
    );
}

/// The control's "rule disabled": the identity key made to match the node's new identity, as
/// if the check never saw the change.
fn restamp_by_hand(server: &RedisServer) {
    server.set(redlock_core::EPOCH_ID_KEY, identity(server));
}

/// A warms up (its proofs stamp every node's identity), the losers save a snapshot, A locks
/// `res`, and the losers restart from their snapshots: `res` is gone, the epoch is there.
/// Then a new client B tries `res` while A is still valid.
fn snapshot_restart<A: Adapter>(by_hand: bool) -> (Outcome<A>, Vec<usize>) {
    let mut nodes = Servers::start(5);
    let losers = LOSERS.to_vec();
    let holder: A = client(&nodes, Rival::Tracked);
    holder.lock("warm-up", TTL).expect("warm-up").release();
    for &node in &losers {
        assert_stamped(&nodes.servers()[node]);
    }
    let snapshots: Vec<Vec<u8>> = losers
        .iter()
        .map(|&node| nodes.servers()[node].snapshot())
        .collect();
    let held = holder.lock("res", TTL).expect("A locks res");
    wait_for_every_node::<A>(&nodes, &held);
    for (&node, snapshot) in losers.iter().zip(&snapshots) {
        nodes.restart_from_snapshot(node, snapshot);
        let server = &nodes.servers()[node];
        assert!(!server.exists("res"), "res was written after the snapshot");
        assert!(
            server.exists(redlock_core::EPOCH_KEY),
            "the epoch came back"
        );
        if by_hand {
            restamp_by_hand(server);
        }
    }
    let rival: A = client(&nodes, Rival::Tracked);
    let rival_try = rival.try_lock("res", TTL);
    assert!(held.is_valid(), "A is still inside its validity");
    ((held, rival_try), losers)
}

/// The losers each have a replica that missed `res` (its link stalled while A locked it), and are
/// reached through a name that a failover moves (a proxy); each master dies, its replica is
/// promoted (`REPLICAOF NO ONE`), and the name leads to it. Then a new client B tries `res`.
fn failover<A: Adapter>(by_hand: bool) -> (Outcome<A>, Vec<usize>) {
    let mut nodes = Servers::start(5);
    let losers = LOSERS.to_vec();
    let proxies: Vec<FaultProxy> = losers
        .iter()
        .map(|&node| FaultProxy::start(nodes.servers()[node].addr()))
        .collect();
    let mut urls = nodes.urls();
    for (&node, proxy) in losers.iter().zip(&proxies) {
        urls[node] = nodes.servers()[node].url_via(proxy.addr());
    }
    let options = Options {
        retry: Some(RetryPolicy::once()),
        ..Options::default()
    };
    let build =
        || A::build(&urls, &options).unwrap_or_else(|err| panic!("{}: build: {err}", A::NAME));
    let holder: A = build();
    holder.lock("warm-up", TTL).expect("warm-up").release();
    let replicas: Vec<(RedisServer, FaultProxy)> = losers
        .iter()
        .map(|&node| replica_of(&nodes.servers()[node]))
        .collect();
    // Replication lags: what the masters write from now on never reaches their replicas.
    for (_, link) in &replicas {
        link.stall();
    }
    let held = holder.lock("res", TTL).expect("A locks res");
    wait_for_every_node::<A>(&nodes, &held);
    for ((&node, (replica, link)), proxy) in losers.iter().zip(&replicas).zip(&proxies) {
        nodes.kill(node);
        link.drop_all();
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut replica.client())
            .expect("REPLICAOF NO ONE");
        assert!(!replica.exists("res"), "the replica missed res");
        if by_hand {
            restamp_by_hand(replica);
        }
        proxy.retarget(replica.addr());
    }
    let rival: A = build();
    let rival_try = rival.try_lock("res", TTL);
    assert!(held.is_valid(), "A is still inside its validity");
    drop(replicas);
    ((held, rival_try), losers)
}

/// A replica of `master` with its options, replicating through a proxy (its link, which can
/// stall), once it holds the epoch and its identity.
fn replica_of(master: &RedisServer) -> (RedisServer, FaultProxy) {
    let link = FaultProxy::start(master.addr());
    let replica = master.options().clone().replica_of(link.addr()).start();
    let synced = super::scenarios::eventually(Duration::from_secs(20), || {
        replica.exists(redlock_core::EPOCH_KEY) && replica.exists(redlock_core::EPOCH_ID_KEY)
    });
    assert!(synced, "the replica of {} never synced", master.addr());
    (replica, link)
}

/// Three nodes restart from a snapshot taken before A's lock: they refuse B.
pub fn a_node_restarted_from_a_snapshot_refuses<A: Adapter>() {
    let (outcome, losers) = snapshot_restart::<A>(false);
    let restart = [SitOutCause::Restart];
    expect_refused_by::<A>(outcome, "a restart from a snapshot", &losers, &restart);
}

/// Negative control: the identity made to match by hand — B gets the lock A still holds.
pub fn a_snapshot_restart_with_a_matching_identity_votes<A: Adapter>() {
    let (outcome, _) = snapshot_restart::<A>(true);
    expect_second_holder::<A>(outcome, "a restart from a snapshot, identity restamped");
}

/// Three nodes fail over, behind their address, to replicas that missed A's lock: they refuse
/// B.
pub fn a_promoted_replica_refuses<A: Adapter>() {
    let (outcome, losers) = failover::<A>(false);
    // Another server behind the address: its run_id differs (and its master_replid).
    let restart = [SitOutCause::Restart];
    expect_refused_by::<A>(outcome, "a failover to a replica", &losers, &restart);
}

/// Negative control: the promoted replicas' identity made to match by hand — B gets the lock.
pub fn a_promoted_replica_with_a_matching_identity_votes<A: Adapter>() {
    let (outcome, _) = failover::<A>(true);
    expect_second_holder::<A>(outcome, "a failover, identity restamped");
}

/// A node restarted from a snapshot sits out the longest TTL, then votes again (its new epoch
/// carries its new identity): never stuck refusing. Three of five nodes, `max_ttl` 1 s.
pub fn a_restarted_node_votes_again_after_the_longest_ttl<A: Adapter>() {
    const MAX_TTL: Duration = Duration::from_secs(1);
    let mut nodes = Servers::start(5);
    let restarted = LOSERS;
    let options = Options {
        retry: Some(RetryPolicy::once()),
        max_ttl: Some(MAX_TTL),
        ..Options::default()
    };
    let urls = nodes.urls();
    let build = || A::build(&urls, &options).unwrap_or_else(|err| panic!("{}: {err}", A::NAME));
    build().lock("warm-up", MAX_TTL).expect("warm-up").release();
    let snapshots: Vec<Vec<u8>> = restarted
        .iter()
        .map(|&node| nodes.servers()[node].snapshot())
        .collect();
    for (&node, snapshot) in restarted.iter().zip(&snapshots) {
        nodes.restart_from_snapshot(node, snapshot);
    }
    let since = std::time::Instant::now();
    let client = build();
    let err = client
        .try_lock("res", MAX_TTL)
        .err()
        .unwrap_or_else(|| panic!("{}: a restarted node voted at once", A::NAME));
    let failure = err.failure().unwrap_or_else(|| panic!("{err}"));
    for &node in &restarted {
        assert!(
            matches!(
                failure.nodes[node].result,
                Vote::Ineligible { .. } | Vote::Pending
            ),
            "{}: restarted node {node} refuses: {err}",
            A::NAME
        );
    }
    expect_votes_again(&client, since, MAX_TTL);
}

/// The acquire script of the previous release (before the identity), as its clients send it.
const PREVIOUS_CHECKED: &str = include_str!("previous_acquire_checked.lua");

/// The previous release's checked acquisition of `key` on `server`, with the longest TTL
/// `max_ttl`; its key, if it set one, is deleted again. Answers as the script does: 1 (set),
/// 0 (taken), −m (not eligible for m ms more).
fn previous_acquire(server: &RedisServer, key: &str, max_ttl: Duration) -> i64 {
    let mut conn = server.client();
    let answer: i64 = redis::cmd("EVAL")
        .arg(PREVIOUS_CHECKED)
        .arg(2)
        .arg(key)
        .arg(redlock_core::EPOCH_KEY)
        .arg("previous-release")
        .arg(10_000)
        .arg(u64::try_from(max_ttl.as_millis()).unwrap_or(u64::MAX))
        .query(&mut conn)
        .expect("the previous release's script");
    let _: () = redis::cmd("DEL").arg(key).query(&mut conn).expect("DEL");
    answer
}

/// A rolling upgrade: clients of the previous release (whose script reads the epoch with
/// `tonumber` and knows no identity) and of this one share the nodes. Neither stamps what the
/// other cannot read, so no node is stuck refusing: after a trust both vote at once; after a
/// restart that emptied the nodes (the previous script stamping first, without an identity)
/// and after a restart from a snapshot (this one restamping), both vote again within ten times
/// `max_ttl`.
pub fn the_previous_release_and_this_one_share_nodes<A: Adapter>() {
    const MAX_TTL: Duration = Duration::from_secs(2);
    let mut nodes = Servers::start(5);
    let options = Options {
        retry: Some(RetryPolicy::once()),
        max_ttl: Some(MAX_TTL),
        ..Options::default()
    };
    let urls = nodes.urls();
    let client = A::build(&urls, &options).unwrap_or_else(|err| panic!("{}: {err}", A::NAME));
    // The previous release ran its script where clients may run scripts; elsewhere it proved
    // natively, reading only the epoch, which this release still writes as it did (a claim).
    let scripted: Vec<usize> = (0..nodes.len())
        .filter(|&node| !nodes.servers()[node].options().denies_scripting())
        .collect();
    if scripted.is_empty() {
        client.lock("warm-up", MAX_TTL).expect("warm-up").release();
        for server in nodes.servers() {
            assert_stamped(server);
            let epoch = server.get(redlock_core::EPOCH_KEY).unwrap_or_default();
            assert_eq!(
                epoch, b"0",
                "the epoch keeps the format every release reads"
            );
        }
        return;
    }
    let previous_votes = |nodes: &Servers| {
        scripted
            .iter()
            .all(|&node| previous_acquire(&nodes.servers()[node], "p", MAX_TTL) == 1)
    };
    let both_vote = |nodes: &Servers| {
        super::scenarios::eventually(MAX_TTL * 10, || {
            client
                .try_lock("res", MAX_TTL)
                .map(HeldLock::release)
                .is_ok()
                && previous_votes(nodes)
        })
    };
    // Trusted nodes: this release adopts their identity, the previous one sees a trusted epoch.
    client.lock("warm-up", MAX_TTL).expect("warm-up").release();
    assert!(previous_votes(&nodes), "the previous release is refused");
    // Emptied: the previous release stamps the epoch first, without an identity.
    for node in 0..nodes.len() {
        nodes.restart_empty(node);
    }
    for &node in &scripted {
        let answer = previous_acquire(&nodes.servers()[node], "p", MAX_TTL);
        assert!(
            answer < 0,
            "an emptied node voted for the previous release: {answer}"
        );
    }
    assert!(
        both_vote(&nodes),
        "{}: a node stuck refusing after a restart",
        A::NAME
    );
    // Restarted from snapshots: this release restamps the epoch with the new identity, which the
    // previous one reads as a young epoch.
    let snapshots: Vec<Vec<u8>> = nodes.servers().iter().map(RedisServer::snapshot).collect();
    for (node, snapshot) in snapshots.iter().enumerate() {
        nodes.restart_from_snapshot(node, snapshot);
    }
    assert!(
        both_vote(&nodes),
        "{}: a node stuck refusing after a snapshot",
        A::NAME
    );
}

/// Scenario 7 of issue 21: three nodes fail over to their replicas (a graceful `FAILOVER`, the
/// old masters become replicas that keep their clients' connections open) and back again
/// after the interim masters granted A a key that never reached the old ones. B's connections
/// to the old masters stay open the whole time and hear nothing. Returns A's lock and B's try.
fn demoted_and_promoted_again<A: Adapter>(rival: Rival) -> Outcome<A> {
    const MAX_TTL: Duration = Duration::from_secs(4);
    let nodes = Servers::start(5);
    let options = |rival| Options {
        retry: Some(RetryPolicy::once()),
        max_ttl: Some(MAX_TTL),
        memory_watch_fault: Rival::fault(rival),
        ..Options::default()
    };
    let build = |urls: &[String], rival| {
        A::build(urls, &options(rival)).unwrap_or_else(|err| panic!("{}: build: {err}", A::NAME))
    };
    // B proves every node through connections it keeps.
    let rival: A = build(&nodes.urls(), rival);
    rival.lock("warm-up", MAX_TTL).expect("warm-up").release();
    // Each loser gets a replica whose address, as the old master will see it after the
    // failover, is a proxy: the link that later drops the interim master's writes.
    let interim: Vec<(RedisServer, FaultProxy)> = LOSERS
        .iter()
        .map(|&node| {
            let master = &nodes.servers()[node];
            let link = FaultProxy::start(master.addr());
            let replica = master
                .options()
                .clone()
                .replica_of(master.addr())
                .arg("--replica-announce-ip")
                .arg("127.0.0.1")
                .arg("--replica-announce-port")
                .arg(link.addr().port().to_string())
                .start();
            link.retarget(replica.addr());
            (replica, link)
        })
        .collect();
    let synced = super::scenarios::eventually(Duration::from_secs(20), || {
        interim
            .iter()
            .all(|(replica, _)| replica.exists(redlock_core::EPOCH_ID_KEY))
    });
    assert!(synced, "the replicas never synced");
    // The three failovers at once (each returns at once, and completes on its own).
    for node in LOSERS {
        let _: () = redis::cmd("FAILOVER")
            .query(&mut nodes.servers()[node].client())
            .expect("FAILOVER");
    }
    let promoted = super::scenarios::eventually(Duration::from_secs(20), || {
        LOSERS.iter().zip(&interim).all(|(&node, (replica, _))| {
            role(replica) == "master" && role(&nodes.servers()[node]) == "slave"
        })
    });
    assert!(promoted, "the failovers never completed");
    // From now on the old masters hear nothing of the interim masters' writes.
    for (_, link) in &interim {
        link.stall();
    }
    // A reaches the interim masters; they sit out MAX_TTL (their identity is new), then vote.
    let mut urls = nodes.urls();
    for (node, (replica, _)) in LOSERS.iter().zip(&interim) {
        urls[*node] = replica.url();
    }
    let holder: A = build(&urls, Rival::Tracked);
    let mut held = None;
    let granted = super::scenarios::eventually(MAX_TTL * 5, || {
        held = holder.try_lock("res", MAX_TTL).ok();
        held.is_some()
    });
    assert!(granted, "{}: the interim masters never voted", A::NAME);
    let held = held.expect("A holds res");
    // The interim masters die; the old ones are promoted again, without A's key.
    for (node, (mut replica, link)) in LOSERS.into_iter().zip(interim) {
        replica.kill();
        link.drop_all();
        let old = &nodes.servers()[node];
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut old.client())
            .expect("REPLICAOF NO ONE");
        assert!(!old.exists("res"), "the old master missed A's key");
    }
    let rival_try = rival.try_lock("res", MAX_TTL);
    assert!(held.is_valid(), "A is still inside its validity");
    (held, rival_try)
}

/// The node's `role` from `INFO replication`.
fn role(server: &RedisServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut server.client())
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix("role:"))
        .map(|role| role.trim().to_owned())
        .unwrap_or_default()
}

/// A node demoted and promoted again under B's open connections refuses B: B's proofs
/// expired (they count for half the longest TTL, and the interim master sat out all of it),
/// and the next proof sees the node's new `master_replid`.
pub fn a_node_demoted_and_promoted_again_refuses<A: Adapter>() {
    expect_refused_by::<A>(
        demoted_and_promoted_again::<A>(Rival::Tracked),
        "a demotion and a re-promotion under open connections",
        &LOSERS,
        &[SitOutCause::Replication],
    );
}

/// Negative control: proofs that never expire — B's connections vouch for the re-promoted
/// nodes, which lack A's key, and B gets the lock A still holds.
pub fn a_node_demoted_and_promoted_again_votes_for_an_ageless_proof<A: Adapter>() {
    expect_second_holder::<A>(
        demoted_and_promoted_again::<A>(Rival::Faulty(redlock_core::WatchFault::Ageless)),
        "with ageless proofs, a demotion and a re-promotion",
    );
}

/// A user denied `INFO` (an ACL with `-info`, or `-@dangerous`): the node votes under its epoch
/// alone, as before the identity — the checked script reads `INFO` through `redis.pcall`, the
/// native proof takes a failed `INFO` as no identity — and stamps none, so it never fights a
/// client allowed `INFO` on the same node. What goes unseen, shown: after a restart from a
/// snapshot the node votes at once for such a user, while a client allowed `INFO` is refused.
pub fn a_node_that_denies_info_votes_under_its_epoch_alone<A: Adapter>() {
    const USER: (&str, &str) = ("no-info", "no-info-password");
    let base = redlock_local::ServerOptions::new();
    let mut rules = vec![
        "--user",
        USER.0,
        "on",
        ">no-info-password",
        "~*",
        "&*",
        "+@all",
        "-info",
    ];
    if base.denies_scripting() {
        rules.push("-@scripting");
    }
    let mut nodes = Servers::start_with(3, &base.args(rules));
    let denied: Vec<String> = nodes
        .addrs()
        .iter()
        .map(|addr| format!("redis://{}:{}@{addr}/", USER.0, USER.1))
        .collect();
    let options = Options {
        retry: Some(RetryPolicy::once()),
        ..Options::default()
    };
    let build = |urls: &[String]| {
        A::build(urls, &options).unwrap_or_else(|err| panic!("{}: {err}", A::NAME))
    };
    build(&denied)
        .lock("warm-up", TTL)
        .unwrap_or_else(|err| panic!("{}: a node denying INFO refused: {err}", A::NAME))
        .release();
    for server in nodes.servers() {
        let stamped = server.get(redlock_core::EPOCH_ID_KEY);
        assert!(
            stamped.as_deref().is_none_or(<[u8]>::is_empty),
            "{}: an identity stamped without INFO: {stamped:?}",
            A::NAME
        );
    }
    // A client allowed INFO stamps the identity; then the nodes restart from snapshots.
    let allowed = nodes.urls();
    build(&allowed)
        .lock("warm-up", TTL)
        .expect("warm-up")
        .release();
    for server in nodes.servers() {
        assert_stamped(server);
    }
    let snapshots: Vec<Vec<u8>> = nodes.servers().iter().map(RedisServer::snapshot).collect();
    for (node, snapshot) in snapshots.iter().enumerate() {
        nodes.restart_from_snapshot(node, snapshot);
    }
    // Unseen without INFO: the nodes vote at once for that user.
    build(&denied)
        .try_lock("res", TTL)
        .unwrap_or_else(|err| panic!("{}: {err}", A::NAME))
        .release();
    // Seen with it: the new identity restamps, and the nodes refuse.
    expect_every_node_refuses::<A>(
        build(&allowed).try_lock("res", TTL),
        "restarted from snapshots, for a client allowed INFO",
    );
}
