//! Losses a proven connection hears nothing of (scenarios 3 and 6 of issue 21): a database
//! swapped in by `SWAPDB`, and a lock key evicted on its own under `volatile-lru` (the epoch,
//! which has no TTL, stays). Neither ends a connection nor pushes an invalidation of the epoch.
//! On a node that can swap or evicts, each vouched acquisition is sealed: it goes in a `MULTI`
//! with `EXISTS` of its proof's marker (`redlock_core::EPOCH_MARKER_PREFIX`: a node that does
//! not evict), or else with an `MGET` of the epoch and its stamp
//! (`redlock_core::EPOCH_ID_KEY`, which names the database it was stamped in and the node's
//! eviction count) and, on an evicting node, `INFO stats`. A missing marker, a stamp from
//! another database or an eviction count that moved refuses the vote; the proof that follows
//! sees the identity changed and the node sits out. Each case has its negative control
//! (`WatchFault::Unsealed`: a plain `SET`) that lets a second holder in, and runs once on the
//! untracked path too (the checked script compares the same identity on every acquisition).
//!
//! In every case client A holds `res` on all five nodes; three of them then lose it while client
//! B's connections, proven before, stay open.

use std::time::Duration;

use redlock_core::{SitOutCause, WatchFault};
use redlock_local::RedisServer;

use super::adapter::{Adapter, HeldLock};
use super::memory::{
    Outcome, Rival, config_set, evict, expect_refused_by, expect_second_holder,
    expect_untracked_needs_scripts, rival_try_after,
};

/// The marker test's locks' TTL.
const TTL: Duration = Duration::from_secs(10);

/// The three nodes that lose `res`.
const LOSERS: [usize; 3] = [0, 1, 2];

/// What the losers lose, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// `SWAPDB 0 1`, where database 1 holds another deployment's trusted epoch, stamped there.
    Swap,
    /// `res` evicted on its own under `volatile-lru`.
    Eviction,
    /// The same, on a node that publishes its evictions (`notify-keyspace-events Ee`): B's
    /// connections, subscribed to them, hear it.
    HeardEviction,
}

/// The node's identity in database `db`, as a proof there stamps it.
pub(super) fn identity_in(server: &RedisServer, db: u32) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .arg("replication")
        .arg("stats")
        .query(&mut server.client())
        .expect("INFO");
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|value| value.trim().to_owned())
            .unwrap_or_else(|| panic!("INFO has no {name}"))
    };
    format!(
        "{}:{}:{db}:{}",
        field("run_id:"),
        field("master_replid:"),
        field("evicted_keys:")
    )
}

/// What each loser is set up with before anyone proves it: for [`Loss::Eviction`] an evicting
/// policy (the proof reads it); for [`Loss::Swap`] another deployment's trusted epoch in
/// database 1, stamped there. (Client tracking names keys without their database: a write of
/// the epoch in database 1 would push an invalidation to B's connections, which then prove
/// again — the swap itself pushes nothing.)
fn prepare(server: &RedisServer, loss: Loss) {
    match loss {
        Loss::Eviction => config_set(server, "maxmemory-policy", "volatile-lru"),
        Loss::HeardEviction => {
            config_set(server, "maxmemory-policy", "volatile-lru");
            config_set(server, "notify-keyspace-events", "Ee");
        }
        Loss::Swap => {
            let _: () = redis::pipe()
                .cmd("SELECT")
                .arg(1)
                .cmd("MSET")
                .arg(redlock_core::EPOCH_KEY)
                .arg("0")
                .arg(redlock_core::EPOCH_ID_KEY)
                .arg(identity_in(server, 1))
                .cmd("SELECT")
                .arg(0)
                .query(&mut server.client())
                .expect("database 1");
        }
    }
}

fn lose(server: &RedisServer, loss: Loss) {
    match loss {
        Loss::Swap => {
            let _: () = redis::cmd("SWAPDB")
                .arg(0)
                .arg(1)
                .query(&mut server.client())
                .expect("SWAPDB");
        }
        // The epoch, without a TTL, is never a candidate.
        Loss::Eviction | Loss::HeardEviction => evict(server, &[b"res"], "volatile-lru"),
    }
    assert!(!server.exists("res"), "the lock key is gone");
    assert!(
        server.exists(redlock_core::EPOCH_KEY),
        "the epoch is there: no proof of B's hears of the loss"
    );
}

/// B's try for `res` after `loss` on the losers, with A still inside its validity.
fn rival_try<A: Adapter>(loss: Loss, rival: Rival) -> Outcome<A> {
    rival_try_after::<A>(
        rival,
        |server| prepare(server, loss),
        |server| lose(server, loss),
    )
}

fn refused<A: Adapter>(loss: Loss, rival: Rival) {
    if rival == Rival::Untracked && super::scenarios::scripting_denied() {
        // No node runs the checked script: the untracked client says it cannot check.
        expect_untracked_needs_scripts::<A>();
        return;
    }
    let cause = match loss {
        Loss::Swap => SitOutCause::SwappedDatabase,
        Loss::Eviction | Loss::HeardEviction => SitOutCause::Eviction,
    };
    // Named by the seal, or by the checked script that sees the stamp of another database or
    // eviction count.
    expect_refused_by::<A>(
        rival_try::<A>(loss, rival),
        &format!("{loss:?} on 3 nodes"),
        &LOSERS,
        &[cause],
    );
}

fn caught<A: Adapter>(loss: Loss) {
    let case = format!("with vouched acquisitions unsealed, {loss:?}");
    expect_second_holder::<A>(
        rival_try::<A>(loss, Rival::Faulty(WatchFault::Unsealed)),
        &case,
    );
}

/// Scenario 6: another database swapped in under B's proven connections: refused.
pub fn a_swapped_in_database_refuses_a_proven_connection<A: Adapter>() {
    refused::<A>(Loss::Swap, Rival::Tracked);
}

/// Negative control: unsealed, the swapped-in database (whose epoch is trusted) grants `res`.
pub fn a_swapped_in_database_votes_for_an_unsealed_connection<A: Adapter>() {
    caught::<A>(Loss::Swap);
}

/// Scenario 6 on the untracked path: the checked script sees the stamp of another database.
pub fn a_swapped_in_database_refuses_an_untracked_client<A: Adapter>() {
    refused::<A>(Loss::Swap, Rival::Untracked);
}

/// Scenario 3: the lock key evicted on its own under B's proven connections: refused.
pub fn a_lone_eviction_refuses_a_proven_connection<A: Adapter>() {
    refused::<A>(Loss::Eviction, Rival::Tracked);
}

/// Negative control: unsealed, the node that evicted `res` grants it again.
pub fn a_lone_eviction_votes_for_an_unsealed_connection<A: Adapter>() {
    caught::<A>(Loss::Eviction);
}

/// Scenario 3 on the untracked path: the checked script sees the eviction count moved.
pub fn a_lone_eviction_refuses_an_untracked_client<A: Adapter>() {
    refused::<A>(Loss::Eviction, Rival::Untracked);
}

/// On nodes that can swap and evict nothing, with scripts or without, a proven connection's
/// vouched acquisitions read the proof's marker alone: each node counts an `EXISTS` per
/// vouched acquisition and no `MGET` (`INFO commandstats`), and holds the marker its proof
/// wrote (the checked script's, or on a node without scripts the proof's transaction's).
pub fn a_vouched_acquisition_reads_its_proofs_marker_alone<A: Adapter>() {
    for deny_scripting in [false, true] {
        vouched_acquisitions_read_the_marker::<A>(deny_scripting);
    }
}

/// [`a_vouched_acquisition_reads_its_proofs_marker_alone`] on nodes that run scripts or not.
fn vouched_acquisitions_read_the_marker<A: Adapter>(deny_scripting: bool) {
    const LOCKS: usize = 4;
    let options = crate::ServerOptions::new().deny_scripting(deny_scripting);
    let nodes = crate::Servers::start_with(3, &options);
    let client: A = super::memory::client(&nodes, Rival::Tracked);
    let name = format!("{}, scripting denied: {deny_scripting}", A::NAME);
    for i in 0..LOCKS {
        let lock = client
            .lock(&format!("marked-{i}"), TTL)
            .unwrap_or_else(|err| panic!("{name}: lock {i}: {err}"));
        lock.release();
    }
    for server in nodes.servers() {
        // The first lock proves; every later one is vouched and sealed.
        let exists = server.calls("exists");
        assert!(
            exists >= u64::try_from(LOCKS - 1).unwrap_or(0),
            "{name}: {} read the marker {exists} times for {LOCKS} locks",
            server.addr(),
        );
        assert_eq!(server.calls("mget"), 0, "{name}: no seal read the stamps");
        let markers: Vec<String> = redis::cmd("KEYS")
            .arg("redlock:epoch:m:*")
            .query(&mut server.client())
            .expect("KEYS");
        assert!(!markers.is_empty(), "{name}: the proof's marker is there");
    }
}

/// A node declared, knowingly, never to run `SWAPDB` (`swapdb_never_runs_on`) gets plain
/// `SET`s: a swap then goes unseen, and a second holder gets in — what the declaration trades.
pub fn a_node_declared_never_swapped_misses_a_swap<A: Adapter>() {
    expect_second_holder::<A>(
        rival_try::<A>(Loss::Swap, Rival::NeverSwapped),
        "declared never swapped, a SWAPDB",
    );
}

/// The declaration is about `SWAPDB` only: a node that evicts still seals each acquisition.
pub fn a_node_declared_never_swapped_still_seals_its_evictions<A: Adapter>() {
    refused::<A>(Loss::Eviction, Rival::NeverSwapped);
}

/// On a node that publishes its evictions, B's connections hear the lone eviction of `res`
/// (before the reply to their next command): refused, naming the eviction.
pub fn a_lone_eviction_is_heard_by_a_subscribed_connection<A: Adapter>() {
    refused::<A>(Loss::HeardEviction, Rival::Tracked);
}

/// What catches it there is the eviction event, not a seal: even unsealed (the control that
/// lets a second holder in on a node that publishes nothing), B is refused.
pub fn a_heard_eviction_refuses_an_unsealed_connection<A: Adapter>() {
    refused::<A>(Loss::HeardEviction, Rival::Faulty(WatchFault::Unsealed));
}

/// Negative control: deaf to pushes (eviction events included, and unsealed), B gets the lock A
/// still holds.
pub fn a_heard_eviction_votes_for_a_deaf_connection<A: Adapter>() {
    expect_second_holder::<A>(
        rival_try::<A>(Loss::HeardEviction, Rival::Faulty(WatchFault::Deaf)),
        "deaf to the eviction events",
    );
}

/// How many `INFO` calls node 0 of three evicting nodes ran for `ACQUISITIONS` vouched
/// acquisitions by one client (after a warm-up that proves), the nodes publishing their
/// evictions or not, the client logged in as a user with `acl` (none: the default user).
fn info_reads<A: Adapter>(publishes: bool, acl: Option<&[&str]>) -> u64 {
    let ttl = std::time::Duration::from_secs(10);
    let base = redlock_local::ServerOptions::new();
    let nodes = match acl {
        Some(rules) => {
            let mut args = vec!["--user", "watcher", "on", ">watcher-pw", "~*"];
            args.extend_from_slice(rules);
            if base.denies_scripting() {
                args.push("-@scripting");
            }
            crate::Servers::start_with(3, &base.args(args))
        }
        None => crate::Servers::start(3),
    };
    for server in nodes.servers() {
        config_set(server, "maxmemory-policy", "volatile-lru");
        if publishes {
            config_set(server, "notify-keyspace-events", "Ee");
        }
    }
    let urls: Vec<String> = match acl {
        Some(_) => nodes
            .addrs()
            .iter()
            .map(|addr| format!("redis://watcher:watcher-pw@{addr}/"))
            .collect(),
        None => nodes.urls(),
    };
    let options = super::adapter::Options {
        retry: Some(redlock_core::RetryPolicy::once()),
        ..super::adapter::Options::default()
    };
    let client = A::build(&urls, &options).unwrap_or_else(|err| panic!("{}: {err}", A::NAME));
    client
        .lock("warm-up", ttl)
        .unwrap_or_else(|err| panic!("{}: warm-up: {err}", A::NAME))
        .release();
    let node = &nodes.servers()[0];
    // Each count is read by an INFO of its own: one call per reading.
    let (sets, infos) = (node.calls("set"), node.calls("info") + 2);
    for i in 0..ACQUISITIONS {
        client
            .lock(&format!("r{i}"), ttl)
            .unwrap_or_else(|err| panic!("{}: r{i}: {err}", A::NAME))
            .release();
    }
    // A lock returns on a quorum: wait until node 0 ran every acquisition (its reads went in
    // the same MULTI).
    let ran = super::scenarios::eventually(std::time::Duration::from_secs(10), || {
        node.calls("set") >= sets + ACQUISITIONS
    });
    assert!(ran, "{}: node 0 ran every acquisition", A::NAME);
    node.calls("info").saturating_sub(infos)
}

/// Vouched acquisitions per cost case.
const ACQUISITIONS: u64 = 3;

/// The cost: on an evicting node, a proven connection's vouched acquisitions read the eviction
/// count (`INFO stats` in their `MULTI`) unless the node publishes its evictions to it; then
/// they read none (the proof, which checks `notify-keyspace-events`, is the only `INFO`).
pub fn a_connection_that_hears_evictions_reads_no_eviction_count<A: Adapter>() {
    assert_eq!(
        info_reads::<A>(true, None),
        0,
        "{}: vouched acquisitions read INFO",
        A::NAME
    );
    assert_eq!(
        info_reads::<A>(false, None),
        ACQUISITIONS,
        "{}: one INFO stats each",
        A::NAME
    );
}

/// A user who may not subscribe to the eviction channel, or may not read
/// `notify-keyspace-events` (`CONFIG` denied), still locks, on connections whose replies stay
/// in step; its vouched acquisitions read the eviction count, as where nothing is published.
pub fn a_user_denied_the_eviction_events_reads_the_count<A: Adapter>() {
    let denied: [&[&str]; 2] = [&["resetchannels", "+@all"], &["&*", "+@all", "-config"]];
    for acl in denied {
        assert_eq!(
            info_reads::<A>(true, Some(acl)),
            ACQUISITIONS,
            "{}: {acl:?}",
            A::NAME
        );
    }
    // The control: the same user allowed both hears them.
    let allowed: &[&str] = &["&*", "+@all"];
    assert_eq!(info_reads::<A>(true, Some(allowed)), 0, "{}", A::NAME);
}
