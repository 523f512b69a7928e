//! Scenario (e), a cluster node: `redlock-tokio` on a multi-thread runtime against three
//! deployments of three masters each, in the same run with the deployments alternating — three
//! standalone nodes (the reference), one 3-master cluster as one node, and the same cluster
//! lending each lock 3 votes (`cluster_votes`). Each repetition runs scenario (a), sequential
//! latency, and scenario (b), 64-way throughput, with the servers' CPU per cycle.
//!
//! On one machine the masters share its cores, so this never shows a cluster's throughput
//! scaling with its shards: it shows what a cycle costs the client and the servers. It never
//! judges a number.

use redlock_local::{RedisCluster, ServerOptions, Servers};
use serde::Serialize;

use crate::args::Plan;
use crate::exec::{Executor, TokioExec};
use crate::report::{Measured, Section};
use crate::scenarios::Scenario;
use crate::scenarios::latency::{Latency, LatencyRun};
use crate::scenarios::throughput::{Throughput, ThroughputRun};
use crate::server_cpu::{self, ServerCost};
use crate::stats::Spread;

/// Masters per deployment.
pub(crate) const MASTERS: usize = 3;

/// One way of deploying three masters under a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deployment {
    /// Three standalone nodes: three votes, tracked connections (a plain `SET NX PX`).
    Standalone,
    /// One cluster of three masters as one node: one vote, each master's connection proving
    /// the slots it serves (then a plain `SET NX PX`, sealed on Redis).
    Cluster,
    /// The same cluster lending each lock three votes, one per master.
    ClusterVotes,
}

impl Deployment {
    const ALL: [Self; 3] = [Self::Standalone, Self::Cluster, Self::ClusterVotes];

    fn id(self) -> &'static str {
        match self {
            Self::Standalone => "standalone-3",
            Self::Cluster => "cluster-1-vote",
            Self::ClusterVotes => "cluster-3-votes",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Standalone => "3 standalone nodes",
            Self::Cluster => "1 cluster node (3 masters), 1 vote",
            Self::ClusterVotes => "1 cluster node (3 masters), 3 votes",
        }
    }

    /// Runs `scenario` once with a fresh runtime and client; every slot or node is trusted
    /// first (a fresh cluster's slots would sit out otherwise).
    fn run<S: Scenario>(self, scenario: &S, urls: &[String]) -> S::Run {
        let exec = TokioExec::multi_thread();
        let mut builder = redlock_tokio::Redlock::builder(urls);
        if self == Self::ClusterVotes {
            builder = builder.cluster_votes(0, MASTERS);
        }
        let client = builder.build().expect("redlock-tokio client");
        exec.block_on(client.trust_nodes())
            .expect("trust every node and slot");
        scenario.run_async(&exec, &client)
    }
}

/// What scenario (e) found: per deployment, its runs and their summary, and the ratio of each
/// median to the standalone deployment's.
#[derive(Debug, Serialize)]
pub(crate) struct ClusterSection {
    /// What it is.
    pub(crate) what: String,
    pub(crate) latency: Vec<DeploymentEntry<LatencyRun>>,
    pub(crate) throughput: Vec<DeploymentEntry<ThroughputRun>>,
    /// Per deployment, the scripts its masters ran per sequential cycle (warm-up included),
    /// over the repetitions: how often an acquisition proves the node's memory by script.
    pub(crate) scripts_per_cycle: Vec<(&'static str, Option<Spread>)>,
}

/// One deployment in one scenario.
#[derive(Debug, Serialize)]
pub(crate) struct DeploymentEntry<R> {
    pub(crate) deployment: &'static str,
    pub(crate) label: &'static str,
    pub(crate) runs: Vec<R>,
    /// Per metric: median (min–max), and the median ÷ the standalone deployment's.
    pub(crate) summary: Vec<(&'static str, Spread, Option<f64>)>,
}

/// Starts the deployments, runs every repetition with them alternating, and stops them.
pub(crate) fn measure(plan: &Plan, options: &ServerOptions) -> Result<ClusterSection, String> {
    let standalone = Servers::try_start_with(MASTERS, options)
        .map_err(|err| format!("cannot start {MASTERS} local servers: {err}"))?;
    let cluster = RedisCluster::try_start_with(MASTERS, 0, options)
        .map_err(|err| format!("cannot form a local cluster: {err}"))?;
    let standalone_urls = standalone.urls();
    // The cluster node is given by one master; the servers' CPU is read on every master.
    let cluster_urls = cluster.urls();
    let deployments = |deployment: Deployment| match deployment {
        Deployment::Standalone => (&standalone_urls[..], &standalone_urls[..]),
        _ => (&cluster_urls[..1], &cluster_urls[..]),
    };
    let mut latency: Vec<(Deployment, Vec<LatencyRun>)> =
        Deployment::ALL.iter().map(|d| (*d, Vec::new())).collect();
    let mut throughput: Vec<(Deployment, Vec<ThroughputRun>)> =
        Deployment::ALL.iter().map(|d| (*d, Vec::new())).collect();
    let mut scripts: Vec<Vec<f64>> = Deployment::ALL.iter().map(|_| Vec::new()).collect();
    for rep in 0..plan.reps {
        for step in 0..Deployment::ALL.len() {
            let index = (step + usize::try_from(rep).unwrap_or(0)) % Deployment::ALL.len();
            let deployment = Deployment::ALL[index];
            let (urls, masters) = deployments(deployment);
            let id = deployment.id();
            let started = std::time::Instant::now();
            let scripts_before = server_cpu::total_scripts(masters);
            latency[index].1.push(measured(plan, masters, || {
                deployment.run(
                    &Latency {
                        key: format!("bench:cl:lat:{id}:{rep}"),
                        warmup: plan.warmup,
                        cycles: plan.cycles,
                    },
                    urls,
                )
            }));
            // The trust before the run stamps epochs with `SET`s, never by script.
            if let (Some(before), Some(after)) =
                (scripts_before, server_cpu::total_scripts(masters))
            {
                let cycles = u64::from(plan.cycles) + u64::from(plan.warmup);
                if cycles > 0 {
                    scripts[index].push(after.saturating_sub(before) as f64 / cycles as f64);
                }
            }
            throughput[index].1.push(measured(plan, masters, || {
                deployment.run(
                    &Throughput {
                        prefix: format!("bench:cl:tp:{id}:{rep}"),
                        tasks: crate::args::THROUGHPUT_TASKS,
                        duration: plan.duration,
                        warmup: plan.warmup,
                    },
                    urls,
                )
            }));
            eprintln!(
                "[cluster {}/{}] {id:<15} {:>5.1} s",
                rep + 1,
                plan.reps,
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(ClusterSection {
        what: format!(
            "redlock-tokio (multi-thread) on {MASTERS} masters deployed three ways, alternating \
             in each of {} repetition(s): (a) sequential latency and (b) {}-task throughput as \
             above. server µs/cycle sums the {MASTERS} masters' CPU; per master = ÷ {MASTERS}. \
             ×standalone = median ÷ the standalone deployment's median. Every server shares \
             this machine's cores: no scaling with shards can show here.",
            plan.reps,
            crate::args::THROUGHPUT_TASKS
        ),
        latency: summarise(latency),
        throughput: summarise(throughput),
        scripts_per_cycle: Deployment::ALL
            .iter()
            .zip(scripts)
            .map(|(deployment, values)| (deployment.id(), Spread::of(values)))
            .collect(),
    })
}

/// One run, with the CPU the masters at `masters` spent on it.
fn measured<R: ServerCost>(plan: &Plan, masters: &[String], run: impl FnOnce() -> R) -> R {
    let before = server_cpu::total_seconds(masters);
    let mut result = run();
    if let (Some(before), Some(after)) = (before, server_cpu::total_seconds(masters)) {
        result.record_server_cpu(after - before, plan.warmup);
    }
    result
}

/// Each deployment's medians, and their ratio to the standalone deployment's.
fn summarise<R: Measured>(runs: Vec<(Deployment, Vec<R>)>) -> Vec<DeploymentEntry<R>> {
    let section = Section::<R>::summaries(&runs);
    let reference = section.first().cloned().unwrap_or_default();
    runs.into_iter()
        .zip(section)
        .map(|((deployment, runs), summary)| DeploymentEntry {
            deployment: deployment.id(),
            label: deployment.label(),
            runs,
            summary: summary
                .into_iter()
                .map(|(key, spread)| {
                    let base = reference
                        .iter()
                        .find(|(other, _)| *other == key)
                        .map(|(_, spread)| spread.median)
                        .filter(|median| *median != 0.0);
                    (key, spread, base.map(|base| spread.median / base))
                })
                .collect(),
        })
        .collect()
}
