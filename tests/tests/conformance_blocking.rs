//! The conformance suite against `redlock-blocking`.

redlock_tests::conformance_tests!(redlock_tests::conformance::Blocking);

/// A panic in `with_lock`'s work propagates (no hang waiting for the extension thread) and the
/// lock is released on the way out.
#[test]
fn a_panic_in_with_lock_propagates_and_releases() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::time::Duration;

    let nodes = redlock_tests::Cluster::start(3);
    let redlock = redlock_blocking::Redlock::new(nodes.urls()).expect("client");
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        redlock.with_lock("boom", Duration::from_secs(60), |_| panic!("work failed"))
    }));
    assert!(outcome.is_err(), "the panic reaches the caller");
    let released =
        redlock_tests::conformance::scenarios::eventually(Duration::from_secs(5), || {
            nodes.count_with_key("boom") == 0
        });
    assert!(released, "the lock was released on the way out");
}

/// Many threads through one client: the node workers pipeline what queues up, and a pipeline
/// that meets a flushed script cache (`NOSCRIPT`) still gets every command run, in order.
#[test]
fn pipelined_requests_survive_a_script_flush() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    let nodes = redlock_tests::Cluster::start(3);
    // A generous I/O timeout: a request that times out drops its connection, and a command
    // still in flight on it can then land after a later one sent on a new connection (a key
    // left for its TTL). That is not what this test is about; on a loaded machine it would
    // blur the ordering this test checks.
    let redlock = redlock_blocking::Redlock::builder(nodes.urls())
        .io_timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let cycles = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for thread in 0..32 {
            let (redlock, cycles) = (&redlock, &cycles);
            scope.spawn(move || {
                for round in 0..20 {
                    let lock = redlock
                        .lock(format!("pipe:{thread}"), Duration::from_secs(30))
                        .unwrap_or_else(|err| panic!("thread {thread} round {round}: {err}"));
                    // A quorum answered in time (a loaded machine may answer the third late).
                    assert!(lock.release().released() >= 2);
                    cycles.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        // Flush the script caches while the threads run.
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(20));
            for server in nodes.servers() {
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query(&mut server.client())
                    .expect("SCRIPT FLUSH");
            }
        }
    });
    assert_eq!(cycles.into_inner(), 32 * 20);
    // Every release ran after its own acquire on every node: no key is left behind (a release
    // that overtook its acquire's NOSCRIPT re-run left one for the TTL).
    let clean = redlock_tests::conformance::scenarios::eventually(Duration::from_secs(10), || {
        nodes.servers().iter().map(|s| s.dbsize()).sum::<i64>() == 0
    });
    let left: Vec<String> = nodes
        .servers()
        .iter()
        .map(|server| {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("pipe:*")
                .query(&mut server.client())
                .unwrap_or_default();
            format!("{}: {keys:?}", server.addr())
        })
        .collect();
    assert!(clean, "keys left behind: {left:?}");
}
