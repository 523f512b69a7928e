//! `redlock status NAME…`: who holds each lock on each node right now — a snapshot, never a
//! guarantee (it may change the moment it is read), and never a write.

use std::fmt::Write as _;
use std::process::ExitCode;

use redlock_core::SitOutCause;
use redlock_redis::NodeAddr;
use serde_json::{Value, json};

use crate::cli::{Global, StatusArgs};
use crate::output::{Out, human_ms, short_token};
use crate::probe::{self, Eligibility, Probe};
use crate::{Failure, UNAVAILABLE};

/// What one node says about one lock.
struct Holding {
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
    read: Result<(Eligibility, Vec<Holding>), String>,
}

/// Prints the snapshot; exit 69 if a node did not answer (the rest is still shown).
pub(crate) fn status(global: &Global, args: &StatusArgs) -> Result<ExitCode, Failure> {
    let nodes = probe::nodes(global)?;
    let keys: Vec<Vec<u8>> = args
        .resources
        .iter()
        .map(|resource| [global.prefix.as_bytes(), resource.as_bytes()].concat())
        .collect();
    let views: Vec<NodeView> = nodes
        .iter()
        .map(|node| NodeView {
            label: node.label().to_string(),
            read: read_node(node, &keys, global),
        })
        .collect();
    let quorum = redlock_core::majority(nodes.len());
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

fn read_node(
    node: &NodeAddr,
    keys: &[Vec<u8>],
    global: &Global,
) -> Result<(Eligibility, Vec<Holding>), String> {
    let mut probe = Probe::connect(node)?;
    let eligibility = Eligibility::read(&mut probe, node, global.max_ttl)?;
    let mut holdings = Vec::with_capacity(keys.len());
    for key in keys {
        let token: Option<Vec<u8>> = probe.query(node, redis::cmd("GET").arg(key))?;
        let pttl: i64 = probe.query(node, redis::cmd("PTTL").arg(key))?;
        let fence = read_fence(&mut probe, node, key)?;
        holdings.push(Holding {
            holder: token.as_deref().map(short_token),
            pttl_ms: u64::try_from(pttl).ok(),
            fence,
        });
    }
    Ok((eligibility, holdings))
}

/// A key's fence counter: the score of its sorted set, or a string an earlier release stored.
fn read_fence(probe: &mut Probe, node: &NodeAddr, key: &[u8]) -> Result<Option<u64>, String> {
    let fence_key = [redlock_core::FENCE_KEY_PREFIX, key].concat();
    let kind: String = probe.query(node, redis::cmd("TYPE").arg(&fence_key))?;
    let score: Option<f64> = match kind.as_str() {
        "string" => probe.query(node, redis::cmd("GET").arg(&fence_key))?,
        _ => probe.query(
            node,
            redis::cmd("ZSCORE")
                .arg(&fence_key)
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
        .filter_map(|(_, holdings)| holdings[index].holder.as_deref())
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
                Ok((eligibility, holdings)) => {
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
                    let _ = write!(line, "; {}", eligibility.describe());
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
        let (eligibility, _) = view.read.as_ref().ok()?;
        Some((view.label.as_str(), *eligibility))
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
                    Ok((eligibility, holdings)) => {
                        let holding = &holdings[index];
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
