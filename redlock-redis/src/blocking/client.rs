//! The client: settings, its driver thread, and the entry points that start a lock.

use std::sync::Arc;
use std::time::Duration;

use crate::{Builder, Deployment, Error, FromSettings, LockIds, NodeReport, Post, Settings};
use redlock_core::{LockRequest, ReleaseReport, Vote};

use super::driver::{Mailbox, start};
use super::lock::Lock;

/// A Redlock client over N independent Redis masters, for blocking code. Cheap to clone and
/// share between threads (`Send + Sync`): clones use the same driver.
///
/// # The driver
/// Building a client starts its driver thread and one worker thread per node (each node's
/// connection is made on first use; a node that is down at start is not an error). The driver
/// owns every lock of the client: it extends the locks that asked for it and releases dropped
/// ones, whether or not any thread waits on them. It ends once every clone of the client is
/// dropped and every lock is over.
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

struct Inner {
    deployment: Deployment,
    ids: LockIds,
    driver: Arc<Mailbox>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.driver.post(crate::Call::ClientGone);
    }
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.deployment.fmt(f)
    }
}

/// Configures a [`Redlock`]: `Redlock::builder(urls).quorum(3).retry(policy).build()`.
pub type RedlockBuilder = Builder<Redlock>;

impl FromSettings for Redlock {
    fn from_settings(settings: Settings) -> Result<Self, Error> {
        let labels: Arc<[Arc<str>]> = settings.nodes.iter().map(|a| a.label().clone()).collect();
        let driver = start(
            settings.config.clone(),
            labels.clone(),
            settings.nodes,
            settings.io_timeout,
            settings.memory_watch,
        )?;
        Ok(Redlock {
            inner: Arc::new(Inner {
                deployment: Deployment::new(settings.config, labels),
                ids: LockIds::default(),
                driver,
            }),
        })
    }
}

impl Redlock {
    entry_points!({} Lock, returned);

    /// A client with default settings for the masters at `urls`
    /// (`redis://[user:password@]host:port[/db]`; `rediss://` with the `tls` feature).
    /// Starts the driver thread; connects to nothing yet, and a node that is down is not an
    /// error.
    pub fn new<I, S>(urls: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::new(urls).build()
    }

    /// Starts configuring a client for the masters at `urls`:
    /// `Redlock::builder(urls).quorum(3).retry(policy).build()`.
    pub fn builder<I, S>(urls: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::new(urls)
    }

    fn driver(&self) -> Arc<dyn Post> {
        self.inner.driver.clone()
    }

    /// Locks as `request` says: several resources, a retry policy, a deadline, a token of its
    /// own, auto-extension (the driver extends the lock until it is released or dropped, and
    /// [`Lock::wait_lost`](super::LeaseWatch::wait_lost) returns if it cannot). Blocks
    /// the calling thread until the outcome (at most the policy's bound).
    pub fn acquire(&self, request: LockRequest) -> Result<Lock, Error> {
        let _span = tracing::debug_span!("redlock.acquire", ttl = ?request.ttl()).entered();
        let pending = crate::acquire(self.driver(), &self.inner.ids, request, false);
        pending.wait().map(Lock::new)
    }

    /// [`resume`](Redlock::resume) with a request of your own: several resources, or
    /// auto-extension once resumed. The request must carry the token.
    pub fn resume_request(&self, request: LockRequest) -> Result<Lock, Error> {
        let _span = tracing::debug_span!("redlock.resume", ttl = ?request.ttl()).entered();
        let pending = crate::acquire(self.driver(), &self.inner.ids, request, true);
        pending.wait().map(Lock::new)
    }

    /// Releases a lock by its resource and token, without holding it here (a lock another
    /// process acquired): compare-and-delete on every node. Keys under another token are never
    /// touched, so a wrong or stale token releases nothing: the report says so per node.
    pub fn release_by_token(
        &self,
        resource: impl Into<Vec<u8>>,
        token: impl Into<Vec<u8>>,
    ) -> Result<ReleaseReport, Error> {
        let (resource, token) = (resource.into(), token.into());
        crate::release_by_token(&*self.inner.driver, &self.inner.ids, resource, token)
            .wait()
            .unwrap_or(Err(Error::Stopped))
    }

    /// Marks every node trusted for restart-aware voting: a node with no epoch (a fresh
    /// deployment, or one that lost its memory) then votes at once instead of refusing for the
    /// longest TTL in use. **Only for an operator who knows that no lock is live on these
    /// nodes** (nothing was ever locked, or every holder is stopped and its TTL has passed):
    /// trusting a node that restarted inside a holder's validity lets a second client take the
    /// lock. Returns each node's answer (`Granted` = trusted).
    pub fn trust_nodes(&self) -> Result<Vec<NodeReport<Vote>>, Error> {
        crate::trust(&*self.inner.driver, &self.inner.ids)
            .wait()
            .ok_or(Error::Stopped)
    }

    /// Waits until nothing this client sent is outstanding any more (every request answered by
    /// its node, or failed, each within the I/O timeout; requests sent meanwhile count too),
    /// for at most `timeout`; returns whether that happened (`false` if the driver stopped
    /// first). For a process about to exit while its lock lives on, handed over by token: a
    /// lock call returns once a quorum granted, and the requests to the other nodes would
    /// otherwise die with the process.
    pub fn flush(&self, timeout: Duration) -> bool {
        crate::flush(&*self.inner.driver)
            .wait_timeout(timeout)
            .is_ok_and(|answer| answer.is_some())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Redlock;
    use crate::{Call, Error, Post};

    /// Waits until the driver thread sleeps with nothing to do and no thread steps the
    /// driver's state; the driver thread then takes the state again only when rung (nothing
    /// in these tests moves a deadline).
    fn idle(redlock: &Redlock) {
        assert!(redlock.flush(Duration::from_secs(5)), "nothing in flight");
        while !redlock.inner.driver.is_idle() {
            std::thread::yield_now();
        }
    }

    /// Runs `queue` with the client's driver on another thread while this thread steps its
    /// next input (the driver's state held): what it returns comes back on the receiver.
    fn while_stepping<T: Send + 'static>(
        redlock: &Redlock,
        queue: impl FnOnce(&dyn Post) -> T + Send + 'static,
    ) -> std::sync::mpsc::Receiver<T> {
        let (sent, queued) = std::sync::mpsc::channel();
        let driver = redlock.driver();
        let during: Box<dyn FnOnce() + Send> = Box::new(move || {
            let other = std::thread::spawn(move || queue(&*driver));
            let _ = sent.send(other.join().expect("the other thread"));
        });
        *redlock.inner.driver.during_step.lock().expect("hook") = Some(during);
        queued
    }

    #[test]
    fn an_input_queued_while_another_thread_steps_is_stepped_by_that_thread() {
        // Port 1 on loopback: nothing is connected before a batch goes out, and none does.
        let redlock = Redlock::new(["redis://127.0.0.1:1"]).expect("client");
        idle(&redlock);
        // While this thread steps a flush, another thread queues a second one: it finds the
        // state held and leaves its flush to this thread, after this thread took the queue.
        let second = while_stepping(&redlock, crate::flush);
        assert!(redlock.flush(Duration::from_secs(5)), "the first flush");
        let second = second.recv().expect("the second flush was queued");
        // No deadline wakes the driver thread: only the thread that let go of the state can
        // have stepped it.
        assert!(
            matches!(second.wait_timeout(Duration::from_secs(5)), Ok(Some(()))),
            "the flush queued during the step was left waiting"
        );
    }

    #[test]
    fn inputs_a_pass_took_behind_a_panic_are_dropped_not_left_waiting() {
        // Port 1 on loopback: nothing is connected before a batch goes out, and none does.
        let redlock = Redlock::new(["redis://127.0.0.1:1"]).expect("client");
        idle(&redlock);
        // While this thread steps a flush, another thread queues a panicking call and then a
        // second flush: this thread's next pass takes both at once, and the panic ends the
        // driver with the flush still in the pass's hands.
        let queued = while_stepping(&redlock, |driver| {
            let (responder, panicked) = crate::answer::answer::<()>();
            let (stepped_on, _) = std::sync::mpsc::channel();
            driver.post(Call::Panic {
                answer: responder,
                stepped_on,
            });
            (panicked, crate::flush(driver))
        });
        assert!(redlock.flush(Duration::from_secs(5)), "the first flush");
        let (panicked, second) = queued.recv().expect("both were queued");
        assert_eq!(panicked.wait(), None, "the panicking call's answer slot");
        // Dropped with the ended driver's state: its caller learns at once that no answer
        // comes, instead of waiting for good.
        assert!(
            matches!(second.wait_timeout(Duration::from_secs(5)), Ok(None)),
            "the flush behind the panic was left waiting"
        );
        let err = redlock
            .lock("after", Duration::from_secs(10))
            .expect_err("no driver");
        assert!(matches!(err, Error::Stopped), "{err:?}");
    }

    #[test]
    fn a_panic_handing_a_call_in_ends_the_driver_and_never_reaches_the_caller() {
        // Port 1 on loopback: nothing is connected before a batch goes out, and none does.
        let redlock = Redlock::new(["redis://127.0.0.1:1"]).expect("client");
        // The call below is stepped on this thread.
        idle(&redlock);
        let (responder, answer) = crate::answer::answer::<()>();
        let (stepped_on, thread) = std::sync::mpsc::channel();
        // Stepped on this thread: the panic stays inside `post`.
        redlock.driver().post(Call::Panic {
            answer: responder,
            stepped_on,
        });
        assert_eq!(
            thread.recv().ok(),
            Some(std::thread::current().id()),
            "the call was stepped on this thread (not the driver thread's)"
        );
        assert_eq!(answer.wait(), None, "the call's answer slot was dropped");
        // The driver ended: every later call learns it.
        let err = redlock
            .lock("after", Duration::from_secs(10))
            .expect_err("no driver");
        assert!(matches!(err, Error::Stopped), "{err:?}");
    }
}
