//! The scenarios every adapter must pass, against real `redis-server` processes (N = 5 unless
//! stated). Timing: no assertion bounds a latency tightly; bounds are generous multiples of what
//! the policy allows, so that they hold on a loaded 2-core machine.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redlock_core::{LockRequest, NodeErrorKind, NodeRelease, RetryPolicy, Vote};
use redlock_redis::Error;

use super::adapter::{Adapter, HeldLock, Options};
use crate::{FaultProxy, RedisServer, ServerOptions, Servers};

const TTL: Duration = Duration::from_secs(10);

/// Polls `check` every 20 ms until it holds or `limit` passes; returns whether it held.
pub fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if check() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn client<A: Adapter>(nodes: &Servers, options: &Options) -> A {
    A::build(&nodes.urls(), options)
        .unwrap_or_else(|err| panic!("{}: build failed: {err}", A::NAME))
}

/// Asserts that `count` nodes come to hold `key = token`. The lock call returns once a quorum
/// granted, so the remaining nodes' answers may still be on their way.
fn assert_holding(nodes: &Servers, key: &str, token: &[u8], count: usize) {
    let held = eventually(Duration::from_secs(5), || {
        nodes.count_holding(key, token) == count
    });
    assert!(
        held,
        "{key} is on {} nodes, expected {count}",
        nodes.count_holding(key, token)
    );
}

/// Whether the harness's servers take clients as a user denied `@scripting`
/// ([`redlock_local::DENY_SCRIPTING_ENV`]): what needs a script must then fail clearly.
pub fn scripting_denied() -> bool {
    std::env::var(redlock_local::DENY_SCRIPTING_ENV).is_ok_and(|value| value == "1")
}

/// Whether some of the harness's servers take clients as a user denied `@scripting`: every one
/// ([`scripting_denied`]), or the entries of a mix ([`redlock_local::MIX_ENV`]) marked so.
pub fn scripting_denied_somewhere() -> bool {
    scripting_denied()
        || std::env::var(redlock_local::MIX_ENV).is_ok_and(|mix| mix.contains("#no-scripting"))
}

fn total_keys(nodes: &Servers) -> i64 {
    nodes
        .servers()
        .iter()
        .filter(|s| s.is_running() && !s.is_paused())
        .map(|s| s.dbsize())
        .sum()
}

/// Scenario 1: lock → our token on ≥ 3 nodes with `PTTL ≤ ttl`; release → no key anywhere.
pub fn lock_then_release<A: Adapter>() {
    let nodes = Servers::start(5);
    let redlock: A = client(&nodes, &Options::default());
    let lock = redlock.lock("res", TTL).expect("lock");
    let token = lock.token();
    assert!(token.len() >= 20, "token has {} bytes", token.len());
    assert!(nodes.count_holding("res", &token) >= 3);
    for server in nodes.servers() {
        if server.get("res").as_deref() == Some(&token[..]) {
            let pttl = server.pttl("res");
            assert!(
                pttl > 0 && i128::from(pttl) <= TTL.as_millis() as i128,
                "PTTL {pttl}"
            );
        }
    }
    assert!(lock.valid_until() <= Instant::now() + TTL);
    let report = lock.release();
    assert!(report.released() >= 3, "{report:?}");
    assert_eq!(total_keys(&nodes), 0);
}

/// Scenario 2: a second client's `try_lock` is contended; after the release it succeeds.
pub fn contention<A: Adapter>() {
    let nodes = Servers::start(5);
    let first: A = client(&nodes, &Options::default());
    let second: A = client(&nodes, &Options::default());
    let held = first.lock("res", TTL).expect("lock");
    match second.try_lock("res", TTL) {
        Err(Error::Contended(detail)) => {
            assert_eq!(detail.attempts, 1);
            assert!(
                detail
                    .nodes
                    .iter()
                    .filter(|n| n.result == Vote::Refused)
                    .count()
                    >= 3,
                "{detail}"
            );
        }
        other => panic!("expected contended, got {other:?}"),
    }
    held.release();
    let taken = second.try_lock("res", TTL).expect("free after release");
    assert_holding(&nodes, "res", &taken.token(), 5);
    taken.release();
}

/// Scenario 3: two of five nodes down → still works; three down → unavailable, within the policy's bound;
/// back up → works again with the same client.
pub fn minority_and_majority_down<A: Adapter>() {
    let mut nodes = Servers::start(5);
    let retry = RetryPolicy::default()
        .attempts(3)
        .delay(Duration::from_millis(50))
        .jitter(Duration::from_millis(50));
    let options = Options {
        retry: Some(retry),
        node_timeout: Some(Duration::from_millis(200)),
        ..Options::default()
    };
    let redlock: A = client(&nodes, &options);
    nodes.kill(0);
    nodes.kill(1);
    redlock
        .lock("res", TTL)
        .expect("a majority is up")
        .release();
    nodes.kill(2);
    let start = Instant::now();
    match redlock.lock("res", TTL) {
        Err(Error::Unavailable(detail)) => assert_eq!(detail.attempts, 3, "{detail}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
    // The policy allows 3 rounds of at most 200 ms plus two pauses of at most 100 ms: 0.8 s.
    // Ten times that is a bound no healthy run comes near; a hang would.
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "took {:?}",
        start.elapsed()
    );
    // No lock is live (the last attempt released what it set): the test may trust them.
    for i in 0..3 {
        nodes.restart_empty(i);
        nodes[i].trust();
    }
    let back = eventually(Duration::from_secs(10), || match redlock.lock("res", TTL) {
        Ok(lock) => {
            lock.release();
            true
        }
        Err(_) => false,
    });
    assert!(back, "the same client works once the nodes are back");
}

/// Scenario 4: a node down when the client is built is no error; once it starts, it gets keys again.
pub fn node_down_at_start<A: Adapter>() {
    let mut nodes = Servers::start(5);
    nodes.kill(4);
    let redlock: A = client(&nodes, &Options::default());
    let lock = redlock.lock("res", TTL).expect("four of five are up");
    assert_holding(&nodes, "res", &lock.token(), 4);
    lock.release();
    // A fresh node with no lock live on it: trusted, as an operator adding it would.
    nodes.restart_empty(4);
    nodes[4].trust();
    let rejoined = eventually(Duration::from_secs(10), || {
        let lock = redlock.lock("res", TTL).expect("lock");
        let on_last = nodes[4].get("res").as_deref() == Some(&lock.token()[..]);
        lock.release();
        on_last
    });
    assert!(rejoined, "the late node gets the key");
}

/// Scenario 5: a stopped node (SIGSTOP) does not hold up a lock the others grant.
pub fn stalled_node_does_not_delay<A: Adapter>() {
    let mut nodes = Servers::start(5);
    // A long node timeout: waiting for the stopped node would take at least this long.
    let node_timeout = Duration::from_secs(8);
    let options = Options {
        node_timeout: Some(node_timeout),
        ..Options::default()
    };
    let redlock: A = client(&nodes, &options);
    redlock.lock("warm-up", TTL).expect("lock").release();
    nodes.pause(2);
    let start = Instant::now();
    let lock = redlock
        .lock("res", Duration::from_secs(30))
        .expect("four nodes answer");
    let took = start.elapsed();
    assert!(took < node_timeout, "waited {took:?} for the stopped node");
    nodes.resume(2);
    lock.release();
}

/// Scenario 5b: with every node stopped, a lock call on an idle client is decided by the
/// engine's per-node timeout, not by the connections' I/O timeout (20 s here): the driver
/// wakes for the call's deadlines whichever thread or task handed the call in.
pub fn no_answer_at_all_is_decided_by_the_node_timeout<A: Adapter>() {
    let mut nodes = Servers::start(3);
    let retry = RetryPolicy::default()
        .attempts(2)
        .delay(Duration::from_millis(50))
        .jitter(Duration::from_millis(50));
    let options = Options {
        retry: Some(retry),
        node_timeout: Some(Duration::from_millis(200)),
        io_timeout: Some(Duration::from_secs(20)),
        ..Options::default()
    };
    let redlock: A = client(&nodes, &options);
    // Connections made, then the client idle: no lock runs, no deadline is set.
    redlock.lock("warm-up", TTL).expect("lock").release();
    assert!(
        redlock.flush(Duration::from_secs(5)),
        "every request answered"
    );
    for i in 0..3 {
        nodes.pause(i);
    }
    let start = Instant::now();
    let outcome = redlock.lock("res", TTL);
    let took = start.elapsed();
    for i in 0..3 {
        nodes.resume(i);
    }
    match outcome {
        Err(Error::Unavailable(detail)) => assert_eq!(detail.attempts, 2, "{detail}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
    // Two rounds of 200 ms and a pause of at most 100 ms: 0.5 s. Ten times that is a bound no
    // healthy run comes near; waiting for the I/O timeout (20 s) would not meet it.
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// `flush` waits for the requests a lock call did not wait for: a stopped node's `SET` is still
/// outstanding after the quorum granted, so a short flush says so; once the node runs again, a
/// flush returns true, and by then that node holds the key.
pub fn flush_waits_for_the_requests_a_lock_left_behind<A: Adapter>() {
    let mut nodes = Servers::start(5);
    let options = Options {
        node_timeout: Some(Duration::from_secs(20)),
        ..Options::default()
    };
    let redlock: A = client(&nodes, &options);
    redlock.lock("warm-up", TTL).expect("lock").release();
    assert!(
        redlock.flush(Duration::from_secs(10)),
        "nothing outstanding"
    );
    nodes.pause(2);
    let lock = redlock
        .lock("res", Duration::from_secs(60))
        .expect("four nodes grant");
    assert!(
        !redlock.flush(Duration::from_millis(200)),
        "the stopped node has not answered"
    );
    nodes.resume(2);
    assert!(
        redlock.flush(Duration::from_secs(15)),
        "every request answered once the node runs"
    );
    assert_holding(&nodes, "res", &lock.token(), 5);
    lock.release();
}

/// Scenario 6: held past its TTL → another client acquires; the first one's release reports it is not
/// held and leaves the other's keys; its extend is `Lost`.
pub fn expired_lock_is_not_released_or_extended<A: Adapter>() {
    let nodes = Servers::start(5);
    // Up to 2 s for each node's answer (a 300 ms lock's default node timeout is 30 ms, which
    // a loaded machine can miss: that node would count as timed out, not as held by the other).
    let first: A = client(
        &nodes,
        &Options {
            node_timeout: Some(Duration::from_secs(2)),
            ..Options::default()
        },
    );
    let second: A = client(&nodes, &Options::default());
    let ttl = Duration::from_millis(300);
    let mut stale = first.lock("res", ttl).expect("lock");
    assert!(
        eventually(Duration::from_secs(10), || total_keys(&nodes) == 0),
        "keys expire"
    );
    let fresh = second.lock("res", TTL).expect("free after expiry");
    assert_holding(&nodes, "res", &fresh.token(), 5);
    match stale.extend(TTL) {
        Err(Error::Lost(_)) => {}
        other => panic!("expected lost, got {other:?}"),
    }
    let report = stale.release();
    assert_eq!(report.released(), 0, "{report:?}");
    assert_eq!(report.held_by_other(), 5, "{report:?}");
    assert_eq!(
        nodes.count_holding("res", fresh.token()),
        5,
        "the other's keys are intact"
    );
    fresh.release();
}

/// Scenario 7: extend before expiry → `PTTL` refreshed on the nodes, validity moved forward.
pub fn extend_refreshes<A: Adapter>() {
    let nodes = Servers::start(5);
    let redlock: A = client(&nodes, &Options::default());
    let mut lock = redlock.lock("res", Duration::from_secs(2)).expect("lock");
    let before = lock.valid_until();
    thread::sleep(Duration::from_millis(300));
    lock.extend(Duration::from_secs(20)).expect("extend");
    assert!(lock.valid_until() > before + Duration::from_secs(10));
    // extend() returns on a quorum: the other nodes' answers may still be on their way.
    let refreshed = |server: &RedisServer| {
        let pttl = server.pttl("res");
        assert!(pttl <= 20_000, "PTTL {pttl} above the new TTL");
        pttl > 10_000
    };
    let everywhere = eventually(Duration::from_secs(5), || {
        nodes.servers().iter().all(refreshed)
    });
    assert!(everywhere, "PTTL refreshed on every node");
    lock.release();
}

/// The validity holds still without a suspend (issue 23): read again later, after an extension
/// to a shorter TTL (which never shortens the keys), and after an extension that failed, it is
/// the same instant; `is_valid` agrees with it.
pub fn the_validity_holds_still<A: Adapter>() {
    let nodes = Servers::start(3);
    let redlock: A = client(&nodes, &Options::default());
    let mut lock = redlock
        .lock("still", Duration::from_secs(30))
        .expect("lock");
    let first = lock.valid_until();
    thread::sleep(Duration::from_millis(20));
    assert_eq!(lock.valid_until(), first, "{}: read again", A::NAME);
    // A shorter extension (on nodes that run no script: `MULTI; PEXPIRE … GT; GET …; EXEC`).
    if let Err(err) = lock.extend(Duration::from_secs(5)) {
        panic!("{}: a shorter extension: {err}", A::NAME);
    }
    for server in nodes.servers().iter().filter(|s| s.exists("still")) {
        assert!(
            server.pttl("still") > 5_000,
            "a shorter extension shortened the key on {}",
            server.addr()
        );
    }
    assert_eq!(
        lock.valid_until(),
        first,
        "{}: a shorter extension",
        A::NAME
    );
    // The lock's keys vanish (once every node has them): the next extension fails.
    assert!(eventually(Duration::from_secs(5), || nodes
        .count_with_key("still")
        == 3));
    for server in nodes.servers() {
        let _: () = server.client().del("still").expect("del");
    }
    assert!(
        lock.extend(Duration::from_secs(30)).is_err(),
        "{}: extended a lock whose keys are gone",
        A::NAME
    );
    assert_eq!(lock.valid_until(), first, "{}: a failed extension", A::NAME);
    assert!(Instant::now() < lock.valid_until());
}

/// Scenario 8: {a, b} held → {b, c} fails, leaving no partial key; after release both are free.
pub fn multi_resource_all_or_nothing<A: Adapter>() {
    let nodes = Servers::start(5);
    let redlock: A = client(&nodes, &Options::default());
    let ab = redlock
        .acquire(LockRequest::new("a", TTL).resource("b"))
        .expect("lock a and b");
    let bc = LockRequest::new("b", TTL)
        .resource("c")
        .retry(RetryPolicy::once());
    match redlock.acquire(bc.clone()) {
        Err(Error::Contended(_)) => {}
        other => panic!("expected contended, got {other:?}"),
    }
    assert_eq!(nodes.count_with_key("c"), 0, "no partial key");
    ab.release();
    let bc = redlock.acquire(bc).expect("free after release");
    assert_holding(&nodes, "b", &bc.token(), 5);
    assert_holding(&nodes, "c", &bc.token(), 5);
    bc.release();
    assert_eq!(total_keys(&nodes), 0);
}

/// Scenario 9: bad input → typed errors, no panic, no password in any message.
pub fn bad_input<A: Adapter>() {
    let nodes = Servers::start(5);
    let redlock: A = client(&nodes, &Options::default());
    for ttl in [Duration::ZERO, Duration::from_millis(2), Duration::MAX] {
        match redlock.try_lock("res", ttl) {
            Err(Error::Config(err)) => assert!(err.to_string().starts_with("ttl"), "{err}"),
            other => panic!("ttl {ttl:?}: expected a config error, got {other:?}"),
        }
    }
    assert!(matches!(redlock.try_lock("", TTL), Err(Error::Config(_))));
    let none: [String; 0] = [];
    assert!(matches!(
        A::build(&none, &Options::default()),
        Err(Error::Config(_))
    ));
    let minority = Options {
        quorum: Some(2),
        ..Options::default()
    };
    assert!(matches!(
        A::build(&nodes.urls(), &minority),
        Err(Error::Config(_))
    ));

    let secret = "s3cret-Pa55";
    let garbage = format!("redis://user:{secret}@[not-a-host/");
    match A::build(&[garbage], &Options::default()) {
        Err(err @ Error::InvalidNode { index: 0, .. }) => {
            assert!(!err.to_string().contains(secret), "{err}")
        }
        Err(other) => panic!("expected an invalid node, got {other}"),
        Ok(_) => panic!("an unparseable URL was accepted"),
    }
    let guarded = Servers::start_with(3, &ServerOptions::new().requirepass("right-password"));
    let wrong: Vec<String> = guarded
        .servers()
        .iter()
        .map(|s| format!("redis://:{secret}@{}/", s.addr()))
        .collect();
    let redlock =
        A::build(&wrong, &Options::default()).expect("a wrong password is found out later");
    match redlock.try_lock("res", TTL) {
        Err(err) => {
            let detail = err.failure().expect("per-node detail");
            // The round is decided (lost) as soon as two nodes refuse the login.
            let auth = detail
                .nodes
                .iter()
                .filter(|n| n.result == Vote::Failed(NodeErrorKind::Auth));
            assert!(auth.count() >= 2, "{err}");
            assert!(
                detail.nodes.iter().all(|n| n.result != Vote::Granted),
                "{err}"
            );
            assert!(!format!("{err} {err:?}").contains(secret), "{err}");
        }
        Ok(_) => panic!("locked with a wrong password"),
    }
}

/// Scenario 10: a key holding a list (WRONGTYPE) is a clean outcome; `SCRIPT FLUSH` between calls
/// costs at most the next acquisition's votes on the nodes that ran it by script (it is never
/// run again there: `an_acquisition_that_meets_noscript_is_not_run_again`), and the lock after
/// it gets every vote.
pub fn wrong_type_and_script_flush<A: Adapter>() {
    let nodes = Servers::start(5);
    let redlock: A = client(&nodes, &Options::default());
    for server in nodes.servers() {
        let _: () = server.client().rpush("listy", "x").expect("rpush");
    }
    assert!(matches!(
        redlock.try_lock("listy", TTL),
        Err(Error::Contended(_))
    ));

    let lock = redlock.lock("res", TTL).expect("lock");
    // The lock call returns on a quorum: let the other SETs land before the keys are replaced.
    assert!(eventually(Duration::from_secs(5), || nodes
        .count_with_key("res")
        == 5));
    for server in &nodes.servers()[..2] {
        let mut conn = server.client();
        let _: () = conn.del("res").expect("del");
        let _: () = conn.rpush("res", "x").expect("rpush");
    }
    let report = lock.release();
    let wrong = report
        .nodes
        .iter()
        .filter(|n| **n == NodeRelease::Failed(NodeErrorKind::WrongType));
    assert_eq!(wrong.count(), 2, "{report:?}");
    assert_eq!(report.released(), 3, "{report:?}");

    let multi = LockRequest::new("x", TTL).resource("y");
    redlock.acquire(multi.clone()).expect("lock").release();
    for server in nodes.servers() {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.client())
            .expect("flush");
    }
    let lock = redlock
        .acquire(multi.clone())
        .expect("lock after SCRIPT FLUSH");
    let report = lock.release();
    assert!(report.released() >= 3, "{report:?}");
    let lock = redlock
        .acquire(multi)
        .expect("lock once the scripts are back");
    assert_eq!(lock.release().released(), 5);
}

/// Scenario 11: 16 workers × 50 critical sections of a non-atomic GET/SET increment on a sixth server:
/// the counter ends at exactly 800.
pub fn mutual_exclusion_counter<A: Adapter>() {
    const WORKERS: usize = 16;
    const SECTIONS: usize = 50;
    let nodes = Servers::start(5);
    let counter = RedisServer::start();
    let retry = RetryPolicy::default()
        .unlimited()
        .delay(Duration::from_millis(1))
        .jitter(Duration::from_millis(10))
        .deadline(Duration::from_secs(120));
    let options = Options {
        retry: Some(retry),
        ..Options::default()
    };
    let redlock = Arc::new(client::<A>(&nodes, &options));
    let count = count_under_lock(&redlock, &counter, WORKERS, SECTIONS, |redlock| {
        redlock
            .lock("counter", TTL)
            .expect("lock within the deadline")
    });
    assert_eq!(count, (WORKERS * SECTIONS) as u64);
    assert_eq!(total_keys(&nodes), 0);
}

/// `workers` threads each run `sections` critical sections — a non-atomic `GET`/`SET`
/// increment of `count` on `counter` — under the lock `lock` takes, and release it: the count
/// they leave.
pub(super) fn count_under_lock<A: Adapter>(
    redlock: &Arc<A>,
    counter: &RedisServer,
    workers: usize,
    sections: usize,
    lock: fn(&A) -> A::Lock,
) -> u64 {
    let workers: Vec<_> = (0..workers)
        .map(|_| {
            let redlock = redlock.clone();
            let mut conn = counter.client();
            thread::spawn(move || {
                for _ in 0..sections {
                    let held = lock(&redlock);
                    let value: Option<u64> = conn.get("count").expect("get");
                    let _: () = conn.set("count", value.unwrap_or(0) + 1).expect("set");
                    held.release();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
    counter.client().get("count").expect("get")
}

/// Scenario 12: a dropped, unreleased lock and an abandoned acquisition leave no key behind (long before
/// their TTL).
pub fn dropped_and_abandoned_locks_release<A: Adapter>() {
    let nodes = Servers::start(5);
    let ttl = Duration::from_secs(60);
    let redlock: A = client(&nodes, &Options::default());
    let lock = redlock.lock("dropped", ttl).expect("lock");
    assert!(eventually(Duration::from_secs(5), || nodes
        .count_with_key("dropped")
        == 5));
    drop(lock);
    assert!(
        eventually(Duration::from_secs(5), || total_keys(&nodes) == 0),
        "dropped lock released"
    );
    if !A::CANCELLABLE {
        return;
    }
    // Three slow nodes: the quorum cannot be reached before the acquisition is abandoned.
    let proxies: Vec<FaultProxy> = nodes.servers()[..3]
        .iter()
        .map(|s| FaultProxy::start(s.addr()))
        .collect();
    let mut urls = nodes.urls();
    for (url, proxy) in urls.iter_mut().zip(&proxies) {
        *url = proxy.url();
    }
    let slow = A::build(
        &urls,
        &Options {
            node_timeout: Some(Duration::from_secs(5)),
            ..Options::default()
        },
    )
    .expect("build");
    slow.lock("warm-up", ttl).expect("lock").release();
    for proxy in &proxies {
        proxy.set_latency(Duration::from_millis(400));
    }
    let finished = slow.lock_abandoned_after("abandoned", ttl, Duration::from_millis(100));
    assert!(
        !finished,
        "the acquisition was still waiting for the slow nodes"
    );
    assert!(
        eventually(Duration::from_secs(10), || nodes
            .count_with_key("abandoned")
            == 0),
        "the abandoned acquisition's keys were released"
    );
}

/// Scenario 13: `with_lock` running for 3× TTL keeps the lock (another client cannot take it); killing
/// three nodes mid-run → the work is told, and `with_lock` returns `Lost`.
pub fn scoped_lock_extends_and_reports_loss<A: Adapter>() {
    let nodes = Arc::new(Mutex::new(Servers::start(5)));
    let urls = nodes.lock().expect("servers").urls();
    let redlock = A::build(&urls, &Options::default()).expect("build");
    let rival = Arc::new(A::build(&urls, &Options::default()).expect("build"));
    let ttl = Duration::from_millis(600);
    let rival_result = Arc::new(Mutex::new(None));
    let (probe, seen) = (rival.clone(), rival_result.clone());
    let (result, work) = redlock.with_lock_work(
        "scoped",
        ttl,
        ttl * 3,
        ttl * 2,
        Box::new(move || {
            let outcome = probe.try_lock("scoped", ttl).map(|lock| lock.release());
            *seen.lock().expect("not poisoned") = Some(outcome.is_ok());
        }),
    );
    result.expect("with_lock kept the lock");
    assert!(!work.observed_loss && work.ran_for >= ttl * 3, "{work:?}");
    assert_eq!(
        *rival_result.lock().expect("not poisoned"),
        Some(false),
        "a rival got the lock mid-run"
    );

    let killer = nodes.clone();
    let (result, work) = redlock.with_lock_work(
        "scoped",
        ttl,
        Duration::from_secs(30),
        Duration::from_millis(100),
        Box::new(move || {
            let mut nodes = killer.lock().expect("servers");
            for i in 0..3 {
                nodes.kill(i);
            }
        }),
    );
    assert!(work.observed_loss, "the work was told: {work:?}");
    assert!(matches!(result, Err(Error::Lost(_))), "{result:?}");
    assert!(work.ran_for < Duration::from_secs(30));
}

/// A connection whose handshake reply is cut part-way is replaced once the network heals: the
/// node is not lost to the client for good (found by the chaos test).
pub fn cut_handshake_recovers<A: Adapter>() {
    let nodes = Servers::start(3);
    let proxy = FaultProxy::start(nodes[0].addr());
    let mut urls = nodes.urls();
    urls[0] = proxy.url();
    let options = Options {
        quorum: Some(3),
        retry: Some(RetryPolicy::once()),
        ..Options::default()
    };
    let redlock: A = client_for::<A>(&urls, &options);
    proxy.reset_after(2);
    assert!(
        redlock.try_lock("res", TTL).is_err(),
        "node 0's handshake was cut"
    );
    proxy.heal();
    let recovered = eventually(Duration::from_secs(10), || {
        match redlock.try_lock("res", TTL) {
            Ok(lock) => {
                lock.release();
                true
            }
            Err(_) => false,
        }
    });
    assert!(recovered, "node 0 came back to the client after the cut");
}

/// Scenario 14: a reply cut after the command ran: the node still gets the release.
pub fn lost_reply_still_released<A: Adapter>() {
    let nodes = Servers::start(5);
    let proxy = FaultProxy::start(nodes[0].addr());
    let mut urls = nodes.urls();
    urls[0] = proxy.url();
    // All five must grant, so the cut reply fails the round and its clean-up must reach node 0.
    let options = Options {
        quorum: Some(5),
        retry: Some(RetryPolicy::once()),
        ..Options::default()
    };
    let redlock: A = client_for::<A>(&urls, &options);
    redlock.lock("warm-up", TTL).expect("lock").release();
    proxy.reset_after(0);
    assert!(
        redlock.try_lock("res", TTL).is_err(),
        "node 0's reply was cut"
    );
    assert!(
        eventually(Duration::from_secs(10), || nodes.count_with_key("res") == 0),
        "node 0 ran the SET and still got the release"
    );
}

/// Hand-over: a lock taken by one client (a process that then exits without releasing) is
/// resumed by another from its token, with a fresh validity and refreshed TTLs, and released
/// there; a lock taken by one client is released by another from its token.
pub fn handover_by_token<A: Adapter>() {
    let nodes = Servers::start(5);
    let first: A = client(&nodes, &Options::default());
    let second: A = client(&nodes, &Options::default());
    let short = Duration::from_secs(3);
    let taken = first.lock("res", short).expect("lock");
    let token = taken.token();
    let first_validity = taken.valid_until();
    assert_holding(&nodes, "res", &token, 5);
    // The first process exits without releasing: its lock stays on the nodes.
    std::mem::forget(taken);

    // A resume has no TTL history to trust: it never shortens a key — by the extend script,
    // or, on nodes that run no script, by `MULTI; PEXPIRE … GT; GET …; EXEC` (issue 23).
    let resumed = second.resume("res", &token, TTL).expect("resume by token");
    assert_eq!(resumed.token(), token);
    assert!(resumed.valid_until() > first_validity, "a fresh validity");
    assert!(resumed.valid_until() <= Instant::now() + TTL);
    let refreshed = nodes
        .servers()
        .iter()
        .filter(|s| s.pttl("res") > i64::try_from(short.as_millis()).unwrap_or(i64::MAX))
        .count();
    assert!(
        refreshed >= 3,
        "the resume round extended the keys on {refreshed} nodes"
    );
    let report = resumed.release();
    assert!(report.released() >= 3, "{report:?}");
    assert!(eventually(Duration::from_secs(5), || total_keys(&nodes) == 0));

    // Take in one client, release from another by token alone.
    let taken = first.lock("job", TTL).expect("lock");
    let token = taken.token();
    assert_holding(&nodes, "job", &token, 5);
    std::mem::forget(taken);
    let report = second.release_by_token("job", &token).expect("valid input");
    assert_eq!(report.released(), 5, "{report:?}");
    assert_eq!(total_keys(&nodes), 0);
}

/// A wrong or stale token resumes nothing and releases nothing: a typed error, someone else's
/// lock untouched.
pub fn wrong_or_stale_token_is_refused<A: Adapter>() {
    let nodes = Servers::start(5);
    let holder: A = client(&nodes, &Options::default());
    let other: A = client(&nodes, &Options::default());
    let held = holder.lock("res", TTL).expect("lock");
    let token = held.token();
    assert_holding(&nodes, "res", &token, 5);
    let pttl_before: Vec<i64> = nodes.servers().iter().map(|s| s.pttl("res")).collect();

    let resumed = other.resume("res", b"not-the-holders-token", Duration::from_secs(60));
    match resumed {
        Err(Error::NotHeld(detail)) => {
            // Decided as soon as a quorum refused: at least 3 of 5.
            let refused = detail.nodes.iter().filter(|n| n.result == Vote::Refused);
            assert!(refused.count() >= 3, "{detail}");
        }
        other => panic!("{}: resume with a wrong token gave {other:?}", A::NAME),
    }
    let report = other
        .release_by_token("res", b"not-the-holders-token")
        .expect("valid input");
    assert_eq!(
        (report.released(), report.held_by_other()),
        (0, 5),
        "{report:?}"
    );
    assert_eq!(
        nodes.count_holding("res", &token),
        5,
        "the holder's keys are untouched"
    );
    for (server, before) in nodes.servers().iter().zip(pttl_before) {
        assert_eq!(server.get("res"), Some(token.clone()), "{}", server.addr());
        // A wrong-token resume to 60 s must not have lengthened the holder's 10 s TTL — but
        // on a node that runs no script, whose extension raises before it reads
        // (`PEXPIRE … GT`), where it may, once, to at most the 60 s asked (issue 23).
        let limit = if server.options().denies_scripting() {
            60_000
        } else {
            before
        };
        assert!(
            server.pttl("res") <= limit,
            "PTTL grew past {limit} ms on {}",
            server.addr()
        );
    }

    // A stale token: the lock it named was released.
    let report = held.release();
    assert_eq!(report.released(), 5, "{report:?}");
    let stale = other.resume("res", &token, TTL);
    assert!(matches!(stale, Err(Error::NotHeld(_))), "{stale:?}");
    let report = other.release_by_token("res", &token).expect("valid input");
    assert_eq!(report.absent(), 5, "{report:?}");
    assert_eq!(total_keys(&nodes), 0);
    // No token is bad input, not a network round.
    assert!(matches!(
        other.resume("res", b"", TTL),
        Err(Error::Config(_))
    ));
}

/// Fencing tokens from a quorum, over real servers: fences grow across successive holders (and
/// across the resources of a multi-resource lock), the counters expire (one key per resource per
/// node), and a fenced store rejects the write of a holder that paused past its validity while
/// a newer holder wrote (Kleppmann's case, the pause in-process).
pub fn fencing_tokens_increase_and_fence_off_a_paused_holder<A: Adapter>() {
    let nodes = Servers::start(5);
    // The protected resource, not a lock node: its compare-and-write is a script, whatever
    // the lock nodes may run.
    let store_server = ServerOptions::new().deny_scripting(false).start();
    let store = crate::FencedStore::new(&store_server.url(), "report");
    let redlock: A = client(&nodes, &Options::default());
    // On nodes that run no script, fenced locks are transactions of native commands
    // (`SET … NX PX; ZSCORE; TIME` and `ZADD … GT; PEXPIRE; GET`, issue 23).
    let fenced = |resource: &str, ttl| LockRequest::new(resource, ttl).fenced();

    let plain = redlock.lock("res", TTL).expect("lock");
    assert_eq!(plain.fence(), None, "only fenced locks carry a fence");
    plain.release();

    let mut last = 0;
    for _ in 0..3 {
        let lock = redlock.acquire(fenced("res", TTL)).expect("fenced lock");
        let fence = lock.fence().expect("a fence");
        assert!(fence > last, "fence {fence} after {last}");
        last = fence;
        lock.release();
    }
    // The fence is committed on the nodes that granted when the round was decided (a quorum
    // at least); each counter expires.
    let retention = i64::try_from(redlock_core::FENCE_RETENTION_MS).unwrap_or(i64::MAX);
    let counters: Vec<i64> = nodes
        .servers()
        .iter()
        .map(|server| server.pttl("redlock:fence:res"))
        .filter(|pttl| *pttl != -2)
        .collect();
    assert!(counters.len() >= 3, "counters on a quorum: {counters:?}");
    assert!(
        counters.iter().all(|pttl| *pttl > 0 && *pttl <= retention),
        "every fence counter expires: {counters:?}"
    );
    // One representation on every form: a sorted set whose one member scores the largest
    // fence committed there — the last one, on the quorum that committed it.
    let scores: Vec<u64> = nodes
        .servers()
        .iter()
        .filter(|server| server.exists("redlock:fence:res"))
        .map(|server| {
            let mut conn = server.client();
            let kind: String = redis::cmd("TYPE")
                .arg("redlock:fence:res")
                .query(&mut conn)
                .expect("TYPE");
            assert_eq!(kind, "zset", "{}", server.addr());
            let score: f64 = redis::cmd("ZSCORE")
                .arg("redlock:fence:res")
                .arg("fence")
                .query(&mut conn)
                .expect("ZSCORE");
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let score = score as u64;
            score
        })
        .collect();
    assert_eq!(scores.iter().max(), Some(&last), "{scores:?}");
    if !scripting_denied_somewhere() {
        // A counter an earlier release stored as a string is read as one, then turned into the
        // sorted set by the next commit.
        let legacy: u64 = 5_000_000_000_000;
        for server in nodes.servers() {
            server.set("redlock:fence:legacy", legacy.to_string());
        }
        let lock = redlock
            .acquire(fenced("legacy", TTL))
            .expect("fenced lock over string counters");
        assert_eq!(lock.fence(), Some(legacy + 1));
        lock.release();
        assert!(eventually(Duration::from_secs(5), || {
            nodes.servers().iter().any(|server| {
                let mut conn = server.client();
                redis::cmd("TYPE")
                    .arg("redlock:fence:legacy")
                    .query::<String>(&mut conn)
                    .is_ok_and(|kind| kind == "zset")
            })
        }));
    }
    let both = redlock
        .acquire(fenced("res", TTL).resource("other"))
        .expect("a fenced lock on two resources");
    assert!(both.fence().expect("a fence") > last);
    both.release();

    // Kleppmann's case: holder 1 pauses past its validity; holder 2 takes the lock and writes;
    // holder 1 wakes up and writes with its old fence: the store refuses it.
    let short = Duration::from_millis(300);
    let first = redlock.acquire(fenced("job", short)).expect("holder 1");
    let first_fence = first.fence().expect("a fence");
    thread::sleep(
        first
            .valid_until()
            .saturating_duration_since(Instant::now())
            + short,
    );
    let rival: A = client(&nodes, &Options::default());
    let second = eventually(Duration::from_secs(5), || {
        rival.acquire(fenced("job", TTL)).is_ok_and(|lock| {
            let fence = lock.fence().expect("a fence");
            assert!(fence > first_fence, "the new holder's fence is larger");
            assert!(store.write(fence, "written by holder 2"));
            lock.release();
            true
        })
    });
    assert!(second, "holder 2 got the lock after holder 1's validity");
    assert!(
        !store.write(first_fence, "written by holder 1 after its pause"),
        "the store accepted a write of a holder whose lock had passed on"
    );
    assert_eq!(store.value().as_deref(), Some("written by holder 2"));
    drop(first);
}

fn client_for<A: Adapter>(urls: &[String], options: &Options) -> A {
    A::build(urls, options).unwrap_or_else(|err| panic!("{}: build failed: {err}", A::NAME))
}

/// Expands to one `#[test]` per scenario for an adapter type.
#[macro_export]
macro_rules! conformance_tests {
    ($adapter:ty) => {
        $crate::conformance_tests!($adapter;
            lock_then_release, contention, minority_and_majority_down, node_down_at_start,
            stalled_node_does_not_delay, no_answer_at_all_is_decided_by_the_node_timeout,
            flush_waits_for_the_requests_a_lock_left_behind,
            expired_lock_is_not_released_or_extended, extend_refreshes,
            the_validity_holds_still,
            multi_resource_all_or_nothing, bad_input, wrong_type_and_script_flush,
            mutual_exclusion_counter, dropped_and_abandoned_locks_release,
            scoped_lock_extends_and_reports_loss, lost_reply_still_released, cut_handshake_recovers,
            handover_by_token, wrong_or_stale_token_is_refused,
            fencing_tokens_increase_and_fence_off_a_paused_holder);
        $crate::conformance_tests!(@handles $adapter;
            an_idle_auto_extended_lock_is_kept_and_reports_its_loss,
            a_frozen_node_gets_every_queued_request_after_it_thaws,
            pipelined_requests_survive_a_script_flush,
            a_new_connection_never_meets_noscript,
            an_acquisition_that_meets_noscript_is_not_run_again,
            a_trust_that_meets_noscript_is_refused_until_asked_again,
            a_shared_lock_answers_every_concurrent_extension);
        $crate::conformance_tests!(@notices $adapter;
            a_release_wakes_a_waiter_long_before_its_pause_ends,
            a_release_wakes_the_same_clients_waiter_without_a_notice,
            a_release_hands_the_keys_to_the_same_clients_waiters_in_turn,
            a_release_only_its_own_client_hears_publishes_nothing,
            a_release_its_own_client_hears_still_wakes_another_clients_waiter,
            a_key_gone_without_a_release_wakes_nobody);
        $crate::conformance_tests!(@tls $adapter;
            tls_lock_contention_release_and_node_down,
            mutual_tls_needs_the_client_certificate,
            a_wrong_ca_is_a_clear_per_node_error);
        $crate::conformance_tests!(@memory $adapter;
            a_flushed_node_refuses_a_proven_connection,
            a_flushed_node_votes_for_a_deaf_connection,
            an_evicted_epoch_refuses_a_proven_connection,
            an_evicted_epoch_votes_for_a_deaf_connection,
            a_fresh_connection_to_a_flushed_node_never_votes_early,
            a_trust_ends_the_proof_of_its_connection,
            a_trust_keeps_the_proof_without_optin,
            an_eviction_set_off_by_the_rivals_own_call_refuses_it,
            an_eviction_set_off_by_the_rivals_own_call_is_unheard_with_noloop,
            a_flushed_node_votes_again_after_the_longest_ttl,
            an_untracked_client_checks_every_acquisition);
        $crate::conformance_tests!(@identity $adapter;
            a_node_restarted_from_a_snapshot_refuses,
            a_snapshot_restart_with_a_matching_identity_votes,
            a_promoted_replica_refuses,
            a_promoted_replica_with_a_matching_identity_votes,
            a_restarted_node_votes_again_after_the_longest_ttl,
            the_previous_release_and_this_one_share_nodes,
            a_node_demoted_and_promoted_again_refuses,
            a_node_demoted_and_promoted_again_votes_for_an_ageless_proof,
            a_node_that_denies_info_votes_under_its_epoch_alone);
        $crate::conformance_tests!(@sealed $adapter;
            a_swapped_in_database_refuses_a_proven_connection,
            a_vouched_acquisition_reads_its_proofs_marker_alone,
            a_swapped_in_database_votes_for_an_unsealed_connection,
            a_swapped_in_database_refuses_an_untracked_client,
            a_lone_eviction_refuses_a_proven_connection,
            a_lone_eviction_votes_for_an_unsealed_connection,
            a_lone_eviction_refuses_an_untracked_client,
            a_node_declared_never_swapped_misses_a_swap,
            a_node_declared_never_swapped_still_seals_its_evictions,
            a_lone_eviction_is_heard_by_a_subscribed_connection,
            a_heard_eviction_refuses_an_unsealed_connection,
            a_heard_eviction_votes_for_a_deaf_connection,
            a_connection_that_hears_evictions_reads_no_eviction_count,
            a_user_denied_the_eviction_events_reads_the_count);
        $crate::conformance_tests!(@trim $adapter;
            a_tracking_table_trim_set_off_by_the_rivals_own_call_refuses_it,
            a_tracking_table_trim_set_off_by_the_rivals_own_call_is_unheard_with_noloop);
        $crate::conformance_tests!(@cluster $adapter;
            a_cluster_node_votes_for_keys_on_every_master,
            a_cluster_node_locks_several_keys_only_within_one_slot,
            a_cluster_node_follows_a_moved_slot,
            a_cluster_node_asks_its_other_seeds_when_its_url_is_down,
            a_cluster_lock_user_with_the_documented_acl_runs_every_operation,
            a_release_on_one_master_wakes_a_waiter_on_another,
            a_cluster_node_reaches_announced_addresses_through_its_map);
        $crate::conformance_tests!(@cluster_failover $adapter;
            a_promoted_replica_sits_out_for_its_slots,
            a_cluster_failover_and_failback_under_open_connections_sits_out,
            a_cluster_slot_migrated_with_a_held_key_keeps_exclusion);
        $crate::conformance_tests!(@cluster_memory $adapter;
            a_cluster_slot_that_lost_its_memory_refuses_a_proven_connection,
            a_cluster_slot_that_lost_its_memory_votes_for_a_deaf_connection,
            a_cluster_master_proves_each_slot_of_concurrent_first_locks,
            a_cluster_slot_dropped_and_given_back_refuses_a_proven_connection,
            a_cluster_slot_dropped_and_given_back_votes_for_a_deaf_connection);
        $crate::conformance_tests!(@cluster_migration $adapter;
            a_cluster_slot_mid_migration_is_followed_through_ask,
            an_ask_to_a_master_the_map_does_not_know_reuses_one_connection,
            a_release_notice_follows_its_slot_to_another_master,
            a_release_notice_follows_a_failover);
        $crate::conformance_tests!(@cluster_votes $adapter;
            a_cluster_lends_votes_on_distinct_masters_and_a_lock_survives_a_failover,
            a_cluster_vote_needs_a_cluster_and_one_claim,
            a_cluster_vote_release_wakes_a_waiter,
            a_cluster_vote_on_an_earlier_votes_master_refuses);
        $crate::conformance_tests!(@cluster_setups $adapter;
            a_cluster_setup_beside_two_nodes_locks_extends_and_releases,
            a_cluster_setup_of_three_votes_locks_extends_and_releases,
            a_cluster_setup_beside_two_nodes_hands_over_and_fences,
            a_cluster_setup_of_three_votes_hands_over_and_fences);
        $crate::conformance_tests!(@cluster_versions $adapter;
            a_mixed_version_cluster_speaks_each_masters_dialect);
        $crate::conformance_tests!(@errors $adapter;
            out_of_memory, read_only_replica, no_permission, no_auth, busy_node,
            a_refused_transaction_part_is_an_error_vote,
            a_user_with_the_documented_acl_runs_every_operation,
            a_user_denied_the_markers_seals_with_the_stamps,
            a_marker_refused_after_connecting_leaves_no_key_behind,
            keys_and_tiny_ttls, small_deployments, duplicate_nodes, a_node_position_past_the_list);
    };
    (@tls $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::tls::$case::<$adapter>();
            }
        )+
    };
    (@handles $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::handles::$case::<$adapter>();
            }
        )+
    };
    (@notices $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::notices::$case::<$adapter>();
            }
        )+
    };
    (@memory $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::memory::$case::<$adapter>();
            }
        )+
    };
    (@identity $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::identity::$case::<$adapter>();
            }
        )+
    };
    (@sealed $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::sealed::$case::<$adapter>();
            }
        )+
    };
    (@trim $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::trim::$case::<$adapter>();
            }
        )+
    };
    (@cluster $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::cluster::$case::<$adapter>();
            }
        )+
    };
    (@cluster_failover $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::cluster_failover::$case::<$adapter>();
            }
        )+
    };
    (@cluster_memory $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::cluster_memory::$case::<$adapter>();
            }
        )+
    };
    (@cluster_migration $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::cluster_migration::$case::<$adapter>();
            }
        )+
    };
    (@cluster_votes $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::cluster_votes::$case::<$adapter>();
            }
        )+
    };
    (@cluster_setups $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::cluster_setups::$case::<$adapter>();
            }
        )+
    };
    (@cluster_versions $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::cluster_versions::$case::<$adapter>();
            }
        )+
    };
    (@errors $adapter:ty; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::errors::$case::<$adapter>();
            }
        )+
    };
    ($adapter:ty; $($scenario:ident),+ $(,)?) => {
        $(
            #[test]
            fn $scenario() {
                $crate::conformance::scenarios::$scenario::<$adapter>();
            }
        )+
    };
}
