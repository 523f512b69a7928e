//! The world: one event queue in true time, the nodes, the clients and the network, stepped from
//! the earliest event to the next.
//!
//! The queue is a `BTreeMap` keyed by `(true time, sequence number)`: the earliest event always
//! comes first, ties go in the order events were scheduled, and nothing ever iterates a hash
//! map, so a seed replays bit-for-bit. Time jumps straight to the next event; a simulated second
//! costs only the events in it.

use std::collections::BTreeMap;

use redlock_core::{
    Command, Config, NodeBatch, NodeErrorKind, Reply, RequestId, Transmit, WatchFault,
};

use super::checker::{Checker, Violation, ms};
use super::client::{Client, Env, Input, Outgoing};
use super::clock::{Nanos, TimeBase, nanos};
use super::connections::{Connections, ReadBack};
use super::network::{Link, Network, Transit};
use super::node::Node;
use super::scenario::{MemoryLoss, Scenario, Tracked};
use super::stats::Stats;
use super::trace::Trace;
use crate::rng::TestRng;

/// Events beyond this in one run mean a livelock in the simulator or the engine.
const MAX_EVENTS: u64 = 20_000_000;

#[derive(Debug)]
enum Event {
    /// A batch of requests reaches a node.
    ToNode {
        client: usize,
        number: u64,
        node: usize,
        transmits: Vec<Transmit>,
        /// Its plan on a tracked connection (boxed: the other events are small).
        plan: Option<Box<NodeBatch>>,
        /// The node's server its connection was opened to (`None`: the master).
        server: Option<usize>,
    },
    /// The replies to a batch reach its client.
    ToClient {
        client: usize,
        number: u64,
        node: usize,
        replies: Vec<(RequestId, Reply)>,
        /// What the node answered to the proof reads ahead of the requests.
        read_back: ReadBack,
        /// The node's memory losses when it produced the replies.
        losses: u64,
    },
    /// A client's timer.
    Timer { client: usize, seq: u64 },
    /// A client process stops for `length`.
    Pause { client: usize, length: Nanos },
    /// It runs again.
    Resume { client: usize },
    /// A node crashes (losing every key) for `down`.
    Crash { node: usize, down: Nanos },
    /// It restarts, empty.
    Restart { node: usize },
}

/// How one schedule ended.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario's name.
    pub scenario: &'static str,
    /// The seed that drew the schedule.
    pub seed: u64,
    /// What happened.
    pub stats: Stats,
    /// The first overlap the checker found.
    pub violation: Option<Violation>,
    /// A hash of every event processed (time, order, kind, parties, replies): two runs with the
    /// same fingerprint did the same thing.
    pub fingerprint: u64,
    /// For a traced run: the events that explain the violation, or the last events of the run.
    pub trace: Option<String>,
}

/// One run of one schedule.
pub(crate) struct World<'s> {
    scenario: &'s Scenario,
    base: TimeBase,
    queue: BTreeMap<(Nanos, u64), Event>,
    seq: u64,
    nodes: Vec<Node>,
    clients: Vec<Client<'s>>,
    network: Network,
    net_rng: TestRng,
    checker: Checker,
    stats: Stats,
    trace: Option<Trace>,
    fingerprint: u64,
    outbox: Vec<Outgoing>,
}

impl<'s> World<'s> {
    /// Draws the schedule of `seed` and sets up the world at true time zero.
    pub(crate) fn new(scenario: &'s Scenario, seed: u64, traced: bool) -> Self {
        let mut root = TestRng::new(seed);
        let plan = scenario.plan(&mut root.fork());
        let net_rng = root.fork();
        let config = Config::builder(scenario.nodes)
            .drift_factor(scenario.drift_factor)
            .retry(scenario.retry)
            .restart_aware(scenario.restart_aware)
            .max_ttl(scenario.max_ttl())
            .build()
            .expect("the scenario's engine configuration is valid");
        let stop_at = nanos(scenario.run_for);
        let clients = plan
            .client_clocks
            .iter()
            .enumerate()
            .map(|(id, &clock)| {
                let connections = match scenario.tracked {
                    Tracked::Off => None,
                    Tracked::Heard => Some(None),
                    Tracked::Deaf => Some(Some(WatchFault::Deaf)),
                    Tracked::NoLoop => Some(Some(WatchFault::NoLoop)),
                    Tracked::Ageless => Some(Some(WatchFault::Ageless)),
                    Tracked::Unsealed => Some(Some(WatchFault::Unsealed)),
                }
                .map(|fault| Connections::new(scenario.nodes, scenario.dialect, fault));
                Client::new(
                    id,
                    scenario,
                    clock,
                    config.clone(),
                    root.fork(),
                    stop_at,
                    connections,
                )
            })
            .collect();
        let nodes = plan
            .node_clocks
            .iter()
            .map(|&clock| {
                Node::speaking(
                    clock,
                    scenario.extend_semantics,
                    scenario.fence_fault,
                    scenario.dialect,
                )
                .with_identity_check(scenario.identity_check)
                .stamped(!scenario.legacy_epochs)
                .evicting(scenario.loss == MemoryLoss::LoneEviction)
            })
            .collect();
        let mut world = Self {
            scenario,
            base: TimeBase::new(),
            queue: BTreeMap::new(),
            seq: 0,
            nodes,
            clients,
            network: Network::new(scenario.net, plan.partitions.clone()),
            net_rng,
            checker: Checker::default(),
            stats: Stats {
                schedules: 1,
                partitions: u64::try_from(plan.partitions.len()).unwrap_or(u64::MAX),
                ..Stats::default()
            },
            trace: traced.then(Trace::default),
            fingerprint: 0xcbf2_9ce4_8422_2325 ^ seed,
            outbox: Vec::new(),
        };
        if let Some(trace) = world.trace.as_mut() {
            trace.push(0, None, None, Vec::new(), format!("{scenario:?}"));
            for (i, node) in world.nodes.iter().enumerate() {
                trace.push(
                    0,
                    None,
                    Some(i),
                    Vec::new(),
                    format!("clock rate {:+} ppm", node.clock().rate_ppm()),
                );
            }
            for (i, client) in world.clients.iter().enumerate() {
                trace.push(
                    0,
                    Some(i),
                    None,
                    Vec::new(),
                    format!("clock rate {:+} ppm", client.clock().rate_ppm()),
                );
            }
            for p in world.network.partitions() {
                trace.push(
                    p.from,
                    Some(p.client),
                    None,
                    Vec::new(),
                    format!(
                        "partitioned from nodes {:#b} until {}",
                        p.nodes,
                        ms(p.until)
                    ),
                );
            }
        }
        for crash in &plan.crashes {
            world.schedule(
                crash.at,
                Event::Crash {
                    node: crash.node,
                    down: crash.down,
                },
            );
        }
        for pause in &plan.pauses {
            world.schedule(
                pause.at,
                Event::Pause {
                    client: pause.client,
                    length: pause.length,
                },
            );
        }
        for client in 0..world.clients.len() {
            world.with_client(0, client, |c, env| c.start(env));
        }
        world
    }

    /// Runs until no event is left, then checks.
    pub(crate) fn run(mut self, seed: u64) -> Report {
        while let Some(((t, seq), event)) = self.queue.pop_first() {
            self.stats.events += 1;
            assert!(
                self.stats.events <= MAX_EVENTS,
                "{} seed {seed}: runaway run",
                self.scenario.name
            );
            self.mix(t);
            self.mix(seq);
            self.handle(t, event);
        }
        assert!(
            self.clients.iter().all(Client::is_finished),
            "{} seed {seed}: the queue ran dry with a client still busy",
            self.scenario.name
        );
        assert!(!self.checker.any_open(), "a claim was left open");
        self.stats.critical_sections = u64::try_from(self.checker.sections()).unwrap_or(0);
        self.stats.epochs_claimed = self.nodes.iter().map(Node::claims).sum();
        let violation = self.checker.violation();
        self.stats.violations = u64::from(violation.is_some());
        let trace = self.trace.as_ref().map(|trace| match &violation {
            Some(v) => trace.minimal(v, nanos(self.scenario.max_ttl()) * 2, trace_lines(80)),
            None => trace.tail(trace_lines(60)),
        });
        Report {
            scenario: self.scenario.name,
            seed,
            stats: self.stats,
            violation,
            fingerprint: self.fingerprint,
            trace,
        }
    }

    fn schedule(&mut self, t: Nanos, event: Event) {
        self.seq += 1;
        self.queue.insert((t, self.seq), event);
    }

    /// Folds a word into the run's fingerprint (FNV-1a over its bytes).
    fn mix(&mut self, word: u64) {
        for byte in word.to_le_bytes() {
            self.fingerprint ^= u64::from(byte);
            self.fingerprint = self.fingerprint.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn log(
        &mut self,
        t: Nanos,
        client: Option<usize>,
        node: Option<usize>,
        keys: &Command,
        text: impl FnOnce(&Trace) -> String,
    ) {
        if let Some(trace) = self.trace.as_mut() {
            let text = text(trace);
            let keys = keys.spec().keys().map(<[u8]>::to_vec).collect();
            trace.push(t, client, node, keys, text);
        }
    }

    fn handle(&mut self, t: Nanos, event: Event) {
        match event {
            Event::ToNode {
                client,
                number,
                node,
                transmits,
                plan,
                server,
            } => {
                self.mix(1);
                self.mix(u64::try_from(client * 64 + node).unwrap_or(0));
                if self.network.cut(t, client, node) {
                    self.stats.partitioned += 1;
                    self.log(t, Some(client), Some(node), &transmits[0].command, |tr| {
                        format!(
                            "{} dropped by a partition on arrival",
                            describe_all(tr, &transmits)
                        )
                    });
                    return;
                }
                let answer = if self.nodes[node].is_up() {
                    let (replies, read_back) =
                        self.nodes[node].run(t, client, server, &transmits, plan.as_deref());
                    for (transmit, reply) in transmits.iter().zip(&replies) {
                        let command = &transmit.command;
                        if command.op() == redlock_core::Op::SetIfAbsent
                            && matches!(reply, Reply::Ineligible { .. } | Reply::Int(i64::MIN..0))
                        {
                            self.stats.ineligible_votes += 1;
                        }
                        let holder = self.nodes[node]
                            .holder(t, command.spec().keys().next().unwrap_or_default())
                            .map(<[u8]>::to_vec);
                        self.log(t, Some(client), Some(node), command, |tr| {
                            format!(
                                "node runs {} -> {reply:?} (first key now held by {})",
                                describe(tr, command),
                                holder.as_deref().map_or("nobody", |h| tr.token(h))
                            )
                        });
                    }
                    Some((replies, read_back))
                } else {
                    self.stats.to_down_node += 1;
                    // Connection refused, or a host that does not answer at all.
                    let refused = self.net_rng.chance(0.5);
                    self.log(t, Some(client), Some(node), &transmits[0].command, |tr| {
                        format!(
                            "{} reaches a down node (refused: {refused})",
                            describe_all(tr, &transmits)
                        )
                    });
                    refused.then(|| {
                        let failed = Reply::Error(NodeErrorKind::Connection);
                        (vec![failed; transmits.len()], ReadBack::default())
                    })
                };
                if let Some((replies, read_back)) = answer {
                    for reply in &replies {
                        self.mix(reply_code(*reply));
                    }
                    let replies: Vec<(RequestId, Reply)> =
                        transmits.iter().map(|t| t.id).zip(replies).collect();
                    let link = Link {
                        client,
                        node,
                        to_node: false,
                    };
                    let losses = self.losses_heard_by(node, client);
                    self.send(t, link, || Event::ToClient {
                        client,
                        number,
                        node,
                        replies: replies.clone(),
                        read_back: read_back.clone(),
                        losses,
                    });
                }
            }
            Event::ToClient {
                client,
                number,
                node,
                replies,
                read_back,
                losses,
            } => {
                self.mix(2);
                self.mix(u64::try_from(client * 64 + node).unwrap_or(0));
                if self.network.cut(t, client, node) {
                    self.stats.partitioned += 1;
                    return;
                }
                if let Some(trace) = self.trace.as_mut() {
                    for (id, reply) in &replies {
                        trace.push(
                            t,
                            Some(client),
                            Some(node),
                            Vec::new(),
                            format!(
                                "reply {reply:?} to op {} batch {} arrives",
                                id.origin().operation(),
                                id.batch()
                            ),
                        );
                    }
                }
                let input = Input::Replies {
                    number,
                    replies,
                    read_back,
                    losses,
                };
                self.with_client(t, client, |c, env| c.on_input(env, input));
            }
            Event::Timer { client, seq } => {
                self.mix(3);
                self.with_client(t, client, |c, env| c.on_timer(env, seq));
            }
            Event::Pause { client, length } => {
                self.mix(4);
                let mut paused = false;
                self.with_client(t, client, |c, env| paused = c.on_pause(env, length));
                if paused {
                    self.stats.pauses += 1;
                    self.schedule(t + length, Event::Resume { client });
                }
            }
            Event::Resume { client } => {
                self.mix(5);
                self.with_client(t, client, |c, env| c.on_resume(env));
            }
            Event::Crash { node, down } if self.scenario.loss == MemoryLoss::Flip => {
                self.mix(6);
                if self.nodes[node].failed_over() {
                    return;
                }
                self.stats.crashes += 1;
                self.nodes[node].fail_over();
                // Some clients reconnect to the new master; the others keep the demoted one.
                let (losses, server) = (self.nodes[node].losses(), self.nodes[node].active());
                for client in &mut self.clients {
                    if self.net_rng.chance(0.5) {
                        client.on_connection_end(node, losses, server);
                    }
                }
                if let Some(trace) = self.trace.as_mut() {
                    let text = format!("FAILOVER to the replica; fails back in {}", ms(down));
                    trace.push(t, None, Some(node), Vec::new(), text);
                }
                self.schedule(t + down, Event::Restart { node });
            }
            Event::Restart { node } if self.scenario.loss == MemoryLoss::Flip => {
                self.mix(7);
                let dying = self.nodes[node].active();
                self.nodes[node].fail_back();
                // The interim master's connections end with it; the demoted master's stay.
                let (losses, server) = (self.nodes[node].losses(), self.nodes[node].active());
                for client in &mut self.clients {
                    if client.server(node) == Some(dying) {
                        client.on_connection_end(node, losses, server);
                    }
                }
                if let Some(trace) = self.trace.as_mut() {
                    let text = "FAILBACK: the interim master dies, the old one is promoted again \
                                with what it had"
                        .to_owned();
                    trace.push(t, None, Some(node), Vec::new(), text);
                }
            }
            Event::Crash { node, down }
                if !matches!(
                    self.scenario.loss,
                    MemoryLoss::Crash | MemoryLoss::Snapshot | MemoryLoss::Flip
                ) =>
            {
                self.mix(6);
                self.stats.crashes += 1;
                // The node stays up and its connections stay open: only pushes tell.
                let text = match self.scenario.loss {
                    MemoryLoss::Flush => {
                        self.nodes[node].flush();
                        "FLUSH: every key lost, connections kept"
                    }
                    MemoryLoss::Swap => {
                        self.nodes[node].swap_database();
                        "SWAPDB: another database, its own old epoch, no lock key; nothing pushed"
                    }
                    MemoryLoss::LoneEviction => {
                        self.nodes[node].evict_lock_keys();
                        "EVICTED every lock key on its own, the epoch kept; nothing pushed"
                    }
                    _ => {
                        self.nodes[node].arm_eviction();
                        "at its memory limit: the next acquisition evicts every key"
                    }
                };
                if let Some(trace) = self.trace.as_mut() {
                    let text = format!("{text} ({} lost for)", ms(down));
                    trace.push(t, None, Some(node), Vec::new(), text);
                }
            }
            Event::Crash { node, down } => {
                self.mix(6);
                self.stats.crashes += 1;
                let text = if self.scenario.loss == MemoryLoss::Snapshot {
                    self.nodes[node].crash_to_snapshot();
                    "CRASH: lock keys lost, the epoch kept; restarts with a new identity in"
                } else {
                    self.nodes[node].crash();
                    "CRASH: every key lost; restarts in"
                };
                let (losses, server) = (self.nodes[node].losses(), self.nodes[node].active());
                for client in &mut self.clients {
                    client.on_connection_end(node, losses, server);
                }
                if let Some(trace) = self.trace.as_mut() {
                    trace.push(
                        t,
                        None,
                        Some(node),
                        Vec::new(),
                        format!("{text} {}", ms(down)),
                    );
                }
                self.schedule(t + down, Event::Restart { node });
            }
            Event::Restart { node } => {
                self.mix(7);
                self.nodes[node].restart();
                if let Some(trace) = self.trace.as_mut() {
                    trace.push(t, None, Some(node), Vec::new(), "RESTART".to_owned());
                }
            }
        }
    }

    /// Runs a client handler, then sends what it queued and sets its timer.
    fn with_client(
        &mut self,
        t: Nanos,
        client: usize,
        f: impl FnOnce(&mut Client<'s>, &mut Env<'_>),
    ) {
        let mut env = Env {
            t,
            base: self.base,
            checker: &mut self.checker,
            stats: &mut self.stats,
            trace: &mut self.trace,
            outbox: &mut self.outbox,
        };
        let c = &mut self.clients[client];
        f(c, &mut env);
        let timer = c.take_timer();
        let mut outbox = std::mem::take(&mut self.outbox);
        for outgoing in outbox.drain(..) {
            match outgoing {
                Outgoing::Batch {
                    client,
                    number,
                    node,
                    transmits,
                    plan,
                    server,
                } => {
                    if let Some(trace) = self.trace.as_mut() {
                        for transmit in &transmits {
                            let text = format!(
                                "sends {} (op {} batch {}, write {number})",
                                describe(trace, &transmit.command),
                                transmit.id.origin().operation(),
                                transmit.id.batch()
                            );
                            let keys = transmit.command.spec().keys().map(<[u8]>::to_vec).collect();
                            trace.push(t, Some(client), Some(node), keys, text);
                        }
                    }
                    let link = Link {
                        client,
                        node,
                        to_node: true,
                    };
                    self.send(t, link, || Event::ToNode {
                        client,
                        number,
                        node,
                        transmits: transmits.clone(),
                        plan: plan.clone().map(Box::new),
                        server,
                    });
                }
            }
        }
        self.outbox = outbox;
        if let Some((at, seq)) = timer {
            self.schedule(at, Event::Timer { client, seq });
        }
    }

    /// The memory losses of `node` that `client`'s connection is told of: every one, except,
    /// with tracking as before `OPTIN` ([`Tracked::NoLoop`]), those its own commands set off.
    fn losses_heard_by(&self, node: usize, client: usize) -> u64 {
        let node = &self.nodes[node];
        match self.scenario.tracked {
            Tracked::NoLoop => node.losses() - node.own_losses(client),
            _ => node.losses(),
        }
    }

    /// Puts one message on `link` at `t`.
    fn send(&mut self, t: Nanos, link: Link, make: impl Fn() -> Event) {
        self.stats.messages += 1;
        if self.network.cut(t, link.client, link.node) {
            self.stats.partitioned += 1;
            return;
        }
        match self.network.transit(&mut self.net_rng, t, link) {
            Transit::Lost => self.stats.lost += 1,
            Transit::Arrives(first, second) => {
                self.schedule(first, make());
                if let Some(second) = second {
                    self.stats.duplicated += 1;
                    self.schedule(second, make());
                }
            }
        }
    }
}

/// How many trace lines to print: `$SIM_TRACE_LINES`, or `default`.
fn trace_lines(default: usize) -> usize {
    std::env::var(super::runner::SIM_TRACE_LINES)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn reply_code(reply: Reply) -> u64 {
    match reply {
        Reply::Ok => 1,
        Reply::Nil => 2,
        Reply::Int(i) => 3 + (u64::from_ne_bytes(i.to_ne_bytes()) << 8),
        Reply::Error(_) => 4,
        _ => 5,
    }
}

/// Every request of a batch, as [`describe`] puts each.
fn describe_all(trace: &Trace, transmits: &[Transmit]) -> String {
    let each: Vec<String> = transmits
        .iter()
        .map(|t| describe(trace, &t.command))
        .collect();
    each.join(", ")
}

/// `SetIfAbsent [r0, r1] of c1#3 px 300`.
fn describe(trace: &Trace, command: &Command) -> String {
    let keys: Vec<String> = command
        .spec()
        .keys()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    let ttl = command
        .ttl_ms()
        .map_or(String::new(), |ms| format!(" px {ms}"));
    format!(
        "{:?} {keys:?} of {}{ttl}",
        command.op(),
        trace.token(command.spec().token().as_bytes())
    )
}
