//! The three commands of the algorithm, what they mean, and their Redis form.
//!
//! The Lua scripts live here, once. A lock on one resource acquires with plain
//! `SET key token NX PX ttl`; a lock on several resources acquires with [`ACQUIRE_SCRIPT`], which
//! sets all keys or none on each node. Release and extend always run a script (compare-and-delete
//! and compare-and-pexpire cannot be done atomically otherwise).

use crate::dialect::{DeleteIfEq, Dialect};
use crate::keyspace::Keyspace;
use crate::part_read::PartRead;
use crate::reply::{NodeErrorKind, Reply};
use crate::slot::Slot;
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
/// announce each deleted key on its release channel ([`released_channel`]), `3` to announce it
/// there only where more than one connection listens (the releasing client's own subscriber is
/// one of them: [`Command::heard_by_own_subscriber`]), `2` to announce it on its sharded
/// channel in the keys' slot, whose tag is `ARGV[3]` (a cluster node:
/// [`Keyspace::released_channel`]), `0` not to. Answers 1 (deleted ours; none held by
/// another), 0 (no key present), or -1 (a key is held by another token: that key is left
/// alone, ours are still deleted).
///
/// The announcement is a `PUBLISH` (`SPUBLISH` on a cluster) inside the script, so it costs no
/// round trip, and almost nothing when nobody listens; it is made with `pcall`, so a server
/// that refuses it (an ACL without `PUBLISH`) still releases. The count of `3` is a `pcall`
/// too: a server that refuses `PUBSUB NUMSUB` gets the announcement, as with `1`.
pub const RELEASE_SCRIPT: &str = "\
local released, foreign = 0, 0
for i = 1, #KEYS do
  local value = redis.call('GET', KEYS[i])
  if value == ARGV[1] then
    redis.call('DEL', KEYS[i])
    released = released + 1
    local channel = 'redlock:released:' .. KEYS[i]
    local others = ARGV[2] == '1'
    if ARGV[2] == '3' then
      local count = redis.pcall('PUBSUB', 'NUMSUB', channel)
      others = type(count) ~= 'table' or not count[2] or count[2] > 1
    end
    if others then
      redis.pcall('PUBLISH', channel, '1')
    elseif ARGV[2] == '2' then
      redis.pcall('SPUBLISH', 'redlock:released:{' .. ARGV[3] .. '}' .. KEYS[i], '1')
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
    let mut channel = Vec::new();
    write_released_channel(key, &mut channel);
    channel
}

/// [`released_channel`] of `key`, written over `out` (a buffer kept to look channels up
/// without allocating).
pub(crate) fn write_released_channel(key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(RELEASED_CHANNEL_PREFIX);
    out.extend_from_slice(key);
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
/// acquire script first found the key missing, or found the node's identity changed
/// ([`EPOCH_ID_KEY`]), i.e. when the node's memory began; `0` once an operator trusted the node
/// ([`TRUST_SCRIPT`]). One per node (per database), whatever the key prefix: with Redis ACLs,
/// allow it and [`EPOCH_ID_KEY`] besides the lock keys. No lock may use this key.
pub const EPOCH_KEY: &[u8] = b"redlock:epoch";

/// The node's memory identity when its epoch was stamped:
/// `run_id:master_replid:database:evicted_keys` from the node's `INFO server replication stats`
/// and the database the client selected ([`node_identity`](crate::node_identity)). A restart
/// (from a snapshot or not) gives the node a new `run_id`; a promotion, or any change of its
/// replication history, a new `master_replid`; a `SWAPDB` brings in a database stamped under
/// another number; an eviction moves the count. Each means the node may have lost writes it
/// acknowledged, although the epoch it kept looks old: the checked scripts then stamp a new
/// epoch and the node sits out the longest TTL. A second key, not a part of the epoch's value,
/// so that the previous releases' scripts (which read the epoch with `tonumber`) still read it.
/// An epoch with it empty (trusted on a node that runs no script), or without it on a node that
/// never evicted a key (stamped by a previous release, or by an operator's `SET`), adopts the
/// node's identity without a sit-out; without it on a node that evicted keys, the key itself
/// may have been evicted, and the node sits out. No lock may use this key.
pub const EPOCH_ID_KEY: &[u8] = b"redlock:epoch:id";

/// The prefix of a proof's marker: a proving acquisition's checked script, once it finds the
/// node may vote, sets `redlock:epoch:m:<nonce>` (a random number of the proof's own) for the
/// longest TTL in use, in the database it read. A proven connection's vouched acquisitions on a
/// node that can swap databases then read `EXISTS` of it in their `MULTI` (the seal,
/// [`SealRead::Marker`](crate::SealRead::Marker)): no other database holds that name, so a
/// database swapped in since the proof — another deployment's, one trusted at the same index,
/// one restamped by anyone — answers 0. Locks may not use keys under it. With Redis ACLs,
/// allow `redlock:epoch:m:*`; where the node refuses it, the seal reads the epoch and its
/// stamp instead.
pub const EPOCH_MARKER_PREFIX: &[u8] = b"redlock:epoch:m:";

/// The Lua that reads the node's memory identity (see [`EPOCH_ID_KEY`]): `identity(db)` answers
/// `run_id:master_replid:db:evicted_keys`, or nil where `INFO` is denied or says none of them
/// (the node then votes under the epoch alone, and stamps no identity: two clients of which
/// only one may read `INFO` never overwrite each other's).
macro_rules! identity_lua {
    () => {
        "\
local function identity(db)
  local info = redis.pcall('INFO', 'server', 'replication', 'stats')
  if type(info) ~= 'string' then return nil end
  local run = string.find(info, '\\nrun_id:', 1, true)
  local repl = string.find(info, '\\nmaster_replid:', 1, true)
  local ev = string.find(info, '\\nevicted_keys:', 1, true)
  if not run or not repl or not ev then return nil end
  local evicted = string.match(info, '^%d+', ev + 14)
  if not evicted then return nil end
  return string.sub(info, run + 8, run + 47) .. ':' .. string.sub(info, repl + 15, repl + 54)
    .. ':' .. db .. ':' .. evicted
end
"
    };
}

/// The Lua function `counter(key)`: a fence counter's value, from its sorted set
/// ([`FENCE_MEMBER`]'s score) or, as an earlier release stored it, a string; `nil` if none.
macro_rules! fence_counter_lua {
    () => {
        "\
local function counter(key)
  if redis.call('TYPE', key).ok == 'string' then return tonumber(redis.call('GET', key)) end
  return tonumber(redis.call('ZSCORE', key, 'fence'))
end
"
    };
}

/// The Lua of the restart check: `young(e, max_ttl, now, db)` reads the epoch (`KEYS[e]`) and the
/// identity it was stamped with (`KEYS[e + 1]`), stamps a new epoch at the node's `TIME` when
/// the epoch is missing or the identity changed (the stamp: the identity, a space, and why,
/// [`SitOutCause::word`](crate::SitOutCause::word)), adopts the identity for an epoch without
/// one (empty, or missing on a node that never evicted: see [`EPOCH_ID_KEY`]), and answers how
/// many ms the node must still wait and why (nil: it may vote; the why is empty when not
/// recorded). `now` is the node's time in ms if the caller read it already (read here only
/// when the epoch is not `0`); `db` the database the client selected. `why(was, id)` names the
/// first of `run_id`, `master_replid` and database that differs, else the eviction count.
/// `mark(max_ttl)`, called once the node may vote, writes the proof's marker
/// ([`EPOCH_MARKER_PREFIX`] and `ARGV[5]`, when given) for `max_ttl` ms, in the database the
/// check just read: where the node refuses the write (an ACL, `maxmemory`), nothing happens.
macro_rules! restart_check_lua {
    () => {
        concat!(
            identity_lua!(),
            "\
local function why(was, id)
  if not was then return 'eviction' end
  local a1, a2, a3 = string.match(was, '^([^:]*):([^:]*):([^:]*)')
  local b1, b2, b3 = string.match(id, '^([^:]*):([^:]*):([^:]*)')
  if a1 ~= b1 then return 'restart' end
  if a2 ~= b2 then return 'replication' end
  if a3 ~= b3 then return 'database' end
  return 'eviction'
end
local function young(e, max_ttl, now, db)
  local id = identity(db)
  local epoch = tonumber(redis.call('GET', KEYS[e]))
  local cause = ''
  if not epoch then
    cause = 'no-epoch'
  elseif id then
    local stamped = redis.call('GET', KEYS[e + 1])
    if stamped ~= id then
      local was = stamped and string.match(stamped, '^[^ ]*')
      if was == '' or (not stamped and string.sub(id, -2) == ':0') then
        redis.call('SET', KEYS[e + 1], id)
      elseif was ~= id then
        cause = why(was, id)
        epoch = nil
      else
        cause = string.match(stamped, ' (.*)$')
      end
    end
  end
  if epoch == 0 then return nil end
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  if not epoch then
    redis.call('SET', KEYS[e], now)
    if id then redis.call('SET', KEYS[e + 1], id .. ' ' .. cause) else redis.call('DEL', KEYS[e + 1]) end
    epoch = now
  end
  local left = max_ttl - (now - epoch)
  if left > 0 then return left, cause end
  return nil
end
local function mark(max_ttl)
  if ARGV[5] then
    redis.pcall('SET', 'redlock:epoch:m:' .. ARGV[5], 1, 'PX', max_ttl)
  end
end
"
        )
    };
}

/// [`ACQUIRE_SCRIPT`] with restart-aware voting: before anything else, reads the node's epoch
/// ([`EPOCH_KEY`], stamped with the node's `TIME` when missing or when the node's identity
/// changed, [`EPOCH_ID_KEY`]) and refuses to vote while the node's memory is younger than the
/// longest TTL in use. `KEYS` = the lock keys, then the epoch key and its identity key;
/// `ARGV[1]` = token, `ARGV[2]` = TTL in ms, `ARGV[3]` = the longest TTL in use, in ms,
/// `ARGV[4]` = the database the client selected, and for a proving acquisition `ARGV[5]` = its
/// marker's nonce ([`EPOCH_MARKER_PREFIX`]).
/// Answers 1 (set), 0 (taken), or `{−m, why}`: not eligible for `m` ms more (nothing set), for
/// the cause [`SitOutCause::word`](crate::SitOutCause::word) names (empty: not recorded). An
/// epoch of 0 means trusted (and spares the node its `TIME` call, not its `INFO`); one key is
/// set with a single `SET NX PX`, as without the check.
pub const ACQUIRE_CHECKED_SCRIPT: &str = concat!(
    restart_check_lua!(),
    "\
local n = #KEYS - 2
local left, cause = young(n + 1, tonumber(ARGV[3]), nil, ARGV[4])
if left then return {-left, cause} end
mark(ARGV[3])
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
"
);

/// The prefix of a lock key's fence counter: the counter of key `K` is `redlock:fence:K`. Locks
/// may not use keys under it.
pub const FENCE_KEY_PREFIX: &[u8] = b"redlock:fence:";

/// The one member of a fence counter: the counter of key `K` is the sorted set
/// `redlock:fence:K` whose member `fence` scores the largest fence committed there. A sorted set
/// because `ZADD … GT` raises it without a script (scores are doubles: fences are exact below
/// 2^53, which a millisecond clock reaches in the year 287 396). A counter an earlier release
/// stored as a string is read as one and turned into the set by the next commit. The script
/// raises it by comparing first (no `GT`, which Redis < 6.2 lacks); the no-script form uses
/// `GT`, on servers that have it.
pub const FENCE_MEMBER: &[u8] = b"fence";

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
/// epoch key and its identity key, then the `n` fence keys; `ARGV` = token, TTL in ms, longest
/// TTL in use in ms (or 0), the database the client selected, and when proving the marker's
/// nonce (as [`ACQUIRE_CHECKED_SCRIPT`]). Answers 0 (taken), `{−m, why}`
/// (not eligible for `m` ms more, as [`ACQUIRE_CHECKED_SCRIPT`]), or `v + 1` where `v` is the largest of the fence counters and
/// the node's `TIME` in ms (set).
pub const ACQUIRE_FENCED_SCRIPT: &str = concat!(
    restart_check_lua!(),
    fence_counter_lua!(),
    "\
local n = (#KEYS - 2) / 2
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_ttl = tonumber(ARGV[3])
if max_ttl > 0 then
  local left, cause = young(n + 1, max_ttl, now, ARGV[4])
  if left then return {-left, cause} end
  mark(ARGV[3])
end
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
local v = now
for i = n + 3, #KEYS do
  local c = counter(KEYS[i])
  if c and c > v then v = c end
end
return v + 1
"
);

/// Commits a fence: if every lock key still holds the token, raises each fence counter to at
/// least the fence (never lowers it) with the retention as its TTL. `KEYS` = the `n` lock keys,
/// then the `n` fence keys; `ARGV` = token, fence, retention in ms. Answers 1 (committed) or 0
/// (not held: nothing changed).
pub const COMMIT_FENCE_SCRIPT: &str = concat!(
    fence_counter_lua!(),
    "\
local n = #KEYS / 2
for i = 1, n do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return 0 end
end
local fence = tonumber(ARGV[2])
for i = n + 1, #KEYS do
  local c = counter(KEYS[i])
  local v = ARGV[2]
  if c and c > fence then v = c end
  if redis.call('TYPE', KEYS[i]).ok == 'string' then redis.call('DEL', KEYS[i]) end
  redis.call('ZADD', KEYS[i], v, 'fence')
  redis.call('PEXPIRE', KEYS[i], ARGV[3])
end
return 1
"
);

/// Marks the node trusted: its memory is old enough for any TTL (an operator who knows that no
/// lock is live says so, for a fresh deployment), and stamps the node's identity. `KEYS` =
/// [`EPOCH_KEY`], [`EPOCH_ID_KEY`]; `ARGV[2]` = the database the client selected. Answers 1.
pub const TRUST_SCRIPT: &str = concat!(
    identity_lua!(),
    "\
redis.call('SET', KEYS[1], 0)
local id = identity(ARGV[2])
if id then redis.call('SET', KEYS[2], id) else redis.call('DEL', KEYS[2]) end
return 1
"
);

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
    /// Whether a run of this script that comes late, behind commands written after it on the
    /// same connection, leaves the node as a run in order would. A compare-and-delete,
    /// compare-and-pexpire or compare-and-raise (a fence's commit) by the lock's own token does:
    /// once the lock moved on it touches nothing, and a fence counter only ever rises. An
    /// acquisition does not: run behind its own lock's release, it would set a key no release
    /// comes for. Nor does a trust: the operator vouches that no lock is live *when they ask*,
    /// and run late, behind a lock the client took meanwhile on the same connection and a loss
    /// of the node's memory that a stamp recorded, its epoch write would make the node vote at
    /// once on a memory that lost that lock's key (a trust not run again answers `NOSCRIPT`,
    /// and the operator asks again). (An adapter runs a script that met `NOSCRIPT` again only
    /// if this holds: an async connection is shared, and other batches went out meanwhile.)
    pub fn runs_late_safely(self) -> bool {
        match self {
            Script::Release | Script::Extend | Script::CommitFence => true,
            Script::Acquire | Script::AcquireChecked | Script::Trust | Script::AcquireFenced => {
                false
            }
        }
    }

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
    /// `MSETEX n key token … NX PX ttl_ms`: every key or none, in one command. Answers 1 or 0.
    MSetEx {
        /// The keys, with the token.
        spec: &'a LockSpec,
        /// The TTL in milliseconds.
        ttl_ms: u64,
    },
    /// One compare-and-delete per key, in one pipeline: `DELIFEQ key token` or
    /// `DELEX key IFEQ token`, each answering 1 (deleted) or 0 (absent, or another value). A 0
    /// is told apart by a `GET key` after it ([`RedisForm::missed_delete`]), for the report
    /// only: the decision was the delete's. When the release announces itself, a
    /// `PUBLISH <release channel> 1` per key follows the deletes in the same pipeline (sent
    /// whether or not the delete found the key: a notice is only a hint; its answer, even an
    /// error such as an ACL without `PUBLISH`, never changes the release's); on a cluster,
    /// `SPUBLISH` on the key's sharded channel ([`Keyspace::released_channel`]). Where the
    /// client's own subscriber hears the release (`counts_first`), a `PUBSUB NUMSUB` per key
    /// takes the `PUBLISH`'s place, and the `PUBLISH`es follow only where another connection
    /// listens ([`RedisForm::announcement`]).
    DeleteEach {
        /// The keys, with the token.
        spec: &'a LockSpec,
        /// Which command.
        how: DeleteIfEq,
        /// Whether each key's release channel hears of it ([`released_channel`]).
        notify: bool,
        /// Whether the announce parts count each channel's listeners instead (`PUBSUB NUMSUB
        /// <release channel>`, read as [`PartRead::Listeners`]): a release its client's own
        /// subscriber hears ([`Command::heard_by_own_subscriber`]) on a standalone node. The
        /// `PUBLISH`es then follow, in a pipeline of their own, only where a key was deleted
        /// and another connection listens ([`RedisForm::announcement`]).
        counts_first: bool,
        /// Where the release channels are: `PUBLISH` on a standalone node, `SPUBLISH` on a
        /// cluster.
        keyspace: Keyspace,
    },
    /// `SET key token IFEQ token PX ttl_ms` per key, in one pipeline: sets the TTL exactly, so
    /// only for an extension the engine marked safe ([`Command::sets_exact_ttl`]). Each answers
    /// `OK` (ours: extended) or nil (not ours: untouched).
    SetIfEqEach {
        /// The keys, with the token.
        spec: &'a LockSpec,
        /// The TTL in milliseconds.
        ttl_ms: u64,
    },
    /// `MULTI; PEXPIRE key ttl_ms GT …; GET key …; EXEC`, one `PEXPIRE` and one `GET` per key:
    /// an extension on a node that runs no script, where the exact TTL may not be set (a lock
    /// resumed by token, or an extension to a shorter TTL). `GT` never shortens a key's TTL,
    /// and `PEXPIRE` never creates a key; the `GET`s, in the same transaction, say whether the
    /// token still holds every key ([`PartRead::Held`]). Unlike
    /// [`EXTEND_SCRIPT`] it raises each key's TTL before it knows: where another token holds a
    /// key, that key lives at most `ttl_ms` from now, and a lock never sends this to a node
    /// again once the node answered "not held" (see [`Lifecycle`](crate::Lifecycle)).
    /// [Transaction](Self::is_transaction): its parts go between `MULTI` and `EXEC`, and are
    /// answered by the `EXEC`'s items.
    ExpireGtEach {
        /// The keys, with the token.
        spec: &'a LockSpec,
        /// The TTL in milliseconds.
        ttl_ms: u64,
    },
    /// A fenced acquisition on a node that runs no script, as a transaction: `MULTI`, the
    /// acquisition itself (`SET k t NX PX ttl`, or `MSETEX n k t … NX PX ttl` for several keys),
    /// `ZSCORE` of each key's fence counter ([`FENCE_MEMBER`]), `TIME`, `EXEC`. Answers what
    /// [`ACQUIRE_FENCED_SCRIPT`] answers without its restart check: 0 (taken) or `v + 1`, `v` the
    /// largest of the counters and the node's `TIME` in ms. Only where the connection vouches
    /// for the node's memory, or no restart check is asked.
    FencedSet {
        /// The keys, with the token.
        spec: &'a LockSpec,
        /// The TTL in milliseconds.
        ttl_ms: u64,
        /// Where the fence counters live: on a cluster, in the lock keys' slot.
        keyspace: Keyspace,
    },
    /// A fence commit on a node that runs no script, as a transaction: `ZADD f GT fence fence`
    /// and `PEXPIRE f retention` per fence counter, then `GET` of each lock key. The counters are
    /// raised whoever holds the keys (raising a counter never lets an older fence pass); the
    /// commit counts only where every `GET` read the token, as [`COMMIT_FENCE_SCRIPT`] answers.
    CommitFenceEach {
        /// The keys, with the token.
        spec: &'a LockSpec,
        /// The fence.
        fence: u64,
        /// Where the fence counters live: on a cluster, in the lock keys' slot.
        keyspace: Keyspace,
    },
    /// `MSET epoch 0 identity ""`: marks the node trusted ([`EPOCH_KEY`]), as [`TRUST_SCRIPT`]
    /// does, on a node that runs no script, and empties the identity the epoch was stamped with
    /// ([`EPOCH_ID_KEY`]: a script reads an empty one as none, and adopts the node's). Answers
    /// `OK`.
    SetTrusted,
    /// The node can run neither the script nor a native form that keeps this command's meaning
    /// (a restart-aware or fenced acquire, a fence commit, or a release or multi-key acquire
    /// where nothing native does it, on a node that runs no script): nothing is sent, and the
    /// node's answer is [`NodeErrorKind::NoSafeForm`].
    Unsupported,
    /// A command a cluster node (`HELLO`'s `mode`) cannot run as one request: a trust (one epoch
    /// per slot, which the driver stamps slot by slot, master by master) or a fenced form of a
    /// node that runs no script. Nothing is sent, and the node's answer is
    /// [`NodeErrorKind::Cluster`].
    OnCluster,
    /// The command's keys lie in different slots of a cluster node, which no script or
    /// transaction may span: nothing is sent, and the node's answer is
    /// [`NodeErrorKind::CrossSlot`] — never a lock of some of the keys.
    CrossSlot,
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

impl RedisForm<'_> {
    /// How many Redis commands the form is on the wire (one per key for the per-key forms,
    /// none when unsupported), each answered in order.
    pub fn parts(&self) -> usize {
        match self {
            Self::DeleteEach { spec, notify, .. } => spec.len() * (1 + usize::from(*notify)),
            Self::SetIfEqEach { spec, .. } => spec.len(),
            Self::ExpireGtEach { spec, .. } => 2 * spec.len(),
            Self::FencedSet { spec, .. } => spec.len() + 2,
            Self::CommitFenceEach { spec, .. } => 3 * spec.len(),
            Self::Unsupported | Self::OnCluster | Self::CrossSlot => 0,
            Self::Set { .. } | Self::MSetEx { .. } | Self::SetTrusted | Self::Script { .. } => 1,
        }
    }

    /// Whether the form's parts are one transaction: sent between `MULTI` and `EXEC` (each
    /// part answered `QUEUED`), their answers the `EXEC`'s items in order. A part refused
    /// while queued, or an `EXEC` that answers no array (`EXECABORT`), fails every part with
    /// what the node said.
    pub fn is_transaction(&self) -> bool {
        matches!(
            self,
            Self::ExpireGtEach { .. } | Self::FencedSet { .. } | Self::CommitFenceEach { .. }
        )
    }

    /// What part `part` reads, when its answer is a value rather than a [`Reply`]: the
    /// transport hands that part in as [`PartRead::reply`] of the value it read.
    pub fn reads(&self, part: usize) -> Option<PartRead> {
        match *self {
            Self::ExpireGtEach { spec, .. } => (spec.len()..2 * spec.len())
                .contains(&part)
                .then_some(PartRead::Held),
            Self::FencedSet { spec, .. } => match part {
                0 => None,
                part if part <= spec.len() => Some(PartRead::Score),
                part if part == spec.len() + 1 => Some(PartRead::Time),
                _ => None,
            },
            Self::CommitFenceEach { spec, .. } => (2 * spec.len()..3 * spec.len())
                .contains(&part)
                .then_some(PartRead::Held),
            Self::DeleteEach {
                spec,
                counts_first: true,
                ..
            } => (part >= spec.len()).then_some(PartRead::Listeners),
            _ => None,
        }
    }

    /// How many of the form's first parts decide its answer: all of them, but for a
    /// [`DeleteEach`](Self::DeleteEach) that announces itself, whose `PUBLISH`es come after
    /// the deletes and decide nothing.
    pub fn decisive_parts(&self) -> usize {
        match self {
            Self::DeleteEach { spec, .. } => spec.len(),
            _ => self.parts(),
        }
    }

    /// The engine's reply for the form's answers, one per part in order (a [`DeleteEach`]
    /// zero already told apart by [`missed_delete`](Self::missed_delete)): what the script
    /// of the same meaning would have answered. Only the [decisive](Self::decisive_parts)
    /// parts count, and the answers may stop after them. A failed decisive part fails the
    /// whole; a missing one is a protocol error.
    ///
    /// [`DeleteEach`]: Self::DeleteEach
    pub fn answer(&self, parts: &[Reply]) -> Reply {
        let decisive = self.decisive_parts();
        let parts = parts.get(..decisive).unwrap_or(parts);
        if let Some(failed) = parts.iter().find(|r| matches!(r, Reply::Error(_))) {
            return *failed;
        }
        if parts.len() != decisive {
            return match self {
                Self::Unsupported => Reply::Error(NodeErrorKind::NoSafeForm),
                Self::OnCluster => Reply::Error(NodeErrorKind::Cluster),
                Self::CrossSlot => Reply::Error(NodeErrorKind::CrossSlot),
                _ => Reply::Error(NodeErrorKind::Protocol),
            };
        }
        match self {
            Self::Set { .. } | Self::MSetEx { .. } | Self::Script { .. } => parts[0],
            Self::SetTrusted => match parts[0] {
                Reply::Ok => Reply::Int(1),
                _ => Reply::Other,
            },
            Self::FencedSet { spec, .. } => {
                let (set, rest) = parts.split_at(1);
                let (scores, time) = rest.split_at(spec.len());
                let largest = scores.iter().try_fold(0_i64, |v, score| match score {
                    Reply::Int(c) => Some(v.max(*c)),
                    Reply::Nil => Some(v),
                    _ => None,
                });
                match (set[0], largest, time[0]) {
                    (Reply::Nil | Reply::Int(0), Some(_), _) => Reply::Int(0),
                    (Reply::Ok | Reply::Int(1), Some(v), Reply::Int(now)) => {
                        Reply::Int(v.max(now).saturating_add(1))
                    }
                    _ => Reply::Other,
                }
            }
            Self::CommitFenceEach { spec, .. } => {
                let (writes, reads) = parts.split_at(2 * spec.len());
                if !writes.iter().all(|r| matches!(r, Reply::Int(0 | 1)))
                    || !reads.iter().all(|r| matches!(r, Reply::Int(0 | 1)))
                {
                    Reply::Other
                } else {
                    Reply::Int(i64::from(reads.iter().all(|r| *r == Reply::Int(1))))
                }
            }
            Self::ExpireGtEach { spec, .. } => {
                let (expires, reads) = parts.split_at(spec.len());
                if !expires.iter().all(|r| matches!(r, Reply::Int(0 | 1)))
                    || !reads.iter().all(|r| matches!(r, Reply::Int(0 | 1)))
                {
                    Reply::Other
                } else {
                    Reply::Int(i64::from(reads.iter().all(|r| *r == Reply::Int(1))))
                }
            }
            Self::SetIfEqEach { .. } => {
                if parts.iter().all(|r| *r == Reply::Ok) {
                    Reply::Int(1)
                } else if parts.iter().all(|r| matches!(r, Reply::Ok | Reply::Nil)) {
                    Reply::Int(0)
                } else {
                    Reply::Other
                }
            }
            Self::DeleteEach { .. } => {
                if !parts.iter().all(|r| matches!(r, Reply::Int(-1..=1))) {
                    Reply::Other
                } else if parts.contains(&Reply::Int(-1)) {
                    Reply::Int(-1)
                } else {
                    Reply::Int(i64::from(parts.contains(&Reply::Int(1))))
                }
            }
            Self::Unsupported => Reply::Error(NodeErrorKind::NoSafeForm),
            Self::OnCluster => Reply::Error(NodeErrorKind::Cluster),
            Self::CrossSlot => Reply::Error(NodeErrorKind::CrossSlot),
        }
    }

    /// What follows a [`DeleteEach`](Self::DeleteEach) that counted its listeners first, once
    /// its `parts` answered: the same release announcing itself, whose parts from
    /// [`decisive_parts`](Self::decisive_parts) on are the `PUBLISH`es to send in a pipeline of
    /// their own. `Some` only where a key was deleted (its part answered 1) and its channel's
    /// count is not 0 or 1 (another connection listens beside the client's own subscriber, or
    /// the count was refused: a node that will not count announces, as the release script
    /// does). `None` for any other form.
    ///
    /// A waiter that starts listening after the count is not woken by this release: its own
    /// timer retries within one pause, as for any notice lost on the way.
    pub fn announcement(&self, parts: &[Reply]) -> Option<Self> {
        let Self::DeleteEach {
            spec,
            how,
            notify: true,
            counts_first: true,
            keyspace,
        } = *self
        else {
            return None;
        };
        let (deletes, counts) = parts.split_at(spec.len().min(parts.len()));
        let heard_elsewhere = |(deleted, count): (&Reply, &Reply)| {
            *deleted == Reply::Int(1) && !matches!(count, Reply::Int(0 | 1))
        };
        deletes
            .iter()
            .zip(counts)
            .any(heard_elsewhere)
            .then_some(Self::DeleteEach {
                spec,
                how,
                notify: true,
                counts_first: false,
                keyspace,
            })
    }

    /// A [`DeleteEach`](Self::DeleteEach) part that answered 0, told apart by what `GET key`
    /// then read: `Int(-1)` when another token holds the key, `Int(0)` when it is absent.
    pub fn missed_delete(value: Option<&[u8]>, token: &[u8]) -> Reply {
        match value {
            Some(held) if held != token => Reply::Int(-1),
            _ => Reply::Int(0),
        }
    }
}

/// One argument of a native command: bytes, a number written in decimal, or a key's release
/// channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg<'a> {
    /// Bytes as they are (a command name, a key, a token, an option).
    Bytes(&'a [u8]),
    /// A number, in decimal.
    Number(u64),
    /// The release channel of this key in this keyspace ([`Keyspace::released_channel`]):
    /// [`RELEASED_CHANNEL_PREFIX`] then the key, on a cluster with the key's slot tag between
    /// them.
    Channel(Keyspace, &'a [u8]),
    /// The fence counter of this key in this keyspace ([`Keyspace::fence_key`]):
    /// [`FENCE_KEY_PREFIX`] then the key, on a cluster with the key's slot tag between them.
    Fence(Keyspace, &'a [u8]),
}

impl<'a> RedisForm<'a> {
    /// This form as a proving acquisition sends it: a restart-checked script
    /// ([`ACQUIRE_CHECKED_SCRIPT`], [`ACQUIRE_FENCED_SCRIPT`]) writes the marker of `nonce`
    /// ([`EPOCH_MARKER_PREFIX`]) once the node may vote. Any other form as it is.
    pub(crate) fn marked(self, nonce: u64) -> Self {
        match self {
            Self::Script {
                script: script @ (Script::AcquireChecked | Script::AcquireFenced),
                keys,
                mut args,
            } if args.numbers[..3].iter().all(Option::is_some) => {
                args.numbers[3] = Some(nonce);
                Self::Script { script, keys, args }
            }
            form => form,
        }
    }

    /// Calls `f` with each argument of part `part` (`0..parts()`) of a native form, the
    /// command name first; a script form or an unsupported one has none (a script is sent by
    /// `EVAL`/`EVALSHA` from [`Script`], which each transport spells its own way).
    pub fn for_each_arg(&self, part: usize, mut f: impl FnMut(Arg<'a>)) {
        use Arg::{Bytes, Channel, Fence, Number};
        match *self {
            Self::Set { key, token, ttl_ms } => {
                [
                    Bytes(b"SET"),
                    Bytes(key),
                    Bytes(token),
                    Bytes(b"NX"),
                    Bytes(b"PX"),
                ]
                .into_iter()
                .for_each(&mut f);
                f(Number(ttl_ms));
            }
            Self::MSetEx { spec, ttl_ms } => {
                f(Bytes(b"MSETEX"));
                f(Number(spec.len() as u64));
                for key in spec.keys() {
                    f(Bytes(key));
                    f(Bytes(spec.token().as_bytes()));
                }
                [Bytes(b"NX"), Bytes(b"PX"), Number(ttl_ms)]
                    .into_iter()
                    .for_each(f);
            }
            Self::DeleteEach {
                spec,
                how,
                keyspace,
                counts_first,
                ..
            } => {
                let Some(key) = spec.keys().nth(part) else {
                    if let Some(key) = spec.keys().nth(part - spec.len()) {
                        if counts_first {
                            f(Bytes(b"PUBSUB"));
                            f(Bytes(b"NUMSUB"));
                            f(Channel(keyspace, key));
                            return;
                        }
                        f(Bytes(match keyspace {
                            Keyspace::Standalone => b"PUBLISH",
                            Keyspace::Cluster => b"SPUBLISH",
                        }));
                        f(Channel(keyspace, key));
                        f(Bytes(b"1"));
                    }
                    return;
                };
                let token = spec.token().as_bytes();
                match how {
                    DeleteIfEq::DelEx => {
                        [Bytes(b"DELEX"), Bytes(key), Bytes(b"IFEQ"), Bytes(token)]
                            .into_iter()
                            .for_each(f)
                    }
                    DeleteIfEq::DelIfEq | DeleteIfEq::None => {
                        [Bytes(b"DELIFEQ"), Bytes(key), Bytes(token)]
                            .into_iter()
                            .for_each(f)
                    }
                }
            }
            Self::SetIfEqEach { spec, ttl_ms } => {
                let Some(key) = spec.keys().nth(part) else {
                    return;
                };
                let token = spec.token().as_bytes();
                [
                    Bytes(b"SET"),
                    Bytes(key),
                    Bytes(token),
                    Bytes(b"IFEQ"),
                    Bytes(token),
                    Bytes(b"PX"),
                    Number(ttl_ms),
                ]
                .into_iter()
                .for_each(f);
            }
            Self::FencedSet {
                spec,
                ttl_ms,
                keyspace,
            } => match part {
                0 if spec.len() == 1 => {
                    let key = spec.keys().next().unwrap_or_default();
                    Self::Set {
                        key,
                        token: spec.token().as_bytes(),
                        ttl_ms,
                    }
                    .for_each_arg(0, f);
                }
                0 => Self::MSetEx { spec, ttl_ms }.for_each_arg(0, f),
                part if part <= spec.len() => {
                    if let Some(key) = spec.keys().nth(part - 1) {
                        [Bytes(b"ZSCORE"), Fence(keyspace, key), Bytes(FENCE_MEMBER)]
                            .into_iter()
                            .for_each(f);
                    }
                }
                _ => f(Bytes(b"TIME")),
            },
            Self::CommitFenceEach {
                spec,
                fence,
                keyspace,
            } => {
                let n = spec.len();
                if part < 2 * n {
                    let Some(key) = spec.keys().nth(part / 2) else {
                        return;
                    };
                    if part.is_multiple_of(2) {
                        [
                            Bytes(b"ZADD"),
                            Fence(keyspace, key),
                            Bytes(b"GT"),
                            Number(fence),
                            Bytes(FENCE_MEMBER),
                        ]
                        .into_iter()
                        .for_each(f);
                    } else {
                        [
                            Bytes(b"PEXPIRE"),
                            Fence(keyspace, key),
                            Number(FENCE_RETENTION_MS),
                        ]
                        .into_iter()
                        .for_each(f);
                    }
                } else if let Some(key) = spec.keys().nth(part - 2 * n) {
                    [Bytes(b"GET"), Bytes(key)].into_iter().for_each(f);
                }
            }
            Self::ExpireGtEach { spec, ttl_ms } => {
                if let Some(key) = spec.keys().nth(part) {
                    [Bytes(b"PEXPIRE"), Bytes(key), Number(ttl_ms), Bytes(b"GT")]
                        .into_iter()
                        .for_each(f);
                } else if let Some(key) = spec.keys().nth(part - spec.len()) {
                    [Bytes(b"GET"), Bytes(key)].into_iter().for_each(f);
                }
            }
            Self::SetTrusted => [
                Bytes(b"MSET"),
                Bytes(EPOCH_KEY),
                Bytes(b"0"),
                Bytes(EPOCH_ID_KEY),
                Bytes(b""),
            ]
            .into_iter()
            .for_each(f),
            Self::Script { .. } | Self::Unsupported | Self::OnCluster | Self::CrossSlot => {}
        }
    }
}

/// A script's `KEYS`: the lock keys, then the epoch key, its identity key and the fence keys when
/// the script takes them.
#[derive(Debug, Clone, Copy)]
pub struct ScriptKeys<'a> {
    spec: &'a LockSpec,
    /// Where the epoch and the fence counters live: on a cluster, in the lock keys' slot.
    keyspace: Keyspace,
    /// Whether the epoch key and its identity key follow the lock keys.
    epoch: bool,
    /// Whether the identity key alone follows them (the trust, whose one key is the epoch).
    identity: bool,
    fence: bool,
}

impl ScriptKeys<'_> {
    /// How many keys.
    pub fn len(&self) -> usize {
        let n = self.spec.len();
        n + 2 * usize::from(self.epoch)
            + usize::from(self.identity)
            + if self.fence { n } else { 0 }
    }

    /// Whether there are none (never: a lock has at least one key).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with each key, in order (fence keys are built in one reused buffer).
    pub fn for_each(&self, mut f: impl FnMut(&[u8])) {
        self.spec.keys().for_each(&mut f);
        let first = self.spec.keys().next().unwrap_or_default();
        if self.epoch {
            f(&self.keyspace.epoch_key(first));
        }
        if self.epoch || self.identity {
            f(&self.keyspace.epoch_id_key(first));
        }
        if self.fence {
            for key in self.spec.keys() {
                f(&self.keyspace.fence_key(key));
            }
        }
    }
}

/// A script's `ARGV`: the token, then its numbers (for a proving acquisition the last is its
/// proof's [marker](EPOCH_MARKER_PREFIX) nonce), then (a release announced on a cluster) the
/// keys' slot tag.
#[derive(Debug, Clone, Copy)]
pub struct ScriptArgs<'a> {
    /// `ARGV[1]`.
    pub token: &'a [u8],
    numbers: [Option<u64>; 4],
    tag: Option<&'static str>,
}

impl ScriptArgs<'_> {
    /// `ARGV[2]…`, in order.
    pub fn numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.numbers.iter().flatten().copied()
    }

    /// The last argument, after the numbers, where there is one: the [`Slot::tag`] of the
    /// keys' slot, for a release that announces itself on a cluster ([`RELEASE_SCRIPT`]).
    pub fn tag(&self) -> Option<&'static str> {
        self.tag
    }

    /// How many arguments, the token included.
    pub fn len(&self) -> usize {
        1 + self.numbers().count() + usize::from(self.tag.is_some())
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
    /// A clean-up release to a node not heard granting: it most likely set nothing there. The
    /// release script still announces what it deleted (it publishes only then), but the native
    /// form, whose `PUBLISH` goes out whether or not the delete found a key, announces nothing.
    pub(crate) unheard: bool,
    /// The releasing client's own subscriber on this node is known to listen on every key's
    /// release channel ([`Command::heard_by_own_subscriber`]): announce only where another
    /// connection listens too.
    pub(crate) own_subscriber: bool,
    /// Whether an extension may set its TTL exactly: it is at least every TTL this lock's
    /// rounds have put on its keys, so no key can hold a longer one ([`Command::sets_exact_ttl`]).
    pub(crate) exact_ttl: bool,
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

    /// Whether this release announces itself on the keys' release channels (by script: what
    /// it deleted; natively: every key, except on a node not heard granting, where it does not
    /// announce at all).
    pub fn notifies(&self) -> bool {
        self.op == Op::DeleteIfEquals && self.extras.notify
    }

    /// Whether this release goes to a node where the releasing client's own subscriber is
    /// known to listen on every key's release channel (the multiplexer marks it as the request
    /// leaves: [`Multiplexer::handle_subscribed`](crate::Multiplexer::handle_subscribed)). Then
    /// its own notice would only come back to the client, which already woke its own waiters,
    /// so on a standalone node it announces each key only where more than that one connection
    /// listens: inside [`RELEASE_SCRIPT`] (`ARGV[2]` = `3`), or, for a native release
    /// (`DELIFEQ`, `DELEX`), by counting the listeners in the release's pipeline and
    /// publishing in a pipeline after it only where another listens
    /// ([`RedisForm::announcement`]; measured, the script in the native release's place costs
    /// a Valkey 9.1 node more than the `PUBLISH` it saves). A cluster node's release announces
    /// as always.
    pub fn heard_by_own_subscriber(&self) -> bool {
        self.notifies() && self.extras.own_subscriber
    }

    /// Marks this release [`heard_by_own_subscriber`](Self::heard_by_own_subscriber).
    pub(crate) fn mark_heard_by_own_subscriber(&mut self) {
        self.extras.own_subscriber = true;
    }

    /// Whether this extension may set the keys' TTL exactly instead of only ever raising it:
    /// its TTL is at least every TTL the lock's own rounds have put on the keys, so on a node
    /// where the keys hold the token no longer TTL can be there to shorten. False for an
    /// extension of a lock resumed by token (its history is unknown) and for one to a shorter
    /// TTL than before; those keep [`EXTEND_SCRIPT`].
    pub fn sets_exact_ttl(&self) -> bool {
        self.op == Op::ExpireIfEquals && self.extras.exact_ttl
    }

    /// Marks an extension exact whatever its history (negative controls only).
    #[cfg(any(test, feature = "testing"))]
    pub fn force_exact_ttl_for_tests(&mut self) {
        self.extras.exact_ttl = true;
    }

    /// The TTL it sets, for `SetIfAbsent` and `ExpireIfEquals`.
    pub fn ttl_ms(&self) -> Option<u64> {
        match self.op {
            Op::SetIfAbsent | Op::ExpireIfEquals => Some(self.ttl_ms),
            Op::DeleteIfEquals | Op::Trust | Op::CommitFence => None,
        }
    }

    /// How a node of `dialect` runs it: the cheapest form of the same meaning there (the table
    /// in [`Dialect`]'s module docs), or [`RedisForm::Unsupported`] when the node has none —
    /// never a weaker one.
    pub fn redis_form_on(&self, dialect: &Dialect) -> RedisForm<'_> {
        self.form_on(dialect, self.extras.max_ttl_ms)
    }

    /// The longest TTL in use that this acquisition checks the node's memory against
    /// (restart-aware voting), if it checks.
    pub fn restart_check_ms(&self) -> Option<u64> {
        self.extras
            .max_ttl_ms
            .filter(|_| self.op == Op::SetIfAbsent)
    }

    /// How a node of `dialect` runs this acquisition when the connection already vouches for
    /// the node's memory ([`MemoryWatch`](crate::MemoryWatch)): as
    /// [`redis_form_on`](Self::redis_form_on), without the restart check — plain `SET NX PX`
    /// for one key. Any other command takes its usual form.
    pub fn redis_form_vouched(&self, dialect: &Dialect) -> RedisForm<'_> {
        match self.op {
            Op::SetIfAbsent => self.form_on(dialect, None),
            _ => self.redis_form_on(dialect),
        }
    }

    fn form_on(&self, dialect: &Dialect, max_ttl_ms: Option<u64>) -> RedisForm<'_> {
        let cluster = dialect.keyspace == Keyspace::Cluster;
        if cluster {
            let mut slots = self.spec.keys().map(Slot::of);
            let first = slots.next();
            if slots.any(|slot| Some(slot) != first) {
                return RedisForm::CrossSlot;
            }
            // One epoch per slot: the driver stamps them slot by slot.
            if self.op == Op::Trust {
                return RedisForm::OnCluster;
            }
        }
        let native = match self.op {
            Op::SetIfAbsent
                if dialect.msetex
                    && self.spec.len() > 1
                    && max_ttl_ms.is_none()
                    && !self.extras.fenced =>
            {
                Some(RedisForm::MSetEx {
                    spec: &self.spec,
                    ttl_ms: self.ttl_ms,
                })
            }
            Op::DeleteIfEquals if dialect.native_release() => Some(RedisForm::DeleteEach {
                spec: &self.spec,
                how: dialect.delete_if_eq,
                notify: self.extras.notify && !self.extras.unheard,
                counts_first: self.heard_by_own_subscriber()
                    && !self.extras.unheard
                    && dialect.keyspace == Keyspace::Standalone,
                keyspace: dialect.keyspace,
            }),
            Op::ExpireIfEquals if dialect.set_if_eq && self.extras.exact_ttl => {
                Some(RedisForm::SetIfEqEach {
                    spec: &self.spec,
                    ttl_ms: self.ttl_ms,
                })
            }
            // Without scripts, a fenced acquisition whose restart check is already done (or not
            // asked) reads the counters and the node's clock in its transaction.
            Op::SetIfAbsent
                if self.extras.fenced
                    && !dialect.scripts
                    && max_ttl_ms.is_none()
                    && (self.spec.len() == 1 || dialect.msetex) =>
            {
                Some(RedisForm::FencedSet {
                    spec: &self.spec,
                    ttl_ms: self.ttl_ms,
                    keyspace: dialect.keyspace,
                })
            }
            Op::CommitFence if !dialect.scripts => {
                self.extras.fence.map(|fence| RedisForm::CommitFenceEach {
                    spec: &self.spec,
                    fence,
                    keyspace: dialect.keyspace,
                })
            }
            // Without scripts, an extension that may not set the TTL exactly raises it only.
            Op::ExpireIfEquals if !dialect.scripts => Some(RedisForm::ExpireGtEach {
                spec: &self.spec,
                ttl_ms: self.ttl_ms,
            }),
            Op::Trust if !dialect.scripts => Some(RedisForm::SetTrusted),
            _ => None,
        };
        match (native, self.scripts_form(max_ttl_ms, dialect)) {
            (Some(form), _) => form,
            (None, RedisForm::Script { .. }) if !dialect.scripts => RedisForm::Unsupported,
            (None, form) => form,
        }
    }

    /// A release's `ARGV[2]` for [`RELEASE_SCRIPT`]: how it announces itself in `keyspace`
    /// (`0` not at all, `1` on the release channel, `3` there only where another connection
    /// than the client's own subscriber listens, `2` on the sharded one of a cluster).
    fn announce(&self, keyspace: Keyspace) -> u64 {
        match (self.extras.notify, keyspace) {
            (false, _) => 0,
            (true, Keyspace::Standalone) if self.extras.own_subscriber => 3,
            (true, Keyspace::Standalone) => 1,
            (true, Keyspace::Cluster) => 2,
        }
    }

    /// How a node that runs scripts and nothing native runs it ([`Dialect::SCRIPTS`]): plain
    /// `SET NX PX` for a one-key acquire without restart-aware voting or fencing, a script
    /// otherwise.
    pub fn redis_form(&self) -> RedisForm<'_> {
        self.scripts_form(self.extras.max_ttl_ms, &Dialect::SCRIPTS)
    }

    /// [`redis_form`](Self::redis_form), with an acquisition's restart check against
    /// `max_ttl_ms` (none: no check), in `dialect`'s database (what the identity is stamped
    /// with) and keyspace (where the epoch and the fence counters live).
    fn scripts_form(&self, max_ttl_ms: Option<u64>, dialect: &Dialect) -> RedisForm<'_> {
        let token = self.spec.token().as_bytes();
        let db = Some(u64::from(dialect.database));
        let (script, epoch, fence, numbers) = match self.op {
            Op::SetIfAbsent if self.extras.fenced => (
                Script::AcquireFenced,
                true,
                true,
                [Some(self.ttl_ms), Some(max_ttl_ms.unwrap_or(0)), db, None],
            ),
            Op::SetIfAbsent if max_ttl_ms.is_some() => (
                Script::AcquireChecked,
                true,
                false,
                [Some(self.ttl_ms), max_ttl_ms, db, None],
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
                [Some(self.ttl_ms), None, None, None],
            ),
            Op::DeleteIfEquals => (
                Script::Release,
                false,
                false,
                [Some(self.announce(dialect.keyspace)), None, None, None],
            ),
            Op::ExpireIfEquals => (
                Script::Extend,
                false,
                false,
                [Some(self.ttl_ms), None, None, None],
            ),
            Op::Trust => (Script::Trust, false, false, [db, None, None, None]),
            Op::CommitFence => (
                Script::CommitFence,
                false,
                true,
                [self.extras.fence, Some(FENCE_RETENTION_MS), None, None],
            ),
        };
        RedisForm::Script {
            script,
            keys: ScriptKeys {
                spec: &self.spec,
                keyspace: dialect.keyspace,
                epoch,
                identity: self.op == Op::Trust,
                fence,
            },
            args: ScriptArgs {
                token,
                numbers,
                tag: (self.op == Op::DeleteIfEquals && self.announce(dialect.keyspace) == 2)
                    .then(|| Slot::of(self.spec.keys().next().unwrap_or_default()).tag()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_script_publishes_on_the_channel_drivers_listen_to() {
        let prefix = std::str::from_utf8(RELEASED_CHANNEL_PREFIX).expect("ascii");
        assert!(RELEASE_SCRIPT.contains(&format!("local channel = '{prefix}' .. KEYS[i]")));
        assert!(RELEASE_SCRIPT.contains("redis.pcall('PUBLISH', channel, '1')"));
        assert_eq!(released_channel(b"k"), b"redlock:released:k");
    }

    /// A release the client's own subscriber hears counts the node's listeners before it
    /// announces (`ARGV[2]` = `3`) where the release is the script; a native release and a
    /// cluster node's announce as always.
    #[test]
    fn a_release_heard_by_the_own_subscriber_announces_only_to_others_where_it_is_the_script() {
        let announced = announced();
        let mut release = command(Op::DeleteIfEquals, &["a", "b"], announced);
        assert!(!release.heard_by_own_subscriber());
        let announce = |release: &Command, dialect: &Dialect| match release.redis_form_on(dialect) {
            RedisForm::Script { script, args, .. } => {
                assert_eq!(script, Script::Release);
                Some(args.numbers().collect::<Vec<_>>())
            }
            _ => None,
        };
        assert_eq!(announce(&release, &Dialect::SCRIPTS), Some(vec![1]));
        assert_eq!(announce(&release, &VALKEY_9_1), None, "native");
        release.mark_heard_by_own_subscriber();
        assert!(release.heard_by_own_subscriber());
        assert_eq!(announce(&release, &Dialect::SCRIPTS), Some(vec![3]));
        // Natively, the count takes the `PUBLISH`'s place in the pipeline.
        let native = release.redis_form_on(&VALKEY_9_1);
        assert_eq!(
            encoded(&native),
            "*3 $7 DELIFEQ $1 a $3 tok *3 $7 DELIFEQ $1 b $3 tok \
             *3 $6 PUBSUB $6 NUMSUB $18 redlock:released:a *3 $6 PUBSUB $6 NUMSUB $18 redlock:released:b "
        );
        assert_eq!(native.decisive_parts(), 2);
        assert_eq!(native.reads(1), None);
        assert_eq!(native.reads(2), Some(PartRead::Listeners));
        assert_eq!(native.reads(3), Some(PartRead::Listeners));
        let cluster = Dialect {
            keyspace: Keyspace::Cluster,
            ..Dialect::SCRIPTS
        };
        let mut in_one_slot = command(Op::DeleteIfEquals, &["{o}1", "{o}2"], announced);
        in_one_slot.mark_heard_by_own_subscriber();
        assert_eq!(announce(&in_one_slot, &cluster), Some(vec![2]));
        // The count is the script's, and a refused count announces as `1` does.
        assert!(RELEASE_SCRIPT.contains("redis.pcall('PUBSUB', 'NUMSUB', channel)"));
        assert!(RELEASE_SCRIPT.contains("type(count) ~= 'table' or not count[2] or count[2] > 1"));
        // A clean-up that announces nothing stays unmarked whatever the multiplexer says.
        let mut quiet = command(Op::DeleteIfEquals, &["a"], Extras::default());
        quiet.mark_heard_by_own_subscriber();
        assert!(!quiet.heard_by_own_subscriber());
        assert_eq!(announce(&quiet, &Dialect::SCRIPTS), Some(vec![0]));
    }

    /// A native release that counted its listeners first announces, in a pipeline after it,
    /// only where a key was deleted and another connection than the client's own subscriber
    /// listens, or the count was refused; its answer is the deletes' alone.
    #[test]
    fn a_counted_native_release_announces_only_where_another_listens() {
        let announced = announced();
        let unmarked = command(Op::DeleteIfEquals, &["a", "b"], announced);
        let plain = unmarked.redis_form_on(&VALKEY_9_1);
        let mut release = unmarked.clone();
        release.mark_heard_by_own_subscriber();
        let counted = release.redis_form_on(&VALKEY_9_1);
        let (one, zero, other) = (Reply::Int(1), Reply::Int(0), Reply::Int(-1));
        let listeners = Reply::Int;
        // Only the client's own subscriber (or nobody any more) listens: nothing follows.
        for counts in [[1, 1], [0, 1], [1, 0]] {
            let parts = [one, one, listeners(counts[0]), listeners(counts[1])];
            assert!(counted.announcement(&parts).is_none(), "{counts:?}");
            assert_eq!(counted.answer(&parts), Reply::Int(1));
        }
        // Another listens on a deleted key's channel, or the count was refused: the
        // `PUBLISH`es follow.
        for count in [
            listeners(2),
            Reply::Other,
            Reply::Error(NodeErrorKind::NoPermission),
        ] {
            let parts = [zero, one, listeners(1), count];
            let follow = counted.announcement(&parts).expect("announced");
            assert_eq!(encoded(&follow), encoded(&plain), "{count:?}");
            assert_eq!((follow.decisive_parts(), follow.parts()), (2, 4));
            assert!(encoded(&follow).ends_with(
                "*3 $7 PUBLISH $18 redlock:released:a $1 1 *3 $7 PUBLISH $18 redlock:released:b $1 1 "
            ));
        }
        // Another listens, but on a key this release did not delete: nothing to announce.
        for missed in [zero, other] {
            let parts = [missed, one, listeners(2), listeners(1)];
            assert!(counted.announcement(&parts).is_none(), "{missed:?}");
        }
        // Answers cut short announce nothing (the release failed there).
        assert!(counted.announcement(&[one]).is_none());
        // A form that did not count never follows up.
        assert!(
            plain
                .announcement(&[one, one, listeners(2), listeners(2)])
                .is_none()
        );
        // A cluster node's release, and a clean-up's, never count.
        let cluster = Dialect {
            keyspace: Keyspace::Cluster,
            ..VALKEY_9_1
        };
        let mut in_one_slot = command(Op::DeleteIfEquals, &["{o}1", "{o}2"], announced);
        in_one_slot.mark_heard_by_own_subscriber();
        let sharded = in_one_slot.redis_form_on(&cluster);
        assert_eq!(sharded.reads(2), None);
        assert!(encoded(&sharded).contains("SPUBLISH"));
        let mut unheard = command(
            Op::DeleteIfEquals,
            &["a"],
            Extras {
                notify: true,
                unheard: true,
                ..Extras::default()
            },
        );
        unheard.mark_heard_by_own_subscriber();
        assert_eq!(
            encoded(&unheard.redis_form_on(&VALKEY_9_1)),
            "*3 $7 DELIFEQ $1 a $3 tok "
        );
    }

    /// On a cluster node a release announces each key on its sharded channel, in the keys'
    /// slot ([`Keyspace::released_channel`]), natively and by script alike; a standalone node
    /// keeps `PUBLISH` on the channel every release has used.
    #[test]
    fn a_release_on_a_cluster_announces_on_the_keys_sharded_channel() {
        let announced = announced();
        let release = command(Op::DeleteIfEquals, &["{o}1", "{o}2"], announced);
        let cluster = |dialect: Dialect| Dialect {
            keyspace: Keyspace::Cluster,
            ..dialect
        };
        let channel = |key: &str| {
            String::from_utf8(Keyspace::Cluster.released_channel(key.as_bytes())).expect("ascii")
        };
        let publish = |key: &str| {
            format!(
                "*3 $8 SPUBLISH ${} {} $1 1 ",
                channel(key).len(),
                channel(key)
            )
        };
        let deletes = "*3 $7 DELIFEQ $4 {o}1 $3 tok *3 $7 DELIFEQ $4 {o}2 $3 tok ";
        assert_eq!(
            encoded(&release.redis_form_on(&cluster(VALKEY_9_1))),
            format!("{deletes}{}{}", publish("{o}1"), publish("{o}2"))
        );
        let RedisForm::Script { script, keys, args } =
            release.redis_form_on(&cluster(Dialect::SCRIPTS))
        else {
            panic!("the release script");
        };
        assert_eq!(script, Script::Release);
        assert_eq!(keys.len(), 2);
        assert_eq!(args.numbers().collect::<Vec<_>>(), [2]);
        let tag = args.tag().expect("the slot's tag");
        assert_eq!(tag, Slot::of(b"o").tag());
        assert_eq!(args.len(), 3);
        // The script's channel for `ARGV[2] == '2'` is the keyspace's.
        assert!(RELEASE_SCRIPT.contains(
            "redis.pcall('SPUBLISH', 'redlock:released:{' .. ARGV[3] .. '}' .. KEYS[i], '1')"
        ));
        assert_eq!(channel("{o}1"), format!("redlock:released:{{{tag}}}{{o}}1"));
        // Unannounced (a lost round's clean-up): nothing published, no tag.
        let quiet = command(Op::DeleteIfEquals, &["a"], Extras::default());
        let RedisForm::Script { args, .. } = quiet.redis_form_on(&cluster(Dialect::SCRIPTS)) else {
            panic!("the release script");
        };
        assert_eq!(
            (args.numbers().collect::<Vec<_>>(), args.tag()),
            (vec![0], None)
        );
        // Standalone: `PUBLISH`, `ARGV[2] == '1'`, no tag.
        let RedisForm::Script { args, .. } = release.redis_form_on(&Dialect::SCRIPTS) else {
            panic!("the release script");
        };
        assert_eq!(
            (args.numbers().collect::<Vec<_>>(), args.tag()),
            (vec![1], None)
        );
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

    fn command(op: Op, resources: &[&str], extras: Extras) -> Command {
        let token = crate::Token::new(b"tok".to_vec()).expect("token");
        let spec = LockSpec::new(b"", resources.iter().map(|r| r.as_bytes().to_vec()), token)
            .expect("spec");
        Command::new(op, spec, 1500, extras)
    }

    const VALKEY_9_1: Dialect = Dialect {
        scripts: true,
        delete_if_eq: DeleteIfEq::DelIfEq,
        set_if_eq: true,
        msetex: true,
        swapdb: true,
        markers: true,
        database: 0,
        keyspace: Keyspace::Standalone,
        silent_slot_drops: false,
    };
    const NO_LUA: Dialect = Dialect {
        scripts: false,
        ..VALKEY_9_1
    };

    /// A held lock's release: it announces itself.
    fn announced() -> Extras {
        Extras {
            notify: true,
            ..Extras::default()
        }
    }

    fn encoded(form: &RedisForm<'_>) -> String {
        let mut out = Vec::new();
        crate::resp::encode_form(form, &mut out);
        String::from_utf8(out).expect("utf-8").replace("\r\n", " ")
    }

    #[test]
    fn each_dialect_gets_the_cheapest_form_of_the_same_meaning() {
        let exact = Extras {
            exact_ttl: true,
            ..Extras::default()
        };
        let restart_aware = Extras {
            max_ttl_ms: Some(60_000),
            ..Extras::default()
        };
        let two = command(Op::SetIfAbsent, &["a", "b"], Extras::default());
        assert_eq!(
            encoded(&two.redis_form_on(&VALKEY_9_1)),
            "*9 $6 MSETEX $1 2 $1 a $3 tok $1 b $3 tok $2 NX $2 PX $4 1500 "
        );
        assert!(matches!(
            two.redis_form_on(&Dialect::SCRIPTS),
            RedisForm::Script {
                script: Script::Acquire,
                ..
            }
        ));
        let release = command(Op::DeleteIfEquals, &["a", "b"], Extras::default());
        assert_eq!(
            encoded(&release.redis_form_on(&VALKEY_9_1)),
            "*3 $7 DELIFEQ $1 a $3 tok *3 $7 DELIFEQ $1 b $3 tok "
        );
        let announced = command(
            Op::DeleteIfEquals,
            &["a", "b"],
            Extras {
                notify: true,
                ..Extras::default()
            },
        );
        let form = announced.redis_form_on(&VALKEY_9_1);
        assert_eq!(
            encoded(&form),
            "*3 $7 DELIFEQ $1 a $3 tok *3 $7 DELIFEQ $1 b $3 tok \
             *3 $7 PUBLISH $18 redlock:released:a $1 1 *3 $7 PUBLISH $18 redlock:released:b $1 1 "
        );
        // The notices decide nothing: not their counts, not their errors.
        let denied = Reply::Error(NodeErrorKind::NoPermission);
        assert_eq!(
            form.answer(&[Reply::Int(1), Reply::Int(1), denied, Reply::Int(0)]),
            Reply::Int(1)
        );
        assert_eq!(form.answer(&[Reply::Int(1), Reply::Int(0)]), Reply::Int(1));
        let redis_8_4 = Dialect {
            delete_if_eq: DeleteIfEq::DelEx,
            ..VALKEY_9_1
        };
        assert_eq!(
            encoded(&release.redis_form_on(&redis_8_4)),
            "*4 $5 DELEX $1 a $4 IFEQ $3 tok *4 $5 DELEX $1 b $4 IFEQ $3 tok "
        );
        let extend = command(Op::ExpireIfEquals, &["a"], exact);
        assert_eq!(
            encoded(&extend.redis_form_on(&VALKEY_9_1)),
            "*7 $3 SET $1 a $3 tok $4 IFEQ $3 tok $2 PX $4 1500 "
        );
        // Not marked exact: the script, which never shortens, on every dialect that has it.
        let unsure = command(Op::ExpireIfEquals, &["a"], Extras::default());
        assert!(matches!(
            unsure.redis_form_on(&VALKEY_9_1),
            RedisForm::Script {
                script: Script::Extend,
                ..
            }
        ));
        // A restart-aware acquire keeps its script.
        let checked = command(Op::SetIfAbsent, &["a", "b"], restart_aware);
        assert!(matches!(
            checked.redis_form_on(&VALKEY_9_1),
            RedisForm::Script {
                script: Script::AcquireChecked,
                ..
            }
        ));
        // With no Lua: native where the meaning allows, no form (never a weaker one) where not.
        assert!(matches!(
            release.redis_form_on(&NO_LUA),
            RedisForm::DeleteEach { .. }
        ));
        // An extension that may not set the TTL exactly raises it only, and reads the keys back
        // in the same transaction (issue 23).
        assert_eq!(
            encoded(&unsure.redis_form_on(&NO_LUA)),
            "*1 $5 MULTI *4 $7 PEXPIRE $1 a $4 1500 $2 GT *2 $3 GET $1 a *1 $4 EXEC "
        );
        assert!(matches!(
            checked.redis_form_on(&NO_LUA),
            RedisForm::Unsupported
        ));
        let trust = command(Op::Trust, &["a"], Extras::default());
        assert_eq!(
            encoded(&trust.redis_form_on(&NO_LUA)),
            "*5 $4 MSET $13 redlock:epoch $1 0 $16 redlock:epoch:id $0  "
        );
        let no_native = Dialect {
            scripts: false,
            ..Dialect::SCRIPTS
        };
        assert!(matches!(
            release.redis_form_on(&no_native),
            RedisForm::Unsupported
        ));
        assert!(matches!(
            unsure.redis_form_on(&no_native),
            RedisForm::ExpireGtEach { .. }
        ));
        assert_eq!(
            RedisForm::Unsupported.answer(&[]),
            Reply::Error(NodeErrorKind::NoSafeForm)
        );
        // The scripts-only dialect is exactly the classic form.
        for cmd in [&two, &release, &extend, &unsure, &checked, &trust] {
            assert_eq!(
                encoded(&cmd.redis_form_on(&Dialect::SCRIPTS)),
                encoded(&cmd.redis_form())
            );
        }
        // A cluster node gets the same forms for keys of one slot, every name beside them in
        // their slot; keys of several slots get nothing (never a lock of some of them), nor does
        // a trust (one epoch per slot: the driver stamps them).
        let cluster = Dialect {
            keyspace: Keyspace::Cluster,
            ..VALKEY_9_1
        };
        let scripted_cluster = Dialect {
            keyspace: Keyspace::Cluster,
            ..Dialect::SCRIPTS
        };
        let single = command(Op::SetIfAbsent, &["a"], Extras::default());
        assert_eq!(
            encoded(&single.redis_form_on(&cluster)),
            encoded(&single.redis_form_on(&VALKEY_9_1))
        );
        let tagged = command(Op::SetIfAbsent, &["{o}1", "{o}2"], restart_aware);
        let form = tagged.redis_form_on(&scripted_cluster);
        let mut keys = Vec::new();
        if let RedisForm::Script {
            script: Script::AcquireChecked,
            keys: script_keys,
            ..
        } = form
        {
            script_keys.for_each(|key| keys.push(String::from_utf8_lossy(key).into_owned()));
        }
        let tag = Slot::of(b"o").tag();
        assert_eq!(
            keys,
            [
                "{o}1".to_owned(),
                "{o}2".to_owned(),
                format!("redlock:epoch:{{{tag}}}"),
                format!("redlock:epoch:id:{{{tag}}}"),
            ]
        );
        assert!(
            keys.iter()
                .all(|k| Slot::of(k.as_bytes()) == Slot::of(b"{o}1"))
        );
        let fenced = command(
            Op::SetIfAbsent,
            &["a"],
            Extras {
                fenced: true,
                ..restart_aware
            },
        );
        let mut fence_keys = Vec::new();
        if let RedisForm::Script {
            script: Script::AcquireFenced,
            keys: script_keys,
            ..
        } = fenced.redis_form_on(&scripted_cluster)
        {
            script_keys.for_each(|key| fence_keys.push(key.to_vec()));
        }
        assert_eq!(fence_keys.len(), 4, "{fence_keys:?}");
        assert!(fence_keys.iter().all(|k| Slot::of(k) == Slot::of(b"a")));
        // Vouched (no restart check), a node without scripts takes the native fenced
        // transaction, and its commit, with every counter in the lock key's slot.
        let no_scripts_cluster = Dialect {
            scripts: false,
            ..cluster
        };
        let fence = format!("redlock:fence:{{{}}}a", Slot::of(b"a").tag());
        assert_eq!(
            encoded(&fenced.redis_form_vouched(&no_scripts_cluster)),
            format!(
                "*1 $5 MULTI *6 $3 SET $1 a $3 tok $2 NX $2 PX $4 1500 \
                 *3 $6 ZSCORE ${} {fence} $5 fence *1 $4 TIME *1 $4 EXEC ",
                fence.len()
            )
        );
        let commit = command(
            Op::CommitFence,
            &["a"],
            Extras {
                fence: Some(7),
                ..Extras::default()
            },
        );
        let encoded_commit = encoded(&commit.redis_form_on(&no_scripts_cluster));
        assert!(
            encoded_commit.contains(&format!("ZADD ${} {fence} $2 GT $1 7", fence.len()))
                && encoded_commit.contains(&format!("PEXPIRE ${} {fence}", fence.len())),
            "{encoded_commit}"
        );
        for cmd in [&two, &release, &checked] {
            for form in [
                cmd.redis_form_on(&cluster),
                cmd.redis_form_vouched(&cluster),
            ] {
                assert!(matches!(form, RedisForm::CrossSlot), "{form:?}");
                assert_eq!(form.answer(&[]), Reply::Error(NodeErrorKind::CrossSlot));
                assert!(encoded(&form).is_empty(), "nothing is sent");
            }
        }
        let form = trust.redis_form_on(&cluster);
        assert!(matches!(form, RedisForm::OnCluster), "{form:?}");
        assert_eq!(form.answer(&[]), Reply::Error(NodeErrorKind::Cluster));
        assert!(encoded(&form).is_empty(), "nothing is sent");
    }

    #[test]
    fn fences_without_scripts_are_transactions_of_native_commands() {
        let fenced = Extras {
            fenced: true,
            ..Extras::default()
        };
        let one = command(Op::SetIfAbsent, &["a"], fenced);
        let form = one.redis_form_vouched(&NO_LUA);
        assert_eq!(
            encoded(&form),
            "*1 $5 MULTI *6 $3 SET $1 a $3 tok $2 NX $2 PX $4 1500 \
             *3 $6 ZSCORE $15 redlock:fence:a $5 fence *1 $4 TIME *1 $4 EXEC "
        );
        let reads: Vec<Option<PartRead>> = (0..3).map(|p| form.reads(p)).collect();
        assert_eq!(reads, [None, Some(PartRead::Score), Some(PartRead::Time)]);
        // Set: one more than the larger of the counter and the clock; taken: 0.
        assert_eq!(
            form.answer(&[Reply::Ok, Reply::Int(900), Reply::Int(500)]),
            Reply::Int(901)
        );
        assert_eq!(
            form.answer(&[Reply::Ok, Reply::Nil, Reply::Int(500)]),
            Reply::Int(501)
        );
        assert_eq!(
            form.answer(&[Reply::Nil, Reply::Nil, Reply::Int(500)]),
            Reply::Int(0)
        );
        assert_eq!(
            form.answer(&[Reply::Ok, Reply::Other, Reply::Int(500)]),
            Reply::Other
        );
        assert_eq!(
            form.answer(&[Reply::Ok, Reply::Nil, Reply::Nil]),
            Reply::Other
        );
        // Several keys: all or none by MSETEX, where the node has it; otherwise no form.
        let two = command(Op::SetIfAbsent, &["a", "b"], fenced);
        assert!(encoded(&two.redis_form_vouched(&NO_LUA)).starts_with(
            "*1 $5 MULTI *9 $6 MSETEX $1 2 $1 a $3 tok $1 b $3 tok $2 NX $2 PX $4 1500 "
        ));
        let redis_7 = Dialect {
            scripts: false,
            ..Dialect::SCRIPTS
        };
        assert!(matches!(
            two.redis_form_vouched(&redis_7),
            RedisForm::Unsupported
        ));
        assert!(matches!(
            one.redis_form_vouched(&redis_7),
            RedisForm::FencedSet { .. }
        ));
        // The restart check is never dropped: unproven, a fenced acquire has no native form.
        let checked = command(
            Op::SetIfAbsent,
            &["a"],
            Extras {
                max_ttl_ms: Some(60_000),
                ..fenced
            },
        );
        assert!(matches!(
            checked.redis_form_on(&NO_LUA),
            RedisForm::Unsupported
        ));

        let commit = command(
            Op::CommitFence,
            &["a"],
            Extras {
                fence: Some(901),
                ..Extras::default()
            },
        );
        let form = commit.redis_form_on(&NO_LUA);
        assert_eq!(
            encoded(&form),
            "*1 $5 MULTI *5 $4 ZADD $15 redlock:fence:a $2 GT $3 901 $5 fence \
             *3 $7 PEXPIRE $15 redlock:fence:a $7 3600000 *2 $3 GET $1 a *1 $4 EXEC "
        );
        let held = Reply::Int(1);
        assert_eq!(
            form.answer(&[Reply::Int(0), Reply::Int(1), held]),
            Reply::Int(1)
        );
        assert_eq!(
            form.answer(&[Reply::Int(1), Reply::Int(1), Reply::Int(0)]),
            Reply::Int(0)
        );
        assert_eq!(
            form.answer(&[Reply::Int(1), Reply::Nil, held]),
            Reply::Other
        );
        assert!(matches!(
            commit.redis_form_on(&VALKEY_9_1),
            RedisForm::Script { .. }
        ));
    }

    #[test]
    fn per_key_answers_make_the_scripts_reply() {
        let release = command(Op::DeleteIfEquals, &["a", "b"], Extras::default());
        let form = release.redis_form_on(&VALKEY_9_1);
        let (ours, gone, other) = (Reply::Int(1), Reply::Int(0), Reply::Int(-1));
        assert_eq!(form.answer(&[ours, ours]), Reply::Int(1));
        assert_eq!(form.answer(&[ours, gone]), Reply::Int(1));
        assert_eq!(form.answer(&[gone, gone]), Reply::Int(0));
        assert_eq!(form.answer(&[ours, other]), Reply::Int(-1));
        assert_eq!(form.answer(&[ours]), Reply::Error(NodeErrorKind::Protocol));
        let timeout = Reply::Error(NodeErrorKind::Timeout);
        assert_eq!(form.answer(&[ours, timeout]), timeout);
        assert_eq!(RedisForm::missed_delete(Some(b"else"), b"tok"), other);
        assert_eq!(RedisForm::missed_delete(None, b"tok"), gone);

        // PEXPIRE … GT per key, then GET per key: extended only where every key is ours.
        let unsure = command(Op::ExpireIfEquals, &["a", "b"], Extras::default());
        let form = unsure.redis_form_on(&NO_LUA);
        assert!(form.is_transaction());
        assert_eq!(form.parts(), 4);
        let held_reads: Vec<bool> = (0..4)
            .map(|p| form.reads(p) == Some(PartRead::Held))
            .collect();
        assert_eq!(held_reads, [false, false, true, true]);
        let held = PartRead::Held.reply(crate::PartValue::Bytes(b"tok"), b"tok");
        let lost = PartRead::Held.reply(crate::PartValue::Bytes(b"else"), b"tok");
        assert_eq!((held, lost), (ours, gone));
        assert_eq!(PartRead::Held.reply(crate::PartValue::Nil, b"tok"), gone);
        assert_eq!(form.answer(&[ours, gone, held, held]), Reply::Int(1));
        assert_eq!(form.answer(&[ours, ours, held, lost]), Reply::Int(0));
        assert_eq!(
            form.answer(&[ours, ours, held]),
            Reply::Error(NodeErrorKind::Protocol)
        );
        assert_eq!(form.answer(&[ours, timeout, held, held]), timeout);
        assert_eq!(form.answer(&[Reply::Ok, ours, held, held]), Reply::Other);

        let exact = Extras {
            exact_ttl: true,
            ..Extras::default()
        };
        let extend = command(Op::ExpireIfEquals, &["a", "b"], exact);
        let form = extend.redis_form_on(&VALKEY_9_1);
        assert_eq!(form.answer(&[Reply::Ok, Reply::Ok]), Reply::Int(1));
        assert_eq!(form.answer(&[Reply::Ok, Reply::Nil]), Reply::Int(0));
        assert_eq!(form.answer(&[Reply::Ok, Reply::Int(3)]), Reply::Other);
    }
}
