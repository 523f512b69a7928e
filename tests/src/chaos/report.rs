//! What a chaos run found: the figures it prints and the invariants it checks.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::adapter::AdapterKind;
use super::faults::FaultCounts;
use super::workload::Tally;

/// A resource's counter against the sections that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterCheck {
    /// The resource.
    pub resource: usize,
    /// Sections that wrote its counter.
    pub written: u64,
    /// The counter's value on the counter server.
    pub counter: i64,
}

/// A node's client connections before the clients existed and after they were dropped, both
/// counted by an inspection connection that counts itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionCheck {
    /// The node's address.
    pub node: String,
    /// `connected_clients` before the run.
    pub before: u64,
    /// `connected_clients` once the clients were dropped (after waiting for it to settle).
    pub after: u64,
}

/// Everything a run measured. [`ChaosReport::violations`] lists the invariants it broke.
#[derive(Debug, Clone)]
pub struct ChaosReport {
    /// The seed of the schedule.
    pub seed: u64,
    /// The command that reruns the schedule.
    pub rerun: String,
    /// How long faults were injected.
    pub duration: Duration,
    /// The whole run: setup, faults, settling and checks.
    pub elapsed: Duration,
    /// Clients in the run.
    pub clients: usize,
    /// The adapter of each client.
    pub client_adapters: Vec<AdapterKind>,
    /// What each node said it was (`redis 7.0.15`, `valkey 8.1.8`).
    pub servers: Vec<String>,
    /// Faults injected, per kind.
    pub faults: FaultCounts,
    /// What the clients did, all adapters together.
    pub tally: Tally,
    /// What the clients of each adapter did.
    pub by_adapter: BTreeMap<AdapterKind, Tally>,
    /// Critical sections recorded.
    pub windows: usize,
    /// Overlapping windows of one resource, described.
    pub overlaps: Vec<String>,
    /// Each resource's counter.
    pub counters: Vec<CounterCheck>,
    /// Clients that panicked or did not finish.
    pub client_failures: Vec<String>,
    /// Clients that, once the faults were healed, could not lock on every node again.
    pub recovery_failures: Vec<String>,
    /// Keys of ours on the nodes right after the run (before their TTLs could pass): locks
    /// whose release did not reach every node in time.
    pub keys_at_end: usize,
    /// Keys of ours still on a node once every TTL had passed (`node: key`).
    pub keys_left: Vec<String>,
    /// Client connections per node.
    pub connections: Vec<ConnectionCheck>,
    /// Connections the proxies still forwarded after the clients were dropped.
    pub proxy_connections_after: usize,
    /// Alive tasks on the tokio clients' runtime before the clients existed (async-std has no
    /// such count; blocking clients have no tasks).
    pub tasks_before: usize,
    /// Alive tasks on the tokio clients' runtime once the clients were dropped.
    pub tasks_after: usize,
}

impl ChaosReport {
    /// Every invariant the run broke, one line each; empty for a clean run.
    pub fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        for overlap in &self.overlaps {
            found.push(format!("double holding: {overlap}"));
        }
        for check in &self.counters {
            if i64::try_from(check.written).ok() != Some(check.counter) {
                found.push(format!(
                    "resource {}: counter is {} but {} sections wrote it",
                    check.resource, check.counter, check.written
                ));
            }
        }
        for (adapter, tally) in &self.by_adapter {
            for overrun in &tally.calls.overruns {
                found.push(format!("call past its bound: {} {overrun}", adapter.name()));
            }
            for error in tally.unexpected_errors() {
                found.push(format!("unexpected error: {} {error}", adapter.name()));
            }
        }
        for failure in &self.client_failures {
            found.push(format!("client failed: {failure}"));
        }
        for failure in &self.recovery_failures {
            found.push(format!("not recovered: {failure}"));
        }
        for key in &self.keys_left {
            found.push(format!("key left after its TTL: {key}"));
        }
        for check in &self.connections {
            if check.after > check.before {
                found.push(format!(
                    "{}: {} client connections after the run, {} before",
                    check.node, check.after, check.before
                ));
            }
        }
        if self.proxy_connections_after > 0 {
            found.push(format!(
                "{} proxied connections still open after the clients were dropped",
                self.proxy_connections_after
            ));
        }
        if self.tasks_after > self.tasks_before {
            found.push(format!(
                "{} tasks alive on the tokio clients' runtime after the clients were dropped, {} \
                 before",
                self.tasks_after, self.tasks_before
            ));
        }
        found
    }
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} — {:?} of faults, {:.1} s in all — rerun: {}",
            self.seed,
            self.duration,
            self.elapsed.as_secs_f64(),
            self.rerun
        )?;
        writeln!(
            f,
            "faults: {} ({} in all)",
            self.faults,
            self.faults.total()
        )?;
        writeln!(f, "{}", self.tally)?;
        for (adapter, tally) in &self.by_adapter {
            let clients: Vec<String> = self
                .client_adapters
                .iter()
                .enumerate()
                .filter(|(_, kind)| *kind == adapter)
                .map(|(index, _)| index.to_string())
                .collect();
            writeln!(
                f,
                "  {} (clients {}): {}",
                adapter.name(),
                clients.join(", "),
                tally.summary()
            )?;
        }
        let counters: Vec<String> = self
            .counters
            .iter()
            .map(|c| format!("r{}: {} (written {})", c.resource, c.counter, c.written))
            .collect();
        writeln!(
            f,
            "windows: {}, overlapping: {}; counters: {}; clients that locked on every node \
             again after healing: {} of {}",
            self.windows,
            self.overlaps.len(),
            counters.join(", "),
            self.clients - self.client_failures.len() - self.recovery_failures.len(),
            self.clients
        )?;
        let connections: Vec<String> = self
            .connections
            .iter()
            .map(|c| format!("{} → {}", c.before, c.after))
            .collect();
        writeln!(
            f,
            "keys of ours right after the run: {}, after every TTL: {}; node connections \
             (incl. the inspecting one): {}; proxied connections after: {}; tokio runtime tasks: {} → \
             {}",
            self.keys_at_end,
            self.keys_left.len(),
            connections.join(", "),
            self.proxy_connections_after,
            self.tasks_before,
            self.tasks_after
        )?;
        let violations = self.violations();
        if violations.is_empty() {
            write!(f, "violations: none")
        } else {
            write!(f, "violations ({}):", violations.len())?;
            for violation in violations {
                write!(f, "\n  - {violation}")?;
            }
            Ok(())
        }
    }
}
