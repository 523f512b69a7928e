//! What every black-box test of the `redlock` binary needs: run it against local servers and read
//! what it printed.

#![allow(dead_code, reason = "each test binary uses its own subset")]

use std::process::{Command, Output, Stdio};

use redlock_tests::Servers;

/// The binary under test, with REDLOCK_NODES pointing at `nodes`.
pub(crate) fn command(nodes: &Servers) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redlock"));
    command
        .env("REDLOCK_NODES", nodes.urls().join(","))
        .env_remove("REDLOCK_MAX_TTL")
        .stdin(Stdio::null());
    command
}

/// Runs `redlock ARGS` against `nodes` to its end.
pub(crate) fn redlock(nodes: &Servers, args: &[&str]) -> Output {
    command(nodes).args(args).output().expect("run redlock")
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// stdout parsed as one JSON document.
pub(crate) fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("not one JSON document ({err}): {}", stdout(output)))
}
