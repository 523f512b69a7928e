//! What one lock claims: a token on one or more resources, each stored under
//! `key_prefix ++ resource`.

use std::sync::Arc;

use smallvec::{SmallVec, smallvec};

use crate::error::ConfigError;
use crate::token::Token;

/// The most resources one lock may take (each node checks them all in one script call).
pub const MAX_RESOURCES: usize = 64;
/// The longest key (prefix included). Redis allows far more; a lock name this long is a bug.
pub const MAX_KEY_LEN: usize = 4096;

/// A token and the keys it claims, shared by every command of a lock (cloning is a reference-count
/// bump). Keys are binary-safe and kept in the caller's order; duplicates are rejected.
#[derive(Clone, PartialEq, Eq)]
pub struct LockSpec(Arc<Inner>);

#[derive(PartialEq, Eq)]
struct Inner {
    token: Token,
    prefix_len: usize,
    /// All keys, back to back (inline up to [`INLINE_KEY_BYTES`]: a lock of one short key
    /// allocates nothing beside its `Arc`).
    keys: SmallVec<[u8; INLINE_KEY_BYTES]>,
    /// Where each key ends in `keys`.
    ends: SmallVec<[usize; 1]>,
}

/// How many bytes of keys a lock keeps inline.
const INLINE_KEY_BYTES: usize = 64;

/// Whether `prefix ++ resource` is the epoch key, its identity key or a fence counter's key.
fn is_reserved(prefix: &[u8], resource: &[u8]) -> bool {
    crate::keyspace::is_reserved(prefix.iter().chain(resource).copied())
}

impl LockSpec {
    /// Checks `resources` (1 to [`MAX_RESOURCES`], each non-empty, unique, and at most
    /// [`MAX_KEY_LEN`] bytes with the prefix) and builds the keys.
    pub fn new<I, R>(key_prefix: &[u8], resources: I, token: Token) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        let mut keys = SmallVec::new();
        let mut ends = SmallVec::new();
        for (index, resource) in resources.into_iter().enumerate() {
            let resource = resource.as_ref();
            if index == MAX_RESOURCES {
                return Err(ConfigError::ResourceCount {
                    got: MAX_RESOURCES + 1,
                    max: MAX_RESOURCES,
                });
            }
            if resource.is_empty() {
                return Err(ConfigError::EmptyResource { index });
            }
            let len = key_prefix.len() + resource.len();
            if is_reserved(key_prefix, resource) {
                return Err(ConfigError::ReservedKey { index });
            }
            if len > MAX_KEY_LEN {
                return Err(ConfigError::ResourceTooLong {
                    index,
                    len,
                    max: MAX_KEY_LEN,
                });
            }
            let mut start = 0;
            for (first, &end) in ends.iter().enumerate() {
                if keys[start + key_prefix.len()..end] == *resource {
                    return Err(ConfigError::DuplicateResource { index, first });
                }
                start = end;
            }
            keys.extend_from_slice(key_prefix);
            keys.extend_from_slice(resource);
            ends.push(keys.len());
        }
        if ends.is_empty() {
            return Err(ConfigError::ResourceCount {
                got: 0,
                max: MAX_RESOURCES,
            });
        }
        Ok(Self(Arc::new(Inner {
            token,
            prefix_len: key_prefix.len(),
            keys,
            ends,
        })))
    }

    /// The node's epoch key alone (for the trust command), under a placeholder token.
    pub(crate) fn epoch() -> Self {
        let keys = SmallVec::from_slice(crate::command::EPOCH_KEY);
        let ends = smallvec![keys.len()];
        Self(Arc::new(Inner {
            token: Token::trust(),
            prefix_len: 0,
            keys,
            ends,
        }))
    }

    /// The same keys under another token.
    pub(crate) fn with_token(&self, token: Token) -> Self {
        Self(Arc::new(Inner {
            token,
            prefix_len: self.0.prefix_len,
            keys: self.0.keys.clone(),
            ends: self.0.ends.clone(),
        }))
    }

    /// The same resources with `{tag}` of `slot` before every key: how a node that is one of
    /// several votes over one cluster names them ([`ConfigBuilder::key_slot`]), so that its keys
    /// of every lock live in that slot. The resources stay what they were.
    ///
    /// [`ConfigBuilder::key_slot`]: crate::ConfigBuilder::key_slot
    pub fn in_slot(&self, slot: crate::Slot) -> Self {
        let tag = slot.tag().as_bytes();
        let added = tag.len() + 2;
        let mut keys = SmallVec::with_capacity(self.0.keys.len() + added * self.0.ends.len());
        let mut ends = SmallVec::with_capacity(self.0.ends.len());
        for key in self.keys() {
            keys.push(b'{');
            keys.extend_from_slice(tag);
            keys.push(b'}');
            keys.extend_from_slice(key);
            ends.push(keys.len());
        }
        Self(Arc::new(Inner {
            token: self.0.token.clone(),
            prefix_len: self.0.prefix_len + added,
            keys,
            ends,
        }))
    }

    /// The token written under every key.
    pub fn token(&self) -> &Token {
        &self.0.token
    }

    /// The Redis keys, prefix included, in the caller's order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone + '_ {
        let inner = &*self.0;
        inner.ends.iter().enumerate().map(move |(i, &end)| {
            let start = if i == 0 { 0 } else { inner.ends[i - 1] };
            &inner.keys[start..end]
        })
    }

    /// The channels a release of these keys is announced on ([`released_channel`]), one per key:
    /// where a waiter listens to end its retry pause early.
    ///
    /// [`released_channel`]: crate::released_channel
    pub fn released_channels(&self) -> impl ExactSizeIterator<Item = Vec<u8>> + '_ {
        self.keys().map(crate::command::released_channel)
    }

    /// The resource names, without the prefix, in the caller's order.
    pub fn resources(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone + '_ {
        let prefix = self.0.prefix_len;
        self.keys().map(move |key| &key[prefix..])
    }

    /// How many resources the lock claims.
    pub fn len(&self) -> usize {
        self.0.ends.len()
    }

    /// Always false: a lock claims at least one resource.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl std::fmt::Debug for LockSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut list = f.debug_list();
        for resource in self.resources() {
            list.entry(&String::from_utf8_lossy(resource));
        }
        list.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> Token {
        Token::new(b"t".to_vec()).expect("valid")
    }

    #[test]
    fn keys_carry_the_prefix_and_keep_order() {
        let spec = LockSpec::new(b"lock:", [&b"b"[..], b"a", b"\0\xff"], token()).expect("valid");
        let keys: Vec<&[u8]> = spec.keys().collect();
        assert_eq!(keys, [&b"lock:b"[..], b"lock:a", b"lock:\0\xff"]);
        let resources: Vec<&[u8]> = spec.resources().collect();
        assert_eq!(resources, [&b"b"[..], b"a", b"\0\xff"]);
        assert_eq!(spec.len(), 3);
    }

    #[test]
    fn a_vote_slot_goes_before_every_key_and_keeps_the_resources() {
        let spec = LockSpec::new(b"lock:", [&b"{a}b"[..], b"c"], token()).expect("valid");
        let slot = crate::vote_slots(3).nth(1).expect("a slot");
        let voted = spec.in_slot(slot);
        let tag = slot.tag();
        let keys: Vec<Vec<u8>> = voted.keys().map(<[u8]>::to_vec).collect();
        assert_eq!(
            keys,
            [
                format!("{{{tag}}}lock:{{a}}b").into_bytes(),
                format!("{{{tag}}}lock:c").into_bytes()
            ]
        );
        assert!(
            voted.keys().all(|key| crate::Slot::of(key) == slot),
            "one slot"
        );
        assert!(voted.resources().eq(spec.resources()));
        assert_eq!(voted.token(), spec.token());
    }

    #[test]
    fn bad_resources_are_named() {
        let none: [&[u8]; 0] = [];
        assert_eq!(
            LockSpec::new(b"", none, token()),
            Err(ConfigError::ResourceCount {
                got: 0,
                max: MAX_RESOURCES
            })
        );
        assert_eq!(
            LockSpec::new(b"p", [&b"a"[..], b""], token()),
            Err(ConfigError::EmptyResource { index: 1 })
        );
        assert_eq!(
            LockSpec::new(b"p", [&b"a"[..], b"b", b"a"], token()),
            Err(ConfigError::DuplicateResource { index: 2, first: 0 })
        );
        let long = vec![b'k'; MAX_KEY_LEN];
        assert!(matches!(
            LockSpec::new(b"p", [long], token()),
            Err(ConfigError::ResourceTooLong { index: 0, len, .. }) if len == MAX_KEY_LEN + 1
        ));
        let many: Vec<Vec<u8>> = (0..=MAX_RESOURCES)
            .map(|i| i.to_string().into_bytes())
            .collect();
        assert!(matches!(
            LockSpec::new(b"", many, token()),
            Err(ConfigError::ResourceCount { .. })
        ));
    }
}
