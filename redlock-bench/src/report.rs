//! The report of a run: every repetition's numbers, and per contender and metric the median,
//! min–max, ratio to the raw floor and ratio to the floor on its own runtime or threads — what
//! `bench.json` holds and the tables and charts are drawn from.
//!
//! It never measures and never formats for humans (that is `table.rs` and `chart.rs`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::contender::Contender;
use crate::machine::Machine;
use crate::scenarios::contention::ContentionRun;
use crate::scenarios::latency::LatencyRun;
use crate::scenarios::memory::MemoryRun;
use crate::scenarios::throughput::ThroughputRun;
use crate::stats::Spread;

/// Everything one run of the benchmark found.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// How it was run, and where.
    pub(crate) meta: Meta,
    /// Scenario (a).
    pub(crate) latency: Section<LatencyRun>,
    /// Scenario (b).
    pub(crate) throughput: Section<ThroughputRun>,
    /// Scenario (c).
    pub(crate) contention: Section<ContentionRun>,
    /// Scenario (d).
    pub(crate) memory: MemoryRun,
    /// Scenario (e), when `redlock-tokio` multi-thread is measured.
    pub(crate) cluster: Option<crate::cluster::ClusterSection>,
    /// Mutual-exclusion violations over every contention run: must be 0.
    pub(crate) violations: u64,
}

/// How the run was made.
#[derive(Debug, Serialize)]
pub(crate) struct Meta {
    /// The command line.
    pub(crate) command: String,
    /// The machine.
    pub(crate) machine: Machine,
    /// `/proc/loadavg` when the run ended.
    pub(crate) load_at_end: String,
    /// Redis nodes.
    pub(crate) nodes: usize,
    /// How they were configured ([`NodeConfig::describe`](crate::args::NodeConfig::describe)).
    pub(crate) node_config: &'static str,
    /// Repetitions of (a)–(c) per contender.
    pub(crate) reps: u32,
    /// Whether this was the smoke mode (numbers mean nothing).
    pub(crate) smoke: bool,
    /// Measured cycles per latency run.
    pub(crate) latency_cycles: u32,
    /// Length of each throughput and contention run, seconds.
    pub(crate) window_seconds: f64,
    /// Tasks of (b).
    pub(crate) throughput_tasks: usize,
    /// Tasks of (c).
    pub(crate) contention_tasks: usize,
    /// Percentiles of each latency run's `curve_us`.
    pub(crate) curve_percentiles: Vec<f64>,
    /// Wall time of the whole run, seconds.
    pub(crate) total_seconds: f64,
}

/// One scenario: per contender, its runs and their summary.
#[derive(Debug, Serialize)]
pub(crate) struct Section<R> {
    /// What the scenario is.
    pub(crate) what: String,
    /// One entry per contender, in the order of the first repetition.
    pub(crate) results: Vec<Entry<R>>,
}

/// One contender in one scenario.
#[derive(Debug, Serialize)]
pub(crate) struct Entry<R> {
    /// Short name.
    pub(crate) contender: &'static str,
    /// Long name.
    pub(crate) label: &'static str,
    /// Short name of the floor on the same runtime or threads (`vs_own_floor`'s reference).
    pub(crate) own_floor: Option<&'static str>,
    /// Every repetition, in order.
    pub(crate) runs: Vec<R>,
    /// Per metric: median, min–max, ratio to raw, ratio to the own floor.
    pub(crate) summary: BTreeMap<&'static str, Stat>,
}

/// One metric of one contender over its repetitions.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Stat {
    /// Median, min, max over the repetitions.
    #[serde(flatten)]
    pub(crate) spread: Spread,
    /// The median divided by the raw floor's median (tokio multi-thread).
    pub(crate) vs_raw: Option<f64>,
    /// The median divided by the median of the floor on the same runtime or threads, measured
    /// in the same run (`None` for the tokio rows: `vs_raw` is theirs).
    pub(crate) vs_own_floor: Option<f64>,
    /// The sum over the repetitions (for counts such as violations).
    pub(crate) total: f64,
}

/// Which way a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    /// Times, allocations.
    Lower,
    /// Rates.
    Higher,
}

/// How a metric is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shown {
    /// Median (min–max), the ratio to raw and the ratio to the own floor.
    Spread,
    /// The sum over the repetitions, no ratio.
    Total,
}

/// A number every run of a scenario has.
pub(crate) struct Metric<R> {
    /// Name in the JSON summary.
    pub(crate) key: &'static str,
    /// Column header.
    pub(crate) header: &'static str,
    /// Which way is better.
    pub(crate) better: Better,
    /// How the table shows it.
    pub(crate) shown: Shown,
    /// Reads it from a run (`None`: the run has no such number, e.g. no hand-over happened).
    pub(crate) get: fn(&R) -> Option<f64>,
}

/// A run type whose numbers the report summarises.
pub(crate) trait Measured: Sized + 'static {
    /// Its metrics, in table order.
    const METRICS: &'static [Metric<Self>];
}

const fn spread<R>(
    key: &'static str,
    header: &'static str,
    better: Better,
    get: fn(&R) -> Option<f64>,
) -> Metric<R> {
    Metric {
        key,
        header,
        better,
        shown: Shown::Spread,
        get,
    }
}

impl Measured for LatencyRun {
    const METRICS: &'static [Metric<Self>] = &[
        spread("cycle_p50_us", "cycle p50 µs", Better::Lower, |r| {
            Some(r.cycle_p50_us)
        }),
        spread("cycle_p99_us", "cycle p99 µs", Better::Lower, |r| {
            Some(r.cycle_p99_us)
        }),
        spread("acquire_p50_us", "acquire p50 µs", Better::Lower, |r| {
            Some(r.acquire_p50_us)
        }),
        spread("acquire_p99_us", "acquire p99 µs", Better::Lower, |r| {
            Some(r.acquire_p99_us)
        }),
        spread("allocs_per_cycle", "allocs/cycle", Better::Lower, |r| {
            Some(r.allocs_per_cycle)
        }),
        spread(
            "client_cpu_us_per_cycle",
            "client CPU µs/cycle",
            Better::Lower,
            |r| r.client_cpu_us_per_cycle,
        ),
        spread(
            "server_cpu_us_per_cycle",
            "server µs/cycle",
            Better::Lower,
            |r| r.server_cpu_us_per_cycle,
        ),
    ];
}

impl Measured for ThroughputRun {
    const METRICS: &'static [Metric<Self>] = &[
        spread("cycles_per_sec", "cycles/s", Better::Higher, |r| {
            Some(r.cycles_per_sec)
        }),
        spread(
            "server_cpu_us_per_cycle",
            "server µs/cycle",
            Better::Lower,
            |r| r.server_cpu_us_per_cycle,
        ),
        Metric {
            key: "failures",
            header: "failed locks",
            better: Better::Lower,
            shown: Shown::Total,
            get: |r| Some(r.failures as f64),
        },
    ];
}

impl Measured for ContentionRun {
    const METRICS: &'static [Metric<Self>] = &[
        spread(
            "acquisitions_per_sec",
            "acquisitions/s",
            Better::Higher,
            |r| Some(r.acquisitions_per_sec),
        ),
        spread("handover_p50_us", "hand-over p50 µs", Better::Lower, |r| {
            r.handover_p50_us
        }),
        spread("handover_p99_us", "hand-over p99 µs", Better::Lower, |r| {
            r.handover_p99_us
        }),
        Metric {
            key: "handovers",
            header: "hand-overs",
            better: Better::Higher,
            shown: Shown::Total,
            get: |r| Some(r.handovers as f64),
        },
        Metric {
            key: "gave_up",
            header: "gave up",
            better: Better::Lower,
            shown: Shown::Total,
            get: |r| Some(r.gave_up as f64),
        },
        Metric {
            key: "violations",
            header: "violations",
            better: Better::Lower,
            shown: Shown::Total,
            get: |r| Some(r.violations as f64),
        },
    ];
}

impl<R: Measured> Section<R> {
    /// Summarises every contender's runs; the ratios are against [`Contender::Raw`] and
    /// against each one's [`Contender::own_floor`].
    pub(crate) fn new(what: String, runs: Vec<(Contender, Vec<R>)>) -> Self {
        // Every floor's median of every metric.
        let floors: BTreeMap<(Contender, &'static str), f64> = runs
            .iter()
            .filter(|(contender, _)| contender.is_floor())
            .flat_map(|(contender, runs)| {
                R::METRICS.iter().filter_map(move |metric| {
                    let spread = Spread::of(runs.iter().filter_map(metric.get))?;
                    Some(((*contender, metric.key), spread.median))
                })
            })
            .collect();
        let ratio = |median: f64, floor: Option<Contender>, key: &'static str| {
            floors
                .get(&(floor?, key))
                .filter(|floor| **floor != 0.0)
                .map(|floor| median / floor)
        };
        let results = runs
            .into_iter()
            .map(|(contender, runs)| {
                let summary = R::METRICS
                    .iter()
                    .filter_map(|metric| {
                        let spread = Spread::of(runs.iter().filter_map(metric.get))?;
                        let total = runs.iter().filter_map(metric.get).sum();
                        Some((
                            metric.key,
                            Stat {
                                spread,
                                vs_raw: ratio(spread.median, Some(Contender::Raw), metric.key),
                                vs_own_floor: ratio(
                                    spread.median,
                                    contender.own_floor(),
                                    metric.key,
                                ),
                                total,
                            },
                        ))
                    })
                    .collect();
                Entry {
                    contender: contender.id(),
                    label: contender.label(),
                    own_floor: contender.own_floor().map(Contender::id),
                    runs,
                    summary,
                }
            })
            .collect();
        Self { what, results }
    }
}

impl<R: Measured> Section<R> {
    /// Per group of runs, the median (min–max) of every metric shown as a spread, in table
    /// order.
    pub(crate) fn summaries<K>(groups: &[(K, Vec<R>)]) -> Vec<Vec<(&'static str, Spread)>> {
        groups
            .iter()
            .map(|(_, runs)| {
                R::METRICS
                    .iter()
                    .filter(|metric| metric.shown == Shown::Spread)
                    .filter_map(|metric| {
                        Some((metric.key, Spread::of(runs.iter().filter_map(metric.get))?))
                    })
                    .collect()
            })
            .collect()
    }
}

impl Section<ContentionRun> {
    /// Violations over every run of every contender.
    pub(crate) fn violations(&self) -> u64 {
        self.results
            .iter()
            .flat_map(|entry| &entry.runs)
            .map(|run| run.violations)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throughput(cycles_per_sec: f64) -> ThroughputRun {
        ThroughputRun {
            tasks: 1,
            seconds: 1.0,
            cycles: 0,
            failures: 0,
            cycles_per_sec,
            server_cpu_us_per_cycle: None,
        }
    }

    #[test]
    fn ratios_are_against_raw_and_against_the_floor_on_the_same_runtime() {
        let section = Section::new(
            String::new(),
            vec![
                (Contender::Raw, vec![throughput(1000.0)]),
                (Contender::RawAsyncStd, vec![throughput(800.0)]),
                (Contender::RawBlocking, vec![throughput(500.0)]),
                (Contender::TokioMt, vec![throughput(900.0)]),
                (Contender::AsyncStd, vec![throughput(600.0)]),
                (Contender::Blocking, vec![throughput(400.0)]),
            ],
        );
        let ratios: Vec<(&str, Option<f64>, Option<f64>)> = section
            .results
            .iter()
            .map(|entry| {
                let stat = entry.summary["cycles_per_sec"];
                (entry.contender, stat.vs_raw, stat.vs_own_floor)
            })
            .collect();
        assert_eq!(
            ratios,
            [
                ("raw", Some(1.0), Some(1.0)),
                ("raw-async-std", Some(0.8), Some(1.0)),
                ("raw-blocking", Some(0.5), Some(1.0)),
                ("tokio-mt", Some(0.9), None),
                ("async-std", Some(0.6), Some(0.75)),
                ("blocking", Some(0.4), Some(0.8)),
            ]
        );
    }
}
