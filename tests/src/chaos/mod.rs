//! Real-process chaos: `redis-server` processes, a fault proxy on every client–node link, many
//! clients taking locks, extending and releasing them, while a seeded schedule kills, stops and
//! restarts nodes and breaks links — and checks that mutual exclusion held.
//!
//! # The run
//! - 5 nodes ([`Servers`](crate::Servers)) and a 6th, fault-free server holding one counter per
//!   resource; 8 clients mixing the adapters ([`AdapterKind::for_client`]: 3 `redlock-tokio`
//!   tasks on one runtime, 3 `redlock-async-std` tasks, 2 `redlock-blocking` threads), each
//!   reaching each node through its own [`FaultProxy`](crate::FaultProxy) ([`Links`]).
//! - The clients run critical sections (see the workload module; the code is the same for every
//!   adapter, see the adapter module): `lock`, `try_lock`, a `lock` cancelled half-way (async
//!   adapters only), and `with_lock`; plain locks are sometimes extended and sometimes dropped
//!   unreleased. Inside a section: `GET` the counter, work, and `SET` it to the value
//!   read plus one — only if the lock is still valid with a margin to spare.
//! - A fault thread ([`FaultKind`]) meanwhile injects `kill -9` (each followed by a delayed,
//!   empty restart), SIGSTOP/SIGCONT, latency, stalls, partitions and reply resets.
//!
//! # The model
//! Faults stay inside what Redlock's safety argument assumes: a killed node comes back only
//! once the longest TTL in use has passed since it died (it has no persistence); all clocks are
//! the one machine's clock; every other fault (stopped node, slow, stalled, cut or reset link)
//! is allowed at any length, in any combination. Liveness is not part of the model, but the
//! schedule keeps at most one node down and one stopped so that locks are taken often enough for
//! the checks to mean something.
//!
//! # What is checked ([`ChaosReport::violations`])
//! 1. The non-atomic counter of each resource equals the number of sections that wrote it.
//! 2. No two recorded windows of one resource overlap ([`Recorder`]): a window is
//!    `[lock returned, min(valid_until, release started))` on the test process's monotonic clock.
//! 3. Every call returns within its policy bound ([`CallBounds`]; a generous multiple).
//! 4. Once every TTL has passed after the run, no key with the run's prefix is left on a node.
//! 5. Once the faults are healed, every client locks on *all* nodes again within 5 s (no
//!    connection is left broken); once the clients are dropped, each node's `connected_clients`
//!    and the proxies' open connections are back to their baseline, and so are the alive tasks
//!    of the tokio clients' runtime (`RuntimeMetrics::num_alive_tasks`, stable in tokio; async-std
//!    has no such count, and blocking clients have no tasks).
//!
//! Every check covers every client, whatever its adapter; the report also gives each adapter's
//! own [`Tally`]. Every run also has to be busy (checked by the test): sections written by every
//! adapter, every entry used, extensions and cancellations seen, every fault kind injected.
//!
//! [`cluster_run`] is the same idea on a cluster node lending 3 votes: planned failovers,
//! slot migrations with held keys and a master's `kill -9`, under `redlock-blocking` and
//! `redlock-tokio` clients.
//!
//! The restart-empty scenario of the Redis page is [`restart_scenario`]: with an immediate
//! restart the recorder must catch the double holding (negative control); delayed past the TTL
//! it must not.
//!
//! # Running
//! `cargo test -p redlock-tests --test chaos -- --nocapture` prints the seed, the faults per
//! kind and the figures. `CHAOS_SECONDS=600` makes a soak run; `CHAOS_SEED=<seed>` reruns a
//! schedule. Real processes and the OS scheduler are not deterministic: a seed replays the
//! fault schedule and the clients' choices, not the exact interleavings, so a failure reproduces
//! "in spirit" — the report says which invariant broke, with the windows involved.

mod adapter;
mod async_client;
mod blocking_client;
mod bounds;
mod cluster;
mod config;
mod counter;
mod faults;
mod links;
mod probe;
mod recorder;
mod report;
mod restart;
mod run;
mod section;
mod workload;

pub use adapter::AdapterKind;
pub use bounds::{Call, CallBounds, CallStat, CallTimes, SLACK, SLACK_FACTOR};
pub use cluster::{ClusterChaosReport, ClusterFault, cluster_run};
pub use config::{ChaosConfig, DEFAULT_SECONDS, SECONDS_ENV, SEED_ENV};
pub use faults::{FaultConfig, FaultCounts, FaultKind};
pub use links::Links;
pub use recorder::{Overlap, Recorder, Window};
pub use report::{ChaosReport, ConnectionCheck, CounterCheck};
pub use restart::{Restart, RestartOutcome, restart_scenario};
pub use run::run;
pub use workload::Tally;
