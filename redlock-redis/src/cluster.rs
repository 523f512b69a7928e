//! A cluster node's routing, shared by both drivers and free of I/O: the slot map a seed
//! answers (`CLUSTER SHARDS`, or `CLUSTER SLOTS` on Redis 6 and where `SHARDS` leaves a slot's
//! master in doubt), which master each request goes to, and how a batch's answers come
//! back together in order.
//!
//! A node URL whose server runs in cluster mode is one node of the lock (one vote), whose keys
//! live on several masters. The driver keeps one connection per master (tracked as a standalone
//! node's is: it proves the slots it serves one by one, see `redlock_core::MemoryWatch`), sends
//! each request to the master of its keys' slot, follows an `ASK` once to the importing master
//! it names (after `ASKING`, the map unchanged: see [`crate::asking`]; a master the map does not
//! know yet keeps its connection with the map, [`crate::asking::IMPORTING_KEPT`]), and after any other
//! cluster error (`MOVED`, `CLUSTERDOWN`, `TRYAGAIN`, `MASTERDOWN`, or an `ASK` again) refreshes
//! the map and sends those requests once more. Not the `redis` crate's cluster connection: it follows `MOVED` silently and hands
//! pushes over without the master they came from, where this client needs to know which master
//! answered and to count the cluster as one vote.
//!
//! # What it never does
//! It never sends a request whose keys span slots (the core answers those itself), never sends
//! a request twice but after a cluster error (which the server sends before running anything),
//! and never lets a request of the batch go unanswered.

use redis::Value;
use redlock_core::{Keyspace, NodeErrorKind, Op, Reply, SLOT_COUNT, Slot, Transmit, vote_slots};

use crate::Answers;
use crate::node::ClusterVote;

/// Which master serves each slot, as one node answered `CLUSTER SHARDS` or `CLUSTER SLOTS`. Public (hidden) for
/// the `redlock` command, which shows a cluster node's shards; not a stable API.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    /// Each master's `host:port`, as the cluster announces it.
    masters: Vec<(String, u16)>,
    /// The replicas' `host:port`: where else to ask for the map when no master answers.
    replicas: Vec<(String, u16)>,
    /// Per replica, the index of its master in `masters`.
    replica_of: Vec<usize>,
    /// The node id of every master and replica (its `host:port` where the reply gives none):
    /// what tells that two node URLs lead to one cluster.
    ids: Vec<String>,
    /// Per slot, the index of its master in `masters` (`None`: no master serves it).
    owner: Vec<Option<u16>>,
}

impl SlotMap {
    /// A map of no master and no slot served.
    fn empty() -> Self {
        Self {
            masters: Vec::new(),
            replicas: Vec::new(),
            replica_of: Vec::new(),
            ids: Vec::new(),
            owner: vec![None; usize::from(SLOT_COUNT)],
        }
    }

    /// Reads a `CLUSTER SLOTS` reply: `[start, end, [host, port, id, …], replicas…]` per range.
    /// A node announced without a host (empty, or `?`) is reached at `seed_host`, the host the
    /// answer came from. `None` when the reply has another shape.
    pub fn parse(reply: &Value, seed_host: &str) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut map = Self::empty();
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let [Value::Int(start), Value::Int(end), master, replicas @ ..] = &fields[..] else {
                return None;
            };
            let (host, port, id) = endpoint(master, seed_host)?;
            let index = match map.masters.iter().position(|m| m.0 == host && m.1 == port) {
                Some(index) => index,
                None => {
                    map.ids.push(id);
                    map.masters.push((host, port));
                    map.masters.len() - 1
                }
            };
            for replica in replicas {
                let (host, port, id) = endpoint(replica, seed_host)?;
                if !map.ids.contains(&id) {
                    map.ids.push(id);
                    map.replicas.push((host, port));
                    map.replica_of.push(index);
                }
            }
            let index = u16::try_from(index).ok()?;
            let start = Slot::new(u16::try_from(*start).ok()?)?.get();
            let end = Slot::new(u16::try_from(*end).ok()?)?.get();
            for slot in start..=end {
                map.owner[usize::from(slot)] = Some(index);
            }
        }
        Some(map)
    }

    /// Reads a `CLUSTER SHARDS` reply (Redis 7, Valkey 7.2 and later), a map per shard as
    /// RESP3 answers it or a flat `[key, value, …]` array as RESP2 does: its `slots` (start,
    /// end, …) and its `nodes`, each with its `id`, `role`, `health`, its preferred `endpoint`
    /// (its IP, or its host name with `cluster-preferred-endpoint-type hostname`; empty or `?`
    /// reads as `seed_host`) and `port`, or `tls-port` for a TLS client (`tls`) where the node
    /// has one. A shard without slots lends only its node ids; a replica whose health is
    /// `fail` is left out. `None` when the reply has another shape, or when a shard lists more
    /// than one master whose health is not `fail`.
    pub fn parse_shards(reply: &Value, seed_host: &str, tls: bool) -> Option<Self> {
        let Value::Array(shards) = reply else {
            return None;
        };
        let mut map = Self::empty();
        for shard in shards {
            let shard = fields(shard)?;
            let field = |name: &str| shard.iter().find(|(key, _)| key == name).map(|(_, v)| *v);
            let Some(Value::Array(bounds)) = field("slots") else {
                return None;
            };
            let Some(Value::Array(nodes)) = field("nodes") else {
                return None;
            };
            let mut master = None;
            let mut live_masters = 0_usize;
            let mut replicas = Vec::new();
            for node in nodes {
                let node = fields(node)?;
                let get = |name: &str| node.iter().find(|(key, _)| key == name).map(|(_, v)| *v);
                let id = get("id").and_then(text)?;
                if !map.ids.contains(&id) {
                    map.ids.push(id);
                }
                let port = match (tls, get("tls-port"), get("port")) {
                    (true, Some(Value::Int(port)), _) | (_, _, Some(Value::Int(port))) => *port,
                    _ => return None,
                };
                let host = match get("endpoint").and_then(text) {
                    Some(host) if !host.is_empty() && host != "?" => host,
                    _ => seed_host.to_owned(),
                };
                let address = (host, u16::try_from(port).ok()?);
                let failed = get("health").and_then(text).as_deref() == Some("fail");
                let role = get("role").and_then(text);
                live_masters += usize::from(role.as_deref() == Some("master") && !failed);
                match role.as_deref() {
                    // A failed master (the old one, beside its promoted replica) never wins.
                    Some("master") if !failed || master.is_none() => master = Some(address),
                    _ if failed => {}
                    _ => replicas.push(address),
                }
            }
            // Two live masters in a shard (Valkey groups a shard by its id, so a failed-back
            // master sits beside its dead former replica until that one is flagged failed):
            // the reply does not say which serves its slots, nor whether the ones it lists (or
            // leaves empty) were read from the stale one. `CLUSTER SLOTS` says.
            if live_masters > 1 {
                return None;
            }
            if bounds.is_empty() {
                continue;
            }
            let Some(master) = master else { continue };
            let index = match map.masters.iter().position(|m| *m == master) {
                Some(index) => index,
                None => {
                    map.masters.push(master);
                    map.masters.len() - 1
                }
            };
            for replica in replicas {
                map.replicas.push(replica);
                map.replica_of.push(index);
            }
            let index = u16::try_from(index).ok()?;
            for pair in bounds.chunks(2) {
                let [Value::Int(start), Value::Int(end)] = pair else {
                    return None;
                };
                let start = Slot::new(u16::try_from(*start).ok()?)?.get();
                let end = Slot::new(u16::try_from(*end).ok()?)?.get();
                for slot in start..=end {
                    map.owner[usize::from(slot)] = Some(index);
                }
            }
        }
        Some(map)
    }

    /// The replicas, as `(host, port)`.
    pub fn replicas(&self) -> &[(String, u16)] {
        &self.replicas
    }

    /// The replicas of master `master`, as `(host, port)`.
    pub fn replicas_of(&self, master: usize) -> impl Iterator<Item = &(String, u16)> + '_ {
        self.replicas
            .iter()
            .zip(&self.replica_of)
            .filter(move |(_, of)| **of == master)
            .map(|(replica, _)| replica)
    }

    /// Whether a master serves every slot.
    pub fn is_complete(&self) -> bool {
        self.owner.iter().all(Option::is_some)
    }

    /// Every master, as `(host, port)`; a master's index is its place here.
    pub fn masters(&self) -> &[(String, u16)] {
        &self.masters
    }

    /// The master that serves `slot`, if any does.
    pub fn master_of(&self, slot: Slot) -> Option<usize> {
        self.owner[usize::from(slot.get())].map(usize::from)
    }

    /// The slots master `master` serves.
    pub fn slots_of(&self, master: usize) -> impl Iterator<Item = Slot> + '_ {
        Slot::all().filter(move |&slot| self.master_of(slot) == Some(master))
    }
}

/// `[host, port, id, …]` of a node in a `CLUSTER SLOTS` reply, the id defaulting to
/// `host:port`.
fn endpoint(node: &Value, seed_host: &str) -> Option<(String, u16, String)> {
    let Value::Array(fields) = node else {
        return None;
    };
    let [host, Value::Int(port), rest @ ..] = &fields[..] else {
        return None;
    };
    let host = match text(host)?.as_str() {
        "" | "?" => seed_host.to_owned(),
        host => host.to_owned(),
    };
    let port = u16::try_from(*port).ok()?;
    let id = rest
        .first()
        .and_then(text)
        .unwrap_or_else(|| format!("{host}:{port}"));
    Some((host, port, id))
}

/// The clusters a client's nodes lead to, by the ids of every master and replica their maps
/// named: two nodes that share any are one cluster, which must never vote twice.
#[derive(Debug, Clone, Default)]
pub(crate) struct Clusters(std::sync::Arc<std::sync::Mutex<Vec<Claim>>>);

/// A node, the ids of every node its maps ever named, and its latest map.
type Claim = (usize, Vec<String>, SlotMap);

impl Clusters {
    /// Node `node` leads to the cluster of `map`: `Err(other)` if node `other` leads there too
    /// (then `node` must refuse to vote), else recorded.
    pub(crate) fn claim(&self, node: usize, map: &SlotMap) -> Result<(), usize> {
        let mut known = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let shared = known
            .iter()
            .find(|(other, ids, _)| *other != node && ids.iter().any(|id| map.ids.contains(id)));
        if let Some((other, ..)) = shared {
            return Err(*other);
        }
        // Kept across maps: a cluster whose masters all changed since is still the same one.
        match known.iter_mut().find(|(other, ..)| *other == node) {
            Some((_, ids, latest)) => {
                let new: Vec<String> = map
                    .ids
                    .iter()
                    .filter(|id| !ids.contains(id))
                    .cloned()
                    .collect();
                ids.extend(new);
                latest.clone_from(map);
            }
            None => known.push((node, map.ids.clone(), map.clone())),
        }
        Ok(())
    }

    /// The latest map node `node` claimed, if it leads to a cluster (a release-notice
    /// subscriber starts from it).
    pub(crate) fn map(&self, node: usize) -> Option<SlotMap> {
        let known = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let claim = known.iter().find(|(other, ..)| *other == node);
        claim.map(|(.., map)| map.clone())
    }
}

/// Why a cluster node has no slot map.
#[derive(Debug)]
pub(crate) enum Unmapped {
    /// No node answered `CLUSTER SHARDS` or `CLUSTER SLOTS` (or its answer was not a map).
    Redis(redis::RedisError),
    /// Another node of this client leads to the same cluster ([`Clusters::claim`]).
    SameCluster { other: usize },
}

impl From<redis::RedisError> for Unmapped {
    fn from(err: redis::RedisError) -> Self {
        Self::Redis(err)
    }
}

impl std::fmt::Display for Unmapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Redis(err) => write!(f, "{err}"),
            Self::SameCluster { other } => write!(f, "the cluster of node #{other}"),
        }
    }
}

impl Unmapped {
    /// Every request of `batch` answered for this failure.
    pub(crate) fn answers(&self, batch: &[Transmit]) -> crate::BatchReplies {
        match self {
            Self::Redis(err) => crate::BatchReplies::failed(batch, err),
            Self::SameCluster { other } => {
                tracing::warn!(
                    other,
                    "this node leads to another node's cluster: it never votes"
                );
                crate::BatchReplies::refused(batch, NodeErrorKind::SameCluster)
            }
        }
    }
}

/// The earlier vote of the same cluster whose slot `map` serves from the master of `vote`'s
/// slot, if any: that vote must refuse, or a lock would count one master twice.
pub(crate) fn shares_master(map: &SlotMap, vote: ClusterVote) -> Option<usize> {
    let slots: Vec<Slot> = vote_slots(vote.votes).collect();
    let mine = map.master_of(*slots.get(vote.vote)?)?;
    slots[..vote.vote]
        .iter()
        .position(|slot| map.master_of(*slot) == Some(mine))
}

/// The map a node answered `CLUSTER SHARDS` with (`Ok(None)`: the server has no such command,
/// answered another shape, named two live masters in a shard, or left a slot without a master
/// — ask `CLUSTER SLOTS`, which names each slot's owner), or the transport error.
pub(crate) fn from_shards(
    reply: redis::RedisResult<Value>,
    seed_host: &str,
    tls: bool,
) -> redis::RedisResult<Option<SlotMap>> {
    match reply {
        // A shard whose slots the reply lists empty (a server that reads them from a stale
        // master listed first) leaves them unserved here, not in `CLUSTER SLOTS`.
        Ok(reply) => Ok(SlotMap::parse_shards(&reply, seed_host, tls).filter(SlotMap::is_complete)),
        // A server error (an unknown subcommand on Redis 6): the older command.
        Err(err) if err.code().is_some() => Ok(None),
        Err(err) => Err(err),
    }
}

/// The map a node answered `CLUSTER SLOTS` with.
pub(crate) fn from_slots(
    reply: redis::RedisResult<Value>,
    seed_host: &str,
) -> redis::RedisResult<SlotMap> {
    SlotMap::parse(&reply?, seed_host).ok_or_else(|| {
        (
            redis::ErrorKind::Parse,
            "CLUSTER SLOTS answered an unknown shape",
        )
            .into()
    })
}

/// A map's fields as RESP3 answers them, or a flat `[key, value, …]` array's as RESP2 does.
fn fields(value: &Value) -> Option<Vec<(String, &Value)>> {
    match value {
        Value::Map(pairs) => pairs
            .iter()
            .map(|(key, value)| Some((text(key)?, value)))
            .collect(),
        Value::Array(flat) if flat.len() % 2 == 0 => flat
            .chunks(2)
            .map(|pair| Some((text(&pair[0])?, &pair[1])))
            .collect(),
        _ => None,
    }
}

/// A bulk or simple string's text.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

/// Where a batch goes on a cluster: the requests of each master, by index into the batch.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Routes {
    /// Per master (index into [`SlotMap::masters`]), its requests' indexes, in batch order.
    pub per_master: Vec<(usize, Vec<usize>)>,
    /// Requests no master serves (their slot is unassigned): a cluster error each.
    pub unserved: Vec<usize>,
    /// Trusts: each stamps every slot's epoch, master by master ([`trust_commands`]).
    pub trusts: Vec<usize>,
}

impl Routes {
    /// Routes the requests `indexes` of `batch` by `map`.
    pub(crate) fn plan(
        map: &SlotMap,
        batch: &[Transmit],
        indexes: impl IntoIterator<Item = usize>,
    ) -> Self {
        let mut routes = Self::default();
        for index in indexes {
            let command = &batch[index].command;
            if command.op() == Op::Trust {
                routes.trusts.push(index);
                continue;
            }
            let slot = Slot::of(command.spec().keys().next().unwrap_or_default());
            match map.master_of(slot) {
                Some(master) => match routes.per_master.iter_mut().find(|(m, _)| *m == master) {
                    Some((_, requests)) => requests.push(index),
                    None => routes.per_master.push((master, vec![index])),
                },
                None => routes.unserved.push(index),
            }
        }
        routes
    }
}

/// The answers of a batch being routed, one slot per request in batch order.
pub(crate) struct Gathered {
    replies: Vec<Option<Reply>>,
    /// Requests a master redirected with `ASK`, and to which master (`host:port`), not yet
    /// followed.
    asked: Vec<(usize, String)>,
}

impl Gathered {
    /// Nothing answered yet, for a batch of `len` requests.
    pub(crate) fn new(len: usize) -> Self {
        Self {
            replies: vec![None; len],
            asked: Vec::new(),
        }
    }

    /// A master's answers ([`Gathered::set_all`]) and its `ASK` redirections, to follow
    /// before anything is sent again ([`Gathered::take_asked`]).
    pub(crate) fn set_replies(&mut self, indexes: &[usize], replies: &crate::BatchReplies) {
        self.set_all(indexes, &replies.answers);
        for (at, to) in &replies.asked {
            if let Some(&index) = indexes.get(*at) {
                self.asked.push((index, to.clone()));
            }
        }
    }

    /// The `ASK` redirections so far, per importing master (`host:port`) its requests'
    /// indexes in batch order: each goes to that master once, after `ASKING`, the slot map
    /// unchanged. A request whose follow-up answers a cluster error again is
    /// [`misrouted`](Gathered::misrouted).
    pub(crate) fn take_asked(&mut self) -> Vec<(String, Vec<usize>)> {
        let mut targets: Vec<(String, Vec<usize>)> = Vec::new();
        for (index, to) in std::mem::take(&mut self.asked) {
            match targets.iter_mut().find(|(target, _)| *target == to) {
                Some((_, indexes)) => indexes.push(index),
                None => targets.push((to, vec![index])),
            }
        }
        targets
    }

    /// Request `index` answered `reply`.
    pub(crate) fn set(&mut self, index: usize, reply: Reply) {
        self.replies[index] = Some(reply);
    }

    /// A master's answers to the requests `indexes` (in the order they were sent); a request
    /// it sent and did not answer is a protocol error (never sent again: it may have run).
    pub(crate) fn set_all(&mut self, indexes: &[usize], answers: &Answers) {
        for (at, &index) in indexes.iter().enumerate() {
            let reply = answers.get(at).map(|(_, reply)| *reply);
            self.set(
                index,
                reply.unwrap_or(Reply::Error(NodeErrorKind::Protocol)),
            );
        }
    }

    /// Every request not answered yet ends with `reply`.
    pub(crate) fn settle(&mut self, reply: Reply) {
        for slot in &mut self.replies {
            slot.get_or_insert(reply);
        }
    }

    /// The requests worth sending once more after the map is learnt again: those never sent
    /// (no master served their slot), and those a cluster error answered. An acquisition is
    /// one command or one transaction, so a cluster error means it did not run; a release or an
    /// extension may have run in part (a later command of its form refused), and runs again
    /// harmlessly.
    pub(crate) fn misrouted(&self) -> Vec<usize> {
        (0..self.replies.len())
            .filter(|&i| {
                matches!(
                    self.replies[i],
                    None | Some(Reply::Error(NodeErrorKind::Cluster))
                )
            })
            .collect()
    }

    /// Whether a master failed to answer at all (a connection that broke or timed out): it
    /// may have died and a replica taken its slots, so the next batch learns the map first.
    /// Never a reason to send a request again: it may have run.
    pub(crate) fn lost_a_master(&self) -> bool {
        self.replies.iter().any(|reply| {
            matches!(
                reply,
                Some(Reply::Error(
                    NodeErrorKind::Connection | NodeErrorKind::Timeout
                ))
            )
        })
    }

    /// Every request's id and answer, in batch order; one never answered is a cluster error.
    pub(crate) fn answers(self, batch: &[Transmit]) -> Answers {
        batch
            .iter()
            .zip(self.replies)
            .map(|(t, reply)| (t.id, reply.unwrap_or(Reply::Error(NodeErrorKind::Cluster))))
            .collect()
    }
}

/// What a trust reads of a master first: its memory identity
/// ([`node_identity`](redlock_core::node_identity)), to stamp with each slot's epoch.
pub(crate) fn identity_read() -> redis::Cmd {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server").arg("replication").arg("stats");
    cmd
}

/// A master's identity from its answer to [`identity_read`]: `None` where `INFO` is denied (the
/// epochs are then stamped without one, as the trust script does), an error where the master
/// did not answer.
pub(crate) fn identity(info: redis::RedisResult<String>) -> redis::RedisResult<Option<Vec<u8>>> {
    match info {
        Ok(info) => Ok(redlock_core::node_identity(info.as_bytes(), 0)),
        Err(err) if err.code().is_some() => Ok(None),
        Err(err) => Err(err),
    }
}

/// The commands that trust every slot a master serves, as the trust script does on a
/// standalone node: each slot's epoch `0` (trusted) and, beside it, the master's `identity`
/// (none: the identity key deleted). One slot per command (a command may not span slots).
pub(crate) fn trust_commands(
    slots: impl Iterator<Item = Slot>,
    identity: Option<&[u8]>,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for slot in slots {
        let tag = slot.tag().as_bytes();
        let (epoch, id) = (
            Keyspace::Cluster.epoch_key(tag),
            Keyspace::Cluster.epoch_id_key(tag),
        );
        match identity {
            Some(identity) => pipe.cmd("MSET").arg(&*epoch).arg(0).arg(&*id).arg(identity),
            None => pipe.cmd("SET").arg(&*epoch).arg(0).cmd("DEL").arg(&*id),
        };
    }
    pipe
}

/// A trust's answer from every master's stamps: trusted (`1`) when all took and a master
/// serves every slot; else the first failure, or a cluster error for the slots nobody serves
/// (those sit out when they are served again, which is safe).
pub(crate) fn trust_answer(map: &SlotMap, results: &[redis::RedisResult<()>]) -> Reply {
    match results.iter().find_map(|r| r.as_ref().err()) {
        Some(err) => Reply::Error(crate::reply::map_error(err)),
        None if !map.is_complete() => Reply::Error(NodeErrorKind::Cluster),
        None => Reply::Int(1),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use redlock_core::{LockId, Start};

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    /// A node of a `CLUSTER SHARDS` reply, as RESP2 answers it (a flat array).
    fn shard_node(id: &str, endpoint: &str, port: i64, role: &str, health: &str) -> Value {
        Value::Array(vec![
            bulk("id"),
            bulk(id),
            bulk("port"),
            Value::Int(port),
            bulk("tls-port"),
            Value::Int(port + 1000),
            bulk("ip"),
            bulk("10.0.0.1"),
            bulk("endpoint"),
            bulk(endpoint),
            bulk("role"),
            bulk(role),
            bulk("replication-offset"),
            Value::Int(1),
            bulk("health"),
            bulk(health),
        ])
    }

    #[test]
    fn a_vote_on_an_earlier_votes_master_is_named() {
        let two = SlotMap::parse(
            &slots_reply(&[(0, 8191, "a", 1), (8192, 16383, "b", 2)]),
            "s",
        )
        .expect("parses");
        let vote = |vote| ClusterVote {
            first: 0,
            vote,
            votes: 3,
        };
        // 2730 on a; 8192 and 13653 on b: the third vote shares the second's master.
        assert_eq!(shares_master(&two, vote(0)), None);
        assert_eq!(shares_master(&two, vote(1)), None);
        assert_eq!(shares_master(&two, vote(2)), Some(1));
        let three = SlotMap::parse(
            &slots_reply(&[
                (0, 5460, "a", 1),
                (5461, 10922, "b", 2),
                (10923, 16383, "c", 3),
            ]),
            "s",
        )
        .expect("parses");
        assert!((0..3).all(|v| shares_master(&three, vote(v)).is_none()));
    }

    #[test]
    fn a_shards_reply_reads_as_slots_masters_replicas_and_ids() {
        let shards = Value::Array(vec![
            Value::Array(vec![
                bulk("slots"),
                Value::Array(vec![
                    Value::Int(0),
                    Value::Int(99),
                    Value::Int(200),
                    Value::Int(16383),
                ]),
                bulk("nodes"),
                Value::Array(vec![
                    shard_node("r1", "replica-1.example", 7001, "replica", "online"),
                    shard_node("m1", "master-1.example", 7000, "master", "online"),
                    shard_node("r2", "10.0.0.5", 7002, "replica", "fail"),
                ]),
            ]),
            // RESP3 answers maps; a shard may have a master with an unknown endpoint.
            Value::Map(vec![
                (
                    bulk("slots"),
                    Value::Array(vec![Value::Int(100), Value::Int(199)]),
                ),
                (
                    bulk("nodes"),
                    Value::Array(vec![shard_node("m2", "?", 7100, "master", "online")]),
                ),
            ]),
            // A master without slots lends its id only.
            Value::Array(vec![
                bulk("slots"),
                Value::Array(vec![]),
                bulk("nodes"),
                Value::Array(vec![shard_node("m3", "10.0.0.7", 7200, "master", "online")]),
            ]),
        ]);
        let map = SlotMap::parse_shards(&shards, "seed.example", false).expect("parses");
        assert_eq!(
            map.masters(),
            [
                ("master-1.example".to_owned(), 7000),
                ("seed.example".to_owned(), 7100)
            ]
        );
        assert_eq!(map.master_of(Slot::new(0).expect("slot")), Some(0));
        assert_eq!(map.master_of(Slot::new(150).expect("slot")), Some(1));
        assert_eq!(map.master_of(Slot::new(16383).expect("slot")), Some(0));
        assert!(map.is_complete());
        assert_eq!(
            map.replicas_of(0).cloned().collect::<Vec<_>>(),
            [("replica-1.example".to_owned(), 7001)],
            "the failed replica is left out"
        );
        assert_eq!(map.ids, ["r1", "m1", "r2", "m2", "m3"]);
        let tls = SlotMap::parse_shards(&shards, "seed.example", true).expect("parses");
        assert_eq!(
            tls.masters()[0],
            ("master-1.example".to_owned(), 8000),
            "the TLS port"
        );
        assert_eq!(
            SlotMap::parse_shards(&slots_reply(&[(0, 16383, "a", 1)]), "s", false),
            None
        );
        // An unknown subcommand (Redis 6) asks for the older command; a transport error stays one.
        let unknown = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "ERR",
            "unknown subcommand 'SHARDS'".to_owned(),
        ));
        assert_eq!(from_shards(Err(unknown), "s", false).ok(), Some(None));
        let broken = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(from_shards(Err(broken), "s", false).is_err());
    }

    /// Valkey lists a shard by its id: after a failback the old master `m` stands beside its
    /// dead former replica `r`, which others see as a live master until they flag it failed.
    /// The reply does not say which serves the slots (a server may even read them from `r`, and
    /// list none), so it reads as unknown (ask `CLUSTER SLOTS`); once `r` is flagged failed,
    /// `m` serves them whichever is listed last. A map that leaves a slot without a master asks
    /// the older command too.
    #[test]
    fn a_shard_with_two_live_masters_asks_the_older_command() {
        let shard_of = |slots: Vec<Value>, r_health: &str| {
            Value::Array(vec![Value::Array(vec![
                bulk("slots"),
                Value::Array(slots),
                bulk("nodes"),
                Value::Array(vec![
                    shard_node("m", "10.0.0.1", 7000, "master", "online"),
                    shard_node("r", "10.0.0.2", 7001, "master", r_health),
                ]),
            ])])
        };
        let shard = |r_health: &str| shard_of(vec![Value::Int(0), Value::Int(16383)], r_health);
        assert_eq!(SlotMap::parse_shards(&shard("online"), "s", false), None);
        // A server may read the shard's slots from the stale master listed first: none.
        assert_eq!(
            SlotMap::parse_shards(&shard_of(Vec::new(), "online"), "s", false),
            None
        );
        // A map that leaves a slot without a master asks the older command too.
        let half = shard_of(vec![Value::Int(0), Value::Int(99)], "fail");
        assert!(SlotMap::parse_shards(&half, "s", false).is_some());
        assert_eq!(from_shards(Ok(half), "s", false).ok(), Some(None));
        assert!(from_shards(Ok(shard("fail")), "s", false).is_ok_and(|map| map.is_some()));
        let settled = SlotMap::parse_shards(&shard("fail"), "s", false).expect("parses");
        assert_eq!(settled.masters(), [("10.0.0.1".to_owned(), 7000)]);
        assert!(settled.is_complete());
    }

    fn slots_reply(ranges: &[(i64, i64, &str, i64)]) -> Value {
        Value::Array(
            ranges
                .iter()
                .map(|&(start, end, host, port)| {
                    Value::Array(vec![
                        Value::Int(start),
                        Value::Int(end),
                        Value::Array(vec![
                            Value::BulkString(host.as_bytes().to_vec()),
                            Value::Int(port),
                            Value::BulkString(format!("id-{host}-{port}").into_bytes()),
                        ]),
                        Value::Array(vec![
                            Value::BulkString(b"10.0.0.9".to_vec()),
                            Value::Int(9),
                            Value::BulkString(format!("replica-of-{port}").into_bytes()),
                        ]),
                    ])
                })
                .collect(),
        )
    }

    /// The acquisitions of locks on `resources` (one node, no restart check), as a client's
    /// multiplexer sends them.
    /// One acquisition of each of `resources`, as a client's first round sends them.
    pub(crate) fn acquisitions(resources: &[&str]) -> Vec<Transmit> {
        use rand_core::SeedableRng;
        let config = redlock_core::Config::builder(1)
            .restart_aware(false)
            .build()
            .expect("config");
        let rng = chacha20::ChaCha20Rng::seed_from_u64(1);
        let mut mux = redlock_core::Multiplexer::new(config, rng);
        let now = std::time::Instant::now();
        for (id, resource) in (0u64..).zip(resources) {
            let request = redlock_core::LockRequest::new(
                resource.as_bytes().to_vec(),
                std::time::Duration::from_secs(10),
            );
            mux.start(now, LockId::new(id), Start::Acquire, &request)
                .expect("starts");
        }
        let mut transmits = Vec::new();
        while let Some(batch) = mux.poll_transmit() {
            transmits.extend(batch.transmits);
        }
        transmits
    }

    fn slot_of(transmit: &Transmit) -> Slot {
        Slot::of(transmit.command.spec().keys().next().expect("a key"))
    }

    #[test]
    fn the_map_names_each_slots_master_and_never_a_replica() {
        let reply = slots_reply(&[
            (0, 5460, "127.0.0.1", 7000),
            (5461, 10922, "", 7001),
            (10923, 16000, "127.0.0.1", 7002),
            (16001, 16383, "127.0.0.1", 7000),
        ]);
        let map = SlotMap::parse(&reply, "seed").expect("parses");
        assert_eq!(
            map.masters(),
            [
                ("127.0.0.1".to_owned(), 7000),
                ("seed".to_owned(), 7001),
                ("127.0.0.1".to_owned(), 7002)
            ]
        );
        let at = |slot| map.master_of(Slot::new(slot).expect("slot"));
        assert_eq!(
            [at(0), at(5461), at(16000), at(16383)],
            [Some(0), Some(1), Some(2), Some(0)]
        );
        assert_eq!(map.slots_of(1).count(), 10922 - 5461 + 1);
        let partial = SlotMap::parse(&slots_reply(&[(0, 99, "h", 1)]), "seed").expect("parses");
        assert_eq!(partial.master_of(Slot::new(100).expect("slot")), None);
        for bad in [
            Value::Nil,
            Value::Array(vec![Value::Int(1)]),
            slots_reply(&[(0, 16384, "h", 1)]),
            slots_reply(&[(0, 1, "h", 70_000)]),
        ] {
            assert_eq!(SlotMap::parse(&bad, "seed"), None, "{bad:?}");
        }
    }

    #[test]
    fn a_trust_stamps_each_slot_with_its_masters_identity() {
        let slots = [Slot::new(0).expect("slot"), Slot::new(16383).expect("slot")];
        let packed = |identity: Option<&[u8]>| {
            String::from_utf8_lossy(
                &trust_commands(slots.into_iter(), identity).get_packed_pipeline(),
            )
            .replace("\r\n", " ")
        };
        let stamped = packed(Some(b"run:repl:0:3"));
        for slot in slots {
            let tag = slot.tag();
            let epoch = format!("redlock:epoch:{{{tag}}}");
            let id = format!("redlock:epoch:id:{{{tag}}}");
            assert!(
                stamped.contains(&format!(
                    "MSET ${} {epoch} $1 0 ${} {id} $12 run:repl:0:3",
                    epoch.len(),
                    id.len()
                )),
                "{stamped}"
            );
            // Never an empty identity: where INFO is denied, none at all (as the trust script).
            let bare = packed(None);
            assert!(
                bare.contains(&format!("SET ${} {epoch} $1 0", epoch.len())),
                "{bare}"
            );
            assert!(bare.contains(&format!("DEL ${} {id}", id.len())), "{bare}");
        }
        let denied = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "NOPERM",
        ));
        let broken =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(matches!(identity(Err(denied)), Ok(None)));
        assert!(identity(Err(broken)).is_err());
        let partial = SlotMap::parse(&slots_reply(&[(0, 99, "h", 1)]), "seed").expect("map");
        assert_eq!(
            trust_answer(&partial, &[Ok(())]),
            Reply::Error(NodeErrorKind::Cluster)
        );
    }

    #[test]
    fn two_nodes_that_share_a_master_are_one_cluster() {
        let one = SlotMap::parse(&slots_reply(&[(0, 16383, "a", 1)]), "seed").expect("parses");
        let other = SlotMap::parse(&slots_reply(&[(0, 16383, "b", 2)]), "seed").expect("parses");
        let clusters = Clusters::default();
        assert_eq!(clusters.claim(0, &one), Ok(()));
        assert_eq!(
            clusters.claim(0, &one),
            Ok(()),
            "a node learns its map again"
        );
        assert_eq!(
            clusters.claim(1, &other),
            Ok(()),
            "another cluster (another id)"
        );
        assert_eq!(
            clusters.claim(2, &one),
            Err(0),
            "the same masters: the same cluster"
        );
        // A node that was a replica in one map and is a master in another (a failover between
        // the two nodes' first maps) is still one cluster.
        let promoted = SlotMap::parse(&slots_reply(&[(0, 16383, "r", 7)]), "seed").expect("map");
        let mut promoted = promoted;
        promoted.ids = vec!["replica-of-2".to_owned()];
        assert_eq!(clusters.claim(4, &promoted), Err(1));
        // Ids, not addresses: a reply without ids falls back to `host:port`.
        let id_less = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16383),
            Value::Array(vec![Value::BulkString(b"a".to_vec()), Value::Int(1)]),
        ])]);
        let id_less = SlotMap::parse(&id_less, "seed").expect("parses");
        assert_eq!(clusters.claim(3, &id_less), Ok(()));
    }

    #[test]
    fn each_request_goes_to_its_slots_master_and_answers_come_back_in_order() {
        let map = SlotMap::parse(
            &slots_reply(&[(0, 8191, "a", 1), (8192, 16383, "b", 2)]),
            "seed",
        )
        .expect("parses");
        let batch = acquisitions(&["k0", "k1", "k2", "k3", "k4", "k5"]);
        assert_eq!(batch.len(), 6);
        let routes = Routes::plan(&map, &batch, 0..batch.len());
        let mut seen: Vec<usize> = routes
            .per_master
            .iter()
            .flat_map(|(_, r)| r.clone())
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2, 3, 4, 5], "every request routed once");
        for (master, requests) in &routes.per_master {
            for &i in requests {
                assert_eq!(map.master_of(slot_of(&batch[i])), Some(*master));
            }
            assert!(requests.windows(2).all(|w| w[0] < w[1]), "batch order kept");
        }
        let mut gathered = Gathered::new(batch.len());
        for (_, requests) in &routes.per_master {
            let answers: Answers = requests
                .iter()
                .map(|&i| {
                    (
                        batch[i].id,
                        if i == 2 {
                            Reply::Error(NodeErrorKind::Cluster)
                        } else {
                            Reply::Int(1)
                        },
                    )
                })
                .collect();
            gathered.set_all(requests, &answers);
        }
        assert_eq!(gathered.misrouted(), [2]);
        let answers = gathered.answers(&batch);
        let ids: Vec<_> = answers.iter().map(|(id, _)| *id).collect();
        let sent: Vec<_> = batch.iter().map(|t| t.id).collect();
        assert_eq!(ids, sent);
        assert_eq!(answers[2].1, Reply::Error(NodeErrorKind::Cluster));
        // A request no answer reached is a cluster error, never a vote.
        let answers = Gathered::new(1).answers(&batch[..1]);
        assert_eq!(answers[0].1, Reply::Error(NodeErrorKind::Cluster));
    }

    #[test]
    fn asked_requests_go_to_their_importing_master_once_grouped_in_batch_order() {
        let batch = acquisitions(&["a", "b", "c", "d"]);
        let mut gathered = Gathered::new(batch.len());
        let answers = |indexes: &[usize]| -> Answers {
            indexes
                .iter()
                .map(|&i| (batch[i].id, Reply::Error(NodeErrorKind::Cluster)))
                .collect()
        };
        // One master got requests 1 and 3, another 0 and 2; the `ASK`s name two targets.
        let mut first = crate::BatchReplies::answered(answers(&[1, 3]));
        first.asked = vec![(0, "127.0.0.1:7002".into()), (1, "127.0.0.1:7001".into())];
        let mut second = crate::BatchReplies::answered(answers(&[0, 2]));
        second.asked = vec![(1, "127.0.0.1:7002".into())];
        gathered.set_replies(&[1, 3], &first);
        gathered.set_replies(&[0, 2], &second);
        assert_eq!(
            gathered.take_asked(),
            [
                ("127.0.0.1:7002".to_owned(), vec![1, 2]),
                ("127.0.0.1:7001".to_owned(), vec![3]),
            ]
        );
        assert!(gathered.take_asked().is_empty(), "each followed once");
        // Until the follow-up answers, an asked request is misrouted like any cluster error.
        assert_eq!(gathered.misrouted(), [0, 1, 2, 3]);
        let followed: Answers = [1, 2].iter().map(|&i| (batch[i].id, Reply::Ok)).collect();
        gathered.set_all(&[1, 2], &followed);
        assert_eq!(gathered.misrouted(), [0, 3]);
    }
}
