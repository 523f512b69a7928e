//! The conformance suite against `redlock-blocking`.

redlock_tests::conformance_tests!(redlock_tests::conformance::Blocking);
