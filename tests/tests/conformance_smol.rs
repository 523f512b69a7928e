//! The conformance suite against `redlock-smol`, driven by `smol::block_on` and smol's
//! executor: what smol users run.

redlock_tests::conformance_tests!(redlock_tests::conformance::Smol);

redlock_tests::turn_tests!(redlock_tests::executor::SmolExecutor);
