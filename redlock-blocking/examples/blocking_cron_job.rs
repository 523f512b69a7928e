//! A scheduled job that must run once across a fleet, in blocking code: every host's cron fires
//! at the same minute, each tries the lock, one runs the job, the others skip this run. The job
//! checks its lease before each step and stops (without committing) if the lock was lost.
//!
//! `cargo run -p redlock-blocking --example blocking_cron_job` (nodes from `REDLOCK_NODES`, or three
//! local redis-servers started for the run).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use redlock_blocking::{Error, LeaseWatch, LockRequest, Redlock, RetryPolicy};

/// One host's cron run: take the job's lock, or skip.
fn cron_tick(host: &str, redlock: &Redlock, runs: &AtomicUsize) -> Result<(), Error> {
    // A few quick rounds only (hosts that fire together may split the votes in a round), far
    // shorter than the job: a host that did not get it finds it held, and skips this run.
    let retry = RetryPolicy::default()
        .attempts(3)
        .delay(Duration::from_millis(10))
        .jitter(Duration::from_millis(20));
    let request = LockRequest::new("job:nightly-report", Duration::from_secs(5)).retry(retry);
    match redlock.with_lock_request(request, |lease| nightly_report(&lease, runs)) {
        Ok(Ok(rows)) => println!("{host}: ran the report ({rows} rows)"),
        Ok(Err(step)) => println!("{host}: lock lost at step {step}; nothing committed"),
        Err(Error::Contended(_)) => println!("{host}: another host has it; skipping"),
        Err(err) => return Err(err),
    }
    Ok(())
}

/// The job: several steps, each only while the lock is still valid. The driver thread extends
/// the lock while this runs; a step that waits can wait on the lock's loss instead of sleeping.
fn nightly_report(lease: &LeaseWatch, runs: &AtomicUsize) -> Result<u32, u32> {
    let mut rows = 0;
    for step in 1..=3 {
        if !lease.is_valid() || lease.wait_lost(Duration::from_millis(200)) {
            return Err(step);
        }
        rows += 10;
    }
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(rows)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = redlock_local::Nodes::from_env_or_start(3)?;
    let mut ran = Vec::new();
    for minute in 0..3 {
        let runs = Arc::new(AtomicUsize::new(0));
        println!("-- minute {minute}: cron fires on every host");
        // Cron fires on every host at the same instant: the three start together.
        let fire = Arc::new(Barrier::new(3));
        let hosts: Vec<_> = ["host-a", "host-b", "host-c"]
            .into_iter()
            .map(|host| {
                // Each host is its own process with its own client; here, a thread each.
                let redlock = Redlock::new(nodes.urls());
                let (runs, fire) = (runs.clone(), fire.clone());
                thread::spawn(move || {
                    let redlock = redlock?;
                    fire.wait();
                    cron_tick(host, &redlock, &runs)
                })
            })
            .collect();
        for host in hosts {
            host.join().expect("a host's thread panicked")?;
        }
        ran.push(runs.load(Ordering::SeqCst));
    }
    println!("runs per minute: {ran:?}");
    // The lock's promise: never twice in one minute. (A minute in which every host's rounds
    // split the votes would run nobody; it is rare, and the next minute runs.)
    assert!(ran.iter().all(|&runs| runs <= 1), "at most once per minute");
    assert!(ran.contains(&1), "the job ran");
    Ok(())
}
