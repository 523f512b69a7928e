//! The conformance suite against `redlock-async-std` driven by `smol::block_on` and smol's
//! executor: what smol users run (async-std and smol share async-io underneath).

redlock_tests::conformance_tests!(redlock_tests::conformance::Smol);
