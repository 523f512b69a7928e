//! `redlock run NAME -- CMD`: run a command while holding the lock.

use std::process::{Child, Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use redlock_blocking::LockRequest;

use crate::cli::{Global, OnLost, RunArgs};
use crate::{Failure, LOST, NOT_STARTED, USAGE, client, failure};

/// Takes the lock (auto-extended), runs the command, and passes its exit status on; terminates
/// it if the lock is lost. SIGTERM, SIGINT and SIGHUP sent to `redlock` are passed on to the
/// command; the lock is released once the command has ended (so it never runs unlocked).
pub(crate) fn run(global: &Global, args: &RunArgs) -> Result<ExitCode, Failure> {
    let redlock = client(global, args.taking.wait())?;
    let mut request = LockRequest::new(args.resource.as_bytes(), args.taking.ttl);
    if args.fenced {
        request = request.fenced();
    }
    // A signal to `redlock` goes to the command; the lock is released once the command ended.
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [SIGTERM, SIGINT, SIGHUP] {
        signal_hook::flag::register_usize(sig, signal.clone(), usize::try_from(sig).unwrap_or(0))
            .map_err(|err| (USAGE, format!("cannot catch signal {sig}: {err}")))?;
    }
    let outcome = redlock.with_lock_request(request, |lease| {
        let token = String::from_utf8_lossy(lease.token().as_bytes()).into_owned();
        let mut child = spawn(args, &token, lease.fence())?;
        if global.verbose {
            eprintln!(
                "redlock: holding {} (fence {:?}, pid {} running)",
                args.resource,
                lease.fence(),
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
            forward(&signal, &child);
            if lease.wait_lost(Duration::from_millis(50)) {
                return lost(args, &mut child, lease.valid_until());
            }
        }
    });
    outcome.map_err(|err| failure(&args.resource, err))?
}

fn spawn(args: &RunArgs, token: &str, fence: Option<u64>) -> Result<Child, Failure> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or((USAGE, "no command given after --".to_owned()))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("REDLOCK_RESOURCE", &args.resource)
        .env("REDLOCK_TOKEN", token);
    if let Some(fence) = fence {
        command.env("REDLOCK_FENCE", fence.to_string());
    }
    command
        .spawn()
        .map_err(|err| (NOT_STARTED, format!("cannot run {program}: {err}")))
}

/// The lock is lost: stop the command as `--on-lost` says (before the validity ends), or let
/// it finish.
fn lost(args: &RunArgs, child: &mut Child, valid_until: Instant) -> Result<ExitCode, Failure> {
    let what = match args.on_lost {
        OnLost::Kill => {
            terminate(child);
            "the command was killed"
        }
        OnLost::Term => {
            send_signal(child, Signal::SIGTERM);
            // Until the validity ends, the command may clean up; then it must stop.
            while Instant::now() < valid_until {
                if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            terminate(child);
            "the command was stopped (SIGTERM, then SIGKILL at the end of the validity)"
        }
        OnLost::Ignore => {
            eprintln!(
                "redlock: lost the lock on {}; the command goes on unprotected (--on-lost ignore)",
                args.resource
            );
            let _ = child.wait();
            "the command ran to its end unprotected"
        }
    };
    Err((LOST, format!("lost the lock on {}; {what}", args.resource)))
}

fn send_signal(child: &Child, sig: Signal) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// Passes a signal `redlock` received on to the command (once per signal received).
fn forward(signal: &AtomicUsize, child: &Child) {
    let received = signal.swap(0, Ordering::SeqCst);
    if received == 0 {
        return;
    }
    if let Ok(Ok(sig)) = i32::try_from(received).map(Signal::try_from) {
        send_signal(child, sig);
    }
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
