//! Running schedules: one seed, the CI batch of seeds (or a soak batch), a replay, and the hunt
//! for a violation that a negative control must win.

use std::fmt;
use std::time::{Duration, Instant};

use super::scenario::Scenario;
use super::stats::Stats;
use super::world::{Report, World};

/// Environment variable: run only this seed, traced (replays a failure bit-for-bit).
pub const SIM_SEED: &str = "SIM_SEED";
/// Environment variable: how many trace lines a failure or replay prints (80 by default).
pub const SIM_TRACE_LINES: &str = "SIM_TRACE_LINES";
/// Environment variable: seeds per scenario, instead of the CI number (for soak runs).
pub const SIM_SEEDS: &str = "SIM_SEEDS";

/// Runs the schedule `seed` draws from `scenario`.
pub fn run(scenario: &Scenario, seed: u64) -> Report {
    World::new(scenario, seed, false).run(seed)
}

/// Runs it with the event trace on (slower; the report carries the trace).
pub fn run_traced(scenario: &Scenario, seed: u64) -> Report {
    World::new(scenario, seed, true).run(seed)
}

/// What a batch of seeds did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The scenario's name.
    pub scenario: &'static str,
    /// Totals over the batch.
    pub stats: Stats,
    /// Wall-clock time the batch took.
    pub elapsed: Duration,
}

impl Summary {
    /// Schedules run per second of wall-clock time.
    pub fn schedules_per_second(&self) -> f64 {
        self.stats.schedules as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[sim] {}: {:.1} schedules/s in {:.2} s; {}",
            self.scenario,
            self.schedules_per_second(),
            self.elapsed.as_secs_f64(),
            self.stats
        )
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

fn replay_command(scenario: &Scenario, seed: u64) -> String {
    format!(
        "{SIM_SEED}={seed} cargo test -p redlock-tests --test simulation -- {} --exact --nocapture",
        scenario.name
    )
}

/// Runs `scenario` — which must lie inside the model — over `ci_seeds` seeds (`$SIM_SEEDS` if
/// set; only `$SIM_SEED`, traced, if that is set) and panics at the first violation with its
/// seed, the command that replays it, and the events that led to it.
pub fn explore(scenario: &Scenario, ci_seeds: u64) -> Summary {
    let broken = scenario.assumptions();
    assert!(
        broken.is_empty(),
        "{} is meant to stay inside the model but breaks: {broken:?}",
        scenario.name
    );
    let started = Instant::now();
    let mut stats = Stats::default();
    if let Some(seed) = env_u64(SIM_SEED) {
        let report = run_traced(scenario, seed);
        stats += report.stats;
        if report.violation.is_some() {
            fail(scenario, &report);
        }
        println!(
            "[sim] {} seed {seed}: no violation; {}\n{}",
            scenario.name,
            report.stats,
            report.trace.unwrap_or_default()
        );
    } else {
        for seed in 0..env_u64(SIM_SEEDS).unwrap_or(ci_seeds) {
            let report = run(scenario, seed);
            stats += report.stats;
            if report.violation.is_some() {
                fail(scenario, &report);
            }
        }
    }
    let summary = Summary {
        scenario: scenario.name,
        stats,
        elapsed: started.elapsed(),
    };
    println!("{summary}");
    summary
}

/// Prints a violation with its seed, replay command and minimal trace, then panics.
fn fail(scenario: &Scenario, report: &Report) -> ! {
    let seed = report.seed;
    let traced = run_traced(scenario, seed);
    let replays = traced.fingerprint == report.fingerprint && traced.violation == report.violation;
    let violation = report.violation.as_ref().map(ToString::to_string);
    panic!(
        "\n[sim] VIOLATION in {} seed {seed}: {}\n  replays bit-for-bit: {replays}\n  replay: {}\n\
         minimal trace:\n{}",
        scenario.name,
        violation.unwrap_or_default(),
        replay_command(scenario, seed),
        traced.trace.unwrap_or_default()
    );
}

/// A violation a negative control found.
#[derive(Debug, Clone)]
pub struct Found {
    /// How many seeds ran, the violating one included.
    pub seeds_tried: u64,
    /// The traced report of the violating seed.
    pub report: Report,
    /// Totals over the seeds tried.
    pub stats: Stats,
}

/// Runs `scenario` — which must break a model assumption — over seeds `0..max_seeds` (only
/// `$SIM_SEED` if set) until the checker finds a violation; replays that seed traced, checks the
/// replay is identical, and prints it.
pub fn hunt(scenario: &Scenario, max_seeds: u64) -> Option<Found> {
    let broken = scenario.assumptions();
    assert!(
        !broken.is_empty(),
        "{} is a negative control but breaks no assumption of the model",
        scenario.name
    );
    let started = Instant::now();
    let seeds = match env_u64(SIM_SEED) {
        Some(seed) => seed..seed + 1,
        None => 0..max_seeds,
    };
    let mut stats = Stats::default();
    let mut tried = 0;
    for seed in seeds {
        tried += 1;
        let report = run(scenario, seed);
        stats += report.stats;
        if let Some(violation) = &report.violation {
            let traced = run_traced(scenario, seed);
            assert_eq!(
                (traced.fingerprint, traced.violation.as_ref()),
                (report.fingerprint, Some(violation)),
                "seed {seed} must replay bit-for-bit"
            );
            println!(
                "[sim] {} (breaks: {}): caught after {tried} seeds in {:.2} s: seed {seed}: \
                 {violation}\n  replay: {}\nminimal trace:\n{}",
                scenario.name,
                broken.join("; "),
                started.elapsed().as_secs_f64(),
                replay_command(scenario, seed),
                traced.trace.as_deref().unwrap_or_default()
            );
            return Some(Found {
                seeds_tried: tried,
                report: traced,
                stats,
            });
        }
    }
    println!(
        "[sim] {}: no violation in {tried} seeds ({stats})",
        scenario.name
    );
    None
}
