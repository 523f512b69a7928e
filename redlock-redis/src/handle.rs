//! A lock as its holder has it: a handle on a lock the client's driver owns. Every operation is
//! a message to the driver; awaiting (or waiting for) its answer is optional.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use redlock_core::{LockId, ReleaseReport};

use crate::answer::{Answer, ask};
use crate::driver::{Call, Post};
use crate::error::Error;
use crate::lease_watch::LeaseWatch;

/// What dropping a handle does.
const ON_DROP_RELEASE: u8 = 0;
const ON_DROP_DETACH: u8 = 1;
const ON_DROP_NOTHING: u8 = 2;

/// The body of every adapter's `Lock`: the lock's id at the driver, the way to reach it, and the
/// [`LeaseWatch`] the driver keeps current. `Send + Sync`: share it behind an `Arc`, use it from
/// any thread or task.
///
/// Dropping it releases the lock (a message to the driver; it never blocks), and auto-extension
/// stops with the release. A resumed lock that its caller never received is detached instead:
/// it belongs to whoever handed it over.
pub(crate) struct LockHandle {
    id: LockId,
    driver: Arc<dyn Post>,
    watch: LeaseWatch,
    on_drop: AtomicU8,
}

impl std::fmt::Debug for LockHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("resources", &self.watch.lease().spec())
            .field("valid_until", &self.watch.valid_until())
            .finish_non_exhaustive()
    }
}

impl LockHandle {
    /// A handle on lock `id`; `resumed` handles detach instead of releasing until claimed.
    pub(crate) fn new(id: LockId, driver: Arc<dyn Post>, watch: LeaseWatch, resumed: bool) -> Self {
        let on_drop = if resumed {
            ON_DROP_DETACH
        } else {
            ON_DROP_RELEASE
        };
        Self {
            id,
            driver,
            watch,
            on_drop: AtomicU8::new(on_drop),
        }
    }

    /// The caller has the handle: dropping it releases from now on.
    fn claim(&self) {
        self.on_drop.store(ON_DROP_RELEASE, Ordering::Release);
    }

    /// What the holder can know about the lock (kept current by the driver).
    pub(crate) fn watch(&self) -> &LeaseWatch {
        &self.watch
    }

    /// Asks the driver to extend the lock to `ttl` from now. The driver runs the extension
    /// whether or not the answer is awaited, and moves the validity on success; an answer
    /// answers this call only.
    pub(crate) fn extend(&self, ttl: Duration) -> Answer<Result<(), Error>> {
        ask(&*self.driver, |answer| Call::Extend {
            id: self.id,
            ttl,
            answer,
        })
    }

    /// Asks the driver to release the lock on every node; the report comes in the answer, which
    /// may be dropped (the release still runs).
    pub(crate) fn release(self) -> Releasing {
        self.on_drop.store(ON_DROP_NOTHING, Ordering::Release);
        let answer = ask(&*self.driver, |answer| Call::Release {
            id: self.id,
            answer: Some(answer),
        });
        Releasing {
            answer,
            unanswered: Some(self.watch.unanswered_release()),
        }
    }

    /// Stops driving the lock without releasing it: no more extensions; its keys stay on the
    /// nodes until their TTL (for a lock handed over by its token to another process). Requests
    /// already sent still run: the client's `flush` waits for them before exiting.
    pub(crate) fn detach(self) {
        self.on_drop.store(ON_DROP_NOTHING, Ordering::Release);
        self.driver.post(Call::Detach { id: self.id });
    }
}

impl Drop for LockHandle {
    fn drop(&mut self) {
        match self.on_drop.load(Ordering::Acquire) {
            ON_DROP_RELEASE => {
                tracing::debug!("lock dropped unreleased: the driver releases it");
                self.driver.post(Call::Release {
                    id: self.id,
                    answer: None,
                });
            }
            ON_DROP_DETACH => self.driver.post(Call::Detach { id: self.id }),
            _ => {}
        }
    }
}

/// A release on its way: `.await` it or [`wait`](Releasing::wait) for its report. If the
/// driver stopped before answering, the report says every node was unreachable (never clean).
#[derive(Debug)]
pub(crate) struct Releasing {
    answer: Answer<ReleaseReport>,
    unanswered: Option<ReleaseReport>,
}

impl Releasing {
    /// Blocks the calling thread until the report comes.
    #[cfg(feature = "blocking")]
    pub(crate) fn wait(self) -> ReleaseReport {
        let Self { answer, unanswered } = self;
        answer.wait().or(unanswered).unwrap_or_default()
    }
}

impl Future for Releasing {
    type Output = ReleaseReport;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ReleaseReport> {
        match Pin::new(&mut self.answer).poll(cx) {
            Poll::Ready(report) => {
                Poll::Ready(report.or(self.unanswered.take()).unwrap_or_default())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A lock being acquired (or resumed): `.await` it or [`wait`](Pending::wait) for it. Dropping
/// it before the answer came abandons the acquisition at the driver, which releases whatever
/// its requests may have set (a resumption just ends, changing nothing).
pub(crate) struct Pending {
    id: LockId,
    driver: Arc<dyn Post>,
    answer: Option<Answer<Result<LockHandle, Error>>>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("id", &self.id).finish()
    }
}

impl Pending {
    pub(crate) fn new(
        id: LockId,
        driver: Arc<dyn Post>,
        answer: Answer<Result<LockHandle, Error>>,
    ) -> Self {
        Self {
            id,
            driver,
            answer: Some(answer),
        }
    }

    fn settle(answer: Option<Result<LockHandle, Error>>) -> Result<LockHandle, Error> {
        let handle = answer.unwrap_or(Err(Error::Stopped))?;
        handle.claim();
        Ok(handle)
    }

    /// Blocks the calling thread until the lock is held or the acquisition failed.
    #[cfg(feature = "blocking")]
    pub(crate) fn wait(mut self) -> Result<LockHandle, Error> {
        let answer = self.answer.take().map(Answer::wait);
        Self::settle(answer.flatten())
    }
}

impl Future for Pending {
    type Output = Result<LockHandle, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(answer) = self.answer.as_mut() else {
            return Poll::Ready(Err(Error::Stopped));
        };
        match Pin::new(answer).poll(cx) {
            Poll::Ready(settled) => {
                self.answer = None;
                Poll::Ready(Self::settle(settled))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.answer.is_some() {
            tracing::debug!("acquisition cancelled: the driver abandons it");
            self.driver.post(Call::Abandon { id: self.id });
        }
    }
}
