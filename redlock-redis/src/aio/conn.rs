//! One multiplexed connection per node, made again when it breaks, and writing a batch on it.
//!
//! Not the `redis` crate's `ConnectionManager`: that one reconnects silently and relays pushes
//! through a task of its own, so a push could reach us after the reply it came before, and a
//! reply on a new connection could be counted as if the old one had carried it. Here each
//! connection has its own [`Tracking`], fed in the connection's read loop (the `redis` crate
//! calls the push sender there, before it completes any later reply), and a connection that
//! broke is dropped and closed for its watch before the next batch makes a new one.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::asking::IMPORTING_KEPT;
use crate::cluster::{
    Clusters, Gathered, Routes, SlotMap, Unmapped, from_shards, from_slots, identity,
    identity_read, shares_master, trust_answer, trust_commands,
};
use crate::{
    Answers, BatchReplies, NodeAddr, Tracking, detect_dialect_async, resp3_client, run_batch_async,
    speaks_no_resp3,
};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redlock_core::{Keyspace, NodeErrorKind, Reply, Transmit};

type Connected = crate::Connected<MultiplexedConnection>;

/// A node and its connection, made on first use (a node that is down at start is not an error:
/// its requests fail until it comes back).
pub(crate) struct Node {
    addr: NodeAddr,
    io_timeout: Duration,
    /// How the connection watches its node's memory.
    watch: crate::MemoryWatchSettings,
    connected: Mutex<Option<Connected>>,
    /// Whether a cluster behind this node is routed here (a configured node), or this is one
    /// of a cluster node's masters, which only runs what it is given.
    routes: bool,
    /// A cluster node's slot map and masters, learnt on first use and after a cluster error.
    cluster: Mutex<Option<Arc<ClusterView>>>,
    /// Whether `cluster` holds a view: read without the lock on every batch, so that a
    /// standalone node's batches take no lock for it.
    mapped: std::sync::atomic::AtomicBool,
    /// The node's place in the client's list, and the clusters the client's nodes lead to.
    index: usize,
    clusters: Clusters,
}

/// What a cluster node knows of its cluster: which master serves each slot, and a node (a
/// connection, untracked) per master.
struct ClusterView {
    map: SlotMap,
    masters: Vec<Arc<Node>>,
    /// Masters an `ASK` named that the map does not know (a master added after the map was
    /// learnt, taking a slot mid-migration), at most [`IMPORTING_KEPT`]: each batch that follows
    /// an `ASK` there reuses its connection until the map is learnt again.
    importing: Mutex<Vec<Arc<Node>>>,
    /// A master stopped answering: learn the map again before the next batch.
    stale: std::sync::atomic::AtomicBool,
}

impl Node {
    /// Node `index` of a client whose nodes lead to `clusters`.
    pub(crate) fn new(
        addr: NodeAddr,
        io_timeout: Duration,
        watch: crate::MemoryWatchSettings,
        index: usize,
        clusters: Clusters,
    ) -> Self {
        Self {
            addr,
            io_timeout,
            watch,
            connected: Mutex::new(None),
            routes: true,
            cluster: Mutex::new(None),
            mapped: false.into(),
            index,
            clusters,
        }
    }

    /// One master of this cluster node's cluster, watched as the node is (each connection
    /// proves the slots it serves one by one, see [`redlock_core::MemoryWatch`]; untracked for
    /// a client that is not restart-aware, which proves nothing), never routing.
    fn master(&self, addr: NodeAddr) -> Self {
        Self {
            addr,
            io_timeout: self.io_timeout,
            watch: crate::MemoryWatchSettings {
                untracked: self.watch.untracked || self.watch.restart_unaware,
                ..self.watch
            },
            connected: Mutex::new(None),
            routes: false,
            cluster: Mutex::new(None),
            mapped: false.into(),
            index: self.index,
            clusters: Clusters::default(),
        }
    }

    pub(crate) fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    pub(crate) fn io_timeout(&self) -> Duration {
        self.io_timeout
    }

    /// The slot map this node learnt last, if it leads to a cluster (`None` for a standalone
    /// node, or a cluster node that never answered).
    pub(crate) fn learnt_map(&self) -> Option<SlotMap> {
        let owner = self.addr.cluster_owner(self.index);
        self.routes.then(|| self.clusters.map(owner)).flatten()
    }

    fn config(&self) -> AsyncConnectionConfig {
        // One attempt per request (the engine decides about retries), bounded by the I/O timeout.
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.io_timeout))
            .set_response_timeout(Some(self.io_timeout))
    }

    /// The shared connection, made when there is none: one TCP connection per node for the
    /// whole client. RESP3 with client tracking where the node has them; RESP2, untracked,
    /// where it does not speak RESP3.
    async fn connection(&self) -> Result<Connected, redis::RedisError> {
        if let Some(connected) = &*self
            .connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            return Ok(connected.clone());
        }
        // Boxed: connecting is rare, and the future of every batch holds this one's room.
        Box::pin(self.connect()).await
    }

    /// A new connection, kept as the shared one unless another batch made one meanwhile.
    async fn connect(&self) -> Result<Connected, redis::RedisError> {
        let connected = match self.watch.untracked {
            true => self.connect_untracked().await?,
            false => match self.connect_tracked().await {
                Ok(connected) => connected,
                Err(err) if !speaks_no_resp3(&err) => return Err(err),
                // No RESP3 (`HELLO 3` refused): the plain connection, restart checks by script.
                Err(_) => self.connect_untracked().await?,
            },
        };
        let mut slot = self
            .connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(slot.get_or_insert(connected).clone())
    }

    /// A connection without client tracking: every restart-checked acquisition is checked on
    /// its own.
    async fn connect_untracked(&self) -> Result<Connected, redis::RedisError> {
        let mut conn = self
            .addr
            .client()
            .get_multiplexed_async_connection_with_config(&self.config())
            .await?;
        let dialect = self.addr.dialect(detect_dialect_async(&mut conn).await?);
        Connected::new(conn, dialect, None, self.addr.label())
    }

    async fn connect_tracked(&self) -> Result<Connected, redis::RedisError> {
        let tracking = Tracking::new(self.watch.fault, self.addr.database());
        let heard = tracking.clone();
        let config = self.config().set_push_sender(move |push: redis::PushInfo| {
            heard.handle_push(&push);
            Ok::<(), std::convert::Infallible>(())
        });
        let mut conn = resp3_client(self.addr.client())?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let dialect = self.addr.dialect(detect_dialect_async(&mut conn).await?);
        let tracked = tracking.tracking_on().query_async::<()>(&mut conn).await;
        if tracked.is_ok() {
            // The node's eviction events, heard on this connection before any later reply; a
            // user denied the channel is not an error: its acquisitions read the count.
            match conn.subscribe(tracking.eviction_channel()).await {
                Ok(()) => tracking.subscribed(),
                Err(err) => tracing::debug!(node = %self.addr.label(), %err, "no eviction events"),
            }
        }
        Connected::new(conn, dialect, Some((tracking, tracked)), self.addr.label())
    }

    /// Drops the connection (the next batch makes a new one); its watch vouches for nothing
    /// any more.
    fn forget_connection(&self) {
        let gone = self
            .connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(connected) = gone {
            connected.close();
        }
    }

    /// Writes `batch` as one pipeline and reads its replies, one per request. The connection's
    /// response timeout (the I/O timeout) bounds every read and its connection timeout bounds
    /// connecting: no timer of ours. A failed transport is an error reply for each request, and
    /// the connection is made again for the next batch; a timeout keeps it (the reply is
    /// matched and dropped when it comes, and this node's requests stay in order).
    ///
    /// On a cluster node, each request goes to its slot's master instead (see
    /// [`crate::cluster`]), and the batch's answers come back together.
    pub(crate) async fn run(&self, batch: &[Transmit]) -> Answers {
        let sent = crate::telemetry::Stopwatch::start();
        let replies = self.replies(batch).await;
        replies.trace(self.addr.label(), sent.elapsed());
        replies.answers
    }

    /// The replies to `batch`: from this node, or from a cluster node's masters (counted as
    /// this node's).
    async fn replies(&self, batch: &[Transmit]) -> BatchReplies {
        let mapped = self.routes && self.mapped.load(std::sync::atomic::Ordering::Acquire);
        if let Some(view) = mapped.then(|| self.view()).flatten() {
            return BatchReplies::answered(Box::pin(self.run_on_cluster(view, batch)).await);
        }
        let replies = match self.connection().await {
            Ok(connected) if self.routes && connected.dialect.keyspace == Keyspace::Cluster => {
                match Box::pin(self.learn(Ask::This(connected.conn))).await {
                    Ok(view) => {
                        return BatchReplies::answered(
                            Box::pin(self.run_on_cluster(view, batch)).await,
                        );
                    }
                    Err(unmapped) => unmapped.answers(batch),
                }
            }
            // One server never casts several votes.
            Ok(_) if self.routes && self.addr.vote().is_some() => {
                BatchReplies::refused(batch, NodeErrorKind::NotACluster)
            }
            Ok(Connected {
                mut conn,
                dialect,
                tracking,
            }) => run_batch_async(&mut conn, batch, &dialect, tracking.as_ref(), false).await,
            // A cluster node whose URL does not answer: its other seeds may.
            Err(err) if self.routes && !self.addr.seeds().is_empty() => {
                match Box::pin(self.learn(Ask::Others)).await {
                    Ok(view) => {
                        return BatchReplies::answered(
                            Box::pin(self.run_on_cluster(view, batch)).await,
                        );
                    }
                    Err(refused @ Unmapped::SameCluster { .. }) => refused.answers(batch),
                    Err(_) => BatchReplies::failed(batch, &err),
                }
            }
            Err(err) => BatchReplies::failed(batch, &err),
        };
        if replies.reconnect || replies.rebuild {
            self.forget_connection();
        }
        replies
    }

    /// The cluster view learnt so far, if any.
    fn view(&self) -> Option<Arc<ClusterView>> {
        self.cluster
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Runs `batch` on a cluster: each request on its slot's master, all masters at once, an
    /// `ASK` followed to the importing master; the requests never sent or answered with a
    /// cluster error go once more after the map is learnt again (see [`Gathered::misrouted`]).
    async fn run_on_cluster(&self, mut view: Arc<ClusterView>, batch: &[Transmit]) -> Answers {
        let mut gathered = Gathered::new(batch.len());
        let mut pending: Vec<usize> = (0..batch.len()).collect();
        for attempt in 0..2 {
            if attempt > 0 || view.stale.load(std::sync::atomic::Ordering::Relaxed) {
                match self.learn(Ask::Anyone).await {
                    Ok(fresh) => view = fresh,
                    Err(Unmapped::SameCluster { other }) => {
                        tracing::warn!(node = %self.addr.label(), other, "another node's cluster");
                        self.mapped
                            .store(false, std::sync::atomic::Ordering::Release);
                        self.cluster
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .take();
                        gathered.settle(Reply::Error(NodeErrorKind::SameCluster));
                        break;
                    }
                    // A stale map is still the best guess for a first try.
                    Err(err) if attempt == 0 => {
                        tracing::debug!(node = %self.addr.label(), %err, "slot map kept");
                    }
                    Err(err) => {
                        tracing::debug!(node = %self.addr.label(), %err, "no slot map");
                        break;
                    }
                }
            }
            if let Some(vote) = self.addr.vote()
                && let Some(other) = shares_master(&view.map, vote)
            {
                tracing::warn!(node = %self.addr.label(), other, "an earlier vote's master");
                gathered.settle(Reply::Error(NodeErrorKind::SharedMaster));
                break;
            }
            let routes = Routes::plan(&view.map, batch, pending.iter().copied());
            let sends = routes.per_master.iter().map(|(master, requests)| {
                let node = view.masters[*master].clone();
                let transmits: Vec<Transmit> = requests.iter().map(|&i| batch[i].clone()).collect();
                let label = self.addr.label();
                async move { node.as_master_of(label, &transmits, false).await }
            });
            let trust = async {
                match routes.trusts.is_empty() {
                    true => None,
                    false => Some(self.trust_slots(&view).await),
                }
            };
            let (answers, trusted) =
                futures_util::future::join(futures_util::future::join_all(sends), trust).await;
            for ((_, requests), replies) in routes.per_master.iter().zip(&answers) {
                gathered.set_replies(requests, replies);
            }
            if let Some(reply) = trusted {
                for &index in &routes.trusts {
                    gathered.set(index, reply);
                }
            }
            self.follow_asks(&view, batch, &mut gathered).await;
            pending = gathered.misrouted();
            if pending.is_empty() {
                break;
            }
        }
        if gathered.lost_a_master() {
            view.stale.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        gathered.answers(batch)
    }

    /// Sends each request a master redirected with `ASK` to the importing master it named,
    /// after `ASKING` (see [`crate::asking`]), all importing masters at once.
    async fn follow_asks(&self, view: &ClusterView, batch: &[Transmit], gathered: &mut Gathered) {
        let follows = gathered.take_asked().into_iter().map(|(to, requests)| {
            let node = self.importing(view, &to);
            let transmits: Vec<Transmit> = requests.iter().map(|&i| batch[i].clone()).collect();
            let label = self.addr.label();
            async move {
                let replies = match node {
                    Some(node) => node.as_master_of(label, &transmits, true).await,
                    None => BatchReplies::refused(&transmits, NodeErrorKind::Cluster),
                };
                (requests, replies)
            }
        });
        for (requests, replies) in futures_util::future::join_all(follows).await {
            gathered.set_all(&requests, &replies.answers);
        }
    }

    /// The master an `ASK` named (`host:port` as announced): the map's, or one the map does
    /// not know yet, kept with the map ([`ClusterView::importing`]). `None` when the address
    /// does not parse.
    fn importing(&self, view: &ClusterView, to: &str) -> Option<Arc<Node>> {
        let (host, port) = crate::asking::host_and_port(to)?;
        let addr = self.addr.for_master(host, port).ok()?;
        let label = addr.label();
        if let Some(master) = view
            .masters
            .iter()
            .find(|master| master.addr.label() == label)
        {
            return Some(master.clone());
        }
        let mut importing = view
            .importing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(master) = importing.iter().find(|master| master.addr.label() == label) {
            return Some(master.clone());
        }
        let master = Arc::new(self.master(addr));
        if importing.len() == IMPORTING_KEPT {
            importing.remove(0);
        }
        importing.push(master.clone());
        Some(master)
    }

    /// Runs `batch` on this master of cluster node `node` (each command after `ASKING` when
    /// `asking`: it follows an `ASK`), counting each reply as the cluster node's.
    async fn as_master_of(&self, node: &str, batch: &[Transmit], asking: bool) -> BatchReplies {
        let sent = crate::telemetry::Stopwatch::start();
        let replies = match asking {
            true => self.asked(batch).await,
            false => self.replies(batch).await,
        };
        crate::telemetry::master_replies(node, self.addr.label(), sent, &replies.answers);
        replies
    }

    /// Runs `batch` on this master after an `ASK`: each command after `ASKING`.
    async fn asked(&self, batch: &[Transmit]) -> BatchReplies {
        let replies = match self.connection().await {
            Ok(Connected {
                mut conn,
                dialect,
                tracking,
            }) => run_batch_async(&mut conn, batch, &dialect, tracking.as_ref(), true).await,
            Err(err) => BatchReplies::failed(batch, &err),
        };
        if replies.reconnect || replies.rebuild {
            self.forget_connection();
        }
        replies
    }

    /// Trusts every slot of the cluster: each master stamps the slots it serves as trusted,
    /// with its own identity.
    async fn trust_slots(&self, view: &ClusterView) -> Reply {
        let stamps = view.masters.iter().enumerate().map(|(index, master)| {
            let slots = view.map.slots_of(index);
            async move {
                let mut conn = master.connection().await?.conn;
                let identity = identity(identity_read().query_async(&mut conn).await)?;
                trust_commands(slots, identity.as_deref())
                    .query_async::<()>(&mut conn)
                    .await
            }
        });
        trust_answer(&view.map, &futures_util::future::join_all(stamps).await)
    }

    /// Learns the cluster's slot map (`CLUSTER SHARDS`) from this node (on the connection given,
    /// or its own, as `ask` says), else from its other seeds, else from any master or replica known so far;
    /// keeps the masters'
    /// connections that stay. Refused when another node of the client leads to this cluster.
    async fn learn(&self, ask: Ask) -> Result<Arc<ClusterView>, Unmapped> {
        let previous = self.view();
        let mut answer = Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "no node of the cluster answered",
        )));
        let own = match ask {
            Ask::This(conn) => Some(conn),
            Ask::Anyone => self.connection().await.ok().map(|connected| connected.conn),
            Ask::Others => None,
        };
        if let Some(mut conn) = own {
            answer = slot_map(&mut conn, &self.addr).await;
            if let Err(err) = &answer
                && err.code().is_none()
            {
                // The transport broke: the next batch connects again.
                self.forget_connection();
            }
        }
        if answer.is_err() {
            // The node's other seeds, then every master and replica of the last map.
            let mut candidates: Vec<Arc<Node>> = self
                .addr
                .seeds()
                .iter()
                .map(|seed| Arc::new(self.master(seed.clone())))
                .collect();
            if let Some(view) = &previous {
                candidates.extend(view.masters.iter().cloned());
                for (host, port) in view.map.replicas() {
                    if let Ok(addr) = self.addr.for_master(host, *port) {
                        candidates.push(Arc::new(self.master(addr)));
                    }
                }
            }
            for node in candidates {
                let Ok(connected) = node.connection().await else {
                    continue;
                };
                answer = slot_map(&mut connected.conn.clone(), &node.addr).await;
                if answer.is_ok() {
                    break;
                }
            }
        }
        let map = answer?;
        if let Err(other) = self
            .clusters
            .claim(self.addr.cluster_owner(self.index), &map)
        {
            return Err(Unmapped::SameCluster { other });
        }
        let mut masters = Vec::with_capacity(map.masters().len());
        for (host, port) in map.masters() {
            let addr = self.addr.for_master(host, *port)?;
            // A master the last map served, or one an `ASK` led to (it now serves slots).
            let kept = previous.iter().find_map(|view| {
                let importing = view
                    .importing
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                view.masters
                    .iter()
                    .chain(importing.iter())
                    .find(|master| master.addr.label() == addr.label())
                    .cloned()
            });
            masters.push(match kept {
                Some(master) => master,
                None => Arc::new(self.master(addr)),
            });
        }
        tracing::debug!(node = %self.addr.label(), masters = masters.len(), "slot map learnt");
        let view = Arc::new(ClusterView {
            map,
            masters,
            importing: Mutex::new(Vec::new()),
            stale: false.into(),
        });
        *self.cluster.lock().unwrap_or_else(PoisonError::into_inner) = Some(view.clone());
        self.mapped
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(view)
    }
}

/// Whom a cluster node asks first for the slot map.
enum Ask {
    /// This node, on this connection.
    This(MultiplexedConnection),
    /// This node on its own connection first, then the others.
    Anyone,
    /// Not this node (its URL just failed to answer): its other seeds, then the last map's.
    Others,
}

/// A cluster's slot map, as the node `node` answers on `conn`: `CLUSTER SHARDS`, or
/// `CLUSTER SLOTS` where the server has no `SHARDS` (Redis 6) or its answer leaves a slot's
/// master in doubt ([`from_shards`]).
pub(super) async fn slot_map(
    conn: &mut MultiplexedConnection,
    node: &NodeAddr,
) -> redis::RedisResult<SlotMap> {
    let shards = redis::cmd("CLUSTER").arg("SHARDS").query_async(conn).await;
    if let Some(map) = from_shards(shards, node.host(), node.is_tls())? {
        return Ok(map);
    }
    let slots = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await;
    from_slots(slots, node.host())
}
