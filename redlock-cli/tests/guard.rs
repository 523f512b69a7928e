//! `redlock run` killed with SIGKILL: its guard process stops the command before the lock's
//! validity ends, and the next `run` gets the lock only once the TTL has passed.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redlock_tests::Servers;
use redlock_tests::conformance::scenarios::eventually;

use common::{redlock, stderr, stdout};

/// Whether `pid` is gone (or a zombie: dead, not yet reaped).
fn is_gone(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None).is_err() {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// When `pid` is seen gone, polling every 2 ms for up to `limit`.
fn wait_gone(pid: i32, limit: Duration) -> Option<Instant> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if is_gone(pid) {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn start_run(nodes: &Servers, args: &[&str]) -> Child {
    common::command(nodes)
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redlock")
}

fn sigkill(child: &mut Child) {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGKILL).expect("SIGKILL redlock run");
    let status = child.wait().expect("reap redlock run");
    assert_eq!(status.code(), None, "killed by a signal: {status:?}");
}

/// The guard's words on the dead `run`'s stderr (the guard holds it until it ends).
fn guard_said(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    text
}

#[test]
fn kill_9_of_run_stops_the_command_before_the_validity_ends_and_the_ttl_holds_off_the_next() {
    let nodes = Servers::start(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    let started = dir.path().join("second-started");
    // The command ignores SIGTERM: only the guard's SIGKILL at the validity end stops it.
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pidfile.display()
    );
    let mut first = start_run(
        &nodes,
        &["run", "--ttl", "10s", "job", "--", "sh", "-c", &script],
    );
    assert!(
        eventually(Duration::from_secs(20), || read_pid(&pidfile).is_some()),
        "the command started"
    );
    let command = read_pid(&pidfile).expect("pid");
    // Past the first auto-extension (at half the validity): the guard must follow the
    // extended validity end, not the first one.
    std::thread::sleep(Duration::from_millis(6_000));
    assert!(!is_gone(command), "the command runs while the lock is held");

    sigkill(&mut first);
    // Nobody extends the lock now: its keys expire at most their PTTL from now.
    let before = Instant::now();
    let pttls: Vec<i64> = nodes
        .servers()
        .iter()
        .map(|s| s.pttl("redlock:job"))
        .collect();
    let after = Instant::now();
    assert!(
        pttls.iter().all(|&p| p > 0),
        "held on every node: {pttls:?}"
    );
    let shortest =
        Duration::from_millis(u64::try_from(*pttls.iter().min().expect("3")).expect("ms"));
    assert!(
        shortest > Duration::from_millis(2_000),
        "the kill came well inside the validity: {pttls:?}"
    );
    // The validity ends before the first key expires (validity = ttl - drift from a round's
    // start; each key's TTL started later, on its node).
    let keys_expire = after + shortest;

    let second_started = {
        let script = format!("echo started > {}", started.display());
        let mut second = start_run(
            &nodes,
            &[
                "run", "--wait", "60s", "--ttl", "5s", "job", "--", "sh", "-c", &script,
            ],
        );
        let mut dead_at = None;
        let mut started_at = None;
        let deadline = Instant::now() + Duration::from_secs(40);
        while (dead_at.is_none() || started_at.is_none()) && Instant::now() < deadline {
            if dead_at.is_none() && is_gone(command) {
                dead_at = Some(Instant::now());
            }
            if started_at.is_none() && started.exists() {
                started_at = Some(Instant::now());
                assert!(
                    dead_at.is_some(),
                    "the second command started while the first ran"
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let dead_at = dead_at.expect("the guard stopped the command");
        eprintln!(
            "command stopped {:?} before the first key expired",
            keys_expire.saturating_duration_since(dead_at)
        );
        assert!(
            dead_at < keys_expire,
            "stopped {:?} after the lock's keys expired",
            dead_at.duration_since(keys_expire)
        );
        let status = second.wait().expect("second run ends");
        assert_eq!(status.code(), Some(0), "{}", guard_said(&mut second));
        started_at.expect("the second run got the lock")
    };
    assert!(
        second_started >= before + shortest,
        "the second run got the lock {:?} before the first's keys expired",
        (before + shortest).duration_since(second_started)
    );
    let said = guard_said(&mut first);
    assert!(said.contains("redlock run died"), "{said}");
}

#[test]
fn kill_9_of_run_sends_sigterm_to_the_command_at_once() {
    let nodes = Servers::start(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    let marker = dir.path().join("terminated");
    let script = format!(
        "trap 'echo terminated > {}; exit 0' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        marker.display(),
        pidfile.display()
    );
    // A long TTL: the SIGTERM must come from the death of `run`, not from the validity end.
    let mut run = start_run(
        &nodes,
        &["run", "--ttl", "60s", "job", "--", "sh", "-c", &script],
    );
    assert!(
        eventually(Duration::from_secs(20), || read_pid(&pidfile).is_some()),
        "the command started"
    );
    sigkill(&mut run);
    let killed = Instant::now();
    assert!(
        eventually(Duration::from_secs(20), || std::fs::read_to_string(&marker)
            .is_ok_and(|text| text.trim() == "terminated")),
        "the command got SIGTERM"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "long before the 60 s validity ended"
    );
    assert!(guard_said(&mut run).contains("got SIGTERM"));
    // The lock is not released by anyone: it stays until its TTL.
    assert!(nodes.count_with_key("redlock:job") >= 2);
}

#[test]
fn the_command_keeps_the_callers_stdin_and_stdout_under_the_guard() {
    let nodes = Servers::start(3);
    let mut run = common::command(&nodes)
        .args(["run", "job", "--", "sh", "-c", "tr a-z A-Z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redlock");
    {
        use std::io::Write;
        let mut stdin = run.stdin.take().expect("stdin");
        stdin.write_all(b"hello\n").expect("write");
    }
    let output = run.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "HELLO\n");
    let output = redlock(&nodes, &["run", "job", "--", "sh", "-c", "exit 7"]);
    assert_eq!(
        output.status.code(),
        Some(7),
        "the command's status passes through"
    );
    let output = redlock(&nodes, &["run", "job", "--", "/no/such/command"]);
    assert_eq!(output.status.code(), Some(127), "{}", stderr(&output));
    assert_eq!(
        nodes.count_with_key("redlock:job"),
        0,
        "released after each"
    );
}

#[test]
fn a_stopped_run_cannot_carry_the_command_past_the_validity() {
    let nodes = Servers::start(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pidfile.display()
    );
    let mut run = start_run(
        &nodes,
        &["run", "--ttl", "4s", "job", "--", "sh", "-c", &script],
    );
    assert!(
        eventually(Duration::from_secs(20), || read_pid(&pidfile).is_some()),
        "the command started"
    );
    let command = read_pid(&pidfile).expect("pid");
    let pid = Pid::from_raw(i32::try_from(run.id()).expect("pid"));
    // Stopped, `run` neither extends the lock nor closes the socket: only the guard's own
    // deadline protects the lock now.
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP redlock run");
    let pttls: Vec<i64> = nodes
        .servers()
        .iter()
        .map(|s| s.pttl("redlock:job"))
        .collect();
    let after = Instant::now();
    let shortest = u64::try_from(*pttls.iter().min().expect("3")).expect("held on every node");
    let keys_expire = after + Duration::from_millis(shortest);
    let stopped = wait_gone(command, Duration::from_secs(20));
    let _ = kill(pid, Signal::SIGKILL);
    let _ = run.wait();
    let at = stopped.expect("the guard stopped the command");
    assert!(
        at < keys_expire,
        "stopped {:?} after the lock's keys expired",
        at.duration_since(keys_expire)
    );
    assert!(guard_said(&mut run).contains("no extension arrived"));
}

/// The guard itself killed (`kill -9` of its pid): the command may run on unguarded, so `run`
/// does not release the lock under it — it exits 76 and leaves the lock to its TTL, so no other
/// host takes it while the orphaned command runs.
#[test]
fn a_killed_guard_leaves_the_lock_held_under_the_orphaned_command() {
    let nodes = Servers::start(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    let script = format!(
        "echo $$ > {}; while :; do sleep 0.05; done",
        pidfile.display()
    );
    let mut run = start_run(
        &nodes,
        &["run", "--ttl", "60s", "orphan", "--", "sh", "-c", &script],
    );
    assert!(
        eventually(Duration::from_secs(20), || read_pid(&pidfile).is_some()),
        "the command started"
    );
    let command = read_pid(&pidfile).expect("pid");
    let guard: i32 = std::fs::read_to_string(format!("/proc/{command}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().nth(1)?.parse().ok()
        })
        .expect("the command's parent, the guard");
    kill(Pid::from_raw(guard), Signal::SIGKILL).expect("SIGKILL the guard");
    let status = run.wait().expect("run ends");
    assert_eq!(status.code(), Some(76), "{status:?}");
    assert!(
        nodes.count_with_key("redlock:orphan") >= 2,
        "the lock stays held while the orphaned command may run"
    );
    assert!(!is_gone(command), "the command was orphaned, not stopped");
    // The orphan holds run's stderr open: stop it before reading what run said.
    kill(Pid::from_raw(command), Signal::SIGKILL).expect("clean up the command");
    let said = guard_said(&mut run);
    assert!(said.contains("guard process was killed"), "{said}");
}
