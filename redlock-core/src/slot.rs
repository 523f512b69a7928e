//! Hash slots: which of a Redis or Valkey Cluster's 16384 slots a key belongs to, and a short
//! name for every slot, so that what a lock stores beside its key can live in the key's slot.
//!
//! A cluster serves a key from the master that owns the key's slot: `CRC16(key) mod 16384`
//! (CRC-16/XMODEM), where only the key's hash tag is hashed when it has one — the bytes between
//! its first `{` and the first `}` after it, when they are not empty. Keys that share a hash tag
//! share a slot, whatever the cluster's topology.
//!
//! [`Slot::tag`] names every slot with 1 to 3 ASCII letters or digits, fixed by the slot alone
//! (never by a topology): `{tag}` in a name puts it in that slot. The names never change between
//! releases; a test pins them.

use std::fmt;
use std::sync::OnceLock;

/// How many hash slots a cluster has.
pub const SLOT_COUNT: u16 = 16384;

/// One of a cluster's [`SLOT_COUNT`] hash slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(u16);

impl Slot {
    /// The slot numbered `slot`, if it is below [`SLOT_COUNT`].
    pub const fn new(slot: u16) -> Option<Self> {
        if slot < SLOT_COUNT {
            Some(Self(slot))
        } else {
            None
        }
    }

    /// The slot a cluster serves `key` from (`CLUSTER KEYSLOT`).
    pub fn of(key: &[u8]) -> Self {
        Self(crc16(hash_tag(key)) % SLOT_COUNT)
    }

    /// The slot's number, `0..16384`.
    pub const fn get(self) -> u16 {
        self.0
    }

    /// Every slot, in order.
    pub fn all() -> impl Iterator<Item = Self> {
        (0..SLOT_COUNT).map(Self)
    }

    /// A name of 1 to 3 ASCII letters or digits that hashes to this slot: `{tag}` inside a key
    /// puts the key here. The shortest such name, the first in the order of [`TAG_ALPHABET`];
    /// computed once per process (about 240 000 CRCs), then read from a table.
    pub fn tag(self) -> &'static str {
        let tags = TAGS.get_or_init(build_tags);
        let (bytes, len) = &tags[usize::from(self.0)];
        // Every byte comes from TAG_ALPHABET, which is ASCII.
        std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
    }
}

/// The most votes one cluster may lend a lock ([`vote_slots`]).
pub const MAX_CLUSTER_VOTES: usize = 64;

/// The slots of `votes` votes over one cluster: the middle slot of each of `votes` even shares
/// of the slot range, in order. Fixed by `votes` alone, never by a topology. Under an even
/// layout (what `redis-cli --cluster create` makes: master `m` of `M` serves about
/// `m * 16384 / M ..= (m + 1) * 16384 / M - 1`), a cluster of `M >= votes` masters serves each
/// of them from a master of its own; after a resharding two may share a master. Empty for 0,
/// and for more than [`MAX_CLUSTER_VOTES`].
pub fn vote_slots(votes: usize) -> impl ExactSizeIterator<Item = Slot> {
    let votes = if votes > MAX_CLUSTER_VOTES { 0 } else { votes };
    (0..votes).map(move |vote| {
        // At most (2 * 63 + 1) * 16384: no overflow, and below 16384 once divided.
        let middle = (2 * vote + 1) * usize::from(SLOT_COUNT) / (2 * votes);
        Slot(u16::try_from(middle).unwrap_or(SLOT_COUNT - 1))
    })
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slot {}", self.0)
    }
}

/// The characters slot tags are made of, in the order tags are tried: safe in key names, in
/// channel names and in ACL key patterns, and never `{` or `}`.
pub const TAG_ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// The part of `key` a cluster hashes: its hash tag when it has a non-empty one, else all of it.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let rest = &key[open + 1..];
    match rest.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => &rest[..close],
        _ => key,
    }
}

/// CRC-16/XMODEM (polynomial `0x1021`, initial value 0), the checksum cluster slots use.
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0, |crc, &byte| {
        (crc << 8) ^ CRC_TABLE[usize::from((crc >> 8) as u8 ^ byte)]
    })
}

const CRC_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i: u16 = 0;
    while i < 256 {
        let mut crc = i << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i as usize] = crc;
        i += 1;
    }
    table
};

type Tags = Vec<([u8; 3], u8)>;

static TAGS: OnceLock<Tags> = OnceLock::new();

/// Every slot's first tag, trying 1-, then 2-, then 3-character names in alphabet order.
/// Three characters of 62 give about 240 000 names, 14 per slot on average; a test checks that
/// every slot gets one.
fn build_tags() -> Tags {
    let mut tags: Tags = vec![([0; 3], 0); usize::from(SLOT_COUNT)];
    let mut left = usize::from(SLOT_COUNT);
    let mut offer = |name: &[u8]| {
        let slot = usize::from(crc16(name) % SLOT_COUNT);
        if tags[slot].1 == 0 {
            tags[slot].0[..name.len()].copy_from_slice(name);
            // A name has at most 3 bytes.
            tags[slot].1 = u8::try_from(name.len()).unwrap_or(3);
            left -= 1;
        }
        left == 0
    };
    'names: for len in 1..=3 {
        let mut name = [TAG_ALPHABET[0]; 3];
        let mut digits = [0usize; 3];
        loop {
            for (at, &digit) in digits[..len].iter().enumerate() {
                name[at] = TAG_ALPHABET[digit];
            }
            if offer(&name[..len]) {
                break 'names;
            }
            // The next name of this length, the last character turning fastest.
            let mut at = len;
            loop {
                if at == 0 {
                    continue 'names;
                }
                at -= 1;
                digits[at] += 1;
                if digits[at] < TAG_ALPHABET.len() {
                    break;
                }
                digits[at] = 0;
            }
        }
    }
    tags
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Master `m`'s last slot in `redis-cli --cluster create`'s layout of `masters` masters.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_precision_loss,
        reason = "the same float arithmetic as redis-cli, on small values"
    )]
    fn redis_cli_layout(masters: usize) -> Vec<u16> {
        let per_master = f32::from(SLOT_COUNT) / masters as f32;
        let (mut first, mut cursor, mut lasts) = (0_i64, 0.0_f32, Vec::new());
        for master in 0..masters {
            let mut last = (cursor + per_master - 1.0).round() as i64;
            if last > i64::from(SLOT_COUNT) || master == masters - 1 {
                last = i64::from(SLOT_COUNT) - 1;
            }
            last = last.max(first);
            lasts.push(u16::try_from(last).expect("a slot"));
            first = last + 1;
            cursor += per_master;
        }
        lasts
    }

    #[test]
    fn the_vote_slots_land_on_distinct_masters_of_an_even_layout() {
        assert_eq!(
            vote_slots(3).map(Slot::get).collect::<Vec<_>>(),
            [2730, 8192, 13653],
            "the names never change"
        );
        assert_eq!(vote_slots(1).map(Slot::get).collect::<Vec<_>>(), [8192]);
        assert_eq!(vote_slots(0).len(), 0);
        assert_eq!(vote_slots(MAX_CLUSTER_VOTES + 1).len(), 0);
        for votes in 1..=MAX_CLUSTER_VOTES {
            for masters in votes..=votes + 200 {
                let even = |slot: Slot| usize::from(slot.get()) * masters / usize::from(SLOT_COUNT);
                let lasts = redis_cli_layout(masters);
                let cli = |slot: Slot| lasts.iter().position(|&last| slot.get() <= last);
                let on_even: Vec<usize> = vote_slots(votes).map(even).collect();
                let on_cli: Vec<Option<usize>> = vote_slots(votes).map(cli).collect();
                for (i, master) in on_even.iter().enumerate() {
                    assert!(
                        !on_even[..i].contains(master),
                        "{votes} on {masters}: {on_even:?}"
                    );
                    assert!(
                        on_cli[i].is_some() && !on_cli[..i].contains(&on_cli[i]),
                        "{votes} on {masters} (redis-cli): {on_cli:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_crc_is_xmodem() {
        // The CRC-16/XMODEM check value, and the examples of the cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(Slot::of(b"foo").get(), 12182);
        assert_eq!(Slot::of(b"bar").get(), 5061);
        assert_eq!(Slot::of(b"").get(), 0);
    }

    #[test]
    fn a_hash_tag_is_the_first_non_empty_braces() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        assert_eq!(hash_tag(b"plain"), b"plain");
        assert_eq!(
            Slot::of(b"{user1000}.following"),
            Slot::of(b"{user1000}.followers")
        );
    }

    #[test]
    fn every_slot_has_a_short_tag_that_hashes_to_it() {
        for slot in Slot::all() {
            let tag = slot.tag();
            assert!((1..=3).contains(&tag.len()), "{slot}: {tag:?}");
            assert!(
                tag.bytes().all(|b| TAG_ALPHABET.contains(&b)),
                "{slot}: {tag:?}"
            );
            assert_eq!(Slot::of(tag.as_bytes()), slot, "{tag:?}");
            let keyed = format!("redlock:epoch:{{{tag}}}");
            assert_eq!(Slot::of(keyed.as_bytes()), slot, "{keyed}");
        }
    }

    #[test]
    fn tags_are_pinned() {
        // Names stored on nodes must never change between releases: a changed tag would leave
        // a slot's epoch behind under its old name.
        let some: Vec<&str> = [0u16, 1, 5061, 12182, 16383]
            .into_iter()
            .filter_map(Slot::new)
            .map(Slot::tag)
            .collect();
        assert_eq!(some, PINNED_TAGS);
        let digest = Slot::all().fold(0u64, |acc, slot| {
            slot.tag().bytes().fold(acc.rotate_left(5), |acc, b| {
                acc.wrapping_mul(31) ^ u64::from(b)
            })
        });
        assert_eq!(digest, PINNED_DIGEST, "the slot tags changed");
    }

    /// The tags of slots 0, 1, 5061, 12182 and 16383, and a digest of all 16384, as first built.
    const PINNED_TAGS: [&str; 5] = ["06S", "Qi", "bar", "9Le", "6ZJ"];
    const PINNED_DIGEST: u64 = 2_510_777_947_411_483_789;

    #[test]
    fn no_slot_beyond_the_count() {
        assert!(Slot::new(SLOT_COUNT).is_none());
        assert_eq!(Slot::new(SLOT_COUNT - 1).map(Slot::get), Some(16383));
    }

    proptest! {
        #[test]
        fn keys_sharing_a_tag_share_a_slot(
            tag in "[a-z0-9]{1,8}",
            a in "[^{}]{0,8}",
            b in "[^{}]{0,8}",
        ) {
            let one = format!("{a}{{{tag}}}x");
            let two = format!("{{{tag}}}{b}");
            prop_assert_eq!(Slot::of(one.as_bytes()), Slot::of(two.as_bytes()));
            prop_assert_eq!(Slot::of(one.as_bytes()), Slot::of(tag.as_bytes()));
        }
    }
}
