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
use crate::output::Out;
use crate::probe::{self, Eligibility, Probe};
use crate::warnings::{self, Facts, info_field};
use crate::{Failure, UNAVAILABLE, client, failure};

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
    eligibility: Eligibility,
    /// The node's memory identity now (`run_id:master_replid:database:evicted_keys`), if `INFO`
    /// says it.
    identity: Option<String>,
    /// The identity its epoch was stamped with (`redlock:epoch:id`), if any.
    stamped: Option<String>,
    /// The cause of the sit-out that stamped it, if one was recorded.
    stamp_cause: Option<SitOutCause>,
    /// What a proven connection's acquisitions read there besides their `SET`.
    seal: Seal,
}

/// What a proven connection's acquisitions read on a node besides their `SET` (the seal of
/// `redlock_core::NodeBatch`), by what the node can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seal {
    /// `SWAPDB` is renamed away and the policy is `noeviction`: a plain `SET NX PX`.
    Plain,
    /// `SWAPDB` can run: the epoch and the stamp, in a `MULTI` with the `SET`.
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
        }
    }
}

impl Report {
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
    let reference = Instant::now();
    let checked: Vec<Checked> = nodes
        .iter()
        .map(|node| {
            let (facts, result) = check_node(node, global.max_ttl, reference);
            Checked {
                label: node.label().to_string(),
                facts,
                result,
            }
        })
        .collect();
    let labels: Vec<String> = checked.iter().map(|c| c.label.clone()).collect();
    let facts: Vec<Option<Facts>> = checked.iter().map(|c| c.facts.clone()).collect();
    let warnings = warnings::warnings(&labels, &facts, global.max_ttl);
    let advice = advice(nodes.len());
    let remedy = probe::sit_out_remedy(checked.iter().filter_map(|node| {
        let report = node.result.as_ref().ok()?;
        Some((node.label.as_str(), report.eligibility))
    }));
    Out::new(global).report(
        || {
            let width = checked.iter().map(|c| c.label.len()).max().unwrap_or(0);
            let mut text = String::new();
            for node in &checked {
                let line = match &node.result {
                    Ok(r) => format!(
                        "ok  {} {}, login ok, scripts ok, {:?} round trip, {}, {}, {}",
                        r.server,
                        r.version,
                        r.latency,
                        r.eligibility.describe(),
                        r.identity_text(),
                        r.seal.describe()
                    ),
                    Err(why) => format!("FAILED  {why}"),
                };
                let _ = writeln!(text, "{:width$}  {line}", node.label);
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
                        "eligibility": r.eligibility.word(),
                        "identity": r.identity,
                        "stamped_identity": r.stamped,
                        "stamp_cause": r.stamp_cause.map(SitOutCause::word),
                        "vouched": r.seal.word(),
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
    (Some(facts), check_rest(&mut probe, node, &info, max_ttl))
}

fn check_rest(
    probe: &mut Probe,
    node: &NodeAddr,
    info: &str,
    max_ttl: Duration,
) -> Result<Report, String> {
    let field = |name: &str| info_field(info, name).map(str::to_owned);
    let (server, version) = match field("server_name") {
        Some(name) if name != "redis" => {
            let version = field(&format!("{name}_version")).or_else(|| field("redis_version"));
            (name, version)
        }
        _ => ("redis".to_owned(), field("redis_version")),
    };
    let one: i64 = probe
        .query(node, redis::cmd("EVAL").arg("return 1").arg(0))
        .map_err(|why| format!("scripts do not run (EVAL): {why}"))?;
    if one != 1 {
        return Err(format!("scripts do not run: EVAL answered {one}"));
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
        eligibility: Eligibility::read(probe, node, max_ttl)?,
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
    })
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
