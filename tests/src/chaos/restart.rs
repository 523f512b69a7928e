//! The restart-empty scenario of the Redis distributed-locks page, with real processes.
//!
//! Five nodes A–E. Client 1 reaches only A, B, C (its proxies to D, E are partitioned) and takes
//! the lock there. Then C dies and comes back *empty*. Client 2 reaches only C, D, E (its
//! proxies to A, B are partitioned) and asks for the same lock.
//!
//! - **Immediate restart, restart-aware voting off** (outside the model): C grants client 2,
//!   and so do D and E — a quorum, while client 1 is still inside its validity. The recorder
//!   must report the double holding: a negative control proving that the checker can fail on
//!   real servers.
//! - **Immediate restart (or `FLUSHALL` on C), restart-aware voting on**: C lost its epoch key
//!   with its memory, so it refuses to vote until the longest TTL has passed on its clock;
//!   client 2 is refused until then — after client 1's validity — and wins without overlap.
//! - **Restart delayed past the TTL** (the page's operator fix): while C is down client 2
//!   reaches only two nodes and cannot win; C comes back after client 1's keys and validity
//!   have run out, and client 2 then wins without overlapping client 1.
//!
//! The clients' longest TTL in use is the scenario's TTL.

use std::collections::BTreeMap;
use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use redlock_core::{RetryPolicy, Vote};
use redlock_tokio::{Lock, Redlock};
use tokio::runtime::Runtime;

use super::links::Links;
use super::recorder::{Overlap, Recorder, Window};
use super::workload::error_kind;
use crate::Servers;
use crate::conformance::scenarios::eventually;

/// The key prefix of the scenario's locks.
const PREFIX: &str = "chaos:";
/// The locked resource.
const RESOURCE: &str = "restart";
/// Index of node C, the one that restarts.
const C: usize = 2;

/// How node C comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Killed and started again, empty, at once.
    Immediate,
    /// Killed, and started again (empty) only once the TTL has passed since it died.
    DelayedPastTtl,
    /// Not restarted: `FLUSHALL` at once (every key lost, the process stays up).
    FlushAll,
}

/// What the scenario saw.
#[derive(Debug, Clone)]
pub struct RestartOutcome {
    /// How C came back.
    pub restart: Restart,
    /// Whether the clients used restart-aware voting.
    pub restart_aware: bool,
    /// Client 1's window.
    pub holder: Window,
    /// Nodes holding client 1's token right after it got the lock.
    pub holder_nodes: usize,
    /// Client 2's window, if it got the lock.
    pub second: Option<Window>,
    /// Nodes holding client 2's token right after it got the lock.
    pub second_nodes: usize,
    /// Client 1's token still on this many nodes when client 2 got the lock.
    pub holder_nodes_then: usize,
    /// Client 2's failed attempts before it won (while C was down, or refusing to vote), by
    /// error kind.
    pub refused_while_down: BTreeMap<&'static str, u32>,
    /// Of those, the attempts in which C refused to vote because it lost its memory.
    pub ineligible_refusals: u32,
    /// Overlapping windows found by the recorder.
    pub overlaps: Vec<Overlap>,
    /// Both windows, then the overlaps, described with times since the scenario started.
    pub timeline: Vec<String>,
}

impl RestartOutcome {
    /// Client 2's failed attempts while C was down.
    pub fn refusals(&self) -> u32 {
        self.refused_while_down.values().sum()
    }
}

impl fmt::Display for RestartOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:?} (restart-aware voting {}): client 1 on {} nodes (still on {} when client 2 \
             won), client 2 on {} nodes; client 2 refused before it won: {:?} ({} by C's \
             eligibility); overlaps: {}",
            self.restart,
            if self.restart_aware { "on" } else { "off" },
            self.holder_nodes,
            self.holder_nodes_then,
            self.second_nodes,
            self.refused_while_down,
            self.ineligible_refusals,
            self.overlaps.len()
        )?;
        for line in &self.timeline {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// Runs the scenario with C coming back as `restart` says, the lock TTL `ttl`, and
/// restart-aware voting on or off.
///
/// # Panics
/// If the setup does not go as planned (client 1 not granted by exactly A, B, C; client 2 never
/// getting the lock once C is back).
pub fn restart_scenario(restart: Restart, ttl: Duration, restart_aware: bool) -> RestartOutcome {
    let mut nodes = Servers::start(5);
    let links = Links::start(&nodes, 2);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let holder_client = client(&links, 0, ttl, restart_aware);
    let second_client = client(&links, 1, ttl, restart_aware);
    // Connect both clients to every node first, so that no round below pays for connecting.
    for redlock in [&holder_client, &second_client] {
        let (warm, _) = take(&runtime, redlock, "warm-up", ttl, "warm-up");
        runtime.block_on(warm.release());
    }
    for node in [3, 4] {
        links.get(0, node).drop_all();
    }
    for node in [0, 1] {
        links.get(1, node).drop_all();
    }
    let recorder = Recorder::new();
    let key = format!("{PREFIX}{RESOURCE}");

    let (holder, _) = take(
        &runtime,
        &holder_client,
        RESOURCE,
        ttl,
        "client 1 gets A, B, C",
    );
    let holder_acquired = Instant::now();
    let granted: Vec<bool> = holder.votes().iter().map(|v| *v == Vote::Granted).collect();
    assert_eq!(
        granted,
        [true, true, true, false, false],
        "client 1 must hold exactly A, B, C"
    );
    let holder_token = holder.token().as_bytes().to_vec();
    eventually(Duration::from_secs(5), || {
        nodes.count_holding(&key, &holder_token) == 3
    });
    let holder_nodes = nodes.count_holding(&key, &holder_token);

    let mut refused_while_down = BTreeMap::new();
    let mut early = None;
    match restart {
        Restart::Immediate => nodes.restart_empty(C),
        Restart::FlushAll => {
            let _: () = redis::cmd("FLUSHALL")
                .query(&mut nodes.servers()[C].client())
                .expect("FLUSHALL on C");
        }
        Restart::DelayedPastTtl => {
            nodes.kill(C);
            let restart_at = Instant::now() + ttl + Duration::from_millis(500);
            while Instant::now() < restart_at {
                match runtime.block_on(second_client.try_lock(RESOURCE, ttl)) {
                    Ok(lock) => {
                        // Would be a violation; keep it to record its window.
                        early = Some((lock, Instant::now()));
                        break;
                    }
                    Err(err) => *refused_while_down.entry(error_kind(&err)).or_default() += 1,
                }
                thread::sleep(Duration::from_millis(100));
            }
            thread::sleep(restart_at.saturating_duration_since(Instant::now()));
            nodes.restart_empty(C);
        }
    }

    let mut ineligible_refusals = 0;
    let (second, second_acquired) = early.unwrap_or_else(|| {
        let (lock, refusals) = take(
            &runtime,
            &second_client,
            RESOURCE,
            ttl,
            "client 2 gets C, D, E",
        );
        for err in &refusals {
            *refused_while_down.entry(error_kind(err)).or_default() += 1;
            let c_ineligible = err
                .failure()
                .is_some_and(|f| matches!(f.nodes[C].result, Vote::Ineligible { .. }));
            ineligible_refusals += u32::from(c_ineligible);
        }
        (lock, Instant::now())
    });
    let second_token = second.token().as_bytes().to_vec();
    let holder_nodes_then = nodes.count_holding(&key, &holder_token);
    eventually(Duration::from_secs(5), || {
        nodes.count_holding(&key, &second_token) == 3
    });
    let second_nodes = nodes.count_holding(&key, &second_token);

    // Client 1 stops using its lock only now (it has no idea anything went wrong).
    let holder_window = end_window(&runtime, 0, holder_acquired, holder);
    let second_window = end_window(&runtime, 1, second_acquired, second);
    recorder.record(holder_window);
    recorder.record(second_window);
    let overlaps = recorder.overlaps();
    let timeline = [&holder_window, &second_window]
        .into_iter()
        .map(|w| recorder.describe_window(w))
        .chain(
            overlaps
                .iter()
                .map(|o| format!("overlap: {}", recorder.describe(o))),
        )
        .collect();
    RestartOutcome {
        restart,
        restart_aware,
        holder: holder_window,
        holder_nodes,
        second: Some(second_window),
        second_nodes,
        holder_nodes_then,
        refused_while_down,
        ineligible_refusals,
        overlaps,
        timeline,
    }
}

fn client(links: &Links, index: usize, ttl: Duration, restart_aware: bool) -> Redlock {
    Redlock::builder(links.urls(index))
        .config(|c| {
            c.key_prefix(PREFIX)
                .retry(RetryPolicy::once())
                .restart_aware(restart_aware)
                .max_ttl(ttl)
        })
        .io_timeout(Duration::from_secs(1))
        .build()
        .unwrap_or_else(|err| panic!("client {}: {err}", index + 1))
}

/// `try_lock` until it succeeds, with the errors of the attempts that failed: a round may fail
/// on a loaded machine (a reply later than the per-node timeout), while a connection to a
/// restarted node is made again, or while a node refuses to vote (up to the TTL).
fn take(
    runtime: &Runtime,
    redlock: &Redlock,
    resource: &str,
    ttl: Duration,
    what: &str,
) -> (Lock, Vec<redlock_redis::Error>) {
    let deadline = Instant::now() + ttl + Duration::from_secs(10);
    let mut refusals = Vec::new();
    loop {
        match runtime.block_on(redlock.try_lock(resource, ttl)) {
            Ok(lock) => return (lock, refusals),
            Err(err) if Instant::now() < deadline => {
                refusals.push(err);
                thread::sleep(Duration::from_millis(50));
            }
            Err(err) => panic!("{what}: {err}"),
        }
    }
}

/// Ends a section: its window closes at its validity or now, whichever is first; then release.
fn end_window(runtime: &Runtime, client: usize, acquired_at: Instant, lock: Lock) -> Window {
    let window = Window {
        client,
        resource: 0,
        how: "try_lock",
        acquired_at,
        valid_until: lock.valid_until(),
        ended_at: Instant::now(),
    };
    runtime.block_on(lock.release());
    window
}
