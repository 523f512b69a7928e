//! The network between clients and nodes: one [`FaultProxy`] per (client, node) pair, so that a
//! fault can cut one client off from one node while the others still reach it.

use std::time::Duration;

use crate::{FaultProxy, Servers};

/// A grid of proxies, `[client][node]`, each forwarding to its node.
///
/// The proxies outlive node restarts (a restarted node keeps its port), so the URLs a client
/// was built with stay valid for the whole run.
#[derive(Debug)]
pub struct Links {
    proxies: Vec<Vec<FaultProxy>>,
    urls: Vec<Vec<String>>,
}

impl Links {
    /// Starts a proxy for every pair of `clients` clients and the nodes of `servers`.
    ///
    /// # Panics
    /// If a proxy cannot be started.
    pub fn start(servers: &Servers, clients: usize) -> Self {
        let proxies: Vec<Vec<FaultProxy>> = (0..clients)
            .map(|_| {
                servers
                    .servers()
                    .iter()
                    .map(|server| FaultProxy::start(server.addr()))
                    .collect()
            })
            .collect();
        let urls = proxies
            .iter()
            .map(|row| {
                row.iter()
                    .zip(servers.servers())
                    .map(|(proxy, server)| server.url_via(proxy.addr()))
                    .collect()
            })
            .collect();
        Self { proxies, urls }
    }

    /// How many clients the grid serves.
    pub fn clients(&self) -> usize {
        self.proxies.len()
    }

    /// How many nodes each client reaches.
    pub fn nodes(&self) -> usize {
        self.proxies.first().map_or(0, Vec::len)
    }

    /// The node URLs client `client` must be built with (through its own proxies).
    pub fn urls(&self, client: usize) -> &[String] {
        &self.urls[client]
    }

    /// The proxy between `client` and `node`.
    pub fn get(&self, client: usize, node: usize) -> &FaultProxy {
        &self.proxies[client][node]
    }

    /// Ends every fault on every link: stalls, partitions, armed resets and latency.
    pub fn heal_all(&self) {
        for proxy in self.proxies.iter().flatten() {
            proxy.heal();
            proxy.set_latency(Duration::ZERO);
        }
    }

    /// Connections the proxies are forwarding right now, over the whole grid.
    pub fn open_connections(&self) -> usize {
        self.proxies
            .iter()
            .flatten()
            .map(FaultProxy::open_connections)
            .sum()
    }
}
