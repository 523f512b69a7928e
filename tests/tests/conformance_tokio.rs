//! The conformance suite against `redlock-tokio`.

redlock_tests::conformance_tests!(redlock_tests::conformance::Tokio);

/// A panic in `with_lock`'s work propagates and the lock is released on the way out.
#[test]
fn a_panic_in_with_lock_propagates_and_releases() {
    use std::time::Duration;

    let nodes = redlock_tests::Servers::start(3);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let redlock = redlock_tokio::Redlock::new(nodes.urls()).expect("client");
    let outcome = runtime.block_on(async {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            redlock
                .with_lock("boom", Duration::from_secs(60), |_| async {
                    panic!("work failed")
                })
                .await
        })
        .await
    });
    assert!(
        outcome.is_err_and(|e| e.is_panic()),
        "the panic reaches the caller"
    );
    let released =
        redlock_tests::conformance::scenarios::eventually(Duration::from_secs(5), || {
            nodes.count_with_key("boom") == 0
        });
    assert!(released, "the lock was released on the way out");
}

/// A driver that stops (its runtime shut down) tells every holder at once: the lock is lost
/// (`Error::Stopped`), and its release reports every node unreachable, never a clean release.
/// A later call on another runtime starts a new driver.
#[test]
fn a_stopped_driver_is_every_holders_loss() {
    use std::time::Duration;

    let nodes = redlock_tests::Servers::start(3);
    let redlock = redlock_tokio::Redlock::new(nodes.urls()).expect("client");
    let first = tokio::runtime::Runtime::new().expect("runtime");
    let lock = first
        .block_on(redlock.lock("stopped", Duration::from_secs(60)))
        .expect("lock");
    assert!(!lock.is_lost());
    drop(first);
    assert!(lock.is_lost(), "the holder learns it at once");
    assert!(matches!(lock.loss(), Some(redlock_tokio::Error::Stopped)));
    assert!(!lock.is_valid());
    let second = tokio::runtime::Runtime::new().expect("runtime");
    let report = second.block_on(lock.release());
    assert!(!report.is_clean(), "{report:?}");
    assert_eq!(report.unreachable(), 3, "{report:?}");
    // The client works on, through a new driver on this runtime.
    let again = second.block_on(redlock.try_lock("again", Duration::from_secs(10)));
    assert!(again.is_ok(), "{again:?}");
}

/// Called where its driver cannot run — outside any tokio runtime, or on one without timers —
/// a lock call fails at the caller with an error that says what is missing, never a panic in
/// the crate and never `Stopped` (issue 26). Nothing reaches the nodes.
#[test]
fn no_runtime_or_no_timers_is_an_error_at_the_caller() {
    use std::time::Duration;

    let nodes = redlock_tests::Servers::start(3);
    let redlock = redlock_tokio::Redlock::new(nodes.urls()).expect("client");
    // Outside any tokio runtime (async-std's executor polls the call).
    let outside = async_std::task::block_on(redlock.lock("nowhere", Duration::from_secs(10)));
    match outside {
        Err(err @ redlock_tokio::Error::NoRuntime(_)) => {
            assert!(err.to_string().contains("inside a tokio runtime"), "{err}");
        }
        other => panic!("expected NoRuntime, got {other:?}"),
    }
    // A runtime without timers.
    let no_timers = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    match no_timers.block_on(redlock.lock("nowhere", Duration::from_secs(10))) {
        Err(err @ redlock_tokio::Error::NoRuntime(_)) => {
            assert!(err.to_string().contains("no timers"), "{err}");
            assert!(format!("{err:?}").contains("enable_all()"), "{err:?}");
        }
        other => panic!("expected NoRuntime, got {other:?}"),
    }
    assert_eq!(nodes.count_with_key("nowhere"), 0);
    // With timers, the same client locks.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    assert!(
        runtime
            .block_on(redlock.try_lock("somewhere", Duration::from_secs(10)))
            .is_ok()
    );
}

redlock_tests::turn_tests!(redlock_tests::executor::TokioExecutor);
