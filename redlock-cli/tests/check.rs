//! `redlock nodes check` warnings, each against real redis-servers configured that way: eviction,
//! a clock far from the others', a replica, a cluster's shards and votes, two URLs for one
//! server, persistence,
//! a user denied `INFO`, a user denied scripts;
//! `--strict` turns any warning into exit 69, and a clean setup prints none.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use redlock_tests::{RedisCluster, RedisServer, ServerOptions};

use common::{json, stderr, stdout};

/// Settings that draw no warning: AOF with an fsync per write (and no RDB snapshots: the
/// harness starts every server with `--save ""`).
fn durable() -> ServerOptions {
    ServerOptions::new().args(["--appendonly", "yes", "--appendfsync", "always"])
}

fn check(urls: &[String], args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", urls.join(","))
        .env_remove("REDLOCK_MAX_TTL")
        .stdin(Stdio::null())
        .args(["nodes", "check"])
        .args(args)
        .output()
        .expect("run redlock");
    // The real output, for the record (`--nocapture` shows it).
    eprintln!(
        "$ redlock nodes check {}\n{}{}",
        args.join(" "),
        stdout(&output),
        stderr(&output)
    );
    output
}

/// `(node index, kind)` of every warning, from the JSON report.
fn warnings(urls: &[String], args: &[&str]) -> Vec<(usize, String)> {
    let output = check(urls, &[args, &["--json"]].concat());
    let report = json(&output);
    let labels: Vec<String> = report["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["node"].as_str().expect("label").to_owned())
        .collect();
    report["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| {
            let node = w["node"].as_str().expect("node");
            let index = labels.iter().position(|l| l == node).expect("a known node");
            (index, w["kind"].as_str().expect("kind").to_owned())
        })
        .collect()
}

fn urls(servers: &[&RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

fn config_set(server: &RedisServer, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(&mut server.client())
        .expect("CONFIG SET");
}

fn pair(kind: &str, index: usize) -> (usize, String) {
    (index, kind.to_owned())
}

#[test]
fn a_clean_setup_prints_no_warning_and_passes_strict() {
    let (a, b, c) = (durable().start(), durable().start(), durable().start());
    let urls = urls(&[&a, &b, &c]);
    let output = check(&urls, &["--strict"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(!stdout(&output).contains("warning"), "{}", stdout(&output));
    assert_eq!(warnings(&urls, &[]), []);
}

#[test]
fn eviction_policies_other_than_noeviction_warn_and_strict_exits_69() {
    let (a, b, c) = (durable().start(), durable().start(), durable().start());
    let urls = urls(&[&a, &b, &c]);
    config_set(&a, "maxmemory", "100mb"); // noeviction (the default): no warning
    config_set(&b, "maxmemory", "100mb");
    config_set(&b, "maxmemory-policy", "volatile-lru");
    config_set(&c, "maxmemory", "100mb");
    config_set(&c, "maxmemory-policy", "allkeys-lru");
    assert_eq!(
        warnings(&urls, &[]),
        [pair("eviction", 1), pair("eviction", 2)]
    );
    let output = check(&urls, &[]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "a warning alone is not a failure"
    );
    let text = stdout(&output);
    assert_eq!(text.matches("warning: ").count(), 2, "{text}");
    assert!(
        text.contains("maxmemory-policy volatile-lru: when memory runs short the node may evict a held lock's key"),
        "{text}"
    );
    let output = check(&urls, &["--strict"]);
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
    assert!(stderr(&output).contains("--strict"), "{}", stderr(&output));
    // What each node's vouched acquisitions read: the eviction count where the policy evicts,
    // none where the node publishes its evictions to its proven connections.
    config_set(&c, "notify-keyspace-events", "Ee");
    let report = json(&check(&urls, &["--json"]));
    let vouched: Vec<&str> = report["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|node| node["vouched"].as_str().expect("vouched"))
        .collect();
    assert_eq!(
        vouched,
        ["sealed", "sealed-evictions", "sealed-heard"],
        "{report}"
    );
    assert!(
        stdout(&check(&urls, &[])).contains("hears its evictions (keyspace events"),
        "{report}"
    );
}

#[test]
fn persistence_settings_that_matter_to_restart_aware_voting_warn() {
    let (a, b, c, d) = (
        durable().start(),
        ServerOptions::new().start(), // appendonly no, save "": no persistence
        durable().start(),
        durable().start(),
    );
    config_set(&c, "appendfsync", "everysec");
    config_set(&d, "appendonly", "no");
    config_set(&d, "save", "3600 1");
    let urls = urls(&[&a, &b, &c, &d]);
    assert_eq!(
        warnings(&urls, &[]),
        [
            pair("persistence", 1),
            pair("persistence", 2),
            pair("persistence", 3)
        ]
    );
    // They cost a node's vote after a restart, never a held lock's safety: --strict passes.
    let output = check(&urls, &["--strict"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&check(&urls, &[]));
    for expected in [
        "no persistence (appendonly no, no snapshots): a restart loses every lock key; restart-aware voting covers it",
        "appendfsync everysec: a crash",
        "RDB snapshots without AOF (save \"3600 1\", appendonly no)",
    ] {
        assert!(text.contains(expected), "missing {expected:?}:\n{text}");
    }
}

#[test]
fn a_replica_warns() {
    let primary = durable().start();
    let replica = durable().replica_of(primary.addr()).start();
    let other = durable().start();
    let urls = urls(&[&primary, &other, &replica]);
    assert_eq!(warnings(&urls, &[]), [pair("replica", 2)]);
    assert!(stdout(&check(&urls, &[])).contains("is a replica (role:slave)"));
}

#[test]
fn a_cluster_node_without_slots_warns_that_no_master_serves_them() {
    let clustered = durable().args(["--cluster-enabled", "yes"]).start();
    let (a, b) = (durable().start(), durable().start());
    let urls = urls(&[&a, &b, &clustered]);
    let output = check(&urls, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("16384 slots are served by no master"),
        "{}",
        stdout(&output)
    );
    assert_eq!(warnings(&urls, &[]), [pair("cluster-slots", 2)]);
    assert_eq!(check(&urls, &["--strict"]).status.code(), Some(69));
}

/// A node whose user may run no script (an ACL without `@scripting`) passes its check where
/// native commands stand in for the scripts (Valkey 9.1: `DELIFEQ`, `MSETEX`), with a warning of
/// what is an error vote there — on a cluster node as on a standalone one, a restart-aware
/// acquisition whose connection cannot prove the memory. A server without a native
/// compare-and-delete (Redis 7) fails its check: no lock could be released.
#[test]
fn a_user_denied_scripts_is_told_what_stands_in_and_what_cannot_run() {
    let valkey = || {
        durable()
            .valkey9()
            .expect("VALKEY9_SERVER names a Valkey 9.1 (scripts/ensure-valkey.sh 9.1)")
            .deny_scripting(true)
    };
    let (a, b) = (durable().start(), durable().start());
    let denied = valkey().start();
    let nodes = urls(&[&a, &b, &denied]);
    let output = check(&nodes, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("scripts denied (native commands stand in)")
            && text.contains("releases use the native compare-and-delete")
            && !text.contains("a lock of several keys is an error vote"),
        "{text}"
    );
    assert_eq!(warnings(&nodes, &[]), [pair("no-scripts", 2)]);
    assert_eq!(warnings(&nodes[..2], &[]), [], "the others run scripts");

    let clustered = valkey().args(["--cluster-enabled", "yes"]).start();
    let nodes = urls(&[&a, &b, &clustered]);
    let output = check(&nodes, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("needs the connection's memory proof"),
        "{}",
        stdout(&output)
    );
    assert_eq!(
        warnings(&nodes, &[]),
        [pair("cluster-slots", 2), pair("no-scripts", 2)]
    );

    let redis = durable().deny_scripting(true).start();
    let output = check(&urls(&[&a, &b, &redis]), &[]);
    assert_eq!(output.status.code(), Some(69), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("no lock can be released here"),
        "{}",
        stdout(&output)
    );
}

/// A real 3-master cluster with a replica each: `nodes check` shows each master's slots,
/// replicas, identity and slot epochs (none yet, then every slot its own after a trust), and
/// with `--cluster-votes 0=3` which master serves each vote; the warnings are those that still
/// apply (votes on one host, full coverage). `--cluster-votes` on a standalone server fails
/// its check.
#[test]
fn a_cluster_node_shows_its_shards_and_where_its_votes_land() {
    let cluster = RedisCluster::try_start_with(3, 1, &durable()).expect("a cluster");
    let urls = [cluster.masters()[1].url()];
    // `CLUSTER SLOTS` lists a replica once it has replicated anything: a write to each
    // master, and a while for the offsets to reach the other masters' gossip.
    for (index, master) in cluster.masters().iter().enumerate() {
        let slot = redlock_core::Slot::new(cluster.slots_of(index).0).expect("a slot");
        master.set(format!("{{{}}}warm", slot.tag()), "up");
    }
    let started = std::time::Instant::now();
    let (output, text) = loop {
        let output = check(&urls, &[]);
        let text = stdout(&output);
        if !text.contains("no replica") || started.elapsed() > Duration::from_secs(60) {
            break (output, text);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    for master in 0..3 {
        let replica = cluster.replicas_of(master)[0].addr();
        let line = text
            .lines()
            .find(|line| line.contains(&format!("master {}:", cluster.masters()[master].addr())))
            .unwrap_or_else(|| panic!("master {master} is shown: {text}"));
        let (first, last) = cluster.slots_of(master);
        assert!(line.contains(&format!("({first}-{last})")), "{line}");
        assert!(line.contains(&format!("replicas {replica}")), "{line}");
        assert!(line.contains("none yet"), "{line}");
    }
    assert!(
        warnings(&urls, &[]).is_empty(),
        "a cluster alone draws no warning"
    );

    let voted = ["--cluster-votes", "0=3"];
    let trusted = Command::new(env!("CARGO_BIN_EXE_redlock"))
        .env("REDLOCK_NODES", urls.join(","))
        .args(["nodes", "trust"])
        .args(voted)
        .output()
        .expect("run redlock");
    // Each vote's answer (stdout) beside the summary (stderr): a vote not trusted says why.
    assert!(
        trusted.status.success(),
        "{}{}",
        stdout(&trusted),
        stderr(&trusted)
    );
    let report = json(&check(&urls, &[&voted[..], &["--json"]].concat()));
    let shards = report["nodes"][0]["cluster"]["shards"]
        .as_array()
        .expect("shards");
    assert_eq!(shards.len(), 3, "{report}");
    for shard in shards {
        assert_eq!(shard["epochs"]["fresh"], 0, "{report}");
        assert_eq!(shard["epochs"]["foreign"], 0, "{report}");
        assert!(shard["epochs"]["own"].as_u64() > Some(5000), "{report}");
    }
    let votes = report["nodes"][0]["cluster"]["votes"]
        .as_array()
        .expect("votes");
    for (vote, placed) in votes.iter().enumerate() {
        assert_eq!(
            placed["master"],
            cluster.masters()[vote].addr().to_string(),
            "{report}"
        );
    }
    let mut kinds: Vec<String> = warnings(&urls, &voted)
        .into_iter()
        .map(|(_, kind)| kind)
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        ["cluster-coverage", "cluster-votes"],
        "one host, full coverage"
    );

    let standalone = durable().start();
    let output = check(&[standalone.url()], &voted);
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("does not run in cluster mode"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_user_denied_info_warns_of_what_goes_unseen() {
    let rules = [
        "--user",
        "no-info",
        "on",
        ">no-info-pw",
        "~*",
        "&*",
        "+@all",
        "-info",
    ];
    let (a, b) = (durable().start(), durable().start());
    let denying = durable().args(rules).start();
    let denied = format!("redis://no-info:no-info-pw@{}/", denying.addr());
    let urls = vec![a.url(), b.url(), denied];
    // The node passes its check; the warning names what restart-aware voting cannot see there.
    let output = check(&urls, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("INFO is denied to this user")
            && text.contains("votes under its epoch alone"),
        "{text}"
    );
    assert!(!text.contains("no-info-pw"), "{text}");
    assert_eq!(warnings(&urls, &[]), [pair("info-denied", 2)]);
    // The same node through a user allowed INFO: no warning.
    assert_eq!(warnings(&urls[..2], &[]), []);
}

#[test]
fn two_urls_for_one_server_warn() {
    let (a, b) = (durable().start(), durable().start());
    // `localhost` and `127.0.0.1`: different labels, one server.
    let alias = a.url().replace("127.0.0.1", "localhost");
    assert_ne!(alias, a.url());
    let urls = vec![a.url(), b.url(), alias];
    assert_eq!(warnings(&urls, &[]), [pair("same-server", 2)]);
    let text = stdout(&check(&urls, &[]));
    assert!(
        text.contains(&format!(
            "reaches the same server as 127.0.0.1:{}",
            a.port()
        )),
        "{text}"
    );
}

#[test]
fn a_clock_far_from_the_others_warns() {
    let (a, b, c) = (durable().start(), durable().start(), durable().start());
    // The third node answers through a relay that moves its TIME 2 s ahead: a real server
    // whose clock is off (the bound is 1% of --max-ttl, 600 ms by default).
    let relay = TimeShiftRelay::start(c.addr(), 2);
    let urls = vec![a.url(), b.url(), format!("redis://{}", relay.addr)];
    assert_eq!(warnings(&urls, &[]), [pair("clock", 2)]);
    let text = stdout(&check(&urls, &[]));
    assert!(
        text.contains("ahead of the median of the other nodes, more than 1% of --max-ttl (600ms)")
            && text.contains("this checks offsets once, not drift rates"),
        "{text}"
    );
    // A longer --max-ttl allows more: 1% of 5 min = 3 s.
    assert_eq!(warnings(&urls, &["--max-ttl", "5m"]), []);
}

/// A TCP relay to a real redis-server that adds `shift_secs` to every `TIME` reply, one command
/// at a time (the redis crate sends RESP2 arrays of bulk strings and reads RESP2 replies).
struct TimeShiftRelay {
    addr: SocketAddr,
}

impl TimeShiftRelay {
    fn start(target: SocketAddr, shift_secs: i64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                std::thread::spawn(move || {
                    let _ = relay(client, target, shift_secs);
                });
            }
        });
        Self { addr }
    }
}

fn relay(client: TcpStream, target: SocketAddr, shift_secs: i64) -> std::io::Result<()> {
    let server = TcpStream::connect_timeout(&target, Duration::from_secs(5))?;
    let mut from_client = BufReader::new(client.try_clone()?);
    let mut to_client = client;
    let mut from_server = BufReader::new(server.try_clone()?);
    let mut to_server = server;
    loop {
        let (raw, words) = read_command(&mut from_client)?;
        to_server.write_all(&raw)?;
        let mut reply = Vec::new();
        read_reply(&mut from_server, &mut reply)?;
        if words
            .first()
            .is_some_and(|w| w.eq_ignore_ascii_case(b"TIME"))
        {
            reply = shift_time(&reply, shift_secs);
        }
        to_client.write_all(&reply)?;
    }
}

fn read_line(reader: &mut impl BufRead, raw: &mut Vec<u8>) -> std::io::Result<String> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    raw.extend_from_slice(&line);
    Ok(String::from_utf8_lossy(&line).trim_end().to_owned())
}

fn read_bulk(reader: &mut impl BufRead, len: i64, raw: &mut Vec<u8>) -> std::io::Result<Vec<u8>> {
    let Ok(len) = usize::try_from(len) else {
        return Ok(Vec::new()); // $-1: nil
    };
    let mut data = vec![0; len + 2];
    reader.read_exact(&mut data)?;
    raw.extend_from_slice(&data);
    data.truncate(len);
    Ok(data)
}

/// One command: `*N` then N bulk strings.
fn read_command(reader: &mut impl BufRead) -> std::io::Result<(Vec<u8>, Vec<Vec<u8>>)> {
    let mut raw = Vec::new();
    let header = read_line(reader, &mut raw)?;
    let count: usize = header.trim_start_matches('*').parse().unwrap_or(0);
    let mut words = Vec::with_capacity(count);
    for _ in 0..count {
        let len: i64 = read_line(reader, &mut raw)?
            .trim_start_matches('$')
            .parse()
            .unwrap_or(-1);
        words.push(read_bulk(reader, len, &mut raw)?);
    }
    Ok((raw, words))
}

/// One RESP2 reply, raw.
fn read_reply(reader: &mut impl BufRead, raw: &mut Vec<u8>) -> std::io::Result<()> {
    let line = read_line(reader, raw)?;
    let (kind, rest) = line.split_at(1.min(line.len()));
    let n: i64 = rest.parse().unwrap_or(-1);
    match kind {
        "$" => read_bulk(reader, n, raw).map(drop),
        "*" => (0..n.max(0)).try_for_each(|_| read_reply(reader, raw)),
        _ => Ok(()),
    }
}

/// `*2 $secs $micros` with `shift_secs` added to the seconds.
fn shift_time(reply: &[u8], shift_secs: i64) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply);
    let parts: Vec<&str> = text.split("\r\n").collect();
    // ["*2", "$10", secs, "$6", micros, ""]
    let (Some(secs), Some(micros)) = (
        parts.get(2).and_then(|s| s.parse::<i64>().ok()),
        parts.get(4),
    ) else {
        return reply.to_vec();
    };
    let secs = (secs + shift_secs).to_string();
    format!(
        "*2\r\n${}\r\n{secs}\r\n${}\r\n{micros}\r\n",
        secs.len(),
        micros.len()
    )
    .into_bytes()
}

/// A node with no epoch yet (fresh, restarted or flushed) gets the remedy, named by address,
/// with its one condition; trusted nodes get none.
#[test]
fn a_fresh_node_gets_the_remedy_and_trusted_ones_none() {
    let (a, b, c) = (durable().start(), durable().start(), durable().start());
    let urls = urls(&[&a, &b, &c]);
    let output = check(&urls, &[]);
    assert!(
        !stdout(&output).contains("nodes trust"),
        "{}",
        stdout(&output)
    );
    assert!(json(&check(&urls, &["--json"]))["sit_out_remedy"].is_null());
    let _: () = redis::cmd("DEL")
        .arg(redlock_core::EPOCH_KEY)
        .arg(redlock_core::EPOCH_ID_KEY)
        .query(&mut b.client())
        .expect("DEL");
    let output = check(&urls, &[]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        text.contains(&format!("`redlock nodes trust {}`", b.addr())),
        "{text}"
    );
    assert!(
        text.contains("will not vote until --max-ttl has passed"),
        "{text}"
    );
    assert!(text.contains("breaks mutual exclusion"), "{text}");
    let remedy = json(&check(&urls, &["--json"]))["sit_out_remedy"].clone();
    assert!(
        remedy
            .as_str()
            .is_some_and(|r| r.starts_with(&b.addr().to_string())),
        "{remedy}"
    );
}
