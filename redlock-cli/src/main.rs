//! `redlock`: run a command while holding a Redlock lock, like `flock` but across machines.
//!
//! ```text
//! redlock --node redis://10.0.0.1 --node redis://10.0.0.2 --node redis://10.0.0.3 \
//!     nightly-report -- ./make-report.sh
//! ```
//!
//! The lock is extended while the command runs. If it is lost (the nodes can no longer confirm
//! it), the command is terminated before the validity ends. Exit status: the command's own, or
//! 75 when the lock was not acquired, 76 when it was lost while the command ran, 64 for bad
//! arguments. Node URLs may carry passwords: prefer `REDLOCK_NODES` over `--node` so they stay
//! out of the process list; they never appear in messages.

use std::process::{Child, Command, ExitCode};
use std::time::Duration;

use clap::Parser;
use redlock_blocking::{Error, Redlock, RetryPolicy};

mod duration;

/// The lock could not be acquired (EX_TEMPFAIL).
const NOT_ACQUIRED: u8 = 75;
/// The lock was lost while the command ran; the command was terminated.
const LOST: u8 = 76;
/// Bad arguments (EX_USAGE).
const USAGE: u8 = 64;
/// The command could not be started (the shells' convention).
const NOT_STARTED: u8 = 127;

/// Run a command while holding a distributed lock (Redlock over independent Redis masters).
#[derive(Debug, Parser)]
#[command(name = "redlock", version, about)]
struct Args {
    /// A Redis master, `redis://[user:password@]host:port[/db]`; give each node once.
    #[arg(
        short,
        long = "node",
        env = "REDLOCK_NODES",
        hide_env_values = true,
        value_delimiter = ',',
        required = true
    )]
    nodes: Vec<String>,

    /// How long the lock lives without extension (it is extended while the command runs).
    #[arg(short, long, default_value = "30s", value_parser = duration::parse)]
    ttl: Duration,

    /// The longest TTL any client of these nodes uses: a node that lost its memory (restart
    /// without persistence, flush) refuses to vote for this long. Must be the same for every
    /// client of the nodes, and at least every `--ttl`.
    #[arg(long, env = "REDLOCK_MAX_TTL", default_value = "60s", value_parser = duration::parse)]
    max_ttl: Duration,

    /// How long to wait for the lock if another holder has it (0: a single try).
    #[arg(short, long, default_value = "0", value_parser = duration::parse)]
    wait: Duration,

    /// Prefix of the Redis key.
    #[arg(long, default_value = "redlock:")]
    prefix: String,

    /// Print what happens on stderr.
    #[arg(short, long)]
    verbose: bool,

    /// The name of the lock.
    resource: String,

    /// The command to run, and its arguments (after `--`).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err((code, message)) => {
            eprintln!("redlock: {message}");
            ExitCode::from(code)
        }
    }
}

fn run(args: &Args) -> Result<ExitCode, (u8, String)> {
    let retry = if args.wait.is_zero() {
        RetryPolicy::once()
    } else {
        RetryPolicy::default().unlimited().deadline(args.wait)
    };
    let redlock = Redlock::builder(&args.nodes)
        .key_prefix(args.prefix.as_bytes())
        .config(|c| c.max_ttl(args.max_ttl))
        .retry(retry)
        .build()
        .map_err(|err| (USAGE, err.to_string()))?;
    let outcome = redlock.with_lock(args.resource.as_bytes(), args.ttl, |lease| {
        let mut child = spawn(args)?;
        if args.verbose {
            eprintln!(
                "redlock: holding {} (pid {} running)",
                args.resource,
                child.id()
            );
        }
        loop {
            if let Some(status) = child
                .try_wait()
                .map_err(|err| (NOT_STARTED, err.to_string()))?
            {
                return Ok(exit_code(status));
            }
            if lease.wait_lost(Duration::from_millis(50)) {
                terminate(&mut child);
                return Err((
                    LOST,
                    format!(
                        "lost the lock on {}; the command was terminated",
                        args.resource
                    ),
                ));
            }
        }
    });
    match outcome {
        Ok(result) => result,
        Err(Error::Lost(detail)) => Err((
            LOST,
            format!("lost the lock on {}: {detail}", args.resource),
        )),
        Err(err @ (Error::Config(_) | Error::InvalidNode { .. })) => Err((USAGE, err.to_string())),
        Err(err) => Err((
            NOT_ACQUIRED,
            format!("could not lock {}: {err}", args.resource),
        )),
    }
}

fn spawn(args: &Args) -> Result<Child, (u8, String)> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or((USAGE, "no command given after --".to_owned()))?;
    Command::new(program)
        .args(rest)
        .spawn()
        .map_err(|err| (NOT_STARTED, format!("cannot run {program}: {err}")))
}

/// Stops the command: it must not go on without the lock.
fn terminate(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return ExitCode::from(128u8.saturating_add(u8::try_from(signal).unwrap_or(127)));
        }
    }
    ExitCode::from(
        status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(1),
    )
}
