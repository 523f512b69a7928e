//! What `redlock nodes check` warns about: node settings that put a held lock at risk, one line
//! each, saying what it means for the lock. Facts are read from each node (`INFO`, `CONFIG GET`,
//! `TIME`); the rules are pure functions of them.

use std::time::{Duration, Instant};

use redlock_redis::NodeAddr;

use crate::output::human;
use crate::probe::Probe;

/// TIME samples per node; the one with the shortest round trip is kept.
const TIME_SAMPLES: usize = 3;

/// What one node told us that the warnings look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    /// `run_id` (INFO server): the same on two URLs means the same server process.
    pub(crate) run_id: Option<String>,
    /// `role` (INFO replication): `master`, or `slave` for a replica.
    pub(crate) role: Option<String>,
    /// `cluster_enabled:1` (INFO cluster).
    pub(crate) cluster: bool,
    /// `maxmemory` in bytes (INFO memory); 0 is no limit.
    pub(crate) maxmemory: u64,
    /// `maxmemory_policy` (INFO memory).
    pub(crate) policy: Option<String>,
    /// The persistence settings, or why they could not be read.
    pub(crate) persistence: Result<Persistence, String>,
    /// The node's clock minus ours, in µs, measured at the middle of the fastest TIME round
    /// trip (`None` if TIME failed).
    pub(crate) offset_us: Option<i128>,
    /// The user may not run `INFO` (`NOPERM`): everything above read from it is unknown.
    pub(crate) info_denied: bool,
}

/// Persistence settings (`appendonly` from INFO persistence, the rest from `CONFIG GET`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Persistence {
    /// AOF on (`aof_enabled:1`).
    pub(crate) aof: bool,
    /// `appendfsync`: `always`, `everysec` or `no`.
    pub(crate) appendfsync: String,
    /// `save`: the RDB snapshot schedule; empty for none.
    pub(crate) save: String,
}

/// One warning about one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Warning {
    /// `host:port` of the node.
    pub(crate) node: String,
    /// A short name for programs: `eviction`, `clock`, `replica`, `cluster`, `same-server`,
    /// `persistence`, `no-scripts` (and a cluster node's `cluster-…` kinds).
    pub(crate) kind: &'static str,
    /// One line for people: the finding and what it means for the lock.
    pub(crate) message: String,
    /// Whether `--strict` fails on it: every warning but the persistence settings that
    /// restart-aware voting covers (they cost a node's vote after a restart, never a held
    /// lock's safety).
    pub(crate) strict: bool,
}

/// A field `name:value` of an INFO reply.
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

impl Facts {
    /// Reads them: `info` is the node's default `INFO` reply; `reference` is the instant every
    /// node's clock offset is measured against.
    pub(crate) fn read(probe: &mut Probe, node: &NodeAddr, info: &str, reference: Instant) -> Self {
        let aof = info_field(info, "aof_enabled") == Some("1");
        let persistence = config(probe, node, "appendfsync").and_then(|appendfsync| {
            Ok(Persistence {
                aof,
                appendfsync,
                save: config(probe, node, "save")?,
            })
        });
        Self {
            run_id: info_field(info, "run_id").map(str::to_owned),
            role: info_field(info, "role").map(str::to_owned),
            cluster: info_field(info, "cluster_enabled") == Some("1"),
            maxmemory: info_field(info, "maxmemory")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            policy: info_field(info, "maxmemory_policy").map(str::to_owned),
            persistence,
            offset_us: offset_us(probe, node, reference),
            info_denied: false,
        }
    }
}

/// `CONFIG GET name`'s value.
pub(crate) fn config(probe: &mut Probe, node: &NodeAddr, name: &str) -> Result<String, String> {
    let pairs: Vec<String> = probe
        .query(node, redis::cmd("CONFIG").arg("GET").arg(name))
        .map_err(|why| format!("CONFIG GET {name}: {why}"))?;
    match pairs.as_slice() {
        [key, value, ..] if key == name => Ok(value.clone()),
        _ => Err(format!("CONFIG GET {name}: no such setting")),
    }
}

/// The node's `TIME` minus our clock (both as time since `reference`, ours taken at the middle
/// of the round trip), from the sample with the shortest round trip.
fn offset_us(probe: &mut Probe, node: &NodeAddr, reference: Instant) -> Option<i128> {
    let unix_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    // Our wall clock, as µs since the Unix epoch, at `reference`.
    let ours_at_reference =
        i128::try_from(unix_now.as_micros()).ok()? - micros(reference.elapsed());
    let mut best: Option<(Duration, i128)> = None;
    for _ in 0..TIME_SAMPLES {
        let sent = Instant::now();
        let (secs, us): (i64, i64) = probe.query(node, &redis::cmd("TIME")).ok()?;
        let rtt = sent.elapsed();
        let theirs = i128::from(secs) * 1_000_000 + i128::from(us);
        let ours = ours_at_reference + micros(sent.duration_since(reference) + rtt / 2);
        if best.is_none_or(|(fastest, _)| rtt < fastest) {
            best = Some((rtt, theirs - ours));
        }
    }
    best.map(|(_, offset)| offset)
}

fn micros(duration: Duration) -> i128 {
    i128::try_from(duration.as_micros()).unwrap_or(i128::MAX)
}

/// The median of `others` as seen from `ours`: for an even count, the one of the two middle
/// values nearer to `ours` — so that one bad clock among the others does not make this one look
/// bad (with 3 nodes, each good node has the other good one and the bad one as its others).
/// `None` if there are no others.
pub(crate) fn median_of_others(ours: i128, others: &[i128]) -> Option<i128> {
    let mut sorted = others.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => {
            let (low, high) = (sorted[n / 2 - 1], sorted[n / 2]);
            Some(if (ours - low).abs() <= (high - ours).abs() {
                low
            } else {
                high
            })
        }
    }
}

/// Every warning for the nodes (`labels[i]` has `facts[i]`, `None` if it did not answer), in
/// node order. `max_ttl` sets the clock bound (1 % of it) and the restart wait.
pub(crate) fn warnings(
    labels: &[String],
    facts: &[Option<Facts>],
    max_ttl: Duration,
) -> Vec<Warning> {
    let offsets: Vec<Option<i128>> = facts
        .iter()
        .map(|facts| facts.as_ref().and_then(|f| f.offset_us))
        .collect();
    let run_ids: Vec<Option<&str>> = facts
        .iter()
        .map(|facts| facts.as_ref().and_then(|f| f.run_id.as_deref()))
        .collect();
    let mut out = Vec::new();
    for (index, (label, facts)) in labels.iter().zip(facts).enumerate() {
        let Some(facts) = facts else { continue };
        let mut warn = |kind, message: String| {
            out.push(Warning {
                node: label.clone(),
                kind,
                message,
                strict: true,
            });
        };
        if facts.info_denied {
            warn(
                "info-denied",
                "INFO is denied to this user (an ACL without +info): restart-aware voting reads \
                 no identity there and the node votes under its epoch alone, so a restart from a \
                 snapshot, a failover behind its address, a swapped-in database and an evicted \
                 lock key go unseen; nor can this check read its role, eviction policy or \
                 persistence. Allow INFO to the lock's user"
                    .to_owned(),
            );
            // What INFO would tell is unknown: no warning guesses at it.
            if let Some(message) = clock(&offsets, index, max_ttl) {
                warn("clock", message);
            }
            continue;
        }
        if let Some(message) = eviction(facts, max_ttl) {
            warn("eviction", message);
        }
        if let Some(message) = clock(&offsets, index, max_ttl) {
            warn("clock", message);
        }
        if let Some(role) = facts.role.as_deref().filter(|role| *role != "master") {
            warn(
                "replica",
                format!(
                    "is a replica (role:{role}): it refuses the lock's writes (READONLY), so it \
                     never votes; if a failover promotes it, restart-aware voting sees its new \
                     identity and it refuses to vote for --max-ttl after the promotion; use \
                     independent masters"
                ),
            );
        }
        if let Some(first) = same_server(&run_ids, index) {
            let short: String = run_ids[index].unwrap_or_default().chars().take(8).collect();
            warn(
                "same-server",
                format!(
                    "reaches the same server as {} (run_id {short}…): one server counted as two \
                     nodes, so one crash or one lost memory costs two votes, and a quorum may not \
                     be a majority of independent servers",
                    labels[first]
                ),
            );
        }
        if let Some(message) = persistence(&facts.persistence, max_ttl) {
            // Settings it could read are covered by restart-aware voting: not for --strict.
            out.push(Warning {
                node: label.clone(),
                kind: "persistence",
                message,
                strict: facts.persistence.is_err(),
            });
        }
    }
    out
}

/// maxmemory with a policy that may evict: lock keys have a TTL, so `volatile-*` policies
/// evict them too, and `allkeys-*` evict anything. Restart-aware voting sees every eviction
/// (the node sits out `max_ttl`); what an eviction costs is the warning.
fn eviction(facts: &Facts, max_ttl: Duration) -> Option<String> {
    let policy = facts.policy.as_deref().unwrap_or("(unknown)");
    (facts.maxmemory > 0 && policy != "noeviction").then(|| {
        format!(
            "maxmemory {} bytes with maxmemory-policy {policy}: when memory runs short the node \
             may evict a held lock's key (lock keys have a TTL, so volatile-* policies take them \
             too); restart-aware voting sees every eviction and the node then sits out \
             --max-ttl ({}), so a node that evicts often rarely votes (with restart-aware voting \
             off it would grant the lock to a second client), and each acquisition there also \
             reads the eviction count (INFO stats) unless the node publishes its evictions \
             (notify-keyspace-events Ee); use maxmemory-policy noeviction (a full node then \
             refuses new locks)",
            facts.maxmemory,
            human(max_ttl)
        )
    })
}

/// The node's clock against the median of the others' ([`median_of_others`]), bound 1 % of
/// `max_ttl`.
fn clock(offsets: &[Option<i128>], index: usize, max_ttl: Duration) -> Option<String> {
    let ours = offsets.get(index).copied().flatten()?;
    let others: Vec<i128> = offsets
        .iter()
        .enumerate()
        .filter(|(other, _)| *other != index)
        .filter_map(|(_, offset)| *offset)
        .collect();
    let median = median_of_others(ours, &others)?;
    let bound = micros(max_ttl / 100);
    let off = ours - median;
    (off.abs() > bound).then(|| {
        let magnitude = human(Duration::from_micros(
            u64::try_from(off.unsigned_abs()).unwrap_or(u64::MAX),
        ));
        let direction = if off > 0 { "ahead of" } else { "behind" };
        format!(
            "its clock (TIME) is {magnitude} {direction} the median of the other nodes, more \
             than 1% of --max-ttl ({}): is it synchronised (NTP)? Fencing tokens need node clocks \
             within --max-ttl of each other, and a clock left unsynchronised may also run fast and \
             expire lock keys early; this checks offsets once, not drift rates",
            human(max_ttl / 100)
        )
    })
}

/// The first earlier node with the same `run_id`, if any.
fn same_server(run_ids: &[Option<&str>], index: usize) -> Option<usize> {
    let ours = run_ids.get(index).copied().flatten()?;
    run_ids[..index]
        .iter()
        .position(|other| *other == Some(ours))
}

/// Persistence settings, and what a restart costs under them. Restart-aware voting sees every
/// restart — an empty one by its missing epoch, one from an older state (a snapshot, AOF after a
/// crash) by the node's new `run_id` — and the node refuses to vote for the longest TTL after
/// it; what persistence still decides is which keys a restart loses.
fn persistence(persistence: &Result<Persistence, String>, max_ttl: Duration) -> Option<String> {
    let wait = human(max_ttl);
    let p = match persistence {
        Ok(p) => p,
        Err(why) => {
            return Some(format!(
                "cannot read its persistence settings ({why}): after any restart the node \
                 refuses to vote for --max-ttl ({wait}) — restart-aware voting sees a restart \
                 by the node's new run_id, which its clients must be allowed to read (INFO)"
            ));
        }
    };
    let snapshots = !p.save.trim().is_empty();
    match (p.aof, p.appendfsync.as_str()) {
        (true, "always") => None,
        (true, fsync) => Some(format!(
            "appendfsync {fsync}: a crash (power loss, kernel panic, or redis-server itself \
             while the disk is slow) can lose the last {} of writes; restart-aware voting sees \
             the restart by the node's new run_id, and the node refuses to vote for --max-ttl \
             ({wait}) after it, as after any restart",
            if fsync == "no" {
                "seconds (the OS flushes when it likes)"
            } else {
                "second or two"
            }
        )),
        (false, _) if snapshots => Some(format!(
            "RDB snapshots without AOF (save \"{}\", appendonly no): after a crash the node \
             reloads an older snapshot, with its epoch but without the lock keys written since; \
             restart-aware voting sees the restart by the node's new run_id, and the node \
             refuses to vote for --max-ttl ({wait}) after it, as after any restart",
            p.save.trim()
        )),
        (false, _) => Some(format!(
            "no persistence (appendonly no, no snapshots): a restart loses every lock key; \
             restart-aware voting covers it, the node refusing to vote for --max-ttl ({wait}) \
             after a restart, so each restart costs its vote that long; appendonly yes with \
             appendfsync always keeps the keys (the wait after a restart stays)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:6379")).collect()
    }

    fn clean(run_id: &str) -> Facts {
        Facts {
            run_id: Some(run_id.to_owned()),
            role: Some("master".to_owned()),
            cluster: false,
            maxmemory: 0,
            policy: Some("noeviction".to_owned()),
            persistence: Ok(Persistence {
                aof: true,
                appendfsync: "always".to_owned(),
                save: String::new(),
            }),
            offset_us: Some(0),
            info_denied: false,
        }
    }

    const MAX_TTL: Duration = Duration::from_secs(60);

    fn kinds(facts: Vec<Facts>) -> Vec<(String, &'static str)> {
        let n = facts.len();
        let facts: Vec<Option<Facts>> = facts.into_iter().map(Some).collect();
        warnings(&labels(n), &facts, MAX_TTL)
            .into_iter()
            .map(|w| (w.node, w.kind))
            .collect()
    }

    #[test]
    fn a_clean_setup_has_no_warning() {
        assert!(kinds(vec![clean("a"), clean("b"), clean("c")]).is_empty());
        // A node that did not answer has no facts and no warning (it failed a check).
        let facts = vec![Some(clean("a")), None, Some(clean("c"))];
        assert!(warnings(&labels(3), &facts, MAX_TTL).is_empty());
    }

    #[test]
    fn each_setting_warns_on_its_node() {
        let mut evicting = clean("b");
        evicting.maxmemory = 1 << 20;
        evicting.policy = Some("volatile-lru".to_owned());
        let mut limited = clean("c");
        limited.maxmemory = 1 << 20; // noeviction: fine
        assert_eq!(
            kinds(vec![clean("a"), evicting, limited]),
            [("10.0.0.1:6379".to_owned(), "eviction")]
        );

        let mut blind = clean("b");
        blind.info_denied = true;
        assert_eq!(
            kinds(vec![clean("a"), blind, clean("c")]),
            [("10.0.0.1:6379".to_owned(), "info-denied")]
        );

        let mut replica = clean("b");
        replica.role = Some("slave".to_owned());
        let mut cluster = clean("c");
        cluster.cluster = true;
        // A cluster node's warnings are its shards' (`nodes check`), not cluster mode itself.
        assert_eq!(
            kinds(vec![clean("a"), replica, cluster]),
            [("10.0.0.1:6379".to_owned(), "replica")]
        );

        assert_eq!(
            kinds(vec![clean("a"), clean("b"), clean("a")]),
            [("10.0.0.2:6379".to_owned(), "same-server")]
        );
    }

    #[test]
    fn the_clock_bound_is_one_percent_of_max_ttl_from_the_median_of_the_others() {
        let at = |offsets: &[i128]| {
            let facts: Vec<Facts> = offsets
                .iter()
                .enumerate()
                .map(|(i, &offset)| Facts {
                    offset_us: Some(offset),
                    ..clean(&i.to_string())
                })
                .collect();
            kinds(facts)
        };
        // 1 % of 60 s = 600 ms.
        assert!(
            at(&[0, 599_000, 1_000]).is_empty(),
            "each within 600 ms of the others' median"
        );
        assert_eq!(
            at(&[0, 10_000, 700_000]),
            [("10.0.0.2:6379".to_owned(), "clock")]
        );
        assert_eq!(
            at(&[0, -5_000, -650_000, 3_000, 1_000]),
            [("10.0.0.2:6379".to_owned(), "clock")],
            "one bad clock among five does not make the others look bad"
        );
        // Two nodes: each is compared with the other.
        assert_eq!(at(&[0, 2_000_000]).len(), 2);
        // One node: nothing to compare with.
        assert!(at(&[5_000_000]).is_empty());
        assert_eq!(
            at(&[0, 0, 2_000_000]),
            [("10.0.0.2:6379".to_owned(), "clock")],
            "with three nodes, only the odd one out"
        );
        assert_eq!(median_of_others(0, &[3, 1, 2]), Some(2));
        assert_eq!(median_of_others(0, &[4, 1, 2, 3]), Some(2));
        assert_eq!(median_of_others(5, &[4, 1, 2, 3]), Some(3));
        assert_eq!(median_of_others(0, &[]), None);
    }

    #[test]
    fn persistence_says_what_restart_aware_voting_covers() {
        let with = |aof: bool, appendfsync: &str, save: &str| {
            persistence(
                &Ok(Persistence {
                    aof,
                    appendfsync: appendfsync.to_owned(),
                    save: save.to_owned(),
                }),
                MAX_TTL,
            )
        };
        assert_eq!(with(true, "always", "3600 1"), None);
        for (aof, fsync, save) in [
            (true, "everysec", ""),
            (true, "no", ""),
            (false, "everysec", "3600 1"),
        ] {
            let warning = with(aof, fsync, save).expect("warns");
            assert!(warning.contains("new run_id"), "{warning}");
            assert!(warning.contains("1m00s"), "{warning}");
        }
        let none = with(false, "everysec", "").expect("warns");
        assert!(none.contains("restart-aware voting covers it"), "{none}");
        assert!(none.contains("1m00s"), "{none}");
        let unknown = persistence(&Err("CONFIG GET save: NOPERM".to_owned()), MAX_TTL);
        assert!(unknown.expect("warns").contains("NOPERM"));
    }
}
