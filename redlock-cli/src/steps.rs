//! `acquire`, `extend`, `release`: a lock taken by one step of a script and finished by a later
//! one (another process), by its token.

use std::process::ExitCode;
use std::time::Duration;

use redlock_blocking::{DEFAULT_IO_TIMEOUT, LockRequest};
use serde_json::json;

use crate::cli::{AcquireArgs, Global, ReleaseArgs, TokenArgs};
use crate::output::Out;
use crate::{Failure, NOT_HELD, client, failure};

/// The lock call returned on a quorum; the other nodes' requests would die with this process,
/// so let them run first (each within the I/O timeout).
fn settle(redlock: &redlock_blocking::Redlock, out: Out) {
    if !redlock.flush(DEFAULT_IO_TIMEOUT * 2) {
        out.note("some nodes did not answer before exit; the lock holds on the others");
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Takes the lock and prints its token; the lock stays held after this process exits.
pub(crate) fn acquire(global: &Global, args: &AcquireArgs) -> Result<ExitCode, Failure> {
    let redlock = client(global, args.taking.wait())?;
    let lock = redlock
        .acquire(LockRequest::new(args.resource.as_bytes(), args.taking.ttl))
        .map_err(|err| crate::taking_failure(&args.taking, &args.resource, err))?;
    let token = String::from_utf8_lossy(lock.token().as_bytes()).into_owned();
    let (remaining, fence) = (lock.remaining(), lock.fence());
    // Dropping the lock would release it: this process hands it over by its token instead.
    lock.detach();
    settle(&redlock, Out::new(global));
    let out = Out::new(global);
    out.note(format_args!(
        "holding {} for {remaining:?} (until extended or released)",
        args.resource
    ));
    // The token is the one thing on stdout, even with --quiet: the script needs it.
    out.data(&token, || {
        json!({
            "resource": args.resource,
            "token": token,
            "valid_ms": millis(remaining),
            "fence": fence,
        })
    });
    Ok(ExitCode::SUCCESS)
}

/// Extends a lock by its token (a compare-and-extend round on every node).
pub(crate) fn extend(global: &Global, args: &TokenArgs) -> Result<ExitCode, Failure> {
    let redlock = client(global, Duration::ZERO)?;
    let lock = redlock
        .resume(args.resource.as_bytes(), args.token.as_bytes(), args.ttl)
        .map_err(|err| failure(&args.resource, err))?;
    let remaining = lock.remaining();
    // Still held by the token, not by this process.
    lock.detach();
    settle(&redlock, Out::new(global));
    let out = Out::new(global);
    out.note(format_args!(
        "extended {}: valid for {remaining:?}",
        args.resource
    ));
    if out.json() {
        out.report(
            String::new,
            || json!({"resource": args.resource, "extended": true, "valid_ms": millis(remaining)}),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Releases a lock by its token; a token that holds nothing is an error, and nothing is touched.
pub(crate) fn release(global: &Global, args: &ReleaseArgs) -> Result<ExitCode, Failure> {
    let redlock = client(global, Duration::ZERO)?;
    let report = redlock
        .release_by_token(args.resource.as_bytes(), args.token.as_bytes())
        .map_err(|err| failure(&args.resource, err))?;
    let out = Out::new(global);
    out.note(format_args!(
        "released {} on {} node(s), {} held by another, {} unreachable",
        args.resource,
        report.released(),
        report.held_by_other(),
        report.unreachable()
    ));
    if out.json() {
        out.report(String::new, || {
            json!({
                "resource": args.resource,
                "released": report.released(),
                "held_by_other": report.held_by_other(),
                "absent": report.absent(),
                "unreachable": report.unreachable(),
            })
        });
    }
    if report.released() == 0 {
        return Err((
            NOT_HELD,
            format!(
                "that token does not hold the lock on {} ({} node(s) held by another, {} without \
                 it, {} unreachable); nothing was released",
                args.resource,
                report.held_by_other(),
                report.absent(),
                report.unreachable()
            ),
        ));
    }
    Ok(ExitCode::SUCCESS)
}
