//! The fault schedule ("nemesis"): a plain thread that, driven by a seeded RNG, kills, stops and
//! restarts `redis-server` processes and switches faults on the client–node proxies while the
//! clients work, then heals everything.
//!
//! Kills are `kill -9` of a server without persistence, so a node always comes back empty. Some
//! come back only after the longest TTL in use (the *delayed restart* the Redis distributed-locks
//! page asks for); others at once — the page's failure, inside the model only because the
//! clients use restart-aware voting (the node refuses to vote until the longest TTL has passed
//! on its clock). Every other fault (SIGSTOP, latency, stalls, partitions, resets) is inside the
//! model at any length and in any combination.

use std::collections::BTreeMap;
use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use super::links::Links;
use crate::Servers;
use crate::rng::TestRng;

/// One kind of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// `kill -9` of a node's process.
    Kill,
    /// A killed node started again, empty, at least the longest TTL after it died.
    Restart,
    /// `kill -9` and an empty restart at once (safe only with restart-aware voting).
    KillRestartNow,
    /// SIGSTOP of a node, SIGCONT later: it keeps its sockets and data but answers nothing.
    Pause,
    /// Added latency on one client–node link for a while.
    Latency,
    /// One link holds every byte (both ways) for a while, then delivers them.
    Stall,
    /// One link's connections are closed, and new ones refused, for a while.
    Partition,
    /// One link cuts the connection carrying the next reply (the command ran; its reply is lost).
    Reset,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [Self; 8] = [
        Self::Kill,
        Self::Restart,
        Self::KillRestartNow,
        Self::Pause,
        Self::Latency,
        Self::Stall,
        Self::Partition,
        Self::Reset,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kill => "kill -9",
            Self::Restart => "delayed restart",
            Self::KillRestartNow => "kill -9 + empty restart at once",
            Self::Pause => "SIGSTOP/SIGCONT",
            Self::Latency => "latency",
            Self::Stall => "stall",
            Self::Partition => "partition",
            Self::Reset => "reset",
        }
    }
}

/// How many faults of each kind were injected (link faults count once per link).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultCounts(BTreeMap<FaultKind, u64>);

impl FaultCounts {
    /// Faults of `kind`.
    pub fn get(&self, kind: FaultKind) -> u64 {
        self.0.get(&kind).copied().unwrap_or(0)
    }

    /// Faults of every kind.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    fn add(&mut self, kind: FaultKind) {
        *self.0.entry(kind).or_default() += 1;
    }
}

impl fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, kind) in FaultKind::ALL.into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} {}", kind.name(), self.get(kind))?;
        }
        Ok(())
    }
}

/// The fault mix. Durations are drawn uniformly from their `(min, max)` ranges.
#[derive(Debug, Clone)]
pub struct FaultConfig {
    /// Pause between two injections.
    pub interval: (Duration, Duration),
    /// Relative weight of each kind when the next fault is drawn (`Restart` is not drawn: it
    /// follows each kill).
    pub weights: Vec<(FaultKind, u32)>,
    /// How long a node stays stopped.
    pub pause: (Duration, Duration),
    /// How long a killed node stays down *beyond* the longest TTL.
    pub restart_margin: (Duration, Duration),
    /// How long a latency episode lasts.
    pub latency_for: (Duration, Duration),
    /// The latency added during an episode.
    pub latency: (Duration, Duration),
    /// How long a stall lasts.
    pub stall: (Duration, Duration),
    /// How long a partition lasts.
    pub partition: (Duration, Duration),
    /// How long a reset stays armed (it fires on the next reply, if one comes).
    pub reset_armed: (Duration, Duration),
    /// The cut comes after `0..=reset_bytes` bytes of reply.
    pub reset_bytes: u64,
    /// Nodes down at once (more would only stop progress, not threaten safety).
    pub max_down: usize,
    /// Nodes stopped at once.
    pub max_paused: usize,
    /// Links stalled, partitioned or with an armed reset at once.
    pub max_link_faults: usize,
}

impl Default for FaultConfig {
    fn default() -> Self {
        let ms = Duration::from_millis;
        Self {
            interval: (ms(80), ms(400)),
            weights: vec![
                (FaultKind::Kill, 1),
                (FaultKind::KillRestartNow, 1),
                (FaultKind::Pause, 2),
                (FaultKind::Latency, 3),
                (FaultKind::Stall, 2),
                (FaultKind::Partition, 3),
                (FaultKind::Reset, 3),
            ],
            pause: (ms(200), ms(2500)),
            restart_margin: (ms(200), ms(1500)),
            latency_for: (ms(500), ms(4000)),
            latency: (ms(5), ms(400)),
            stall: (ms(100), ms(2500)),
            partition: (ms(300), ms(4000)),
            reset_armed: (ms(200), ms(3000)),
            reset_bytes: 40,
            max_down: 1,
            max_paused: 1,
            max_link_faults: 10,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum NodeState {
    Up,
    Down { restart_at: Instant },
    Paused { resume_at: Instant },
}

#[derive(Debug, Clone, Copy, Default)]
struct LinkState {
    /// A stall, partition or armed reset, healed at this instant.
    heal_at: Option<Instant>,
    /// A latency episode, ended at this instant.
    latency_until: Option<Instant>,
}

/// Drives the faults of one run. Owns the servers while it runs and hands it back at the end.
#[derive(Debug)]
pub(crate) struct Nemesis<'a> {
    servers: Servers,
    links: &'a Links,
    rng: TestRng,
    config: FaultConfig,
    max_ttl: Duration,
    nodes: Vec<NodeState>,
    /// `[client * nodes + node]`.
    link_states: Vec<LinkState>,
    counts: FaultCounts,
}

impl<'a> Nemesis<'a> {
    pub(crate) fn new(
        servers: Servers,
        links: &'a Links,
        rng: TestRng,
        config: &FaultConfig,
        max_ttl: Duration,
    ) -> Self {
        let nodes = vec![NodeState::Up; servers.len()];
        let link_states = vec![LinkState::default(); links.clients() * links.nodes()];
        Self {
            servers,
            links,
            rng,
            config: config.clone(),
            max_ttl,
            nodes,
            link_states,
            counts: FaultCounts::default(),
        }
    }

    /// Injects faults until `until`, then heals everything — waiting for each killed node's
    /// restart time, never restarting early — and returns the servers, all nodes up.
    pub(crate) fn run(mut self, until: Instant) -> (Servers, FaultCounts) {
        loop {
            let now = Instant::now();
            if now >= until {
                break;
            }
            self.handle_due(now);
            self.inject(now);
            let pause = self.rng.duration_micros(self.config.interval);
            thread::sleep(pause.min(until.saturating_duration_since(Instant::now())));
        }
        self.settle();
        (self.servers, self.counts)
    }

    /// Ends the faults whose time has come.
    fn handle_due(&mut self, now: Instant) {
        for node in 0..self.nodes.len() {
            match self.nodes[node] {
                NodeState::Down { restart_at } if restart_at <= now => self.restart(node),
                NodeState::Paused { resume_at } if resume_at <= now => {
                    self.servers.resume(node);
                    self.nodes[node] = NodeState::Up;
                }
                _ => {}
            }
        }
        let node_count = self.links.nodes();
        for (i, state) in self.link_states.iter_mut().enumerate() {
            let proxy = self.links.get(i / node_count, i % node_count);
            if state.heal_at.is_some_and(|at| at <= now) {
                proxy.heal();
                state.heal_at = None;
            }
            if state.latency_until.is_some_and(|at| at <= now) {
                proxy.set_latency(Duration::ZERO);
                state.latency_until = None;
            }
        }
    }

    fn restart(&mut self, node: usize) {
        self.servers.restart_empty(node);
        self.nodes[node] = NodeState::Up;
        self.counts.add(FaultKind::Restart);
    }

    /// Draws one fault and injects it if the limits allow; otherwise injects nothing this time.
    fn inject(&mut self, now: Instant) {
        let Some(kind) = self.draw_kind() else {
            return;
        };
        match kind {
            FaultKind::Kill => self.kill(now),
            FaultKind::KillRestartNow => self.kill_restart_now(),
            FaultKind::Pause => self.pause(now),
            FaultKind::Latency => self.latency(now),
            FaultKind::Stall | FaultKind::Partition | FaultKind::Reset => {
                self.link_fault(now, kind);
            }
            FaultKind::Restart => {}
        }
    }

    fn draw_kind(&mut self) -> Option<FaultKind> {
        let total: u64 = self.config.weights.iter().map(|(_, w)| u64::from(*w)).sum();
        let mut ticket = self.rng.below(total);
        for (kind, weight) in &self.config.weights {
            let weight = u64::from(*weight);
            if ticket < weight {
                return Some(*kind);
            }
            ticket -= weight;
        }
        None
    }

    fn nodes_where(&self, f: impl Fn(NodeState) -> bool) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| f(self.nodes[i]))
            .collect()
    }

    fn kill(&mut self, now: Instant) {
        let down = self.nodes_where(|s| matches!(s, NodeState::Down { .. }));
        if down.len() >= self.config.max_down {
            return;
        }
        let up = self.nodes_where(|s| matches!(s, NodeState::Up));
        let Some(node) = self.rng.pick(&up) else {
            return;
        };
        self.servers.kill(node);
        // The delayed restart: down for longer than any key it held could have lived.
        let restart_at = now + self.max_ttl + self.rng.duration_micros(self.config.restart_margin);
        self.nodes[node] = NodeState::Down { restart_at };
        self.counts.add(FaultKind::Kill);
    }

    /// The Redis page's failure on purpose: a running node loses its memory at once (its
    /// holders' keys with it) and answers again right away.
    fn kill_restart_now(&mut self) {
        let up = self.nodes_where(|s| matches!(s, NodeState::Up));
        let Some(node) = self.rng.pick(&up) else {
            return;
        };
        self.servers.restart_empty(node);
        self.counts.add(FaultKind::KillRestartNow);
    }

    fn pause(&mut self, now: Instant) {
        let paused = self.nodes_where(|s| matches!(s, NodeState::Paused { .. }));
        if paused.len() >= self.config.max_paused {
            return;
        }
        let up = self.nodes_where(|s| matches!(s, NodeState::Up));
        let Some(node) = self.rng.pick(&up) else {
            return;
        };
        self.servers.pause(node);
        let resume_at = now + self.rng.duration_micros(self.config.pause);
        self.nodes[node] = NodeState::Paused { resume_at };
        self.counts.add(FaultKind::Pause);
    }

    fn latency(&mut self, now: Instant) {
        let free: Vec<usize> = (0..self.link_states.len())
            .filter(|&i| self.link_states[i].latency_until.is_none())
            .collect();
        let Some(link) = self.rng.pick(&free) else {
            return;
        };
        let latency = self.rng.duration_micros(self.config.latency);
        self.proxy(link).set_latency(latency);
        self.link_states[link].latency_until =
            Some(now + self.rng.duration_micros(self.config.latency_for));
        self.counts.add(FaultKind::Latency);
    }

    /// A stall, reset or partition on one link; a partition cuts one client off from one or two
    /// nodes at once.
    fn link_fault(&mut self, now: Instant, kind: FaultKind) {
        let active = self
            .link_states
            .iter()
            .filter(|s| s.heal_at.is_some())
            .count();
        if active >= self.config.max_link_faults {
            return;
        }
        let free: Vec<usize> = (0..self.link_states.len())
            .filter(|&i| self.link_states[i].heal_at.is_none())
            .collect();
        let Some(first) = self.rng.pick(&free) else {
            return;
        };
        let mut targets = vec![first];
        if kind == FaultKind::Partition && self.rng.chance(0.4) {
            // A second node of the same client: the client sees another majority than others.
            let client = first / self.links.nodes();
            let same_client: Vec<usize> = free
                .iter()
                .copied()
                .filter(|&i| i != first && i / self.links.nodes() == client)
                .collect();
            targets.extend(self.rng.pick(&same_client));
        }
        for link in targets {
            let (range, proxy) = match kind {
                FaultKind::Stall => (self.config.stall, self.proxy(link)),
                FaultKind::Partition => (self.config.partition, self.proxy(link)),
                _ => (self.config.reset_armed, self.proxy(link)),
            };
            match kind {
                FaultKind::Stall => proxy.stall(),
                FaultKind::Partition => proxy.drop_all(),
                _ => {
                    let bytes = self.rng.below(self.config.reset_bytes + 1);
                    proxy.reset_after(bytes);
                }
            }
            self.link_states[link].heal_at = Some(now + self.rng.duration_micros(range));
            self.counts.add(kind);
        }
    }

    fn proxy(&self, link: usize) -> &'a crate::FaultProxy {
        let nodes = self.links.nodes();
        self.links.get(link / nodes, link % nodes)
    }

    /// Heals every link and node. Killed nodes restart only once their time has come.
    fn settle(&mut self) {
        self.links.heal_all();
        for state in &mut self.link_states {
            *state = LinkState::default();
        }
        for node in 0..self.nodes.len() {
            match self.nodes[node] {
                NodeState::Paused { .. } => {
                    self.servers.resume(node);
                    self.nodes[node] = NodeState::Up;
                }
                NodeState::Down { restart_at } => {
                    thread::sleep(restart_at.saturating_duration_since(Instant::now()));
                    self.restart(node);
                }
                NodeState::Up => {}
            }
        }
    }
}
