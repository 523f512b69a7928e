//! Real-process chaos for Redlock (issue 4, section 2): five `redis-server` processes, eight
//! clients mixing the three adapters (tokio, async-std, blocking) behind fault proxies, and a
//! seeded schedule of kills (with delayed restarts), stops, latency, stalls, partitions and
//! resets — mutual exclusion, call bounds and clean-up checked at the end, for every client.
//! Plus the restart-empty scenario of the Redis page, both ways.
//!
//! `cargo test -p redlock-tests --test chaos -- --nocapture` prints the seed and the figures.
//! `CHAOS_SECONDS=600` for a soak run; `CHAOS_SEED=<seed>` reruns a schedule (faults and client
//! choices; real processes do not replay the exact interleavings).

use std::time::Duration;

use redlock_tests::chaos::{self, AdapterKind, ChaosConfig, FaultKind, Restart};

/// The main run: every invariant must hold for every client of every adapter, and the run must
/// not be vacuous — for any adapter.
#[test]
fn chaos_run() {
    let config = ChaosConfig::from_env();
    let report = chaos::run(&config);
    println!("[chaos] {report}");
    let violations = report.violations();
    assert!(
        violations.is_empty(),
        "{} violation(s); rerun: {}\n{report}",
        violations.len(),
        report.rerun
    );

    // Not vacuous: locks were taken and written under often, every way, under every fault.
    let seconds = config.duration.as_secs().max(1);
    let tally = &report.tally;
    assert!(
        tally.written >= seconds * 2,
        "only {} sections wrote their counter in {seconds} s\n{report}",
        tally.written
    );
    for entry in ["lock", "try_lock", "with_lock"] {
        assert!(
            tally.entries.get(entry).copied().unwrap_or(0) > 0,
            "no section entered with {entry}\n{report}"
        );
    }
    assert!(tally.extended > 0, "no lock was ever extended\n{report}");
    assert!(
        tally.cancelled > 0,
        "no acquisition was ever cancelled\n{report}"
    );
    // Every adapter of the mix took part: it wrote sections (a few per client and 10 s at
    // least), and an async one also cancelled acquisitions.
    for kind in AdapterKind::ALL {
        let clients = report
            .client_adapters
            .iter()
            .filter(|k| **k == kind)
            .count();
        assert!(
            clients > 0,
            "no {} client in the run\n{report}",
            kind.name()
        );
        let adapter = &report.by_adapter[&kind];
        let few = (seconds / 10).max(1) * u64::try_from(clients).unwrap_or(u64::MAX);
        assert!(
            adapter.written >= few,
            "{} clients wrote only {} sections (expected {few} at least)\n{report}",
            kind.name(),
            adapter.written
        );
        if kind.can_cancel() {
            assert!(
                adapter.cancelled > 0,
                "no {} acquisition was ever cancelled\n{report}",
                kind.name()
            );
        } else {
            assert_eq!(adapter.cancelled, 0, "{} cannot cancel", kind.name());
        }
    }
    for kind in FaultKind::ALL {
        assert!(
            report.faults.get(kind) > 0,
            "no {} fault was injected\n{report}",
            kind.name()
        );
    }
}

/// One lock across the dialects: three Redis 7 nodes (scripts), one Valkey 8.1
/// ($VALKEY_SERVER) and one Valkey 9.1 ($VALKEY9_SERVER) whose clients are denied `@scripting`
/// (native commands only), under the same faults, for a shorter run. Every invariant must hold
/// and every adapter must have written sections.
#[test]
fn chaos_run_mixes_redis_and_valkey_nodes() {
    let config = ChaosConfig {
        duration: Duration::from_secs(20),
        valkey_nodes: 2,
        native_node: true,
        ..ChaosConfig::from_env()
    };
    let report = chaos::run(&config);
    println!("[chaos] {report}");
    let valkey = report
        .servers
        .iter()
        .filter(|s| s.starts_with("valkey"))
        .count();
    let redis = report
        .servers
        .iter()
        .filter(|s| s.starts_with("redis"))
        .count();
    assert_eq!((redis, valkey), (3, 2), "nodes: {:?}", report.servers);
    assert!(
        report.servers.iter().any(|s| s.starts_with("valkey 9.")),
        "a Valkey 9 node: {:?}",
        report.servers
    );
    let violations = report.violations();
    assert!(
        violations.is_empty(),
        "{} violation(s); rerun: {}\n{report}",
        violations.len(),
        report.rerun
    );
    assert!(
        report.tally.written >= 20,
        "only {} sections written\n{report}",
        report.tally.written
    );
    for kind in AdapterKind::ALL {
        assert!(
            report.by_adapter[&kind].written > 0,
            "no {} client wrote a section\n{report}",
            kind.name()
        );
    }
}

/// Negative control: with restart-aware voting off, node C restarted empty at once lets a
/// second client take the lock on C, D, E while the first still holds it on A, B (and believes
/// it holds it) — the recorder must catch it.
#[test]
fn restart_empty_immediately_is_caught() {
    let outcome = chaos::restart_scenario(Restart::Immediate, Duration::from_secs(10), false);
    println!("[chaos] {outcome}");
    assert_eq!(outcome.holder_nodes, 3, "client 1 held A, B, C");
    assert_eq!(
        outcome.holder_nodes_then, 2,
        "client 1 still on A, B when client 2 got the lock"
    );
    assert_eq!(outcome.second_nodes, 3, "client 2 holds C, D, E");
    assert!(
        !outcome.overlaps.is_empty(),
        "the recorder missed the double holding: {outcome}"
    );
}

/// The same immediate empty restart with restart-aware voting on: C refuses to vote until the
/// longest TTL has passed on its clock, so client 2 is refused while client 1 is valid and wins
/// only after, without any overlap.
#[test]
fn restart_empty_immediately_is_prevented() {
    assert_prevented(chaos::restart_scenario(
        Restart::Immediate,
        Duration::from_secs(2),
        true,
    ));
}

/// `FLUSHALL` on C (the process stays up, every key is gone, the epoch key too): prevented the
/// same way.
#[test]
fn flushall_is_prevented() {
    assert_prevented(chaos::restart_scenario(
        Restart::FlushAll,
        Duration::from_secs(2),
        true,
    ));
}

fn assert_prevented(outcome: chaos::RestartOutcome) {
    println!("[chaos] {outcome}");
    assert_eq!(outcome.holder_nodes, 3, "client 1 held A, B, C");
    assert!(
        outcome.ineligible_refusals > 0,
        "C never refused a vote: {outcome}"
    );
    assert!(
        outcome.overlaps.is_empty(),
        "double holding despite restart-aware voting: {outcome}"
    );
    let second = outcome.second.expect("client 2 got the lock in the end");
    assert!(
        second.acquired_at >= outcome.holder.valid_until,
        "client 2 won inside client 1's validity: {outcome}"
    );
    assert_eq!(outcome.second_nodes, 3, "client 2 holds C, D, E");
}

/// The Redis page's operator fix: C comes back only after the TTL; client 2 cannot win while
/// client 1 is valid, and wins after without any overlap (restart-aware voting on, as by
/// default: C then also waits out the TTL once more before it votes).
#[test]
fn restart_delayed_past_ttl_is_safe() {
    let outcome = chaos::restart_scenario(Restart::DelayedPastTtl, Duration::from_secs(2), true);
    println!("[chaos] {outcome}");
    assert_eq!(outcome.holder_nodes, 3, "client 1 held A, B, C");
    assert!(
        outcome.refusals() > 0,
        "client 2 never tried while C was down: {outcome}"
    );
    assert!(
        outcome.overlaps.is_empty(),
        "double holding with a delayed restart: {outcome}"
    );
    assert_eq!(outcome.second_nodes, 3, "client 2 holds C, D, E");
}

/// Chaos on a cluster node lending each lock 3 votes: planned failovers, slot migrations with
/// held keys and one master's `kill -9`, under blocking and tokio clients. No overlapping
/// window, every counter right, and not vacuous: both kinds of client wrote, every fault kind
/// happened.
#[test]
fn cluster_chaos_run() {
    let config = ChaosConfig::from_env();
    // Half the main run's length (one cluster, fewer kinds of fault), at least 20 s: every
    // kind of fault must find its turn.
    let duration = (config.duration / 2).max(Duration::from_secs(20));
    let report = chaos::cluster_run(config.seed, duration);
    println!("[cluster chaos] {report}");
    let violations = report.violations();
    assert!(
        violations.is_empty(),
        "{} violation(s) (CHAOS_SEED={} reruns the schedule):\n{}\n{report}",
        violations.len(),
        report.seed,
        violations.join("\n")
    );
    let seconds = duration.as_secs().max(1);
    for (kind, written) in &report.written {
        assert!(
            *written >= seconds / 2,
            "{kind} clients wrote only {written} sections in {seconds} s\n{report}"
        );
    }
    for (fault, count) in &report.faults {
        assert!(*count > 0, "no {fault:?} injected\n{report}");
    }
}
