//! The three commands of the algorithm, what they mean, and their Redis form.
//!
//! The Lua scripts live here, once. A lock on one resource acquires with plain
//! `SET key token NX PX ttl`; a lock on several resources acquires with [`ACQUIRE_SCRIPT`], which
//! sets all keys or none on each node. Release and extend always run a script (compare-and-delete
//! and compare-and-pexpire cannot be done atomically otherwise).

use crate::spec::LockSpec;

/// Sets every key to the token with a TTL, on one node, only if none of them exists.
/// `KEYS` = the keys, `ARGV[1]` = token, `ARGV[2]` = TTL in ms. Answers 1 (set) or 0 (taken).
pub const ACQUIRE_SCRIPT: &str = "\
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1
";

/// Deletes each key that holds the token. `KEYS` = the keys, `ARGV[1]` = token. Answers 1 (deleted
/// ours; none held by another), 0 (no key present), or -1 (a key is held by another token: that
/// key is left alone, ours are still deleted).
pub const RELEASE_SCRIPT: &str = "\
local released, foreign = 0, 0
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if value == ARGV[1] then
    redis.call('DEL', KEYS[i])
    released = released + 1
  elseif value then
    foreign = foreign + 1
  end
end
if foreign > 0 then return -1 end
if released > 0 then return 1 end
return 0
";

/// Raises the TTL of every key to at least the given TTL, only if every key holds the token; a
/// TTL is never shortened (an extension to a shorter TTL must not cut the validity the lease
/// already has, which [`Lease::apply`](crate::Lease::apply) keeps). `KEYS` = the keys,
/// `ARGV[1]` = token, `ARGV[2]` = TTL in ms. Answers 1 (extended) or 0 (not held: nothing changed).
pub const EXTEND_SCRIPT: &str = "\
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
end
return 1
";

/// Whether [`EXTEND_SCRIPT`] only ever lengthens a key's TTL (its `PEXPIRE` is guarded by a
/// `PTTL` comparison). Models of the script (simulators, fake nodes) follow this flag rather than
/// reading the script's text; a unit test holds the flag and the script together.
pub const EXTEND_NEVER_SHORTENS: bool = true;

/// What a command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Set every key to the token with the TTL, only if none exists (acquire).
    SetIfAbsent,
    /// Delete every key that holds the token (release).
    DeleteIfEquals,
    /// Reset the TTL of every key, only if all hold the token (extend).
    ExpireIfEquals,
}

/// One command for one node: an operation on a lock's keys. Cheap to clone (the keys and token
/// are shared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    op: Op,
    spec: LockSpec,
    ttl_ms: u64,
}

/// Which of the algorithm's Lua scripts a command runs. Say which by this enum; the source is
/// [`Script::source`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Script {
    /// [`ACQUIRE_SCRIPT`]: set every key or none.
    Acquire,
    /// [`RELEASE_SCRIPT`]: compare-and-delete.
    Release,
    /// [`EXTEND_SCRIPT`]: compare-and-pexpire.
    Extend,
}

impl Script {
    /// The Lua source.
    pub fn source(self) -> &'static str {
        match self {
            Script::Acquire => ACQUIRE_SCRIPT,
            Script::Release => RELEASE_SCRIPT,
            Script::Extend => EXTEND_SCRIPT,
        }
    }
}

/// A command as Redis runs it.
#[derive(Debug, Clone, Copy)]
pub enum RedisForm<'a> {
    /// `SET key token NX PX ttl_ms`.
    Set {
        /// The key.
        key: &'a [u8],
        /// The token.
        token: &'a [u8],
        /// The TTL in milliseconds.
        ttl_ms: u64,
    },
    /// `EVAL script numkeys keys… args…` (or `EVALSHA` of the same script).
    Script {
        /// Which script (its Lua source is [`Script::source`]).
        script: Script,
        /// The command's lock: iterate [`LockSpec::keys`] for `KEYS`.
        spec: &'a LockSpec,
        /// `ARGV[1]`: the token.
        token: &'a [u8],
        /// `ARGV[2]`, when the script takes a TTL.
        ttl_ms: Option<u64>,
    },
}

impl Command {
    pub(crate) fn new(op: Op, spec: LockSpec, ttl_ms: u64) -> Self {
        Self { op, spec, ttl_ms }
    }

    /// What the command does.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The lock it acts on (keys and token).
    pub fn spec(&self) -> &LockSpec {
        &self.spec
    }

    /// The TTL it sets, for `SetIfAbsent` and `ExpireIfEquals`.
    pub fn ttl_ms(&self) -> Option<u64> {
        match self.op {
            Op::SetIfAbsent | Op::ExpireIfEquals => Some(self.ttl_ms),
            Op::DeleteIfEquals => None,
        }
    }

    /// How Redis runs it: plain `SET NX PX` for a one-key acquire, a script otherwise.
    pub fn redis_form(&self) -> RedisForm<'_> {
        let token = self.spec.token().as_bytes();
        match self.op {
            Op::SetIfAbsent if self.spec.len() == 1 => RedisForm::Set {
                key: self.spec.keys().next().unwrap_or_default(),
                token,
                ttl_ms: self.ttl_ms,
            },
            op => RedisForm::Script {
                script: match op {
                    Op::SetIfAbsent => Script::Acquire,
                    Op::DeleteIfEquals => Script::Release,
                    Op::ExpireIfEquals => Script::Extend,
                },
                spec: &self.spec,
                token,
                ttl_ms: self.ttl_ms(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extend_flag_matches_the_script() {
        let guarded = EXTEND_SCRIPT.contains("redis.call('PTTL', KEYS[i]) < tonumber(ARGV[2])");
        assert_eq!(EXTEND_NEVER_SHORTENS, guarded);
    }

    #[test]
    fn each_script_names_its_source() {
        assert_eq!(Script::Acquire.source(), ACQUIRE_SCRIPT);
        assert_eq!(Script::Release.source(), RELEASE_SCRIPT);
        assert_eq!(Script::Extend.source(), EXTEND_SCRIPT);
    }
}
