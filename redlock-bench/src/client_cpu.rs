//! The bench process's own CPU time (user and system, every thread: the client's tasks, its
//! driver and connections, the runtime), from `getrusage(RUSAGE_SELF)`: what a contender costs
//! on the client's side, beside the servers' CPU ([`crate::server_cpu`]).
//!
//! It only reads; a platform where `getrusage` fails gives `None`, never a made-up number.

use std::time::Duration;

use nix::sys::resource::{UsageWho, getrusage};

/// The process's CPU time so far (`None`: not readable).
pub(crate) fn now() -> Option<Duration> {
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let time = |tv: nix::sys::time::TimeVal| {
        let secs = u64::try_from(tv.tv_sec()).ok()?;
        let micros = u32::try_from(tv.tv_usec()).ok()?;
        Some(Duration::from_secs(secs) + Duration::from_micros(u64::from(micros)))
    };
    Some(time(usage.user_time())? + time(usage.system_time())?)
}

/// The CPU time from `before` until now, in µs per cycle over `cycles` (`None`: not readable,
/// or no cycle).
pub(crate) fn per_cycle_us(before: Option<Duration>, cycles: u32) -> Option<f64> {
    let spent = now()?.checked_sub(before?)?;
    (cycles > 0).then(|| spent.as_secs_f64() * 1e6 / f64::from(cycles))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_work_shows_as_cpu_time() {
        let before = now();
        assert!(before.is_some(), "getrusage reads on Linux");
        let mut x = 0u64;
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let per = per_cycle_us(before, 10).expect("readable");
        // 30 ms of spinning over 10 cycles: at least a few ms each (the scheduler may take some).
        assert!(per >= 1000.0, "{per} µs per cycle");
        assert_eq!(per_cycle_us(before, 0), None, "no cycle, no rate");
    }
}
