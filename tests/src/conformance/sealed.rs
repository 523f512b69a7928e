//! Losses a proven connection hears nothing of (scenarios 3 and 6 of issue 21): a database
//! swapped in by `SWAPDB`, and a lock key evicted on its own under `volatile-lru` (the epoch,
//! which has no TTL, stays). Neither ends a connection nor pushes an invalidation of the epoch.
//! On a node that can swap or evicts, each vouched acquisition is sealed: it goes in a `MULTI`
//! with a `GET` of the stamp (`redlock_core::EPOCH_ID_KEY`, which names the database it was
//! stamped in and the node's eviction count) and, on an evicting node, `INFO stats`. A stamp
//! from another database or an eviction count that moved refuses the vote; the proof that
//! follows sees the identity changed and the node sits out. Each case has its negative control
//! (`WatchFault::Unsealed`: a plain `SET`) that lets a second holder in, and runs once on the
//! untracked path too (the checked script compares the same identity on every acquisition).
//!
//! In every case client A holds `res` on all five nodes; three of them then lose it while client
//! B's connections, proven before, stay open.

use redlock_core::{SitOutCause, WatchFault};
use redlock_local::RedisServer;

use super::adapter::Adapter;
use super::memory::{
    Outcome, Rival, config_set, evict, expect_refused_by, expect_second_holder,
    expect_untracked_needs_scripts, rival_try_after,
};

/// The three nodes that lose `res`.
const LOSERS: [usize; 3] = [0, 1, 2];

/// What the losers lose, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// `SWAPDB 0 1`, where database 1 holds another deployment's trusted epoch, stamped there.
    Swap,
    /// `res` evicted on its own under `volatile-lru`.
    Eviction,
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
        Loss::Eviction => evict(server, &[b"res"], "volatile-lru"),
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
        Loss::Eviction => SitOutCause::Eviction,
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
