//! What a simulation runs: the nodes, the clients, the faults, and the ranges every seed draws
//! its concrete schedule from.
//!
//! A [`Scenario`] is a family of schedules; a seed picks one. The presets come in two kinds:
//! *inside the model* (the test expects no violation over many seeds) and *outside the model*
//! (negative controls: the test expects the checker to find a violation). [`Scenario::assumptions`]
//! says which model assumptions a scenario breaks, so a test can state which kind it runs.

use std::time::Duration;

use redlock_core::{Dialect, RetryPolicy};

use super::clock::{Clock, Nanos, nanos};
use super::network::{NetConfig, Partition};
use super::node::{ExtendSemantics, FenceFault};
use crate::rng::TestRng;

/// What a Valkey 9.1 node with its Lua module runs.
const VALKEY_9_1: Dialect = Dialect {
    scripts: true,
    delete_if_eq: redlock_core::DeleteIfEq::DelIfEq,
    set_if_eq: true,
    msetex: true,
    swapdb: true,
    ..Dialect::SCRIPTS
};

/// Whether clients' connections track the nodes' memory (the adapters' per-connection restart
/// check, [`MemoryWatch`](redlock_core::MemoryWatch)), or check it with the script on every
/// acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracked {
    /// The checked script on every acquisition.
    Off,
    /// Proven once per connection, vouched for after, voided by invalidation pushes.
    Heard,
    /// The same with the pushes unheard (negative control: a flushed node keeps voting).
    Deaf,
    /// Tracking as before `OPTIN` (`WatchFault::NoLoop`): a connection never hears a loss its
    /// own command set off (negative control).
    NoLoop,
    /// A proof counts for as long as its connection lives (`WatchFault::Ageless`, negative
    /// control): a node demoted and promoted again keeps vouching.
    Ageless,
    /// Vouched acquisitions go out unsealed, a plain `SET` (`WatchFault::Unsealed`, negative
    /// control): a database swapped in, or a lock key evicted on its own, goes unseen.
    Unsealed,
}

/// How a node loses its memory in the scenario's crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryLoss {
    /// The process dies and restarts empty: every connection to it ends.
    Crash,
    /// `FLUSHALL` (or the epoch evicted with the keys): the node stays up and its connections
    /// stay open; only invalidation pushes tell a tracked connection.
    Flush,
    /// The node, at its memory limit, evicts every key (the epoch included) right before it
    /// runs the next acquisition that reaches it — set off by that client's own command. The
    /// connections stay open.
    OwnEviction,
    /// A failover and a failback, connections kept: each "crash" hands the node's address to
    /// its replica (a graceful `FAILOVER`: the replica has every key, and a new identity), and
    /// after the downtime the interim master dies and the old master is promoted again with
    /// what it had at the failover (the interim master's writes never reached it) and a new
    /// identity. Nothing is pushed. At each switch some clients reconnect to the new master;
    /// the others keep their connection to the demoted server, which answers writes with
    /// `READONLY` until it is promoted again.
    Flip,
    /// The process dies and restarts from a snapshot taken before any of its lock keys was set
    /// (or a replica that missed them is promoted behind its address): every lock key is lost,
    /// the epoch comes back as it was, and the node has a new identity. Every connection ends.
    Snapshot,
    /// `SWAPDB` brings in another database of the same server: an old epoch of its own, stamped
    /// there, and none of the lock keys. The node stays up, its connections stay open, and
    /// nothing is pushed.
    Swap,
    /// Under `volatile-lru`, every lock key is evicted on its own; the epoch (no TTL) stays, the
    /// node's eviction count moves. Nothing is pushed, the connections stay open.
    LoneEviction,
}

/// How a client behaves while it holds a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// Checks its lease's validity before every use of the lock, pauses included: after a pause
    /// it notices when the validity has passed and stops.
    Correct,
    /// Checks validity until it is paused; after a pause it finishes its work without checking
    /// again (the classic "GC pause" bug). Outside the model.
    TrustsLeaseAfterPause,
}

/// How long a client holds a lock, and whether it extends it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HoldConfig {
    /// Share of critical sections that auto-extend (run the engine's [`Renewal`] policy);
    /// the others hold for a fixed amount of work.
    ///
    /// [`Renewal`]: redlock_core::Renewal
    pub auto_extend: f64,
    /// Fixed holds: work as a share of the validity left at the grant. Above 1, a correct
    /// client stops at the end of validity instead.
    pub fixed_work: (f64, f64),
    /// Auto-extended holds: work as a multiple of the TTL.
    pub extended_work: (f64, f64),
    /// Fixed holds extend once with `Lock::extend(ttl × factor)` after this share of their work,
    /// if set: `(share, factor)`.
    pub manual_extend: Option<(f64, f64)>,
}

/// Node crashes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrashConfig {
    /// Each node crashes up to this many times per run.
    pub per_node: u32,
    /// How long a crashed node stays down before it restarts empty. Inside the model only when
    /// the lower bound exceeds every key's TTL on the node's clock (the Redis page's delayed
    /// restart).
    pub down_for: (Duration, Duration),
}

/// Client pauses (the process stops; messages and timers wait; the world goes on).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PauseConfig {
    /// Each client pauses up to this many times per run.
    pub per_client: u32,
    /// How long a pause lasts.
    pub length: (Duration, Duration),
}

/// Partitions between a client and a random set of nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionConfig {
    /// Each client is cut off up to this many times per run.
    pub per_client: u32,
    /// How long a partition lasts.
    pub length: (Duration, Duration),
}

/// Clock offsets and rate errors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockConfig {
    /// Each node's rate error is uniform in this range, in parts per million.
    pub node_rate_ppm: (i32, i32),
    /// Each client's rate error is uniform in this range, in parts per million.
    pub client_rate_ppm: (i32, i32),
    /// Each clock's offset is uniform in `[0, max_offset]` (offsets never matter to Redlock,
    /// which only measures durations; they are here to prove it).
    pub max_offset: Duration,
}

/// A family of simulated schedules.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Names the scenario in reports (and the test that runs it).
    pub name: &'static str,
    /// Redis masters.
    pub nodes: usize,
    /// Clients competing for the resources.
    pub clients: usize,
    /// Resources `r0`, `r1`, ... the clients lock.
    pub resources: usize,
    /// Share of locks that take two resources at once (the multi-key scripts).
    pub multi: f64,
    /// Each lock's TTL is uniform in this range (whole milliseconds).
    pub ttl: (Duration, Duration),
    /// The engine's drift factor.
    pub drift_factor: f64,
    /// The engine's retry policy for acquisitions.
    pub retry: RetryPolicy,
    /// Pause between a client's critical sections (after a release or a failed acquisition).
    pub think: (Duration, Duration),
    /// How clients hold locks.
    pub hold: HoldConfig,
    /// How clients check their leases.
    pub client_kind: ClientKind,
    /// How messages travel.
    pub net: NetConfig,
    /// Client-to-node partitions.
    pub partitions: PartitionConfig,
    /// Node crashes and restarts.
    pub crashes: CrashConfig,
    /// Client pauses.
    pub pauses: PauseConfig,
    /// Clock offsets and rates.
    pub clocks: ClockConfig,
    /// How the nodes run the extend script.
    pub extend_semantics: ExtendSemantics,
    /// What the nodes can run: each command reaches them in its form for this dialect
    /// ([`Command::redis_form_on`](redlock_core::Command::redis_form_on)).
    pub dialect: Dialect,
    /// Whether connections track the nodes' memory.
    pub tracked: Tracked,
    /// How a crash loses a node's memory.
    pub loss: MemoryLoss,
    /// Whether the nodes' checked scripts compare their identity with the one their epoch was
    /// stamped with (`false`: as before the identity, a negative control).
    pub identity_check: bool,
    /// Whether the nodes start with an epoch a previous release wrote, without an identity
    /// (`true`: it adopts the identity the node has when first proved, a negative control of
    /// failovers before that), rather than trusted and stamped by this release.
    pub legacy_epochs: bool,
    /// Whether the engine refuses votes of nodes that lost their memory (restart-aware voting),
    /// with the scenario's [`max_ttl`](Scenario::max_ttl) as the longest TTL in use.
    pub restart_aware: bool,
    /// Whether every lock is fenced: each holder then writes its fence to a fenced store at the
    /// end of its section, and the checker also checks the fences (see the checker module).
    pub fenced: bool,
    /// A fault in the nodes' fence counters (negative controls of the fence checker).
    pub fence_fault: Option<FenceFault>,
    /// Clients start no new acquisition after this much true time; the run ends when all are done.
    pub run_for: Duration,
    /// The chance, at each step of a client that is acquiring, that a release notice arrives
    /// on every channel its locks listen on (`Multiplexer::handle_notice`): notices at any
    /// moment, true or not, must never matter to safety, only to how soon a round starts.
    pub wake_noise: f64,
}

const NO_PARTITIONS: PartitionConfig = PartitionConfig {
    per_client: 0,
    length: (Duration::ZERO, Duration::ZERO),
};
const NO_CRASHES: CrashConfig = CrashConfig {
    per_node: 0,
    down_for: (Duration::ZERO, Duration::ZERO),
};
const NO_PAUSES: PauseConfig = PauseConfig {
    per_client: 0,
    length: (Duration::ZERO, Duration::ZERO),
};
/// Rate errors the default drift factor (0.01) covers with room to spare for short TTLs:
/// ±0.4 % on each side makes a relative error of at most about 0.8 %.
const WITHIN_DRIFT: ClockConfig = ClockConfig {
    node_rate_ppm: (-4_000, 4_000),
    client_rate_ppm: (-4_000, 4_000),
    max_offset: Duration::from_secs(3600),
};

impl Scenario {
    /// Five nodes, four clients on two resources, a clean network, perfect clocks, no faults.
    pub fn baseline() -> Self {
        Self {
            name: "baseline",
            nodes: 5,
            clients: 4,
            resources: 2,
            multi: 0.0,
            ttl: (Duration::from_millis(100), Duration::from_millis(400)),
            drift_factor: 0.01,
            retry: RetryPolicy::default()
                .attempts(4)
                .delay(Duration::from_millis(10))
                .jitter(Duration::from_millis(40)),
            think: (Duration::ZERO, Duration::from_millis(60)),
            hold: HoldConfig {
                auto_extend: 0.3,
                fixed_work: (0.05, 1.2),
                extended_work: (0.5, 3.0),
                manual_extend: None,
            },
            client_kind: ClientKind::Correct,
            net: NetConfig::clean(),
            partitions: NO_PARTITIONS,
            crashes: NO_CRASHES,
            pauses: NO_PAUSES,
            clocks: ClockConfig {
                node_rate_ppm: (0, 0),
                client_rate_ppm: (0, 0),
                max_offset: Duration::ZERO,
            },
            extend_semantics: ExtendSemantics::of_engine(),
            dialect: Dialect::SCRIPTS,
            tracked: Tracked::Off,
            loss: MemoryLoss::Crash,
            identity_check: true,
            legacy_epochs: false,
            restart_aware: true,
            fenced: false,
            fence_fault: None,
            run_for: Duration::from_secs(3),
            wake_noise: 0.0,
        }
    }

    /// Inside the model: loss, duplication, reordering past deadlines, and partitions.
    pub fn network_faults() -> Self {
        Self {
            name: "network_faults",
            net: NetConfig::lossy(),
            partitions: PartitionConfig {
                per_client: 3,
                length: (Duration::from_millis(20), Duration::from_millis(600)),
            },
            ..Self::baseline()
        }
    }

    /// Inside the model: nodes crash, lose every key, and restart only after the longest TTL
    /// (plus the drift) has passed, on a lossy network.
    pub fn crash_delayed_restart() -> Self {
        let base = Self::baseline();
        Self {
            name: "crash_delayed_restart",
            net: NetConfig::lossy(),
            crashes: CrashConfig {
                per_node: 3,
                down_for: (base.max_ttl().mul_f64(1.05), base.max_ttl().mul_f64(2.5)),
            },
            ..base
        }
    }

    /// Inside the model: correct clients pause (up to three TTLs) while holding, acquiring,
    /// extending and releasing, on a lossy network.
    pub fn client_pauses() -> Self {
        Self {
            name: "client_pauses",
            net: NetConfig::lossy(),
            pauses: PauseConfig {
                per_client: 4,
                length: (Duration::from_millis(5), Duration::from_millis(1200)),
            },
            hold: HoldConfig {
                auto_extend: 0.5,
                ..Self::baseline().hold
            },
            ..Self::baseline()
        }
    }

    /// Inside the model: every clock has its own offset and a rate error within the drift
    /// budget, with the shortest TTLs (where the fixed 2 ms of drift matters most).
    pub fn clock_drift() -> Self {
        Self {
            name: "clock_drift",
            ttl: (Duration::from_millis(50), Duration::from_millis(300)),
            clocks: WITHIN_DRIFT,
            hold: HoldConfig {
                fixed_work: (0.5, 1.5),
                ..Self::baseline().hold
            },
            ..Self::baseline()
        }
    }

    /// Inside the model, at its edge: every lock has a 400 ms TTL (validity 394 ms), node clocks
    /// run 0.7 % fast and client clocks 0.7 % slow — a relative rate error of 1.41 % against the
    /// 1.52 % the drift allows. Holders use their whole validity and contenders retry quickly, so
    /// a validity even half a millisecond too generous shows up as an overlap.
    pub fn clock_drift_edge() -> Self {
        Self {
            name: "clock_drift_edge",
            ttl: (Duration::from_millis(400), Duration::from_millis(400)),
            clocks: ClockConfig {
                node_rate_ppm: (7_000, 7_000),
                client_rate_ppm: (-7_000, -7_000),
                max_offset: Duration::from_secs(3600),
            },
            retry: RetryPolicy::default()
                .attempts(20)
                .delay(Duration::from_millis(1))
                .jitter(Duration::from_millis(4)),
            hold: HoldConfig {
                auto_extend: 0.0,
                fixed_work: (1.5, 2.0),
                ..Self::baseline().hold
            },
            net: NetConfig {
                delay: (Duration::from_micros(10), Duration::from_micros(200)),
                ..NetConfig::clean()
            },
            ..Self::baseline()
        }
    }

    /// Outside the model (negative control), just: as [`Scenario::clock_drift_edge`] with rate
    /// errors of ±1 % (relative 2.02 % against the 1.52 % allowed): keys expire up to 2 ms before
    /// the holder's validity ends.
    pub fn clock_drift_just_over() -> Self {
        Self {
            name: "clock_drift_just_over",
            clocks: ClockConfig {
                node_rate_ppm: (10_000, 10_000),
                client_rate_ppm: (-10_000, -10_000),
                max_offset: Duration::from_secs(3600),
            },
            ..Self::clock_drift_edge()
        }
    }

    /// The network of [`Scenario::network_faults`] without per-link order: a lost round's
    /// release may reach a node after the next round's `SET` (as when an adapter sends them on
    /// different connections, e.g. after dropping one whose request timed out).
    pub fn unordered_links() -> Self {
        Self {
            name: "unordered_links",
            net: NetConfig {
                fifo: false,
                ..NetConfig::lossy()
            },
            ..Self::network_faults()
        }
    }

    /// [`Scenario::unordered_links`] with one round per acquisition (`try_lock` in a loop): every
    /// round has a token of its own, so a late release can only ever delete its own round's
    /// keys.
    pub fn unordered_links_one_round() -> Self {
        Self {
            name: "unordered_links_one_round",
            retry: RetryPolicy::once(),
            think: (Duration::from_millis(5), Duration::from_millis(40)),
            ..Self::unordered_links()
        }
    }

    /// Inside the model: holders call `extend(ttl × 0.3)` once, a tenth into a fixed hold and
    /// hold on (the lease keeps the longer validity it had). Safe only if the extend script never
    /// shortens a TTL.
    pub fn extend_shorter() -> Self {
        Self {
            name: "extend_shorter",
            hold: HoldConfig {
                auto_extend: 0.0,
                fixed_work: (0.8, 1.5),
                extended_work: (0.5, 3.0),
                manual_extend: Some((0.1, 0.3)),
            },
            ..Self::baseline()
        }
    }

    /// Inside the model: locks on one or two of three resources (the multi-key scripts), with
    /// network faults.
    pub fn multi_resource() -> Self {
        Self {
            name: "multi_resource",
            resources: 3,
            clients: 5,
            multi: 0.6,
            net: NetConfig::lossy(),
            ..Self::baseline()
        }
    }

    /// Inside the model: every fault at once, on three nodes.
    pub fn everything() -> Self {
        let base = Self::baseline();
        Self {
            name: "everything",
            nodes: 3,
            multi: 0.3,
            net: NetConfig::lossy(),
            partitions: Self::network_faults().partitions,
            crashes: CrashConfig {
                per_node: 2,
                down_for: (base.max_ttl().mul_f64(1.05), base.max_ttl().mul_f64(2.0)),
            },
            pauses: Self::client_pauses().pauses,
            clocks: WITHIN_DRIFT,
            hold: HoldConfig {
                auto_extend: 0.5,
                ..base.hold
            },
            ..base
        }
    }

    /// Inside the model: [`Scenario::everything`] on nodes that speak Valkey 9.1's native
    /// commands — `MSETEX` for several keys, `DELIFEQ` releases, and `SET … IFEQ … PX`
    /// extensions, which set a TTL exactly wherever the engine says no key can hold a longer one.
    pub fn native_everything() -> Self {
        Self {
            name: "native_everything",
            dialect: VALKEY_9_1,
            ..Self::everything()
        }
    }

    /// Inside the model: [`Scenario::extend_shorter`] on Valkey 9.1 nodes. A shorter extension
    /// in the exact form would cut the keys ([`Scenario::extend_shortens_keys`] shows the
    /// checker catches that): the engine must send it as the script.
    pub fn native_extend_shorter() -> Self {
        Self {
            name: "native_extend_shorter",
            dialect: VALKEY_9_1,
            ..Self::extend_shorter()
        }
    }

    /// Inside the model: [`Scenario::extend_shorter`] on nodes that run no script (Valkey 9.1
    /// without Lua), with tracked connections (the acquisitions' memory proof): a shorter
    /// extension goes as `MULTI; PEXPIRE … GT; GET …; EXEC`, which never shortens a key.
    pub fn no_script_extend_shorter() -> Self {
        Self {
            name: "no_script_extend_shorter",
            dialect: Dialect {
                scripts: false,
                ..VALKEY_9_1
            },
            tracked: Tracked::Heard,
            ..Self::extend_shorter()
        }
    }

    /// Outside the model (negative control): [`Scenario::no_script_extend_shorter`] on nodes
    /// whose `PEXPIRE … GT` sets the TTL outright — a shorter extension cuts the keys.
    pub fn no_script_extend_shortens_keys() -> Self {
        Self {
            name: "no_script_extend_shortens_keys",
            extend_semantics: ExtendSemantics::Pexpire,
            ..Self::no_script_extend_shorter()
        }
    }

    /// Inside the model: [`Scenario::restart_without_delay`] with tracked connections — each
    /// proves a node's memory once and then acquires with a plain `SET NX PX`; a crash ends the
    /// connection, and the next one proves again.
    pub fn tracked_restart_without_delay() -> Self {
        Self {
            name: "tracked_restart_without_delay",
            tracked: Tracked::Heard,
            ..Self::restart_without_delay()
        }
    }

    /// Inside the model: nodes lose their memory without a restart (`FLUSHALL`, an evicted
    /// epoch), right away and often, under tracked connections that stay open: only the
    /// invalidation pushes keep the flushed nodes from voting.
    pub fn tracked_flush_without_delay() -> Self {
        Self {
            name: "tracked_flush_without_delay",
            loss: MemoryLoss::Flush,
            ..Self::tracked_restart_without_delay()
        }
    }

    /// Inside the model: [`Scenario::tracked_flush_without_delay`] on nodes that run no script
    /// (Valkey 9.1 without Lua, or an ACL that denies `@scripting`): a connection proves by
    /// reading the epoch, its `PTTL` and the node's `TIME`, and a missing epoch is claimed in
    /// the same pipeline by the node's own clock ([`ProofRead::Claim`](redlock_core::ProofRead)).
    pub fn tracked_native_flush_without_delay() -> Self {
        Self {
            name: "tracked_native_flush_without_delay",
            dialect: Dialect {
                scripts: false,
                ..VALKEY_9_1
            },
            ..Self::tracked_flush_without_delay()
        }
    }

    /// Outside the model (negative control): [`Scenario::tracked_native_flush_without_delay`]
    /// with the pushes unheard — a flushed node keeps voting.
    pub fn tracked_native_flush_deaf() -> Self {
        Self {
            name: "tracked_native_flush_deaf",
            tracked: Tracked::Deaf,
            ..Self::tracked_native_flush_without_delay()
        }
    }

    /// Inside the model: nodes evict every key right before running an acquisition — set off
    /// by the acquiring client's own command — right away and often, under tracked connections:
    /// the push of an eviction comes before the reply to the command that set it off, so that
    /// reply does not count.
    pub fn tracked_own_eviction() -> Self {
        Self {
            name: "tracked_own_eviction",
            loss: MemoryLoss::OwnEviction,
            ..Self::tracked_flush_without_delay()
        }
    }

    /// Outside the model (negative control): [`Scenario::tracked_own_eviction`] with tracking as
    /// before `OPTIN` (`NOLOOP`): a connection never hears the eviction its own command set off.
    pub fn tracked_own_eviction_noloop() -> Self {
        Self {
            name: "tracked_own_eviction_noloop",
            tracked: Tracked::NoLoop,
            ..Self::tracked_own_eviction()
        }
    }

    /// Inside the model: nodes get another database swapped in (`SWAPDB`), right away and
    /// often, under tracked connections that stay open and hear nothing: each vouched
    /// acquisition is sealed (its `MULTI` reads the proof's marker, which the other database
    /// does not hold).
    pub fn tracked_swapdb_without_delay() -> Self {
        Self {
            name: "tracked_swapdb_without_delay",
            loss: MemoryLoss::Swap,
            ..Self::tracked_flush_without_delay()
        }
    }

    /// Inside the model: [`Scenario::tracked_swapdb_without_delay`] on nodes that run no
    /// script, whose proofs read the database and write the marker in one transaction.
    pub fn tracked_native_swapdb_without_delay() -> Self {
        Self {
            name: "tracked_native_swapdb_without_delay",
            loss: MemoryLoss::Swap,
            ..Self::tracked_native_flush_without_delay()
        }
    }

    /// Outside the model (negative control): [`Scenario::tracked_swapdb_without_delay`] with
    /// vouched acquisitions unsealed — the swapped-in database grants keys others hold.
    pub fn tracked_swapdb_unsealed() -> Self {
        Self {
            name: "tracked_swapdb_unsealed",
            tracked: Tracked::Unsealed,
            ..Self::tracked_swapdb_without_delay()
        }
    }

    /// Inside the model: nodes that evict (`volatile-lru`) lose their lock keys on their own,
    /// right away and often, the epoch kept, under tracked connections that hear nothing: each
    /// vouched acquisition is sealed (its `MULTI` reads the stamp and `INFO stats`, whose
    /// eviction count moved); on nodes that run no script too.
    pub fn tracked_lone_eviction_without_delay() -> Self {
        Self {
            name: "tracked_lone_eviction_without_delay",
            loss: MemoryLoss::LoneEviction,
            ..Self::tracked_native_flush_without_delay()
        }
    }

    /// Outside the model (negative control): [`Scenario::tracked_lone_eviction_without_delay`]
    /// with vouched acquisitions unsealed — the node grants evicted keys again.
    pub fn tracked_lone_eviction_unsealed() -> Self {
        Self {
            name: "tracked_lone_eviction_unsealed",
            tracked: Tracked::Unsealed,
            ..Self::tracked_lone_eviction_without_delay()
        }
    }

    /// Outside the model (negative control): [`Scenario::tracked_flush_without_delay`] with the
    /// pushes unheard — a flushed node keeps voting through a proven connection.
    pub fn tracked_flush_deaf() -> Self {
        Self {
            name: "tracked_flush_deaf",
            tracked: Tracked::Deaf,
            ..Self::tracked_flush_without_delay()
        }
    }

    /// Inside the model: every fault at once, eight clients on one resource, and release notices
    /// at random moments, whether or not anything was released (each reaches every lock that
    /// listens: a lock pausing between rounds).
    pub fn wake_storm() -> Self {
        Self {
            name: "wake_storm",
            clients: 8,
            resources: 1,
            multi: 0.0,
            wake_noise: 0.3,
            // Early rounds use up attempts (and find their lock's previous requests still in
            // flight on slow nodes): allow more, so that locks still get taken.
            retry: Self::baseline().retry.attempts(40),
            ..Self::everything()
        }
    }

    /// Inside the model thanks to restart-aware voting: nodes restart empty right away, inside
    /// holders' validity — the failure of the Redis page — and refuse to vote until the longest
    /// TTL has passed on their clock, so nobody gets a second grant from them.
    pub fn restart_without_delay() -> Self {
        Self {
            name: "restart_without_delay",
            nodes: 3,
            net: NetConfig::lossy(),
            crashes: CrashConfig {
                per_node: 6,
                down_for: (Duration::from_millis(1), Duration::from_millis(20)),
            },
            hold: HoldConfig {
                auto_extend: 0.5,
                fixed_work: (0.8, 1.2),
                ..Self::baseline().hold
            },
            ..Self::baseline()
        }
    }

    /// Inside the model: [`Scenario::restart_without_delay`] where each node restarts from a
    /// snapshot (or fails over to a replica) — its epoch comes back old, its lock keys do not —
    /// over tracked connections: the checked script sees the node's new identity and stamps a
    /// new epoch.
    pub fn snapshot_restart_without_delay() -> Self {
        Self {
            name: "snapshot_restart_without_delay",
            loss: MemoryLoss::Snapshot,
            ..Self::tracked_restart_without_delay()
        }
    }

    /// Outside the model (negative control): [`Scenario::snapshot_restart_without_delay`] on
    /// nodes whose scripts ignore the identity — the old epoch lets a restarted node vote at
    /// once.
    pub fn snapshot_restart_identity_blind() -> Self {
        Self {
            name: "snapshot_restart_identity_blind",
            identity_check: false,
            ..Self::snapshot_restart_without_delay()
        }
    }

    /// Inside the model: [`Scenario::snapshot_restart_without_delay`] on nodes that run no
    /// script: the native proof reads the node's identity (`INFO`) beside the epoch, and on a
    /// change restamps the epoch and its identity in writes that follow the proof's replies
    /// ([`Stamp`](redlock_core::Stamp)).
    pub fn native_snapshot_restart_without_delay() -> Self {
        Self {
            name: "native_snapshot_restart_without_delay",
            dialect: Dialect {
                scripts: false,
                ..VALKEY_9_1
            },
            ..Self::snapshot_restart_without_delay()
        }
    }

    /// Outside the model (negative control): [`Scenario::native_snapshot_restart_without_delay`]
    /// on nodes that show no identity (as where `INFO` is denied): a restarted node votes at
    /// once on its old epoch.
    pub fn native_snapshot_restart_identity_blind() -> Self {
        Self {
            name: "native_snapshot_restart_identity_blind",
            identity_check: false,
            ..Self::native_snapshot_restart_without_delay()
        }
    }

    /// Inside the model: nodes fail over to a replica and back, often, with some connections
    /// kept to the demoted server the whole time (issue 21, scenario 7). The interim master
    /// sits out the longest TTL (its identity is new) before it grants; a kept connection's
    /// proof counts for half the longest TTL, and its next proof sees the re-promoted node's new
    /// identity.
    pub fn failover_flip_flops() -> Self {
        let base = Self::baseline();
        Self {
            name: "failover_flip_flops",
            nodes: 3,
            loss: MemoryLoss::Flip,
            tracked: Tracked::Heard,
            crashes: CrashConfig {
                per_node: 6,
                down_for: (base.max_ttl().mul_f64(0.2), base.max_ttl().mul_f64(3.0)),
            },
            hold: HoldConfig {
                auto_extend: 0.5,
                fixed_work: (0.8, 1.2),
                ..base.hold
            },
            ..base
        }
    }

    /// Outside the model (negative control): [`Scenario::failover_flip_flops`] with proofs that
    /// never expire — a kept connection vouches for the re-promoted node, which lacks the
    /// interim master's keys.
    pub fn failover_flip_flops_ageless() -> Self {
        Self {
            name: "failover_flip_flops_ageless",
            tracked: Tracked::Ageless,
            ..Self::failover_flip_flops()
        }
    }

    /// Outside the model (negative control): [`Scenario::failover_flip_flops`] on nodes whose
    /// epoch a previous release wrote, without an identity: a node that fails over before its
    /// first proof adopts the interim master's identity, and the one after it, and votes at
    /// once (the README lists it among what goes unseen).
    pub fn failover_flip_flops_legacy() -> Self {
        Self {
            name: "failover_flip_flops_legacy",
            legacy_epochs: true,
            ..Self::failover_flip_flops()
        }
    }

    /// Inside the model: fenced locks under lossy networks, delayed restarts, pauses of correct
    /// clients and node wall clocks up to 200 ms apart; every holder writes its fence through a
    /// fenced store. Fences of successive holders must strictly increase and no store may accept
    /// two holders' writes under one fence.
    pub fn fenced() -> Self {
        Self {
            name: "fenced",
            fenced: true,
            ..Self::fenced_base()
        }
    }

    fn fenced_base() -> Self {
        let everything = Self::everything();
        Self {
            clocks: ClockConfig {
                max_offset: Duration::from_millis(200),
                ..everything.clocks
            },
            ..everything
        }
    }

    /// Inside the model: [`Scenario::fenced`] on nodes that run no script (Valkey 9.1 without
    /// Lua), with tracked connections: a fenced acquisition is `MULTI; SET … NX PX (or MSETEX);
    /// ZSCORE …; TIME; EXEC` on a connection that vouches for the node's memory, and a commit
    /// `MULTI; ZADD … GT; PEXPIRE …; GET …; EXEC` (issue 23).
    pub fn no_script_fenced() -> Self {
        Self {
            name: "no_script_fenced",
            ..Self::no_script(Self::fenced())
        }
    }

    /// Outside the model (negative control): [`Scenario::fence_commit_skipped`] on nodes that
    /// run no script: their native commits acknowledged but never stored.
    pub fn no_script_fence_commit_skipped() -> Self {
        Self {
            name: "no_script_fence_commit_skipped",
            ..Self::no_script(Self::fence_commit_skipped())
        }
    }

    /// Outside the model (negative control): [`Scenario::fence_counter_backwards`] on nodes
    /// that run no script.
    pub fn no_script_fence_counter_backwards() -> Self {
        Self {
            name: "no_script_fence_counter_backwards",
            ..Self::no_script(Self::fence_counter_backwards())
        }
    }

    /// `scenario` on nodes that run no script (Valkey 9.1 without Lua), with tracked
    /// connections (what lets them take restart-aware acquisitions).
    fn no_script(scenario: Self) -> Self {
        Self {
            dialect: Dialect {
                scripts: false,
                ..VALKEY_9_1
            },
            tracked: Tracked::Heard,
            ..scenario
        }
    }

    /// Inside the model: [`Scenario::restart_without_delay`] with fenced locks — a node that
    /// lost its counters with its memory does not vote until they could no longer matter.
    pub fn fenced_restart_without_delay() -> Self {
        Self {
            name: "fenced_restart_without_delay",
            fenced: true,
            ..Self::restart_without_delay()
        }
    }

    /// Outside the model (negative control): fenced locks whose commits the nodes acknowledge
    /// but never store (as if the commit round were skipped). No crashes, node wall clocks 5 s
    /// apart (harmless while counters are kept): a later holder whose quorum has the slower
    /// clocks gets a smaller fence.
    pub fn fence_commit_skipped() -> Self {
        Self {
            name: "fence_commit_skipped",
            fence_fault: Some(FenceFault::IgnoreCommits),
            ..Self::fence_control_base()
        }
    }

    /// Outside the model (negative control): fence counters that go backwards on commit (same
    /// schedules as [`Scenario::fence_commit_skipped`]).
    pub fn fence_counter_backwards() -> Self {
        Self {
            name: "fence_counter_backwards",
            fence_fault: Some(FenceFault::CommitsGoBackwards),
            ..Self::fence_control_base()
        }
    }

    /// Fenced locks, no crashes, node wall clocks up to 5 s apart: inside the model as long as
    /// the counters work.
    fn fence_control_base() -> Self {
        let base = Self::fenced_base();
        Self {
            fenced: true,
            crashes: NO_CRASHES,
            clocks: ClockConfig {
                max_offset: Duration::from_secs(5),
                ..base.clocks
            },
            ..base
        }
    }

    /// Outside the model (negative control): fenced locks with crashes and node wall clocks 5 s
    /// apart, more than the longest TTL: a node that lost its counter restarts it below fences
    /// it had committed.
    pub fn fence_clocks_too_far_apart() -> Self {
        let base = Self::fenced_base();
        Self {
            name: "fence_clocks_too_far_apart",
            fenced: true,
            clocks: ClockConfig {
                max_offset: Duration::from_secs(5),
                ..base.clocks
            },
            ..base
        }
    }

    /// Outside the model (negative control): fenced locks, immediate empty restarts and
    /// restart-aware voting off: a restarted node lost our lock and its counter.
    pub fn fenced_restart_unaware() -> Self {
        Self {
            name: "fenced_restart_unaware",
            fenced: true,
            ..Self::restart_without_delay_unaware()
        }
    }

    /// Outside the model (negative control): [`Scenario::restart_without_delay`] with
    /// restart-aware voting off — the Redis page's failure, which the checker must catch.
    pub fn restart_without_delay_unaware() -> Self {
        Self {
            name: "restart_without_delay_unaware",
            restart_aware: false,
            ..Self::restart_without_delay()
        }
    }

    /// Outside the model (negative control): every node's clock runs 30 % fast while the drift
    /// factor allows 1 %: keys expire long before the validity the holder was given.
    pub fn node_clock_too_fast() -> Self {
        Self {
            name: "node_clock_too_fast",
            clocks: ClockConfig {
                node_rate_ppm: (300_000, 300_000),
                client_rate_ppm: (0, 0),
                max_offset: Duration::from_secs(60),
            },
            hold: HoldConfig {
                auto_extend: 0.0,
                fixed_work: (0.9, 1.2),
                ..Self::baseline().hold
            },
            ..Self::baseline()
        }
    }

    /// Outside the model (negative control): clients that, after a pause, finish their work
    /// without checking that the lease is still valid.
    pub fn pause_then_keep_using() -> Self {
        Self {
            name: "pause_then_keep_using",
            client_kind: ClientKind::TrustsLeaseAfterPause,
            pauses: PauseConfig {
                per_client: 4,
                length: (Duration::from_millis(200), Duration::from_millis(1000)),
            },
            hold: HoldConfig {
                auto_extend: 0.0,
                fixed_work: (0.3, 0.9),
                ..Self::baseline().hold
            },
            ..Self::baseline()
        }
    }

    /// Outside the model (negative control): [`Scenario::extend_shorter`] on nodes whose extend
    /// is a plain `PEXPIRE` (the engine's script before it checked `PTTL`): the keys expire long
    /// before the validity the lease keeps.
    pub fn extend_shortens_keys() -> Self {
        Self {
            name: "extend_shortens_keys",
            extend_semantics: ExtendSemantics::Pexpire,
            ..Self::extend_shorter()
        }
    }

    /// The longest TTL any lock of the scenario uses.
    pub fn max_ttl(&self) -> Duration {
        let base = self.ttl.1;
        match self.hold.manual_extend {
            Some((_, factor)) if factor > 1.0 => base.mul_f64(factor),
            _ => base,
        }
    }

    /// How long a client's connection waits for a batch's replies before it answers each
    /// request with a timeout error and skips the late reply (the adapters' I/O timeout): twice
    /// the engine's per-node timeout of the shortest lock (TTL / 10, at least 10 ms), as the
    /// adapters' default of 2 s is twice the per-node timeout of a 10 s lock. Replies the
    /// network reorders further than that are skipped, as a real connection skips a reply that
    /// came after its timeout.
    pub fn io_timeout(&self) -> Duration {
        (self.ttl.0 / 10).max(Duration::from_millis(10)) * 2
    }

    /// The model assumptions this scenario breaks (empty: inside the model, so the checker must
    /// never fire).
    ///
    /// 1. Clock rates: a lock of TTL `ttl` is trusted for `ttl − drift` on the client's clock
    ///    (`drift = ttl × factor + 2 ms`); a key lives `ttl` on the node's clock. Safe while
    ///    `(1 + node rate) / (1 + client rate) ≤ ttl / (ttl − drift)` for every TTL.
    /// 2. No node votes again while one of its keys could still be alive after it lost them:
    ///    with restart-aware voting the engine enforces it (the node waits out the longest TTL
    ///    on its own clock, covered by 1.); without it, the shortest downtime must exceed the
    ///    longest TTL as the fastest node clock measures it.
    /// 3. Clients stop using a lock when its validity ends, pauses included.
    /// 4. An extension never shortens a key's TTL (the lease keeps the longer validity it had).
    /// 5. Fences: a node that lost its counter (with its memory) restarts it from its wall
    ///    clock once it may vote again, so with crashes the nodes' wall clocks must agree within
    ///    the longest TTL; and counters are stored as committed.
    pub fn assumptions(&self) -> Vec<String> {
        let mut broken = Vec::new();
        // `ttl / span` shrinks as the TTL grows (the 2 ms floor matters less): the longest TTL
        // is the tightest.
        let ttl = self.max_ttl().as_secs_f64();
        let span = ttl - ttl * self.drift_factor - 0.002;
        let fastest_node = 1.0 + f64::from(self.clocks.node_rate_ppm.1) / 1e6;
        let slowest_node = 1.0 + f64::from(self.clocks.node_rate_ppm.0) / 1e6;
        let slowest_client = 1.0 + f64::from(self.clocks.client_rate_ppm.0) / 1e6;
        let ratio = fastest_node / slowest_client;
        if ratio > ttl / span {
            broken.push(format!(
                "clock rates: node/client rate ratio up to {ratio:.4}, the drift covers {:.4}",
                ttl / span
            ));
        }
        if self.crashes.per_node > 0 && !self.restart_aware {
            let longest_key = self.max_ttl().as_secs_f64() / slowest_node;
            let shortest_down = self.crashes.down_for.0.as_secs_f64();
            if shortest_down <= longest_key {
                broken.push(format!(
                    "restart: nodes come back after {shortest_down:.3} s, keys live up to \
                     {longest_key:.3} s"
                ));
            }
        }
        let shortens = self
            .hold
            .manual_extend
            .is_some_and(|(_, factor)| factor < 1.0);
        if shortens && self.extend_semantics == ExtendSemantics::Pexpire {
            broken
                .push("extend: a shorter TTL cuts keys below the validity the lease keeps".into());
        }
        if self.tracked == Tracked::Deaf
            && self.loss == MemoryLoss::Flush
            && self.crashes.per_node > 0
        {
            broken.push("connections: a flushed node's invalidation pushes go unheard".into());
        }
        if !self.identity_check && self.loss == MemoryLoss::Snapshot && self.crashes.per_node > 0 {
            broken.push("identity: a node restarted from a snapshot keeps voting".into());
        }
        if self.legacy_epochs && self.loss == MemoryLoss::Flip && self.crashes.per_node > 0 {
            broken.push("identity: an unstamped epoch adopts a failed-over node's identity".into());
        }
        if self.tracked == Tracked::Ageless
            && self.loss == MemoryLoss::Flip
            && self.crashes.per_node > 0
        {
            broken.push("connections: a proof outlives a demotion and a re-promotion".into());
        }
        if self.tracked == Tracked::Unsealed
            && matches!(self.loss, MemoryLoss::Swap | MemoryLoss::LoneEviction)
            && self.crashes.per_node > 0
        {
            broken.push(format!(
                "connections: vouched acquisitions unsealed, a {:?} goes unseen",
                self.loss
            ));
        }
        if self.tracked == Tracked::NoLoop
            && self.loss == MemoryLoss::OwnEviction
            && self.crashes.per_node > 0
        {
            broken.push("connections: an eviction their own command sets off goes unheard".into());
        }
        if self.client_kind != ClientKind::Correct {
            broken.push(format!("clients: {:?}", self.client_kind));
        }
        if let Some(fault) = self.fence_fault {
            broken.push(format!("fence counters: {fault:?}"));
        }
        if self.fenced && self.crashes.per_node > 0 && self.clocks.max_offset >= self.max_ttl() {
            broken.push(format!(
                "fence: node wall clocks up to {:?} apart, the longest TTL is {:?}",
                self.clocks.max_offset,
                self.max_ttl()
            ));
        }
        broken
    }

    /// Draws one concrete schedule of faults and clocks.
    pub(crate) fn plan(&self, rng: &mut TestRng) -> Plan {
        let run = nanos(self.run_for);
        let clock = |rng: &mut TestRng, (lo, hi): (i32, i32)| {
            let offset = rng.between(0, nanos(self.clocks.max_offset));
            let span = u64::try_from(i64::from(hi) - i64::from(lo)).unwrap_or(0);
            let rate = i64::from(lo) + i64::try_from(rng.between(0, span)).unwrap_or(0);
            Clock::new(offset, i32::try_from(rate).unwrap_or(lo))
        };
        let node_clocks = (0..self.nodes)
            .map(|_| clock(rng, self.clocks.node_rate_ppm))
            .collect();
        let client_clocks = (0..self.clients)
            .map(|_| clock(rng, self.clocks.client_rate_ppm))
            .collect();
        let mut crashes = Vec::new();
        for node in 0..self.nodes {
            let count = rng.between(0, u64::from(self.crashes.per_node));
            for (at, down) in spaced(rng, count, run, self.crashes.down_for) {
                crashes.push(Crash { node, at, down });
            }
        }
        let mut pauses = Vec::new();
        for client in 0..self.clients {
            let count = rng.between(0, u64::from(self.pauses.per_client));
            for (at, length) in spaced(rng, count, run, self.pauses.length) {
                pauses.push(Pause { client, at, length });
            }
        }
        let mut partitions = Vec::new();
        let all_nodes = u64::MAX >> (64 - self.nodes.clamp(1, 64));
        for client in 0..self.clients {
            let count = rng.between(0, u64::from(self.partitions.per_client));
            for _ in 0..count {
                let from = rng.between(0, run);
                let until = from + nanos(rng.duration(self.partitions.length));
                let nodes = rng.between(1, all_nodes);
                partitions.push(Partition {
                    client,
                    nodes,
                    from,
                    until,
                });
            }
        }
        Plan {
            node_clocks,
            client_clocks,
            crashes,
            pauses,
            partitions,
        }
    }
}

/// `count` non-overlapping intervals `(start, length)` starting inside `[0, run)`.
fn spaced(
    rng: &mut TestRng,
    count: u64,
    run: Nanos,
    length: (Duration, Duration),
) -> Vec<(Nanos, Nanos)> {
    let mut starts: Vec<Nanos> = (0..count).map(|_| rng.between(0, run)).collect();
    starts.sort_unstable();
    let mut out: Vec<(Nanos, Nanos)> = Vec::new();
    for start in starts {
        let len = nanos(rng.duration(length));
        let start = match out.last() {
            Some(&(s, l)) => start.max(s + l + 1),
            None => start,
        };
        out.push((start, len));
    }
    out
}

/// One node crash: down at `at` for `down`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Crash {
    pub(crate) node: usize,
    pub(crate) at: Nanos,
    pub(crate) down: Nanos,
}

/// One client pause.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pause {
    pub(crate) client: usize,
    pub(crate) at: Nanos,
    pub(crate) length: Nanos,
}

/// The concrete faults and clocks of one schedule.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) node_clocks: Vec<Clock>,
    pub(crate) client_clocks: Vec<Clock>,
    pub(crate) crashes: Vec<Crash>,
    pub(crate) pauses: Vec<Pause>,
    pub(crate) partitions: Vec<Partition>,
}
