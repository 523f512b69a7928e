//! Where a lock's companions live on a node: its node's epoch (and the epoch's identity), its
//! fence counter and its release channel, named from the lock key.
//!
//! A standalone node keeps the names every release has used: one epoch per node
//! ([`EPOCH_KEY`], [`EPOCH_ID_KEY`]), `redlock:fence:K`, `redlock:released:K` — a fence counter
//! under a new name would restart from the node's clock, and could fall back while an upgrade
//! mixes releases.
//!
//! A cluster serves each key from its slot's master, and a script or transaction may only touch
//! keys of one slot: there, every companion of lock key `K` lives in `K`'s slot. Each name
//! carries `{tag}`, the [`Slot::tag`] of `K`'s slot, before anything taken from `K`, so that its
//! hash tag is that tag whatever `K` holds (braces included). The epoch is one per slot: at most
//! [`SLOT_COUNT`](crate::SLOT_COUNT) epoch names per cluster, fixed by the slot alone — never by
//! which master serves it, so a slot that moves or fails over keeps its names.
//!
//! This module only names; it never decides which keyspace a node has (the driver learns it at
//! connect).

use std::borrow::Cow;

use crate::command::{
    EPOCH_ID_KEY, EPOCH_KEY, EPOCH_MARKER_PREFIX, FENCE_KEY_PREFIX, RELEASED_CHANNEL_PREFIX,
};
use crate::slot::Slot;

/// The prefix of a cluster slot's epoch: the epoch of slot `s` is `redlock:epoch:{tag}`. Lock
/// keys may not start with it.
pub const SLOT_EPOCH_PREFIX: &[u8] = b"redlock:epoch:{";

/// The prefix of a cluster slot's epoch identity (see [`EPOCH_ID_KEY`]): `redlock:epoch:id:{tag}`.
/// Lock keys may not start with it.
pub const SLOT_EPOCH_ID_PREFIX: &[u8] = b"redlock:epoch:id:{";

/// How a node lays out the names beside its lock keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Keyspace {
    /// One keyspace served by one node (a standalone master): the names of every release.
    #[default]
    Standalone,
    /// A Redis or Valkey Cluster: every name in its lock key's slot.
    Cluster,
}

impl Keyspace {
    /// The epoch that vouches for lock key `key`'s node (or, on a cluster, slot).
    pub fn epoch_key(self, key: &[u8]) -> Cow<'static, [u8]> {
        match self {
            Self::Standalone => Cow::Borrowed(EPOCH_KEY),
            Self::Cluster => Cow::Owned(in_slot(b"redlock:epoch:", key, b"")),
        }
    }

    /// The identity stamped with [`epoch_key`](Self::epoch_key)'s epoch.
    pub fn epoch_id_key(self, key: &[u8]) -> Cow<'static, [u8]> {
        match self {
            Self::Standalone => Cow::Borrowed(EPOCH_ID_KEY),
            Self::Cluster => Cow::Owned(in_slot(b"redlock:epoch:id:", key, b"")),
        }
    }

    /// Lock key `key`'s fence counter: `redlock:fence:K`, on a cluster `redlock:fence:{tag}K`.
    pub fn fence_key(self, key: &[u8]) -> Vec<u8> {
        match self {
            Self::Standalone => [FENCE_KEY_PREFIX, key].concat(),
            Self::Cluster => in_slot(FENCE_KEY_PREFIX, key, key),
        }
    }

    /// Lock key `key`'s release channel: `redlock:released:K`, on a cluster (a sharded channel,
    /// `SPUBLISH`/`SSUBSCRIBE`) `redlock:released:{tag}K`.
    pub fn released_channel(self, key: &[u8]) -> Vec<u8> {
        match self {
            Self::Standalone => [RELEASED_CHANNEL_PREFIX, key].concat(),
            Self::Cluster => in_slot(RELEASED_CHANNEL_PREFIX, key, key),
        }
    }
}

/// The names of one epoch and of its identity, inline (no allocation): the node's own
/// ([`EPOCH_KEY`], [`EPOCH_ID_KEY`]) on a standalone node, or a cluster slot's
/// (`redlock:epoch:{tag}`, `redlock:epoch:id:{tag}`) — what a proof reads and stamps, and what
/// a seal reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochNames {
    /// The slot whose epoch these are (`None`: the node's one epoch).
    slot: Option<Slot>,
    epoch: InlineName,
    id: InlineName,
}

/// A name of at most [`INLINE_NAME`] bytes, and its length.
type InlineName = ([u8; INLINE_NAME], u8);

/// The longest name [`EpochNames`] holds: `redlock:epoch:id:{tag}` with a tag of 3.
const INLINE_NAME: usize = 24;

impl EpochNames {
    /// The node's one epoch: the names every release has used.
    pub fn standalone() -> Self {
        const STANDALONE: EpochNames = EpochNames {
            slot: None,
            epoch: inline(&[EPOCH_KEY]),
            id: inline(&[EPOCH_ID_KEY]),
        };
        STANDALONE
    }

    /// Cluster slot `slot`'s epoch: the names [`Keyspace::epoch_key`] and
    /// [`Keyspace::epoch_id_key`] give every key of that slot.
    pub fn of_slot(slot: Slot) -> Self {
        let tag = slot.tag().as_bytes();
        Self {
            slot: Some(slot),
            epoch: inline(&[SLOT_EPOCH_PREFIX, tag, b"}"]),
            id: inline(&[SLOT_EPOCH_ID_PREFIX, tag, b"}"]),
        }
    }

    /// The epoch that vouches for lock key `key` on a node of `keyspace`.
    pub fn of(keyspace: Keyspace, key: &[u8]) -> Self {
        match keyspace {
            Keyspace::Standalone => Self::standalone(),
            Keyspace::Cluster => Self::of_slot(Slot::of(key)),
        }
    }

    /// The slot (`None`: the node's one epoch).
    pub fn slot(&self) -> Option<Slot> {
        self.slot
    }

    /// The epoch's name.
    pub fn epoch(&self) -> &[u8] {
        &self.epoch.0[..usize::from(self.epoch.1)]
    }

    /// Its identity's name.
    pub fn id(&self) -> &[u8] {
        &self.id.0[..usize::from(self.id.1)]
    }

    /// The slot whose epoch `key` names, if `key` is a cluster slot's epoch (not its identity,
    /// nor anything else): what a push about `key` ends.
    pub fn slot_of_epoch(key: &[u8]) -> Option<Slot> {
        let slot = Slot::of(key);
        (key.starts_with(SLOT_EPOCH_PREFIX) && Self::of_slot(slot).epoch() == key).then_some(slot)
    }
}

/// `parts` one after another, in an [`InlineName`] (every caller's parts fit; bytes past
/// [`INLINE_NAME`] are dropped). A `const fn`: the standalone names are built once, at compile
/// time.
const fn inline(parts: &[&[u8]]) -> InlineName {
    let mut name = [0; INLINE_NAME];
    // At most INLINE_NAME (24): a u8.
    let mut len: u8 = 0;
    let mut part = 0;
    while part < parts.len() {
        let bytes = parts[part];
        let mut at = 0;
        while at < bytes.len() && (len as usize) < INLINE_NAME {
            name[len as usize] = bytes[at];
            len += 1;
            at += 1;
        }
        part += 1;
    }
    (name, len)
}

/// `prefix` `{tag}` `rest`, where `tag` names `key`'s slot: the name's hash tag is the first
/// braces in it, so `rest` (taken from the key, braces and all) never moves it.
fn in_slot(prefix: &[u8], key: &[u8], rest: &[u8]) -> Vec<u8> {
    [prefix, b"{", Slot::of(key).tag().as_bytes(), b"}", rest].concat()
}

/// Whether lock key `key` (prefix and resource) takes a name this module gives to something
/// else, in either keyspace: a lock under it would overwrite an epoch or a fence counter.
pub(crate) fn is_reserved(key: impl Iterator<Item = u8> + Clone) -> bool {
    let is = |name: &[u8]| key.clone().eq(name.iter().copied());
    let starts = |prefix: &[u8]| {
        let mut key = key.clone();
        prefix.iter().all(|&b| key.next() == Some(b))
    };
    is(EPOCH_KEY)
        || is(EPOCH_ID_KEY)
        || starts(EPOCH_MARKER_PREFIX)
        || starts(FENCE_KEY_PREFIX)
        || starts(SLOT_EPOCH_PREFIX)
        || starts(SLOT_EPOCH_ID_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slot::hash_tag;

    #[test]
    fn epoch_names_are_the_keyspaces_for_every_slot() {
        let standalone = EpochNames::standalone();
        assert_eq!(standalone.epoch(), EPOCH_KEY);
        assert_eq!(standalone.id(), EPOCH_ID_KEY);
        assert_eq!(standalone.slot(), None);
        assert_eq!(EpochNames::slot_of_epoch(EPOCH_KEY), None);
        for slot in Slot::all() {
            let key = format!("{{{}}}lock", slot.tag());
            let names = EpochNames::of(Keyspace::Cluster, key.as_bytes());
            assert_eq!(names.slot(), Some(slot));
            assert_eq!(names.epoch(), &*Keyspace::Cluster.epoch_key(key.as_bytes()));
            assert_eq!(names.id(), &*Keyspace::Cluster.epoch_id_key(key.as_bytes()));
            assert_eq!(EpochNames::slot_of_epoch(names.epoch()), Some(slot));
            // The identity, a lock key of the slot, or an epoch name with more after it is
            // no slot's epoch.
            assert_eq!(EpochNames::slot_of_epoch(names.id()), None);
            assert_eq!(EpochNames::slot_of_epoch(key.as_bytes()), None);
            assert_eq!(
                EpochNames::slot_of_epoch(&[names.epoch(), b"x"].concat()),
                None
            );
        }
    }

    /// Keys a cluster hashes in every way: plain, with a hash tag, with braces that make no tag
    /// (`{}`), with a `}` before the `{`, nested, binary, long.
    fn keys() -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = [
            &b"a"[..],
            b"invoice:42",
            b"{user1}:x",
            b"x{user1}y",
            b"{}",
            b"{}x",
            b"}{a}",
            b"{{a}}",
            b"a{",
            b"}",
            b"{",
            b"redlock:epoch",
            b"\x00\xff{\x01}",
        ]
        .iter()
        .map(|k| k.to_vec())
        .collect();
        keys.extend((0..2_000u32).map(|i| format!("job:{i}:{{t{}}}", i % 7).into_bytes()));
        keys.extend((0..2_000u32).map(|i| i.to_le_bytes().repeat(3)));
        keys.push(vec![b'k'; 600]);
        keys
    }

    #[test]
    fn on_a_cluster_every_name_lives_in_its_keys_slot() {
        for key in keys() {
            let slot = Slot::of(&key);
            let cluster = Keyspace::Cluster;
            for name in [
                cluster.epoch_key(&key).into_owned(),
                cluster.epoch_id_key(&key).into_owned(),
                cluster.fence_key(&key),
                cluster.released_channel(&key),
            ] {
                assert_eq!(Slot::of(&name), slot, "{name:?} for key {key:?}");
                assert_eq!(hash_tag(&name), slot.tag().as_bytes(), "{name:?}");
            }
        }
    }

    #[test]
    fn a_naive_tag_misses_the_slot_negative_control() {
        // Wrapping the key in braces, the obvious scheme, puts a companion elsewhere for keys
        // that hold braces themselves: the check above catches that.
        let naive = |key: &[u8]| [FENCE_KEY_PREFIX, b"{", key, b"}"].concat();
        let strays = keys()
            .into_iter()
            .filter(|key| Slot::of(&naive(key)) != Slot::of(key))
            .count();
        assert!(strays > 0, "the naive scheme must fail for some key");
    }

    #[test]
    fn a_standalone_node_keeps_the_names_of_every_release() {
        let standalone = Keyspace::Standalone;
        assert_eq!(standalone.epoch_key(b"k").as_ref(), b"redlock:epoch");
        assert_eq!(standalone.epoch_id_key(b"k").as_ref(), b"redlock:epoch:id");
        assert_eq!(standalone.fence_key(b"k"), b"redlock:fence:k");
        assert_eq!(standalone.released_channel(b"k"), b"redlock:released:k");
        assert_eq!(
            standalone.released_channel(b"k"),
            crate::command::released_channel(b"k")
        );
    }

    #[test]
    fn a_clusters_epochs_are_one_per_slot_and_never_a_lock_key() {
        let cluster = Keyspace::Cluster;
        // Pinned: these names never change between releases (a renamed epoch is a lost one).
        assert_eq!(cluster.epoch_key(b"a").as_ref(), b"redlock:epoch:{a}");
        assert_eq!(cluster.epoch_id_key(b"a").as_ref(), b"redlock:epoch:id:{a}");
        assert_eq!(cluster.fence_key(b"a"), b"redlock:fence:{a}a");
        assert_eq!(cluster.released_channel(b"a"), b"redlock:released:{a}a");
        // Keys of one slot share one epoch; the epochs of all slots are distinct.
        assert_eq!(cluster.epoch_key(b"{x}1"), cluster.epoch_key(b"{x}2"));
        let epochs: std::collections::HashSet<Vec<u8>> = Slot::all()
            .map(|slot| cluster.epoch_key(slot.tag().as_bytes()).into_owned())
            .collect();
        assert_eq!(epochs.len(), usize::from(crate::SLOT_COUNT));
        for key in keys() {
            for name in [
                cluster.epoch_key(&key).into_owned(),
                cluster.epoch_id_key(&key).into_owned(),
                cluster.fence_key(&key),
            ] {
                assert!(is_reserved(name.iter().copied()), "{name:?} is reserved");
            }
        }
    }

    #[test]
    fn only_the_companions_names_are_reserved() {
        let reserved = |key: &[u8]| is_reserved(key.iter().copied());
        assert!(reserved(b"redlock:epoch") && reserved(b"redlock:epoch:id"));
        assert!(reserved(b"redlock:fence:x") && reserved(b"redlock:epoch:{q}"));
        assert!(reserved(b"redlock:epoch:m:5") && reserved(b"redlock:epoch:m:"));
        assert!(!reserved(b"redlock:epoch:x") && !reserved(b"redlock:epoc"));
        assert!(!reserved(b"redlock:released:x") && !reserved(b"invoice:42"));
    }
}
