//! The conformance suite against `redlock-tokio`.

redlock_tests::conformance_tests!(redlock_tests::conformance::Tokio);
