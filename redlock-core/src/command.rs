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

/// The node's epoch key for restart-aware voting: the node's own time (ms, by `TIME`) when its
/// acquire script first found the key missing, i.e. when the node's memory began; `0` once an
/// operator trusted the node ([`TRUST_SCRIPT`]). One per node (per database), whatever the key
/// prefix: with Redis ACLs, allow it besides the lock keys. No lock may use this key.
pub const EPOCH_KEY: &[u8] = b"redlock:epoch";

/// [`ACQUIRE_SCRIPT`] with restart-aware voting: before anything else, reads the node's epoch
/// ([`EPOCH_KEY`], created with the node's `TIME` when missing) and refuses to vote while the
/// node's memory is younger than the longest TTL in use. `KEYS` = the lock keys, then the epoch
/// key; `ARGV[1]` = token, `ARGV[2]` = TTL in ms, `ARGV[3]` = the longest TTL in use, in ms.
/// Answers 1 (set), 0 (taken), or −m: not eligible for `m` ms more (nothing set). An epoch of 0
/// means trusted.
pub const ACQUIRE_CHECKED_SCRIPT: &str = "\
local n = #KEYS - 1
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = tonumber(redis.call('GET', KEYS[#KEYS]))
if not epoch then
  redis.call('SET', KEYS[#KEYS], now)
  epoch = now
end
if epoch ~= 0 then
  local young = tonumber(ARGV[3]) - (now - epoch)
  if young > 0 then return -young end
end
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1
";

/// Marks the node trusted: its memory is old enough for any TTL (an operator who knows that no
/// lock is live says so, for a fresh deployment). `KEYS[1]` = [`EPOCH_KEY`]. Answers 1.
pub const TRUST_SCRIPT: &str = "\
redis.call('SET', KEYS[1], 0)
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
    /// Mark the node trusted for restart-aware voting ([`TRUST_SCRIPT`]).
    Trust,
}

/// One command for one node: an operation on a lock's keys. Cheap to clone (the keys and token
/// are shared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    op: Op,
    spec: LockSpec,
    ttl_ms: u64,
    /// The longest TTL in use, for a restart-aware acquire.
    max_ttl_ms: Option<u64>,
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
    /// [`ACQUIRE_CHECKED_SCRIPT`]: set every key or none, if the node may vote.
    AcquireChecked,
    /// [`TRUST_SCRIPT`]: mark the node trusted.
    Trust,
}

impl Script {
    /// The Lua source.
    pub fn source(self) -> &'static str {
        match self {
            Script::Acquire => ACQUIRE_SCRIPT,
            Script::Release => RELEASE_SCRIPT,
            Script::Extend => EXTEND_SCRIPT,
            Script::AcquireChecked => ACQUIRE_CHECKED_SCRIPT,
            Script::Trust => TRUST_SCRIPT,
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
        /// One more key after the lock's, when the script takes it ([`EPOCH_KEY`]).
        epoch_key: Option<&'static [u8]>,
        /// `ARGV[1]`: the token.
        token: &'a [u8],
        /// `ARGV[2]`, when the script takes a TTL.
        ttl_ms: Option<u64>,
        /// `ARGV[3]`, when the script takes the longest TTL in use.
        max_ttl_ms: Option<u64>,
    },
}

impl Command {
    pub(crate) fn new(op: Op, spec: LockSpec, ttl_ms: u64, max_ttl_ms: Option<u64>) -> Self {
        Self {
            op,
            spec,
            ttl_ms,
            max_ttl_ms,
        }
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
            Op::DeleteIfEquals | Op::Trust => None,
        }
    }

    /// How Redis runs it: plain `SET NX PX` for a one-key acquire without restart-aware voting,
    /// a script otherwise.
    pub fn redis_form(&self) -> RedisForm<'_> {
        let token = self.spec.token().as_bytes();
        let checked = self.op == Op::SetIfAbsent && self.max_ttl_ms.is_some();
        match self.op {
            Op::SetIfAbsent if self.spec.len() == 1 && !checked => RedisForm::Set {
                key: self.spec.keys().next().unwrap_or_default(),
                token,
                ttl_ms: self.ttl_ms,
            },
            op => RedisForm::Script {
                script: match op {
                    Op::SetIfAbsent if checked => Script::AcquireChecked,
                    Op::SetIfAbsent => Script::Acquire,
                    Op::DeleteIfEquals => Script::Release,
                    Op::ExpireIfEquals => Script::Extend,
                    Op::Trust => Script::Trust,
                },
                spec: &self.spec,
                epoch_key: checked.then_some(EPOCH_KEY),
                token,
                ttl_ms: self.ttl_ms(),
                max_ttl_ms: if checked { self.max_ttl_ms } else { None },
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
        assert_eq!(Script::AcquireChecked.source(), ACQUIRE_CHECKED_SCRIPT);
        assert_eq!(Script::Trust.source(), TRUST_SCRIPT);
    }
}
