//! `redlock nodes check` (what each node is and whether it can take part) and `redlock nodes
//! trust` (mark every node trusted for restart-aware voting).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use redlock_blocking::Vote;
use redlock_core::SitOutCause;
use redlock_redis::NodeAddr;
use serde_json::{Value, json};

use crate::cli::{CheckArgs, Global, TrustArgs};
use crate::cluster::{self, ClusterView, Shard};
use crate::output::Out;
use crate::probe::{self, Eligibility, Probe};
use crate::warnings::{self, Facts, info_field};
use crate::{Failure, UNAVAILABLE, client, failure};
use redlock_core::Slot;

/// PINGs per latency measurement.
const PINGS: usize = 5;

/// What `nodes check` found on one node.
struct Checked {
    label: String,
    /// What the warnings look at (`None` if the node did not get as far as `INFO`).
    facts: Option<Facts>,
    result: Result<Report, String>,
}

struct Report {
    server: String,
    version: String,
    latency: Duration,
    /// Restart-aware voting state of a standalone node (a cluster's is per slot, in `cluster`).
    eligibility: Option<Eligibility>,
    /// The node's memory identity now (`run_id:master_replid:database:evicted_keys`), if `INFO`
    /// says it.
    identity: Option<String>,
    /// The identity its epoch was stamped with (`redlock:epoch:id`), if any.
    stamped: Option<String>,
    /// The cause of the sit-out that stamped it, if one was recorded.
    stamp_cause: Option<SitOutCause>,
    /// What a proven connection's acquisitions read there besides their `SET`.
    seal: Seal,
    /// A cluster node's shards, and where its votes land.
    cluster: Option<ClusterReport>,
    /// What runs where scripts do not (`None`: scripts run).
    no_scripts: Option<Natives>,
}

/// The native commands of a node whose user may run no script: they stand in for the scripts
/// (the README's "No scripting" table).
#[derive(Debug, Clone, Copy)]
struct Natives {
    /// `MSETEX` (Valkey ≥ 9.1): a lock of several keys without the acquire script.
    msetex: bool,
}

/// What `nodes check` found on a cluster node.
struct ClusterReport {
    shards: Vec<Shard>,
    /// Slots no master serves.
    unserved: usize,
    /// With `--cluster-votes`: each vote's slot and the master that serves it.
    votes: Vec<(Slot, Option<String>)>,
    /// `cluster-require-full-coverage` (`None` where `CONFIG GET` is denied).
    full_coverage: Option<bool>,
}

/// What a proven connection's acquisitions read on a node besides their `SET` (the seal of
/// `redlock_core::NodeBatch`), by what the node can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seal {
    /// `SWAPDB` is renamed away and the policy is `noeviction`: a plain `SET NX PX`.
    Plain,
    /// `SWAPDB` can run: the proof's marker (or, for a user denied markers, the epoch and the
    /// stamp), in a `MULTI` with the `SET`.
    Stamps,
    /// The policy evicts: `INFO stats` too.
    Evictions,
    /// The policy evicts, and the node publishes its evictions (`notify-keyspace-events`): a
    /// subscribed connection hears them and reads no count — the stamps where `SWAPDB` can run
    /// (`swapdb`), a plain `SET` where it cannot.
    Heard { swapdb: bool },
    /// The node's identity is unknown (`INFO` denied): a plain `SET`, a swap or a lone eviction
    /// unseen.
    Blind,
    /// A cluster node: each master's connection proves the slots it serves one by one, then
    /// acquires there with a plain `SET` (an evicting master seals each acquisition, as a
    /// standalone node does).
    PerSlot,
}

impl Seal {
    fn of(info: &str, identity: bool, swapdb: bool, heard: bool) -> Self {
        match (
            identity,
            redlock_core::evicts(info.as_bytes()) != Some(false),
            swapdb,
        ) {
            (false, _, _) => Self::Blind,
            (true, true, _) if heard => Self::Heard { swapdb },
            (true, true, _) => Self::Evictions,
            (true, false, true) => Self::Stamps,
            (true, false, false) => Self::Plain,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Stamps => "sealed",
            Self::Evictions => "sealed-evictions",
            Self::Heard { swapdb: true } => "sealed-heard",
            Self::Heard { swapdb: false } => "plain-heard",
            Self::Blind => "blind",
            Self::PerSlot => "per-slot",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Plain => "acquires with a plain SET (SWAPDB renamed away, noeviction)",
            Self::Stamps => "seals each acquisition (SWAPDB can run)",
            Self::Evictions => {
                "seals each acquisition with INFO stats (its policy evicts: every eviction makes it sit out)"
            }
            Self::Heard { swapdb: true } => {
                "hears its evictions (keyspace events, to a user allowed the channel) and seals each acquisition (SWAPDB can run)"
            }
            Self::Heard { swapdb: false } => {
                "hears its evictions (keyspace events, to a user allowed the channel) and acquires with a plain SET (SWAPDB renamed away)"
            }
            Self::Blind => "sees no swap nor lone eviction (INFO denied)",
            Self::PerSlot => {
                "proves each slot once per connection to its master, then acquires with a plain SET (a cluster; an evicting master seals each acquisition)"
            }
        }
    }
}

impl Report {
    /// Whether scripts run, for the node's line.
    fn scripts_text(&self) -> &'static str {
        match self.no_scripts {
            None => "scripts ok",
            Some(_) => "scripts denied (native commands stand in)",
        }
    }

    /// The identity for people: both ids shortened (the database and eviction count as they
    /// are), and how it compares with the epoch's.
    fn identity_text(&self) -> String {
        let short = |identity: &str| {
            identity
                .split(':')
                .map(|id| match id.get(..8) {
                    Some(head) if id.len() > 8 => format!("{head}…"),
                    _ => id.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(":")
        };
        let Some(identity) = &self.identity else {
            return "identity unknown (INFO names none)".to_owned();
        };
        let epoch = match self.stamped.as_deref() {
            None | Some("") => "the epoch has none yet",
            Some(stamped) if stamped == identity => "the epoch's",
            Some(_) => "the epoch was stamped by another",
        };
        let cause = self
            .stamp_cause
            .map(|cause| format!("; stamped when it sat out: {}", cause.word()))
            .unwrap_or_default();
        format!("identity {} ({epoch}{cause})", short(identity))
    }
}

/// Checks every node, then warns about settings that put a held lock at risk; exit 69 if any
/// node failed a check, or with `--strict` if there is any warning.
pub(crate) fn check(global: &Global, args: &CheckArgs) -> Result<ExitCode, Failure> {
    let nodes = probe::nodes(global)?;
    let votes = global.votes()?;
    let reference = Instant::now();
    let checked: Vec<Checked> = nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let votes = votes
                .iter()
                .find(|(position, _)| *position == index)
                .map(|(_, votes)| *votes);
            let (facts, result) = check_node(node, global.max_ttl, reference, votes);
            Checked {
                label: node.label().to_string(),
                facts,
                result,
            }
        })
        .collect();
    let labels: Vec<String> = checked.iter().map(|c| c.label.clone()).collect();
    let facts: Vec<Option<Facts>> = checked.iter().map(|c| c.facts.clone()).collect();
    let mut warnings = warnings::warnings(&labels, &facts, global.max_ttl);
    for node in &checked {
        if let Ok(Report {
            cluster: Some(cluster),
            ..
        }) = &node.result
        {
            warnings.extend(cluster_warnings(&node.label, cluster));
        }
        if let Ok(report) = &node.result {
            warnings.extend(no_scripts_warning(&node.label, report));
        }
    }
    // A cluster node with votes counts as its votes.
    let extra: usize = votes.iter().map(|(_, votes)| votes.saturating_sub(1)).sum();
    let advice = advice(nodes.len() + extra);
    let remedy = probe::sit_out_remedy(checked.iter().filter_map(|node| {
        let report = node.result.as_ref().ok()?;
        let eligibility = match &report.cluster {
            // A cluster with slots that will sit out is named like a node that will.
            Some(cluster) => match cluster
                .shards
                .iter()
                .any(|shard| shard.read.as_ref().is_ok_and(cluster::Epochs::waits))
            {
                true => Eligibility::Unknown,
                false => Eligibility::Eligible,
            },
            None => report.eligibility?,
        };
        Some((node.label.as_str(), eligibility))
    }));
    Out::new(global).report(
        || {
            let width = checked.iter().map(|c| c.label.len()).max().unwrap_or(0);
            let mut text = String::new();
            for node in &checked {
                let line = match &node.result {
                    Ok(r) if r.cluster.is_some() => format!(
                        "ok  {} {}, login ok, {}, {:?} round trip, a cluster node: {}",
                        r.server,
                        r.version,
                        r.scripts_text(),
                        r.latency,
                        r.seal.describe()
                    ),
                    Ok(r) => format!(
                        "ok  {} {}, login ok, {}, {:?} round trip, {}, {}, {}",
                        r.server,
                        r.version,
                        r.scripts_text(),
                        r.latency,
                        r.eligibility.map(Eligibility::describe).unwrap_or_default(),
                        r.identity_text(),
                        r.seal.describe()
                    ),
                    Err(why) => format!("FAILED  {why}"),
                };
                let _ = writeln!(text, "{:width$}  {line}", node.label);
                if let Ok(Report {
                    cluster: Some(cluster),
                    ..
                }) = &node.result
                {
                    for shard in &cluster.shards {
                        let _ = writeln!(text, "{:width$}    {}", "", shard.describe());
                    }
                    for (vote, (slot, master)) in cluster.votes.iter().enumerate() {
                        let master = master.as_deref().unwrap_or("no master");
                        let _ = writeln!(
                            text,
                            "{:width$}    vote {} of {}: {slot} (tag {{{}}}), on master {master}",
                            "",
                            vote + 1,
                            cluster.votes.len(),
                            slot.tag()
                        );
                    }
                }
            }
            for warning in &warnings {
                let _ = writeln!(text, "warning: {}: {}", warning.node, warning.message);
            }
            if let Some(advice) = &advice {
                let _ = writeln!(text, "note: {advice}");
            }
            if let Some(remedy) = &remedy {
                let _ = writeln!(text, "note: {remedy}");
            }
            text
        },
        || {
            let nodes: Vec<Value> = checked
                .iter()
                .map(|node| match &node.result {
                    Ok(r) => json!({
                        "node": node.label,
                        "ok": true,
                        "server": r.server,
                        "version": r.version,
                        "latency_us": u64::try_from(r.latency.as_micros()).unwrap_or(u64::MAX),
                        "eligibility": r.eligibility.map(Eligibility::word),
                        "identity": r.identity,
                        "stamped_identity": r.stamped,
                        "stamp_cause": r.stamp_cause.map(SitOutCause::word),
                        "vouched": r.seal.word(),
                        "scripts": r.no_scripts.is_none(),
                        "cluster": r.cluster.as_ref().map(ClusterReport::json),
                    }),
                    Err(why) => json!({"node": node.label, "ok": false, "error": why}),
                })
                .collect();
            let warnings: Vec<Value> = warnings
                .iter()
                .map(|w| {
                    json!({"node": w.node, "kind": w.kind, "message": w.message, "strict": w.strict})
                })
                .collect();
            json!({"nodes": nodes, "warnings": warnings, "advice": advice, "sit_out_remedy": remedy})
        },
    );
    let failed = checked.iter().filter(|node| node.result.is_err()).count();
    if failed > 0 {
        return Err((
            UNAVAILABLE,
            format!("{failed} of {} node(s) failed a check", checked.len()),
        ));
    }
    let strict = warnings.iter().filter(|w| w.strict).count();
    if args.strict && strict > 0 {
        return Err((
            UNAVAILABLE,
            format!(
                "{strict} warning(s) about the nodes, and --strict makes them a failure (all \
                 but the persistence settings restart-aware voting covers)"
            ),
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Connect and log in, read the server's name, version and the facts the warnings need, run a
/// script, time PINGs, read the voting state. The first failure is the answer; the facts are
/// kept if `INFO` got that far.
fn check_node(
    node: &NodeAddr,
    max_ttl: Duration,
    reference: Instant,
    votes: Option<usize>,
) -> (Option<Facts>, Result<Report, String>) {
    let mut probe = match Probe::connect(node) {
        Ok(probe) => probe,
        Err(why) => return (None, Err(why)),
    };
    // A user denied INFO still gets its check (and a warning of what goes unseen).
    let (info, denied) = match probe.info(node) {
        Ok(Some(info)) => (info, false),
        Ok(None) => (String::new(), true),
        Err(why) => return (None, Err(why)),
    };
    let mut facts = Facts::read(&mut probe, node, &info, reference);
    facts.info_denied = denied;
    let cluster = cluster::is_cluster(&mut probe, node, (!denied).then_some(info.as_str()));
    let result = check_rest(&mut probe, node, &info, max_ttl, cluster, votes);
    (Some(facts), result)
}

fn check_rest(
    probe: &mut Probe,
    node: &NodeAddr,
    info: &str,
    max_ttl: Duration,
    cluster: bool,
    votes: Option<usize>,
) -> Result<Report, String> {
    let field = |name: &str| info_field(info, name).map(str::to_owned);
    let (server, version) = match field("server_name") {
        Some(name) if name != "redis" => {
            let version = field(&format!("{name}_version")).or_else(|| field("redis_version"));
            (name, version)
        }
        _ => ("redis".to_owned(), field("redis_version")),
    };
    let no_scripts = match probe.query::<i64>(node, redis::cmd("EVAL").arg("return 1").arg(0)) {
        Ok(1) => None,
        Ok(one) => return Err(format!("scripts do not run: EVAL answered {one}")),
        Err(why) => Some(natives(probe, node, &why)?),
    };
    if cluster {
        let mut report = check_cluster(probe, node, server, version, votes)?;
        report.no_scripts = no_scripts;
        return Ok(report);
    }
    if votes.is_some() {
        return Err(
            "--cluster-votes names this node, but it does not run in cluster mode: a \
             standalone server is one vote"
                .to_owned(),
        );
    }
    let stamped: Option<Vec<u8>> =
        probe.query(node, redis::cmd("GET").arg(redlock_core::EPOCH_ID_KEY))?;
    // `COMMAND INFO` of a command renamed away answers nil; unanswered, it may run.
    let swapdb: Result<Vec<redis::Value>, String> =
        probe.query(node, redis::cmd("COMMAND").arg("INFO").arg("SWAPDB"));
    let swapdb = swapdb.map_or(true, |found| !matches!(found[..], [redis::Value::Nil]));
    let identity = redlock_core::node_identity(info.as_bytes(), node.database());
    Ok(Report {
        server,
        version: version.unwrap_or_else(|| "(version unknown)".to_owned()),
        latency: probe.latency(node, PINGS)?,
        eligibility: Some(Eligibility::read(probe, node, max_ttl)?),
        seal: Seal::of(
            info,
            identity.is_some(),
            swapdb,
            publishes_evictions(probe, node),
        ),
        identity: identity.map(|identity| String::from_utf8_lossy(&identity).into_owned()),
        stamped: stamped.as_deref().map(|stamped| {
            String::from_utf8_lossy(redlock_core::split_stamp(stamped).0).into_owned()
        }),
        stamp_cause: stamped
            .as_deref()
            .and_then(|stamped| redlock_core::split_stamp(stamped).1),
        cluster: None,
        no_scripts,
    })
}

/// What stands in for the scripts on a node where `EVAL` failed (`why`): a native
/// compare-and-delete (`DELIFEQ`, Valkey ≥ 9.0; `DELEX`, Redis ≥ 8.4), without which no release
/// can run there (a failed check), and `MSETEX`.
fn natives(probe: &mut Probe, node: &NodeAddr, why: &str) -> Result<Natives, String> {
    let found: Vec<redis::Value> = probe
        .query(
            node,
            redis::cmd("COMMAND")
                .arg("INFO")
                .arg("DELIFEQ")
                .arg("DELEX")
                .arg("MSETEX"),
        )
        .map_err(|_| format!("scripts do not run (EVAL): {why}"))?;
    let has = |at: usize| !matches!(found.get(at), None | Some(redis::Value::Nil));
    if !has(0) && !has(1) {
        return Err(format!(
            "scripts do not run (EVAL: {why}), and this server has no native compare-and-delete \
             (DELIFEQ: Valkey 9.0 or later; DELEX: Redis 8.4 or later): no lock can be released \
             here; allow the lock user @scripting (an ACL rule), or use a server that has one"
        ));
    }
    Ok(Natives { msetex: has(2) })
}

/// The rest of a cluster node's check: its slot map, each master's slots, replicas, identity
/// and slot epochs, and where its votes land.
fn check_cluster(
    probe: &mut Probe,
    node: &NodeAddr,
    server: String,
    version: Option<String>,
    votes: Option<usize>,
) -> Result<Report, String> {
    let mut view = ClusterView::read(probe, node)?;
    let full_coverage = warnings::config(probe, node, "cluster-require-full-coverage")
        .ok()
        .map(|value| value == "yes");
    let unserved = redlock_core::Slot::all()
        .filter(|slot| view.map.master_of(*slot).is_none())
        .count();
    Ok(Report {
        server,
        version: version.unwrap_or_else(|| "(version unknown)".to_owned()),
        latency: probe.latency(node, PINGS)?,
        eligibility: None,
        identity: None,
        stamped: None,
        stamp_cause: None,
        seal: Seal::PerSlot,
        no_scripts: None,
        cluster: Some(ClusterReport {
            votes: votes
                .map(|votes| view.vote_masters(votes))
                .unwrap_or_default(),
            shards: view.shards(),
            unserved,
            full_coverage,
        }),
    })
}

/// What a node whose user may run no script cannot do: a restart-aware acquisition where its
/// connection cannot prove the memory (no RESP3 or `CLIENT TRACKING` for the user; on a cluster
/// node each master's connection proves the slots it serves), and, without `MSETEX`, a lock of
/// several keys. Not a risk to a held lock: those are error votes.
fn no_scripts_warning(label: &str, report: &Report) -> Option<warnings::Warning> {
    let natives = report.no_scripts?;
    let message = format!(
        "scripts do not run for this user: releases use the native compare-and-delete; a \
         restart-aware acquisition needs the connection's memory proof (RESP3 and CLIENT \
         TRACKING for this user), and is an error vote without it{}",
        match natives.msetex {
            true => "",
            false => {
                "; a lock of several keys is an error vote here (it needs MSETEX, Valkey \
                 9.1 or later)"
            }
        }
    );
    Some(warnings::Warning {
        node: label.to_owned(),
        kind: "no-scripts",
        message,
        strict: false,
    })
}

/// What still puts a lock at risk on a cluster node: slots no master serves, masters without a
/// replica, votes that share a master or a host, and votes that fail together while a master
/// fails over.
fn cluster_warnings(label: &str, cluster: &ClusterReport) -> Vec<warnings::Warning> {
    let warning = |kind, message: String, strict| warnings::Warning {
        node: label.to_owned(),
        kind,
        message,
        strict,
    };
    let mut found = Vec::new();
    if cluster.unserved > 0 {
        found.push(warning(
            "cluster-slots",
            format!(
                "{} slots are served by no master: a lock whose key is there gets no vote from \
                 this cluster until a master serves them",
                cluster.unserved
            ),
            true,
        ));
    }
    for shard in cluster
        .shards
        .iter()
        .filter(|shard| shard.replicas.is_empty())
    {
        found.push(warning(
            "cluster-replica",
            format!(
                "master {} has no replica: if it fails, its slots are not served until it is \
                 back (and then sit out --max-ttl if it lost its memory)",
                shard.master
            ),
            false,
        ));
    }
    for (vote, (_, master)) in cluster.votes.iter().enumerate() {
        let Some(master) = master else { continue };
        if let Some(first) = cluster.votes[..vote]
            .iter()
            .position(|(_, other)| other.as_deref() == Some(master.as_str()))
        {
            found.push(warning(
                "cluster-votes",
                format!(
                    "votes {} and {} are both on master {master} (the slots are not laid out \
                     evenly, or there are fewer masters than votes): its failure costs both",
                    first + 1,
                    vote + 1
                ),
                true,
            ));
        }
    }
    let host = |master: &str| {
        master
            .rsplit_once(':')
            .map_or(master, |(host, _)| host)
            .to_owned()
    };
    let mut hosts: Vec<String> = cluster
        .votes
        .iter()
        .filter_map(|(_, master)| master.as_deref().map(host))
        .collect();
    hosts.sort();
    let shared = hosts.windows(2).filter(|pair| pair[0] == pair[1]).count();
    if shared > 0 {
        hosts.dedup();
        found.push(warning(
            "cluster-votes",
            format!(
                "the votes' masters run on {} host(s) for {} votes ({}): masters on one machine \
                 fail together",
                hosts.len(),
                cluster.votes.len(),
                hosts.join(", ")
            ),
            false,
        ));
    }
    if cluster.votes.len() > 1 && cluster.full_coverage != Some(false) {
        found.push(warning(
            "cluster-coverage",
            "cluster-require-full-coverage is yes (or unreadable): from when the cluster sees a \
             master fail until its replica takes over, every master refuses every key, and all \
             the votes fail together; set it to no"
                .to_owned(),
            false,
        ));
    }
    found
}

impl ClusterReport {
    fn json(&self) -> Value {
        let shards: Vec<Value> = self
            .shards
            .iter()
            .map(|shard| {
                let epochs = shard.read.as_ref().map_or_else(
                    |why| json!({"error": why}),
                    |epochs| {
                        json!({
                            "identity": epochs.identity,
                            "own": epochs.own,
                            "foreign": epochs.foreign,
                            "fresh": epochs.fresh,
                        })
                    },
                );
                json!({
                    "master": shard.master,
                    "slots": shard.ranges,
                    "replicas": shard.replicas,
                    "epochs": epochs,
                })
            })
            .collect();
        let votes: Vec<Value> = self
            .votes
            .iter()
            .map(|(slot, master)| json!({"slot": slot.get(), "tag": slot.tag(), "master": master}))
            .collect();
        json!({"shards": shards, "unserved_slots": self.unserved, "votes": votes,
               "full_coverage": self.full_coverage})
    }
}

/// The URLs of the nodes named in `only` (`host:port`, as `nodes check` labels them; every
/// node when empty), in the configured order. A name that matches no node is a usage error
/// that lists the nodes (by label: never a password).
fn chosen_nodes(global: &Global, only: &[String]) -> Result<Vec<String>, Failure> {
    if only.is_empty() {
        return Ok(global.nodes.clone());
    }
    let addrs = probe::nodes(global)?;
    if let Some(unknown) = only
        .iter()
        .find(|name| !addrs.iter().any(|addr| &**addr.label() == name.as_str()))
    {
        let known: Vec<&str> = addrs.iter().map(|addr| &**addr.label()).collect();
        return Err((
            crate::USAGE,
            format!(
                "no node {unknown:?} among --node / REDLOCK_NODES: name one as host:port, of {}",
                known.join(", ")
            ),
        ));
    }
    Ok(global
        .nodes
        .iter()
        .zip(&addrs)
        .filter(|(_, addr)| only.iter().any(|name| **addr.label() == **name))
        .map(|(url, _)| url.clone())
        .collect())
}

/// Whether the node publishes its evictions (`notify-keyspace-events`, as the proofs read it);
/// `false` when this user may not read it (its proofs then keep the eviction count).
fn publishes_evictions(probe: &mut Probe, node: &NodeAddr) -> bool {
    warnings::config(probe, node, "notify-keyspace-events")
        .is_ok_and(|flags| redlock_core::notifies_evictions(flags.as_bytes()))
}

/// What to say about the number of nodes.
fn advice(count: usize) -> Option<String> {
    match count {
        1 | 2 => Some(format!(
            "{count} node(s): any one failure stops every lock; Redlock wants 3 or more (an odd number)"
        )),
        n if n % 2 == 0 => Some(format!(
            "{n} nodes tolerate no more failures than {}; an odd number is as safe and cheaper",
            n - 1
        )),
        _ => None,
    }
}

/// Trusts every node, or the ones `args` names, and prints each one's answer (never a password:
/// nodes are `host:port`).
pub(crate) fn trust(global: &Global, args: &TrustArgs) -> Result<ExitCode, Failure> {
    let cluster_flags = !global.cluster_votes.is_empty() || !global.cluster_seeds.is_empty();
    if !args.only.is_empty() && cluster_flags {
        // Their positions count in the whole --node list, which naming nodes narrows.
        return Err((
            crate::USAGE,
            "naming the nodes to trust cannot be combined with --cluster-votes or --cluster-seed \
             (their positions count in the whole --node list): trust every node, or give only \
             the nodes to trust with --node"
                .to_owned(),
        ));
    }
    let mut chosen = global.clone();
    chosen.nodes = chosen_nodes(global, &args.only)?;
    let redlock = client(&chosen, Duration::ZERO)?;
    let report = redlock.trust_nodes().map_err(|err| failure("nodes", err))?;
    let untrusted = report
        .iter()
        .filter(|node| node.result != Vote::Granted)
        .count();
    Out::new(global).report(
        || {
            let mut text = String::new();
            for node in &report {
                let answer = if node.result == Vote::Granted {
                    "trusted".to_owned()
                } else {
                    format!("NOT trusted ({:?})", node.result)
                };
                let _ = writeln!(text, "{}: {answer}", node.node);
            }
            text
        },
        || {
            let nodes: Vec<Value> = report
                .iter()
                .map(|node| {
                    json!({
                        "node": node.node.to_string(),
                        "trusted": node.result == Vote::Granted,
                        "answer": format!("{:?}", node.result),
                    })
                })
                .collect();
            json!({"nodes": nodes})
        },
    );
    if untrusted > 0 || report.is_empty() {
        return Err((
            UNAVAILABLE,
            format!("{untrusted} node(s) could not be trusted; run it again once they answer"),
        ));
    }
    Ok(ExitCode::SUCCESS)
}
