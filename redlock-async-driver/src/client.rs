//! The client: nodes, settings, and the entry points that start a lock.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_core::{Lifecycle, LockRequest, ReleaseReport, RetryPolicy, Vote};
use redlock_redis::{
    Builder, ClientCore, Error, FromSettings, LockFailure, NodeReport, Settings, Start,
};
use tracing::Instrument;

use crate::conn::Node;
use crate::driver::{Dispatch, next_event};
use crate::lock::Lock;
use crate::notices::Notices;
use crate::runtime::Runtime;

/// How long a release by token waits for answers: the node timeout of a lock with this TTL
/// (1 s with the default settings).
const RELEASE_BY_TOKEN_TTL: Duration = Duration::from_secs(10);

/// A Redlock client over N independent Redis masters. Cheap to clone and share: clones use the
/// same connections (one multiplexed, reconnecting connection per node, made on first use).
pub struct Redlock<R: Runtime> {
    pub(crate) inner: Arc<Inner>,
    runtime: PhantomData<fn() -> R>,
}

pub(crate) struct Inner {
    pub(crate) core: ClientCore,
    pub(crate) nodes: Arc<[Node]>,
    /// Release notices for locks that wait (opened on first contention).
    pub(crate) notices: Notices,
}

impl<R: Runtime> Clone for Redlock<R> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            runtime: PhantomData,
        }
    }
}

impl<R: Runtime> std::fmt::Debug for Redlock<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.core.fmt(f)
    }
}

impl<R: Runtime> Redlock<R> {
    redlock_redis::client_constructors!();

    /// Locks `resource` for `ttl`, retrying as the client's retry policy says.
    pub async fn lock(
        &self,
        resource: impl Into<Vec<u8>>,
        ttl: Duration,
    ) -> Result<Lock<R>, Error> {
        self.acquire(LockRequest::new(resource, ttl)).await
    }

    /// Locks `resource` for `ttl` in a single round: no retry.
    pub async fn try_lock(
        &self,
        resource: impl Into<Vec<u8>>,
        ttl: Duration,
    ) -> Result<Lock<R>, Error> {
        self.acquire(LockRequest::new(resource, ttl).retry(RetryPolicy::once()))
            .await
    }

    /// Locks as `request` says: several resources, a retry policy, a deadline, a token of its
    /// own, auto-extension.
    ///
    /// # Cancellation
    /// Dropping the returned future before it completes releases, in the background on the
    /// runtime, whatever keys its requests may have set; the release on each node runs after
    /// that node's outstanding request, so it cannot be overtaken by it.
    pub async fn acquire(&self, request: LockRequest) -> Result<Lock<R>, Error> {
        let span = tracing::debug_span!("redlock.acquire", ttl = ?request.ttl());
        self.start(Start::Acquire, &request).instrument(span).await
    }

    /// Resumes a lock that another client (or an earlier process) acquired, from its resource
    /// and token: one compare-and-extend round to `ttl` proves the token holds it on a quorum,
    /// and the returned lock is valid from that round's start. A wrong or stale token is
    /// [`Error::NotHeld`], and no key is changed. Cancelling it changes nothing either.
    pub async fn resume(
        &self,
        resource: impl Into<Vec<u8>>,
        token: impl Into<Vec<u8>>,
        ttl: Duration,
    ) -> Result<Lock<R>, Error> {
        let request = LockRequest::new(resource, ttl).token(token);
        let span = tracing::debug_span!("redlock.resume", ttl = ?ttl);
        self.start(Start::Resume, &request).instrument(span).await
    }

    /// Releases a lock by its resource and token, without holding it here (a lock another
    /// process acquired): compare-and-delete on every node. Keys under another token are never
    /// touched, so a wrong or stale token releases nothing: the report says so per node.
    pub async fn release_by_token(
        &self,
        resource: impl Into<Vec<u8>>,
        token: impl Into<Vec<u8>>,
    ) -> Result<ReleaseReport, Error> {
        let request = LockRequest::new(resource, RELEASE_BY_TOKEN_TTL).token(token);
        let lifecycle = self.inner.core.start(Start::ReleaseByToken, &request)?;
        let dispatch = Dispatch::new(&self.inner);
        Ok(self.run_release(dispatch, lifecycle).await)
    }

    /// Marks every node trusted for restart-aware voting: a node with no epoch (a fresh
    /// deployment, or one that lost its memory) then votes at once instead of refusing for the
    /// longest TTL in use. **Only for an operator who knows that no lock is live on these
    /// nodes** (nothing was ever locked, or every holder is stopped and its TTL has passed):
    /// trusting a node that restarted inside a holder's validity lets a second client take the
    /// lock. Returns each node's answer (`Granted` = trusted).
    pub async fn trust_nodes(&self) -> Vec<NodeReport<Vote>> {
        let mut lifecycle = self.inner.core.trust();
        let mut dispatch = Dispatch::<R>::new(&self.inner);
        let report = loop {
            let event = next_event(&mut dispatch, &mut lifecycle).await;
            if let Some(report) = self.inner.core.trusted(event) {
                break report;
            }
        };
        dispatch.finish();
        report
    }

    async fn start(&self, start: Start, request: &LockRequest) -> Result<Lock<R>, Error> {
        let mut pending = Pending {
            client: self.clone(),
            run: Some((
                self.inner.core.start(start, request)?,
                Dispatch::new(&self.inner),
            )),
        };
        let settled = pending.settle().await;
        match (settled, pending.run.take()) {
            (Ok(lease), Some((lifecycle, dispatch))) => {
                Ok(Lock::new(self.clone(), lease, lifecycle, dispatch))
            }
            (Err(err), run) => {
                if let Some((_, dispatch)) = run {
                    dispatch.finish();
                }
                Err(err)
            }
            // `settle` only borrows the run, so it is still there.
            (Ok(_), None) => Err(Error::Unavailable(LockFailure::default())),
        }
    }

    /// Releases through `lifecycle` (already told to release, or started as a release) and
    /// returns the report.
    pub(crate) async fn run_release(
        &self,
        mut dispatch: Dispatch<R>,
        mut lifecycle: Lifecycle,
    ) -> ReleaseReport {
        let span = tracing::debug_span!("redlock.release");
        let report = async {
            loop {
                let event = next_event(&mut dispatch, &mut lifecycle).await;
                if let Some(report) = self.inner.core.released(&lifecycle, event) {
                    return report;
                }
            }
        }
        .instrument(span)
        .await;
        dispatch.finish();
        report
    }
}

/// A lock being acquired (or resumed); releases in the background if dropped before it settles.
struct Pending<R: Runtime> {
    client: Redlock<R>,
    run: Option<(Lifecycle, Dispatch<R>)>,
}

impl<R: Runtime> Pending<R> {
    async fn settle(&mut self) -> Result<redlock_core::Lease, Error> {
        let Some((lifecycle, dispatch)) = &mut self.run else {
            return Err(Error::Unavailable(LockFailure::default()));
        };
        loop {
            let event = next_event(dispatch, lifecycle).await;
            if let Some(settled) = self.client.inner.core.acquired(lifecycle, event) {
                return settled;
            }
        }
    }
}

impl<R: Runtime> Drop for Pending<R> {
    fn drop(&mut self) {
        let Some((mut lifecycle, dispatch)) = self.run.take() else {
            return;
        };
        lifecycle.release(Instant::now());
        tracing::debug!("acquisition cancelled: releasing in the background");
        let client = self.client.clone();
        dispatch.runtime().clone().spawn(async move {
            client.run_release(dispatch, lifecycle).await;
        });
    }
}

/// Configures a [`Redlock`]: `Redlock::builder(urls).quorum(3).retry(policy).build()`.
pub type RedlockBuilder<R> = Builder<Redlock<R>>;

impl<R: Runtime> FromSettings for Redlock<R> {
    fn from_settings(settings: Settings) -> Result<Self, Error> {
        let io_timeout = settings.io_timeout;
        let (core, nodes) = ClientCore::from_settings(settings, Node::new)?;
        let notices = Notices::new(nodes.iter().map(|n| n.addr().clone()).collect(), io_timeout);
        Ok(Redlock {
            runtime: PhantomData,
            inner: Arc::new(Inner {
                core,
                nodes,
                notices,
            }),
        })
    }
}
