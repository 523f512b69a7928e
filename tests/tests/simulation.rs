//! Deterministic simulation of Redlock, driving the real `redlock-core` machines.
//!
//! - **Inside the model**, many seeded schedules of faults (lost, duplicated, delayed and
//!   reordered messages, partitions, node crashes with a delayed restart, client pauses, clock
//!   drift) must never let two clients hold a resource at the same true instant — and must have
//!   held locks often, so that "nobody ever got the lock" cannot pass.
//! - **Negative controls** break one assumption each and must be caught within a bounded number
//!   of seeds: proof that the checker can fail.
//!
//! `cargo test -p redlock-tests --test simulation -- --nocapture` prints schedules per second
//! and totals per scenario. `SIM_SEEDS=100000` raises the seeds per scenario (soak);
//! `SIM_SEED=123 cargo test -p redlock-tests --test simulation -- <scenario> --exact --nocapture`
//! replays one seed with its event trace (`SIM_TRACE_LINES=500` for more of it).

use redlock_tests::sim::{self, ExtendSemantics, Scenario, Summary};

/// Seeds per in-model scenario in CI. The whole file takes about 16 s (31 s of CPU) in a debug
/// build on two idle cores: schedules are short, 3 s of simulated time each.
const CI_SEEDS: u64 = 250;

/// Checks a batch was not vacuous: at least `per_schedule` critical sections per schedule on
/// average, and every fault the scenario asks for actually happened.
fn assert_busy(summary: &Summary, scenario: &Scenario, per_schedule: u64) {
    let s = &summary.stats;
    assert!(
        s.critical_sections >= s.schedules * per_schedule,
        "{}: only {} critical sections in {} schedules",
        summary.scenario,
        s.critical_sections,
        s.schedules
    );
    let extends = scenario.hold.auto_extend > 0.0 || scenario.hold.manual_extend.is_some();
    assert!(s.extensions > 0 || !extends, "no lock was ever extended");
    assert!(
        s.lost > 0 || scenario.net.loss == 0.0,
        "no message was lost"
    );
    assert!(
        s.duplicated > 0 || scenario.net.duplicate == 0.0,
        "no message was duplicated"
    );
    assert!(
        s.partitioned > 0 || scenario.partitions.per_client == 0,
        "no partition cut anything"
    );
    assert!(
        s.crashes > 0 || scenario.crashes.per_node == 0,
        "no node crashed"
    );
    assert!(
        s.pauses > 0 || scenario.pauses.per_client == 0,
        "no client paused"
    );
}

/// A negative control of the fence checks: caught within `seeds`, by a fence check (not by
/// mutual exclusion).
fn assert_fence_caught(scenario: &Scenario, seeds: u64, missed: &str) {
    let found = sim::hunt(scenario, seeds).unwrap_or_else(|| panic!("{missed}"));
    let kind = found.report.violation.as_ref().map(|v| v.kind);
    assert!(
        matches!(
            kind,
            Some(sim::ViolationKind::FenceNotIncreasing | sim::ViolationKind::FenceReused)
        ),
        "{}: caught, but not by the fence checks: {kind:?}",
        scenario.name
    );
}

fn explore(scenario: Scenario, per_schedule: u64) {
    let summary = sim::explore(&scenario, CI_SEEDS);
    assert_busy(&summary, &scenario, per_schedule);
}

#[test]
fn baseline() {
    explore(Scenario::baseline(), 15);
}

#[test]
fn network_faults() {
    explore(Scenario::network_faults(), 6);
}

#[test]
fn crash_delayed_restart() {
    explore(Scenario::crash_delayed_restart(), 3);
}

#[test]
fn client_pauses() {
    explore(Scenario::client_pauses(), 6);
}

#[test]
fn clock_drift() {
    explore(Scenario::clock_drift(), 15);
}

#[test]
fn clock_drift_edge() {
    explore(Scenario::clock_drift_edge(), 10);
}

#[test]
fn multi_resource() {
    explore(Scenario::multi_resource(), 4);
}

#[test]
fn everything() {
    explore(Scenario::everything(), 4);
}

#[test]
fn wake_storm() {
    explore(Scenario::wake_storm(), 3);
}

/// Other deployment sizes (quorums of 1 of 1, 2 of 2, 3 of 4, 4 of 7) with every in-model fault.
/// `SIM_SEED` replays the seed at each size.
#[test]
fn cluster_sizes() {
    for nodes in [1, 2, 4, 7] {
        let scenario = Scenario {
            name: "cluster_sizes",
            nodes,
            ..Scenario::everything()
        };
        let summary = sim::explore(&scenario, CI_SEEDS / 5);
        println!("[sim]   (cluster_sizes above: {nodes} nodes)");
        assert_busy(&summary, &scenario, 2);
    }
}

/// A client that retries with `try_lock` in a loop (a new token every round) stays safe even
/// when a late release overtakes the next round's `SET` on the same node.
#[test]
fn unordered_links_one_round() {
    explore(Scenario::unordered_links_one_round(), 10);
}

/// `extend(shorter ttl)` while holding: the engine's extend script must never cut a key's TTL
/// below the validity the lease keeps.
#[test]
fn extend_shorter() {
    assert_eq!(
        ExtendSemantics::of_engine(),
        ExtendSemantics::NeverShorten,
        "EXTEND_SCRIPT sets the TTL outright: an extension to a shorter TTL is unsafe"
    );
    explore(Scenario::extend_shorter(), 15);
}

/// Every fault at once on nodes that run Valkey 9.1's native commands (`MSETEX`, `DELIFEQ`,
/// exact-TTL `SET … IFEQ`): the same safety as with the scripts.
#[test]
fn native_everything() {
    explore(Scenario::native_everything(), 3);
}

/// `extend(shorter ttl)` on nodes that could set a TTL exactly: the engine keeps such an
/// extension in the script, which never shortens (the control is `extend_shortens_keys`: an
/// exact shorter TTL is caught).
#[test]
fn native_extend_shorter() {
    explore(Scenario::native_extend_shorter(), 15);
}

/// `extend(shorter ttl)` on nodes that run no script: the engine sends it as
/// `MULTI; PEXPIRE … GT; GET …; EXEC`, which never shortens (the control is
/// `no_script_extend_shortens_keys`).
#[test]
fn no_script_extend_shorter() {
    let scenario = Scenario::no_script_extend_shorter();
    let summary = sim::explore(&scenario, CI_SEEDS);
    assert_busy(&summary, &scenario, 1);
    assert!(summary.stats.vouched > 0, "no acquisition was vouched for");
    assert!(summary.stats.extensions > 0, "no extension went through");
}

/// Negative control: the no-script extension form with a `PEXPIRE` that sets the TTL outright
/// cuts keys below the validity the lease keeps, and the checker catches it.
#[test]
fn no_script_extend_shortens_keys() {
    let found = sim::hunt(&Scenario::no_script_extend_shortens_keys(), 20);
    assert!(
        found.is_some(),
        "the checker missed keys cut below the validity"
    );
}

/// Links that reorder one node's requests, with retries: the release of a lost round may reach a
/// node after the next round's `SET`. It found that rounds sharing one token let that release
/// delete the new round's key (seed 2); each round now has a token of its own.
#[test]
fn unordered_links() {
    explore(Scenario::unordered_links(), 6);
}

/// Negative control: an extend that is a plain `PEXPIRE` shortens the keys of a lease that
/// keeps its longer validity.
#[test]
fn extend_shortens_keys() {
    let found = sim::hunt(&Scenario::extend_shortens_keys(), 20);
    assert!(
        found.is_some(),
        "the checker missed keys cut below the validity"
    );
}

/// The failure of the Redis page — nodes restart empty inside a holder's validity — with
/// restart-aware voting on: no node votes again before the longest TTL has passed on its clock,
/// and no two clients ever hold a resource at once.
#[test]
fn restart_without_delay() {
    let scenario = Scenario::restart_without_delay();
    let summary = sim::explore(&scenario, CI_SEEDS);
    assert_busy(&summary, &scenario, 1);
    assert!(
        summary.stats.ineligible_votes > 0,
        "no node was ever refused a vote: the scenario did not exercise the feature"
    );
}

/// [`restart_without_delay`] with tracked connections: the restart check proven once per
/// connection, then plain `SET NX PX`; a crash ends the connection.
#[test]
fn tracked_restart_without_delay() {
    explore_tracked(Scenario::tracked_restart_without_delay());
}

/// An in-model scenario of tracked connections, checked not to be vacuous: acquisitions went
/// out vouched for, and nodes that lost their memory refused to vote.
fn explore_tracked(scenario: Scenario) -> sim::Summary {
    let summary = sim::explore(&scenario, CI_SEEDS);
    assert_busy(&summary, &scenario, 1);
    assert!(summary.stats.vouched > 0, "no acquisition was vouched for");
    assert!(
        summary.stats.ineligible_votes > 0,
        "no node was ever refused a vote"
    );
    summary
}

/// Nodes restart from snapshots (or fail over to replicas) right away and often: their epoch
/// comes back old, their lock keys do not. The checked script sees each node's new identity and
/// stamps a new epoch, so a restarted node sits out the longest TTL.
#[test]
fn snapshot_restart_without_delay() {
    explore_tracked(Scenario::snapshot_restart_without_delay());
}

/// Negative control: the same on nodes whose scripts ignore the identity — a restarted node
/// votes at once on its old epoch, and the checker must catch the second holder.
#[test]
fn snapshot_restart_identity_blind() {
    let found = sim::hunt(&Scenario::snapshot_restart_identity_blind(), 200);
    assert!(
        found.is_some(),
        "the checker missed nodes restarted from snapshots voting on their old epoch"
    );
}

/// [`snapshot_restart_without_delay`] on nodes that run no script: the native proof reads the
/// identity and restamps in the writes that follow it.
#[test]
fn native_snapshot_restart_without_delay() {
    explore_tracked(Scenario::native_snapshot_restart_without_delay());
}

/// Negative control: the same on nodes that show no identity — caught.
#[test]
fn native_snapshot_restart_identity_blind() {
    let found = sim::hunt(&Scenario::native_snapshot_restart_identity_blind(), 200);
    assert!(
        found.is_some(),
        "the checker missed natively proven nodes restarted from snapshots voting at once"
    );
}

/// Nodes fail over to a replica and back, often, some connections kept to the demoted server
/// (scenario 7 of issue 21): proofs expire after half the longest TTL, and the re-promoted
/// node's new identity makes it sit out.
#[test]
fn failover_flip_flops() {
    explore_tracked(Scenario::failover_flip_flops());
}

/// Negative control: the same with proofs that never expire — caught.
#[test]
fn failover_flip_flops_ageless() {
    let found = sim::hunt(&Scenario::failover_flip_flops_ageless(), 250);
    assert!(
        found.is_some(),
        "the checker missed a kept connection vouching for a re-promoted node"
    );
}

/// Negative control: the same on nodes whose epoch a previous release wrote (no identity
/// stamped): a failover before the first proof is adopted, and caught.
#[test]
fn failover_flip_flops_legacy() {
    let found = sim::hunt(&Scenario::failover_flip_flops_legacy(), 250);
    assert!(
        found.is_some(),
        "the checker missed a failed-over node adopting its new identity"
    );
}

/// Another database swapped in under open, proven connections, right away and often
/// (scenario 6 of issue 21): each vouched acquisition is sealed, and the other database holds
/// no marker of the connection's proof.
#[test]
fn tracked_swapdb_without_delay() {
    explore_marked(Scenario::tracked_swapdb_without_delay());
}

/// The same on nodes that run no script: the proof's reads and its marker's write go in one
/// transaction, and the seal reads the marker as above.
#[test]
fn tracked_native_swapdb_without_delay() {
    explore_marked(Scenario::tracked_native_swapdb_without_delay());
}

/// [`explore_tracked`], where the vouched acquisitions' seals read their proofs' markers.
fn explore_marked(scenario: Scenario) {
    let summary = explore_tracked(scenario);
    assert!(summary.stats.marked_seals > 0, "no seal read a marker");
}

/// Negative control: the same with vouched acquisitions unsealed — caught.
#[test]
fn tracked_swapdb_unsealed() {
    let found = sim::hunt(&Scenario::tracked_swapdb_unsealed(), 200);
    assert!(
        found.is_some(),
        "the checker missed a swapped-in database voting through an unsealed connection"
    );
}

/// Lock keys evicted on their own (`volatile-lru`, the epoch kept) under open, proven
/// connections, on nodes that run no script (scenario 3 of issue 21): the seal reads the
/// eviction count, which moved.
#[test]
fn tracked_lone_eviction_without_delay() {
    explore_tracked(Scenario::tracked_lone_eviction_without_delay());
}

/// Negative control: the same with vouched acquisitions unsealed — caught.
#[test]
fn tracked_lone_eviction_unsealed() {
    let found = sim::hunt(&Scenario::tracked_lone_eviction_unsealed(), 200);
    assert!(
        found.is_some(),
        "the checker missed a node voting again for lock keys it evicted on its own"
    );
}

/// Memory lost without a restart (the connections stay open), right away and often: the
/// invalidation pushes keep the flushed nodes from voting.
#[test]
fn tracked_flush_without_delay() {
    explore_tracked(Scenario::tracked_flush_without_delay());
}

/// [`tracked_flush_without_delay`] on nodes that run no script: the core's native proof (the
/// epoch, its `PTTL` and the node's `TIME`) and its epoch claim, run by the simulator as the
/// adapters run them.
#[test]
fn tracked_native_flush_without_delay() {
    let scenario = Scenario::tracked_native_flush_without_delay();
    let summary = sim::explore(&scenario, CI_SEEDS);
    assert_busy(&summary, &scenario, 1);
    let stats = &summary.stats;
    assert!(stats.vouched > 0, "no acquisition was vouched for");
    assert!(
        stats.ineligible_votes > 0,
        "no node was ever refused a vote"
    );
    assert!(stats.epochs_claimed > 0, "no connection claimed an epoch");
}

/// Nodes evict every key right before running an acquisition, set off by that very call: the
/// push comes before the call's reply, which does not count.
#[test]
fn tracked_own_eviction() {
    explore_tracked(Scenario::tracked_own_eviction());
}

/// Negative control: tracking as before `OPTIN` (`NOLOOP`) — the eviction a connection's own
/// call sets off is never pushed to it, and the checker must catch the second holder.
#[test]
fn tracked_own_eviction_noloop() {
    let found = sim::hunt(&Scenario::tracked_own_eviction_noloop(), 200);
    assert!(
        found.is_some(),
        "the checker missed evictions set off by a connection's own call under NOLOOP"
    );
}

/// Negative control: the same with the pushes unheard — the checker must catch a flushed node
/// voting through a proven connection that runs no script.
#[test]
fn tracked_native_flush_deaf() {
    let found = sim::hunt(&Scenario::tracked_native_flush_deaf(), 200);
    assert!(
        found.is_some(),
        "the checker missed flushed nodes voting through deaf connections without scripts"
    );
}

/// Negative control: the same with the pushes unheard — the checker must catch a flushed node
/// voting through a proven connection.
#[test]
fn tracked_flush_deaf() {
    let found = sim::hunt(&Scenario::tracked_flush_deaf(), 200);
    assert!(
        found.is_some(),
        "the checker missed flushed nodes voting through deaf connections"
    );
}

/// Negative control: the same schedules with restart-aware voting off — a node restarted empty
/// grants the lock again inside the holder's validity, and the checker must catch it.
#[test]
fn restart_without_delay_unaware() {
    let found = sim::hunt(&Scenario::restart_without_delay_unaware(), 100);
    assert!(
        found.is_some(),
        "the checker missed an immediate empty restart"
    );
}

/// Fenced locks under every in-model fault, node clocks 200 ms apart: fences of successive holders
/// strictly increase, and no fenced store accepts two holders' writes under one fence.
#[test]
fn fenced() {
    let scenario = Scenario::fenced();
    let summary = sim::explore(&scenario, CI_SEEDS);
    assert_busy(&summary, &scenario, 3);
}

/// The fence controls' schedules with working counters (node clocks 5 s apart, no crashes):
/// inside the model, so the controls below fail only because of the fault they inject.
#[test]
fn fenced_clocks_apart() {
    let mut scenario = Scenario::fence_commit_skipped();
    scenario.name = "fenced_clocks_apart";
    scenario.fence_fault = None;
    let summary = sim::explore(&scenario, CI_SEEDS);
    assert_busy(&summary, &scenario, 3);
}

/// Fenced locks with immediate empty restarts and restart-aware voting: still ordered.
#[test]
fn fenced_restart_without_delay() {
    let scenario = Scenario::fenced_restart_without_delay();
    let summary = sim::explore(&scenario, CI_SEEDS);
    assert_busy(&summary, &scenario, 1);
}

/// Negative control: the fence commit has no effect (as if skipped): caught.
#[test]
fn fence_commit_skipped() {
    assert_fence_caught(
        &Scenario::fence_commit_skipped(),
        100,
        "the fence checker missed skipped commits",
    );
}

/// Negative control: fence counters that go backwards: caught.
#[test]
fn fence_counter_backwards() {
    assert_fence_caught(
        &Scenario::fence_counter_backwards(),
        100,
        "the fence checker missed counters going backwards",
    );
}

/// [`fenced`] on nodes that run no script: the native fenced acquisition and commit keep
/// fences increasing (issue 23).
#[test]
fn no_script_fenced() {
    let scenario = Scenario::no_script_fenced();
    let summary = sim::explore(&scenario, CI_SEEDS);
    assert_busy(&summary, &scenario, 3);
    assert!(summary.stats.vouched > 0, "no acquisition was vouched for");
}

/// Negative control: [`fence_commit_skipped`] on nodes that run no script: caught.
#[test]
fn no_script_fence_commit_skipped() {
    assert_fence_caught(
        &Scenario::no_script_fence_commit_skipped(),
        100,
        "the fence checker missed skipped native commits",
    );
}

/// Negative control: [`fence_counter_backwards`] on nodes that run no script: caught.
#[test]
fn no_script_fence_counter_backwards() {
    assert_fence_caught(
        &Scenario::no_script_fence_counter_backwards(),
        100,
        "the fence checker missed native counters going backwards",
    );
}

/// Negative control: fenced locks with crashes and node wall clocks further apart than the
/// longest TTL (the hybrid clock's assumption broken): caught by the fence checks.
#[test]
fn fence_clocks_too_far_apart() {
    assert_fence_caught(
        &Scenario::fence_clocks_too_far_apart(),
        1000,
        "the fence checker missed clocks too far apart",
    );
}

/// Negative control: fenced locks, immediate empty restarts, restart-aware voting off: caught.
#[test]
fn fenced_restart_unaware() {
    let found = sim::hunt(&Scenario::fenced_restart_unaware(), 100);
    assert!(
        found.is_some(),
        "the checker missed an immediate empty restart"
    );
}

/// Negative control: node clocks 30 % fast against a 1 % drift factor.
#[test]
fn node_clock_too_fast() {
    let found = sim::hunt(&Scenario::node_clock_too_fast(), 20);
    assert!(found.is_some(), "the checker missed node clocks 30 % fast");
}

/// Negative control: a rate error only a little past the drift budget.
#[test]
fn clock_drift_just_over() {
    let found = sim::hunt(&Scenario::clock_drift_just_over(), 50);
    assert!(
        found.is_some(),
        "the checker missed a rate error just past the budget"
    );
}

/// Negative control: a holder paused past its validity keeps using the lock.
#[test]
fn pause_then_keep_using() {
    let found = sim::hunt(&Scenario::pause_then_keep_using(), 50);
    assert!(
        found.is_some(),
        "the checker missed a client using an expired lease"
    );
}

#[test]
fn a_seed_replays_bit_for_bit() {
    let scenario = Scenario::everything();
    let a = sim::run(&scenario, 42);
    let b = sim::run(&scenario, 42);
    let traced = sim::run_traced(&scenario, 42);
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_eq!(a.stats, b.stats);
    assert_eq!(
        (a.fingerprint, a.stats),
        (traced.fingerprint, traced.stats),
        "tracing changes nothing"
    );
    assert_ne!(a.fingerprint, sim::run(&scenario, 43).fingerprint);
}
