//! The `redlock` command against real redis-servers.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redlock_tests::conformance::scenarios::eventually;
use redlock_tests::{ServerOptions, Servers};

mod common;

use common::{redlock, stderr, stdout};

#[test]
fn runs_the_command_under_the_lock_and_passes_its_exit_code() {
    let nodes = Servers::start(3);
    let script = "redis-cli -p \"$PORT\" get redlock:job > /dev/null; exit 3";
    let port = nodes[0].port().to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", nodes.urls().join(","))
        .env("PORT", &port)
        .args(["job", "--", "sh", "-c", script])
        .output()
        .expect("run redlock");
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_eq!(
        nodes.count_with_key("redlock:job"),
        0,
        "released after the command"
    );

    let output = redlock(&nodes, &["job", "--", "sh", "-c", "test -n \"$HOME\""]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn a_held_lock_means_exit_75_and_the_command_never_runs() {
    let nodes = Servers::start(3);
    let holder = redlock_blocking::Redlock::builder(nodes.urls())
        .key_prefix("redlock:")
        .build()
        .expect("client");
    let held = holder.lock("job", Duration::from_secs(30)).expect("lock");
    let marker = tempfile::NamedTempFile::new().expect("temp file");
    let path = marker.path().to_str().expect("utf-8 path").to_owned();
    let script = format!("echo ran > {path}");
    let output = redlock(&nodes, &["job", "--", "sh", "-c", &script]);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("held by another"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "",
        "the command did not run"
    );
    // A cron line that skips quietly: the same exit status, not a word (flock -n); a failure
    // that is not contention still prints.
    let output = redlock(
        &nodes,
        &["--quiet-if-held", "job", "--", "sh", "-c", &script],
    );
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert_eq!(stderr(&output), "", "a held lock, skipped in silence");
    assert_eq!(stdout(&output), "");
    let output = redlock(
        &nodes,
        &["--quiet-if-held", "--ttl", "90s", "job", "--", "true"],
    );
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
    assert!(stderr(&output).contains("max_ttl"), "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "",
        "the command did not run"
    );

    // With --wait, it runs once the holder lets go.
    let waiter = std::thread::spawn({
        let urls = nodes.urls().join(",");
        move || {
            Command::new(env!("CARGO_BIN_EXE_redlock"))
                .env("REDLOCK_NODES", urls)
                .args(["--wait", "20s", "job", "--", "true"])
                .output()
                .expect("run redlock")
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    held.release();
    let output = waiter.join().expect("waiter");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn bad_arguments_are_exit_64_with_a_clear_message() {
    let nodes = Servers::start(3);
    let output = redlock(&nodes, &["--ttl", "1ms", "job", "--", "true"]);
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
    assert!(stderr(&output).contains("ttl"), "{}", stderr(&output));

    let secret = "Sup3r-secret";
    let output = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", format!("redis://:{secret}@[broken"))
        .args(["job", "--", "true"])
        .output()
        .expect("run redlock");
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
    assert!(!stderr(&output).contains(secret), "{}", stderr(&output));
}

#[test]
fn a_lost_lock_terminates_the_command_with_exit_76() {
    let nodes = Servers::start(3);
    let urls = nodes.urls().join(",");
    let start = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", urls)
        .args(["--ttl", "1s", "job", "--", "sleep", "60"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redlock");
    assert!(
        eventually(Duration::from_secs(10), || nodes
            .count_with_key("redlock:job")
            >= 2),
        "the lock was taken"
    );
    let mut nodes = nodes;
    nodes.kill(0);
    nodes.kill(1);
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    assert!(
        start.elapsed() < Duration::from_secs(50),
        "the command was stopped, not waited out"
    );
}

#[test]
fn help_never_shows_the_nodes_from_the_environment() {
    let output = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", "redis://:Sup3r-secret@127.0.0.1:1")
        .arg("--help")
        .output()
        .expect("run redlock");
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("REDLOCK_NODES"), "{help}");
    assert!(!help.contains("Sup3r-secret"), "{help}");
}

#[test]
fn a_ttl_above_the_longest_ttl_in_use_is_a_usage_error_until_max_ttl_allows_it() {
    let nodes = Servers::start(3);
    let output = redlock(&nodes, &["--ttl", "90s", "job", "--", "true"]);
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("max_ttl")
            && stderr(&output).contains("--max-ttl (or REDLOCK_MAX_TTL), the same on every client"),
        "the error names the setting to raise: {}",
        stderr(&output)
    );
    let output = redlock(
        &nodes,
        &["--ttl", "90s", "--max-ttl", "2m", "job", "--", "true"],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

/// Which nodes hold `key = token` now.
fn holding(nodes: &Servers, key: &str, token: &str) -> Vec<bool> {
    nodes
        .servers()
        .iter()
        .map(|server| server.get(key).as_deref() == Some(token.as_bytes()))
        .collect()
}

#[test]
fn acquire_in_one_process_extend_and_release_in_others() {
    let nodes = Servers::start(3);
    let output = redlock(&nodes, &["acquire", "deploy", "--ttl", "20s"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let token = stdout(&output).trim().to_owned();
    assert!(
        token.len() >= 20,
        "only the token on stdout: {:?}",
        stdout(&output)
    );
    // `acquire` decides on a quorum but lets the other nodes' requests run before it exits.
    let held = nodes.count_holding("redlock:deploy", &token);
    assert_eq!(held, 3, "held on every node after exit, not only a quorum");

    // Another process cannot take it meanwhile.
    let output = redlock(&nodes, &["acquire", "deploy"]);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));

    let output = redlock(&nodes, &["extend", "deploy", &token, "--ttl", "40s"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let raised = nodes
        .servers()
        .iter()
        .filter(|s| s.pttl("redlock:deploy") > 20_000)
        .count();
    assert_eq!(raised, 3, "the TTL was raised on every node before exit");

    let output = redlock(&nodes, &["release", "deploy", &token]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(nodes.count_with_key("redlock:deploy"), 0);
}

/// Hand-over by token through the command on nodes that run no script (Valkey 9.1 through an
/// ACL user denied `@scripting`, `$VALKEY9_SERVER`): the extensions go as
/// `MULTI; PEXPIRE … GT; GET …; EXEC`, which raise a key's TTL and never shorten it.
#[test]
fn hand_over_by_token_on_nodes_that_run_no_script() {
    let options = ServerOptions::new()
        .valkey9()
        .unwrap_or_else(|err| panic!("{err}"))
        .deny_scripting(true);
    let nodes = Servers::start_with(3, &options);
    let output = redlock(&nodes, &["acquire", "deploy", "--ttl", "20s"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let token = stdout(&output).trim().to_owned();
    let pttls = |nodes: &Servers| -> Vec<i64> {
        nodes
            .servers()
            .iter()
            .map(|s| s.pttl("redlock:deploy"))
            .collect()
    };
    let output = redlock(&nodes, &["extend", "deploy", &token, "--ttl", "40s"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        pttls(&nodes).iter().all(|&ms| ms > 20_000),
        "{:?}",
        pttls(&nodes)
    );
    // A shorter TTL: extended (a fresh validity), the keys not shortened.
    let output = redlock(&nodes, &["extend", "deploy", &token, "--ttl", "5s"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        pttls(&nodes).iter().all(|&ms| ms > 20_000),
        "{:?}",
        pttls(&nodes)
    );
    let output = redlock(&nodes, &["extend", "deploy", "not-the-token"]);
    assert_eq!(output.status.code(), Some(77), "{}", stderr(&output));
    assert_eq!(nodes.count_holding("redlock:deploy", &token), 3);
    let output = redlock(&nodes, &["release", "deploy", &token]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(nodes.count_with_key("redlock:deploy"), 0);
}

#[test]
fn a_stale_or_wrong_token_is_a_clear_error_and_releases_nothing() {
    let nodes = Servers::start(3);
    let output = redlock(&nodes, &["acquire", "deploy"]);
    let token = stdout(&output).trim().to_owned();
    for args in [
        vec!["release", "deploy", "not-the-token"],
        vec!["extend", "deploy", "not-the-token"],
    ] {
        let before = holding(&nodes, "redlock:deploy", &token);
        let output = redlock(&nodes, &args);
        assert_eq!(
            output.status.code(),
            Some(77),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("does not hold the lock"),
            "{}",
            stderr(&output)
        );
        let after = holding(&nodes, "redlock:deploy", &token);
        for (node, (was, is)) in before.iter().zip(&after).enumerate() {
            assert!(
                !was || *is,
                "{args:?} touched the holder's key on node {node}"
            );
        }
    }
    assert_eq!(
        redlock(&nodes, &["release", "deploy", &token])
            .status
            .code(),
        Some(0)
    );
    // Now stale: released already.
    let output = redlock(&nodes, &["release", "deploy", &token]);
    assert_eq!(output.status.code(), Some(77), "{}", stderr(&output));
}

#[test]
fn run_passes_resource_token_and_fence_to_the_command() {
    let nodes = Servers::start(3);
    let script = "test \"$REDLOCK_RESOURCE\" = job && test -n \"$REDLOCK_TOKEN\" \
                  && test \"$REDLOCK_FENCE\" -gt 0 && echo \"$REDLOCK_FENCE\"";
    let output = redlock(
        &nodes,
        &["run", "--fenced", "job", "--", "sh", "-c", script],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let first: u64 = stdout(&output).trim().parse().expect("the fence");
    let output = redlock(
        &nodes,
        &["run", "--fenced", "job", "--", "sh", "-c", script],
    );
    let second: u64 = stdout(&output).trim().parse().expect("the fence");
    assert!(second > first, "{second} after {first}");
    assert_eq!(
        nodes.count_with_key("redlock:job"),
        0,
        "released after the command"
    );
}

#[test]
fn nodes_trust_lets_a_restarted_node_vote_at_once() {
    let mut nodes = Servers::start(3);
    nodes.restart_empty(0);
    nodes.restart_empty(1);
    let output = redlock(&nodes, &["acquire", "job"]);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("not voting for") && stderr(&output).contains("it had no epoch"),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("`redlock nodes trust`")
            && stderr(&output).contains("if no lock can be live"),
        "the error names the remedy and when it is safe: {}",
        stderr(&output)
    );
    let output = redlock(&nodes, &["nodes", "trust"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output).matches(": trusted").count(),
        3,
        "{}",
        stdout(&output)
    );
    let output = redlock(&nodes, &["acquire", "job"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn nodes_trust_one_node_ends_only_its_sit_out() {
    let mut nodes = Servers::start(3);
    nodes.restart_empty(0);
    nodes.restart_empty(1);
    let output = redlock(&nodes, &["acquire", "job"]);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    let first = nodes.servers()[0].addr().to_string();
    // A name that is no configured node: a usage error that lists them, nothing trusted.
    let output = redlock(&nodes, &["nodes", "trust", "127.0.0.1:1"]);
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no node \"127.0.0.1:1\"") && stderr(&output).contains(&first),
        "{}",
        stderr(&output)
    );
    let output = redlock(&nodes, &["nodes", "trust", &first]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output).trim(),
        format!("{first}: trusted"),
        "only the node named"
    );
    // Its epoch is trusted and stamped with its identity; the other one still sits out.
    let report = redlock(&nodes, &["status", "job", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("json");
    let states = &report["resources"][0]["nodes"];
    assert_eq!(states[0]["eligibility"], "trusted", "{report}");
    assert_eq!(states[1]["eligibility"], "ineligible", "{report}");
    assert_eq!(states[1]["sit_out_cause"], "no-epoch", "{report}");
    assert!(
        nodes.servers()[0].get(redlock_core::EPOCH_ID_KEY).is_some(),
        "the trust stamped the node's identity"
    );
    let output = redlock(&nodes, &["acquire", "job"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn sigterm_to_redlock_stops_the_command_and_releases_the_lock() {
    let nodes = Servers::start(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let mut redlock = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", nodes.urls().join(","))
        .args(["run", "job", "--", "sh", "-c", &script])
        .spawn()
        .expect("run redlock");
    let started = eventually(Duration::from_secs(10), || {
        std::fs::read_to_string(&pidfile).is_ok_and(|pid| !pid.trim().is_empty())
    });
    assert!(started, "the command started");
    assert!(
        nodes.count_with_key("redlock:job") >= 2,
        "held while it runs"
    );
    let child: i32 = std::fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(redlock.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM redlock");
    let status = redlock.wait().expect("redlock ends");
    assert_eq!(
        status.code(),
        Some(128 + 15),
        "the command's status (killed by SIGTERM)"
    );
    let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child), None).is_err();
    assert!(gone, "the command was stopped");
    assert_eq!(
        nodes.count_with_key("redlock:job"),
        0,
        "the lock was released"
    );
}

#[test]
fn a_second_run_waits_for_the_first_or_fails_fast_with_no_wait() {
    let nodes = Servers::start(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("first-done");
    let first_script = format!("sleep 2; touch {}", marker.display());
    let mut first = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", nodes.urls().join(","))
        .args(["run", "job", "--", "sh", "-c", &first_script])
        .spawn()
        .expect("run redlock");
    assert!(
        eventually(Duration::from_secs(10), || nodes
            .count_with_key("redlock:job")
            >= 2),
        "the first run holds the lock"
    );
    let output = redlock(&nodes, &["run", "--no-wait", "job", "--", "true"]);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    let started = Instant::now();
    let output = redlock(&nodes, &["run", "--wait", "30s", "job", "--", "true"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(first.wait().expect("first ends").success());
    assert!(
        started.elapsed() > Duration::from_millis(500),
        "it waited for the first"
    );
}

#[test]
fn on_lost_ignore_lets_the_command_finish_and_still_reports_the_loss() {
    let nodes = Servers::start(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("finished");
    let script = format!("sleep 3; touch {}", marker.display());
    let child = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", nodes.urls().join(","))
        .args([
            "run",
            "--ttl",
            "1s",
            "--on-lost",
            "ignore",
            "job",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redlock");
    assert!(
        eventually(Duration::from_secs(10), || nodes
            .count_with_key("redlock:job")
            >= 2),
        "the lock was taken"
    );
    let mut nodes = nodes;
    nodes.kill(0);
    nodes.kill(1);
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("unprotected"),
        "{}",
        stderr(&output)
    );
    assert!(marker.exists(), "the command ran to its end");
}

#[test]
fn losing_three_of_five_nodes_signals_the_command_and_exits_76() {
    let mut nodes = Servers::start(5);
    let marker = tempfile::NamedTempFile::new().expect("temp file");
    let path = marker.path().to_str().expect("utf-8 path").to_owned();
    // The command records the SIGTERM it gets, then ends.
    let script =
        format!("trap 'echo terminated > {path}; exit 0' TERM; while :; do sleep 0.05; done");
    let child = common::command(&nodes)
        .args(["run", "--ttl", "2s", "job", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redlock");
    assert!(
        eventually(Duration::from_secs(10), || nodes
            .count_with_key("redlock:job")
            >= 3),
        "the lock was taken"
    );
    for index in [0, 2, 4] {
        nodes.kill(index);
    }
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("lost the lock"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        std::fs::read_to_string(&path).expect("read").trim(),
        "terminated",
        "the command got SIGTERM"
    );
}

#[test]
fn six_concurrent_runs_never_lose_an_update_to_a_shared_file() {
    const RUNS: usize = 6;
    const EACH: usize = 3;
    let nodes = Servers::start(3);
    let counter = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(counter.path(), "0").expect("write");
    let path = counter.path().to_str().expect("utf-8 path").to_owned();
    // Read, pause, write: two at once would lose an update.
    let script = format!("n=$(cat {path}); sleep 0.05; echo $((n + 1)) > {path}");
    std::thread::scope(|scope| {
        for _ in 0..RUNS {
            scope.spawn(|| {
                for _ in 0..EACH {
                    let output = redlock(
                        &nodes,
                        &[
                            "run", "--wait", "120s", "counter", "--", "sh", "-c", &script,
                        ],
                    );
                    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
                }
            });
        }
    });
    let total: usize = std::fs::read_to_string(&path)
        .expect("read")
        .trim()
        .parse()
        .expect("a number");
    assert_eq!(total, RUNS * EACH, "no update lost");
}

#[test]
fn quiet_keeps_the_token_and_json_reports_every_step() {
    let nodes = Servers::start(3);
    let output = redlock(&nodes, &["acquire", "job", "--quiet"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let token = stdout(&output).trim().to_owned();
    assert!(token.len() >= 20, "the token, even with --quiet: {token:?}");

    let output = redlock(&nodes, &["extend", "job", &token, "--ttl", "20s", "--json"]);
    let report = common::json(&output);
    assert_eq!(report["extended"], true, "{report}");
    assert!(
        report["valid_ms"].as_u64().expect("ms") > 10_000,
        "{report}"
    );

    let report = common::json(&redlock(&nodes, &["release", "job", &token, "--json"]));
    assert_eq!(report["released"], 3, "{report}");

    let report = common::json(&redlock(&nodes, &["acquire", "job", "--json"]));
    assert_eq!(report["resource"], "job");
    assert!(
        report["token"].is_string() && report["valid_ms"].is_u64(),
        "{report}"
    );
    assert!(report["fence"].is_null(), "not fenced: {report}");

    let output = redlock(&nodes, &["release", "job", "not-the-token", "--quiet"]);
    assert_eq!(output.status.code(), Some(77));
    assert!(stdout(&output).is_empty());
    assert!(!stderr(&output).is_empty(), "errors still go to stderr");
}

#[test]
fn a_token_that_starts_with_a_hyphen_extends_and_releases() {
    let nodes = Servers::start(3);
    // A caller-chosen token may start with `-`; clap took `-Vx…` for the `-V` flag (exit 2).
    let token = "-Vx-caller-chosen-token";
    let holder = redlock_blocking::Redlock::builder(nodes.urls())
        .key_prefix("redlock:")
        .build()
        .expect("client");
    let lock = holder
        .acquire(redlock_blocking::LockRequest::new("deploy", Duration::from_secs(20)).token(token))
        .expect("lock");
    // Held by its token from now on, not by this handle (dropping it would release it).
    std::mem::forget(lock);
    assert!(holder.flush(Duration::from_secs(10)), "every node answered");
    assert_eq!(nodes.count_holding("redlock:deploy", token), 3);

    let output = redlock(&nodes, &["extend", "deploy", token, "--ttl", "40s"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let raised = nodes
        .servers()
        .iter()
        .filter(|s| s.pttl("redlock:deploy") > 20_000)
        .count();
    assert_eq!(raised, 3, "extended on every node");

    let output = redlock(&nodes, &["release", "deploy", token]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(nodes.count_with_key("redlock:deploy"), 0, "released");
}

#[test]
fn generated_tokens_never_start_with_a_hyphen() {
    let nodes = Servers::start(3);
    // 1 in 64 URL-safe base64 tokens started with `-`: 200 acquisitions would see ~3.
    let holder = redlock_blocking::Redlock::builder(nodes.urls())
        .key_prefix("redlock:")
        .build()
        .expect("client");
    for round in 0..200 {
        let lock = holder
            .lock(format!("t{round}"), Duration::from_secs(5))
            .expect("lock");
        let token = lock.token().as_bytes().to_vec();
        assert!(
            !token.contains(&b'-'),
            "{}",
            String::from_utf8_lossy(&token)
        );
        lock.release();
    }
}

#[test]
fn every_usage_error_is_exit_64_with_one_line_and_help_is_exit_0() {
    let nodes = Servers::start(3);
    for args in [
        &["release", "deploy"][..],
        &["acquire", "deploy", "--bogus"],
        &["nodes"],
        &["nodes", "check", "--strict", "--no-such-flag"],
        &["--ttl", "soon", "job", "--", "true"],
        &["run", "job"],
        &["--format", "yaml", "status", "job"],
    ] {
        let output = redlock(&nodes, args);
        assert_eq!(
            output.status.code(),
            Some(64),
            "{args:?}: {}",
            stderr(&output)
        );
        let err = stderr(&output);
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.starts_with("redlock: "), "{args:?}: {err}");
        assert!(stdout(&output).is_empty(), "{args:?}: {}", stdout(&output));
    }
    for args in [
        &["--help"][..],
        &["--version"],
        &["release", "--help"],
        &["help"],
    ] {
        let output = redlock(&nodes, args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(!stdout(&output).is_empty(), "{args:?}");
    }
}

#[test]
fn a_node_without_a_scheme_is_told_the_url_it_meant() {
    let output = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env_remove("REDLOCK_NODES")
        .args(["--node", "127.0.0.1:1", "acquire", "job"])
        .output()
        .expect("run redlock");
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("did you mean redis://127.0.0.1:1 ?"),
        "{}",
        stderr(&output)
    );
}

/// The README's `redlock` block, run as written against three local durable servers: its node
/// addresses mapped to them, `./make-report.sh` and `./write.sh` scripts that succeed. Every
/// line must exit 0. The last two (`bench --local`, `demo`) start servers of their own and run
/// for a while: they are left to their own tests.
#[test]
fn the_readme_cli_block_runs_as_written() {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("## The `redlock` command")
        .expect("the README's CLI section");
    let block = &readme[start..];
    let block = &block[block.find("```sh\n").expect("its shell block") + 6..];
    let block = &block[..block.find("```").expect("the block's end")];
    let options = ServerOptions::new().args(["--appendonly", "yes", "--appendfsync", "always"]);
    let nodes = Servers::start_with(3, &options);
    let mut script = String::from("set -euo pipefail\n");
    let mut ran = 0;
    for line in block.lines() {
        if line.starts_with("redlock bench") || line.starts_with("redlock demo") {
            continue;
        }
        let mut line = line.to_owned();
        for (index, addr) in nodes.addrs().iter().enumerate() {
            line = line.replace(&format!("10.0.0.{}:6379", index + 1), &addr.to_string());
        }
        assert!(
            !line.contains("10.0.0."),
            "an address left unmapped: {line}"
        );
        script.push_str(&line);
        script.push('\n');
        ran += 1;
    }
    assert!(ran >= 12, "the block has its commands: {block}");
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["make-report.sh", "write.sh"] {
        let path = dir.path().join(name);
        std::fs::write(&path, "#!/bin/sh\nexit 0\n").expect("script");
        let mut permissions = std::fs::metadata(&path).expect("metadata").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&path, permissions).expect("chmod");
    }
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_redlock"));
    let path = format!(
        "{}:{}",
        binary.parent().expect("the binary's dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env_remove("REDLOCK_NODES")
        .env_remove("REDLOCK_MAX_TTL")
        .stdin(Stdio::null())
        .output()
        .expect("run bash");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{script}\nstdout: {}\nstderr: {}",
        stdout(&output),
        stderr(&output)
    );
    for key in ["redlock:deploy", "redlock:nightly-report", "redlock:job"] {
        assert_eq!(nodes.count_with_key(key), 0, "{key} released");
    }
}

/// Cluster flags that cannot mean anything are usage errors before any node is reached: votes
/// outside 1 to 64 or past the node list, a seed without a position (never echoing its URL,
/// which may hold a password), and `nodes trust NODE…` with positions that count in the whole
/// list.
#[test]
fn bad_cluster_flags_are_exit_64_and_never_show_a_seed_url() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_redlock"))
            .env("REDLOCK_NODES", "redis://127.0.0.1:1,redis://127.0.0.1:2")
            .env_remove("REDLOCK_MAX_TTL")
            .stdin(Stdio::null())
            .args(args)
            .output()
            .expect("run redlock")
    };
    for (args, expected) in [
        (
            &["--cluster-votes", "0=0", "nodes", "check"][..],
            "1 to 64 votes",
        ),
        (
            &["--cluster-votes", "2=3", "status", "x"][..],
            "a position in the --node list",
        ),
        (
            &[
                "--cluster-seed",
                "redis://:hunter2@10.0.0.1:6379",
                "acquire",
                "x",
                "--ttl",
                "1s",
            ][..],
            "--cluster-seed #0: give POSITION=URL",
        ),
        (
            &["--cluster-votes", "0=3", "nodes", "trust", "127.0.0.1:1"][..],
            "naming the nodes to trust cannot be combined",
        ),
    ] {
        let output = run(args);
        assert_eq!(
            output.status.code(),
            Some(64),
            "{args:?}: {}",
            stderr(&output)
        );
        let said = format!("{}{}", stdout(&output), stderr(&output));
        assert!(said.contains(expected), "{args:?}: {said}");
        assert!(!said.contains("hunter2"), "{args:?}: {said}");
    }
}
