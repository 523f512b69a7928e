//! The client: node workers, settings, and the entry points that start a lock.

use std::sync::Arc;
use std::time::Duration;

use redlock_core::{Lifecycle, LockRequest, ReleaseReport, RetryPolicy, Vote};
use redlock_redis::{Builder, ClientCore, Error, FromSettings, NodeReport, Settings, Start};

use crate::conn::Node;
use crate::driver::{Dispatch, next_event};
use crate::lock::Lock;
use crate::notices::Notices;

/// How long a release by token waits for answers: the node timeout of a lock with this TTL
/// (1 s with the default settings).
const RELEASE_BY_TOKEN_TTL: Duration = Duration::from_secs(10);

/// A Redlock client over N independent Redis masters, for blocking code. Cheap to clone and
/// share between threads: clones use the same node workers (one thread and one connection per
/// node, made on first use; a node that is down at start is not an error).
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

struct Inner {
    core: ClientCore,
    nodes: Arc<[Node]>,
    /// Release notices for locks that wait (a subscriber thread per node, on first contention).
    notices: Notices,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.core.fmt(f)
    }
}

/// Configures a [`Redlock`]: `Redlock::builder(urls).quorum(3).retry(policy).build()`.
pub type RedlockBuilder = Builder<Redlock>;

impl FromSettings for Redlock {
    fn from_settings(settings: Settings) -> Result<Self, Error> {
        let io_timeout = settings.io_timeout;
        let (core, nodes) = ClientCore::from_settings(settings, Node::spawn)?;
        let notices = Notices::new(nodes.iter().map(|n| n.addr().clone()).collect(), io_timeout);
        Ok(Redlock {
            inner: Arc::new(Inner {
                core,
                nodes,
                notices,
            }),
        })
    }
}

impl Redlock {
    redlock_redis::client_constructors!();

    /// Locks `resource` for `ttl`, retrying as the client's retry policy says.
    pub fn lock(&self, resource: impl Into<Vec<u8>>, ttl: Duration) -> Result<Lock, Error> {
        self.acquire(LockRequest::new(resource, ttl))
    }

    /// Locks `resource` for `ttl` in a single round: no retry.
    pub fn try_lock(&self, resource: impl Into<Vec<u8>>, ttl: Duration) -> Result<Lock, Error> {
        self.acquire(LockRequest::new(resource, ttl).retry(RetryPolicy::once()))
    }

    /// Locks as `request` says: several resources, a retry policy, a deadline, a token of its
    /// own, auto-extension. Blocks the calling thread until the outcome (at most the policy's
    /// bound).
    pub fn acquire(&self, request: LockRequest) -> Result<Lock, Error> {
        let _span = tracing::debug_span!("redlock.acquire", ttl = ?request.ttl()).entered();
        self.start(Start::Acquire, &request)
    }

    /// Resumes a lock that another client (or an earlier process) acquired, from its resource
    /// and token: one compare-and-extend round to `ttl` proves the token holds it on a quorum,
    /// and the returned lock is valid from that round's start. A wrong or stale token is
    /// [`Error::NotHeld`], and no key is changed.
    pub fn resume(
        &self,
        resource: impl Into<Vec<u8>>,
        token: impl Into<Vec<u8>>,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        let _span = tracing::debug_span!("redlock.resume", ttl = ?ttl).entered();
        self.start(Start::Resume, &LockRequest::new(resource, ttl).token(token))
    }

    /// Releases a lock by its resource and token, without holding it here (a lock another
    /// process acquired): compare-and-delete on every node. Keys under another token are never
    /// touched, so a wrong or stale token releases nothing: the report says so per node.
    pub fn release_by_token(
        &self,
        resource: impl Into<Vec<u8>>,
        token: impl Into<Vec<u8>>,
    ) -> Result<ReleaseReport, Error> {
        let request = LockRequest::new(resource, RELEASE_BY_TOKEN_TTL).token(token);
        let mut lifecycle = self.inner.core.start(Start::ReleaseByToken, &request)?;
        let dispatch = Dispatch::new(self.inner.nodes.clone(), self.inner.notices.clone());
        Ok(self.run_release(&dispatch, &mut lifecycle))
    }

    /// Marks every node trusted for restart-aware voting: a node with no epoch (a fresh
    /// deployment, or one that lost its memory) then votes at once instead of refusing for the
    /// longest TTL in use. **Only for an operator who knows that no lock is live on these
    /// nodes** (nothing was ever locked, or every holder is stopped and its TTL has passed):
    /// trusting a node that restarted inside a holder's validity lets a second client take the
    /// lock. Returns each node's answer (`Granted` = trusted).
    pub fn trust_nodes(&self) -> Vec<NodeReport<Vote>> {
        let mut lifecycle = self.inner.core.trust();
        let dispatch = Dispatch::new(self.inner.nodes.clone(), self.inner.notices.clone());
        loop {
            let event = next_event(&dispatch, &mut lifecycle, None);
            if let Some(report) = self.inner.core.trusted(event) {
                return report;
            }
        }
    }

    /// Waits until every request this client sent so far has been answered by its node (or
    /// failed, each within the I/O timeout), for at most `timeout`; returns whether they all
    /// were. For a process about to exit while its lock lives on, handed over by token: a lock
    /// call returns once a quorum granted, and the requests to the other nodes would otherwise
    /// die with the process.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let waits: Vec<_> = self.inner.nodes.iter().map(Node::barrier).collect();
        waits.into_iter().all(|wait| {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            // A worker that is gone dropped the barrier: nothing of ours is left there.
            !matches!(
                wait.recv_timeout(left),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            )
        })
    }

    fn start(&self, start: Start, request: &LockRequest) -> Result<Lock, Error> {
        let mut lifecycle = self.inner.core.start(start, request)?;
        let dispatch = Dispatch::new(self.inner.nodes.clone(), self.inner.notices.clone());
        loop {
            let event = next_event(&dispatch, &mut lifecycle, None);
            if let Some(settled) = self.inner.core.acquired(&lifecycle, event) {
                return Ok(Lock::new(self.clone(), settled?, lifecycle, dispatch));
            }
        }
    }

    /// Runs `lifecycle` (told to release, or started as a release) to its report.
    pub(crate) fn run_release(
        &self,
        dispatch: &Dispatch,
        lifecycle: &mut Lifecycle,
    ) -> ReleaseReport {
        let _span = tracing::debug_span!("redlock.release").entered();
        loop {
            let event = next_event(dispatch, lifecycle, None);
            if let Some(report) = self.inner.core.released(lifecycle, event) {
                return report;
            }
        }
    }
}
