//! Release notices on a cluster node: sharded pub/sub, the part that does not depend on the
//! transport.
//!
//! A cluster node's release announces key `K` with `SPUBLISH` on `K`'s sharded channel, in
//! `K`'s slot ([`Keyspace::released_channel`]): the slot's master alone hears it, and the
//! cluster bus carries nothing (a classic `PUBLISH` is relayed to every node of the cluster).
//! A waiter's subscriber therefore keeps one connection per master, and `SSUBSCRIBE`s each
//! channel on the master that serves its slot.
//!
//! The driver names channels as a standalone node does ([`redlock_core::released_channel`]);
//! this module translates both ways, routes each channel to its slot, and reads what a master's
//! connection pushes. A master that unsubscribes a channel still wanted (its slot moved away,
//! or the master was demoted) or a connection that ends means the map changed: the adapter
//! learns the map again and subscribes everything anew. A notice only shortens a pause; a
//! subscriber that cannot subscribe only means waiting it out. Nothing here decides whether a
//! lock is held.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use redis::{PushKind, Value};
use redlock_core::{Change, Keyspace, RELEASED_CHANNEL_PREFIX, Slot};

use crate::NodeAddr;
use crate::cluster::SlotMap;

/// How long a subscriber that lost a master waits before it learns the map again (a failover
/// takes the cluster a node timeout or more; asking every few milliseconds would only load a
/// cluster in trouble).
pub(crate) const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(250);

/// The sharded channel on which a cluster node announces the release of the key whose
/// release channel the driver calls `channel`; `None` for a channel of another kind.
pub(crate) fn sharded(channel: &[u8]) -> Option<Vec<u8>> {
    let key = channel.strip_prefix(RELEASED_CHANNEL_PREFIX)?;
    Some(Keyspace::Cluster.released_channel(key))
}

/// The driver's name of a sharded release channel ([`sharded`] undone): the first braces
/// after the prefix hold the slot's tag, which has no brace of its own.
pub(crate) fn unsharded(sharded: &[u8]) -> Option<Vec<u8>> {
    let tagged = sharded
        .strip_prefix(RELEASED_CHANNEL_PREFIX)?
        .strip_prefix(b"{")?;
    let close = tagged.iter().position(|&b| b == b'}')?;
    Some([RELEASED_CHANNEL_PREFIX, &tagged[close + 1..]].concat())
}

/// What a master's connection said.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A release of a key some waiter listens for, under the driver's name of its channel.
    Notice(Vec<u8>),
    /// The connection no longer hears a channel that is still wanted: learn the map again.
    Lost,
    /// Nothing that matters (a confirmation, an unsubscription asked for, another push).
    Nothing,
}

impl Heard {
    /// Passes a notice on with `deliver` (`false`: the driver is gone). `None` when the driver
    /// is gone, else whether the connections still hear every wanted channel.
    pub(crate) fn pass(self, deliver: impl FnOnce(Vec<u8>) -> bool) -> Option<bool> {
        match self {
            Self::Notice(channel) => deliver(channel).then_some(true),
            Self::Lost => Some(false),
            Self::Nothing => Some(true),
        }
    }
}

/// One cluster node's subscriptions: the channels wanted, by the driver's names.
#[derive(Debug)]
pub(crate) struct ShardPlan {
    wanted: BTreeSet<Vec<u8>>,
    /// Unsubscriptions sent and not yet confirmed, per channel: their confirmations are no
    /// loss, even for a channel wanted again since.
    leaving: BTreeMap<Vec<u8>, usize>,
}

/// A command for the master that serves `slot`: subscribe or unsubscribe one sharded channel.
pub(crate) type Order = (Slot, redis::Cmd);

impl ShardPlan {
    /// Wants `channels` (the driver's names).
    pub(crate) fn new(channels: Vec<Vec<u8>>) -> Self {
        Self {
            wanted: channels.into_iter().collect(),
            leaving: BTreeMap::new(),
        }
    }

    /// Applies `change`: the command for its slot's master, if there is anything to send
    /// (`online`: the command will be sent; otherwise only the plan changes).
    pub(crate) fn apply(&mut self, change: &Change, online: bool) -> Option<Order> {
        let order = match change {
            Change::Subscribe(channel) => self
                .wanted
                .insert(channel.clone())
                .then(|| order("SSUBSCRIBE", channel)),
            Change::Unsubscribe(channel) => self.wanted.remove(channel).then(|| {
                if online {
                    *self.leaving.entry(sharded(channel)?).or_default() += 1;
                }
                order("SUNSUBSCRIBE", channel)
            }),
        };
        order.flatten().filter(|_| online)
    }

    /// Every subscription, for connections made afresh.
    pub(crate) fn subscriptions(&mut self) -> Vec<Order> {
        self.leaving.clear();
        self.wanted
            .iter()
            .filter_map(|channel| order("SSUBSCRIBE", channel))
            .collect()
    }

    /// What a push (`kind`, `data`) from a master's connection means.
    pub(crate) fn heard(&mut self, kind: &PushKind, data: &[Value]) -> Heard {
        let sharded = match data.first() {
            Some(Value::BulkString(channel)) => channel.as_slice(),
            _ => &[],
        };
        let named = unsharded(sharded).filter(|channel| self.wanted.contains(channel));
        match kind {
            PushKind::SMessage => named.map_or(Heard::Nothing, Heard::Notice),
            PushKind::SUnsubscribe => match self.leaving.get_mut(sharded) {
                // The confirmation of an unsubscription sent.
                Some(count) => {
                    *count -= 1;
                    if *count == 0 {
                        self.leaving.remove(sharded);
                    }
                    Heard::Nothing
                }
                // The server dropped a channel still wanted: its slot left this master.
                None if named.is_some() => Heard::Lost,
                None => Heard::Nothing,
            },
            PushKind::Disconnection => Heard::Lost,
            _ => Heard::Nothing,
        }
    }
}

/// Whether a subscription that failed with `err` is lost to a change of the map or of the
/// master (the connection broke; `MOVED`, `CLUSTERDOWN` and the like): learn the map again.
/// Anything else is a refusal that would repeat (a user denied the channel): no loss.
pub(crate) fn is_loss(err: &redis::RedisError) -> bool {
    err.code().is_none() || crate::reply::map_error(err) == redlock_core::NodeErrorKind::Cluster
}

/// `name <sharded channel>`, for the master of the channel's slot.
fn order(name: &str, channel: &[u8]) -> Option<Order> {
    let sharded = sharded(channel)?;
    let slot = Slot::of(&sharded);
    let mut cmd = redis::cmd(name);
    cmd.arg(sharded);
    Some((slot, cmd))
}

/// The connections of one round of subscriptions, one per master (`C`, the adapter's
/// connection), made when first needed.
pub(crate) struct Masters<'a, C> {
    pub(crate) map: &'a SlotMap,
    pub(crate) io_timeout: Duration,
    pub(crate) open: BTreeMap<usize, C>,
    addr: &'a NodeAddr,
}

impl<'a, C> Masters<'a, C> {
    /// None open yet, on the cluster node `addr` leads to, as `map` has it.
    pub(crate) fn new(addr: &'a NodeAddr, map: &'a SlotMap, io_timeout: Duration) -> Self {
        Self {
            map,
            io_timeout,
            open: BTreeMap::new(),
            addr,
        }
    }

    /// A RESP3 client of master `master`, with the node URL's credentials and TLS settings.
    pub(crate) fn client_of(&self, master: usize) -> Option<redis::Client> {
        let (host, port) = self.map.masters().get(master)?;
        let addr = self.addr.for_master(host, *port).ok()?;
        crate::resp3_client(addr.client()).ok()
    }
}

/// Whom to ask for the map again, in order: the node's URL, its other seeds, the masters and
/// replicas of the last map.
pub(crate) fn map_sources(addr: &NodeAddr, known: &SlotMap) -> Vec<NodeAddr> {
    let known_nodes = known.masters().iter().chain(known.replicas());
    let learnt = known_nodes.filter_map(|(host, port)| addr.for_master(host, *port).ok());
    std::iter::once(addr.clone())
        .chain(addr.seeds().iter().cloned())
        .chain(learnt)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlock_core::released_channel;

    fn bulk(bytes: &[u8]) -> Value {
        Value::BulkString(bytes.to_vec())
    }

    #[test]
    fn a_channel_is_sharded_in_its_keys_slot_and_back() {
        for key in [&b"a"[..], b"{job}a", b"}{x", b"{}", b"\xff{\x00}"] {
            let channel = released_channel(key);
            let sharded = sharded(&channel).expect("a release channel");
            assert_eq!(Slot::of(&sharded), Slot::of(key), "{key:?}");
            assert_eq!(unsharded(&sharded), Some(channel));
        }
        assert_eq!(sharded(b"__keyevent@0__:evicted"), None);
        assert_eq!(unsharded(b"redlock:released:a"), None, "not sharded");
    }

    #[test]
    fn a_redirect_or_a_broken_connection_is_a_loss_a_refusal_is_not() {
        let server = |text: &str| redis::RedisError::from(server_error(text));
        assert!(is_loss(&server("MOVED 3999 127.0.0.1:7001")));
        assert!(is_loss(&server("CLUSTERDOWN The cluster is down")));
        assert!(!is_loss(&server(
            "NOPERM this user has no permissions to access the channel"
        )));
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(is_loss(&redis::RedisError::from(io)));
    }

    /// A server error reply as the redis crate parses it.
    fn server_error(text: &str) -> redis::ServerError {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
            Ok(Value::ServerError(err)) => err,
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn a_change_goes_to_its_slot_once() {
        let mut plan = ShardPlan::new(vec![released_channel(b"a")]);
        assert_eq!(plan.subscriptions().len(), 1);
        // Already wanted: nothing to send.
        assert!(
            plan.apply(&Change::Subscribe(released_channel(b"a")), true)
                .is_none()
        );
        let (slot, cmd) = plan
            .apply(&Change::Subscribe(released_channel(b"{t}b")), true)
            .expect("a new channel");
        assert_eq!(slot, Slot::of(b"t"));
        let expected = Keyspace::Cluster.released_channel(b"{t}b");
        let mut want = redis::cmd("SSUBSCRIBE");
        want.arg(expected);
        assert_eq!(cmd.get_packed_command(), want.get_packed_command());
        let (_, cmd) = plan
            .apply(&Change::Unsubscribe(released_channel(b"a")), true)
            .expect("a wanted channel");
        assert!(String::from_utf8_lossy(&cmd.get_packed_command()).contains("SUNSUBSCRIBE"));
        assert!(
            plan.apply(&Change::Unsubscribe(released_channel(b"a")), true)
                .is_none()
        );
        assert_eq!(plan.subscriptions().len(), 1);
        // Offline (no connection): the plan changes, nothing to send.
        assert!(
            plan.apply(&Change::Subscribe(released_channel(b"c")), false)
                .is_none()
        );
        assert_eq!(plan.subscriptions().len(), 2);
    }

    #[test]
    fn a_push_is_a_notice_a_loss_or_nothing() {
        let mut plan = ShardPlan::new(vec![released_channel(b"a")]);
        let wanted = Keyspace::Cluster.released_channel(b"a");
        let other = Keyspace::Cluster.released_channel(b"b");
        let message = |channel: &[u8]| vec![bulk(channel), bulk(b"1")];
        assert_eq!(
            plan.heard(&PushKind::SMessage, &message(&wanted)),
            Heard::Notice(released_channel(b"a"))
        );
        assert_eq!(
            plan.heard(&PushKind::SMessage, &message(&other)),
            Heard::Nothing
        );
        let dropped = |channel: &[u8]| vec![bulk(channel), Value::Int(0)];
        assert_eq!(
            plan.heard(&PushKind::SUnsubscribe, &dropped(&wanted)),
            Heard::Lost
        );
        // An unsubscription the plan asked for (no longer wanted) is only its confirmation.
        assert_eq!(
            plan.heard(&PushKind::SUnsubscribe, &dropped(&other)),
            Heard::Nothing
        );
        assert_eq!(plan.heard(&PushKind::Disconnection, &[]), Heard::Lost);
        assert_eq!(
            plan.heard(&PushKind::SSubscribe, &dropped(&wanted)),
            Heard::Nothing
        );
        // A classic message (another client's `PUBLISH`) is not this subscriber's.
        assert_eq!(
            plan.heard(&PushKind::Message, &message(&wanted)),
            Heard::Nothing
        );
        // Left, then wanted again before the confirmation came: the confirmation is no loss;
        // a later drop of the channel is.
        plan.apply(&Change::Unsubscribe(released_channel(b"a")), true);
        plan.apply(&Change::Subscribe(released_channel(b"a")), true);
        assert_eq!(
            plan.heard(&PushKind::SUnsubscribe, &dropped(&wanted)),
            Heard::Nothing
        );
        assert_eq!(
            plan.heard(&PushKind::SUnsubscribe, &dropped(&wanted)),
            Heard::Lost
        );
        // Passing on: a notice the driver took, one it could not (gone), a loss.
        let notice = || Heard::Notice(released_channel(b"a"));
        assert_eq!(notice().pass(|_| true), Some(true));
        assert_eq!(notice().pass(|_| false), None);
        assert_eq!(Heard::Lost.pass(|_| true), Some(false));
        assert_eq!(Heard::Nothing.pass(|_| false), Some(true));
    }
}
