//! What happened in a run, counted: the evidence that a run did something, and the figures a
//! report gives.

use std::fmt;
use std::ops::AddAssign;

/// Counters of one run, or summed over many.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Schedules (seeds) run.
    pub schedules: u64,
    /// Events the world processed.
    pub events: u64,
    /// Critical sections of positive length (leases granted and used).
    pub critical_sections: u64,
    /// Acquisitions that ended without the lock (after their retries).
    pub acquire_failures: u64,
    /// Acquisition rounds started.
    pub rounds: u64,
    /// Extensions that moved the validity.
    pub extensions: u64,
    /// Extensions that did not.
    pub extend_failures: u64,
    /// Holds that ended because the lock was lost or its validity ran out before the work was done.
    pub leases_lost: u64,
    /// Releases run to their end.
    pub releases: u64,
    /// Messages sent (requests and replies).
    pub messages: u64,
    /// Messages lost by the network.
    pub lost: u64,
    /// Messages delivered twice.
    pub duplicated: u64,
    /// Messages dropped by a partition.
    pub partitioned: u64,
    /// Requests that reached a node that was down.
    pub to_down_node: u64,
    /// Node crashes.
    pub crashes: u64,
    /// Client pauses.
    pub pauses: u64,
    /// Partitions.
    pub partitions: u64,
    /// Acquire requests a node refused because it lost its memory too recently
    /// (restart-aware voting): refused by the node's script, or by the connection (a push
    /// before the reply, or a native proof that found the memory young).
    pub ineligible_votes: u64,
    /// Restart-checked acquisitions sent without their check, the connection vouching for the
    /// node's memory (tracked connections only).
    pub vouched: u64,
    /// Vouched acquisitions whose seal read their proof's marker alone.
    pub marked_seals: u64,
    /// Missing epochs a tracked connection's proof claimed on a node that runs no script.
    pub epochs_claimed: u64,
    /// Runs with a violation.
    pub violations: u64,
}

impl AddAssign for Stats {
    fn add_assign(&mut self, o: Self) {
        self.schedules += o.schedules;
        self.events += o.events;
        self.critical_sections += o.critical_sections;
        self.acquire_failures += o.acquire_failures;
        self.rounds += o.rounds;
        self.extensions += o.extensions;
        self.extend_failures += o.extend_failures;
        self.leases_lost += o.leases_lost;
        self.releases += o.releases;
        self.messages += o.messages;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.partitioned += o.partitioned;
        self.to_down_node += o.to_down_node;
        self.crashes += o.crashes;
        self.pauses += o.pauses;
        self.partitions += o.partitions;
        self.ineligible_votes += o.ineligible_votes;
        self.vouched += o.vouched;
        self.marked_seals += o.marked_seals;
        self.epochs_claimed += o.epochs_claimed;
        self.violations += o.violations;
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} schedules, {} events, {} critical sections, {} failed acquisitions ({} rounds), \
             {} extensions (+{} failed), {} leases lost, {} releases; faults: {} messages \
             ({} lost, {} duplicated, {} cut by {} partitions, {} to down nodes), {} crashes, \
             {} pauses; {} votes refused after a memory loss; {} violations",
            self.schedules,
            self.events,
            self.critical_sections,
            self.acquire_failures,
            self.rounds,
            self.extensions,
            self.extend_failures,
            self.leases_lost,
            self.releases,
            self.messages,
            self.lost,
            self.duplicated,
            self.partitioned,
            self.partitions,
            self.to_down_node,
            self.crashes,
            self.pauses,
            self.ineligible_votes,
            self.violations,
        )
    }
}
