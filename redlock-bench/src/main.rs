//! `redlock-bench`: the whole redlock-rs benchmark in one command.
//!
//! It starts its own 5 local `redis-server` nodes (`redlock_local::Servers`) and measures, in the
//! same run and against the same nodes, eight contenders: three raw floors (the lock's Redis
//! commands fanned out with the `redis` crate, no lock logic) — on tokio multi-thread, on
//! async-std and on threads —, `redlock-tokio` on a current-thread and on a multi-thread runtime,
//! `redlock-async-std`, `redlock-blocking` and `rslock`. Each scenario — sequential latency,
//! 64-way throughput, 8-way contention on one key — is repeated with the contenders
//! alternating, so that load drifting on a shared machine hits them all alike; the memory
//! scenario runs `redlock-tokio` in a child process of its own, and the cluster scenario runs
//! `redlock-tokio` on a local 3-master cluster against 3 standalone nodes. It prints Markdown tables
//! (median, min–max, ratio to the tokio raw floor, ratio to the floor on the same runtime or
//! threads) and writes `bench.json`, `latency.svg` and `throughput.svg`.
//!
//! ```text
//! cargo run --release -p redlock-bench              # the full run (about 2½ minutes)
//! cargo run --release -p redlock-bench -- --smoke   # every scenario, tiny: checks it works
//! ```
//!
//! # What it never does
//! - It never passes or fails on a time or a ratio: it measures and reports. The only verdict
//!   is the mutual-exclusion check of the contention scenario (violations are printed, and make
//!   the exit status non-zero).
//! - It never talks to a Redis it did not start: every node is a local `redis-server` on
//!   127.0.0.1, killed when the run ends.
//! - It never measures a contender while another one runs: one contender, one runtime and one
//!   client at a time.

mod args;
mod chart;
mod client_cpu;
mod clients;
mod cluster;
mod contender;
mod exec;
mod machine;
mod memory;
mod report;
mod run;
mod scenarios;
mod server_cpu;
mod stats;
mod table;

use std::process::ExitCode;

use clap::Parser;

/// Counts every heap allocation of the process (all threads), for allocations per cycle.
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

fn main() -> ExitCode {
    let args = args::Args::parse();
    let outcome = if args.memory_probe {
        scenarios::memory::probe(&args)
    } else {
        run::run(&args)
    };
    match outcome {
        Ok(code) => code,
        Err(message) => {
            eprintln!("redlock-bench: {message}");
            ExitCode::FAILURE
        }
    }
}
