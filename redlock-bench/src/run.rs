//! The order of a benchmark run: start the nodes, run each scenario's repetitions with the
//! contenders alternating (repetition `r` starts at contender `r`), run the memory probe, then
//! print the tables and write `bench.json` and the charts.
//!
//! Progress goes to stderr, the tables to stdout. It never judges a number; only a
//! mutual-exclusion violation makes the exit status non-zero.

use std::fs;
use std::process::ExitCode;
use std::time::Instant;

use redlock_local::{ServerOptions, Servers};

use crate::args::{Args, CONTENTION_TASKS, Plan, Server, THROUGHPUT_TASKS, VALKEY9_SERVER_ENV};
use crate::clients::raw::{self, NODES};
use crate::contender::Contender;
use crate::machine::{self, Machine};
use crate::report::{Meta, Report, Section};
use crate::scenarios::Scenario;
use crate::scenarios::contention::Contention;
use crate::scenarios::latency::Latency;
use crate::scenarios::memory;
use crate::scenarios::throughput::Throughput;
use crate::server_cpu::{self, ServerCost};
use crate::stats::CURVE;
use crate::{chart, table};

/// Runs the whole benchmark as `args` say.
pub(crate) fn run(args: &Args) -> Result<ExitCode, String> {
    let plan = Plan::from_args(args);
    let started = Instant::now();
    let binary = match args.server {
        Server::Redis => None,
        Server::Valkey => Some(
            std::env::var_os(VALKEY9_SERVER_ENV)
                .filter(|path| !path.is_empty())
                .ok_or_else(|| {
                    format!(
                        "--server valkey runs ${VALKEY9_SERVER_ENV}: set it to a valkey-server \
                         9.1 or later (scripts/ensure-valkey.sh 9.1 fetches one and prints its path)"
                    )
                })?,
        ),
    };
    raw::release_natively(args.server == Server::Valkey);
    let machine = Machine::detect(binary.as_deref());
    if machine.debug_build && !plan.smoke {
        eprintln!("warning: a debug build measures the debug build; use `cargo run --release`");
    }
    eprintln!(
        "redlock-bench: {} cores, {}, {}; load {}",
        machine.cores, machine.cpu, machine.redis, machine.load_at_start
    );
    fs::create_dir_all(&plan.out_dir)
        .map_err(|err| format!("cannot create {}: {err}", plan.out_dir.display()))?;
    let options = args.node_config.apply(match &binary {
        Some(path) => ServerOptions::new().binary(path),
        None => ServerOptions::new(),
    });
    let servers = Servers::try_start_with(NODES, &options)
        .map_err(|err| format!("cannot start {NODES} local redis-servers: {err}"))?;
    let urls = servers.urls();

    let latency = repeat(&plan, &urls, "latency", |contender, rep| Latency {
        key: format!("bench:lat:{contender}:{rep}"),
        warmup: plan.warmup,
        cycles: plan.cycles,
    });
    let throughput = repeat(&plan, &urls, "throughput", |contender, rep| Throughput {
        prefix: format!("bench:tp:{contender}:{rep}"),
        tasks: THROUGHPUT_TASKS,
        duration: plan.duration,
        warmup: plan.warmup,
    });
    let contention = repeat(&plan, &urls, "contention", |contender, rep| Contention {
        key: format!("bench:ct:{contender}:{rep}"),
        tasks: CONTENTION_TASKS,
        duration: plan.duration,
        warmup: plan.warmup,
    });
    eprintln!(
        "[memory] redlock-tokio, {} cycles in a child process",
        plan.memory_total
    );
    let memory = memory::measure(&plan, &urls)?;
    drop(servers);
    let cluster = match plan.contenders.contains(&Contender::TokioMt) {
        true => Some(crate::cluster::measure(&plan, &options)?),
        false => None,
    };

    let window = plan.duration.as_secs_f64();
    let contention = Section::new(
        format!(
            "{CONTENTION_TASKS} tasks (threads for redlock-blocking and its floor) share one \
             client and compete for ONE key for {window:.1} s per run, each library with its \
             default retry policy (the raw floors: try again at once). Hand-over = a holder starting its release → another \
             task's lock call returning the lock."
        ),
        contention,
    );
    let report = Report {
        violations: contention.violations(),
        meta: Meta {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            machine,
            load_at_end: machine::load_average(),
            nodes: NODES,
            node_config: args.node_config.describe(),
            reps: plan.reps,
            smoke: plan.smoke,
            latency_cycles: plan.cycles,
            window_seconds: window,
            throughput_tasks: THROUGHPUT_TASKS,
            contention_tasks: CONTENTION_TASKS,
            curve_percentiles: CURVE.to_vec(),
            total_seconds: started.elapsed().as_secs_f64(),
        },
        latency: Section::new(
            format!(
                "1 client, {} lock+release cycles per run after {} warm-up cycles, on an \
                 uncontended key. Acquire = the lock call alone. allocs/cycle = heap allocations \
                 of the whole process per cycle; client CPU = the bench process's CPU time \
                 (user and system, every thread: the client, its driver and connections, the \
                 runtime) per measured cycle.",
                plan.cycles, plan.warmup
            ),
            latency,
        ),
        throughput: Section::new(
            format!(
                "{THROUGHPUT_TASKS} tasks (threads for redlock-blocking and its floor) share one \
                 client, each locking and releasing a key of its own, for {window:.1} s per run."
            ),
            throughput,
        ),
        contention,
        memory,
        cluster,
    };

    println!("{}", table::render(&report));
    let json = serde_json::to_string_pretty(&report).map_err(|err| err.to_string())?;
    let json_path = plan.out_dir.join("bench.json");
    fs::write(&json_path, json)
        .map_err(|err| format!("cannot write {}: {err}", json_path.display()))?;
    chart::draw(&report, &plan.out_dir)?;
    eprintln!(
        "wrote bench.json, latency.svg and throughput.svg to {} ({:.0} s in all)",
        plan.out_dir.display(),
        report.meta.total_seconds
    );
    if report.violations > 0 {
        eprintln!(
            "redlock-bench: {} MUTUAL-EXCLUSION VIOLATION(S) under contention",
            report.violations
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Every repetition of one scenario, the contenders alternating; per contender, its runs.
fn repeat<S: Scenario>(
    plan: &Plan,
    urls: &[String],
    name: &str,
    make: impl Fn(Contender, u32) -> S,
) -> Vec<(Contender, Vec<S::Run>)>
where
    S::Run: ServerCost,
{
    let mut runs: Vec<(Contender, Vec<S::Run>)> =
        plan.contenders.iter().map(|c| (*c, Vec::new())).collect();
    let count = runs.len();
    for rep in 0..plan.reps {
        for step in 0..count {
            let index = (step + usize::try_from(rep).unwrap_or(0)) % count;
            let contender = runs[index].0;
            let start = Instant::now();
            let cpu_before = server_cpu::total_seconds(urls);
            let mut run = contender.run(&make(contender, rep), urls);
            if let (Some(before), Some(after)) = (cpu_before, server_cpu::total_seconds(urls)) {
                run.record_server_cpu(after - before, plan.warmup);
            }
            eprintln!(
                "[{name} {}/{}] {contender:<13} {:>5.1} s",
                rep + 1,
                plan.reps,
                start.elapsed().as_secs_f64()
            );
            runs[index].1.push(run);
        }
    }
    runs
}
