//! Scenarios of a lock as a handle on a lock the client's driver owns: it is kept and released
//! whether or not anyone awaits (or waits on) anything, and requests of many locks share one
//! pipeline per node without overtaking each other.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use redlock_core::LockRequest;

use super::adapter::{Adapter, HeldLock, Options};
use super::scenarios::eventually;
use crate::Servers;

fn client<A: Adapter>(nodes: &Servers, options: &Options) -> A {
    A::build(&nodes.urls(), options).unwrap_or_else(|err| panic!("{}: build: {err}", A::NAME))
}

/// Options for the tests about scripts flushed under load, with generous timeouts.
///
/// A generous I/O timeout: a request that times out drops its connection, and a command still
/// in flight on it can then land after a later one sent on a new connection (a key left for
/// its TTL). That is not what these tests are about; on a loaded machine it would blur the
/// ordering they check. A generous node timeout too: a release whose replies come late on two
/// of the three nodes (a script reloaded after the flush, 32 threads on a loaded 2-core
/// machine: once in CI past the 1 s a 30 s lock gets by default) counts as released on one.
fn generous() -> Options {
    Options {
        io_timeout: Some(Duration::from_secs(30)),
        node_timeout: Some(Duration::from_secs(5)),
        ..Options::default()
    }
}

fn total_keys(nodes: &Servers) -> i64 {
    nodes.servers().iter().map(|s| s.dbsize()).sum()
}

/// A lock acquired with auto-extension and left idle for 5× its TTL — nobody awaiting anything
/// — is still held on a quorum, while the same lock without auto-extension (the control) is on
/// no node, and has reported its loss when its validity ended. Taking a quorum away (its key
/// deleted on three of five nodes) is reported as the kept lock's loss.
pub fn an_idle_auto_extended_lock_is_kept_and_reports_its_loss<A: Adapter>() {
    let nodes = Servers::start(5);
    let redlock: A = client(&nodes, &Options::default());
    let ttl = Duration::from_secs(1);
    let plain = redlock
        .acquire(LockRequest::new("plain", ttl))
        .expect("lock");
    let kept = redlock
        .acquire(LockRequest::new("kept", ttl).auto_extend())
        .expect("lock");
    thread::sleep(ttl * 5);
    assert_eq!(
        nodes.count_with_key("plain"),
        0,
        "{}: control: an idle lock without auto-extension expired",
        A::NAME
    );
    assert!(!plain.is_valid());
    assert!(
        plain.wait_lost(Duration::ZERO),
        "{}: every lock reports its loss: one without auto-extension when its validity ended",
        A::NAME
    );
    let holding = nodes.count_holding("kept", kept.token());
    assert!(
        holding >= 3,
        "{}: an idle auto-extended lock is on {holding} of 5 nodes after 5 TTLs",
        A::NAME
    );
    assert!(kept.is_valid(), "{}: still valid", A::NAME);
    assert!(!kept.wait_lost(Duration::ZERO));
    for server in &nodes.servers()[..3] {
        let _: i64 = redis::cmd("DEL")
            .arg("kept")
            .query(&mut server.client())
            .expect("DEL");
    }
    assert!(
        kept.wait_lost(Duration::from_secs(10)),
        "{}: the loss of its quorum is reported",
        A::NAME
    );
    assert!(!kept.is_valid());
    kept.release();
    plain.release();
    assert!(eventually(Duration::from_secs(5), || total_keys(&nodes) == 0));
}

/// With one node frozen (SIGSTOP), operations whose answer nobody waits for still finish once
/// it thaws: a release queued behind the acquisition's straggler (awaited, it returns on the
/// other nodes' answers), a release started and not awaited, an extension started and not
/// awaited before the lock is dropped, and an acquisition abandoned half-way (async adapters).
/// No key is left after the thaw beyond a few hundred ms (checked within a generous bound, far
/// below the 60 s TTL).
pub fn a_frozen_node_gets_every_queued_request_after_it_thaws<A: Adapter>() {
    let mut nodes = Servers::start(5);
    // A short I/O timeout: the requests to the frozen node time out at the transport too, and
    // the connection must keep their order (a release sent on a new connection could run
    // before the SET still waiting on the old one, and leave the key for its TTL).
    let options = Options {
        io_timeout: Some(Duration::from_millis(300)),
        ..Options::default()
    };
    let redlock: A = client(&nodes, &options);
    redlock
        .lock("warm-up", Duration::from_secs(10))
        .expect("lock")
        .release();
    let ttl = Duration::from_secs(60);
    // One connection of the test's own to the frozen node, opened before the freeze: it counts
    // the connections anyone else opens there meanwhile, and reads the node's keys.
    let mut watcher = nodes.servers()[2].client();
    let opened_before = connections_received(&mut watcher);
    nodes.pause(2);
    let queued = redlock.lock("queued", ttl).expect("four nodes grant");
    let report = queued.release();
    assert!(report.released() >= 3, "{}: {report:?}", A::NAME);
    redlock
        .lock("unawaited-release", ttl)
        .expect("four nodes grant")
        .release_unawaited();
    let extended = redlock
        .lock("unawaited-extend", ttl)
        .expect("four nodes grant");
    extended.extend_unawaited(ttl);
    drop(extended);
    if A::CANCELLABLE {
        redlock.lock_abandoned_after("abandoned", ttl, Duration::from_millis(1));
    }
    let live: Vec<usize> = vec![0, 1, 3, 4];
    assert!(
        eventually(Duration::from_secs(10), || live
            .iter()
            .all(|&i| nodes.servers()[i].dbsize() == 0)),
        "{}: the live nodes are clean before the thaw",
        A::NAME
    );
    // Frozen well past the I/O timeout.
    thread::sleep(Duration::from_millis(1500));
    nodes.resume(2);
    // Lock keys only (the node's restart-aware voting epoch stays).
    let mut lock_keys = || -> Vec<String> {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut watcher)
            .unwrap_or_default();
        keys.into_iter()
            .filter(|key| !key.starts_with("redlock:"))
            .collect()
    };
    let clean = eventually(Duration::from_secs(10), || lock_keys().is_empty());
    let left = lock_keys();
    assert!(clean, "{}: keys left on the thawed node: {left:?}", A::NAME);
    assert_eq!(
        connections_received(&mut watcher),
        opened_before,
        "{}: the client opened a new connection to the node whose replies timed out; a request \
         sent on it could run before one still waiting on the old connection",
        A::NAME
    );
}

/// The node's count of connections it ever accepted (`INFO stats`).
fn connections_received(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(conn)
        .expect("INFO stats");
    info.lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_connections_received in INFO stats")
}

/// Many threads through one client: requests of many locks go out together, one pipeline per
/// node, and a pipeline that meets a flushed script cache (`NOSCRIPT`) still gets every command
/// run, in order: no release overtakes its own acquire, so no key is left behind.
pub fn pipelined_requests_survive_a_script_flush<A: Adapter>() {
    let nodes = Servers::start(3);
    let redlock: A = client(&nodes, &generous());
    let cycles = AtomicUsize::new(0);
    thread::scope(|scope| {
        for thread in 0..32 {
            let (redlock, cycles) = (&redlock, &cycles);
            scope.spawn(move || {
                for round in 0..20 {
                    let lock = redlock
                        .lock(&format!("pipe:{thread}"), Duration::from_secs(30))
                        .unwrap_or_else(|err| panic!("thread {thread} round {round}: {err}"));
                    // A quorum answered in time (a loaded machine may answer the third late).
                    assert!(lock.release().released() >= 2);
                    cycles.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        // Flush the script caches while the threads run.
        for _ in 0..5 {
            thread::sleep(Duration::from_millis(20));
            for server in nodes.servers() {
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query(&mut server.client())
                    .expect("SCRIPT FLUSH");
            }
        }
    });
    assert_eq!(cycles.into_inner(), 32 * 20);
    let clean = eventually(Duration::from_secs(10), || total_keys(&nodes) == 0);
    let left: Vec<String> = nodes
        .servers()
        .iter()
        .map(|server| {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("pipe:*")
                .query(&mut server.client())
                .unwrap_or_default();
            format!("{}: {keys:?}", server.addr())
        })
        .collect();
    assert!(clean, "{}: keys left behind: {left:?}", A::NAME);
}

/// Every script is loaded when a connection is made: a client's first lock, extension,
/// fenced lock and releases on nodes that never ran a script meet no `NOSCRIPT` (one would be
/// loaded and run again behind whatever was written on the connection meanwhile: a round of
/// another lock could overtake it), and each node ran at least one script by `EVALSHA`. A
/// second client on the same nodes, which have every script by then, loads none. Where the ACL
/// denies scripting, no load is even tried (no refusal beyond the probe's).
pub fn a_new_connection_never_meets_noscript<A: Adapter>() {
    let nodes = Servers::start(3);
    let redlock: A = client(&nodes, &Options::default());
    let ttl = Duration::from_secs(10);
    let mut lock = redlock
        .lock("fresh", ttl)
        .unwrap_or_else(|err| panic!("{}: lock: {err}", A::NAME));
    lock.extend(ttl)
        .unwrap_or_else(|err| panic!("{}: extend: {err}", A::NAME));
    let report = lock.release();
    assert_eq!(report.released(), 3, "{}: {report:?}", A::NAME);
    let fenced = redlock
        .acquire(LockRequest::new("fresh:fenced", ttl).fenced())
        .unwrap_or_else(|err| panic!("{}: fenced lock: {err}", A::NAME));
    let report = fenced.release();
    assert_eq!(report.released(), 3, "{}: {report:?}", A::NAME);
    let loaded: Vec<u64> = nodes
        .servers()
        .iter()
        .map(|server| server.calls("script|load"))
        .collect();
    let second: A = client(&nodes, &Options::default());
    let lock = second
        .lock("fresh", ttl)
        .unwrap_or_else(|err| panic!("{}: second client's lock: {err}", A::NAME));
    let report = lock.release();
    assert_eq!(report.released(), 3, "{}: {report:?}", A::NAME);
    for (server, loaded) in nodes.servers().iter().zip(loaded) {
        assert_eq!(
            server.calls("script|load"),
            loaded,
            "{}: {}: the second client loaded scripts the node had",
            A::NAME,
            server.addr(),
        );
    }
    for server in nodes.servers() {
        let info = |section: &str| -> String {
            redis::cmd("INFO")
                .arg(section)
                .query(&mut server.client())
                .unwrap_or_else(|err| panic!("INFO {section}: {err}"))
        };
        let (errors, commands) = (info("errorstats"), info("commandstats"));
        let name = format!("{}: {}", A::NAME, server.addr());
        if server.options().denies_scripting() {
            assert!(
                !commands.contains("cmdstat_script|load"),
                "{name}: a load was tried where scripting is denied: {commands}"
            );
            continue;
        }
        assert!(
            !errors.contains("errorstat_NOSCRIPT"),
            "{name}: answered NOSCRIPT: {errors}"
        );
        assert!(server.calls("evalsha") > 0, "{name}: ran no script");
    }
}

/// How often `server` answered `NOSCRIPT` so far (`INFO errorstats`).
fn noscript_errors(server: &crate::RedisServer) -> u64 {
    let errors: String = redis::cmd("INFO")
        .arg("errorstats")
        .query(&mut server.client())
        .unwrap_or_else(|err| panic!("INFO errorstats: {err}"));
    errors
        .lines()
        .find_map(|line| line.strip_prefix("errorstat_NOSCRIPT:count="))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// The script cache of one node flushed between a client's lock calls: a fenced acquisition
/// that meets `NOSCRIPT` there is never run again (on a shared connection the run could land
/// behind the lock's own release, and leave a key no release comes for). That node's vote is
/// lost, its script loaded, and the next lock gets its vote; a release that meets `NOSCRIPT`
/// does run again, and deletes its key. Where the fenced acquisition is a native command, the
/// flush changes nothing: the node votes.
pub fn an_acquisition_that_meets_noscript_is_not_run_again<A: Adapter>() {
    let nodes = Servers::start(3);
    // On a loaded machine a first round lost to a late reply elsewhere would be retried, and
    // the retry would set the key on the flushed node (its scripts loaded by then) as it
    // should: the timeouts keep it to one round.
    let redlock: A = client(&nodes, &generous());
    let ttl = Duration::from_secs(30);
    let fenced = |resource: &str| {
        redlock
            .acquire(LockRequest::new(resource, ttl).fenced())
            .unwrap_or_else(|err| panic!("{}: fenced lock {resource}: {err}", A::NAME))
    };
    // Connections made and proven, the scripts loaded.
    fenced("warm").release();
    let flushed = &nodes.servers()[0];
    let flush = || {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut flushed.client())
            .expect("SCRIPT FLUSH");
    };
    let (refused, loaded) = (noscript_errors(flushed), flushed.calls("script|load"));
    flush();
    let first = fenced("flushed");
    // Either the node met NOSCRIPT (a scripted acquisition), or it voted (a native one).
    let settled = eventually(Duration::from_secs(10), || {
        noscript_errors(flushed) > refused || flushed.exists("flushed")
    });
    assert!(
        settled,
        "{}: the flushed node neither refused nor voted",
        A::NAME
    );
    if noscript_errors(flushed) > refused {
        // Calls of another lock run the driver's turns, which carry the late replies on (with
        // no call waiting, they wait for the driver's timer): a rerun's `EVALSHA` follows its
        // script's load.
        let probe = || fenced("probe").release();
        assert!(
            eventually(Duration::from_secs(10), || {
                probe();
                flushed.calls("script|load") > loaded
            }),
            "{}: the script that met NOSCRIPT was not loaded again",
            A::NAME
        );
        for _ in 0..20 {
            probe();
        }
        assert!(
            !flushed.exists("flushed"),
            "{}: the acquisition that met NOSCRIPT ran again",
            A::NAME
        );
    }
    let report = first.release();
    assert!(report.released() >= 2, "{}: {report:?}", A::NAME);
    // The script is back: the next lock gets the node's vote, and its release meets a flush.
    let second = fenced("loaded");
    assert!(
        eventually(Duration::from_secs(10), || flushed.exists("loaded")),
        "{}: the node did not vote after its script was loaded",
        A::NAME
    );
    flush();
    let report = second.release();
    assert_eq!(report.released(), 3, "{}: {report:?}", A::NAME);
    assert!(
        eventually(Duration::from_secs(10), || !nodes.servers().iter().any(
            |server| ["flushed", "loaded", "probe"]
                .iter()
                .any(|key| server.exists(*key))
        )),
        "{}: a lock key left behind",
        A::NAME
    );
}

/// A trust that meets `NOSCRIPT` (its node's script cache flushed) is not run again: the
/// operator vouches for the moment they ask, and a late trust could land after a lock taken
/// meanwhile and a memory loss its stamp recorded
/// ([`Script::runs_late_safely`](redlock_core::Script::runs_late_safely)). That node is not
/// trusted and keeps its epoch, its scripts are loaded, and the next trust trusts it. Where
/// the trust is a native `MSET` (a node without scripts), the flush changes nothing.
pub fn a_trust_that_meets_noscript_is_refused_until_asked_again<A: Adapter>() {
    let nodes = Servers::start(3);
    let redlock: A = client(&nodes, &generous());
    // Connections made and proven, the scripts loaded.
    redlock
        .lock("warm", Duration::from_secs(10))
        .unwrap_or_else(|err| panic!("{}: lock: {err}", A::NAME))
        .release();
    let flushed = &nodes.servers()[0];
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut flushed.client())
        .expect("SCRIPT FLUSH");
    let _: () = redis::cmd("SET")
        .arg(redlock_core::EPOCH_KEY)
        .arg("12345")
        .query(&mut flushed.client())
        .expect("SET epoch");
    let epoch = || -> Option<String> {
        redis::cmd("GET")
            .arg(redlock_core::EPOCH_KEY)
            .query(&mut flushed.client())
            .expect("GET epoch")
    };
    let refused = noscript_errors(flushed);
    let trusted = redlock
        .trust_nodes()
        .unwrap_or_else(|err| panic!("{}: trust: {err}", A::NAME));
    if noscript_errors(flushed) > refused {
        assert_eq!(trusted, 2, "{}: the flushed node is not trusted", A::NAME);
        assert_eq!(
            epoch().as_deref(),
            Some("12345"),
            "{}: the trust that met NOSCRIPT ran again",
            A::NAME
        );
    } else {
        assert_eq!(trusted, 3, "{}: a native trust meets no NOSCRIPT", A::NAME);
    }
    redlock.trust_every_node(3, "the trust asked again");
    assert_eq!(
        epoch().as_deref(),
        Some("0"),
        "{}: the flushed node's epoch",
        A::NAME
    );
}

/// A lock shared between threads (`Arc<Lock>`): concurrent extensions from eight threads each
/// get their own answer (they run one after another, never merged), the validity only moves
/// forward, and the lock is still held on every node afterwards.
pub fn a_shared_lock_answers_every_concurrent_extension<A: Adapter>()
where
    A::Lock: Sync,
{
    let nodes = Servers::start(5);
    let redlock: A = client(&nodes, &Options::default());
    let lock = redlock
        .lock("shared", Duration::from_secs(5))
        .expect("lock");
    let before = lock.valid_until();
    let answered = AtomicUsize::new(0);
    thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..3 {
                    lock.extend_shared(Duration::from_secs(20))
                        .unwrap_or_else(|err| panic!("{}: extend: {err}", A::NAME));
                    answered.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(answered.into_inner(), 24, "every call answered");
    assert!(lock.valid_until() > before, "{}: validity moved", A::NAME);
    assert!(lock.is_valid());
    let token = lock.token();
    assert_eq!(nodes.count_holding("shared", token), 5);
    lock.release();
}
