//! A condition variable that costs nothing to notify while no thread sleeps on it.
//!
//! `std`'s condition variable makes a system call on every notify, whether or not a thread
//! waits (on Linux, a `FUTEX_WAKE`). An answer is notified when it comes, a lease when it is
//! extended, lost or ended, and only a blocking caller ever sleeps on them: an async caller
//! paid a few system calls per lock cycle for nobody, on its own path to the answer.
//! [`Sleepers`] counts the threads asleep on it and notifies only when there is one.
//!
//! # What it never does
//! It never loses a wake-up: a sleeper counts itself while it holds the mutex guarding the
//! condition, before it sleeps; a notifier changes the condition under that mutex and reads
//! the count after it: either the sleeper counted itself before the change (the notifier's
//! lock comes after the sleeper's release, so the count is seen), or it checks the condition
//! after the change, and does not sleep.

use std::sync::Condvar;
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(feature = "blocking")]
use std::sync::{MutexGuard, PoisonError};
#[cfg(feature = "blocking")]
use std::time::Duration;

/// A condition variable and the number of threads asleep on it.
#[derive(Debug, Default)]
pub(crate) struct Sleepers {
    condvar: Condvar,
    asleep: AtomicUsize,
}

impl Sleepers {
    /// Wakes every sleeper, if there is one. Call it after changing the condition under its
    /// mutex (holding the mutex or not).
    pub(crate) fn notify_all(&self) {
        if self.asleep.load(Ordering::SeqCst) > 0 {
            self.condvar.notify_all();
        }
    }

    /// Sleeps until notified (or a spurious wake-up): check the condition again.
    #[cfg(feature = "blocking")]
    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.asleep.fetch_add(1, Ordering::SeqCst);
        let guard = self
            .condvar
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner);
        self.asleep.fetch_sub(1, Ordering::SeqCst);
        guard
    }

    /// Sleeps while `sleep` holds, at most `timeout` (a timeout beyond the clock's range:
    /// as long as it takes); the guard, `sleep` checked on it last.
    #[cfg(feature = "blocking")]
    pub(crate) fn wait_timeout_while<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
        sleep: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T> {
        self.asleep.fetch_add(1, Ordering::SeqCst);
        let (guard, _) = self
            .condvar
            .wait_timeout_while(guard, timeout, sleep)
            .unwrap_or_else(PoisonError::into_inner);
        self.asleep.fetch_sub(1, Ordering::SeqCst);
        guard
    }

    /// How many threads sleep on it now.
    #[cfg(all(test, feature = "blocking"))]
    pub(crate) fn asleep(&self) -> usize {
        self.asleep.load(Ordering::SeqCst)
    }
}

#[cfg(all(test, feature = "blocking"))]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    /// Long enough that only a lost wake-up runs it out.
    const PATIENCE: Duration = Duration::from_secs(60);

    #[test]
    fn a_sleeper_is_woken_by_a_change_made_while_it_sleeps() {
        let shared = Arc::new((Mutex::new(false), Sleepers::default()));
        let sleeper = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let (done, sleepers) = &*shared;
                let slept = Instant::now();
                let done = sleepers.wait_timeout_while(done.lock().unwrap(), PATIENCE, |d| !*d);
                *done && slept.elapsed() < PATIENCE
            })
        };
        // Wait until it sleeps: the notify must not be skipped then.
        let started = Instant::now();
        while shared.1.asleep() == 0 {
            assert!(started.elapsed() < PATIENCE, "never slept");
            std::thread::yield_now();
        }
        *shared.0.lock().unwrap() = true;
        shared.1.notify_all();
        assert!(
            sleeper.join().unwrap(),
            "woken by its timeout, not the notify"
        );
        assert_eq!(shared.1.asleep(), 0);
    }

    #[test]
    fn ten_thousand_hand_offs_race_their_sleepers_and_lose_no_wake_up() {
        // Two threads pass a turn back and forth, each sleeping until it is its own: every
        // notify races the other thread on its way to sleep.
        const TURNS: u64 = 10_000;
        let shared = Arc::new((Mutex::new(0u64), Sleepers::default()));
        let player = |parity: u64| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let (turn, sleepers) = &*shared;
                loop {
                    let mut turn =
                        sleepers.wait_timeout_while(turn.lock().unwrap(), PATIENCE, |turn| {
                            *turn < TURNS && *turn % 2 != parity
                        });
                    if *turn >= TURNS {
                        return true;
                    }
                    if *turn % 2 != parity {
                        // Woken by the timeout: a notify was lost.
                        return false;
                    }
                    *turn += 1;
                    drop(turn);
                    sleepers.notify_all();
                }
            })
        };
        let (even, odd) = (player(0), player(1));
        assert!(even.join().unwrap(), "a wake-up was lost");
        assert!(odd.join().unwrap(), "a wake-up was lost");
        assert_eq!(shared.1.asleep(), 0);
    }

    #[test]
    fn a_sleeper_that_times_out_no_longer_counts() {
        let done = Mutex::new(false);
        let sleepers = Sleepers::default();
        let guard =
            sleepers.wait_timeout_while(done.lock().unwrap(), Duration::from_millis(1), |d| !*d);
        assert!(!*guard);
        assert_eq!(sleepers.asleep(), 0);
    }
}
