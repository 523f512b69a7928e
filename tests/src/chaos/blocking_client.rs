//! The `redlock-blocking` client of the workload: a thread of its own, with its own `Redlock`
//! (its own node workers and connections, through its own proxies) and its own connection to the
//! counter server.
//!
//! The section code is async (written once for every adapter). Here every operation is a
//! blocking call inside a future that is ready on its first poll, and [`run_ready`] polls the
//! whole run once on the client's thread: the same steps in the same order, the thread blocked
//! in each call as blocking code is. Two things differ from the async clients: an acquisition is
//! never cancelled (the planner gives these clients no cancellable `lock`), and a call cannot be
//! given up at its limit — a slow call shows in its time, a call that never returns in the
//! thread not finishing.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redlock_blocking::{LeaseWatch, Lock, Redlock};
use redlock_core::Config;
use redlock_core::ReleaseReport;
use redlock_redis::Error;

use super::adapter::{AdapterKind, Client, ClientLock, Finished, Lease, Running};
use super::config::ChaosConfig;
use super::section::{ScopedEnd, ScopedWork};

/// How often [`BlockingThread::join`] looks whether the thread has finished.
const JOIN_POLL: Duration = Duration::from_millis(20);

/// One `redlock-blocking` client of the run.
pub(crate) struct BlockingClient {
    redlock: Redlock,
    counter: redis::Connection,
}

impl BlockingClient {
    /// A client for the nodes at `urls`, with the run's settings.
    pub(crate) fn connect(
        urls: &[String],
        counter: &redis::Client,
        config: &ChaosConfig,
    ) -> Result<Self, Error> {
        let redlock = Redlock::builder(urls)
            .config(|c| config.configure(c))
            .io_timeout(config.io_timeout)
            .build()?;
        let counter = counter
            .get_connection()
            .expect("connect to the counter server");
        Ok(Self { redlock, counter })
    }
}

impl Client for BlockingClient {
    const KIND: AdapterKind = AdapterKind::Blocking;
    type Lock = Lock;
    type Counter = redis::Connection;

    fn config(&self) -> &Config {
        self.redlock.config()
    }

    fn counter(&mut self) -> &mut redis::Connection {
        &mut self.counter
    }

    async fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.redlock.lock(resource, ttl)
    }

    async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.redlock.try_lock(resource, ttl)
    }

    async fn with_lock(
        &mut self,
        resource: &str,
        ttl: Duration,
        work: ScopedWork<'_>,
        end: &mut Option<ScopedEnd>,
    ) -> Result<(), Error> {
        let counter = &mut self.counter;
        self.redlock.with_lock(resource, ttl, |lease| {
            *end = Some(run_ready(work.run(&BlockingLease(lease), counter)));
        })
    }

    async fn sleep(duration: Duration) {
        thread::sleep(duration);
    }

    async fn within<F>(_limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        Some(future.await)
    }

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        run_ready(future)
    }

    fn start(sections: impl Future<Output = Self> + Send + 'static) -> Box<dyn Running> {
        let thread = thread::Builder::new()
            .name("chaos-blocking-client".to_owned())
            .spawn(move || run_ready(sections))
            .expect("spawn a blocking client's thread");
        Box::new(BlockingThread(thread))
    }
}

impl ClientLock for Lock {
    fn token(&self) -> Vec<u8> {
        redlock_redis::LeaseWatch::token(self).as_bytes().to_vec()
    }

    fn valid_until(&self) -> Instant {
        redlock_redis::LeaseWatch::valid_until(self)
    }

    fn ttl(&self) -> Duration {
        (**self).ttl()
    }

    fn votes(&self) -> String {
        format!("{:?}", (**self).votes())
    }

    async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        Lock::extend(self, ttl)
    }

    async fn release(self) -> ReleaseReport {
        Lock::release(self)
    }
}

/// `with_lock`'s lease, waited on by blocking this thread.
struct BlockingLease(LeaseWatch);

impl Lease for BlockingLease {
    fn valid_until(&self) -> Instant {
        self.0.valid_until()
    }

    fn is_lost(&self) -> bool {
        self.0.is_lost()
    }

    async fn lost_within(&self, duration: Duration) -> bool {
        self.0.wait_lost(duration)
    }
}

/// Runs `future`, which must never wait on anything (every operation of a blocking client is a
/// blocking call), to its end with one poll.
///
/// # Panics
/// If the future is not ready after that poll.
fn run_ready<F: Future>(future: F) -> F::Output {
    let mut context = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut context) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a blocking client's future waited on something"),
    }
}

/// A client's thread.
struct BlockingThread(JoinHandle<BlockingClient>);

impl Running for BlockingThread {
    fn join(self: Box<Self>, by: Instant) -> Result<Box<dyn Finished>, String> {
        while !self.0.is_finished() {
            if Instant::now() >= by {
                // A thread cannot be stopped: it is left to finish (or hang) on its own.
                return Err("still running".to_owned());
            }
            thread::sleep(JOIN_POLL);
        }
        match self.0.join() {
            Ok(client) => Ok(Box::new(client)),
            // Its own panic message was printed when it happened.
            Err(_panic) => Err("panicked".to_owned()),
        }
    }
}
