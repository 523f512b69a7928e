//! Many locks over one set of nodes: [`Multiplexer`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use rand_core::CryptoRng;

use crate::command::Op;
use crate::config::Config;
use crate::error::{ConfigError, StartError};
use crate::event::{LockEvent, LockOutput, Trigger, WakeReason};
use crate::extend::{ExtendFailure, ExtendOutcome};
use crate::id::RequestId;
use crate::lease::Lease;
use crate::lifecycle::Lifecycle;
use crate::output::Transmit;
use crate::release::ReleaseReport;
use crate::renewal::LossCause;
use crate::reply::Reply;
use crate::request::LockRequest;
use crate::transmits::Transmits;
use crate::validity::Ttl;

/// How long a release channel stays subscribed after its last waiter left: a client that locks
/// the same key again and again under contention is then already listening when its next round
/// loses, instead of missing the release that comes while its `SUBSCRIBE` is on the way.
pub const LINGER: Duration = Duration::from_secs(2);

/// How a lock of a [`Multiplexer`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Acquire it ([`Lifecycle::acquire`]).
    Acquire,
    /// Resume it by its token ([`Lifecycle::resume`]).
    Resume,
    /// Release it by its token ([`Lifecycle::release_by_token`]).
    ReleaseByToken,
}

/// A map keyed by ids (of locks, of lifecycles) that the driver and the engine's generator
/// draw, never untrusted input: a fixed, unkeyed hash, several times cheaper than the std's
/// SipHash (see [`LockId`]).
pub(crate) type IdMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// A lock of a [`Multiplexer`], named by the driver (any value not in use). The multiplexer
/// hashes it with a fixed, unkeyed hash: a driver never takes lock ids from untrusted input
/// (a counter, as `redlock-redis` keeps, or a random draw), or crafted ids could collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockId(u64);

impl LockId {
    /// The lock named `id`.
    pub fn new(id: u64) -> Self {
        Self(id)
    }

    /// The number it was made from.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// Requests for one node, to send in one write (a pipeline), in order. At most one request per
/// lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Index of the node.
    pub node: usize,
    /// The requests, in the order they must run.
    pub transmits: Transmits,
}

/// What a subscriber connection to release notices must do (on every node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `SUBSCRIBE` to this channel.
    Subscribe(Vec<u8>),
    /// `UNSUBSCRIBE` from this channel.
    Unsubscribe(Vec<u8>),
}

/// The next wake-up of a [`Multiplexer`]: when, and why (for traces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout {
    /// When to call [`Multiplexer::handle_timeout`].
    pub at: Instant,
    /// Why.
    pub reason: TimeoutReason,
}

/// Why a [`Multiplexer`] wants to wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutReason {
    /// A lock's lifecycle waits for this instant.
    Lock {
        /// Which lock.
        lock: LockId,
        /// Why the lifecycle waits.
        reason: WakeReason,
    },
    /// A release channel lingered long enough to be unsubscribed.
    Linger,
    /// A held lock without auto-extension reaches the end of its validity: its loss is
    /// reported then ([`LockEvent::Lost`] with [`LossCause::Expired`]).
    Expiry {
        /// Which lock.
        lock: LockId,
    },
}

#[derive(Debug)]
struct Slot {
    lifecycle: Lifecycle,
    /// The instant the lifecycle waits for (it is in `timers` with it).
    wait: Option<(Instant, WakeReason)>,
    /// Whether a caller's extension is in the lifecycle, not yet answered.
    extending: bool,
    /// Caller extensions waiting for that one to end, in call order.
    extends: VecDeque<Duration>,
    /// The channels it listens on while it pauses between rounds.
    listening: Vec<Vec<u8>>,
    /// `release` was called: a `Released` event is owed.
    releasing: bool,
    /// Its release woke this client's locks waiting for its keys
    /// ([`release`](Multiplexer::release)): the nodes' notice of it is no news to them.
    woke_own: bool,
    /// The release channels its release freed, while that release woke this client's waiters.
    freed: Vec<Vec<u8>>,
    /// The lock its release handed its keys to ([`release`](Multiplexer::release)), if any.
    handed: Option<LockId>,
    /// The nodes its release went to counting on this client's own subscriber
    /// ([`Command::heard_by_own_subscriber`](crate::Command::heard_by_own_subscriber)): each
    /// one's answer wakes this client's waiters in place of the notice it did not send.
    echoes: smallvec::SmallVec<[usize; 8]>,
    /// Abandoned: its events are nobody's business.
    silent: bool,
    /// The end of validity it is in `expiries` with (held without auto-extension).
    expiry: Option<Instant>,
}

#[derive(Debug, Default)]
struct NodeQueue {
    queued: VecDeque<Transmit>,
    /// Locks (by the lifecycle's own id) with a request in flight on this node. A vector: it
    /// holds a few entries, and keeps its capacity, so steady traffic allocates nothing here.
    busy: Vec<u64>,
}

#[derive(Debug, Default)]
struct Channel {
    waiters: BTreeSet<LockId>,
    /// When the last waiter left (the channel lingers), or `None` while someone waits.
    idle_since: Option<Instant>,
}

/// Many locks over one set of nodes: the part of a client driver that is not I/O.
///
/// A [`Multiplexer`] owns every [`Lifecycle`] of a client, keyed by a [`LockId`] the driver
/// chooses, and decides what goes to each node and when:
/// - **One FIFO per node.** Every request a lifecycle wants sent is queued on its node. At most
///   one request per lock is in flight on a node, so a lock's release can never overtake its own
///   acquire there (a late `SET` would otherwise leave the key for its TTL); requests of other
///   locks behind it are not held up. A request that never left the queue is dropped when a
///   newer one of its lock makes it pointless (a newer extension; a newer round, which also
///   drops the clean-up of the round it replaces), so a slow node's queue stays a few requests
///   per lock however fast the lock's rounds and renewals run elsewhere.
/// - **One write per node.** [`poll_transmit`](Multiplexer::poll_transmit) hands out, per node,
///   everything that may go now as one [`Batch`] (one pipeline, one round trip), across locks.
/// - **No stalled queue.** A request queued behind another of its lock goes out in the first
///   batch after that one's reply (or transport error) is handed in: the driver needs no timer
///   of its own for it.
/// - **Timers and notices.** The next wake-up is the earliest of every lifecycle's
///   ([`poll_timeout`](Multiplexer::poll_timeout), with its reason), and release notices are
///   bookkept here: which channels the nodes' subscriber connections must listen on
///   ([`poll_subscription`](Multiplexer::poll_subscription)), and whom a notice wakes. A
///   release of a held lock hands its keys to one of the client's locks waiting for them,
///   without a node's word: the longest-waiting one that pauses starts its round at once, the
///   others keep pausing (a later release hands the keys on; a node's notice still wakes them
///   all). That round queues behind the release on a node unless the releasing lock still has
///   a request in flight there (a round that then loses recovers at the nodes' notice or its
///   pause).
/// - **Caller extensions in order.** Each [`extend`](Multiplexer::extend) call is answered by
///   exactly one [`LockEvent::Extended`] with [`Trigger::Caller`], in call order: calls are never
///   merged, so an outcome never answers a later call.
///
/// # What it never does
/// It never reads a clock, never sleeps, never does I/O, and never counts a vote: rounds,
/// quorum, validity, retries and renewal stay with each lock's [`Lifecycle`]. What it decides
/// is the bookkeeping listed above — the order and batching of requests on each node, the
/// order of caller extensions (answering those that can no longer run with
/// [`ExtendFailure::Expired`]), which locks a release notice wakes — and one thing about a
/// lock: one held without auto-extension is lost ([`LossCause::Expired`]) once the
/// `valid_until` of its lease has passed. It never panics on an unknown or stale id: a reply
/// for a lock that is gone only frees its node's slot.
///
/// # Driving it
/// Inputs are the caller's (`start`, `trust`, `extend`,
/// `release`, `abandon`, `detach`) and the world's (`handle_reply`, `handle_timeout`,
/// `handle_notice`). After any input, drain the outputs: send every
/// [`poll_transmit`](Multiplexer::poll_transmit) batch, pass on every
/// [`poll_event`](Multiplexer::poll_event), apply every
/// [`poll_subscription`](Multiplexer::poll_subscription); then sleep until
/// [`poll_timeout`](Multiplexer::poll_timeout) or the next input. Every request handed out must
/// come back exactly once through `handle_reply` — its reply, or an error reply when the
/// transport failed or timed out — or its node stays busy for that lock.
///
/// ```
/// use std::collections::HashMap;
/// use std::time::{Duration, Instant};
/// use rand_core::SeedableRng;
/// use redlock_core::{Config, LockEvent, LockId, LockRequest, Multiplexer, Op, Reply, Start};
///
/// let mut nodes: Vec<HashMap<Vec<u8>, Vec<u8>>> = vec![HashMap::new(); 3];
/// let rng = chacha20::ChaCha8Rng::seed_from_u64(7);
/// let mut mux = Multiplexer::new(Config::new(3)?, rng);
/// let now = Instant::now(); // the driver's clock; the engine never reads one
/// // Two locks at once: each node gets one write carrying both acquisitions.
/// mux.start(now, LockId::new(1), Start::Acquire, &LockRequest::new("a", Duration::from_secs(10)))?;
/// mux.start(now, LockId::new(2), Start::Acquire, &LockRequest::new("b", Duration::from_secs(10)))?;
/// let mut held = Vec::new();
/// while held.len() < 2 {
///     while let Some(batch) = mux.poll_transmit() {
///         assert_eq!(batch.transmits.len(), 2);
///         for transmit in batch.transmits {
///             let node = &mut nodes[batch.node];
///             let key = transmit.command.spec().keys().next().unwrap().to_vec();
///             let token = transmit.command.spec().token().as_bytes().to_vec();
///             let reply = match transmit.command.op() {
///                 Op::SetIfAbsent if !node.contains_key(&key) => { node.insert(key, token); Reply::Ok }
///                 _ => Reply::Nil,
///             };
///             mux.handle_reply(now, transmit.id, reply);
///         }
///     }
///     while let Some((lock, event)) = mux.poll_event() {
///         if let LockEvent::Acquired(_) = event { held.push(lock) }
///     }
/// }
/// assert!(nodes.iter().all(|node| node.len() == 2));
/// # Ok::<(), redlock_core::StartError>(())
/// ```
#[derive(Debug)]
pub struct Multiplexer<R> {
    config: Config,
    rng: R,
    /// Never iterated where the order could show (a count, a minimum), so a hash map keeps a
    /// run deterministic; unlike a B-tree it keeps its capacity when it empties.
    locks: IdMap<LockId, Slot>,
    /// The lifecycle's own id (in every request id) to the driver's.
    routes: IdMap<u64, LockId>,
    nodes: Vec<NodeQueue>,
    /// Where the next batch search starts (so no node starves the others).
    next_node: usize,
    timers: BTreeSet<(Instant, LockId)>,
    /// When each held lock without auto-extension reaches the end of its validity.
    expiries: BTreeSet<(Instant, LockId)>,
    events: VecDeque<(LockId, LockEvent)>,
    channels: BTreeMap<Vec<u8>, Channel>,
    changes: VecDeque<Change>,
    /// How many changes [`poll_subscription`](Multiplexer::poll_subscription) handed out.
    handed: u64,
    /// Per node, through which handed change its subscriber confirmed every subscription
    /// ([`handle_subscribed`](Multiplexer::handle_subscribed)); `None` without a live one.
    subscribed: Vec<Option<u64>>,
    /// A release channel is built here to be looked up (no allocation per request).
    scratch: Vec<u8>,
    /// How many locks listen (kept as they start and stop, not counted per call).
    listening: usize,
}

impl<R: CryptoRng> Multiplexer<R> {
    /// A multiplexer for `config`'s nodes; `rng` makes the locks' tokens, ids and jitter.
    pub fn new(config: Config, rng: R) -> Self {
        let nodes = (0..config.nodes()).map(|_| NodeQueue::default()).collect();
        let subscribed = vec![None; config.nodes()];
        Self {
            config,
            rng,
            locks: IdMap::default(),
            routes: IdMap::default(),
            nodes,
            next_node: 0,
            timers: BTreeSet::new(),
            expiries: BTreeSet::new(),
            events: VecDeque::new(),
            channels: BTreeMap::new(),
            changes: VecDeque::new(),
            handed: 0,
            subscribed,
            scratch: Vec::new(),
            listening: 0,
        }
    }

    /// The settings every lock runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The lifecycle of lock `id`, while it runs.
    pub fn lock(&self, id: LockId) -> Option<&Lifecycle> {
        self.locks.get(&id).map(|slot| &slot.lifecycle)
    }

    /// How many locks run.
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// How many locks listen for release notices (they pause between rounds of a contended
    /// acquisition).
    pub fn listening(&self) -> usize {
        self.listening
    }

    /// Whether no lock runs.
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// Whether nothing is left to do: no lock runs, no request is queued or in flight.
    pub fn is_idle(&self) -> bool {
        self.locks.is_empty() && !self.has_requests()
    }

    /// The requests queued and not yet sent, on every node.
    pub fn queued(&self) -> impl Iterator<Item = &RequestId> + '_ {
        self.nodes
            .iter()
            .flat_map(|node| node.queued.iter().map(|transmit| &transmit.id))
    }

    /// Whether a request is queued or in flight on some node (a detached lock's too).
    pub fn has_requests(&self) -> bool {
        self.nodes
            .iter()
            .any(|node| !node.queued.is_empty() || !node.busy.is_empty())
    }

    /// Starts lock `id` the way `start` says ([`Lifecycle::acquire`], [`Lifecycle::resume`],
    /// [`Lifecycle::release_by_token`]); a release by token is answered like a
    /// [`release`](Multiplexer::release).
    pub fn start(
        &mut self,
        now: Instant,
        id: LockId,
        start: Start,
        request: &LockRequest,
    ) -> Result<(), StartError> {
        self.insert(now, id, |config, rng| match start {
            Start::Acquire => Lifecycle::acquire(now, config, request, rng),
            Start::Resume => Lifecycle::resume(now, config, request, rng),
            Start::ReleaseByToken => Lifecycle::release_by_token(now, config, request, rng),
        })?;
        if let (Start::ReleaseByToken, Some(slot)) = (start, self.locks.get_mut(&id)) {
            slot.releasing = true;
        }
        Ok(())
    }

    /// Starts marking every node trusted as lock `id` ([`Lifecycle::trust`]).
    pub fn trust(&mut self, now: Instant, id: LockId) -> Result<(), StartError> {
        self.insert(now, id, |config, rng| {
            Ok(Lifecycle::trust(now, config, rng))
        })
    }

    /// Extends held lock `id` to `ttl` from now. Answered by exactly one
    /// [`LockEvent::Extended`] with [`Trigger::Caller`] for `id`, after the answers of earlier
    /// calls (calls run one after another, never merged). A lock that is not running is
    /// answered at once with [`ExtendFailure::Expired`]. A TTL the engine does not accept is an
    /// error, and nothing changes.
    pub fn extend(&mut self, now: Instant, id: LockId, ttl: Duration) -> Result<(), ConfigError> {
        Ttl::for_config(now, &self.config, ttl)?;
        let Some(slot) = self.locks.get_mut(&id) else {
            self.events.push_back((id, expired()));
            return Ok(());
        };
        if slot.releasing {
            self.events.push_back((id, expired()));
            return Ok(());
        }
        if slot.extending {
            slot.extends.push_back(ttl);
            return Ok(());
        }
        slot.lifecycle.extend(now, ttl)?;
        slot.extending = true;
        self.drive(now, id);
        Ok(())
    }

    /// Releases lock `id` ([`Lifecycle::release`]): answered by one [`LockEvent::Released`]
    /// (an empty report when nothing had to be sent, or the lock is not running). Caller
    /// extensions not yet answered are answered with [`ExtendFailure::Expired`]. If the lock
    /// was held, its keys are handed to one of the client's locks waiting for them: the
    /// longest-waiting one (the lowest [`LockId`]) that pauses between rounds starts its next
    /// round at once, with no jitter, and the others are left to their pauses, to be handed
    /// the keys by a later release or woken by a node's notice. When none of them pauses
    /// (each has a round out), they all wake as at a release notice
    /// ([`handle_notice`](Multiplexer::handle_notice)), each once however many of its
    /// channels the release frees.
    pub fn release(&mut self, now: Instant, id: LockId) {
        let Some(slot) = self.locks.get_mut(&id) else {
            self.events
                .push_back((id, LockEvent::Released(empty_report())));
            return;
        };
        if slot.releasing {
            return;
        }
        slot.releasing = true;
        // A held lock's keys: one of this client's own locks waiting for them starts now,
        // without the node's notice (its round queues behind this release on every node where
        // this lock has nothing else in flight). Nothing is looked up while no lock of this
        // client waits.
        let held = self.listening > 0 && slot.lifecycle.lease().is_some();
        let freed = match slot.lifecycle.spec() {
            Some(spec) if held => Self::released_channels(&self.config, spec),
            _ => Vec::new(),
        };
        slot.woke_own = held;
        slot.lifecycle.release(now);
        self.answer_extends(id);
        self.drive(now, id);
        let handed = self.hand_over(now, &freed);
        if let Some(slot) = self.locks.get_mut(&id) {
            slot.freed = freed;
            slot.handed = handed;
        }
    }

    /// Hands the `freed` channels of a release of this client to the longest-waiting of its
    /// locks on them that pauses between rounds (its round starts now); wakes them all, as a
    /// notice would, if none pauses. The lock it handed them to, if any.
    ///
    /// Waking them all at once, each within its jitter window, made every waiter but the one
    /// that wins run a round into the new holder's keys (a refused `SET` on every node per
    /// waiter and hand-over) and sleep past the next release: one client's 8 threads on one
    /// key handed the lock over about a third as often.
    fn hand_over(&mut self, now: Instant, freed: &[Vec<u8>]) -> Option<LockId> {
        let waiters = waiters_on(&self.channels, freed.iter().map(Vec::as_slice));
        let handed = waiters.iter().copied().find(|lock| {
            self.locks
                .get_mut(lock)
                .is_some_and(|slot| slot.lifecycle.handle_handover(now))
        });
        match handed {
            Some(lock) => self.drive(now, lock),
            None => self.wake(now, waiters),
        }
        handed
    }

    /// Gives up lock `id` if it is still being acquired or resumed: an acquisition releases
    /// what its requests may have set, a resumption just ends (the lock belongs to whoever
    /// handed it over). A held lock is left alone. Nothing is answered.
    pub fn abandon(&mut self, now: Instant, id: LockId) {
        let Some(slot) = self.locks.get_mut(&id) else {
            return;
        };
        if slot.lifecycle.lease().is_some() || slot.releasing {
            return;
        }
        slot.silent = true;
        // Requests still queued never left: dropping them changes nothing on the nodes (a
        // resumption's unsent extensions never lengthen a key; an unsent `SET` writes nothing).
        // A queued release stays: it may clean up an earlier round's key under that round's
        // own token, which the acquisition's final release (the current round's) would miss.
        let origin = slot.lifecycle.id();
        for node in &mut self.nodes {
            node.queued
                .retain(|t| t.id.origin().lock() != origin || t.command.op() == Op::DeleteIfEquals);
        }
        slot.lifecycle.release(now);
        self.drive(now, id);
    }

    /// Stops driving lock `id` without releasing it: no more extensions, no events; its keys
    /// stay on the nodes until their TTL. Requests already queued or in flight still run.
    pub fn detach(&mut self, now: Instant, id: LockId) {
        if let Some(slot) = self.locks.remove(&id) {
            self.forget(now, id, slot);
        }
        self.events.retain(|(lock, _)| *lock != id);
    }

    /// The lock request `id` is for, while that lock runs.
    pub fn lock_of(&self, id: RequestId) -> Option<LockId> {
        self.routes.get(&id.origin().lock()).copied()
    }

    /// Hands in the reply to request `id` (or an error reply for a transport that failed or
    /// timed out). Frees the node for that lock's next request; a reply for a lock that is gone,
    /// a stale or a duplicate one changes nothing else.
    pub fn handle_reply(&mut self, now: Instant, id: RequestId, reply: Reply) {
        let origin = id.origin().lock();
        if let Some(node) = self.nodes.get_mut(id.node())
            && let Some(at) = node.busy.iter().position(|lock| *lock == origin)
        {
            node.busy.swap_remove(at);
        }
        let Some(&lock) = self.routes.get(&origin) else {
            return;
        };
        if let Some(slot) = self.locks.get_mut(&lock) {
            // A release that counted on this client's own subscriber: the node's answer
            // stands in for the notice the subscriber would have heard with it.
            let echo = reply == Reply::Int(1)
                && slot
                    .echoes
                    .iter()
                    .position(|node| *node == id.node())
                    .map(|at| slot.echoes.swap_remove(at))
                    .is_some();
            // A release that handed its keys to one waiter: that one alone (the others were
            // left to their pauses, and would only run into its keys).
            let (handed, waiters) = match (echo, slot.handed) {
                (false, _) => (None, BTreeSet::new()),
                (true, Some(handed)) => (Some(handed), BTreeSet::new()),
                (true, None) => (
                    None,
                    waiters_on(&self.channels, slot.freed.iter().map(Vec::as_slice)),
                ),
            };
            slot.lifecycle.handle_reply(now, id, reply);
            self.drive(now, lock);
            self.wake(now, handed.into_iter().chain(waiters));
        }
    }

    /// Lets every deadline up to `now` pass. Harmless at any time.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(at, lock)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            if let Some(slot) = self.locks.get_mut(&lock) {
                slot.wait = None;
                slot.lifecycle.handle_timeout(now);
                self.drive(now, lock);
            }
        }
        while let Some(&(at, lock)) = self.expiries.first() {
            if at > now {
                break;
            }
            self.expiries.pop_first();
            self.expire(now, lock);
        }
        self.sweep(now);
    }

    /// Lock `id`'s validity may have ended: reports its loss if it did (an extension may have
    /// moved it since), or waits for the new end.
    fn expire(&mut self, now: Instant, id: LockId) {
        let Some(slot) = self.locks.get_mut(&id) else {
            return;
        };
        slot.expiry = None;
        if !slot.lifecycle.is_held() || slot.releasing {
            return;
        }
        let Some(until) = slot.lifecycle.lease().map(Lease::valid_until) else {
            return;
        };
        if until > now {
            slot.expiry = Some(until);
            self.expiries.insert((until, id));
            return;
        }
        slot.lifecycle.mark_lost();
        if !slot.silent {
            let lost = LockEvent::Lost {
                cause: LossCause::Expired,
                votes: Vec::new(),
            };
            self.events.push_back((id, lost));
        }
    }

    /// A release notice came on `channel`: every lock pausing for it starts its next round
    /// early ([`Lifecycle::handle_wake`]). Harmless for a channel nobody waits on.
    pub fn handle_notice(&mut self, now: Instant, channel: &[u8]) {
        self.wake_waiters(now, [channel]);
    }

    /// Wakes every lock waiting on any of `channels`, each once (a lock listens on every key's
    /// channel of its request, and on a cluster on each vote's too).
    fn wake_waiters<'c>(&mut self, now: Instant, channels: impl IntoIterator<Item = &'c [u8]>) {
        let waiters = waiters_on(&self.channels, channels);
        self.wake(now, waiters);
    }

    /// Wakes each lock of `waiters` that is still there.
    fn wake(&mut self, now: Instant, waiters: impl IntoIterator<Item = LockId>) {
        for lock in waiters {
            if let Some(slot) = self.locks.get_mut(&lock) {
                slot.lifecycle.handle_wake(now);
                self.drive(now, lock);
            }
        }
    }

    /// Node `node`'s subscriber connection holds every subscription of the first `through`
    /// changes [`poll_subscription`](Multiplexer::poll_subscription) handed out (count them
    /// with [`subscriptions_handed`](Multiplexer::subscriptions_handed) as each is applied):
    /// the node confirmed each `SUBSCRIBE` and `UNSUBSCRIBE` among them, or the connection
    /// subscribed to every [`channels`](Multiplexer::channels) after them. Hand it in only
    /// once the node confirmed (never when the command is merely sent), and call
    /// [`handle_subscriber_ended`](Multiplexer::handle_subscriber_ended) as soon as the
    /// connection is lost.
    ///
    /// While the node's subscriber is known to hold every channel in use, nothing else pending,
    /// a release of a held lock that goes to the node counts on its own subscriber hearing it
    /// ([`Command::heard_by_own_subscriber`](crate::Command::heard_by_own_subscriber)): it
    /// announces itself there only where another connection listens too, and this client's
    /// own waiters are woken without a word from the node: at the release (the one it hands
    /// its keys to, see [`release`](Multiplexer::release)), and again when the node answers
    /// that it deleted the keys, where its notice would have reached them. A
    /// confirmation that came before the connection died and before the driver heard of it
    /// can let one release skip a
    /// node's notice that another client's waiter subscribed to in between: that waiter then
    /// runs to the end of its retry pause, as it does for a notice lost any other way. A
    /// stale or unknown node changes nothing.
    pub fn handle_subscribed(&mut self, node: usize, through: u64) {
        if let Some(subscribed) = self.subscribed.get_mut(node) {
            *subscribed = Some(through.min(self.handed));
        }
    }

    /// Node `node`'s subscriber connection is gone: releases announce themselves there to
    /// every listener again, until [`handle_subscribed`](Multiplexer::handle_subscribed).
    pub fn handle_subscriber_ended(&mut self, node: usize) {
        if let Some(subscribed) = self.subscribed.get_mut(node) {
            *subscribed = None;
        }
    }

    /// How many changes [`poll_subscription`](Multiplexer::poll_subscription) has handed out:
    /// the number of the last one, for [`handle_subscribed`](Multiplexer::handle_subscribed).
    pub fn subscriptions_handed(&self) -> u64 {
        self.handed
    }

    /// Whether `node`'s subscriber holds every channel in use: it confirmed every change
    /// handed out, and none waits to be.
    fn hears_every_channel(&self, node: usize) -> bool {
        self.changes.is_empty() && self.subscribed.get(node) == Some(&Some(self.handed))
    }

    /// Marks `transmit`, a request leaving for a node whose subscriber holds every channel
    /// in use, if it is the release of a held lock that woke this client's own waiters
    /// ([`release`](Multiplexer::release)), announced on channels that are all in use. Never a
    /// release by token, nor a lost round's clean-up: their notices are the only word this
    /// client's waiters get.
    fn mark_if_heard(&mut self, transmit: &mut Transmit) {
        if !transmit.command.notifies() {
            return;
        }
        let Some(slot) = self
            .routes
            .get(&transmit.id.origin().lock())
            .and_then(|lock| self.locks.get_mut(lock))
            .filter(|slot| slot.releasing && slot.woke_own)
        else {
            return;
        };
        let (channels, scratch) = (&self.channels, &mut self.scratch);
        let heard = transmit.command.spec().keys().all(|key| {
            crate::command::write_released_channel(key, scratch);
            channels.contains_key(scratch.as_slice())
        });
        if heard {
            transmit.command.mark_heard_by_own_subscriber();
            slot.echoes.push(transmit.id.node());
        }
    }

    /// The next batch to send: for one node, every queued request whose lock has nothing in
    /// flight there, in queue order. Call until `None` after every input.
    pub fn poll_transmit(&mut self) -> Option<Batch> {
        let count = self.nodes.len();
        // The nodes from `next_node` on, then wrapping round (no division per node: this runs
        // after every input, most often to find every queue empty).
        let mut next = self.next_node;
        for _ in 0..count {
            let index = if next < count { next } else { 0 };
            next = index + 1;
            if self.nodes[index].queued.is_empty() {
                continue;
            }
            let heard = !self.channels.is_empty() && self.hears_every_channel(index);
            let mut transmits = Transmits::new();
            // One pass over the queue, in order; what stays goes round to the back (the queue
            // keeps its buffer).
            for _ in 0..self.nodes[index].queued.len() {
                let node = &mut self.nodes[index];
                let Some(mut transmit) = node.queued.pop_front() else {
                    break;
                };
                // `busy` also holds the locks taken into this batch: one request per lock.
                let lock = transmit.id.origin().lock();
                if node.busy.contains(&lock) {
                    node.queued.push_back(transmit);
                } else {
                    node.busy.push(lock);
                    if heard {
                        self.mark_if_heard(&mut transmit);
                    }
                    transmits.push(transmit);
                }
            }
            if !transmits.is_empty() {
                self.next_node = next;
                return Some(Batch {
                    node: index,
                    transmits,
                });
            }
        }
        None
    }

    /// The next thing that happened to a lock. Call until `None` after every input.
    pub fn poll_event(&mut self) -> Option<(LockId, LockEvent)> {
        self.events.pop_front()
    }

    /// The next change to the release channels every node's subscriber connection listens on.
    /// Call until `None` after every input.
    pub fn poll_subscription(&mut self) -> Option<Change> {
        let change = self.changes.pop_front()?;
        self.handed += 1;
        Some(change)
    }

    /// Every release channel to listen on now: for a subscriber connection that (re)starts.
    pub fn channels(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.channels.keys().map(Vec::as_slice)
    }

    /// When to call [`handle_timeout`](Multiplexer::handle_timeout) next, and why; `None`
    /// while nothing is scheduled.
    pub fn poll_timeout(&self) -> Option<Timeout> {
        let lock = self.timers.first().map(|&(at, lock)| Timeout {
            at,
            reason: TimeoutReason::Lock {
                lock,
                reason: self
                    .locks
                    .get(&lock)
                    .and_then(|slot| slot.wait)
                    .map_or(WakeReason::RetryPause, |(_, reason)| reason),
            },
        });
        let linger = self.linger_ends().map(|at| Timeout {
            at,
            reason: TimeoutReason::Linger,
        });
        let expiry = self.expiries.first().map(|&(at, lock)| Timeout {
            at,
            reason: TimeoutReason::Expiry { lock },
        });
        [lock, linger, expiry]
            .into_iter()
            .flatten()
            .min_by_key(|t| t.at)
    }

    /// [`poll_timeout`](Multiplexer::poll_timeout)'s instant alone, without finding out why:
    /// for a shell that only sets its timer (each call of `poll_timeout` looks a lock up).
    pub fn next_timeout_at(&self) -> Option<Instant> {
        let lock = self.timers.first().map(|&(at, _)| at);
        let expiry = self.expiries.first().map(|&(at, _)| at);
        [lock, self.linger_ends(), expiry]
            .into_iter()
            .flatten()
            .min()
    }

    /// When the first idle release channel stops lingering.
    fn linger_ends(&self) -> Option<Instant> {
        let idle = self.channels.values().filter_map(|entry| entry.idle_since);
        idle.min().map(|since| since + LINGER)
    }

    /// Makes lock `id`'s lifecycle with `make` and starts driving it.
    fn insert(
        &mut self,
        now: Instant,
        id: LockId,
        make: impl FnOnce(&Config, &mut R) -> Result<Lifecycle, ConfigError>,
    ) -> Result<(), StartError> {
        if self.locks.contains_key(&id) {
            return Err(StartError::LockIdInUse { id: id.get() });
        }
        let lifecycle = make(&self.config, &mut self.rng)?;
        let origin = lifecycle.id();
        if self.routes.contains_key(&origin) {
            // Two lifecycles drew the same 64-bit id: refuse rather than mix their replies.
            return Err(StartError::DrawnTwice);
        }
        self.routes.insert(origin, id);
        self.locks.insert(
            id,
            Slot {
                lifecycle,
                wait: None,
                extending: false,
                extends: VecDeque::new(),
                listening: Vec::new(),
                releasing: false,
                woke_own: false,
                freed: Vec::new(),
                handed: None,
                echoes: smallvec::SmallVec::new(),
                silent: false,
                expiry: None,
            },
        );
        self.drive(now, id);
        Ok(())
    }

    /// Drains lock `id`'s outputs into the node queues, the timers and the events.
    fn drive(&mut self, now: Instant, id: LockId) {
        loop {
            let Some(slot) = self.locks.get_mut(&id) else {
                return;
            };
            match slot.lifecycle.poll_output(now) {
                LockOutput::Send(transmit) => {
                    if let Some(node) = self.nodes.get_mut(transmit.id.node()) {
                        if transmit.command.op() == Op::ExpireIfEquals {
                            // A newer extension supersedes one of the same lock still queued
                            // behind a slow node (it has timed out there): the queue of a
                            // stuck node never grows with every renewal.
                            let lock = transmit.id.origin().lock();
                            node.queued.retain(|t| {
                                t.id.origin().lock() != lock || t.command.op() != Op::ExpireIfEquals
                            });
                        }
                        if transmit.command.op() == Op::SetIfAbsent {
                            supersede_unsent_round(&mut node.queued, transmit.id.origin().lock());
                        }
                        node.queued.push_back(transmit);
                    }
                }
                LockOutput::Wait { at, reason } => {
                    if slot.wait.map(|(t, _)| t) != Some(at) {
                        if let Some((old, _)) = slot.wait {
                            self.timers.remove(&(old, id));
                        }
                        self.timers.insert((at, id));
                    }
                    slot.wait = Some((at, reason));
                    if reason == WakeReason::RetryPause && slot.listening.is_empty() {
                        self.listen(id);
                    }
                    return;
                }
                LockOutput::Event(event) => {
                    let silent = slot.silent;
                    self.on_event(now, id, event, silent);
                }
                LockOutput::Idle => {
                    if let Some((old, _)) = slot.wait.take() {
                        self.timers.remove(&(old, id));
                    }
                    if slot.lifecycle.has_ended() {
                        let slot = self.locks.remove(&id);
                        if let Some(slot) = slot {
                            if slot.releasing && !slot.silent {
                                // Nothing had to be sent: the release is over at once.
                                self.events
                                    .push_back((id, LockEvent::Released(empty_report())));
                            }
                            self.forget(now, id, slot);
                        }
                    }
                    return;
                }
            }
        }
    }

    fn on_event(&mut self, now: Instant, id: LockId, event: LockEvent, silent: bool) {
        let Some(slot) = self.locks.get_mut(&id) else {
            return;
        };
        match &event {
            LockEvent::Acquired(lease) => {
                if !slot.lifecycle.is_auto_extended() {
                    // Its loss is reported when its validity ends, like a renewed lock's.
                    slot.expiry = Some(lease.valid_until());
                    self.expiries.insert((lease.valid_until(), id));
                }
                self.unlisten(now, id);
            }
            LockEvent::NotAcquired(_) => self.unlisten(now, id),
            LockEvent::Released(_) => slot.releasing = false,
            LockEvent::Extended {
                trigger: Trigger::Caller,
                ..
            } => {
                slot.extending = false;
                if let Some(ttl) = slot.extends.pop_front() {
                    slot.extending = true;
                    // The TTL passed the check when it was queued, against the same config.
                    let _ = slot.lifecycle.extend(now, ttl);
                }
            }
            LockEvent::Extended { .. } | LockEvent::Lost { .. } | LockEvent::Trusted(_) => {}
        }
        if !silent {
            self.events.push_back((id, event));
        }
    }

    /// Answers the extensions of lock `id` that will never run (it is being released).
    fn answer_extends(&mut self, id: LockId) {
        let Some(slot) = self.locks.get_mut(&id) else {
            return;
        };
        let owed = slot.extends.len() + usize::from(slot.extending);
        slot.extends.clear();
        slot.extending = false;
        for _ in 0..owed {
            self.events.push_back((id, expired()));
        }
    }

    /// Lock `id` is gone: its timer, route and channels go too.
    fn forget(&mut self, now: Instant, id: LockId, slot: Slot) {
        if let Some((at, _)) = slot.wait {
            self.timers.remove(&(at, id));
        }
        if let Some(at) = slot.expiry {
            self.expiries.remove(&(at, id));
        }
        self.routes.remove(&slot.lifecycle.id());
        self.leave(now, id, &slot.listening);
    }

    /// The channels a release of `spec`'s keys is announced on: each key's, and on a node that
    /// is one of several votes over one cluster, each vote's own key's.
    fn released_channels(config: &Config, spec: &crate::LockSpec) -> Vec<Vec<u8>> {
        let mut voted: Vec<crate::Slot> = (0..config.nodes())
            .filter_map(|node| config.key_slot(node))
            .collect();
        voted.sort_unstable();
        voted.dedup();
        let mut channels: Vec<Vec<u8>> = spec.released_channels().collect();
        for key_slot in voted {
            channels.extend(spec.in_slot(key_slot).released_channels());
        }
        channels
    }

    fn listen(&mut self, id: LockId) {
        let Some(slot) = self.locks.get_mut(&id) else {
            return;
        };
        let Some(spec) = slot.lifecycle.spec() else {
            return;
        };
        slot.listening = Self::released_channels(&self.config, spec);
        self.listening += 1;
        for channel in &slot.listening {
            let entry = self.channels.entry(channel.clone()).or_insert_with(|| {
                self.changes.push_back(Change::Subscribe(channel.clone()));
                Channel::default()
            });
            entry.waiters.insert(id);
            entry.idle_since = None;
        }
    }

    fn unlisten(&mut self, now: Instant, id: LockId) {
        let Some(slot) = self.locks.get_mut(&id) else {
            return;
        };
        let channels = std::mem::take(&mut slot.listening);
        self.leave(now, id, &channels);
    }

    /// Lock `id` stops waiting on `channels`; a channel left without waiters lingers from `now`.
    fn leave(&mut self, now: Instant, id: LockId, channels: &[Vec<u8>]) {
        if !channels.is_empty() {
            self.listening = self.listening.saturating_sub(1);
        }
        for channel in channels {
            if let Some(entry) = self.channels.get_mut(channel) {
                entry.waiters.remove(&id);
                if entry.waiters.is_empty() {
                    entry.idle_since = Some(now);
                }
            }
        }
    }

    /// Unsubscribes the channels that lingered for [`LINGER`].
    fn sweep(&mut self, now: Instant) {
        let changes = &mut self.changes;
        self.channels.retain(|channel, entry| {
            let expired = entry
                .idle_since
                .is_some_and(|since| now.saturating_duration_since(since) >= LINGER);
            if expired {
                changes.push_back(Change::Unsubscribe(channel.clone()));
            }
            !expired
        });
    }
}

/// Every lock waiting on any of `channels`, each once.
fn waiters_on<'c>(
    listened: &BTreeMap<Vec<u8>, Channel>,
    channels: impl IntoIterator<Item = &'c [u8]>,
) -> BTreeSet<LockId> {
    channels
        .into_iter()
        .filter_map(|channel| listened.get(channel))
        .flat_map(|entry| entry.waiters.iter().copied())
        .collect()
}

fn expired() -> LockEvent {
    LockEvent::Extended {
        outcome: ExtendOutcome::NotExtended {
            reason: ExtendFailure::Expired,
            votes: Vec::new(),
        },
        trigger: Trigger::Caller,
    }
}

fn empty_report() -> ReleaseReport {
    ReleaseReport { nodes: Vec::new() }
}

/// Drops a lost round of lock `lock` that never left `queued`: its `SET` (a newer round's
/// supersedes it) and the releases queued after it, which clean up keys that `SET` never
/// wrote. A release queued before it stays: it cleans up a round whose `SET` was sent. So a
/// node slower than the rounds keeps at most one round and one clean-up of a lock queued,
/// however many rounds are lost while it answers.
fn supersede_unsent_round(queued: &mut VecDeque<Transmit>, lock: u64) {
    let Some(at) = queued
        .iter()
        .position(|t| t.id.origin().lock() == lock && t.command.op() == Op::SetIfAbsent)
    else {
        return;
    };
    let mut index = 0;
    queued.retain(|t| {
        let keep = index < at
            || t.id.origin().lock() != lock
            || !matches!(t.command.op(), Op::SetIfAbsent | Op::DeleteIfEquals);
        index += 1;
        keep
    });
}

#[cfg(test)]
#[path = "multiplexer_tests.rs"]
mod tests;
