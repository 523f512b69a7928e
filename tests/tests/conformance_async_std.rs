//! The conformance suite against `redlock-async-std`.

redlock_tests::conformance_tests!(redlock_tests::conformance::AsyncStd);

redlock_tests::turn_tests!(redlock_tests::executor::AsyncStdExecutor);
