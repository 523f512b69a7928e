//! `redlock status NAME…`: who holds each lock on each node right now — a snapshot, never a
//! guarantee (it may change the moment it is read), and never a write.

use std::fmt::Write as _;
use std::process::ExitCode;

use redlock_core::{Keyspace, SitOutCause, Slot, vote_slots};
use redlock_redis::NodeAddr;
use serde_json::{Value, json};

use crate::cli::{Global, StatusArgs};
use crate::cluster::ClusterView;
use crate::output::{Out, human_ms, short_token};
use crate::probe::{self, Eligibility, Probe};
use crate::{Failure, UNAVAILABLE};

/// What one node says about one lock.
struct Holding {
    /// Whether the node votes for it (on a cluster, the key's slot).
    eligibility: Eligibility,
    /// Shortened token of the holder, if the key exists.
    holder: Option<String>,
    /// The key's remaining time to live in ms (`PTTL`), when held.
    pttl_ms: Option<u64>,
    /// The resource's fence counter on this node, if any.
    fence: Option<u64>,
}

/// One node's answers, or why it gave none.
struct NodeView {
    label: String,
    read: Result<Vec<Holding>, String>,
}

/// A vote as `status` reads it: a node, or one of the votes a cluster node lends a lock
/// (`--cluster-votes`), whose keys carry its slot's tag.
struct Target {
    addr: NodeAddr,
    label: String,
    key_slot: Option<Slot>,
}

/// Prints the snapshot; exit 69 if a node did not answer (the rest is still shown).
pub(crate) fn status(global: &Global, args: &StatusArgs) -> Result<ExitCode, Failure> {
    let targets = targets(global)?;
    let keys: Vec<Vec<u8>> = args
        .resources
        .iter()
        .map(|resource| [global.prefix.as_bytes(), resource.as_bytes()].concat())
        .collect();
    let views: Vec<NodeView> = targets
        .iter()
        .map(|target| NodeView {
            label: target.label.clone(),
            read: read_node(target, &keys, global),
        })
        .collect();
    let quorum = redlock_core::majority(targets.len());
    let out = Out::new(global);
    out.report(
        || text(args, &views, quorum),
        || json_report(args, &keys, &views, quorum),
    );
    if views.iter().any(|view| view.read.is_err()) {
        return Err((
            UNAVAILABLE,
            "not every node answered; the snapshot is incomplete".to_owned(),
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// The nodes, each cluster node with votes once per vote.
fn targets(global: &Global) -> Result<Vec<Target>, Failure> {
    let votes = global.votes()?;
    let mut targets = Vec::new();
    for (index, addr) in probe::nodes(global)?.into_iter().enumerate() {
        match votes.iter().find(|(position, _)| *position == index) {
            Some(&(_, count)) => {
                for (vote, slot) in vote_slots(count).enumerate() {
                    targets.push(Target {
                        label: format!("{} (vote {} of {count})", addr.label(), vote + 1),
                        addr: addr.clone(),
                        key_slot: Some(slot),
                    });
                }
            }
            None => targets.push(Target {
                label: addr.label().to_string(),
                addr,
                key_slot: None,
            }),
        }
    }
    Ok(targets)
}

fn read_node(target: &Target, keys: &[Vec<u8>], global: &Global) -> Result<Vec<Holding>, String> {
    let node = &target.addr;
    let mut probe = Probe::connect(node)?;
    let info: Option<String> = probe.query(node, redis::cmd("INFO").arg("cluster")).ok();
    if !crate::cluster::is_cluster(&mut probe, node, info.as_deref()) {
        if target.key_slot.is_some() {
            return Err(
                "--cluster-votes names this node, but it does not run in cluster mode".to_owned(),
            );
        }
        let eligibility = Eligibility::read(&mut probe, node, global.max_ttl)?;
        return keys
            .iter()
            .map(|key| read_key(&mut probe, node, Keyspace::Standalone, key, eligibility))
            .collect();
    }
    // A cluster: each key on its slot's master, judged by its slot's epoch.
    let mut view = ClusterView::read(&mut probe, node)?;
    keys.iter()
        .map(|key| {
            let key = match target.key_slot {
                Some(slot) => [b"{", slot.tag().as_bytes(), b"}", key].concat(),
                None => key.clone(),
            };
            let (master, probe) = view.at_key(&key)?;
            let eligibility =
                Eligibility::read_for(probe, master, global.max_ttl, Keyspace::Cluster, &key)?;
            read_key(probe, master, Keyspace::Cluster, &key, eligibility)
        })
        .collect()
}

/// Who holds `key` on the node `probe` reaches, for how long, and its fence.
fn read_key(
    probe: &mut Probe,
    node: &NodeAddr,
    keyspace: Keyspace,
    key: &[u8],
    eligibility: Eligibility,
) -> Result<Holding, String> {
    let token: Option<Vec<u8>> = probe.query(node, redis::cmd("GET").arg(key))?;
    let pttl: i64 = probe.query(node, redis::cmd("PTTL").arg(key))?;
    let fence = read_fence(probe, node, &keyspace.fence_key(key))?;
    Ok(Holding {
        eligibility,
        holder: token.as_deref().map(short_token),
        pttl_ms: u64::try_from(pttl).ok(),
        fence,
    })
}

/// A fence counter: the score of its sorted set, or a string an earlier release stored.
fn read_fence(probe: &mut Probe, node: &NodeAddr, fence_key: &[u8]) -> Result<Option<u64>, String> {
    let kind: String = probe.query(node, redis::cmd("TYPE").arg(fence_key))?;
    let score: Option<f64> = match kind.as_str() {
        "string" => probe.query(node, redis::cmd("GET").arg(fence_key))?,
        _ => probe.query(
            node,
            redis::cmd("ZSCORE")
                .arg(fence_key)
                .arg(redlock_core::FENCE_MEMBER),
        )?,
    };
    // Fences are whole numbers below 2^53, exact as doubles.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(score
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| s as u64))
}

/// The holder seen on a quorum of nodes, if any.
fn quorum_holder(views: &[NodeView], index: usize, quorum: usize) -> Option<String> {
    let holders: Vec<&str> = views
        .iter()
        .filter_map(|view| view.read.as_ref().ok())
        .filter_map(|holdings| holdings[index].holder.as_deref())
        .collect();
    holders
        .iter()
        .find(|holder| holders.iter().filter(|other| other == holder).count() >= quorum)
        .map(|holder| (*holder).to_owned())
}

fn text(args: &StatusArgs, views: &[NodeView], quorum: usize) -> String {
    let mut text = String::from(
        "A snapshot: it may have changed by the time you read it. Only a lock call decides.\n",
    );
    let width = views.iter().map(|view| view.label.len()).max().unwrap_or(0);
    for (index, resource) in args.resources.iter().enumerate() {
        let summary = match quorum_holder(views, index, quorum) {
            Some(holder) => format!("held by {holder} on a quorum"),
            None => "not held by anyone on a quorum".to_owned(),
        };
        let _ = writeln!(
            text,
            "\n{resource}: {summary} (quorum {quorum} of {})",
            views.len()
        );
        for view in views {
            let line = match &view.read {
                Err(why) => format!("unreachable: {why}"),
                Ok(holdings) => {
                    let holding = &holdings[index];
                    let mut line = match (&holding.holder, holding.pttl_ms) {
                        (Some(holder), Some(pttl)) => {
                            format!("held by {holder}, expires in {}", human_ms(pttl))
                        }
                        (Some(holder), None) => format!("held by {holder}, no expiry (!)"),
                        (None, _) => "free".to_owned(),
                    };
                    if let Some(fence) = holding.fence {
                        let _ = write!(line, ", fence {fence}");
                    }
                    let _ = write!(line, "; {}", holding.eligibility.describe());
                    line
                }
            };
            let _ = writeln!(text, "  {:width$}  {line}", view.label);
        }
    }
    if let Some(remedy) = remedy(views) {
        let _ = writeln!(text, "\nnote: {remedy}");
    }
    text
}

/// [`sit_out_remedy`](crate::probe::sit_out_remedy) of the nodes that answered.
fn remedy(views: &[NodeView]) -> Option<String> {
    crate::probe::sit_out_remedy(views.iter().filter_map(|view| {
        let holdings = view.read.as_ref().ok()?;
        // A cluster node's keys may lie in slots of different states: the first that waits.
        let eligibility = holdings
            .iter()
            .map(|holding| holding.eligibility)
            .find(|e| !matches!(e, Eligibility::Trusted | Eligibility::Eligible))
            .or_else(|| holdings.first().map(|holding| holding.eligibility))?;
        Some((view.label.as_str(), eligibility))
    }))
}

fn json_report(args: &StatusArgs, keys: &[Vec<u8>], views: &[NodeView], quorum: usize) -> Value {
    let resources: Vec<Value> = args
        .resources
        .iter()
        .enumerate()
        .map(|(index, resource)| {
            let nodes: Vec<Value> = views
                .iter()
                .map(|view| match &view.read {
                    Err(why) => json!({"node": view.label, "reachable": false, "error": why}),
                    Ok(holdings) => {
                        let holding = &holdings[index];
                        let eligibility = &holding.eligibility;
                        json!({
                            "node": view.label,
                            "reachable": true,
                            "holder": holding.holder,
                            "pttl_ms": holding.pttl_ms,
                            "fence": holding.fence,
                            "eligibility": eligibility.word(),
                            "ineligible_for_ms": match eligibility {
                                Eligibility::Ineligible { for_ms, .. } => Some(*for_ms),
                                _ => None,
                            },
                            "sit_out_cause": eligibility.cause().map(SitOutCause::word),
                        })
                    }
                })
                .collect();
            json!({
                "resource": resource,
                "key": String::from_utf8_lossy(&keys[index]),
                "quorum": quorum,
                "quorum_holder": quorum_holder(views, index, quorum),
                "nodes": nodes,
            })
        })
        .collect();
    json!({"snapshot": true, "resources": resources, "sit_out_remedy": remedy(views)})
}
