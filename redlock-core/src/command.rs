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

/// Deletes each key that holds the token. `KEYS` = the keys, `ARGV[1]` = token, `ARGV[2]` = `1` to
/// announce each deleted key on its release channel ([`released_channel`]), `0` not to. Answers
/// 1 (deleted ours; none held by another), 0 (no key present), or -1 (a key is held by another
/// token: that key is left alone, ours are still deleted).
///
/// The announcement is a `PUBLISH` inside the script, so it costs no round trip, and almost
/// nothing when nobody listens; it is made with `pcall`, so a server that refuses it (an ACL
/// without `PUBLISH`) still releases.
pub const RELEASE_SCRIPT: &str = "\
local released, foreign = 0, 0
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if value == ARGV[1] then
    redis.call('DEL', KEYS[i])
    released = released + 1
    if ARGV[2] == '1' then
      redis.pcall('PUBLISH', 'redlock:released:' .. KEYS[i], '1')
    end
  elseif value then
    foreign = foreign + 1
  end
end
if foreign > 0 then return -1 end
if released > 0 then return 1 end
return 0
";

/// The prefix of a key's release channel: a release of a held lock announces key `K` on
/// `redlock:released:K` ([`RELEASE_SCRIPT`]), and a client waiting for `K` may listen there to
/// end its retry pause early ([`Lifecycle::handle_wake`](crate::Lifecycle::handle_wake)).
pub const RELEASED_CHANNEL_PREFIX: &[u8] = b"redlock:released:";

/// The release channel of lock key `key`: [`RELEASED_CHANNEL_PREFIX`] followed by the key.
pub fn released_channel(key: &[u8]) -> Vec<u8> {
    [RELEASED_CHANNEL_PREFIX, key].concat()
}

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
/// means trusted (and spares the node its `TIME` call); one key is set with a single
/// `SET NX PX`, as without the check.
pub const ACQUIRE_CHECKED_SCRIPT: &str = "\
local n = #KEYS - 1
local epoch = tonumber(redis.call('GET', KEYS[#KEYS]))
if epoch ~= 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not epoch then
    redis.call('SET', KEYS[#KEYS], now)
    epoch = now
  end
  local young = tonumber(ARGV[3]) - (now - epoch)
  if young > 0 then return -young end
end
if n == 1 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
  return 0
end
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1
";

/// The prefix of a lock key's fence counter: the counter of key `K` is `redlock:fence:K`. Locks
/// may not use keys under it.
pub const FENCE_KEY_PREFIX: &[u8] = b"redlock:fence:";

/// How long a fence counter outlives the last fenced acquisition of its key, in ms (one hour):
/// a resource costs one counter key per node for that long. Fences are hybrid clocks (the
/// largest of the counters and the nodes' `TIME` in ms, plus one), so a counter that expired
/// restarts above every fence issued before — as long as the nodes' wall clocks agree within
/// this much. A counter lost with the node's memory restarts from the node's clock once
/// restart-aware voting lets the node vote again (after the longest TTL in use), which needs
/// the nodes' wall clocks to agree within that TTL; the simulator's
/// `fence_clocks_too_far_apart` control shows what happens otherwise.
pub const FENCE_RETENTION_MS: u64 = 3_600_000;

/// A fenced acquire: [`ACQUIRE_CHECKED_SCRIPT`] (its eligibility check skipped when `ARGV[3]`
/// is 0) that on success also reads the keys' fence counters. `KEYS` = the `n` lock keys, the
/// epoch key, then the `n` fence keys; `ARGV` = token, TTL in ms, longest TTL in use in ms (or
/// 0). Answers 0 (taken), −m (not eligible for `m` ms more), or `v + 1` where `v` is the largest
/// of the fence counters and the node's `TIME` in ms (set).
pub const ACQUIRE_FENCED_SCRIPT: &str = "\
local n = (#KEYS - 1) / 2
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_ttl = tonumber(ARGV[3])
if max_ttl > 0 then
  local epoch = tonumber(redis.call('GET', KEYS[n + 1]))
  if not epoch then
    redis.call('SET', KEYS[n + 1], now)
    epoch = now
  end
  if epoch ~= 0 then
    local young = max_ttl - (now - epoch)
    if young > 0 then return -young end
  end
end
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
local v = now
for i = n + 2, #KEYS do
  local c = tonumber(redis.call('GET', KEYS[i]))
  if c and c > v then v = c end
end
return v + 1
";

/// Commits a fence: if every lock key still holds the token, raises each fence counter to at
/// least the fence (never lowers it) with the retention as its TTL. `KEYS` = the `n` lock keys,
/// then the `n` fence keys; `ARGV` = token, fence, retention in ms. Answers 1 (committed) or 0
/// (not held: nothing changed).
pub const COMMIT_FENCE_SCRIPT: &str = "\
local n = #KEYS / 2
for i = 1, n do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return 0 end
end
local fence = tonumber(ARGV[2])
for i = n + 1, #KEYS do
  local c = tonumber(redis.call('GET', KEYS[i]))
  if c and c > fence then
    redis.call('SET', KEYS[i], c, 'PX', ARGV[3])
  else
    redis.call('SET', KEYS[i], fence, 'PX', ARGV[3])
  end
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
    /// Raise the fence counters to the lock's fence, if every key still holds the token
    /// ([`COMMIT_FENCE_SCRIPT`]).
    CommitFence,
}

/// One command for one node: an operation on a lock's keys. Cheap to clone (the keys and token
/// are shared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    op: Op,
    spec: LockSpec,
    ttl_ms: u64,
    extras: Extras,
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
    /// [`ACQUIRE_FENCED_SCRIPT`]: a (checked) acquire that reads the fence counters.
    AcquireFenced,
    /// [`COMMIT_FENCE_SCRIPT`]: commit a fence.
    CommitFence,
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
            Script::AcquireFenced => ACQUIRE_FENCED_SCRIPT,
            Script::CommitFence => COMMIT_FENCE_SCRIPT,
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
        /// `KEYS`, in order.
        keys: ScriptKeys<'a>,
        /// `ARGV`, in order.
        args: ScriptArgs<'a>,
    },
}

/// A script's `KEYS`: the lock keys, then the epoch key and the fence keys when the script takes
/// them.
#[derive(Debug, Clone, Copy)]
pub struct ScriptKeys<'a> {
    spec: &'a LockSpec,
    epoch: bool,
    fence: bool,
}

impl ScriptKeys<'_> {
    /// How many keys.
    pub fn len(&self) -> usize {
        let n = self.spec.len();
        n + usize::from(self.epoch) + if self.fence { n } else { 0 }
    }

    /// Whether there are none (never: a lock has at least one key).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with each key, in order (fence keys are built in one reused buffer).
    pub fn for_each(&self, mut f: impl FnMut(&[u8])) {
        self.spec.keys().for_each(&mut f);
        if self.epoch {
            f(EPOCH_KEY);
        }
        if self.fence {
            let mut buf = Vec::new();
            for key in self.spec.keys() {
                buf.clear();
                buf.extend_from_slice(FENCE_KEY_PREFIX);
                buf.extend_from_slice(key);
                f(&buf);
            }
        }
    }
}

/// A script's `ARGV`: the token, then its numbers.
#[derive(Debug, Clone, Copy)]
pub struct ScriptArgs<'a> {
    /// `ARGV[1]`.
    pub token: &'a [u8],
    numbers: [Option<u64>; 3],
}

impl ScriptArgs<'_> {
    /// `ARGV[2]…`, in order.
    pub fn numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.numbers.iter().flatten().copied()
    }

    /// How many arguments, the token included.
    pub fn len(&self) -> usize {
        1 + self.numbers().count()
    }

    /// Whether there are none (never: the token is always there).
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// What a command adds to its operation: restart-aware voting and fencing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Extras {
    /// The longest TTL in use, for a restart-aware acquire.
    pub(crate) max_ttl_ms: Option<u64>,
    /// Whether an acquire reads the fence counters.
    pub(crate) fenced: bool,
    /// The fence to commit.
    pub(crate) fence: Option<u64>,
    /// Whether a release announces itself to waiters (a held lock's release does; the clean-up
    /// of a lost round does not, or waiters fighting over a minority of nodes would wake each
    /// other in a loop while the holder keeps the majority).
    pub(crate) notify: bool,
}

impl Command {
    pub(crate) fn new(op: Op, spec: LockSpec, ttl_ms: u64, extras: Extras) -> Self {
        Self {
            op,
            spec,
            ttl_ms,
            extras,
        }
    }

    /// Whether this acquire reads the fence counters (a fenced lock's first round).
    pub fn is_fenced(&self) -> bool {
        self.op == Op::SetIfAbsent && self.extras.fenced
    }

    /// The fence a [`Op::CommitFence`] commits.
    pub fn fence(&self) -> Option<u64> {
        self.extras.fence.filter(|_| self.op == Op::CommitFence)
    }

    /// What the command does.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The lock it acts on (keys and token).
    pub fn spec(&self) -> &LockSpec {
        &self.spec
    }

    /// Whether this release announces itself on the keys' release channels.
    pub fn notifies(&self) -> bool {
        self.op == Op::DeleteIfEquals && self.extras.notify
    }

    /// The TTL it sets, for `SetIfAbsent` and `ExpireIfEquals`.
    pub fn ttl_ms(&self) -> Option<u64> {
        match self.op {
            Op::SetIfAbsent | Op::ExpireIfEquals => Some(self.ttl_ms),
            Op::DeleteIfEquals | Op::Trust | Op::CommitFence => None,
        }
    }

    /// How Redis runs it: plain `SET NX PX` for a one-key acquire without restart-aware voting
    /// or fencing, a script otherwise.
    pub fn redis_form(&self) -> RedisForm<'_> {
        let token = self.spec.token().as_bytes();
        let max_ttl_ms = self.extras.max_ttl_ms;
        let (script, epoch, fence, numbers) = match self.op {
            Op::SetIfAbsent if self.extras.fenced => (
                Script::AcquireFenced,
                true,
                true,
                [Some(self.ttl_ms), Some(max_ttl_ms.unwrap_or(0)), None],
            ),
            Op::SetIfAbsent if max_ttl_ms.is_some() => (
                Script::AcquireChecked,
                true,
                false,
                [Some(self.ttl_ms), max_ttl_ms, None],
            ),
            Op::SetIfAbsent if self.spec.len() == 1 => {
                return RedisForm::Set {
                    key: self.spec.keys().next().unwrap_or_default(),
                    token,
                    ttl_ms: self.ttl_ms,
                };
            }
            Op::SetIfAbsent => (
                Script::Acquire,
                false,
                false,
                [Some(self.ttl_ms), None, None],
            ),
            Op::DeleteIfEquals => (
                Script::Release,
                false,
                false,
                [Some(u64::from(self.extras.notify)), None, None],
            ),
            Op::ExpireIfEquals => (
                Script::Extend,
                false,
                false,
                [Some(self.ttl_ms), None, None],
            ),
            Op::Trust => (Script::Trust, false, false, [None; 3]),
            Op::CommitFence => (
                Script::CommitFence,
                false,
                true,
                [self.extras.fence, Some(FENCE_RETENTION_MS), None],
            ),
        };
        RedisForm::Script {
            script,
            keys: ScriptKeys {
                spec: &self.spec,
                epoch,
                fence,
            },
            args: ScriptArgs { token, numbers },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_script_publishes_on_the_channel_drivers_listen_to() {
        let prefix = std::str::from_utf8(RELEASED_CHANNEL_PREFIX).expect("ascii");
        assert!(RELEASE_SCRIPT.contains(&format!("'PUBLISH', '{prefix}' .. KEYS[i]")));
        assert_eq!(released_channel(b"k"), b"redlock:released:k");
    }

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
        assert_eq!(Script::AcquireFenced.source(), ACQUIRE_FENCED_SCRIPT);
        assert_eq!(Script::CommitFence.source(), COMMIT_FENCE_SCRIPT);
    }
}
