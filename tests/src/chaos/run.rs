//! One chaos run, start to finish: processes, proxies, clients, faults, then the checks.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redlock_core::Config;
use tokio::runtime::Runtime;

use super::adapter::{self, AdapterKind, Client, Finished, Running};
use super::async_client::AsyncClient;
use super::blocking_client::BlockingClient;
use super::bounds::CallBounds;
use super::config::ChaosConfig;
use super::faults::Nemesis;
use super::links::Links;
use super::probe;
use super::recorder::Recorder;
use super::report::{ChaosReport, ConnectionCheck, CounterCheck};
use super::workload::{Planner, Shared, Tally};
use crate::conformance::scenarios::eventually;
use crate::executor::{AsyncStdExecutor, TokioExecutor};
use crate::rng::TestRng;
use crate::{RedisServer, ServerOptions, Servers};

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
    let redis_nodes = config.nodes.saturating_sub(config.valkey_nodes);
    let each: Vec<ServerOptions> = (0..config.nodes)
        .map(|node| {
            let options = ServerOptions::new();
            if node < redis_nodes {
                Ok(options)
            } else if config.native_node && node + 1 == config.nodes {
                options
                    .valkey9()
                    .map(|options| options.deny_scripting(true))
                    .map_err(|err| err.to_string())
            } else {
                options.valkey().map_err(|err| err.to_string())
            }
        })
        .collect::<Result<_, _>>()
        .unwrap_or_else(|err| panic!("{err}"));
    let servers = Servers::try_start_each(&each).unwrap_or_else(|err| panic!("{err}"));
    let server_names: Vec<String> = servers.servers().iter().map(probe::server_name).collect();
    println!("[chaos] nodes: {}", server_names.join(", "));
    let counter_server = RedisServer::start();
    let links = Links::start(&servers, config.clients.len());
    let connections_before: Vec<u64> = servers
        .servers()
        .iter()
        .map(probe::connected_clients)
        .collect();
    // The tokio clients' runtime. Its alive tasks are counted before and after; async-std has no
    // such count (its executor exposes no metrics), and blocking clients have no tasks: what
    // they leave behind shows in the connection checks.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let tasks_before = runtime.metrics().num_alive_tasks();

    let mut rng = TestRng::new(config.seed);
    let nemesis_rng = rng.fork();
    let counter_client = redis::Client::open(counter_server.url()).expect("counter server URL");
    let clients = connect_clients(config, &links, &counter_client, &runtime, &mut rng);
    let bounds = clients.first().map_or_else(
        || panic!("a chaos run needs clients"),
        |(client, _)| CallBounds::new(client.config()),
    );
    let stop_at = Instant::now() + config.duration;
    let shared = Arc::new(Shared {
        recorder: Recorder::new(),
        tallies: Shared::tallies(config),
        bounds,
        write_guard: config.write_guard,
        stop_at,
        resources: (0..config.resources).map(|r| format!("r{r}")).collect(),
        counters: (0..config.resources)
            .map(|r| format!("chaos-counter:r{r}"))
            .collect(),
    });

    let (servers, faults, finished) = thread::scope(|scope| {
        let nemesis = Nemesis::new(
            servers,
            &links,
            nemesis_rng,
            &config.faults,
            config.max_ttl(),
        );
        let nemesis = thread::Builder::new()
            .name("chaos-nemesis".to_owned())
            .spawn_scoped(scope, move || nemesis.run(stop_at))
            .expect("spawn the nemesis thread");
        let finished = run_clients(clients, &runtime, &shared, config);
        let clients_done = started.elapsed();
        let (servers, faults) = nemesis
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (servers, faults, (finished, clients_done))
    });
    let ((client_failures, survivors), clients_done) = finished;
    let healed = started.elapsed();
    let keys_at_end = servers
        .servers()
        .iter()
        .map(|server| probe::keys_with_prefix(server, &config.key_prefix).len())
        .sum();
    let recovery_failures = check_recovery(&servers, &survivors, config);
    drop(survivors);
    println!(
        "[chaos] clients done after {:.1} s, faults healed after {:.1} s, recovery checked after \
         {:.1} s; checking the rest",
        clients_done.as_secs_f64(),
        healed.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    let by_adapter = shared.tally_by_adapter();
    let mut tally = Tally::with_resources(config.resources);
    for adapter_tally in by_adapter.values() {
        tally.merge(adapter_tally);
    }
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

    // The clients are gone (each task or thread owned its client); background releases finish
    // within the I/O timeout, and with them every task and connection of the library.
    let metrics = runtime.metrics();
    eventually(SETTLE_LIMIT, || metrics.num_alive_tasks() <= tasks_before);
    let tasks_after = metrics.num_alive_tasks();
    let settled = || {
        links.open_connections() == 0
            && servers
                .servers()
                .iter()
                .zip(&connections_before)
                .all(|(server, before)| probe::connected_clients(server) <= *before)
    };
    eventually(SETTLE_LIMIT, settled);
    let connections = servers
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
        servers
            .servers()
            .iter()
            .all(|server| probe::keys_with_prefix(server, &config.key_prefix).is_empty())
    };
    eventually(key_limit, no_keys);
    let keys_left = servers
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
        client_adapters: config.clients.clone(),
        servers: server_names,
        faults,
        windows: shared.recorder.windows().len(),
        tally,
        by_adapter,
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

/// A client of some adapter, connected, not yet running.
enum Connected {
    Tokio(AsyncClient<TokioExecutor>),
    AsyncStd(AsyncClient<AsyncStdExecutor>),
    Blocking(BlockingClient),
}

impl Connected {
    fn config(&self) -> &Config {
        match self {
            Self::Tokio(client) => client.config(),
            Self::AsyncStd(client) => client.config(),
            Self::Blocking(client) => client.config(),
        }
    }

    /// Starts its sections. Tokio clients are spawned on the runtime whose context is entered.
    fn start(self, index: usize, planner: Planner, shared: &Arc<Shared>) -> Box<dyn Running> {
        match self {
            Self::Tokio(client) => adapter::start(client, index, planner, shared),
            Self::AsyncStd(client) => adapter::start(client, index, planner, shared),
            Self::Blocking(client) => adapter::start(client, index, planner, shared),
        }
    }
}

/// Connects every client (each through its own proxies) and draws its planner's stream.
fn connect_clients(
    config: &ChaosConfig,
    links: &Links,
    counter: &redis::Client,
    runtime: &Runtime,
    rng: &mut TestRng,
) -> Vec<(Connected, Planner)> {
    config
        .clients
        .iter()
        .enumerate()
        .map(|(index, kind)| {
            let planner = Planner::new(rng.fork(), config, *kind);
            let urls = links.urls(index);
            let client = match kind {
                AdapterKind::Tokio => {
                    let executor = TokioExecutor::on(runtime.handle().clone());
                    AsyncClient::connect(urls, counter, config, executor).map(Connected::Tokio)
                }
                AdapterKind::AsyncStd => {
                    // Made outside tokio's context, so the counter connection is smol's.
                    assert!(
                        tokio::runtime::Handle::try_current().is_err(),
                        "async-std clients are made outside tokio's context"
                    );
                    AsyncClient::connect(urls, counter, config, AsyncStdExecutor)
                        .map(Connected::AsyncStd)
                }
                AdapterKind::Blocking => {
                    BlockingClient::connect(urls, counter, config).map(Connected::Blocking)
                }
            };
            let client = client.unwrap_or_else(|err| panic!("client {index}: {err}"));
            (client, planner)
        })
        .collect()
}

/// The clients that came back from their run, by index.
type Survivors = Vec<(usize, Box<dyn Finished>)>;

/// Runs every client until the run's end; returns the ones that panicked or hung, and the
/// others.
fn run_clients(
    clients: Vec<(Connected, Planner)>,
    runtime: &Runtime,
    shared: &Arc<Shared>,
    config: &ChaosConfig,
) -> (Vec<String>, Survivors) {
    let running: Vec<Box<dyn Running>> = {
        let _tokio = runtime.enter();
        clients
            .into_iter()
            .enumerate()
            .map(|(index, (client, planner))| client.start(index, planner, shared))
            .collect()
    };
    let mut failures = Vec::new();
    let mut survivors = Vec::new();
    let finish_by = shared.stop_at + FINISH_MARGIN;
    for (index, client) in running.into_iter().enumerate() {
        match client.join(finish_by) {
            Ok(finished) => survivors.push((index, finished)),
            Err(why) => failures.push(format!(
                "client {index} ({}): {why} (waited until {FINISH_MARGIN:?} after the run's end)",
                config.clients[index].name()
            )),
        }
    }
    (failures, survivors)
}

/// Once the faults are healed, each client must take a lock that lands on *every* node again
/// within [`RECOVERY_LIMIT`] plus the longest TTL (a node restarted empty refuses to vote for
/// that long — restart-aware voting): a connection left broken by a kill, stop, partition or
/// reset would show here. Returns one line per client that did not.
fn check_recovery(servers: &Servers, clients: &Survivors, config: &ChaosConfig) -> Vec<String> {
    let mut failures = Vec::new();
    for (index, client) in clients {
        let resource = format!("recovery-{index}");
        let key = format!("{}{resource}", config.key_prefix);
        let limit = RECOVERY_LIMIT + config.max_ttl();
        let deadline = Instant::now() + limit;
        let mut check = |token: &[u8], votes: &str| {
            let missing = || {
                servers
                    .servers()
                    .iter()
                    .filter(|server| server.get(&key).as_deref() != Some(token))
                    .map(|server| server.addr().to_string())
                    .collect::<Vec<_>>()
            };
            // Healthy nodes answer within milliseconds; a node whose connection has to be made
            // again first gets its key on the next attempt.
            eventually(Duration::from_millis(500), || missing().is_empty());
            let missing = missing();
            (!missing.is_empty())
                .then(|| format!("granted, but not on {} (votes {votes})", missing.join(", ")))
        };
        loop {
            let ttl = RECOVERY_TTL.min(config.max_ttl());
            let last = match client.lock_and_check(&resource, ttl, &mut check) {
                Ok(None) => break,
                Ok(Some(found)) => found,
                Err(err) => err.to_string(),
            };
            if Instant::now() > deadline {
                failures.push(format!(
                    "client {index} ({}): no lock on every node within {limit:?} after the \
                     faults healed (last: {last})",
                    config.clients[*index].name()
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
