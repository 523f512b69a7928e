//! What the workload needs from an adapter, and which adapter each client runs on.
//!
//! The critical sections are written once (see the section module), as async code generic over
//! [`Client`]. Each adapter supplies the calls: `async_client.rs` (tokio and async-std, generic
//! over the executor) awaits the library's futures on its runtime; `blocking_client.rs` makes blocking
//! calls inside futures that are ready on their first poll, and runs the same code on a thread
//! of its own (nothing in it ever waits on a future there).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_core::Config;
use redlock_core::ReleaseReport;
use redlock_redis::Error;

use super::counter::Counter;
use super::section::{ScopedEnd, ScopedWork};
use super::workload::{Planner, Shared};

/// Which adapter a client runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum AdapterKind {
    /// `redlock-tokio`, each client a task of one shared multi-thread runtime.
    Tokio,
    /// `redlock-async-std`, each client a task of async-std's global executor.
    AsyncStd,
    /// `redlock-blocking`, each client on a thread of its own.
    Blocking,
}

impl AdapterKind {
    /// Every adapter, in report order.
    pub const ALL: [Self; 3] = [Self::Tokio, Self::AsyncStd, Self::Blocking];

    /// The crate's name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tokio => "redlock-tokio",
            Self::AsyncStd => "redlock-async-std",
            Self::Blocking => "redlock-blocking",
        }
    }

    /// The adapter of client `index` in the default mix: the adapters in turn (of 8 clients,
    /// 3 tokio, 3 async-std, 2 blocking), so that every adapter has clients on every kind of
    /// link and contends with every other.
    pub fn for_client(index: usize) -> Self {
        Self::ALL[index % Self::ALL.len()]
    }

    /// Whether an acquisition can be abandoned half-way (an async adapter's future dropped). A
    /// blocking call runs to its end: its clients never plan a cancelled `lock`.
    pub fn can_cancel(self) -> bool {
        match self {
            Self::Tokio | Self::AsyncStd => true,
            Self::Blocking => false,
        }
    }
}

/// One client of the run, as the section code drives it: a `Redlock` of some adapter and a
/// connection to the counter server. Every future it returns is `Send`, so that the section
/// code, generic over the adapter, can run on a multi-thread executor.
pub(crate) trait Client: Sized + Send + Sync + 'static {
    /// The adapter.
    const KIND: AdapterKind;
    /// Its held lock.
    type Lock: ClientLock;
    /// Its connection to the counter server.
    type Counter: Counter;

    /// The client's checked settings.
    fn config(&self) -> &Config;

    /// The connection to the counter server.
    fn counter(&mut self) -> &mut Self::Counter;

    /// `lock(resource, ttl)`.
    fn lock(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Self::Lock, Error>> + Send;

    /// `try_lock(resource, ttl)`.
    fn try_lock(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Self::Lock, Error>> + Send;

    /// `with_lock(resource, ttl, ..)` whose work is `work` (run against the counter, watching
    /// the adapter's lease); what the work saw goes to `end` as soon as the work is over, so that
    /// it is there even if `with_lock` then never returns.
    fn with_lock(
        &mut self,
        resource: &str,
        ttl: Duration,
        work: ScopedWork<'_>,
        end: &mut Option<ScopedEnd>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Waits `duration`.
    fn sleep(duration: Duration) -> impl Future<Output = ()> + Send;

    /// `future`, given up (dropped) once `limit` has passed: `None` then. A blocking adapter
    /// cannot give up: its calls run to their end (a call past its limit shows in its time).
    fn within<F>(limit: Duration, future: F) -> impl Future<Output = Option<F::Output>> + Send
    where
        F: Future + Send,
        F::Output: Send;

    /// Runs `future` to its end from a thread outside the adapter's runtime (the test thread,
    /// for the checks after the run).
    fn block_on<F: Future>(&self, future: F) -> F::Output;

    /// Runs `sections` (this client's whole run, which hands the client back) the way the
    /// adapter runs code: a task, or a thread.
    fn start(sections: impl Future<Output = Self> + Send + 'static) -> Box<dyn Running>;
}

/// A lock held by a [`Client`].
pub(crate) trait ClientLock: Send {
    /// The token stored under the keys.
    fn token(&self) -> Vec<u8>;
    /// The end of validity the library reports.
    fn valid_until(&self) -> Instant;
    /// The TTL of the last acquisition or extension.
    fn ttl(&self) -> Duration;
    /// The nodes' votes on the acquisition, for messages.
    fn votes(&self) -> String;
    /// `extend(ttl)`.
    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<(), Error>> + Send;
    /// `release()`.
    fn release(self) -> impl Future<Output = ReleaseReport> + Send;
}

/// What the work inside `with_lock` can know about its lock.
pub(crate) trait Lease: Sync {
    /// The current end of validity.
    fn valid_until(&self) -> Instant;
    /// Whether the lock has been lost.
    fn is_lost(&self) -> bool;
    /// Waits `duration`, or less if the lock is lost first; returns whether it was.
    fn lost_within(&self, duration: Duration) -> impl Future<Output = bool> + Send;
}

/// A client whose sections are running.
pub(crate) trait Running: Send {
    /// Waits until `by` for the sections to end: the client back (for the checks after the
    /// run), or why not (it panicked, or had not finished by then).
    fn join(self: Box<Self>, by: Instant) -> Result<Box<dyn Finished>, String>;
}

/// A client whose sections are over, for the checks after the run.
pub(crate) trait Finished {
    /// Once the faults are healed: takes a lock on `resource` from the test thread, and hands
    /// its token and votes to `check` (which returns what is wrong, if anything), then releases
    /// it; the release report is added to what `check` found.
    fn lock_and_check(
        &self,
        resource: &str,
        ttl: Duration,
        check: &mut dyn FnMut(&[u8], &str) -> Option<String>,
    ) -> Result<Option<String>, Error>;
}

impl<C: Client> Finished for C {
    fn lock_and_check(
        &self,
        resource: &str,
        ttl: Duration,
        check: &mut dyn FnMut(&[u8], &str) -> Option<String>,
    ) -> Result<Option<String>, Error> {
        let lock = self.block_on(self.lock(resource, ttl))?;
        let found = check(&lock.token(), &lock.votes());
        let report = self.block_on(lock.release());
        Ok(found.map(|found| {
            let released: Vec<String> = report
                .nodes
                .iter()
                .enumerate()
                .map(|(node, result)| format!("node {node}: {result:?}"))
                .collect();
            format!("{found}; release {}", released.join(", "))
        }))
    }
}

/// Starts client `index` of kind `C`: its whole run of sections, as the adapter runs code.
pub(crate) fn start<C: Client>(
    client: C,
    index: usize,
    planner: Planner,
    shared: &Arc<Shared>,
) -> Box<dyn Running> {
    C::start(super::section::run(
        client,
        index,
        planner,
        Arc::clone(shared),
    ))
}
