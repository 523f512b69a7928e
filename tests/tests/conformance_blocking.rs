//! The conformance suite against `redlock-blocking`.

redlock_tests::conformance_tests!(redlock_tests::conformance::Blocking);

/// A panic in `with_lock`'s work reaches the caller at once (the work runs on the caller's
/// thread; the client's driver thread keeps the lock extended and nothing waits on it), and the
/// lock, dropped on the way out, is released by the driver.
#[test]
fn a_panic_in_with_lock_propagates_and_releases() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::time::Duration;

    let nodes = redlock_tests::Servers::start(3);
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
