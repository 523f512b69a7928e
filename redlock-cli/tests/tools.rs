//! `redlock bench` and `redlock demo`, run to their end on local redis-servers they start.

mod common;

use std::process::Command;

use common::{json, stderr, stdout};

#[test]
fn bench_measures_every_scenario_on_local_nodes() {
    let output = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env_remove("REDLOCK_NODES")
        .args([
            "bench",
            "--local",
            "3",
            "--cycles",
            "50",
            "--clients",
            "4",
            "--contenders",
            "3",
            "--duration",
            "1s",
            "--json",
        ])
        .output()
        .expect("run redlock");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["nodes"], 3);
    assert_eq!(report["sequential"]["cycles"], 50);
    let p50 = report["sequential"]["cycle_p50_us"].as_u64().expect("p50");
    let p99 = report["sequential"]["cycle_p99_us"].as_u64().expect("p99");
    assert!(p50 > 0 && p50 <= p99, "{report}");
    assert!(report["throughput"]["cycles"].as_u64().expect("cycles") > 0);
    assert!(
        report["contention"]["acquisitions_per_second"]
            .as_f64()
            .expect("rate")
            > 0.0
    );
    assert_eq!(report["contention"]["violations"], 0);
}

#[test]
fn bench_without_nodes_says_how_to_get_some() {
    let output = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env_remove("REDLOCK_NODES")
        .arg("bench")
        .output()
        .expect("run redlock");
    assert_eq!(output.status.code(), Some(64));
    assert!(stderr(&output).contains("--local"), "{}", stderr(&output));
}

#[test]
fn demo_runs_to_its_end_with_an_exact_counter() {
    let output = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env_remove("REDLOCK_NODES")
        .arg("demo")
        .output()
        .expect("run redlock");
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}\n{}", stderr(&output));
    for expected in [
        "Started 5 redis-servers",
        "refuses to vote",
        "no lock was granted for",
        "all 5 nodes vote",
        "no update lost",
        "two holders at once: never",
        "stopped the 5 redis-servers",
    ] {
        assert!(text.contains(expected), "missing {expected:?}:\n{text}");
    }
    assert!(
        !text.contains('\x1b'),
        "no colour codes off a terminal:\n{text}"
    );
}
