//! `redlock run NAME -- CMD`: run a command while holding the lock.

use std::os::unix::net::UnixListener;
use std::process::{Child, Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use redlock_blocking::LockRequest;

use crate::cli::{Global, OnLost, RunArgs};
use crate::guard::{Link, Message, boot_ns, boot_ns_after};
use crate::{Failure, LOST, NOT_STARTED, USAGE, client, failure};

/// Takes the lock (auto-extended), runs the command under a guard process ([`crate::guard`]),
/// and passes its exit status on; stops it if the lock is lost, and the guard stops it if this
/// process dies. SIGTERM, SIGINT and SIGHUP sent to `redlock` are passed on to the command; the
/// lock is released once the command has ended (so it never runs unlocked).
pub(crate) fn run(global: &Global, args: &RunArgs) -> Result<ExitCode, Failure> {
    let redlock = client(global, args.taking.wait())?;
    let mut request = LockRequest::new(args.resource.as_bytes(), args.taking.ttl);
    if args.fenced {
        request = request.fenced();
    }
    // A signal to `redlock` goes to the command; the lock is released once the command ended.
    let signal = catch_signals()?;
    let lock = redlock
        .acquire(request.auto_extend())
        .map_err(|err| crate::taking_failure(&args.taking, &args.resource, err))?;
    let lease = lock.watch();
    let outcome = guard_command(args, &lease, &signal, global.verbose);
    match outcome {
        Err(GuardKilled(signal)) => {
            // The command may still run, and nobody can stop it at the validity end any more:
            // leave the lock held until its TTL rather than let another host take it now.
            lock.detach();
            redlock.flush(redlock_blocking::DEFAULT_IO_TIMEOUT * 2);
            Err((
                LOST,
                format!(
                    "the guard process was killed (signal {signal}); the command may still be \
                     running unguarded, so the lock on {} is left to expire by its TTL",
                    args.resource
                ),
            ))
        }
        Ok(done) => {
            let loss = lock.loss();
            lock.release();
            match (done, loss) {
                (Ok(code), None) => Ok(code),
                (Ok(_), Some(err)) => Err(failure(&args.resource, err)),
                (Err(failed), _) => Err(failed),
            }
        }
    }
}

/// The guard process was killed by this signal.
struct GuardKilled(i32);

/// Runs the command under its guard while `lease` is held: its exit status, or why it stopped.
fn guard_command(
    args: &RunArgs,
    lease: &redlock_blocking::LeaseWatch,
    signal: &AtomicUsize,
    verbose: bool,
) -> Result<Result<ExitCode, Failure>, GuardKilled> {
    use std::os::unix::process::ExitStatusExt;
    let token = String::from_utf8_lossy(lease.token().as_bytes()).into_owned();
    // The validity end as the guard reads it: `CLOCK_BOOTTIME` now + what is left, by the
    // client's suspend-aware clock.
    let mut until = boot_ns_after(lease.remaining());
    let (mut guard, mut link) = match spawn_guard(args, &token, lease.fence(), until) {
        Ok(spawned) => spawned,
        Err(failed) => return Ok(Err(failed)),
    };
    if verbose {
        let fence = lease
            .fence()
            .map_or(String::new(), |fence| format!("fence {fence}; "));
        eprintln!(
            "redlock: holding {} ({fence}guard pid {} runs the command)",
            args.resource,
            guard.id()
        );
    }
    loop {
        match guard.try_wait() {
            Ok(Some(status)) => {
                // A guard never dies of a signal on its own: someone killed it.
                if let Some(sig) = status.signal() {
                    return Err(GuardKilled(sig));
                }
                return Ok(Ok(exit_code(status)));
            }
            Ok(None) => {}
            Err(err) => return Ok(Err((NOT_STARTED, err.to_string()))),
        }
        forward(signal, &guard);
        // Checked on every pass: after the machine slept, the validity may have ended
        // without the driver having woken to say so yet.
        if !lease.is_valid() {
            return Ok(lost(args, &mut guard, &mut link));
        }
        let now_until = boot_ns_after(lease.remaining());
        if now_until.abs_diff(until) > 1_000_000 {
            until = now_until;
            link.send(Message::Until(until));
        }
        if lease.wait_lost(Duration::from_millis(50)) {
            return Ok(lost(args, &mut guard, &mut link));
        }
    }
}

/// Catches SIGTERM, SIGINT and SIGHUP into a flag (to pass them on instead of dying).
pub(crate) fn catch_signals() -> Result<Arc<AtomicUsize>, Failure> {
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [SIGTERM, SIGINT, SIGHUP] {
        signal_hook::flag::register_usize(sig, signal.clone(), usize::try_from(sig).unwrap_or(0))
            .map_err(|err| (USAGE, format!("cannot catch signal {sig}: {err}")))?;
    }
    Ok(signal)
}

/// Starts `redlock __guard` (this binary), which starts the command once it reached us over a
/// Unix socket in a temp dir only this user can enter.
fn spawn_guard(
    args: &RunArgs,
    token: &str,
    fence: Option<u64>,
    until_ns: u64,
) -> Result<(Child, Link), Failure> {
    let cannot = |what: &str, err: std::io::Error| (NOT_STARTED, format!("{what}: {err}"));
    let dir = tempfile::Builder::new()
        .prefix("redlock-guard-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .map_err(|err| cannot("cannot make the guard's socket dir", err))?;
    let path = dir.path().join("guard.sock");
    let listener =
        UnixListener::bind(&path).map_err(|err| cannot("cannot listen for the guard", err))?;
    let exe = std::env::current_exe().map_err(|err| cannot("cannot find redlock itself", err))?;
    let mut command = Command::new(exe);
    command
        .arg("__guard")
        .arg("--socket")
        .arg(&path)
        .arg("--until-ns")
        .arg(until_ns.to_string())
        .arg("--on-lost")
        .arg(match args.on_lost {
            OnLost::Term => "term",
            OnLost::Kill => "kill",
            OnLost::Ignore => "ignore",
        })
        .arg("--")
        .args(&args.command)
        .env("REDLOCK_RESOURCE", &args.resource)
        .env("REDLOCK_TOKEN", token);
    if let Some(fence) = fence {
        command.env("REDLOCK_FENCE", fence.to_string());
    }
    let mut guard = command
        .spawn()
        .map_err(|err| cannot("cannot start the guard", err))?;
    // Wait for the guard to connect (it does before it starts the command), or to end.
    listener
        .set_nonblocking(true)
        .map_err(|err| cannot("guard socket", err))?;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .map_err(|err| cannot("guard socket", err))?;
                // The socket file is no longer needed once connected.
                drop(dir);
                return Ok((guard, Link(stream)));
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                if let Some(status) = guard.try_wait().map_err(|err| cannot("guard", err))? {
                    return Err((
                        exit_code_number(status),
                        "the guard ended before starting the command".to_owned(),
                    ));
                }
                if boot_ns() >= until_ns {
                    // It never called back; it starts no command past the validity either.
                    terminate(&mut guard);
                    return Err((
                        NOT_STARTED,
                        "the guard did not start before the lock's validity ended".to_owned(),
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(err) => {
                terminate(&mut guard);
                return Err(cannot("guard socket", err));
            }
        }
    }
}

/// The lock is lost: the guard stops the command as `--on-lost` says (before the validity
/// ends), or lets it finish.
fn lost(args: &RunArgs, guard: &mut Child, link: &mut Link) -> Result<ExitCode, Failure> {
    link.send(Message::Lost);
    let what = match args.on_lost {
        OnLost::Kill => "the command was killed",
        OnLost::Term => {
            "the command was stopped (SIGTERM, then SIGKILL at the end of the validity)"
        }
        OnLost::Ignore => {
            eprintln!(
                "redlock: lost the lock on {}; the command goes on unprotected (--on-lost ignore)",
                args.resource
            );
            "the command ran to its end unprotected"
        }
    };
    let _ = guard.wait();
    Err((LOST, format!("lost the lock on {}; {what}", args.resource)))
}

pub(crate) fn send_signal(child: &Child, sig: Signal) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// Passes a signal `redlock` received on to the command (once per signal received).
pub(crate) fn forward(signal: &AtomicUsize, child: &Child) {
    let received = signal.swap(0, Ordering::SeqCst);
    if received == 0 {
        return;
    }
    if let Ok(Ok(sig)) = i32::try_from(received).map(Signal::try_from) {
        send_signal(child, sig);
    }
}

/// Stops the command: it must not go on without the lock.
pub(crate) fn terminate(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

pub(crate) fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    ExitCode::from(exit_code_number(status))
}

/// The command's status as a number: its exit code, or 128+N if signal N killed it.
fn exit_code_number(status: std::process::ExitStatus) -> u8 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128u8.saturating_add(u8::try_from(signal).unwrap_or(127));
        }
    }
    status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(1)
}
