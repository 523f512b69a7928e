//! One worker thread per node, owning that node's connection and writing the batches the driver
//! sends it, in order.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::Duration;

use crate::asking::IMPORTING_KEPT;
use crate::cluster::{
    Clusters, Gathered, Routes, SlotMap, Unmapped, from_shards, from_slots, identity,
    identity_read, shares_master, trust_answer, trust_commands,
};
use crate::encoded::LastPacked;
use crate::{
    BatchReplies, NodeAddr, Tracking, detect_dialect, resp3_client, run_batch, speaks_no_resp3,
};
use redlock_core::{Batch, Keyspace, NodeErrorKind, Reply, Slot, Transmit};

use super::driver::{Input, Mailbox};

/// The most requests one pipeline carries.
const MAX_BATCH: usize = 256;

/// A node's worker, as the driver reaches it.
pub(crate) struct Worker {
    batches: Sender<Batch>,
}

impl Worker {
    /// Starts the worker thread of node `addr`; its replies go to `driver`. It ends when the
    /// driver is gone.
    pub(crate) fn spawn(
        addr: NodeAddr,
        io_timeout: Duration,
        watch: crate::MemoryWatchSettings,
        (index, clusters, last): (usize, Clusters, LastPacked),
        driver: Arc<Mailbox>,
    ) -> Self {
        let (batches, queue) = mpsc::channel();
        let label = addr.label().clone();
        let spawned = thread::Builder::new()
            .name(format!("redlock-node-{label}"))
            .spawn(move || {
                let connection = Connection {
                    index,
                    clusters,
                    last,
                    ..Connection::new(addr, io_timeout, watch)
                };
                connection.run(&queue, &driver)
            });
        if let Err(err) = spawned {
            tracing::error!(node = %label, %err, "could not start the node's worker thread");
        }
        Self { batches }
    }

    /// Hands `batch` to the worker; if it is gone, answers every request with a connection
    /// error at once (no request may stay unanswered: its node would stay busy for its lock).
    pub(crate) fn send(&self, batch: Batch, driver: &Mailbox) {
        if let Err(mpsc::SendError(batch)) = self.batches.send(batch) {
            let failed = Reply::Error(NodeErrorKind::Connection);
            let replies = batch.transmits.iter().map(|t| (t.id, failed));
            driver.push(Input::Replies(replies.collect()));
        }
    }
}

struct Connection {
    addr: NodeAddr,
    io_timeout: Duration,
    /// Negative controls only: watches that hear no push.
    watch: crate::MemoryWatchSettings,
    /// The connection, what its node can run and its watch over the node's memory, learnt
    /// when it was made.
    conn: Option<Connected>,
    /// Whether a cluster behind this node is routed here (a configured node), or this is one
    /// of a cluster node's masters, which only runs what it is given.
    routes: bool,
    /// A cluster node's slot map and masters, learnt on first use and after a cluster error.
    cluster: Option<ClusterView>,
    /// The node's place in the client's list, and the clusters the client's nodes lead to.
    index: usize,
    clusters: Clusters,
    /// The last command the client's workers packed ([`crate::encoded`]).
    last: LastPacked,
}

/// What a cluster node knows of its cluster: which master serves each slot, and a connection
/// (untracked) per master.
struct ClusterView {
    map: SlotMap,
    masters: Vec<Connection>,
    /// Masters an `ASK` named that the map does not know (a master added after the map was
    /// learnt, taking a slot mid-migration), at most [`IMPORTING_KEPT`]: each batch that follows
    /// an `ASK` there reuses its connection until the map is learnt again.
    importing: Vec<Connection>,
    /// A master stopped answering: learn the map again before the next batch.
    stale: bool,
}

impl ClusterView {
    /// The master an `ASK` named: the map's or a kept one with `named`'s address, else
    /// `named`, kept from now on (the oldest kept one goes when [`IMPORTING_KEPT`] are).
    fn importing_master(&mut self, named: Connection) -> &mut Connection {
        let label = named.addr.label();
        if let Some(at) = self.masters.iter().position(|m| m.addr.label() == label) {
            return &mut self.masters[at];
        }
        let at = match self.importing.iter().position(|m| m.addr.label() == label) {
            Some(at) => at,
            None => {
                if self.importing.len() == IMPORTING_KEPT {
                    self.importing.remove(0);
                }
                self.importing.push(named);
                self.importing.len() - 1
            }
        };
        &mut self.importing[at]
    }
}

type Connected = crate::Connected<redis::Connection>;

impl Connection {
    fn new(addr: NodeAddr, io_timeout: Duration, watch: crate::MemoryWatchSettings) -> Self {
        Self {
            addr,
            io_timeout,
            watch,
            conn: None,
            routes: true,
            cluster: None,
            index: 0,
            clusters: Clusters::default(),
            last: LastPacked::default(),
        }
    }

    /// One master of this cluster node's cluster, watched as the node is (each connection
    /// proves the slots it serves one by one, see [`redlock_core::MemoryWatch`]; untracked for
    /// a client that is not restart-aware, which proves nothing), never routing.
    fn master(&self, addr: NodeAddr) -> Self {
        Self {
            routes: false,
            last: self.last.clone(),
            ..Self::new(
                addr,
                self.io_timeout,
                crate::MemoryWatchSettings {
                    untracked: self.watch.untracked || self.watch.restart_unaware,
                    ..self.watch
                },
            )
        }
    }

    /// Writes batches until the driver is gone: what queued up meanwhile goes out together, as
    /// one pipeline (one round trip, same order). The driver never puts two requests of one
    /// lock in flight on a node, so joining batches never lets a request overtake another of
    /// its lock.
    fn run(mut self, queue: &Receiver<Batch>, driver: &Mailbox) {
        while let Ok(first) = queue.recv() {
            let mut transmits = first.transmits;
            while transmits.len() < MAX_BATCH {
                let Ok(more) = queue.try_recv() else { break };
                transmits.extend(more.transmits);
            }
            let started = crate::telemetry::Stopwatch::start();
            // A panic inside the redis crate must not leave these requests unanswered (their
            // locks would stay busy on this node for good): they fail, and the connection goes.
            let run =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute(&transmits)));
            let replies = run.unwrap_or_else(|_| {
                tracing::error!(node = %self.addr.label(), "a request panicked: answered as failed");
                self.forget();
                BatchReplies::panicked(&transmits)
            });
            replies.trace(self.addr.label(), started.elapsed());
            if !driver.push(Input::Replies(replies.answers)) {
                return;
            }
        }
    }

    /// Runs `batch`, never for longer than about two I/O timeouts (connect, then reply). A
    /// connection whose transport broke is dropped; one whose reply timed out is kept, and the
    /// late reply is skipped when it comes (never read as another request's answer), so that
    /// every request of this node still runs in the order it was sent ([`run_batch`]).
    ///
    /// On a cluster node, each request goes to its slot's master instead (see
    /// [`crate::cluster`]), one master after the other: about two I/O timeouts per master, and
    /// as many again to learn the map where it is stale.
    fn execute(&mut self, batch: &[Transmit]) -> BatchReplies {
        if self.routes && self.cluster.is_some() {
            return BatchReplies::answered(self.run_on_cluster(batch));
        }
        let (io_timeout, routes) = (self.io_timeout, self.routes);
        let seeded = !self.addr.seeds().is_empty();
        let voting = self.addr.vote().is_some();
        let replies = match self.connect() {
            Ok((c, _)) if routes && c.dialect.keyspace == Keyspace::Cluster => {
                match self.learn(true) {
                    Ok(()) => return BatchReplies::answered(self.run_on_cluster(batch)),
                    Err(unmapped) => unmapped.answers(batch),
                }
            }
            // One server never casts several votes.
            Ok(_) if routes && voting => BatchReplies::refused(batch, NodeErrorKind::NotACluster),
            Ok((c, last)) => run_on(c, batch, (io_timeout, false), last),
            // A cluster node whose URL does not answer: its other seeds may.
            Err(err) if routes && seeded => match self.learn(false) {
                Ok(()) => return BatchReplies::answered(self.run_on_cluster(batch)),
                Err(refused @ Unmapped::SameCluster { .. }) => refused.answers(batch),
                Err(_) => BatchReplies::failed(batch, &err),
            },
            Err(err) => BatchReplies::failed(batch, &err),
        };
        if replies.reconnect {
            self.forget();
        }
        replies
    }

    /// Runs `batch` on a cluster: each request on its slot's master, an `ASK` followed to the
    /// importing master; the requests never sent or answered with a cluster error go once more
    /// after the map is learnt again (see [`Gathered::misrouted`]).
    fn run_on_cluster(&mut self, batch: &[Transmit]) -> crate::Answers {
        let mut gathered = Gathered::new(batch.len());
        let mut pending: Vec<usize> = (0..batch.len()).collect();
        for attempt in 0..2 {
            let stale = self.cluster.as_ref().is_some_and(|view| view.stale);
            if attempt > 0 || stale {
                match self.learn(true) {
                    Ok(()) => {}
                    Err(Unmapped::SameCluster { other }) => {
                        tracing::warn!(node = %self.addr.label(), other, "another node's cluster");
                        self.cluster = None;
                        gathered.settle(Reply::Error(NodeErrorKind::SameCluster));
                        break;
                    }
                    Err(err) => {
                        tracing::debug!(node = %self.addr.label(), %err, "no slot map");
                        // A stale map is still the best guess for a first try.
                        if attempt > 0 {
                            break;
                        }
                    }
                }
            }
            let Some(view) = &mut self.cluster else { break };
            if let Some(vote) = self.addr.vote()
                && let Some(other) = shares_master(&view.map, vote)
            {
                tracing::warn!(node = %self.addr.label(), other, "an earlier vote's master");
                gathered.settle(Reply::Error(NodeErrorKind::SharedMaster));
                break;
            }
            let routes = Routes::plan(&view.map, batch, pending.iter().copied());
            for (master, requests) in &routes.per_master {
                let transmits: Vec<Transmit> = requests.iter().map(|&i| batch[i].clone()).collect();
                let master = &mut view.masters[*master];
                let replies = master.as_master_of(self.addr.label(), &transmits, false);
                gathered.set_replies(requests, &replies);
            }
            if !routes.trusts.is_empty() {
                let results: Vec<_> = (0..view.masters.len())
                    .map(|index| view.masters[index].stamp_trusted(view.map.slots_of(index)))
                    .collect();
                let reply = trust_answer(&view.map, &results);
                for &index in &routes.trusts {
                    gathered.set(index, reply);
                }
            }
            self.follow_asks(batch, &mut gathered);
            pending = gathered.misrouted();
            if pending.is_empty() {
                break;
            }
        }
        if gathered.lost_a_master()
            && let Some(view) = &mut self.cluster
        {
            view.stale = true;
        }
        gathered.answers(batch)
    }

    /// Sends each request a master redirected with `ASK` to the importing master it named,
    /// after `ASKING` (see [`crate::asking`]): the map's master, or one the map does not know
    /// yet, kept with the map ([`ClusterView::importing`]).
    fn follow_asks(&mut self, batch: &[Transmit], gathered: &mut Gathered) {
        for (to, requests) in gathered.take_asked() {
            let transmits: Vec<Transmit> = requests.iter().map(|&i| batch[i].clone()).collect();
            let addr = crate::asking::host_and_port(&to)
                .and_then(|(host, port)| self.addr.for_master(host, port).ok());
            let (Some(addr), Some(_)) = (addr, self.cluster.as_ref()) else {
                let refused = BatchReplies::refused(&transmits, NodeErrorKind::Cluster);
                gathered.set_all(&requests, &refused.answers);
                continue;
            };
            let unknown = self.master(addr);
            let label = self.addr.label();
            let Some(view) = self.cluster.as_mut() else {
                continue;
            };
            let master = view.importing_master(unknown);
            let replies = master.as_master_of(label, &transmits, true);
            gathered.set_all(&requests, &replies.answers);
        }
    }

    /// Runs `batch` on this master of cluster node `node` (each command after `ASKING` when
    /// `asking`: it follows an `ASK`), counting each reply as the cluster node's.
    fn as_master_of(&mut self, node: &str, batch: &[Transmit], asking: bool) -> BatchReplies {
        let sent = crate::telemetry::Stopwatch::start();
        let replies = match asking {
            true => self.execute_asked(batch),
            false => self.execute(batch),
        };
        crate::telemetry::master_replies(node, self.addr.label(), sent, &replies.answers);
        replies
    }

    /// Runs `batch` on this master after an `ASK`: each command after `ASKING`.
    fn execute_asked(&mut self, batch: &[Transmit]) -> BatchReplies {
        let io_timeout = self.io_timeout;
        let replies = match self.connect() {
            Ok((c, last)) => run_on(c, batch, (io_timeout, true), last),
            Err(err) => BatchReplies::failed(batch, &err),
        };
        if replies.reconnect {
            self.forget();
        }
        replies
    }

    /// Stamps `slots` trusted on this master, with its identity.
    fn stamp_trusted(&mut self, slots: impl Iterator<Item = Slot>) -> redis::RedisResult<()> {
        let conn = &mut self.connect()?.0.conn;
        let identity = identity(identity_read().query(conn))?;
        trust_commands(slots, identity.as_deref()).query::<()>(conn)
    }

    /// Learns the cluster's slot map (`CLUSTER SHARDS`) from this node (unless `ask_this` is
    /// false: its URL just failed to answer), else from its other seeds, else from any master or replica known so far; keeps the masters' connections that stay. Refused when another
    /// node of the client leads to this cluster.
    fn learn(&mut self, ask_this: bool) -> Result<(), Unmapped> {
        let mut answer = match ask_this {
            true => self.slots(),
            // Its URL just failed to answer.
            false => Err((redis::ErrorKind::Io, "the node's URL did not answer").into()),
        };
        for seed in self.addr.seeds().to_vec() {
            if answer.is_ok() {
                break;
            }
            answer = self.master(seed).slots();
        }
        if let Some(view) = &mut self.cluster {
            for master in &mut view.masters {
                if answer.is_ok() {
                    break;
                }
                answer = master.slots();
            }
        }
        let replicas = match &self.cluster {
            Some(view) if answer.is_err() => view.map.replicas().to_vec(),
            _ => Vec::new(),
        };
        for (host, port) in replicas {
            if answer.is_ok() {
                break;
            }
            if let Ok(addr) = self.addr.for_master(&host, port) {
                answer = self.master(addr).slots();
            }
        }
        // On failure the view stays as it was, for the next try.
        let map = answer?;
        if let Err(other) = self
            .clusters
            .claim(self.addr.cluster_owner(self.index), &map)
        {
            return Err(Unmapped::SameCluster { other });
        }
        // The last map's masters, and those an `ASK` led to (they may serve slots now).
        let mut previous = self
            .cluster
            .take()
            .map(|view| {
                let mut masters = view.masters;
                masters.extend(view.importing);
                masters
            })
            .unwrap_or_default();
        let mut masters = Vec::with_capacity(map.masters().len());
        for (host, port) in map.masters() {
            let addr = self.addr.for_master(host, *port)?;
            masters.push(
                match previous
                    .iter()
                    .position(|master| master.addr.label() == addr.label())
                {
                    Some(kept) => previous.swap_remove(kept),
                    None => self.master(addr),
                },
            );
        }
        tracing::debug!(node = %self.addr.label(), masters = masters.len(), "slot map learnt");
        self.cluster = Some(ClusterView {
            map,
            masters,
            importing: Vec::new(),
            stale: false,
        });
        Ok(())
    }

    /// This node's answer to `CLUSTER SHARDS` (or `CLUSTER SLOTS` where the server has no
    /// `SHARDS`); a connection whose transport broke is dropped.
    fn slots(&mut self) -> redis::RedisResult<SlotMap> {
        let addr = self.addr.clone();
        let answer = slot_map(&mut self.connect()?.0.conn, &addr);
        if let Err(err) = &answer
            && err.code().is_none()
            && err.kind() != redis::ErrorKind::Parse
        {
            self.forget();
        }
        answer
    }

    /// Drops the connection; its watch vouches for nothing any more.
    fn forget(&mut self) {
        if let Some(connected) = self.conn.take() {
            connected.close();
        }
    }

    /// The connection (made now if there is none), and beside it the client's last packed
    /// command, which a batch on it shares ([`crate::encoded`]). The connection stays in its
    /// place: a batch on it moves nothing.
    fn connect(&mut self) -> Result<(&mut Connected, &LastPacked), redis::RedisError> {
        let connected = match &mut self.conn {
            Some(connected) => connected,
            empty @ None => empty.insert(dial(&self.addr, self.io_timeout, self.watch)?),
        };
        Ok((connected, &self.last))
    }
}

/// A new connection to `addr`: tracked unless `watch` says not to (or the node speaks no RESP3).
fn dial(
    addr: &NodeAddr,
    io_timeout: Duration,
    watch: crate::MemoryWatchSettings,
) -> Result<Connected, redis::RedisError> {
    if watch.untracked {
        return connect_untracked(addr, io_timeout);
    }
    match connect_tracked(addr, io_timeout, watch) {
        Ok(connected) => Ok(connected),
        Err(err) if !speaks_no_resp3(&err) => Err(err),
        // No RESP3 (`HELLO 3` refused): the plain connection, restart checks by script.
        Err(_) => connect_untracked(addr, io_timeout),
    }
}

/// A connection without client tracking: every restart-checked acquisition is checked on its
/// own.
fn connect_untracked(
    addr: &NodeAddr,
    io_timeout: Duration,
) -> Result<Connected, redis::RedisError> {
    let mut conn = open(addr.client(), io_timeout)?;
    let dialect = addr.dialect(detect_dialect(&mut conn)?);
    Connected::new(conn, dialect, None, addr.label())
}

fn open(
    client: &redis::Client,
    io_timeout: Duration,
) -> Result<redis::Connection, redis::RedisError> {
    let conn = client.get_connection_with_timeout(io_timeout)?;
    conn.set_read_timeout(Some(io_timeout))?;
    conn.set_write_timeout(Some(io_timeout))?;
    Ok(conn)
}

/// A RESP3 connection with client tracking on (untracked if the node refuses tracking).
fn connect_tracked(
    addr: &NodeAddr,
    io_timeout: Duration,
    watch: crate::MemoryWatchSettings,
) -> Result<Connected, redis::RedisError> {
    let mut conn = open(&resp3_client(addr.client())?, io_timeout)?;
    let (pushes, queued) = mpsc::channel();
    conn.set_push_sender(pushes);
    let dialect = addr.dialect(detect_dialect(&mut conn)?);
    let tracking = Tracking::queued(watch.fault, addr.database(), queued);
    let tracked = tracking.tracking_on().query::<()>(&mut conn);
    if tracked.is_ok() {
        subscribe(&mut conn, &tracking, addr.label())?;
    }
    Connected::new(conn, dialect, Some((tracking, tracked)), addr.label())
}

/// A cluster's slot map, as the node `node` answers on `conn`: `CLUSTER SHARDS`, or
/// `CLUSTER SLOTS` where the server has no `SHARDS` (Redis 6) or its answer leaves a slot's
/// master in doubt ([`from_shards`]).
pub(super) fn slot_map(
    conn: &mut redis::Connection,
    node: &NodeAddr,
) -> redis::RedisResult<SlotMap> {
    let shards = redis::cmd("CLUSTER").arg("SHARDS").query(conn);
    match from_shards(shards, node.host(), node.is_tls())? {
        Some(map) => Ok(map),
        None => from_slots(redis::cmd("CLUSTER").arg("SLOTS").query(conn), node.host()),
    }
}

/// Runs `batch` on the connection `c` ([`run_batch`]), each command after `ASKING` when
/// `asking`.
fn run_on(
    c: &mut Connected,
    batch: &[Transmit],
    (io_timeout, asking): (Duration, bool),
    last: &LastPacked,
) -> BatchReplies {
    run_batch(
        &mut c.conn,
        batch,
        &c.dialect,
        c.tracking.as_ref(),
        io_timeout,
        asking,
        last,
    )
}

/// Subscribes `conn` to its node's eviction events (heard before any later reply). Over RESP3
/// a `SUBSCRIBE` that succeeds answers with a push only, and one that fails (a user denied the
/// channel) with an error reply: a `PING` right behind it tells which — its reply comes first
/// when the subscription took, the error when it did not (then the `PONG` is read too, to keep
/// the connection's replies in step). Not subscribed is not an error: acquisitions on an
/// evicting node then read its eviction count.
fn subscribe(
    conn: &mut redis::Connection,
    tracking: &Tracking,
    node: &str,
) -> Result<(), redis::RedisError> {
    let subscribe = redis::cmd("SUBSCRIBE")
        .arg(tracking.eviction_channel())
        .get_packed_command();
    conn.send_packed_command(&subscribe)?;
    match redis::cmd("PING").query::<String>(conn) {
        Ok(_) => tracking.subscribed(),
        // The node refused the SUBSCRIBE: its error came first; the PING's reply follows.
        Err(err) if err.code().is_some() => {
            tracing::debug!(node, %err, "no eviction events");
            while let redis::Value::Push { .. } = conn.recv_response()? {}
        }
        Err(err) => return Err(err),
    }
    Ok(())
}
