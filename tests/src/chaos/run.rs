//! One chaos run, start to finish: processes, proxies, clients, faults, then the checks.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redlock_tokio::Redlock;
use tokio::runtime::Runtime;

use super::bounds::CallBounds;
use super::config::ChaosConfig;
use super::faults::Nemesis;
use super::links::Links;
use super::probe;
use super::recorder::Recorder;
use super::report::{ChaosReport, ConnectionCheck, CounterCheck};
use super::rng::ChaosRng;
use super::tokio_client::{self, TokioClient};
use super::workload::{AdapterKind, Planner, Shared, Tally};
use crate::conformance::scenarios::eventually;
use crate::{Cluster, RedisServer};

/// How long, after the run's end, a client may take to finish its last section before it
/// counts as hung. Far above any section's bound.
const FINISH_MARGIN: Duration = Duration::from_secs(60);
/// How long connections and tasks may take to go back to their baseline once the clients are
/// dropped (background releases run up to the I/O timeout).
const SETTLE_LIMIT: Duration = Duration::from_secs(15);
/// How long a client may take, once the faults are healed, to lock on every node again.
const RECOVERY_LIMIT: Duration = Duration::from_secs(5);
/// The TTL of those locks: long enough to look at every node before it passes.
const RECOVERY_TTL: Duration = Duration::from_secs(10);

/// Runs the chaos test described by `config` and reports what it found. It asserts nothing:
/// see [`ChaosReport::violations`].
///
/// # Panics
/// If a server, proxy or runtime cannot be started, or a client cannot be built.
pub fn run(config: &ChaosConfig) -> ChaosReport {
    let started = Instant::now();
    println!(
        "[chaos] seed {} for {:?} of faults; rerun this schedule: {}",
        config.seed,
        config.duration,
        config.rerun_command()
    );
    println!(
        "[chaos] real processes and the OS scheduler are not deterministic: a seed replays the \
         fault schedule and the clients' choices, not the interleavings"
    );
    let cluster = Cluster::start(config.nodes);
    let counter_server = RedisServer::start();
    let links = Links::start(&cluster, config.clients.len());
    let connections_before: Vec<u64> = cluster
        .servers()
        .iter()
        .map(probe::connected_clients)
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let tasks_before = runtime.metrics().num_alive_tasks();

    let mut rng = ChaosRng::new(config.seed);
    let nemesis_rng = rng.fork();
    let clients = build_clients(config, &links, &mut rng);
    let bounds = clients.first().map_or_else(
        || panic!("a chaos run needs clients"),
        |client| CallBounds::new(client.redlock().config()),
    );
    let stop_at = Instant::now() + config.duration;
    let shared = Arc::new(Shared {
        recorder: Recorder::new(),
        tally: Mutex::new(Tally::with_resources(config.resources)),
        bounds,
        write_guard: config.write_guard,
        stop_at,
        resources: (0..config.resources).map(|r| format!("r{r}")).collect(),
        counters: (0..config.resources)
            .map(|r| format!("chaos-counter:r{r}"))
            .collect(),
    });
    let counter_client = redis::Client::open(counter_server.url()).expect("counter server URL");

    let (cluster, faults, finished) = thread::scope(|scope| {
        let nemesis = Nemesis::new(
            cluster,
            &links,
            nemesis_rng,
            &config.faults,
            config.max_ttl(),
        );
        let nemesis = thread::Builder::new()
            .name("chaos-nemesis".to_owned())
            .spawn_scoped(scope, move || nemesis.run(stop_at))
            .expect("spawn the nemesis thread");
        let finished = runtime.block_on(run_clients(clients, &counter_client, &shared));
        let clients_done = started.elapsed();
        let (cluster, faults) = nemesis
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (cluster, faults, (finished, clients_done))
    });
    let ((client_failures, survivors), clients_done) = finished;
    let healed = started.elapsed();
    let keys_at_end = cluster
        .servers()
        .iter()
        .map(|server| probe::keys_with_prefix(server, &config.key_prefix).len())
        .sum();
    let recovery_failures = check_recovery(&runtime, &cluster, &survivors, config);
    drop(survivors);
    println!(
        "[chaos] clients done after {:.1} s, faults healed after {:.1} s, recovery checked after \
         {:.1} s; checking the rest",
        clients_done.as_secs_f64(),
        healed.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    let tally = shared.tally().clone();
    let counters = (0..config.resources)
        .map(|r| CounterCheck {
            resource: r,
            written: tally.written_per_resource[r],
            counter: probe::counter(&counter_server, &shared.counters[r]),
        })
        .collect();
    let overlaps = shared
        .recorder
        .overlaps()
        .iter()
        .map(|overlap| shared.recorder.describe(overlap))
        .collect();

    // The clients are gone (each task owned its client); background releases finish within the
    // I/O timeout, and with them every task and connection of the library.
    let metrics = runtime.metrics();
    eventually(SETTLE_LIMIT, || metrics.num_alive_tasks() <= tasks_before);
    let tasks_after = metrics.num_alive_tasks();
    let settled = || {
        links.open_connections() == 0
            && cluster
                .servers()
                .iter()
                .zip(&connections_before)
                .all(|(server, before)| probe::connected_clients(server) <= *before)
    };
    eventually(SETTLE_LIMIT, settled);
    let connections = cluster
        .servers()
        .iter()
        .zip(&connections_before)
        .map(|(server, before)| ConnectionCheck {
            node: server.addr().to_string(),
            before: *before,
            after: probe::connected_clients(server),
        })
        .collect();
    let proxy_connections_after = links.open_connections();

    // Every key of ours has a TTL of at most the longest TTL, counted from its last write; the
    // last writes were at most an I/O timeout after the faults healed.
    let key_limit = config.max_ttl() + config.io_timeout + Duration::from_secs(5);
    let no_keys = || {
        cluster
            .servers()
            .iter()
            .all(|server| probe::keys_with_prefix(server, &config.key_prefix).is_empty())
    };
    eventually(key_limit, no_keys);
    let keys_left = cluster
        .servers()
        .iter()
        .flat_map(|server| {
            probe::keys_with_prefix(server, &config.key_prefix)
                .into_iter()
                .map(move |key| format!("{}: {key}", server.addr()))
        })
        .collect();

    shutdown(runtime);
    ChaosReport {
        seed: config.seed,
        rerun: config.rerun_command(),
        duration: config.duration,
        elapsed: started.elapsed(),
        clients: config.clients.len(),
        faults,
        windows: shared.recorder.windows().len(),
        tally,
        overlaps,
        counters,
        client_failures,
        recovery_failures,
        keys_at_end,
        keys_left,
        connections,
        proxy_connections_after,
        tasks_before,
        tasks_after,
    }
}

/// A built client of some adapter, not yet running.
enum Client {
    Tokio(TokioClientParts),
}

struct TokioClientParts {
    index: usize,
    redlock: Redlock,
    planner: Planner,
}

impl Client {
    fn redlock(&self) -> &Redlock {
        match self {
            Self::Tokio(parts) => &parts.redlock,
        }
    }
}

fn build_clients(config: &ChaosConfig, links: &Links, rng: &mut ChaosRng) -> Vec<Client> {
    config
        .clients
        .iter()
        .enumerate()
        .map(|(index, kind)| {
            let planner = Planner::new(rng.fork(), config);
            match kind {
                AdapterKind::Tokio => {
                    let redlock = tokio_client::build(links.urls(index), config)
                        .unwrap_or_else(|err| panic!("client {index}: {err}"));
                    Client::Tokio(TokioClientParts {
                        index,
                        redlock,
                        planner,
                    })
                }
            }
        })
        .collect()
}

/// Runs every client until the run's end; returns the ones that panicked or hung, and the
/// others' clients.
///
/// Clients of a runtime-less or other-runtime adapter would run on threads of their own here,
/// joined the same way.
async fn run_clients(
    clients: Vec<Client>,
    counter: &redis::Client,
    shared: &Arc<Shared>,
) -> (Vec<String>, Vec<(usize, Redlock)>) {
    let mut tasks = Vec::new();
    for client in clients {
        match client {
            Client::Tokio(parts) => {
                let connection = counter
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect to the counter server");
                let client =
                    TokioClient::new(parts.index, parts.redlock, connection, parts.planner);
                tasks.push((parts.index, tokio::spawn(client.run(Arc::clone(shared)))));
            }
        }
    }
    let mut failures = Vec::new();
    let mut survivors = Vec::new();
    let finish_by = shared.stop_at + FINISH_MARGIN;
    for (index, mut task) in tasks {
        match tokio::time::timeout_at(finish_by.into(), &mut task).await {
            Ok(Ok(redlock)) => survivors.push((index, redlock)),
            Ok(Err(err)) => failures.push(format!("client {index}: {err}")),
            Err(_elapsed) => {
                task.abort();
                failures.push(format!(
                    "client {index} still running {FINISH_MARGIN:?} after the end"
                ));
            }
        }
    }
    (failures, survivors)
}

/// Once the faults are healed, each client must take a lock that lands on *every* node again
/// within [`RECOVERY_LIMIT`]: a connection left broken by a kill, stop, partition or reset
/// would show here. Returns one line per client that did not.
fn check_recovery(
    runtime: &Runtime,
    cluster: &Cluster,
    clients: &[(usize, Redlock)],
    config: &ChaosConfig,
) -> Vec<String> {
    let mut failures = Vec::new();
    for (index, redlock) in clients {
        let resource = format!("recovery-{index}");
        let key = format!("{}{resource}", config.key_prefix);
        let deadline = Instant::now() + RECOVERY_LIMIT;
        loop {
            let last = match runtime.block_on(redlock.lock(resource.as_str(), RECOVERY_TTL)) {
                Ok(lock) => {
                    let token = lock.token().as_bytes().to_vec();
                    let missing = || {
                        cluster
                            .servers()
                            .iter()
                            .filter(|server| server.get(&key).as_deref() != Some(&token[..]))
                            .map(|server| server.addr().to_string())
                            .collect::<Vec<_>>()
                    };
                    // Healthy nodes answer within milliseconds; a node whose connection has to
                    // be made again first gets its key on the next attempt.
                    eventually(Duration::from_millis(500), || missing().is_empty());
                    let missing = missing();
                    let votes = format!("{:?}", lock.lease().votes());
                    let report = runtime.block_on(lock.release());
                    if missing.is_empty() {
                        break;
                    }
                    let released: Vec<String> = report
                        .nodes
                        .iter()
                        .map(|n| format!("{}: {:?}", n.node, n.result))
                        .collect();
                    format!(
                        "granted, but not on {} (votes {votes}; release {})",
                        missing.join(", "),
                        released.join(", ")
                    )
                }
                Err(err) => err.to_string(),
            };
            if Instant::now() > deadline {
                failures.push(format!(
                    "client {index}: no lock on every node within {RECOVERY_LIMIT:?} after the \
                     faults healed (last: {last})"
                ));
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
    failures
}

fn shutdown(runtime: Runtime) {
    runtime.shutdown_timeout(Duration::from_secs(5));
}
