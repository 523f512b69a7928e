//! `redlock nodes trust`: mark every node trusted for restart-aware voting.

use std::process::ExitCode;

use redlock_blocking::Vote;

use crate::cli::Global;
use crate::{Failure, UNAVAILABLE, client};

/// Trusts every node and prints each one's answer (never a password: nodes are `host:port`).
pub(crate) fn trust(global: &Global) -> Result<ExitCode, Failure> {
    let redlock = client(global, std::time::Duration::ZERO)?;
    let report = redlock.trust_nodes();
    let mut untrusted = 0;
    for node in &report {
        let trusted = node.result == Vote::Granted;
        untrusted += usize::from(!trusted);
        println!(
            "{}: {}",
            node.node,
            if trusted {
                "trusted".to_owned()
            } else {
                format!("NOT trusted ({:?})", node.result)
            }
        );
    }
    if untrusted > 0 || report.is_empty() {
        return Err((
            UNAVAILABLE,
            format!("{untrusted} node(s) could not be trusted; run it again once they answer"),
        ));
    }
    Ok(ExitCode::SUCCESS)
}
