//! An in-memory Redis master that answers the engine's commands exactly as Redis runs them, for
//! tests and simulators — the one fake node of the project (the core's unit tests, its property
//! tests and the `redlock-tests` simulator all use it).
//!
//! It reads each command the way a server of its [`Dialect`] receives it, through
//! [`Command::redis_form_on`]: plain `SET key token NX PX ttl`, one of the scripts named by
//! [`Script`], or a native form (`MSETEX`, `DELIFEQ`/`DELEX` with the `GET` that tells a missed
//! delete apart, `SET … IFEQ … PX`, which sets a TTL exactly), or no form at all. Time is whatever
//! the caller says it is on this node's own clock (`now`, a `Duration` since any epoch the
//! caller picks); a key is alive while `now` is before its expiry (real Redis keeps it up to a
//! millisecond longer, which can only help safety). It never reads a clock, never does I/O, and
//! never panics on any command.
//!
//! With restart-aware voting the node keeps its epoch key like any other key: [`forget_all`]
//! (a restart without persistence, `FLUSHALL`) loses it too, and the next acquire starts a new
//! epoch at `now`. A new node has no epoch either; [`trust`] marks it trusted, as an operator
//! (or a harness that just started it) would.
//!
//! [`forget_all`]: FakeNode::forget_all
//! [`trust`]: FakeNode::trust
//!
//! Enabled by the `testing` feature (and in the crate's own tests).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::command::{Command, EXTEND_NEVER_SHORTENS, RedisForm, Script};
use crate::dialect::Dialect;
use crate::part_read::{PartRead, PartValue};
use crate::reply::{NodeErrorKind, Reply};
use crate::sit_out::{SitOutCause, split_stamp, stamp_with_cause};

/// key → (token, expiry on the node's clock). A key planted with [`FakeNode::put`] never expires
/// (expiry `Duration::MAX`).
pub type Keys = BTreeMap<Vec<u8>, (Vec<u8>, Duration)>;

/// How the node runs the extend script's `PEXPIRE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtendSemantics {
    /// A plain `PEXPIRE key ttl`: sets the TTL, shorter or longer (for negative controls).
    Pexpire,
    /// `PEXPIRE` only where `PTTL` is below the new TTL: a TTL is only ever lengthened.
    NeverShorten,
}

impl ExtendSemantics {
    /// A key's expiry after an extension to `asked` from `at`.
    fn expiry(self, at: Duration, asked: Duration) -> Duration {
        match self {
            Self::Pexpire => asked,
            Self::NeverShorten => at.max(asked),
        }
    }

    /// What the engine's extend script does, as the engine declares it
    /// ([`EXTEND_NEVER_SHORTENS`]).
    pub fn of_engine() -> Self {
        if EXTEND_NEVER_SHORTENS {
            Self::NeverShorten
        } else {
            Self::Pexpire
        }
    }
}

impl Default for ExtendSemantics {
    fn default() -> Self {
        Self::of_engine()
    }
}

/// A fault in the node's fence counters, for the negative controls of a fence checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceFault {
    /// Commits are acknowledged but not stored (as if the commit round were skipped).
    IgnoreCommits,
    /// Each commit stores a counter far below the fence (a counter that goes backwards).
    CommitsGoBackwards,
}

pub use crate::epoch::Epoch;

/// One in-memory Redis master. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeNode {
    /// Every lock key, live or expired (expired ones are dropped by the next
    /// [`run`](Self::run)). The epoch key is kept apart.
    pub keys: Keys,
    /// The node's [`EPOCH_KEY`](crate::EPOCH_KEY), if it holds a number.
    epoch: Option<Epoch>,
    /// When the epoch key was claimed, by the node's clock in ms, if it holds an
    /// [`EPOCH_CLAIM`](crate::EPOCH_CLAIM) (and no number).
    claimed: Option<u64>,
    /// The node's process (its `run_id`, by number): a new one with every restart.
    run: u64,
    /// The node's replication history (its `master_replid`, by number): a new one with every
    /// restart and promotion.
    identity: u64,
    /// The identity its epoch was stamped with ([`EPOCH_ID_KEY`](crate::EPOCH_ID_KEY)), if
    /// any (an empty one reads as none).
    stamped: Option<Vec<u8>>,
    /// Whether the node shows its identity (`false`: as a node whose `INFO` is denied, or the
    /// scripts before the identity — the check off, for negative controls).
    identity_check: bool,
    /// How many keys it evicted (`evicted_keys`): a part of its identity.
    evicted: u64,
    /// Whether its `maxmemory-policy` evicts keys.
    evicts: bool,
    extend: ExtendSemantics,
    fence_fault: Option<FenceFault>,
    dialect: Dialect,
}

impl Default for FakeNode {
    /// A trusted, empty node (as a harness that just started it would leave it).
    fn default() -> Self {
        Self::with_extend(ExtendSemantics::default())
    }
}

impl FakeNode {
    /// A trusted, empty node whose extend script behaves as the engine's.
    pub fn new() -> Self {
        Self::default()
    }

    /// A trusted, empty node whose extend script behaves as `extend` says.
    pub fn with_extend(extend: ExtendSemantics) -> Self {
        Self {
            keys: Keys::new(),
            epoch: Some(Epoch::Trusted),
            claimed: None,
            run: 1,
            identity: 1,
            stamped: None,
            identity_check: true,
            evicted: 0,
            evicts: false,
            extend,
            fence_fault: None,
            dialect: Dialect::SCRIPTS,
        }
    }

    /// The node runs each command in the form a node of `dialect` gets
    /// ([`Command::redis_form_on`]): native commands where it has them, no script where it
    /// runs none.
    pub fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// The dialect it speaks.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Whether the node shows its identity, so that its scripts and native proofs compare it
    /// with the one its epoch was stamped with (`false`: as before
    /// [`EPOCH_ID_KEY`](crate::EPOCH_ID_KEY), or `INFO` denied — a negative control).
    pub fn with_identity_check(mut self, check: bool) -> Self {
        self.identity_check = check;
        self
    }

    /// Breaks the node's fence counters as `fault` says (negative controls only).
    pub fn with_fence_fault(mut self, fault: Option<FenceFault>) -> Self {
        self.fence_fault = fault;
        self
    }

    /// A node that was never trusted: it has no epoch, so its first restart-aware acquire starts
    /// one and it refuses to vote for the longest TTL in use.
    pub fn fresh() -> Self {
        Self {
            epoch: None,
            ..Self::default()
        }
    }

    /// Plants `key = token` with no expiry (another holder, in a test).
    pub fn put(&mut self, key: impl Into<Vec<u8>>, token: impl Into<Vec<u8>>) {
        self.keys.insert(key.into(), (token.into(), Duration::MAX));
    }

    /// Deletes `key` whatever it holds (another holder lets go, in a test); the epoch stays.
    pub fn remove(&mut self, key: &[u8]) {
        self.keys.remove(key);
    }

    /// The token under `key`, whatever its expiry (for tests that keep time still).
    pub fn token(&self, key: &[u8]) -> Option<&[u8]> {
        self.keys.get(key).map(|(token, _)| &token[..])
    }

    /// The token under `key` at `now`, if the key is alive then.
    pub fn holder(&self, now: Duration, key: &[u8]) -> Option<&[u8]> {
        self.alive(key, now).map(|(token, _)| &token[..])
    }

    /// Loses every key, the epoch included (a restart without persistence, `FLUSHALL`).
    pub fn forget_all(&mut self) {
        self.keys.clear();
        self.epoch = None;
        self.claimed = None;
        self.stamped = None;
    }

    /// Takes `identity` as its replication history now, keeping every key and its process (a
    /// promotion: its `master_replid` is new, its `run_id` the same). Identities are told
    /// apart by number; a node starts with 1.
    pub fn promote(&mut self, identity: u64) {
        self.identity = identity;
    }

    /// Restarts from a snapshot taken before any of its lock keys was set, or is replaced by a
    /// replica that missed them all (a failover behind the node's address): every lock key is
    /// lost, the epoch and its identity stay as they were, and the node's identity is new.
    pub fn restart_from_snapshot(&mut self) {
        self.keys.clear();
        self.run += 1;
        self.identity += 1;
    }

    /// Whether any of `command`'s keys is alive at `now` under another token than its own.
    pub fn holds_foreign(&self, now: Duration, command: &Command) -> bool {
        let token = command.spec().token().as_bytes();
        command
            .spec()
            .keys()
            .any(|key| self.holder(now, key).is_some_and(|held| held != token))
    }

    fn alive(&self, key: &[u8], now: Duration) -> Option<&(Vec<u8>, Duration)> {
        self.keys.get(key).filter(|(_, expires)| now < *expires)
    }

    /// The acquire script's eligibility check: reads the epoch (the node's time in ms when its
    /// memory began; created now when missing) and answers a refusal for `m` ms while the node
    /// is `m` ms short of `max_ttl_ms`, naming why, as the script does.
    fn young(&mut self, now: Duration, max_ttl_ms: u64) -> Option<Reply> {
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let identity = self.identity_check.then(|| self.identity_value());
        let mut cause = SitOutCause::NoEpoch;
        if let (Some(identity), Some(_)) = (&identity, self.epoch) {
            let stamped = self.stamped.as_deref().map(split_stamp);
            match stamped {
                // An epoch without an identity adopts the node's, unless the node evicted keys
                // (the identity itself may have been evicted); an empty one (a native trust)
                // adopts it always.
                None if self.evicted == 0 => {
                    self.stamped = Some(identity.clone());
                    cause = SitOutCause::Unrecorded;
                }
                Some(([], _)) => {
                    self.stamped = Some(identity.clone());
                    cause = SitOutCause::Unrecorded;
                }
                // Stamped by another life of the node: its memory begins now.
                None => {
                    cause = SitOutCause::of_change(None, identity);
                    self.epoch = None;
                }
                Some((was, _)) if was != identity.as_slice() => {
                    cause = SitOutCause::of_change(Some(was), identity);
                    self.epoch = None;
                }
                Some((_, recorded)) => cause = recorded.unwrap_or(SitOutCause::Unrecorded),
            }
        } else if self.epoch.is_some() {
            cause = SitOutCause::Unrecorded;
        }
        if self.epoch.is_none() {
            // A claim is no number to the script: it stamps the key with its time.
            self.claimed = None;
            self.epoch = Some(Epoch::Began(now_ms));
            self.stamped = identity.map(|identity| stamp_with_cause(&identity, cause));
        }
        let epoch = self.epoch.unwrap_or(Epoch::Began(now_ms));
        epoch
            .refuses_for_ms(now_ms, max_ttl_ms)
            .map(|for_ms| Reply::Ineligible { for_ms, cause })
    }

    /// Marks the node trusted, as [`TRUST_SCRIPT`](crate::TRUST_SCRIPT) does.
    pub fn trust(&mut self) {
        self.epoch = Some(Epoch::Trusted);
        self.claimed = None;
        self.stamped = self.identity_check.then(|| self.identity_value());
    }

    /// The node's identity now in database 0, as the scripts and
    /// [`node_identity`](crate::node_identity) read it:
    /// `run_id:master_replid:database:evicted_keys`.
    pub fn identity_value(&self) -> Vec<u8> {
        self.identity_in(0)
    }

    /// [`identity_value`](Self::identity_value) as stamped in `database`.
    fn identity_in(&self, database: u32) -> Vec<u8> {
        let (run, repl) = (self.run, self.identity);
        format!("{run:040x}:{repl:040x}:{database}:{}", self.evicted).into_bytes()
    }

    /// What `INFO server replication stats memory` answers: the node's `run_id`,
    /// `master_replid`, `evicted_keys` and `maxmemory_policy`, or none of them when it hides its
    /// identity ([`with_identity_check`](Self::with_identity_check)).
    pub fn info_value(&self) -> Vec<u8> {
        if !self.identity_check {
            return b"# Server\r\n# Replication\r\nrole:master\r\n".to_vec();
        }
        let (run, repl) = (self.run, self.identity);
        let policy = if self.evicts {
            "volatile-lru"
        } else {
            "noeviction"
        };
        let stats = String::from_utf8(self.stats_value()).unwrap_or_default();
        format!(
            "# Server\r\nrun_id:{run:040x}\r\n# Replication\r\nmaster_replid:{repl:040x}\r\n{stats}\
             # Memory\r\nmaxmemory_policy:{policy}\r\n"
        )
        .into_bytes()
    }

    /// What `INFO stats` answers: the node's `evicted_keys` (none when it hides its identity).
    pub fn stats_value(&self) -> Vec<u8> {
        if !self.identity_check {
            return b"# Stats\r\n".to_vec();
        }
        format!("# Stats\r\nevicted_keys:{}\r\n", self.evicted).into_bytes()
    }

    /// Its `maxmemory-policy` evicts keys (`volatile-lru`) from now on.
    pub fn set_evicting(&mut self, evicts: bool) {
        self.evicts = evicts;
    }

    /// Evicts every lock key on its own (a `volatile-lru` node under memory pressure): the
    /// epoch and its stamp (no TTL) stay, and the eviction count moves.
    pub fn evict_lock_keys(&mut self) {
        self.evicted += u64::try_from(self.keys.len()).unwrap_or(u64::MAX).max(1);
        self.keys.clear();
    }

    /// `SWAPDB` brings in another database of the same server: one with an old epoch of its
    /// own, stamped there (database 1), and none of this one's lock keys.
    pub fn swap_database(&mut self) {
        self.keys.clear();
        self.stamped = Some(self.identity_in(1));
    }

    /// What `GET` of [`EPOCH_ID_KEY`](crate::EPOCH_ID_KEY) reads (empty after a native trust).
    pub fn stamped_value(&self) -> Option<Vec<u8>> {
        self.stamped.clone()
    }

    /// Runs a native proof's follow-up write ([`Stamp`](crate::Stamp)) at `now` on the node's
    /// clock, as the node runs its `SET`.
    pub fn run_stamp(&mut self, now: Duration, stamp: &crate::Stamp) {
        match stamp {
            crate::Stamp::Restamp { read, .. } => {
                if read
                    .as_ref()
                    .is_none_or(|read| self.epoch_value().as_ref() == Some(read))
                {
                    self.epoch = None;
                    self.claimed = Some(u64::try_from(now.as_millis()).unwrap_or(u64::MAX));
                }
            }
            crate::Stamp::Identity {
                identity,
                if_missing,
                ..
            } => {
                if !*if_missing || self.stamped.is_none() {
                    self.stamped = Some(identity.clone());
                }
            }
        }
    }

    /// The node's epoch (`None` when it has none yet).
    pub fn epoch(&self) -> Option<Epoch> {
        self.epoch
    }

    /// `SET` of the epoch key to [`EPOCH_CLAIM`](crate::EPOCH_CLAIM) `NX PX 2^40` at `now` on
    /// the node's clock ([`ProofRead::Claim`](crate::ProofRead::Claim)); returns whether it
    /// wrote.
    pub fn claim_epoch(&mut self, now: Duration) -> bool {
        if self.epoch.is_some() || self.claimed.is_some() {
            return false;
        }
        self.claimed = Some(u64::try_from(now.as_millis()).unwrap_or(u64::MAX));
        true
    }

    /// What `GET` of the epoch key reads: its value as the node stores it.
    pub fn epoch_value(&self) -> Option<Vec<u8>> {
        let number = self.epoch.map(|epoch| match epoch {
            Epoch::Trusted => b"0".to_vec(),
            // A memory that began at 0 ms reads 1 ms later, never as `0` (trusted).
            Epoch::Began(ms) => ms.max(1).to_string().into_bytes(),
        });
        number.or_else(|| self.claimed.map(|_| crate::EPOCH_CLAIM.to_vec()))
    }

    /// What `PTTL` of the epoch key reads at `now` on the node's clock: what is left of a
    /// claim's TTL, `-1` for a number (no TTL), `-2` when there is no key.
    pub fn epoch_pttl(&self, now: Duration) -> i64 {
        match (self.epoch, self.claimed) {
            (Some(_), _) => -1,
            (None, Some(at)) => {
                let age = u64::try_from(now.as_millis())
                    .unwrap_or(u64::MAX)
                    .saturating_sub(at);
                let left = crate::EPOCH_CLAIM_TTL_MS.saturating_sub(age);
                i64::try_from(left).unwrap_or(i64::MAX)
            }
            (None, None) => -2,
        }
    }

    /// Runs a script as Redis would, from its `KEYS` and `ARGV`; `None` for arguments the engine
    /// never sends (answered as an error).
    fn script(
        &mut self,
        now: Duration,
        script: Script,
        keys: &[Vec<u8>],
        token: &[u8],
        numbers: &[u64],
    ) -> Option<Reply> {
        let number = |i: usize| numbers.get(i).copied();
        let reply = match script {
            Script::Acquire => self.acquire(now, keys, token, number(0)?),
            Script::AcquireChecked => {
                // The lock keys, then the epoch and its identity.
                let locks = keys.get(..keys.len().checked_sub(2)?)?;
                match self.young(now, number(1)?) {
                    Some(young) => young,
                    None => {
                        self.mark(now, number(3), number(1)?);
                        self.acquire(now, locks, token, number(0)?)
                    }
                }
            }
            Script::AcquireFenced => {
                let n = keys.len().checked_sub(2)? / 2;
                let (locks, fences) = (keys.get(..n)?, keys.get(n + 2..)?);
                let max_ttl = number(1)?;
                if max_ttl > 0 {
                    if let Some(young) = self.young(now, max_ttl) {
                        return Some(young);
                    }
                    self.mark(now, number(3), max_ttl);
                }
                self.acquire_fenced(now, locks, fences, token, number(0)?)
            }
            Script::Release => {
                let (mut released, mut foreign) = (0, 0);
                for key in keys {
                    match self.alive(key, now) {
                        Some((held, _)) if held == token => {
                            self.keys.remove(key);
                            released += 1;
                        }
                        Some(_) => foreign += 1,
                        None => {}
                    }
                }
                Reply::Int(if foreign > 0 {
                    -1
                } else {
                    i64::from(released > 0)
                })
            }
            Script::Extend => {
                let ttl_ms = number(0)?;
                if !self.all_ours(now, keys, token) {
                    return Some(Reply::Int(0));
                }
                let expires = now.saturating_add(Duration::from_millis(ttl_ms));
                for key in keys {
                    if let Some((_, at)) = self.keys.get_mut(key) {
                        *at = self.extend.expiry(*at, expires);
                    }
                }
                Reply::Int(1)
            }
            Script::Trust => {
                self.trust();
                Reply::Int(1)
            }
            Script::CommitFence => {
                let n = keys.len() / 2;
                let (locks, fences) = (keys.get(..n)?, keys.get(n..)?);
                let (fence, retention) = (number(0)?, number(1)?);
                if !self.all_ours(now, locks, token) {
                    return Some(Reply::Int(0));
                }
                self.raise_fences(now, fences, fence, retention);
                Reply::Int(1)
            }
        };
        Some(reply)
    }

    /// A fenced acquisition without its restart check: 0 (taken), or one more than the largest
    /// of the `fences` counters and the node's clock in ms.
    fn acquire_fenced(
        &mut self,
        now: Duration,
        locks: &[Vec<u8>],
        fences: &[Vec<u8>],
        token: &[u8],
        ttl_ms: u64,
    ) -> Reply {
        match self.acquire(now, locks, token, ttl_ms) {
            Reply::Int(1) => {
                let time = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
                let seen = fences.iter().filter_map(|k| self.counter(now, k)).max();
                let v = seen.unwrap_or(0).max(time);
                Reply::Int(i64::try_from(v.saturating_add(1)).unwrap_or(i64::MAX))
            }
            refused => refused,
        }
    }

    /// Raises each of the `fences` counters to at least `fence` (never lowers it), alive for
    /// `retention_ms` (as the node's fence fault, if any, says otherwise).
    fn raise_fences(&mut self, now: Duration, fences: &[Vec<u8>], fence: u64, retention_ms: u64) {
        let expires = now.saturating_add(Duration::from_millis(retention_ms));
        for key in fences {
            let raised = match self.fence_fault {
                None => self.counter(now, key).unwrap_or(0).max(fence),
                Some(FenceFault::IgnoreCommits) => continue,
                Some(FenceFault::CommitsGoBackwards) => fence.saturating_sub(1_000_000),
            };
            let value = raised.to_string().into_bytes();
            self.keys.insert(key.clone(), (value, expires));
        }
    }

    /// `SET` every key or none (the acquire scripts' core): 1 set, 0 taken.
    fn acquire(&mut self, now: Duration, keys: &[Vec<u8>], token: &[u8], ttl_ms: u64) -> Reply {
        if keys.iter().any(|k| self.alive(k, now).is_some()) {
            return Reply::Int(0);
        }
        for key in keys {
            self.set(key, token, now, ttl_ms);
        }
        Reply::Int(1)
    }

    fn all_ours(&self, now: Duration, keys: &[Vec<u8>], token: &[u8]) -> bool {
        keys.iter()
            .all(|k| self.alive(k, now).is_some_and(|(held, _)| held == token))
    }

    /// A fence counter's value at `now`, if it is alive and a number.
    fn counter(&self, now: Duration, key: &[u8]) -> Option<u64> {
        let (value, _) = self.alive(key, now)?;
        std::str::from_utf8(value).ok()?.parse().ok()
    }

    /// Every fence counter of `key` alive at `now` (for checkers).
    pub fn fence_counter(&self, now: Duration, key: &[u8]) -> Option<u64> {
        self.counter(now, &fence_key(key))
    }

    /// Sets a fence counter (a negative control: a counter that went backwards).
    pub fn set_fence_counter(&mut self, key: &[u8], value: u64) {
        self.keys.insert(
            fence_key(key),
            (value.to_string().into_bytes(), Duration::MAX),
        );
    }

    /// A checked script's marker write ([`EPOCH_MARKER_PREFIX`](crate::EPOCH_MARKER_PREFIX)),
    /// once the node may vote: the marker of `nonce` (`ARGV[5]`, when given) for `ttl_ms`.
    fn mark(&mut self, now: Duration, nonce: Option<u64>, ttl_ms: u64) {
        if let Some(nonce) = nonce {
            let key = crate::identity::MarkerKey::of(nonce);
            self.set(key.as_bytes(), b"1", now, ttl_ms);
        }
    }

    /// Runs a native proof's marker write at `now`: `args` is `SET <marker> 1 PX <ms>`
    /// ([`NodeBatch::read_args`](crate::NodeBatch::read_args)). Whether it wrote (`false`: a
    /// write of another shape).
    pub fn run_marker_write(&mut self, now: Duration, args: &[&[u8]]) -> bool {
        let [b"SET", key, value, b"PX", ms] = args else {
            return false;
        };
        let Some(ms) = std::str::from_utf8(ms).ok().and_then(|ms| ms.parse().ok()) else {
            return false;
        };
        if !key.starts_with(crate::EPOCH_MARKER_PREFIX) {
            return false;
        }
        self.set(key, value, now, ms);
        true
    }

    /// Whether `key` exists at `now` (`EXISTS`): a seal's read of its proof's marker.
    pub fn exists(&self, now: Duration, key: &[u8]) -> bool {
        self.alive(key, now).is_some()
    }

    fn set(&mut self, key: &[u8], token: &[u8], now: Duration, ttl_ms: u64) {
        let expires = now.saturating_add(Duration::from_millis(ttl_ms));
        self.keys.insert(key.to_vec(), (token.to_vec(), expires));
    }

    /// Runs `command` at `now` on the node's clock and returns Redis's answer.
    pub fn run(&mut self, now: Duration, command: &Command) -> Reply {
        let dialect = self.dialect;
        self.run_form(now, command, command.redis_form_on(&dialect))
    }

    /// Runs `command` as a connection that vouches for the node's memory sends it: a
    /// restart-checked acquisition without its check ([`Command::redis_form_vouched`]).
    pub fn run_vouched(&mut self, now: Duration, command: &Command) -> Reply {
        let dialect = self.dialect;
        self.run_form(now, command, command.redis_form_vouched(&dialect))
    }

    /// Runs `command` in `form` (one of its forms, as a driver picked it for this node, e.g.
    /// through a [`NodeBatch`](crate::NodeBatch)) at `now` on the node's clock.
    pub fn run_form(&mut self, now: Duration, command: &Command, form: RedisForm<'_>) -> Reply {
        self.keys.retain(|_, (_, expires)| now < *expires);
        let token = command.spec().token().as_bytes();
        match form {
            RedisForm::MSetEx { spec, ttl_ms } => {
                let keys: Vec<Vec<u8>> = spec.keys().map(<[u8]>::to_vec).collect();
                self.acquire(now, &keys, token, ttl_ms)
            }
            // DELIFEQ / DELEX per key, then a GET for each that answered 0.
            RedisForm::DeleteEach { spec, .. } => {
                let parts: Vec<Reply> = spec
                    .keys()
                    .map(|key| match self.alive(key, now) {
                        Some((held, _)) if held == token => {
                            self.keys.remove(key);
                            Reply::Int(1)
                        }
                        _ => RedisForm::missed_delete(self.holder(now, key), token),
                    })
                    .collect();
                form.answer(&parts)
            }
            // SET key token IFEQ token PX ttl per key: the TTL is set exactly.
            RedisForm::SetIfEqEach { spec, ttl_ms } => {
                let expires = now.saturating_add(Duration::from_millis(ttl_ms));
                let parts: Vec<Reply> = spec
                    .keys()
                    .map(|key| match self.keys.get_mut(key) {
                        Some((held, at)) if held.as_slice() == token && now < *at => {
                            *at = expires;
                            Reply::Ok
                        }
                        _ => Reply::Nil,
                    })
                    .collect();
                form.answer(&parts)
            }
            // MULTI; PEXPIRE key ttl GT per key; GET key per key; EXEC: every live key's TTL is
            // raised (whoever holds it), then each key is read.
            RedisForm::ExpireGtEach { spec, ttl_ms } => {
                let expires = now.saturating_add(Duration::from_millis(ttl_ms));
                let mut parts: Vec<Reply> = spec
                    .keys()
                    .map(|key| match self.keys.get_mut(key) {
                        Some((_, at)) => {
                            let raised = self.extend.expiry(*at, expires);
                            let changed = raised != *at;
                            *at = raised;
                            Reply::Int(i64::from(changed))
                        }
                        None => Reply::Int(0),
                    })
                    .collect();
                for key in spec.keys() {
                    let value = self.token(key).map_or(PartValue::Nil, PartValue::Bytes);
                    parts.push(PartRead::Held.reply(value, token));
                }
                form.answer(&parts)
            }
            // MULTI; SET NX PX (or MSETEX); ZSCORE per fence counter; TIME; EXEC.
            RedisForm::FencedSet { spec, ttl_ms, .. } => {
                let keys: Vec<Vec<u8>> = spec.keys().map(<[u8]>::to_vec).collect();
                let fences: Vec<Vec<u8>> = keys.iter().map(|k| fence_key(k)).collect();
                self.acquire_fenced(now, &keys, &fences, token, ttl_ms)
            }
            // MULTI; ZADD GT and PEXPIRE per fence counter; GET per key; EXEC: the counters
            // are raised whoever holds the keys.
            RedisForm::CommitFenceEach { spec, fence, .. } => {
                let keys: Vec<Vec<u8>> = spec.keys().map(<[u8]>::to_vec).collect();
                let fences: Vec<Vec<u8>> = keys.iter().map(|k| fence_key(k)).collect();
                self.raise_fences(now, &fences, fence, crate::FENCE_RETENTION_MS);
                let mut parts = vec![Reply::Int(1); 2 * keys.len()];
                for key in &keys {
                    let value = self
                        .holder(now, key)
                        .map_or(PartValue::Nil, PartValue::Bytes);
                    parts.push(PartRead::Held.reply(value, token));
                }
                form.answer(&parts)
            }
            RedisForm::SetTrusted => {
                self.trust();
                // `MSET` empties the identity: the next proof adopts the node's, whatever the
                // node evicted (an empty stamp was written on purpose, never evicted).
                self.stamped = Some(Vec::new());
                form.answer(&[Reply::Ok])
            }
            RedisForm::Unsupported | RedisForm::OnCluster | RedisForm::CrossSlot => {
                form.answer(&[])
            }
            RedisForm::Set { .. } | RedisForm::Script { .. } => self.run_scripted(now, form),
        }
    }

    /// Runs the plain `SET NX PX` or a script.
    fn run_scripted(&mut self, now: Duration, form: RedisForm<'_>) -> Reply {
        match form {
            // SET key token NX PX ttl: OK, or nil when the key exists.
            RedisForm::Set { key, token, ttl_ms } => {
                if self.alive(key, now).is_some() {
                    Reply::Nil
                } else {
                    self.set(key, token, now, ttl_ms);
                    Reply::Ok
                }
            }
            RedisForm::Script { script, keys, args } => {
                let mut all: Vec<Vec<u8>> = Vec::with_capacity(keys.len());
                keys.for_each(|key| all.push(key.to_vec()));
                let numbers: Vec<u64> = args.numbers().collect();
                self.script(now, script, &all, args.token, &numbers)
                    .unwrap_or(Reply::Error(NodeErrorKind::Other))
            }
            _ => Reply::Error(NodeErrorKind::Protocol),
        }
    }
}

/// The fence counter's key of lock key `key`.
fn fence_key(key: &[u8]) -> Vec<u8> {
    [crate::command::FENCE_KEY_PREFIX, key].concat()
}

/// A lease on resource `r` with a fixed token, valid until `valid_until`, with `fence`: for
/// tests of code that holds a [`Lease`](crate::Lease) without running an acquisition.
pub fn lease(valid_until: std::time::Instant, fence: Option<u64>) -> crate::Lease {
    let token = crate::Token::new(b"test-token".to_vec()).unwrap_or_else(|_| unreachable!());
    let spec = crate::LockSpec::new(b"", [b"r".to_vec()], token).unwrap_or_else(|_| unreachable!());
    crate::Lease {
        spec,
        ttl: Duration::from_secs(10),
        valid_until,
        votes: Vec::new(),
        attempts: 1,
        fence,
    }
}
