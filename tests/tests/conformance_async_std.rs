//! The conformance suite against `redlock-async-std`.

redlock_tests::conformance_tests!(redlock_tests::conformance::AsyncStd);
