//! The simulated network between clients and nodes: per-message delay, loss, duplication and
//! reordering drawn from a seeded stream, and partitions between a client and a set of nodes.
//!
//! Every message (request or reply) draws its own delay; a share of them draws a long extra delay
//! (well past the engine's per-node timeout, sometimes past a whole TTL), which is how late and
//! reordered replies arise. With [`NetConfig::fifo`] each direction of each client–node link
//! keeps its order, as one TCP connection does (a held-back message holds back the ones behind
//! it); messages on different links overtake each other freely. Without it, any message may
//! overtake any other. A partition drops every message between its client and its nodes, in both
//! directions, sent or arriving while it lasts.

use std::collections::BTreeMap;
use std::time::Duration;

use super::clock::{Nanos, nanos};
use crate::rng::TestRng;

/// How messages travel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetConfig {
    /// Every message's delay is uniform in this range.
    pub delay: (Duration, Duration),
    /// Share of messages delayed by an extra uniform `[0, reorder_delay]`: these arrive after
    /// messages sent later, and often after the request's deadline.
    pub reorder: f64,
    /// The longest extra delay of a reordered message.
    pub reorder_delay: Duration,
    /// Share of messages lost.
    pub loss: f64,
    /// Share of messages delivered twice (each copy with its own delay).
    pub duplicate: f64,
    /// Each direction of each client–node link delivers in order (one connection per node, as
    /// the adapters keep); otherwise messages on the same link overtake each other too.
    pub fifo: bool,
}

impl NetConfig {
    /// A LAN that never misbehaves: 0.1 to 2 ms, nothing lost, duplicated or held back.
    pub fn clean() -> Self {
        Self {
            delay: (Duration::from_micros(100), Duration::from_millis(2)),
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
            fifo: true,
        }
    }

    /// A bad network: 5 % lost, 5 % duplicated, 8 % held back by up to 400 ms; in order on
    /// each link.
    pub fn lossy() -> Self {
        Self {
            delay: (Duration::from_micros(100), Duration::from_millis(5)),
            reorder: 0.08,
            reorder_delay: Duration::from_millis(400),
            loss: 0.05,
            duplicate: 0.05,
            fifo: true,
        }
    }
}

/// Messages between one client and some nodes are dropped during `[from, until)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Partition {
    pub(crate) client: usize,
    /// Bit `i` set: node `i` is cut off from the client.
    pub(crate) nodes: u64,
    pub(crate) from: Nanos,
    pub(crate) until: Nanos,
}

/// What happens to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transit {
    /// Never arrives.
    Lost,
    /// Arrives at these true times (a second one when duplicated).
    Arrives(Nanos, Option<Nanos>),
}

/// One direction of one client–node link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Link {
    pub(crate) client: usize,
    pub(crate) node: usize,
    pub(crate) to_node: bool,
}

/// The network of one run.
#[derive(Debug, Clone)]
pub(crate) struct Network {
    config: NetConfig,
    partitions: Vec<Partition>,
    /// For FIFO links: the latest arrival scheduled on each link.
    last_arrival: BTreeMap<Link, Nanos>,
}

impl Network {
    /// A network with `config` and these partitions.
    pub(crate) fn new(config: NetConfig, partitions: Vec<Partition>) -> Self {
        Self {
            config,
            partitions,
            last_arrival: BTreeMap::new(),
        }
    }

    /// The partitions of the run.
    pub(crate) fn partitions(&self) -> &[Partition] {
        &self.partitions
    }

    /// Whether `client` and `node` are cut off from each other at `t`.
    pub(crate) fn cut(&self, t: Nanos, client: usize, node: usize) -> bool {
        self.partitions
            .iter()
            .any(|p| p.client == client && p.nodes >> node & 1 == 1 && p.from <= t && t < p.until)
    }

    /// Draws the fate of a message sent at `t` on `link`.
    pub(crate) fn transit(&mut self, rng: &mut TestRng, t: Nanos, link: Link) -> Transit {
        if rng.chance(self.config.loss) {
            return Transit::Lost;
        }
        let mut first = t + self.delay(rng);
        let mut second = rng
            .chance(self.config.duplicate)
            .then(|| t + self.delay(rng));
        if self.config.fifo {
            let last = self.last_arrival.entry(link).or_insert(0);
            first = first.max(*last + 1);
            *last = first;
            if let Some(second) = &mut second {
                *second = (*second).max(*last + 1);
                *last = *second;
            }
        }
        Transit::Arrives(first, second)
    }

    fn delay(&self, rng: &mut TestRng) -> Nanos {
        let mut delay = nanos(rng.duration(self.config.delay));
        if rng.chance(self.config.reorder) {
            delay += nanos(rng.duration((Duration::ZERO, self.config.reorder_delay)));
        }
        delay.max(1)
    }
}
