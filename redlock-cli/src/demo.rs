//! `redlock demo`: five local redis-servers, eight workers incrementing one counter under one
//! lock, and nodes killed and restarted empty while they run. It shows the lock holding (the
//! final counter is exact, no two holders ever overlap), a restarted-empty node refused a vote,
//! and the latency of each acquisition. It starts its own servers and stops them; it never
//! touches the nodes of --node / REDLOCK_NODES.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Args;
use redlock_blocking::{Redlock, RetryPolicy};
use redlock_local::Servers;
use redlock_redis::NodeAddr;

use crate::cli::Global;
use crate::histogram::Histogram;
use crate::probe::{Eligibility, Probe};
use crate::{Failure, LOST, UNAVAILABLE};

/// `redlock demo` options.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Workers competing for the lock.
    #[arg(long, default_value = "8", value_parser = clap::value_parser!(u16).range(2..=64))]
    workers: u16,
    /// Never colour the output (also when NO_COLOR is set or stdout is not a terminal).
    #[arg(long)]
    no_color: bool,
}

const NODES: usize = 5;
/// The demo's longest TTL: a node restarted empty refuses to vote this long.
const MAX_TTL: Duration = Duration::from_secs(4);
/// Each critical section's TTL.
const TTL: Duration = Duration::from_secs(2);
/// How long a worker holds the lock: read the counter, think, write it back.
const THINK: Duration = Duration::from_millis(2);

/// What the workers share: the counter (read, then written back after a pause, so that two
/// holders at once would lose an update) and who is inside.
#[derive(Default)]
struct Shared {
    counter: AtomicU64,
    inside: AtomicUsize,
    holder: AtomicUsize,
    overlaps: AtomicUsize,
    stop: AtomicBool,
    latency: Mutex<Histogram>,
    /// Acquisitions so far (to see them stall while no quorum can vote).
    acquisitions: AtomicU64,
    /// Each node as the live view draws it.
    nodes: Mutex<[NodeState; NODES]>,
}

/// A node in the live view.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum NodeState {
    #[default]
    Up,
    Down,
    /// Restarted empty: refuses to vote (restart-aware voting).
    Refusing,
}

/// Terminal styling: bold and colours, or plain text.
#[derive(Clone, Copy)]
struct Paint {
    colour: bool,
    live: bool,
}

impl Paint {
    fn wrap(self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
    fn green(self, text: &str) -> String {
        self.wrap("32", text)
    }
    fn red(self, text: &str) -> String {
        self.wrap("31", text)
    }
    fn yellow(self, text: &str) -> String {
        self.wrap("33", text)
    }
    fn bold(self, text: &str) -> String {
        self.wrap("1", text)
    }
}

pub(crate) fn demo(global: &Global, args: &DemoArgs) -> Result<ExitCode, Failure> {
    let terminal = std::io::stdout().is_terminal();
    let paint = Paint {
        colour: terminal && !args.no_color && std::env::var_os("NO_COLOR").is_none(),
        live: terminal,
    };
    if !global.nodes.is_empty() {
        eprintln!("redlock: demo runs on its own local nodes; --node / REDLOCK_NODES are not used");
    }
    let mut servers = Servers::try_start_with(NODES, &redlock_local::ServerOptions::new())
        .map_err(|err| {
            (
                UNAVAILABLE,
                format!("cannot start local redis-servers: {err}"),
            )
        })?;
    let urls = servers.urls();
    let addrs =
        NodeAddr::parse_all(&urls).map_err(|err| (UNAVAILABLE, format!("local nodes: {err}")))?;
    say(
        paint,
        &format!(
            "{} 5 redis-servers on {} (quorum 3); {} workers increment one counter under the lock \
             `demo:counter`, each read → {THINK:?} pause → write.",
            paint.bold("Started"),
            addrs
                .iter()
                .map(|a| a.label().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            args.workers
        ),
    );
    let shared = Arc::new(Shared::default());
    let mut counts = Vec::new();
    let started = Instant::now();
    std::thread::scope(|scope| -> Result<(), Failure> {
        let mut handles = Vec::new();
        for worker in 1..=usize::from(args.workers) {
            // One client per worker, as if each ran on its own machine.
            let redlock = Redlock::builder(&urls)
                .config(|c| c.max_ttl(MAX_TTL))
                .retry(
                    RetryPolicy::default()
                        .unlimited()
                        .delay(Duration::from_millis(5))
                        .jitter(Duration::from_millis(20)),
                )
                .build()
                .map_err(|err| (UNAVAILABLE, err.to_string()))?;
            let shared = shared.clone();
            handles.push(scope.spawn(move || work(worker, &redlock, &shared)));
        }
        let view = scope.spawn(|| live_view(paint, &shared, started));
        let chaos = chaos(paint, &mut servers, &addrs, &shared);
        shared.stop.store(true, Ordering::SeqCst);
        let _ = view.join();
        for handle in handles {
            counts.push(handle.join().unwrap_or(0));
        }
        chaos
    })?;
    let took = started.elapsed();
    drop(servers);
    finish(paint, &shared, &counts, took)
}

fn say(paint: Paint, line: &str) {
    let mut stdout = std::io::stdout().lock();
    if paint.live {
        // Clear the live line first.
        let _ = write!(stdout, "\r\x1b[2K");
    }
    let _ = writeln!(stdout, "{line}");
}

/// One worker: lock, read, pause, write, release — until told to stop. Returns its increments.
fn work(worker: usize, redlock: &Redlock, shared: &Shared) -> u64 {
    let mut increments = 0;
    while !shared.stop.load(Ordering::SeqCst) {
        let asked = Instant::now();
        let Ok(lock) = redlock.lock("demo:counter", TTL) else {
            continue;
        };
        shared
            .latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(asked.elapsed());
        if shared.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            shared.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        shared.holder.store(worker, Ordering::SeqCst);
        let read = shared.counter.load(Ordering::SeqCst);
        std::thread::sleep(THINK);
        shared.counter.store(read + 1, Ordering::SeqCst);
        increments += 1;
        shared.acquisitions.fetch_add(1, Ordering::SeqCst);
        shared.holder.store(0, Ordering::SeqCst);
        shared.inside.fetch_sub(1, Ordering::SeqCst);
        let _ = lock.release();
    }
    increments
}

/// Redraws one status line ten times a second on a terminal: time, counter, holder, nodes.
fn live_view(paint: Paint, shared: &Shared, started: Instant) {
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if !paint.live {
            continue;
        }
        let nodes: String = shared
            .nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|state| match state {
                NodeState::Up => paint.green("●"),
                NodeState::Down => paint.red("✕"),
                NodeState::Refusing => paint.yellow("◌"),
            })
            .collect::<Vec<_>>()
            .join(" ");
        let holder = match shared.holder.load(Ordering::SeqCst) {
            0 => "—".to_owned(),
            worker => format!("worker {worker}"),
        };
        let mut stdout = std::io::stdout().lock();
        let _ = write!(
            stdout,
            "\r\x1b[2K  {:>5.1}s  counter {:>5}  holder {holder:<9}  nodes {nodes}",
            started.elapsed().as_secs_f64(),
            shared.counter.load(Ordering::SeqCst),
        );
        let _ = stdout.flush();
    }
}

fn set_node(shared: &Shared, index: usize, state: NodeState) {
    shared.nodes.lock().unwrap_or_else(PoisonError::into_inner)[index] = state;
}

/// The timeline: kill two nodes, restart one empty and kill a third so that only the
/// restarted node could make a quorum — it refuses — then let it vote again and restart the
/// others. Nodes are numbered 1–5 as people count.
fn chaos(
    paint: Paint,
    servers: &mut Servers,
    addrs: &[NodeAddr],
    shared: &Shared,
) -> Result<(), Failure> {
    let pause = |seconds: u64| std::thread::sleep(Duration::from_secs(seconds));
    let kill = |servers: &mut Servers, index: usize, why: &str| {
        servers.kill(index);
        set_node(shared, index, NodeState::Down);
        say(
            paint,
            &format!("{} node {}: {why}", paint.red("killed"), index + 1),
        );
    };
    pause(3);
    kill(servers, 1, "4 of 5 up, locks go on");
    pause(3);
    kill(servers, 2, "3 of 5 up, still a quorum");
    pause(3);
    servers.restart_empty(1);
    set_node(shared, 1, NodeState::Refusing);
    let refusing_since = Instant::now();
    // Its first acquire attempt starts its wait; see it refuse before going on.
    wait_for(
        addrs,
        1,
        |e| matches!(e, Eligibility::Ineligible { .. }),
        || (),
    )?;
    say(
        paint,
        &format!(
            "{} node 2 empty: it lost the lock key it may have granted, so it {} for {MAX_TTL:?} \
             (--max-ttl) instead of voting at once",
            paint.yellow("restarted"),
            paint.bold("refuses to vote")
        ),
    );
    kill(
        servers,
        3,
        "nodes 1 and 5 are no quorum without node 2, so every worker waits",
    );
    let stall = wait_stalled(addrs, shared)?;
    set_node(shared, 1, NodeState::Up);
    say(
        paint,
        &format!(
            "{} node 2 votes again {:.1}s after its restart; no lock was granted for {:.1}s \
             meanwhile: the workers waited rather than risk two holders",
            paint.green("eligible:"),
            refusing_since.elapsed().as_secs_f64(),
            stall.as_secs_f64(),
        ),
    );
    pause(2);
    for index in [2, 3] {
        servers.restart_empty(index);
        set_node(shared, index, NodeState::Refusing);
    }
    say(
        paint,
        &format!(
            "{} nodes 3 and 4 empty: they refuse to vote for {MAX_TTL:?}; 1, 2 and 5 are a quorum",
            paint.yellow("restarted")
        ),
    );
    for index in [2, 3] {
        wait_for(addrs, index, |e| e == Eligibility::Eligible, || ())?;
        set_node(shared, index, NodeState::Up);
    }
    say(
        paint,
        &format!("{} all 5 nodes vote", paint.green("healed:")),
    );
    pause(2);
    Ok(())
}

/// Waits until node 2 (index 1) votes again; returns the longest time in that wait during
/// which no worker acquired the lock.
fn wait_stalled(addrs: &[NodeAddr], shared: &Shared) -> Result<Duration, Failure> {
    let mut longest = Duration::ZERO;
    let mut last = (shared.acquisitions.load(Ordering::SeqCst), Instant::now());
    wait_for(
        addrs,
        1,
        |e| e == Eligibility::Eligible,
        || {
            let count = shared.acquisitions.load(Ordering::SeqCst);
            if count != last.0 {
                last = (count, Instant::now());
            }
            longest = longest.max(last.1.elapsed());
        },
    )?;
    Ok(longest)
}

/// Waits until node `index` is in a state `ready` accepts (read straight from the node),
/// calling `each_poll` before every look.
fn wait_for(
    addrs: &[NodeAddr],
    index: usize,
    ready: impl Fn(Eligibility) -> bool,
    mut each_poll: impl FnMut(),
) -> Result<(), Failure> {
    let deadline = Instant::now() + MAX_TTL * 5;
    while Instant::now() < deadline {
        each_poll();
        let state = Probe::connect(&addrs[index])
            .and_then(|mut probe| Eligibility::read(&mut probe, &addrs[index], MAX_TTL));
        if state.is_ok_and(&ready) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err((
        UNAVAILABLE,
        format!(
            "node {} did not reach the expected voting state in time",
            index + 1
        ),
    ))
}

/// The verdict: the exact counter, no overlaps, the latency histogram.
fn finish(
    paint: Paint,
    shared: &Shared,
    counts: &[u64],
    took: Duration,
) -> Result<ExitCode, Failure> {
    let counter = shared.counter.load(Ordering::SeqCst);
    let total: u64 = counts.iter().sum();
    let overlaps = shared.overlaps.load(Ordering::SeqCst);
    let latency = shared
        .latency
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    say(paint, "");
    say(
        paint,
        &format!(
            "final counter {} = {} increments by {} workers ({}) in {:.1}s: {}",
            paint.bold(&counter.to_string()),
            total,
            counts.len(),
            counts
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" + "),
            took.as_secs_f64(),
            if counter == total {
                paint.green("no update lost")
            } else {
                paint.red("UPDATES LOST")
            }
        ),
    );
    say(
        paint,
        &format!(
            "two holders at once: {}",
            if overlaps == 0 {
                paint.green("never")
            } else {
                paint.red(&format!("{overlaps} time(s)"))
            }
        ),
    );
    say(
        paint,
        &format!(
            "time to acquire (p50 {}, p99 {}, {} acquisitions; the slow ones waited out a node \
             outage):",
            crate::histogram::micros(latency.quantile(0.5)),
            crate::histogram::micros(latency.quantile(0.99)),
            latency.len()
        ),
    );
    let _ = write!(std::io::stdout().lock(), "{}", latency.render(true));
    say(paint, "stopped the 5 redis-servers.");
    if counter != total || overlaps > 0 {
        return Err((LOST, "the lock failed to exclude: see above".to_owned()));
    }
    Ok(ExitCode::SUCCESS)
}
