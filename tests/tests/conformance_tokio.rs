//! The conformance suite against `redlock-tokio`.

redlock_tests::conformance_tests!(redlock_tests::conformance::Tokio);

/// A panic in `with_lock`'s work propagates and the lock is released on the way out.
#[test]
fn a_panic_in_with_lock_propagates_and_releases() {
    use std::time::Duration;

    let nodes = redlock_tests::Cluster::start(3);
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
