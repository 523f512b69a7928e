//! Graceful shutdown while holding a lock: on SIGTERM the worker finishes the step it is in,
//! stops, and the lock is released before the process exits — the next instance takes over at
//! once instead of waiting out the TTL.
//!
//! `cargo run -p redlock-tokio --example graceful_shutdown` (it sends itself SIGTERM after a
//! second; nodes from `REDLOCK_NODES`, or three local redis-servers started for the run).

use std::time::Duration;

use redlock_tokio::Redlock;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = redlock_local::Nodes::from_env_or_start(3)?;
    let redlock = Redlock::new(nodes.urls())?;

    // SIGTERM flips `stop`; the worker looks at it between steps.
    let (stop_tx, stop) = watch::channel(false);
    let mut sigterm = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        sigterm.recv().await;
        println!("SIGTERM: finishing the current step, then releasing");
        let _ = stop_tx.send(true);
    });
    // Stand-in for the orchestrator stopping this instance.
    tokio::spawn(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGTERM);
    });

    let steps = redlock
        .with_lock(
            "queue:consumer",
            Duration::from_secs(30),
            |lease| async move {
                let mut steps = 0;
                while !*stop.borrow() && lease.is_valid() {
                    tokio::time::sleep(Duration::from_millis(100)).await; // one unit of work
                    steps += 1;
                }
                steps
            },
        )
        .await?;
    // `with_lock` released the lock on its way out.
    println!("stopped after {steps} steps; lock released");

    let next = redlock
        .try_lock("queue:consumer", Duration::from_secs(30))
        .await?;
    println!("the next instance took the lock at once");
    next.release().await;
    Ok(())
}
