//! A deterministic simulator for Redlock: simulated Redis nodes, a faulty network, node crashes,
//! client pauses and drifting clocks, with clients driving the **real** `redlock-core`
//! [`Multiplexer`](redlock_core::Multiplexer) — the engine inside every adapter's driver (the
//! async and the blocking one, both in `redlock-redis`; the simulator drives the multiplexer
//! directly, without the drivers' bookkeeping of waiting callers): every lock's
//! [`Lifecycle`](redlock_core::Lifecycle) with retries, auto-extension and release, one FIFO per
//! node, one write per node — over one connection per node whose batches go through the core's
//! [`NodeBatch`](redlock_core::NodeBatch) (restart-aware voting proven once per connection), and
//! a checker for mutual exclusion.
//!
//! # What is checked
//! At every instant of *true* time, at most one client is inside the validity it was given for
//! a resource. Every critical section is recorded as a true-time interval, from the moment the
//! client got its lease to the moment it stopped using it (at the latest `valid_until`, read on
//! the client's own clock and mapped to true time); any two intervals of different leases that
//! share a resource and overlap are a [`Violation`].
//!
//! # The model (what the simulator assumes; Redlock's safety argument needs each point)
//! 1. **Clocks** run at a constant rate with a constant offset; they never jump. The rate of a
//!    node relative to a client stays within what the drift factor covers:
//!    `(1 + node rate) / (1 + client rate) ≤ ttl / (ttl − drift)`.
//! 2. **Restarts**: a node that crashes loses every key (no persistence) and stays down longer
//!    than the longest TTL as its clock measures it (the Redis page's *delayed restart*), unless
//!    a scenario says otherwise.
//! 3. **Clients** stop using a lock when its validity ends, and check it again after a pause:
//!    a correct client checks `valid_until` before every use of the lock. A paused client does
//!    nothing; the world (nodes, network, other clients) goes on.
//! 4. **Nodes** run `SET NX PX` and the engine's scripts atomically, with the semantics of the
//!    script constants in `redlock-core` (the extend script's, read by
//!    [`ExtendSemantics::of_engine`]); keys expire by the node's own clock.
//! 5. The **network** may delay (unboundedly, relative to the engine's timeouts), lose and
//!    duplicate any message, and cut any client off from any set of nodes, in both directions.
//!    Messages on different client–node links overtake each other freely; on one link they keep
//!    their order ([`NetConfig::fifo`]: one connection per node, as the adapters keep). The
//!    engine needs that order today: without it, the release of a lost acquire round can land
//!    after the next round's `SET` (same token) and delete it — see
//!    [`Scenario::unordered_links`]. A client's connection answers every batch exactly once:
//!    with the node's replies, or with a timeout error per request after
//!    [`Scenario::io_timeout`] (the late reply is then skipped), as the adapters' connections
//!    do.
//!
//! [`Scenario::assumptions`] lists the points a scenario breaks. Scenarios inside the model must
//! run clean; *negative controls* (each breaking one point) must be caught, proving the checker
//! can fail.
//!
//! # Determinism
//! Virtual time only: the run jumps from one event to the next in a `BTreeMap` keyed by
//! `(time, sequence)`. All randomness (schedules, network, the engine's tokens and retry jitter)
//! comes from ChaCha8 streams forked from the seed, and no hash map is ever iterated, so a seed
//! replays bit-for-bit ([`Report::fingerprint`]). One `Instant::now()` per run anchors the
//! `Instant`s handed to the engine; nothing depends on its value.
//!
//! # Running
//! `cargo test -p redlock-tests --test simulation -- --nocapture` runs the CI seeds and prints
//! schedules per second and totals. `SIM_SEEDS=100000` raises the seeds per scenario (soak);
//! `SIM_SEED=123` replays one seed with its event trace. A failure prints its seed, the replay
//! command and the events that explain it.
//!
//! ```
//! use redlock_tests::sim::{self, Scenario};
//!
//! let report = sim::run(&Scenario::baseline(), 7);
//! assert!(report.violation.is_none());
//! assert!(report.stats.critical_sections > 0);
//! assert_eq!(sim::run(&Scenario::baseline(), 7).fingerprint, report.fingerprint);
//! ```

mod checker;
mod client;
mod clock;
mod connections;
mod network;
mod node;
mod runner;
mod scenario;
mod stats;
mod trace;
mod world;

pub use checker::{Claim, Violation, ViolationKind};
pub use clock::Nanos;
pub use network::NetConfig;
pub use node::{ExtendSemantics, FenceFault};
pub use runner::{
    Found, SIM_SEED, SIM_SEEDS, SIM_TRACE_LINES, Summary, explore, hunt, run, run_traced,
};
pub use scenario::{
    ClientKind, ClockConfig, CrashConfig, HoldConfig, MemoryLoss, PartitionConfig, PauseConfig,
    Scenario, Tracked,
};
pub use stats::Stats;
pub use world::Report;
