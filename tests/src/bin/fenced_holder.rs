//! A fenced lock holder in a process of its own (a binary of the test package, so that the test
//! that drives it always finds it built), for the real-process Kleppmann test
//! (`tests/tests/kleppmann.rs`), which stops it with SIGSTOP past its validity.
//!
//! `fenced_holder <store-url> <node-url>...`: takes a fenced lock on `kleppmann` (TTL 500 ms,
//! never extended), prints `fence <n>`, waits for a line on stdin, then writes through the
//! fenced store with its fence — without checking its validity, as a process that was paused
//! without noticing would — and prints `accepted` or `rejected`.

use std::io::{BufRead, Write};
use std::time::Duration;

use redlock_blocking::{LockRequest, Redlock};
use redlock_tests::FencedStore;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let store_url = args
        .next()
        .ok_or("usage: fenced_holder <store-url> <node-url>...")?;
    let nodes: Vec<String> = args.collect();
    let redlock = Redlock::new(&nodes)?;
    let request = LockRequest::new("kleppmann", Duration::from_millis(500)).fenced();
    let lock = redlock.acquire(request)?;
    let fence = lock.fence().ok_or("a fenced lock has a fence")?;
    println!("fence {fence}");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let store = FencedStore::new(&store_url, "kleppmann:data");
    let accepted = store.write(fence, "from the paused holder");
    println!("{}", if accepted { "accepted" } else { "rejected" });
    std::io::stdout().flush()?;
    drop(lock);
    Ok(())
}
