//! A scheduled job that must run once across a fleet, on smol: every host's cron fires at the
//! same minute, each tries the lock, one runs the job, the others skip this run. The job checks
//! its lease before each step and stops (without committing) if the lock was lost.
//!
//! `cargo run -p redlock-smol --example smol_cron_job` (nodes from `REDLOCK_NODES`, or three local
//! redis-servers started for the run).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redlock_smol::{Error, LeaseWatch, LockRequest, Redlock, RetryPolicy};

/// One host's cron run: take the job's lock, or skip.
async fn cron_tick(host: &str, redlock: &Redlock, runs: &AtomicUsize) -> Result<(), Error> {
    // A few quick rounds only (hosts that fire together may split the votes in a round), far
    // shorter than the job: a host that did not get it finds it held, and skips this run.
    let retry = RetryPolicy::default()
        .attempts(3)
        .delay(Duration::from_millis(10))
        .jitter(Duration::from_millis(20));
    let request = LockRequest::new("job:nightly-report", Duration::from_secs(5)).retry(retry);
    match redlock
        .with_lock_request(request, |lease| nightly_report(lease, runs))
        .await
    {
        Ok(Ok(rows)) => println!("{host}: ran the report ({rows} rows)"),
        Ok(Err(step)) => println!("{host}: lock lost at step {step}; nothing committed"),
        Err(Error::Contended(_)) => println!("{host}: another host has it; skipping"),
        Err(err) => return Err(err),
    }
    Ok(())
}

/// The job: several steps, each only while the lock is still valid. The lock extends itself
/// while this runs.
async fn nightly_report(lease: LeaseWatch, runs: &AtomicUsize) -> Result<u32, u32> {
    let mut rows = 0;
    for step in 1..=3 {
        if !lease.is_valid() {
            return Err(step);
        }
        smol::Timer::after(Duration::from_millis(200)).await;
        rows += 10;
    }
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(rows)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = redlock_local::Nodes::from_env_or_start(3)?;
    smol::block_on(async {
        let mut ran = Vec::new();
        for minute in 0..3 {
            let runs = Arc::new(AtomicUsize::new(0));
            println!("-- minute {minute}: cron fires on every host");
            let mut hosts = Vec::new();
            // Cron fires on every host at the same instant: the three start together.
            let fire = Arc::new(smol::lock::Barrier::new(3));
            for host in ["host-a", "host-b", "host-c"] {
                // Each host is its own process with its own client; here, a task each.
                let redlock = Redlock::new(nodes.urls())?;
                let (runs, fire) = (runs.clone(), fire.clone());
                hosts.push(smol::spawn(async move {
                    fire.wait().await;
                    cron_tick(host, &redlock, &runs).await
                }));
            }
            for host in hosts {
                host.await?;
            }
            ran.push(runs.load(Ordering::SeqCst));
        }
        println!("runs per minute: {ran:?}");
        // The lock's promise: never twice in one minute. (A minute in which every host's rounds
        // split the votes would run nobody; it is rare, and the next minute runs.)
        assert!(ran.iter().all(|&runs| runs <= 1), "at most once per minute");
        assert!(ran.contains(&1), "the job ran");
        Ok(())
    })
}
