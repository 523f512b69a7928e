//! Restart-aware voting on connections that already proved their node's memory: a node that
//! loses its memory while such a connection is open must still refuse to vote — the node's
//! invalidation push voids the proof (`redlock_core::MemoryWatch`). Each case has its negative
//! control: with a deaf watch (the push ignored), the same loss lets a second holder in.
//!
//! In every case client A holds `res` on all five nodes; three of them then lose their memory
//! (`FLUSHALL`, or the epoch key and the lock key evicted under `maxmemory`) while client B's
//! connections to them are open and proven (B locked and released another resource first).

use std::time::Duration;

use redlock_core::{NodeErrorKind, RetryPolicy, SitOutCause, Vote, WatchFault};

use super::adapter::{Adapter, HeldLock, Options};
use crate::Servers;
use redlock_local::RedisServer;

const TTL: Duration = Duration::from_secs(30);
/// The nodes that lose their memory: a majority of five.
const LOSERS: [usize; 3] = [0, 1, 2];

/// How a node loses its memory.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// `FLUSHALL` (the process stays up, every key is gone).
    Flush,
    /// Under `maxmemory` with `allkeys-random`, the epoch key and the lock key evicted.
    Eviction,
}

impl Loss {
    /// The causes a refusal after this loss may name: the epoch missing, or (for an eviction)
    /// the eviction count moved; on a proven connection also its proof ended, when the push
    /// came in while its acquisition was on its way.
    fn causes(self, rival: Rival) -> &'static [SitOutCause] {
        use SitOutCause::{Changed, Eviction, NoEpoch};
        match (self, rival) {
            (Self::Flush, Rival::Untracked) => &[NoEpoch],
            (Self::Flush, _) => &[NoEpoch, Changed],
            (Self::Eviction, Rival::Untracked) => &[NoEpoch, Eviction],
            (Self::Eviction, _) => EVICTION_CAUSES,
        }
    }
}

/// What a refusal names after an eviction under a proven connection (the epoch evicted, the
/// count moved, or the proof ended by the push).
pub(super) const EVICTION_CAUSES: &[SitOutCause] = &[
    SitOutCause::NoEpoch,
    SitOutCause::Eviction,
    SitOutCause::Changed,
];

/// How the rival client B watches the nodes' memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rival {
    /// As every client does by default: proven once per connection, under client tracking.
    Tracked,
    /// With a safeguard switched off (negative controls).
    Faulty(WatchFault),
    /// Without client tracking (`client_tracking(false)`): the checked script on every
    /// acquisition.
    Untracked,
    /// Tracked, with every node declared never to run `SWAPDB` (`swapdb_never_runs_on`).
    NeverSwapped,
}

impl Rival {
    /// The safeguard switched off, for a negative control.
    pub(super) fn fault(self) -> Option<WatchFault> {
        match self {
            Self::Faulty(fault) => Some(fault),
            Self::Tracked | Self::Untracked | Self::NeverSwapped => None,
        }
    }
}

pub(super) fn client<A: Adapter>(nodes: &Servers, rival: Rival) -> A {
    let options = Options {
        retry: Some(RetryPolicy::once()),
        memory_watch_fault: rival.fault(),
        untracked: rival == Rival::Untracked,
        swapdb_never_runs_on: match rival {
            Rival::NeverSwapped => (0..nodes.servers().len()).collect(),
            _ => Vec::new(),
        },
        ..Options::default()
    };
    A::build(&nodes.urls(), &options)
        .unwrap_or_else(|err| panic!("{}: build failed: {err}", A::NAME))
}

/// Waits until A's lock call has been answered by every node (it returns on a quorum): a late
/// acquisition running after the loss would bring the epoch back.
pub(super) fn wait_for_every_node<A: Adapter>(nodes: &Servers, held: &A::Lock) {
    let token = held.token();
    let everywhere = super::scenarios::eventually(Duration::from_secs(5), || {
        nodes.count_holding("res", &token) == 5
    });
    assert!(everywhere, "A holds res on every node");
}

fn lose(server: &RedisServer, loss: Loss) {
    match loss {
        Loss::Flush => {
            let _: () = redis::cmd("FLUSHALL")
                .query(&mut server.client())
                .expect("FLUSHALL");
        }
        Loss::Eviction => evict(server, &[redlock_core::EPOCH_KEY, b"res"], "allkeys-random"),
    }
    assert!(!server.exists("res"), "the lock key is gone");
    assert!(
        !server.exists(redlock_core::EPOCH_KEY),
        "the epoch key is gone"
    );
}

/// Fills `server` under a small `maxmemory` with `policy` until every key of `gone` was
/// evicted, then lifts the limit (the filler stays: no flush, which would push on its own).
/// The filler has no TTL: under a `volatile-*` policy only keys with one (lock keys) go. Past
/// the limit with nothing left to evict, a write is refused (OOM): ignored.
pub(super) fn evict(server: &RedisServer, gone: &[&[u8]], policy: &str) {
    let mut conn = server.client();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(&mut conn)
        .expect("INFO");
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    config_set(server, "maxmemory-policy", policy);
    config_set(server, "maxmemory", &(used + 2 * 1024 * 1024).to_string());
    let filler = vec![b'x'; 1024];
    let mut batch = 0;
    loop {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for i in 0..100 {
            pipe.cmd("SET")
                .arg(format!("filler:{batch}:{i}"))
                .arg(&filler)
                .ignore();
        }
        let _: redis::RedisResult<()> = pipe.query(&mut conn);
        batch += 1;
        let left = gone.iter().filter(|key| server.exists(**key)).count();
        if left == 0 {
            break;
        }
        assert!(
            batch < 10_000,
            "{left} key(s) never evicted after {batch}×100 writes"
        );
    }
    config_set(server, "maxmemory", "0");
}

/// `CONFIG SET name value` on `server`.
pub(super) fn config_set(server: &RedisServer, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(&mut server.client())
        .expect("CONFIG SET");
}

/// B's try for `res` after the loss, with A still inside its validity.
fn rival_try<A: Adapter>(loss: Loss, rival: Rival) -> Outcome<A> {
    rival_try_after::<A>(rival, |_| {}, |server| lose(server, loss))
}

/// B's try for `res` while A is still valid, after each of the [`LOSERS`] went through
/// `lose`: the losers are set up with `prepare` first, then B's connections prove every node
/// (and stay open) and A takes `res`.
pub(super) fn rival_try_after<A: Adapter>(
    rival: Rival,
    prepare: impl Fn(&RedisServer),
    lose: impl Fn(&RedisServer),
) -> Outcome<A> {
    let nodes = Servers::start(5);
    for node in LOSERS {
        prepare(&nodes.servers()[node]);
    }
    let holder: A = client(&nodes, Rival::Tracked);
    let rival: A = client(&nodes, rival);
    rival.lock("warm-up", TTL).expect("warm-up").release();
    let held = holder.lock("res", TTL).expect("A locks res");
    wait_for_every_node::<A>(&nodes, &held);
    for node in LOSERS {
        lose(&nodes.servers()[node]);
    }
    let rival_try = rival.try_lock("res", TTL);
    assert!(held.is_valid(), "A is still inside its validity");
    (held, rival_try)
}

/// The round failed, and every node of `losers` that answered refused to vote, naming one of
/// `causes` (the round is decided once three nodes said no, so some may not have answered yet).
fn assert_ineligible<A: Adapter>(
    err: &redlock_redis::Error,
    losers: &[usize],
    causes: &[SitOutCause],
) {
    let failure = err
        .failure()
        .unwrap_or_else(|| panic!("{}: {err}", A::NAME));
    let (mut ineligible, mut unchecked) = (0, 0);
    for &node in losers {
        match failure.nodes[node].result {
            Vote::Ineligible { cause, .. } => {
                assert!(
                    causes.contains(&cause),
                    "{}: node {node} names {cause:?}, not one of {causes:?}: {err}",
                    A::NAME
                );
                ineligible += 1;
            }
            Vote::Pending => {}
            // Untracked, a node that runs no script cannot check (a mix of servers): it says
            // so, and the round may be decided before the others answer.
            Vote::Failed(NodeErrorKind::NoSafeForm)
                if super::scenarios::scripting_denied_somewhere() =>
            {
                unchecked += 1;
            }
            other => panic!(
                "{}: node {node} lost its memory, answered {other:?}: {err}",
                A::NAME
            ),
        }
    }
    assert!(
        ineligible + unchecked > 0,
        "{}: no node refused to vote: {err}",
        A::NAME
    );
}

/// Where no node runs scripts, an untracked client cannot check a node's memory on each
/// acquisition, and says so: every node that answered fails with `NoSafeForm`.
pub(super) fn expect_untracked_needs_scripts<A: Adapter>() {
    let nodes = Servers::start(3);
    let err = client::<A>(&nodes, Rival::Untracked)
        .try_lock("res", TTL)
        .err()
        .unwrap_or_else(|| panic!("{}: untracked, without scripts, it locked", A::NAME));
    let failure = err.failure().unwrap_or_else(|| panic!("{err}"));
    assert!(
        failure.nodes.iter().all(|n| matches!(
            n.result,
            Vote::Failed(NodeErrorKind::NoSafeForm) | Vote::Pending
        )),
        "{}: {err}",
        A::NAME
    );
}

/// The outcome of a case: A's lock, and B's try while A is still valid.
pub(super) type Outcome<A> = (
    <A as Adapter>::Lock,
    Result<<A as Adapter>::Lock, redlock_redis::Error>,
);

/// B was refused, by the nodes that lost their memory, naming one of `causes`.
fn expect_refused<A: Adapter>(outcome: Outcome<A>, case: &str, causes: &[SitOutCause]) {
    expect_refused_by::<A>(outcome, case, &LOSERS, causes);
}

/// B was refused, by the nodes of `losers`, naming one of `causes` ([`assert_ineligible`]).
pub(super) fn expect_refused_by<A: Adapter>(
    (held, rival): Outcome<A>,
    case: &str,
    losers: &[usize],
    causes: &[SitOutCause],
) {
    match rival {
        Err(err) => assert_ineligible::<A>(&err, losers, causes),
        Ok(_) => panic!("{}: a second holder of res after {case}", A::NAME),
    }
    held.release();
}

/// A negative control: B got the lock A still holds — two valid holders at once.
pub(super) fn expect_second_holder<A: Adapter>((held, rival): Outcome<A>, case: &str) {
    let second = rival
        .unwrap_or_else(|err| panic!("{}: {case} should let a second holder in: {err}", A::NAME));
    assert!(
        held.is_valid() && second.is_valid(),
        "two valid holders at once"
    );
    second.release();
    held.release();
}

fn assert_refused<A: Adapter>(loss: Loss) {
    expect_refused::<A>(
        rival_try::<A>(loss, Rival::Tracked),
        &format!("{loss:?} on 3 nodes"),
        loss.causes(Rival::Tracked),
    );
}

fn assert_caught<A: Adapter>(loss: Loss) {
    let case = format!("with the pushes ignored, {loss:?}");
    expect_second_holder::<A>(rival_try::<A>(loss, Rival::Faulty(WatchFault::Deaf)), &case);
}

/// `FLUSHALL` on three nodes under B's proven connections: they refuse to vote.
pub fn a_flushed_node_refuses_a_proven_connection<A: Adapter>() {
    assert_refused::<A>(Loss::Flush);
}

/// Negative control: the same, with the pushes ignored — B gets the lock A still holds.
pub fn a_flushed_node_votes_for_a_deaf_connection<A: Adapter>() {
    assert_caught::<A>(Loss::Flush);
}

/// The epoch key evicted under `maxmemory` (with A's lock key) on three nodes: they refuse.
pub fn an_evicted_epoch_refuses_a_proven_connection<A: Adapter>() {
    assert_refused::<A>(Loss::Eviction);
}

/// Negative control: the same eviction with the pushes ignored lets a second holder in.
pub fn an_evicted_epoch_votes_for_a_deaf_connection<A: Adapter>() {
    assert_caught::<A>(Loss::Eviction);
}

/// A client that connects only after three nodes were flushed never gets their votes early.
pub fn a_fresh_connection_to_a_flushed_node_never_votes_early<A: Adapter>() {
    let nodes = Servers::start(5);
    let holder: A = client(&nodes, Rival::Tracked);
    let held = holder.lock("res", TTL).expect("A locks res");
    wait_for_every_node::<A>(&nodes, &held);
    for node in LOSERS {
        lose(&nodes.servers()[node], Loss::Flush);
    }
    let fresh: A = client(&nodes, Rival::Tracked);
    match fresh.try_lock("res", TTL) {
        // A new connection proves first: the checked script (or the native proof) finds no
        // epoch.
        Err(err) => assert_ineligible::<A>(&err, &LOSERS, &[SitOutCause::NoEpoch]),
        Ok(_) => panic!("{}: a fresh client got res from flushed nodes", A::NAME),
    }
    held.release();
}

/// Scenario 5 of issue 21: B proves every node, then trusts them over those connections (a new
/// deployment); A takes `res`; another application fills three nodes until `res` and the epoch
/// are evicted; B asks while A is still valid. B's own trust write ended its proof (the node
/// pushes it back to B, and B's batch saw the trust go out), so B proves again and the
/// evicted nodes refuse.
fn trust_then_eviction<A: Adapter>(rival: Rival) -> Outcome<A> {
    let nodes = Servers::start(5);
    let holder: A = client(&nodes, Rival::Tracked);
    let rival: A = client(&nodes, rival);
    rival.lock("warm-up", TTL).expect("warm-up").release();
    rival.trust_every_node(5, "B trusts every node");
    let held = holder.lock("res", TTL).expect("A locks res");
    wait_for_every_node::<A>(&nodes, &held);
    for node in LOSERS {
        lose(&nodes.servers()[node], Loss::Eviction);
    }
    let rival_try = rival.try_lock("res", TTL);
    assert!(held.is_valid(), "A is still inside its validity");
    (held, rival_try)
}

/// A trust over proven connections, then the epoch and the lock key evicted: refused.
pub fn a_trust_ends_the_proof_of_its_connection<A: Adapter>() {
    expect_refused::<A>(
        trust_then_eviction::<A>(Rival::Tracked),
        "a trust and an eviction",
        EVICTION_CAUSES,
    );
}

/// Negative control: tracking as before (`NOLOOP`, a trust keeps the proof) — the trust write
/// stopped the node telling B about the epoch, and B gets the lock A still holds.
pub fn a_trust_keeps_the_proof_without_optin<A: Adapter>() {
    expect_second_holder::<A>(
        trust_then_eviction::<A>(Rival::Faulty(WatchFault::NoLoop)),
        "with NOLOOP tracking, a trust and an eviction",
    );
}

/// How long to wait at most for the nodes' LRU clock (1 s a tick) to tell two accesses apart.
const LRU_WAIT: Duration = Duration::from_secs(30);

/// `OBJECT IDLETIME key` on `conn` in seconds (it does not touch the key).
fn idle(conn: &mut redis::Connection, key: &[u8]) -> u64 {
    redis::cmd("OBJECT")
        .arg("IDLETIME")
        .arg(key)
        .query(conn)
        .expect("OBJECT IDLETIME")
}

/// Waits until `key` has been idle for at least one LRU tick on every loser: anything touched
/// from now on is more recently used. Observed, not slept, so a loaded machine only waits longer.
fn wait_until_colder(nodes: &Servers, key: &[u8]) {
    let cold = super::scenarios::eventually(LRU_WAIT, || {
        LOSERS
            .iter()
            .all(|&node| idle(&mut nodes.servers()[node].client(), key) >= 1)
    });
    assert!(cold, "{} never went idle", String::from_utf8_lossy(key));
}

/// Resources of the rival's call beside `res`, with names long enough that the call needs
/// about 160 KB of the node's memory to be read: far more than the room left under
/// `maxmemory`.
fn long_resources() -> Vec<String> {
    (0..40)
        .map(|i| format!("{i:02}{}", "x".repeat(3_990)))
        .collect()
}

/// Fills `server` with keys written after every other key, then sets `maxmemory` 64 KB above
/// what it uses, `allkeys-lru` with every key sampled: the next command that needs more
/// evicts the least recently used keys first — the epoch, then `res`. One connection does it
/// all (a new connection takes memory of its own), and nothing runs on the node after this
/// until the rival's call.
fn brim(server: &RedisServer) {
    let mut conn = server.client();
    let mut config = |name: &str, value: String| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut conn)
            .expect("CONFIG SET");
    };
    config("maxmemory-policy", "allkeys-lru".into());
    config("maxmemory-samples", "64".into());
    let (epoch, res) = (
        idle(&mut conn, redlock_core::EPOCH_KEY),
        idle(&mut conn, b"res"),
    );
    assert!(
        epoch > res && res >= 1,
        "the epoch ({epoch} s idle) is colder than res ({res} s), res than the filler to come"
    );
    let mut pipe = redis::pipe();
    for i in 0..128 {
        pipe.cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(vec![b'x'; 4_096])
            .ignore();
    }
    let _: () = pipe.query(&mut conn).expect("filler");
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(&mut conn)
        .expect("INFO");
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used + 64 * 1024)
        .query(&mut conn)
        .expect("CONFIG SET");
    let present: u32 = redis::cmd("EXISTS")
        .arg(redlock_core::EPOCH_KEY)
        .arg("res")
        .query(&mut conn)
        .expect("EXISTS");
    assert_eq!(
        present, 2,
        "the epoch and res are still there (used {used})"
    );
}

/// Scenario 4 of issue 21: B's connections are proven; A holds `res`; three nodes are at
/// their memory limit, so B's own call makes them evict their coldest keys — the epoch and
/// `res` — just before running it. No other command reaches those nodes in between.
fn self_eviction<A: Adapter>(rival_kind: Rival) -> Outcome<A> {
    let nodes = Servers::start(5);
    let holder: A = client(&nodes, Rival::Tracked);
    let rival: A = client(&nodes, rival_kind);
    // Both prove every node now: later calls are plain commands that leave the epoch cold.
    holder.lock("warm-up-a", TTL).expect("warm-up").release();
    rival.lock("warm-up-b", TTL).expect("warm-up").release();
    wait_until_colder(&nodes, redlock_core::EPOCH_KEY);
    let held = holder.lock("res", TTL).expect("A locks res");
    wait_for_every_node::<A>(&nodes, &held);
    // A's sealed acquisition read the epoch with `res`: let the epoch go cold again, then make
    // `res` the more recently used of the two.
    wait_until_colder(&nodes, redlock_core::EPOCH_KEY);
    for node in LOSERS {
        let _: Option<Vec<u8>> = redis::cmd("GET")
            .arg("res")
            .query(&mut nodes.servers()[node].client())
            .expect("GET res");
    }
    wait_until_colder(&nodes, b"res");
    for node in LOSERS {
        brim(&nodes.servers()[node]);
    }
    let mut request = redlock_core::LockRequest::new("res", TTL);
    for resource in long_resources() {
        request = request.resource(resource);
    }
    let untracked = rival_kind == Rival::Untracked;
    let rival_try = rival.acquire(request);
    let mut evictions = Vec::new();
    for node in LOSERS {
        // The coldest keys went first: the epoch (gone, or stamped again by the checked script
        // that found it missing) and A's `res`, at least.
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut nodes.servers()[node].client())
            .expect("INFO");
        let evicted: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("evicted_keys:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("evicted_keys");
        evictions.push(evicted);
    }
    // Untracked, B sends nothing to a node that runs no script (a mix of servers).
    let everywhere = !(untracked && super::scenarios::scripting_denied_somewhere());
    let evicted = |n: &u64| *n >= 2;
    assert!(
        if everywhere {
            evictions.iter().all(evicted)
        } else {
            evictions.iter().any(evicted)
        },
        "B's call evicted {evictions:?} keys on the losers"
    );
    assert!(held.is_valid(), "A is still inside its validity");
    (held, rival_try)
}

/// An eviction that B's own call sets off is pushed to B before that call's reply: the
/// evicted nodes' votes do not count.
pub fn an_eviction_set_off_by_the_rivals_own_call_refuses_it<A: Adapter>() {
    expect_refused::<A>(
        self_eviction::<A>(Rival::Tracked),
        "an eviction set off by its own call",
        EVICTION_CAUSES,
    );
}

/// Negative control: tracking with `NOLOOP`, the eviction B's own call sets off is never
/// pushed to B, and B gets the lock A still holds.
pub fn an_eviction_set_off_by_the_rivals_own_call_is_unheard_with_noloop<A: Adapter>() {
    expect_second_holder::<A>(
        self_eviction::<A>(Rival::Faulty(WatchFault::NoLoop)),
        "with NOLOOP tracking, an eviction set off by B's own call",
    );
}

/// The lock failed, and every node that answered refused to vote (`case`: what the nodes went
/// through).
pub(super) fn expect_every_node_refuses<A: Adapter>(
    result: Result<A::Lock, redlock_redis::Error>,
    case: &str,
) {
    let err = result
        .err()
        .unwrap_or_else(|| panic!("{}: {case}, the nodes voted at once", A::NAME));
    let failure = err.failure().unwrap_or_else(|| panic!("{err}"));
    assert!(
        failure
            .nodes
            .iter()
            .all(|n| matches!(n.result, Vote::Ineligible { .. } | Vote::Pending)),
        "{}: {case}, every node refuses: {err}",
        A::NAME
    );
}

/// A node that lost its memory sits out the longest TTL, then votes again — through the
/// checked script where scripts run, through the node's own epoch claim where none do: never
/// stuck refusing. Three nodes flushed under proven connections, `max_ttl` 1 s.
pub fn a_flushed_node_votes_again_after_the_longest_ttl<A: Adapter>() {
    const MAX_TTL: Duration = Duration::from_secs(1);
    let nodes = Servers::start(3);
    let options = Options {
        retry: Some(RetryPolicy::once()),
        max_ttl: Some(MAX_TTL),
        ..Options::default()
    };
    let client = A::build(&nodes.urls(), &options)
        .unwrap_or_else(|err| panic!("{}: build failed: {err}", A::NAME));
    client.lock("warm-up", MAX_TTL).expect("warm-up").release();
    let flushed = std::time::Instant::now();
    for server in nodes.servers() {
        lose(server, Loss::Flush);
    }
    expect_every_node_refuses::<A>(client.try_lock("res", MAX_TTL), "flushed");
    // The first proof after the flush stamps (or claims) the epoch by the node's clock, so no
    // node votes before the longest TTL has passed since the flush.
    expect_votes_again(&client, flushed, MAX_TTL);
}

/// The nodes vote for `client` again, but not before `max_ttl` has passed since `since` (when
/// they lost their memory): never stuck refusing, never early.
pub(super) fn expect_votes_again<A: Adapter>(
    client: &A,
    since: std::time::Instant,
    max_ttl: Duration,
) {
    let again = super::scenarios::eventually(max_ttl * 10, || {
        client
            .try_lock("res", max_ttl)
            .map(HeldLock::release)
            .is_ok()
    });
    let waited = since.elapsed();
    assert!(
        waited + Duration::from_millis(50) >= max_ttl,
        "{}: voted again after {waited:?}",
        A::NAME
    );
    assert!(again, "{}: the nodes never voted again", A::NAME);
}

/// Without client tracking (`client_tracking(false)`, for nodes behind a proxy), every
/// acquisition is checked on its own by the acquire script: the flushed, evicted, trusted-then-
/// evicted and self-evicted nodes of the cases above all refuse B. Where no node runs scripts
/// there is no such check, and an untracked client's lock fails clearly (`NoSafeForm`).
pub fn an_untracked_client_checks_every_acquisition<A: Adapter>() {
    if super::scenarios::scripting_denied() {
        expect_untracked_needs_scripts::<A>();
        return;
    }
    for loss in [Loss::Flush, Loss::Eviction] {
        let case = format!("untracked, {loss:?}");
        let causes = loss.causes(Rival::Untracked);
        expect_refused::<A>(rival_try::<A>(loss, Rival::Untracked), &case, causes);
    }
    let untracked = Loss::Eviction.causes(Rival::Untracked);
    let trust = trust_then_eviction::<A>(Rival::Untracked);
    expect_refused::<A>(trust, "untracked, a trust and an eviction", untracked);
    let own = self_eviction::<A>(Rival::Untracked);
    expect_refused::<A>(
        own,
        "untracked, an eviction set off by its own call",
        untracked,
    );
}
