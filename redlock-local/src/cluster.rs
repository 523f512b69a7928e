//! A local Redis or Valkey Cluster: masters that split the 16384 hash slots evenly, and replicas.

use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, FromRedisValue};

use crate::error::HarnessError;
use crate::options::ServerOptions;
use crate::port::free_port;
use crate::server::{self, RedisServer};

/// How long a cluster may take to form: every node meets every other, replicas sync, every node
/// says `cluster_state:ok`. Generous: CI is a loaded 2-core machine.
const FORM_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two checks while it forms.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// The cluster's node timeout: how long a master may be unreachable before its replica is
/// promoted. Short, so that failover tests end quickly; long enough for a loaded machine.
pub const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(3000);
/// How many hash slots a cluster has.
const SLOTS: usize = 16384;

/// A Redis Cluster on loopback, formed by this process: `masters` masters, each owning an even
/// share of the slots in order (master 0 owns slot 0), and `replicas` replicas per master.
///
/// Every node is a [`RedisServer`] in cluster mode (own cluster bus port, no persistence), so the
/// usual kill, pause and inspection helpers apply to each. Dropping it stops them all.
///
/// ```no_run
/// use redlock_local::RedisCluster;
///
/// let cluster = RedisCluster::start(3, 1);
/// assert_eq!(cluster.masters().len(), 3);
/// assert_eq!(cluster.replicas().len(), 3);
/// let owner = cluster.master_of(b"lock");
/// assert!(owner < 3);
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    masters: Vec<RedisServer>,
    /// Replica `r` of master `m` at `m * replicas_per_master + r`.
    replicas: Vec<RedisServer>,
    replicas_per_master: usize,
    /// Masters that joined after the cluster formed ([`join_master`](Self::join_master)),
    /// serving no slot until one moves there.
    joined: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts and forms a cluster with default options.
    ///
    /// # Panics
    /// If it cannot be started or formed; the message says why.
    pub fn start(masters: usize, replicas: usize) -> Self {
        Self::try_start_with(masters, replicas, &ServerOptions::new())
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// Starts `masters` masters and `replicas` replicas of each with `options` (in cluster mode,
    /// whatever the options say), and forms the cluster.
    ///
    /// Where [`MIX_ENV`](crate::MIX_ENV) names servers and `options` no binary, master `m` runs
    /// entry `m` of the mix and its replicas run their master's: a cluster in the middle of a
    /// rolling upgrade. The mix's `#no-scripting` marks are left out: one cluster has one ACL
    /// configuration, and a cluster whose masters disagree on who may run scripts is no upgrade.
    pub fn try_start_with(
        masters: usize,
        replicas: usize,
        options: &ServerOptions,
    ) -> Result<Self, HarnessError> {
        let each: Vec<ServerOptions> = (0..masters)
            .map(|master| options.mixed_binary(master))
            .collect();
        Self::try_start_each(&each, replicas)
    }

    /// Starts one master per entry of `masters` with its options (a cluster of mixed versions,
    /// say), `replicas` replicas of each with its master's options, all in cluster mode, and
    /// forms the cluster.
    pub fn try_start_each(
        masters: &[ServerOptions],
        replicas: usize,
    ) -> Result<Self, HarnessError> {
        let count = masters.len();
        if count == 0 || count > SLOTS {
            return Err(HarnessError::Cluster(format!(
                "a cluster has 1 to {SLOTS} masters, not {count}"
            )));
        }
        let each: Vec<ServerOptions> = masters
            .iter()
            .chain(
                masters
                    .iter()
                    .flat_map(|master| std::iter::repeat_n(master, replicas)),
            )
            .map(cluster_mode)
            .collect::<Result<_, _>>()?;
        let mut servers = server::start_each(&each)?;
        let replicas_of = servers.split_off(count);
        let cluster = Self {
            masters: servers,
            replicas: replicas_of,
            replicas_per_master: replicas,
            joined: Vec::new(),
        };
        cluster.form()?;
        Ok(cluster)
    }

    /// The masters, master 0 owning the first slots.
    pub fn masters(&self) -> &[RedisServer] {
        &self.masters
    }

    /// Starts a master with `options` (in cluster mode, whatever they say), makes it meet the
    /// cluster, and waits until every node knows it and says `cluster_state:ok` — a scale-out's
    /// first step: it serves no
    /// slot until one moves there ([`migrate_slot`](Self::migrate_slot)). It is not one of
    /// [`masters`](Self::masters) (their slot ranges stay as formed). Under
    /// [`MIX_ENV`](crate::MIX_ENV) it runs the mix's entry after the masters'.
    pub fn join_master(&mut self, options: &ServerOptions) -> Result<&RedisServer, HarnessError> {
        self.try_join(options)?;
        Ok(&self.joined[self.joined.len() - 1])
    }

    /// The masters that joined after the cluster formed, in the order they joined.
    pub fn joined(&self) -> &[RedisServer] {
        &self.joined
    }

    fn try_join(&mut self, options: &ServerOptions) -> Result<(), HarnessError> {
        let started = Instant::now();
        let place = self.masters.len() + self.joined.len();
        let mut started_one = server::start_each(&[cluster_mode(&options.mixed_binary(place))?])?;
        let joined = started_one.pop().ok_or_else(|| {
            HarnessError::Cluster("no server started for the joining master".to_owned())
        })?;
        let _: () = run(
            &self.masters[0],
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(joined.port())
                .arg(bus_port(&joined)?),
        )?;
        self.joined.push(joined);
        self.wait_for_full_mesh(started, "every node to know the joining master")?;
        // Until gossip tells it who serves every slot, the new master answers `CLUSTERDOWN`.
        self.wait_for_state_ok(started)
    }

    /// Kills master `master` (SIGKILL, like a crash): after [`CLUSTER_NODE_TIMEOUT`] its
    /// replica, if it has one, is promoted. It stays in [`masters`](Self::masters), not running.
    pub fn kill_master(&mut self, master: usize) {
        self.masters[master].kill();
    }

    /// Master `master` as it was when the cluster formed, to kill, pause or resume (after a
    /// failover it may serve as a replica).
    pub fn master_mut(&mut self, master: usize) -> &mut RedisServer {
        &mut self.masters[master]
    }

    /// Replica `replica` of master `master` as it was when the cluster formed, to kill, pause
    /// or resume.
    pub fn replica_mut(&mut self, master: usize, replica: usize) -> &mut RedisServer {
        &mut self.replicas[master * self.replicas_per_master + replica]
    }

    /// The replicas: replica `r` of master `m` is at `m * replicas + r`.
    pub fn replicas(&self) -> &[RedisServer] {
        &self.replicas
    }

    /// The replicas of master `master`.
    pub fn replicas_of(&self, master: usize) -> &[RedisServer] {
        let from = master * self.replicas_per_master;
        &self.replicas[from..from + self.replicas_per_master]
    }

    /// Every master's URL: seeds for a client.
    pub fn urls(&self) -> Vec<String> {
        self.masters.iter().map(RedisServer::url).collect()
    }

    /// Every master's address.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.masters.iter().map(RedisServer::addr).collect()
    }

    /// The slots master `master` was given when the cluster formed (inclusive range).
    pub fn slots_of(&self, master: usize) -> (u16, u16) {
        let (first, last) = slot_range(master, self.masters.len());
        (to_slot(first), to_slot(last))
    }

    /// The slot `key` belongs to, as master 0 computes it (`CLUSTER KEYSLOT`).
    ///
    /// # Panics
    /// If master 0 does not answer.
    pub fn keyslot(&self, key: &[u8]) -> u16 {
        let mut conn = self.masters[0].client();
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conn)
            .unwrap_or_else(|err| panic!("CLUSTER KEYSLOT on {}: {err}", self.masters[0].addr()))
    }

    /// Which master owned `key`'s slot when the cluster formed.
    pub fn master_of(&self, key: &[u8]) -> usize {
        let slot = usize::from(self.keyslot(key));
        (0..self.masters.len())
            .find(|&m| {
                let (first, last) = slot_range(m, self.masters.len());
                (first..=last).contains(&slot)
            })
            .unwrap_or(0)
    }

    /// `GET key` on the master that owned its slot when the cluster formed.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.masters[self.master_of(key)].get(key)
    }

    /// Moves `slot` with every key in it from `from` to `to` the legacy way, as
    /// `redis-cli --cluster reshard` does: [`begin_migration`](Self::begin_migration),
    /// [`migrate_keys`](Self::migrate_keys) until the slot is empty on `from`, then
    /// [`end_migration`](Self::end_migration).
    pub fn migrate_slot(
        &self,
        slot: u16,
        from: &RedisServer,
        to: &RedisServer,
    ) -> Result<(), HarnessError> {
        self.begin_migration(slot, from, to)?;
        loop {
            let keys: Vec<Vec<u8>> = run(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(1000),
            )?;
            if keys.is_empty() {
                break;
            }
            self.migrate_keys(from, to, &keys)?;
        }
        self.end_migration(slot, from, to)
    }

    /// The first step of a legacy migration of `slot` from `from` to `to`: `SETSLOT IMPORTING`
    /// on `to`, then `SETSLOT MIGRATING` on `from`. From then on `from` answers `ASK` for a key
    /// of the slot it does not hold, and `to` serves such a key to a command after `ASKING`.
    pub fn begin_migration(
        &self,
        slot: u16,
        from: &RedisServer,
        to: &RedisServer,
    ) -> Result<(), HarnessError> {
        let from_id: String = run(from, redis::cmd("CLUSTER").arg("MYID"))?;
        let to_id: String = run(to, redis::cmd("CLUSTER").arg("MYID"))?;
        let _: () = run(to, &set_slot(slot, "IMPORTING", &from_id))?;
        let _: () = run(from, &set_slot(slot, "MIGRATING", &to_id))?;
        Ok(())
    }

    /// Moves `keys` (with their TTLs) from `from` to `to` with `MIGRATE`, mid-migration.
    pub fn migrate_keys(
        &self,
        from: &RedisServer,
        to: &RedisServer,
        keys: &[Vec<u8>],
    ) -> Result<(), HarnessError> {
        let _: redis::Value = run(
            from,
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(to.port())
                .arg("")
                .arg(0)
                .arg(10_000)
                .arg("KEYS")
                .arg(keys),
        )?;
        Ok(())
    }

    /// The last step of a legacy migration of `slot` to `to`: `SETSLOT NODE` on `to`, `from`
    /// and every other node that takes it (masters).
    pub fn end_migration(
        &self,
        slot: u16,
        from: &RedisServer,
        to: &RedisServer,
    ) -> Result<(), HarnessError> {
        let to_id: String = run(to, redis::cmd("CLUSTER").arg("MYID"))?;
        let _: () = run(to, &set_slot(slot, "NODE", &to_id))?;
        let _: () = run(from, &set_slot(slot, "NODE", &to_id))?;
        // The other masters learn it at once; a replica refuses `SETSLOT` (after failovers
        // the nodes formed as masters may be replicas), and gossip tells it anyway.
        for node in self.nodes().filter(|node| {
            node.is_running() && node.port() != from.port() && node.port() != to.port()
        }) {
            let _: redis::RedisResult<()> = node
                .try_client()
                .and_then(|mut conn| set_slot(slot, "NODE", &to_id).query(&mut conn));
        }
        Ok(())
    }

    /// Moves `slot` with every key in it from `from` to `to` with Valkey 9's atomic
    /// `CLUSTER MIGRATESLOTS`, and waits until every running master says `to` serves it.
    /// An error on servers without the command.
    pub fn migrate_slot_atomically(
        &self,
        slot: u16,
        from: &RedisServer,
        to: &RedisServer,
    ) -> Result<(), HarnessError> {
        let started = Instant::now();
        let to_id: String = run(to, redis::cmd("CLUSTER").arg("MYID"))?;
        let _: () = run(
            from,
            redis::cmd("CLUSTER")
                .arg("MIGRATESLOTS")
                .arg("SLOTSRANGE")
                .arg(slot)
                .arg(slot)
                .arg("NODE")
                .arg(&to_id),
        )?;
        self.wait_served_by(slot, to, started)
    }

    /// Lets `by` take `slot` without its keys, as a master that wins a configuration conflict
    /// does: `CLUSTER SETSLOT slot NODE <by>` on `by`, then `CLUSTER BUMPEPOCH` there. The
    /// slot's master until then drops every key it held in the slot when it learns of it
    /// (Redis and Valkey alike; Redis 7.0 pushes no tracking invalidation for them). Waits
    /// until every running master says `by` serves it. A claim can lose the conflict it starts
    /// (seen once on a loaded machine: `by` no longer served the slot a minute later, its
    /// bumped epoch not above the last claim's): it is made again, at most three times.
    pub fn claim_slot(&self, slot: u16, by: &RedisServer) -> Result<(), HarnessError> {
        let id: String = run(by, redis::cmd("CLUSTER").arg("MYID"))?;
        let mut attempt = 0;
        loop {
            let started = Instant::now();
            let _: () = run(by, &set_slot(slot, "NODE", &id))?;
            let _: redis::Value = run(by, redis::cmd("CLUSTER").arg("BUMPEPOCH"))?;
            attempt += 1;
            match self.wait_served_by_within(slot, by, started, FORM_TIMEOUT / 3) {
                Err(_) if attempt < 3 => {}
                done => return done,
            }
        }
    }

    /// Waits (from `started`, up to the formation timeout) until every running master says
    /// `to` serves `slot`.
    fn wait_served_by(
        &self,
        slot: u16,
        to: &RedisServer,
        started: Instant,
    ) -> Result<(), HarnessError> {
        self.wait_served_by_within(slot, to, started, FORM_TIMEOUT)
    }

    /// [`wait_served_by`](Self::wait_served_by), up to `limit` from `started`.
    fn wait_served_by_within(
        &self,
        slot: u16,
        to: &RedisServer,
        started: Instant,
        limit: Duration,
    ) -> Result<(), HarnessError> {
        for master in self.masters.iter().filter(|node| node.is_running()) {
            loop {
                if serving_port(master, slot)? == Some(to.port()) {
                    break;
                }
                if started.elapsed() > limit {
                    return Err(HarnessError::Cluster(format!(
                        "waited {limit:?} for slot {slot} to move to {}; {} does not see it \
                         there",
                        to.addr(),
                        master.addr()
                    )));
                }
                thread::sleep(POLL_INTERVAL);
            }
        }
        Ok(())
    }

    /// Gives every master its slots, makes every node meet the others, attaches the replicas,
    /// and waits until every node says `cluster_state:ok` and every replica's link is up.
    fn form(&self) -> Result<(), HarnessError> {
        let started = Instant::now();
        let count = self.masters.len();
        for (index, master) in self.masters.iter().enumerate() {
            let (first, last) = slot_range(index, count);
            let _: () = run(
                master,
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(first)
                    .arg(last),
            )?;
        }
        let first = &self.masters[0];
        for node in self.nodes().skip(1) {
            let _: () = run(
                first,
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(node.port())
                    .arg(bus_port(node)?),
            )?;
        }
        self.wait_for_full_mesh(started, "every node to know every other")?;
        for (index, replica) in self.replicas.iter().enumerate() {
            let master = &self.masters[index / self.replicas_per_master.max(1)];
            let id: String = run(master, redis::cmd("CLUSTER").arg("MYID"))?;
            let _: () = run(replica, redis::cmd("CLUSTER").arg("REPLICATE").arg(id))?;
        }
        let replicas = self.replicas.len();
        self.wait_for(started, "every node to see every replica", |node| {
            let nodes: String = run(node, redis::cmd("CLUSTER").arg("NODES"))?;
            let is_replica = |line: &str| {
                let flags = line.split_whitespace().nth(2).unwrap_or_default();
                flags.split(',').any(|flag| flag == "slave")
            };
            Ok(nodes.lines().filter(|line| is_replica(line)).count() == replicas)
        })?;
        self.wait_for_state_ok(started)?;
        for replica in &self.replicas {
            self.wait_for(started, "every replica's link to its master", |_| {
                let info: String = run(replica, redis::cmd("INFO").arg("replication"))?;
                Ok(info.contains("master_link_status:up"))
            })?;
        }
        Ok(())
    }

    /// Waits until every node knows every other (no handshake left), or fails naming `what`.
    fn wait_for_full_mesh(&self, started: Instant, what: &str) -> Result<(), HarnessError> {
        let total = self.nodes().count();
        self.wait_for(started, what, |node| {
            let nodes: String = run(node, redis::cmd("CLUSTER").arg("NODES"))?;
            Ok(nodes
                .lines()
                .filter(|line| !line.contains("handshake"))
                .count()
                == total)
        })
    }

    /// Waits until every node says `cluster_state:ok` with every slot served.
    fn wait_for_state_ok(&self, started: Instant) -> Result<(), HarnessError> {
        self.wait_for(started, "cluster_state:ok on every node", |node| {
            let info: String = run(node, redis::cmd("CLUSTER").arg("INFO"))?;
            Ok(info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384"))
        })
    }

    fn nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.masters
            .iter()
            .chain(&self.replicas)
            .chain(&self.joined)
    }

    /// Polls `ready` on every node until all say yes, or fails naming `what` after the timeout
    /// counted from `started`.
    fn wait_for(
        &self,
        started: Instant,
        what: &str,
        ready: impl Fn(&RedisServer) -> Result<bool, HarnessError>,
    ) -> Result<(), HarnessError> {
        loop {
            let mut waiting = None;
            for node in self.nodes() {
                if !ready(node)? {
                    waiting = Some(node.addr());
                    break;
                }
            }
            let Some(addr) = waiting else {
                return Ok(());
            };
            if started.elapsed() > FORM_TIMEOUT {
                return Err(HarnessError::Cluster(format!(
                    "waited {FORM_TIMEOUT:?} for {what}; {addr} is not there yet"
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

/// The port of the node that `observer` says serves `slot` (`CLUSTER SLOTS`).
fn serving_port(observer: &RedisServer, slot: u16) -> Result<Option<u16>, HarnessError> {
    let ranges: Vec<redis::Value> = run(observer, redis::cmd("CLUSTER").arg("SLOTS"))?;
    let int = |value: &redis::Value| match value {
        redis::Value::Int(n) => Some(*n),
        _ => None,
    };
    for range in ranges {
        let redis::Value::Array(fields) = range else {
            continue;
        };
        let (Some(start), Some(end)) = (fields.first().and_then(int), fields.get(1).and_then(int))
        else {
            continue;
        };
        if (start..=end).contains(&i64::from(slot)) {
            let port = match fields.get(2) {
                Some(redis::Value::Array(master)) => master.get(1).and_then(int),
                _ => None,
            };
            return Ok(port.and_then(|port| u16::try_from(port).ok()));
        }
    }
    Ok(None)
}

/// `options` in cluster mode, with a cluster bus port of its own (a free one: the default,
/// port + 10000, may be taken or beyond 65535).
fn cluster_mode(options: &ServerOptions) -> Result<ServerOptions, HarnessError> {
    Ok(options.clone().args([
        "--cluster-enabled".to_owned(),
        "yes".to_owned(),
        "--cluster-config-file".to_owned(),
        "nodes.conf".to_owned(),
        "--cluster-port".to_owned(),
        free_port()?.to_string(),
        "--cluster-node-timeout".to_owned(),
        CLUSTER_NODE_TIMEOUT.as_millis().to_string(),
    ]))
}

/// The cluster bus port a node was started with.
fn bus_port(node: &RedisServer) -> Result<u16, HarnessError> {
    let config: Vec<String> = run(node, redis::cmd("CONFIG").arg("GET").arg("cluster-port"))?;
    config
        .get(1)
        .and_then(|port| port.parse().ok())
        .ok_or_else(|| HarnessError::Cluster(format!("{} has no cluster-port", node.addr())))
}

/// Master `index` of `count`: slots `index * 16384 / count ..= (index + 1) * 16384 / count - 1`.
fn slot_range(index: usize, count: usize) -> (usize, usize) {
    (index * SLOTS / count, (index + 1) * SLOTS / count - 1)
}

fn to_slot(slot: usize) -> u16 {
    u16::try_from(slot).unwrap_or(u16::MAX)
}

/// `CLUSTER SETSLOT slot state id`.
fn set_slot(slot: u16, state: &str, id: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
    cmd
}

fn run<T: FromRedisValue>(node: &RedisServer, cmd: &redis::Cmd) -> Result<T, HarnessError> {
    let mut conn: Connection = node.try_client().map_err(|err| cluster_error(node, &err))?;
    cmd.query(&mut conn)
        .map_err(|err| cluster_error(node, &err))
}

fn cluster_error(node: &RedisServer, err: &impl std::fmt::Display) -> HarnessError {
    HarnessError::Cluster(format!("{}: {err}", node.addr()))
}
