//! `redlock status` and `redlock nodes check` against real redis-servers: what they show, that
//! they never write, and that no password ever reaches their output.

mod common;

use common::{command, json, redlock, stderr, stdout};
use redlock_tests::{ServerOptions, Servers};

#[test]
fn status_shows_the_holder_on_each_node_and_changes_nothing() {
    let mut nodes = Servers::start(3);
    let output = redlock(&nodes, &["acquire", "deploy", "--ttl", "30s"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let token = stdout(&output).trim().to_owned();
    let short: String = token.chars().take(8).collect();
    let before: Vec<i64> = nodes.servers().iter().map(|s| s.dbsize()).collect();

    let output = redlock(&nodes, &["status", "deploy", "idle"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("snapshot"), "labelled a snapshot: {text}");
    assert!(
        text.contains(&format!("deploy: held by {short}… on a quorum")),
        "{text}"
    );
    assert!(text.contains("idle: not held"), "{text}");
    assert!(!text.contains(&token), "only a shortened token: {text}");

    let report = json(&redlock(&nodes, &["status", "deploy", "idle", "--json"]));
    let deploy = &report["resources"][0];
    assert_eq!(deploy["quorum_holder"], format!("{short}…"));
    let held = deploy["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|node| node["holder"] == format!("{short}…"))
        .count();
    assert_eq!(held, 3, "acquire set every node before it exited: {report}");
    for node in deploy["nodes"].as_array().expect("nodes") {
        if node["holder"].is_string() {
            let pttl = node["pttl_ms"].as_u64().expect("a PTTL while held");
            assert!(pttl > 0 && pttl <= 30_000, "{node}");
        }
        assert_eq!(node["eligibility"], "trusted", "{node}");
    }
    assert!(report["resources"][1]["nodes"][0]["holder"].is_null());
    assert!(
        report["sit_out_remedy"].is_null(),
        "every node votes: {report}"
    );
    let after: Vec<i64> = nodes.servers().iter().map(|s| s.dbsize()).collect();
    assert_eq!(before, after, "status wrote nothing");

    // A node restarted empty: no epoch until an acquire reaches it, then it refuses to vote.
    nodes.restart_empty(0);
    let report = json(&redlock(&nodes, &["status", "idle", "--json"]));
    assert_eq!(report["resources"][0]["nodes"][0]["eligibility"], "unknown");
    let _ = redlock(&nodes, &["acquire", "other"]);
    let report = json(&redlock(&nodes, &["status", "idle", "--json"]));
    let node = &report["resources"][0]["nodes"][0];
    assert_eq!(node["eligibility"], "ineligible", "{report}");
    assert_eq!(node["sit_out_cause"], "no-epoch", "{report}");
    // The way through it, naming that node.
    let remedy = report["sit_out_remedy"]
        .as_str()
        .expect("a remedy")
        .to_owned();
    assert!(
        remedy.contains(&format!("`redlock nodes trust {}`", nodes[0].addr())),
        "{remedy}"
    );
    let text = stdout(&redlock(&nodes, &["status", "idle"]));
    assert!(text.contains(&format!("note: {remedy}")), "{text}");
    assert!(
        node["ineligible_for_ms"].as_u64().expect("ms") > 1_000,
        "{node}"
    );

    // A dead node: exit 69, the others still shown.
    nodes.kill(2);
    let output = redlock(&nodes, &["status", "deploy"]);
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("unreachable"),
        "{}",
        stdout(&output)
    );
    assert!(stdout(&output).contains("held by"), "{}", stdout(&output));
}

#[test]
fn status_names_a_node_restarted_from_a_snapshot() {
    let mut nodes = Servers::start(3);
    // An acquire proves every node: each epoch carries its node's identity from then on.
    let output = redlock(&nodes, &["acquire", "warm-up", "--ttl", "1s"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = json(&redlock(&nodes, &["status", "idle", "--json"]));
    for node in report["resources"][0]["nodes"].as_array().expect("nodes") {
        assert_eq!(node["eligibility"], "trusted", "{node}");
    }
    let snapshot = nodes.servers()[0].snapshot();
    nodes.restart_from_snapshot(0, &snapshot);
    let report = json(&redlock(&nodes, &["status", "idle", "--json"]));
    let restarted = &report["resources"][0]["nodes"][0];
    assert_eq!(restarted["eligibility"], "new-identity", "{report}");
    assert_eq!(restarted["sit_out_cause"], "restart", "{report}");
    assert_eq!(report["resources"][0]["nodes"][1]["eligibility"], "trusted");
    let text = stdout(&redlock(&nodes, &["status", "idle"]));
    assert!(
        text.contains("it is not the process that stamped its epoch (a new run_id"),
        "{text}"
    );
    // nodes check shows each node's identity, and whose the epoch's is.
    let text = stdout(&redlock(&nodes, &["nodes", "check"]));
    assert_eq!(text.matches("(the epoch's)").count(), 2, "{text}");
    assert_eq!(
        text.matches("(the epoch was stamped by another)").count(),
        1,
        "{text}"
    );
    let report = json(&redlock(&nodes, &["nodes", "check", "--json"]));
    let checked = &report["nodes"][0];
    assert_ne!(checked["identity"], checked["stamped_identity"], "{report}");
    let identity: Vec<&str> = checked["identity"]
        .as_str()
        .expect("identity")
        .split(':')
        .collect();
    assert!(
        matches!(identity[..], [run, repl, "0", evicted]
            if run.len() == 40 && repl.len() == 40 && evicted.parse::<u64>().is_ok()),
        "run_id:master_replid:database:evicted_keys, {report}"
    );
    // SWAPDB can run on the harness's servers (noeviction): each vouched acquisition is sealed.
    assert_eq!(checked["vouched"], "sealed", "{report}");
    assert_eq!(
        text.matches("seals each acquisition (SWAPDB can run)")
            .count(),
        3,
        "{text}"
    );
    // Its next acquire stamps a new epoch: it refuses to vote for the longest TTL.
    let _ = redlock(&nodes, &["acquire", "other"]);
    let report = json(&redlock(&nodes, &["status", "idle", "--json"]));
    let restamped = &report["resources"][0]["nodes"][0];
    assert_eq!(restamped["eligibility"], "ineligible", "{report}");
    // The script that stamped the new epoch recorded why: every reader names it.
    assert_eq!(restamped["sit_out_cause"], "restart", "{report}");
    let text = stdout(&redlock(&nodes, &["nodes", "check"]));
    assert_eq!(text.matches("(the epoch's)").count(), 2, "{text}");
    assert_eq!(
        text.matches("(the epoch's; stamped when it sat out: restart)")
            .count(),
        1,
        "{text}"
    );
}

#[test]
fn nodes_check_reports_each_node_and_fails_on_a_dead_one() {
    let mut nodes = Servers::start(3);
    let output = redlock(&nodes, &["nodes", "check"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output).matches("login ok, scripts ok").count(), 3);

    let report = json(&redlock(&nodes, &["nodes", "check", "--format", "json"]));
    for node in report["nodes"].as_array().expect("nodes") {
        assert_eq!(node["ok"], true, "{node}");
        assert_eq!(node["server"], "redis", "{node}");
        assert!(!node["version"].as_str().expect("version").is_empty());
        assert!(node["latency_us"].is_u64(), "{node}");
    }
    assert!(report["advice"].is_null(), "3 nodes need no advice");

    nodes.kill(1);
    let output = redlock(&nodes, &["nodes", "check"]);
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    assert!(stdout(&output).contains("FAILED"), "{}", stdout(&output));
    assert!(stderr(&output).contains("1 of 3"), "{}", stderr(&output));

    // --quiet: no report, the exit status says it all.
    let output = redlock(&nodes, &["nodes", "check", "--quiet"]);
    assert_eq!(output.status.code(), Some(69));
    assert!(stdout(&output).is_empty(), "{}", stdout(&output));
}

#[test]
fn passwords_never_reach_status_check_verbose_or_errors() {
    let secret = "Sup3r-secret-pw";
    let nodes = Servers::start_with(3, &ServerOptions::new().requirepass(secret));
    for args in [
        &["status", "job"][..],
        &["status", "job", "--json"],
        &["nodes", "check"],
        &["nodes", "check", "--json"],
        &["-v", "acquire", "job"],
        &["-v", "run", "job2", "--", "true"],
        &["nodes", "--help"],
    ] {
        let output = redlock(&nodes, args);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        let all = stdout(&output) + &stderr(&output);
        assert!(
            !all.contains(secret),
            "{args:?} printed the password: {all}"
        );
    }

    // A wrong password: a login failure per node, and neither password printed.
    let wrong = "Wr0ng-pw-here";
    let urls: Vec<String> = nodes
        .urls()
        .iter()
        .map(|url| url.replace(secret, wrong))
        .collect();
    let output = command(&nodes)
        .env("REDLOCK_NODES", urls.join(","))
        .args(["nodes", "check"])
        .output()
        .expect("run redlock");
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    let all = stdout(&output) + &stderr(&output);
    assert_eq!(all.matches("login failed").count(), 3, "{all}");
    assert!(!all.contains(secret) && !all.contains(wrong), "{all}");
}

#[test]
fn nodes_check_names_valkey_nodes() {
    let valkey = ServerOptions::new()
        .valkey()
        .unwrap_or_else(|err| panic!("{err}"));
    let nodes = Servers::try_start_each(&[ServerOptions::new(), valkey.clone(), valkey])
        .unwrap_or_else(|err| panic!("{err}"));
    let report = json(&redlock(&nodes, &["nodes", "check", "--json"]));
    let servers: Vec<&str> = report["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|node| node["server"].as_str().expect("server"))
        .collect();
    assert_eq!(servers, ["redis", "valkey", "valkey"], "{report}");
    // And a lock spans both.
    let output = redlock(&nodes, &["run", "mixed", "--", "true"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

/// `status` reads fence counters in both representations: the sorted set fenced locks commit
/// now, and a string an earlier release stored.
#[test]
fn status_reads_fence_counters_old_and_new() {
    let nodes = Servers::start(3);
    let output = redlock(&nodes, &["run", "--fenced", "job", "--", "true"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    for server in nodes.servers() {
        server.set("redlock:fence:redlock:old", "123");
    }
    let report = json(&redlock(&nodes, &["status", "job", "old", "--json"]));
    let fences = |index: usize| -> Vec<Option<u64>> {
        report["resources"][index]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|node| node["fence"].as_u64())
            .collect()
    };
    let committed: Vec<u64> = fences(0).into_iter().flatten().collect();
    assert!(committed.len() >= 2, "a quorum committed: {report}");
    assert!(
        committed.iter().all(|&fence| fence > 1_000_000_000_000),
        "{report}"
    );
    assert_eq!(fences(1), [Some(123); 3], "{report}");
}

/// `status` on a cluster node reads each key on its slot's master (the plain URL's server
/// would answer `MOVED`), with its slot's epoch; with `--cluster-votes 0=3` it shows each vote,
/// its key in the vote's slot, held by the token `acquire` printed. With `--fenced`, the fence
/// counter is read under its cluster name.
#[test]
fn status_reads_a_cluster_node_key_by_key_and_vote_by_vote() {
    let cluster = redlock_tests::RedisCluster::start(3, 0);
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_redlock"))
            .env("REDLOCK_NODES", cluster.masters()[0].url())
            .env_remove("REDLOCK_MAX_TTL")
            .args(args)
            .output()
            .expect("run redlock")
    };
    let trusted = run(&["nodes", "trust"]);
    assert!(trusted.status.success(), "{}", stderr(&trusted));
    // Keys on every master: without routing, two of three would be `MOVED`.
    let resources: Vec<String> = (0..12).map(|i| format!("job-{i}")).collect();
    let mut args = vec!["status", "--json"];
    args.extend(resources.iter().map(String::as_str));
    let output = run(&args);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = json(&output);
    for resource in report["resources"].as_array().expect("resources") {
        let node = &resource["nodes"][0];
        assert_eq!(node["reachable"], true, "{report}");
        assert_eq!(node["eligibility"], "trusted", "{report}");
    }

    let voted = ["--cluster-votes", "0=3"];
    let output = run(&[&voted[..], &["acquire", "deploy", "--ttl", "30s"]].concat());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let token = stdout(&output).trim().to_owned();
    let short: String = token.chars().take(8).collect();
    let report = json(&run(&[&voted[..], &["status", "deploy", "--json"]].concat()));
    let nodes = report["resources"][0]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{report}");
    for (vote, node) in nodes.iter().enumerate() {
        assert!(
            node["node"]
                .as_str()
                .is_some_and(|label| label.ends_with(&format!("(vote {} of 3)", vote + 1))),
            "{report}"
        );
        assert_eq!(node["holder"], format!("{short}…"), "{report}");
        // Trusted by `nodes trust` without votes: every slot, so every vote's too.
        assert_eq!(node["eligibility"], "trusted", "{report}");
    }
    assert_eq!(report["resources"][0]["quorum_holder"], format!("{short}…"));
    // Without the votes, the plain key is free: the votes' keys carry their slots' tags.
    let report = json(&run(&["status", "deploy", "--json"]));
    assert!(
        report["resources"][0]["nodes"][0]["holder"].is_null(),
        "{report}"
    );

    let output = run(&[
        "run",
        "--fenced",
        "ledger",
        "--",
        env!("CARGO_BIN_EXE_redlock"),
        "status",
        "ledger",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let inner = json(&output);
    assert!(
        inner["resources"][0]["nodes"][0]["fence"]
            .as_u64()
            .is_some(),
        "the fence under its cluster name: {inner}"
    );
}

/// A user denied `INFO` still gets a cluster node's status, vote by vote, and its shards in
/// `nodes check`: the node is a cluster because it answers its slot map.
#[test]
fn status_of_a_cluster_node_for_a_user_denied_info() {
    let options = ServerOptions::new().args([
        "--user",
        "noinfo",
        "on",
        ">noinfo-pw",
        "~*",
        "&*",
        "+@all",
        "-info",
    ]);
    let cluster = redlock_tests::RedisCluster::try_start_with(3, 0, &options).expect("a cluster");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_redlock"))
            .env(
                "REDLOCK_NODES",
                format!("redis://noinfo:noinfo-pw@{}/", cluster.masters()[0].addr()),
            )
            .env_remove("REDLOCK_MAX_TTL")
            .args(["--cluster-votes", "0=3"])
            .args(args)
            .output()
            .expect("run redlock")
    };
    let output = run(&["status", "deploy", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = json(&output);
    let nodes = report["resources"][0]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{report}");
    assert!(
        nodes.iter().all(|node| node["reachable"] == true),
        "{report}"
    );
    // And `nodes check` shows its shards.
    let output = run(&["nodes", "check", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = json(&output);
    let shards = report["nodes"][0]["cluster"]["shards"]
        .as_array()
        .expect("shards");
    assert_eq!(shards.len(), 3, "{report}");
}
