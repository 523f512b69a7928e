//! `redlock`: distributed locks for scripts and cron jobs — run a command while holding a
//! Redlock lock, like `flock` but across machines, or take, extend and release a lock step by
//! step from different processes.
//!
//! ```text
//! redlock --node redis://10.0.0.1 --node redis://10.0.0.2 --node redis://10.0.0.3 \
//!     nightly-report -- ./make-report.sh
//! TOKEN=$(redlock acquire deploy --ttl 45s); ...; redlock release deploy "$TOKEN"
//! ```
//!
//! While `run`'s command runs the lock is extended; if it is lost (the nodes can no longer
//! confirm it), the command is terminated before the validity ends. Exit codes are listed in
//! `--help` ([`cli::EXIT_CODES`]). Node URLs may carry passwords: prefer `REDLOCK_NODES` over
//! `--node` so they stay out of the process list; they never appear in messages.

use std::process::ExitCode;

use clap::Parser;
use redlock_blocking::{ConfigError, Error, Redlock, RetryPolicy};

mod bench;
mod cli;
mod cluster;
mod demo;
mod duration;
mod guard;
mod histogram;
mod nodes;
mod output;
mod probe;
mod run;
mod status;
mod steps;
mod warnings;

use cli::{Cli, Cmd, Global, NodesCmd};

/// The lock could not be acquired (EX_TEMPFAIL).
const NOT_ACQUIRED: u8 = 75;
/// The lock was lost while the command ran (the command was terminated, unless `--on-lost
/// ignore` let it finish).
const LOST: u8 = 76;
/// The token does not hold the lock (EX_NOPERM).
const NOT_HELD: u8 = 77;
/// Not every node answered (EX_UNAVAILABLE).
const UNAVAILABLE: u8 = 69;
/// Bad arguments (EX_USAGE).
const USAGE: u8 = 64;
/// The command could not be started (the shells' convention).
const NOT_STARTED: u8 = 127;

/// An exit code and the one line that explains it.
type Failure = (u8, String);

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(cli::args_with_run(std::env::args_os())) {
        Ok(cli) => cli,
        Err(err) => return cli::parse_error(&err),
    };
    let result = match &cli.command {
        Cmd::Run(args) => run::run(&cli.global, args),
        Cmd::Acquire(args) => steps::acquire(&cli.global, args),
        Cmd::Extend(args) => steps::extend(&cli.global, args),
        Cmd::Release(args) => steps::release(&cli.global, args),
        Cmd::Status(args) => status::status(&cli.global, args),
        Cmd::Nodes(NodesCmd::Check(args)) => nodes::check(&cli.global, args),
        Cmd::Nodes(NodesCmd::Trust(args)) => nodes::trust(&cli.global, args),
        Cmd::Bench(args) => bench::bench(&cli.global, args),
        Cmd::Demo(args) => demo::demo(&cli.global, args),
        Cmd::Guard(args) => guard::guard(args),
    };
    match result {
        Ok(code) => code,
        Err((code, message)) => {
            // An empty message: a failure the caller asked to hear nothing of (--quiet-if-held).
            if !message.is_empty() {
                eprintln!("redlock: {message}");
            }
            ExitCode::from(code)
        }
    }
}

/// The client for the global options, retrying for `wait` (0: a single round).
fn client(global: &Global, wait: std::time::Duration) -> Result<Redlock, Failure> {
    if global.nodes.is_empty() {
        return Err((
            USAGE,
            "no nodes: give --node URL (once per node) or REDLOCK_NODES=URL,URL,...".to_owned(),
        ));
    }
    let retry = if wait.is_zero() {
        RetryPolicy::once()
    } else {
        RetryPolicy::default().unlimited().deadline(wait)
    };
    clusters(Redlock::builder(&global.nodes), global)?
        .key_prefix(global.prefix.as_bytes())
        .config(|c| c.max_ttl(global.max_ttl))
        .retry(retry)
        .build()
        .map_err(|err| (USAGE, err.to_string()))
}

/// `builder` with the cluster nodes' seeds and votes of the global options.
pub(crate) fn clusters(
    mut builder: redlock_blocking::RedlockBuilder,
    global: &Global,
) -> Result<redlock_blocking::RedlockBuilder, Failure> {
    let seeds = global.seeds()?;
    let mut nodes: Vec<usize> = seeds.iter().map(|(node, _)| *node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    for node in nodes {
        let urls = seeds
            .iter()
            .filter(|(of, _)| *of == node)
            .map(|(_, url)| url);
        builder = builder.cluster_seeds(node, urls);
    }
    for (node, votes) in global.votes()? {
        builder = builder.cluster_votes(node, votes);
    }
    Ok(builder)
}

/// The exit code and message for a lock taken as `taking` says on `resource` that failed: the
/// message is empty for a lock another holder has, when `--quiet-if-held` asks for silence.
pub(crate) fn taking_failure(taking: &cli::Taking, resource: &str, err: Error) -> Failure {
    match err {
        Error::Contended(_) if taking.quiet_if_held => (NOT_ACQUIRED, String::new()),
        err => failure(resource, err),
    }
}

/// The exit code and message for a lock operation on `resource` that failed.
pub(crate) fn failure(resource: &str, err: Error) -> Failure {
    match err {
        Error::Lost(detail) => (LOST, format!("lost the lock on {resource}: {detail}")),
        Error::NotHeld(detail) => (
            NOT_HELD,
            format!("that token does not hold the lock on {resource}: {detail}"),
        ),
        err @ Error::Config(ConfigError::TtlAboveMax { .. }) => (
            USAGE,
            format!(
                "{err}: with this command, --max-ttl (or REDLOCK_MAX_TTL), the same on every \
                 client of these nodes"
            ),
        ),
        err @ (Error::Config(_) | Error::InvalidNode { .. }) => (USAGE, err.to_string()),
        err => (NOT_ACQUIRED, format!("could not lock {resource}: {err}")),
    }
}
