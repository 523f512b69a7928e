//! The caller's turn (`redlock_redis::aio`): a lock call on an idle async client runs the
//! driver's turn on the caller's own task. These scenarios force that path and then stop
//! polling it, midway: the promises of the driver hold whoever runs its turns.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use redlock_core::LockRequest;
use redlock_redis::aio::{Lock, Redlock};

use super::async_adapter::TestExecutor;
use crate::{FaultProxy, Servers};

/// A long TTL: nothing here may end by expiry.
const LONG: Duration = Duration::from_secs(60);

/// Polls `future` once (on an idle client, its caller runs the turn that sends its requests).
async fn poll_once<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *future).poll(cx) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        })
    })
    .await
}

fn client<E: TestExecutor>(nodes: &Servers) -> Redlock<E::Runtime> {
    Redlock::new(nodes.urls()).expect("client")
}

/// A client whose every node is reached through a proxy of its own, so that its replies can be
/// held back while a caller's first poll runs.
struct Held<E: TestExecutor> {
    redlock: Redlock<E::Runtime>,
    links: Vec<FaultProxy>,
}

impl<E: TestExecutor> Held<E> {
    fn new(nodes: &Servers) -> Self {
        let links: Vec<FaultProxy> = nodes
            .servers()
            .iter()
            .map(|server| FaultProxy::start(server.addr()))
            .collect();
        let redlock =
            Redlock::new(links.iter().map(FaultProxy::url).collect::<Vec<_>>()).expect("client");
        Self { redlock, links }
    }

    /// Connects every node (a lock taken and released), so that the next call's requests are
    /// written in its caller's turn, not queued behind a connection's set-up.
    async fn warm(&self) {
        let lock = self.redlock.lock("warm-up", LONG).await.expect("warm-up");
        assert_eq!(lock.release().await.released(), self.links.len());
    }

    /// Polls `future` once (its caller runs the turn that writes its requests) while every
    /// link holds its bytes, then lets them through: the first poll cannot find its answer,
    /// however fast the nodes answer or however late the caller's thread is scheduled (on a
    /// multi-thread runtime a reply may otherwise arrive while that turn still runs, and the
    /// turn takes it).
    async fn poll_once_held<F: Future + Unpin>(&self, future: &mut F) -> Option<F::Output> {
        for link in &self.links {
            link.stall();
        }
        let output = poll_once(future).await;
        for link in &self.links {
            link.heal();
        }
        output
    }
}

/// An acquisition polled once on an idle client (its caller ran the turn and became the one
/// its replies wake; the links hold the replies back during that poll) and then set aside, neither polled nor dropped, for several TTLs of an
/// auto-extended lock acquired meanwhile: that lock stays valid and held (its extensions'
/// replies are taken before any deadline passes, even while they wake a caller that does not
/// poll), another caller locks and releases meanwhile, and the set-aside acquisition is
/// granted once polled again.
pub fn a_caller_that_stops_polling_midway_stalls_no_lock<E: TestExecutor>() {
    let nodes = Servers::start(3);
    let executor = E::for_test();
    let held = Held::<E>::new(&nodes);
    let redlock = &held.redlock;
    let rival = client::<E>(&nodes);
    let ttl = Duration::from_millis(600);
    executor.block_on(async {
        held.warm().await;
        let mut aside = Box::pin(redlock.lock("set-aside", LONG));
        assert!(
            held.poll_once_held(&mut aside).await.is_none(),
            "still on its way"
        );
        let kept = redlock
            .acquire(LockRequest::new("kept", ttl).auto_extend())
            .await
            .expect("granted");
        let other = redlock
            .lock("other", LONG)
            .await
            .expect("granted meanwhile");
        assert_eq!(other.release().await.released(), 3, "released meanwhile");
        E::sleep(5 * ttl).await;
        assert!(
            kept.is_valid(),
            "{}: the auto-extended lock is valid after 5 TTLs",
            E::ADAPTER
        );
        assert!(
            rival.try_lock("kept", ttl).await.is_err(),
            "{}: and held",
            E::ADAPTER
        );
        let aside: Lock = aside.await.expect("the set-aside acquisition is granted");
        assert_eq!(aside.release().await.released(), 3);
        assert_eq!(kept.release().await.released(), 3, "released at last");
    });
}

/// An acquisition dropped right after its first poll — its caller ran the turn and its
/// requests are on their way, their replies held back during that poll — is finished by the driver's task: once nothing is outstanding
/// (`flush`), whatever it set is released (no key is left, long before its 60 s TTL), and the
/// key is granted to the next caller.
pub fn an_acquisition_dropped_midway_through_its_turn_is_abandoned<E: TestExecutor>() {
    let nodes = Servers::start(3);
    let executor = E::for_test();
    let held = Held::<E>::new(&nodes);
    let redlock = &held.redlock;
    executor.block_on(async {
        held.warm().await;
        let mut dropped = Box::pin(redlock.lock("dropped", LONG));
        assert!(
            held.poll_once_held(&mut dropped).await.is_none(),
            "still on its way"
        );
        drop(dropped);
        assert!(
            redlock.flush(Duration::from_secs(20)).await,
            "{}: the abandoned acquisition and its release are answered",
            E::ADAPTER
        );
    });
    assert_eq!(
        nodes.count_with_key("dropped"),
        0,
        "{}: the abandoned acquisition's keys are released",
        E::ADAPTER
    );
    executor.block_on(async {
        let lock = redlock
            .try_lock("dropped", LONG)
            .await
            .expect("granted to the next caller");
        assert_eq!(lock.release().await.released(), 3);
    });
}

/// An extension asked on an idle client and never polled (its caller sent it in a turn of its
/// own and would run the next turns when it polls, which it never does): the driver's task
/// still takes its replies, and the lock's validity moves without anyone awaiting it. The
/// extension's TTL is short (3 s: a 300 ms node timeout, before the driver's 1 s suspend
/// check), so replies left for a turn the timer starts would be handed in at their deadline
/// and count as timeouts: the validity would not move.
pub fn an_extension_never_polled_still_moves_the_validity<E: TestExecutor>() {
    let nodes = Servers::start(3);
    let executor = E::for_test();
    let redlock = client::<E>(&nodes);
    executor.block_on(async {
        let lock = redlock
            .lock("unpolled", Duration::from_secs(2))
            .await
            .expect("granted");
        let before = lock.valid_until();
        E::sleep(Duration::from_millis(300)).await;
        let extension = lock.extend(Duration::from_secs(3));
        let by = std::time::Instant::now() + Duration::from_secs(10);
        while lock.valid_until() <= before + Duration::from_secs(1) {
            assert!(
                std::time::Instant::now() < by,
                "{}: the unpolled extension moved the validity",
                E::ADAPTER
            );
            E::sleep(Duration::from_millis(20)).await;
        }
        drop(extension);
        assert_eq!(
            nodes.count_with_key("unpolled"),
            3,
            "{}: every node holds the key",
            E::ADAPTER
        );
        assert_eq!(lock.release().await.released(), 3);
    });
}

/// This module's scenarios as `#[test]`s for one async executor (`redlock_tests::executor`).
#[macro_export]
macro_rules! turn_tests {
    ($executor:ty) => {
        $crate::turn_tests!($executor;
            a_caller_that_stops_polling_midway_stalls_no_lock,
            an_acquisition_dropped_midway_through_its_turn_is_abandoned,
            an_extension_never_polled_still_moves_the_validity);
    };
    ($executor:ty; $($name:ident),+) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::turn::$name::<$executor>();
            }
        )+
    };
}
