//! The guard: a small process between `redlock run` and its command, so that the command gets
//! the `--on-lost` treatment before the lock's validity ends even when `redlock` itself dies —
//! `kill -9`, a crash, the OOM killer — and nobody is left to extend the lock.
//!
//! `redlock run` re-executes its own binary as `redlock __guard` (hidden), which connects back
//! to a Unix socket `run` listens on, and only then starts the command. Over the socket `run`
//! sends the lock's validity end (again after every extension) and, if the lock is lost,
//! `lost`. The guard treats the socket's end of file — the kernel closes it when `run` dies,
//! however it dies — like `lost`: `term` sends SIGTERM at once and SIGKILL when the validity
//! ends, `kill` SIGKILL at once, `ignore` lets the command finish unprotected. Whatever it
//! hears, it never lets the command run past the last validity end it was told (except with
//! `ignore`), so a `run` that hangs or is stopped (SIGSTOP) is covered too.
//!
//! # Implementation note
//! Why not `PR_SET_PDEATHSIG` in the command itself: it needs `pre_exec`, which is `unsafe`,
//! and the workspace forbids `unsafe`; util-linux's `setpriv --pdeathsig` would make Linux and
//! util-linux a requirement and could not apply the SIGKILL deadline. The socket is created by
//! std with close-on-exec, so the command never inherits it and its stdin, stdout and stderr
//! stay the caller's. Deadlines cross the process boundary as `CLOCK_BOOTTIME` readings in
//! nanoseconds (Linux; `CLOCK_MONOTONIC` elsewhere), and the guard compares them with that
//! clock directly: it counts the time the machine was suspended, as the nodes' TTLs do, so a
//! laptop or VM that sleeps through the validity wakes to a guard that stops the command at
//! once. `run` sends the end as `now + remaining()` by the client's suspend-aware clock. The guard itself can still be killed (`kill -9` of the guard's pid):
//! that is the one case it does not cover.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode};
use std::sync::mpsc;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::Signal;
use nix::time::{ClockId, clock_gettime};

use crate::cli::OnLost;
use crate::run::{catch_signals, exit_code, forward, send_signal, terminate};
use crate::{Failure, NOT_STARTED, USAGE};

/// How much earlier than the validity end the guard sends SIGKILL: its own wake-up latency
/// (it looks every [`POLL`]) must not carry the command past the end.
pub(crate) const KILL_MARGIN: Duration = Duration::from_millis(50);
/// How often the guard looks at the command, the socket and the clock.
const POLL: Duration = Duration::from_millis(5);

/// `redlock __guard`: what `run` passes to the guard (not for people; hidden from `--help`).
#[derive(Debug, Args)]
pub(crate) struct GuardArgs {
    /// The Unix socket `run` listens on.
    #[arg(long)]
    pub(crate) socket: PathBuf,
    /// The lock's validity end, as a `CLOCK_BOOTTIME` reading in nanoseconds.
    #[arg(long)]
    pub(crate) until_ns: u64,
    /// What to do to the command when the lock is lost or `run` is gone.
    #[arg(long, value_enum)]
    pub(crate) on_lost: OnLost,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<String>,
}

/// One message from `run` to the guard, one line each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Message {
    /// The validity now ends at this `CLOCK_BOOTTIME` reading (ns).
    Until(u64),
    /// The lock is lost: apply `--on-lost`.
    Lost,
}

impl Message {
    /// The line that carries it.
    pub(crate) fn line(self) -> String {
        match self {
            Self::Until(ns) => format!("until {ns}\n"),
            Self::Lost => "lost\n".to_owned(),
        }
    }

    /// Reads a line; anything else is `None` (and ignored).
    pub(crate) fn parse(line: &str) -> Option<Self> {
        match line.trim().split_once(' ') {
            Some(("until", ns)) => ns.parse().ok().map(Self::Until),
            None if line.trim() == "lost" => Some(Self::Lost),
            _ => None,
        }
    }
}

/// The clock both processes read: `CLOCK_BOOTTIME` on Linux (it counts a suspend), else
/// `CLOCK_MONOTONIC`.
#[cfg(any(target_os = "linux", target_os = "android"))]
const CLOCK: ClockId = ClockId::CLOCK_BOOTTIME;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const CLOCK: ClockId = ClockId::CLOCK_MONOTONIC;

/// [`CLOCK`] now, in ns (0 if it cannot be read, which Linux never does).
pub(crate) fn boot_ns() -> u64 {
    clock_gettime(CLOCK)
        .ok()
        .and_then(|ts| {
            let secs = u64::try_from(ts.tv_sec()).ok()?;
            let nanos = u64::try_from(ts.tv_nsec()).ok()?;
            secs.checked_mul(1_000_000_000)?.checked_add(nanos)
        })
        .unwrap_or(0)
}

/// The [`CLOCK`] reading at which `left` from now has passed.
pub(crate) fn boot_ns_after(left: Duration) -> u64 {
    boot_ns().saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
}

/// Whether the [`CLOCK`] reading `deadline_ns` is less than `margin` away (or past).
fn due(deadline_ns: u64, margin: Duration) -> bool {
    boot_ns_after(margin) >= deadline_ns
}

/// What the guard does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// `run` is there and the lock is held: stop the command only at the validity end.
    Guarding,
    /// The `--on-lost` treatment began (the lock was lost, or `run` is gone): with `term`,
    /// SIGKILL at the validity end; with `ignore`, the command finishes unprotected.
    Treating,
}

/// Runs the guard: connects to `run`, starts the command, and guards it until it ends.
pub(crate) fn guard(args: &GuardArgs) -> Result<ExitCode, Failure> {
    // Connected before the command starts: if `run` is gone already, the command never runs.
    let stream = UnixStream::connect(&args.socket).map_err(|err| {
        (
            NOT_STARTED,
            format!("guard: cannot reach redlock run: {err}"),
        )
    })?;
    let signal = catch_signals()?;
    let mut deadline = args.until_ns;
    if args.on_lost != OnLost::Ignore && due(deadline, KILL_MARGIN) {
        return Err((
            crate::LOST,
            "guard: the lock's validity ended before the command could start".to_owned(),
        ));
    }
    let mut child = spawn(&args.command)?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(message) = Message::parse(&line)
                && tx.send(message).is_err()
            {
                return;
            }
        }
        // End of file: `run` closed the socket or died; dropping `tx` says so.
    });
    let mut state = State::Guarding;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|err| (NOT_STARTED, err.to_string()))?
        {
            return Ok(exit_code(status));
        }
        forward(&signal, &child);
        let heard = match rx.recv_timeout(POLL) {
            Ok(message) => Some(Heard::Said(message)),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Answers at once from now on: pace the loop.
                std::thread::sleep(POLL);
                Some(Heard::Gone)
            }
        };
        if state == State::Guarding {
            match heard {
                Some(Heard::Said(Message::Until(ns))) => deadline = ns,
                Some(Heard::Said(Message::Lost)) => state = treat(args.on_lost, &mut child, false),
                Some(Heard::Gone) => state = treat(args.on_lost, &mut child, true),
                None => {}
            }
        }
        if args.on_lost != OnLost::Ignore && due(deadline, KILL_MARGIN) {
            // The validity ends: the command must not run on without the lock.
            if state == State::Guarding {
                eprintln!(
                    "redlock: guard: no extension arrived before the lock's validity ended; \
                     the command was killed"
                );
            }
            terminate(&mut child);
            return Ok(ExitCode::from(crate::LOST));
        }
    }
}

/// What the guard heard from `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// A message.
    Said(Message),
    /// End of file: `run` closed the socket or died.
    Gone,
}

/// Begins the `--on-lost` treatment. `gone`: `run` died (nobody else will say a word).
fn treat(on_lost: OnLost, child: &mut Child, gone: bool) -> State {
    let why = if gone {
        "redlock run died and nobody extends the lock"
    } else {
        "the lock was lost"
    };
    match on_lost {
        OnLost::Kill => {
            send_signal(child, Signal::SIGKILL);
            if gone {
                eprintln!("redlock: guard: {why}; the command was killed");
            }
            State::Treating
        }
        OnLost::Term => {
            send_signal(child, Signal::SIGTERM);
            if gone {
                eprintln!(
                    "redlock: guard: {why}; the command got SIGTERM, and gets SIGKILL if it \
                     still runs when the lock's validity ends"
                );
            }
            State::Treating
        }
        OnLost::Ignore => {
            if gone {
                eprintln!(
                    "redlock: guard: {why}; the command goes on unprotected (--on-lost ignore)"
                );
            }
            State::Treating
        }
    }
}

fn spawn(command: &[String]) -> Result<Child, Failure> {
    let (program, rest) = command
        .split_first()
        .ok_or((USAGE, "no command given after --".to_owned()))?;
    Command::new(program)
        .args(rest)
        .spawn()
        .map_err(|err| (NOT_STARTED, format!("cannot run {program}: {err}")))
}

/// `run`'s end of the socket: sends messages, and never fails loudly (a guard that is gone
/// shows in its exit status).
pub(crate) struct Link(pub(crate) UnixStream);

impl Link {
    pub(crate) fn send(&mut self, message: Message) {
        let _ = self.0.write_all(message.line().as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_noise_is_ignored() {
        for message in [Message::Until(0), Message::Until(u64::MAX), Message::Lost] {
            assert_eq!(Message::parse(&message.line()), Some(message));
        }
        assert_eq!(Message::parse("until soon"), None);
        assert_eq!(Message::parse(""), None);
        assert_eq!(Message::parse("lost it"), None);
    }

    #[test]
    fn deadlines_are_due_by_the_shared_clock() {
        let until = boot_ns_after(Duration::from_secs(5));
        assert!(!due(until, KILL_MARGIN), "5 s away is not due");
        assert!(
            due(until, Duration::from_secs(6)),
            "within the margin is due"
        );
        assert!(
            due(0, Duration::ZERO),
            "a past deadline is due (never panics)"
        );
        assert!(!due(u64::MAX, KILL_MARGIN));
        assert!(boot_ns() > 0, "the clock reads");
    }
}
