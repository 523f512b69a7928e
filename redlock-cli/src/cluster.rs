//! A cluster node as `nodes check` and `status` read it: its slot map (`CLUSTER SLOTS`), a
//! probe per master (same user, password and TLS settings as the node URL), and what each
//! master's slot epochs say against its identity. Reads only, like every probe.

use redlock_core::{Keyspace, Slot, vote_slots};
use redlock_redis::{NodeAddr, SlotMap};

use crate::probe::Probe;

/// How many slots one pipeline reads.
const CHUNK: usize = 1024;

/// One cluster, as its node URL answered.
pub(crate) struct ClusterView {
    pub(crate) map: SlotMap,
    /// Per master: how to reach it, and its probe once connected.
    masters: Vec<Master>,
}

struct Master {
    label: String,
    addr: Result<NodeAddr, String>,
    probe: Option<Result<Probe, String>>,
}

/// What `nodes check` shows of one master.
pub(crate) struct Shard {
    pub(crate) master: String,
    /// Its slots, as inclusive ranges.
    pub(crate) ranges: Vec<(u16, u16)>,
    pub(crate) replicas: Vec<String>,
    /// Its memory identity (`run_id:master_replid:…`) and what its slots' epochs say, or why it
    /// could not be read.
    pub(crate) read: Result<Epochs, String>,
}

/// What a master's slot epochs say against its identity.
#[derive(Debug, Default)]
pub(crate) struct Epochs {
    pub(crate) identity: Option<String>,
    /// Slots whose epoch this master stamped (or an operator's empty trust): they vote.
    pub(crate) own: usize,
    /// Slots whose epoch another identity stamped — a promoted replica, a restart, an imported
    /// slot: their next restart-aware acquisition sits out `--max-ttl`.
    pub(crate) foreign: usize,
    /// Slots without an epoch: their first restart-aware acquisition sits out `--max-ttl`.
    pub(crate) fresh: usize,
}

/// Whether the node `probe` reaches runs in cluster mode: `cluster_enabled:1` in its `INFO`
/// (`info`, `None` where the user is denied `INFO`), else whether it answers a slot map.
pub(crate) fn is_cluster(probe: &mut Probe, node: &NodeAddr, info: Option<&str>) -> bool {
    match info {
        Some(info) => crate::warnings::info_field(info, "cluster_enabled") == Some("1"),
        None => ClusterView::read(probe, node).is_ok(),
    }
}

impl ClusterView {
    /// Reads the slot map on the node's own connection.
    pub(crate) fn read(probe: &mut Probe, node: &NodeAddr) -> Result<Self, String> {
        let reply: redis::Value = probe
            .query(node, redis::cmd("CLUSTER").arg("SLOTS"))
            .map_err(|why| format!("CLUSTER SLOTS: {why}"))?;
        let map = SlotMap::parse(&reply, node.host())
            .ok_or_else(|| "CLUSTER SLOTS answered an unknown shape".to_owned())?;
        let masters = map
            .masters()
            .iter()
            .map(|(host, port)| Master {
                label: format!("{host}:{port}"),
                addr: node
                    .for_master(host, *port)
                    .map_err(|err| crate::probe::scrub(node, err.to_string())),
                probe: None,
            })
            .collect();
        Ok(Self { map, masters })
    }

    /// The master that serves `key`'s slot, connected.
    pub(crate) fn at_key(&mut self, key: &[u8]) -> Result<(&NodeAddr, &mut Probe), String> {
        let slot = Slot::of(key);
        let master = self
            .map
            .master_of(slot)
            .ok_or_else(|| format!("no master serves {slot}"))?;
        self.master(master)
    }

    fn master(&mut self, index: usize) -> Result<(&NodeAddr, &mut Probe), String> {
        let master = &mut self.masters[index];
        let addr = master.addr.as_ref().map_err(Clone::clone)?;
        let probe = master.probe.get_or_insert_with(|| Probe::connect(addr));
        match probe {
            Ok(probe) => Ok((addr, probe)),
            Err(why) => Err(format!("master {}: {why}", master.label)),
        }
    }

    /// Every master's slots, replicas, identity and slot epochs.
    pub(crate) fn shards(&mut self) -> Vec<Shard> {
        (0..self.masters.len())
            .map(|index| {
                let slots: Vec<Slot> = self.map.slots_of(index).collect();
                let replicas = self
                    .map
                    .replicas_of(index)
                    .map(|(host, port)| format!("{host}:{port}"))
                    .collect();
                Shard {
                    master: self.masters[index].label.clone(),
                    ranges: ranges(&slots),
                    replicas,
                    read: self.master(index).and_then(|(addr, probe)| {
                        epochs(probe, addr, &slots).map_err(|why| format!("master: {why}"))
                    }),
                }
            })
            .collect()
    }

    /// Where each of `votes` votes' slot is served: `(vote slot, master label)`, the master
    /// `None` when no master serves it.
    pub(crate) fn vote_masters(&self, votes: usize) -> Vec<(Slot, Option<String>)> {
        vote_slots(votes)
            .map(|slot| {
                let master = self
                    .map
                    .master_of(slot)
                    .map(|index| self.masters[index].label.clone());
                (slot, master)
            })
            .collect()
    }
}

/// Consecutive slots as inclusive ranges.
fn ranges(slots: &[Slot]) -> Vec<(u16, u16)> {
    let mut ranges: Vec<(u16, u16)> = Vec::new();
    for slot in slots.iter().map(|slot| slot.get()) {
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == slot => *last = slot,
            _ => ranges.push((slot, slot)),
        }
    }
    ranges
}

/// The master's identity, and its slots' epochs and stamps counted against it (a pipeline of
/// `GET`s of the per-slot names, [`CHUNK`] slots at a time).
fn epochs(probe: &mut Probe, addr: &NodeAddr, slots: &[Slot]) -> Result<Epochs, String> {
    let info: Option<Vec<u8>> = probe
        .query(
            addr,
            redis::cmd("INFO")
                .arg("server")
                .arg("replication")
                .arg("stats"),
        )
        .ok();
    let identity = info.and_then(|info| redlock_core::node_identity(&info, addr.database()));
    let mut epochs = Epochs {
        identity: identity
            .as_deref()
            .map(|identity| String::from_utf8_lossy(identity).into_owned()),
        ..Epochs::default()
    };
    for chunk in slots.chunks(CHUNK) {
        // One slot per key: a cluster refuses an `MGET` across slots.
        let mut pipe = redis::pipe();
        for slot in chunk {
            let tag = slot.tag().as_bytes();
            pipe.cmd("GET")
                .arg(&*Keyspace::Cluster.epoch_key(tag))
                .cmd("GET")
                .arg(&*Keyspace::Cluster.epoch_id_key(tag));
        }
        let read: Vec<Option<Vec<u8>>> = probe.query_pipe(addr, &pipe)?;
        for pair in read.chunks(2) {
            let [epoch, stamp] = pair else { continue };
            let changed = identity
                .as_deref()
                .and_then(|identity| redlock_core::stamp_change(stamp.as_deref(), identity));
            match (epoch, changed) {
                (None, _) => epochs.fresh += 1,
                (Some(_), Some(_)) => epochs.foreign += 1,
                (Some(_), None) => epochs.own += 1,
            }
        }
    }
    Ok(epochs)
}

impl Shard {
    /// One line for people.
    pub(crate) fn describe(&self) -> String {
        let count: usize = self
            .ranges
            .iter()
            .map(|(first, last)| usize::from(last - first) + 1)
            .sum();
        let ranges: Vec<String> = self
            .ranges
            .iter()
            .map(|(first, last)| match first == last {
                true => first.to_string(),
                false => format!("{first}-{last}"),
            })
            .collect();
        let replicas = match self.replicas.is_empty() {
            true => "no replica".to_owned(),
            false => format!("replicas {}", self.replicas.join(", ")),
        };
        let epochs = match &self.read {
            Ok(epochs) => epochs.describe(),
            Err(why) => format!("FAILED {why}"),
        };
        format!(
            "master {}: {count} slots ({}), {replicas}; {epochs}",
            self.master,
            ranges.join(" ")
        )
    }
}

impl Epochs {
    /// One phrase for people.
    pub(crate) fn describe(&self) -> String {
        let identity = match &self.identity {
            Some(identity) => {
                format!("identity {}…", identity.chars().take(8).collect::<String>())
            }
            None => "identity unknown (INFO denied)".to_owned(),
        };
        format!(
            "{identity}; slot epochs: {} its own (vote), {} stamped by another identity (sit out \
             --max-ttl at their next acquisition), {} none yet (sit out --max-ttl at their \
             first)",
            self.own, self.foreign, self.fresh
        )
    }

    /// Whether any slot will sit out.
    pub(crate) fn waits(&self) -> bool {
        self.foreign + self.fresh > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_slots_make_ranges() {
        let slots: Vec<Slot> = [0, 1, 2, 5, 7, 8]
            .into_iter()
            .filter_map(Slot::new)
            .collect();
        assert_eq!(ranges(&slots), [(0, 2), (5, 5), (7, 8)]);
        assert_eq!(ranges(&[]), []);
    }
}
