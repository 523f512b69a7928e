//! Server errors and edge-case input, each against real servers: a typed per-node error or a
//! clean outcome, never a panic or a hang, nothing of another holder lost, no password printed.

use std::thread;
use std::time::{Duration, Instant};

use redlock_core::{LockRequest, MAX_KEY_LEN, NodeErrorKind, RetryPolicy, Vote};
use redlock_redis::Error;

use super::adapter::{Adapter, HeldLock, Options};
use crate::{RedisServer, ServerOptions, Servers};

const TTL: Duration = Duration::from_secs(10);

fn build<A: Adapter>(urls: &[String]) -> A {
    A::build(urls, &Options::default())
        .unwrap_or_else(|err| panic!("{}: build failed: {err}", A::NAME))
}

/// Two plain servers plus the odd node at `odd_url`: the odd node fails, the lock is still
/// taken on the other two, and the odd node's vote is `Failed(kind)`.
fn odd_node_fails<A: Adapter>(odd_url: String, kind: NodeErrorKind) {
    odd_node_fails_on::<A>(odd_url, kind, "res");
}

/// [`odd_node_fails`] for lock `resource`.
fn odd_node_fails_on<A: Adapter>(odd_url: String, kind: NodeErrorKind, resource: &str) {
    let nodes = Servers::start(2);
    let mut urls = nodes.urls();
    urls.push(odd_url);
    let redlock: A = build(&urls);
    let lock = redlock.lock(resource, TTL).expect("two of three grant");
    let report = lock.release();
    assert_eq!(report.released(), 2, "{report:?}");
    // With quorum 3 the odd node's answer decides, so its vote is always recorded.
    let strict = A::build(
        &urls,
        &Options {
            quorum: Some(3),
            retry: Some(RetryPolicy::once()),
            ..Options::default()
        },
    )
    .expect("build");
    match strict.try_lock(resource, TTL) {
        Err(Error::Unavailable(detail)) => {
            assert_eq!(detail.nodes[2].result, Vote::Failed(kind), "{detail}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert_eq!(
        nodes.count_with_key(resource),
        0,
        "the failed round was cleaned up"
    );
}

/// `OOM` from a node with `maxmemory 1`.
pub fn out_of_memory<A: Adapter>() {
    let odd = ServerOptions::new().maxmemory(1).start();
    odd_node_fails::<A>(odd.url(), NodeErrorKind::OutOfMemory);
    assert!(!odd.exists("res"), "nothing left on the failing node");
}

/// `READONLY` from a replica.
pub fn read_only_replica<A: Adapter>() {
    let primary = RedisServer::start();
    let replica = ServerOptions::new().replica_of(primary.addr()).start();
    odd_node_fails::<A>(replica.url(), NodeErrorKind::ReadOnly);
    assert!(!replica.exists("res"), "nothing left on the replica");
}

/// A transaction form whose part the node refuses while queuing it — an ACL user denied
/// `@scripting` and `PEXPIRE`, resuming a lock (`MULTI; PEXPIRE … GT; GET …; EXEC`) — is
/// answered `EXECABORT`: an error vote naming the refusal, and nothing changed on the node.
pub fn a_refused_transaction_part_is_an_error_vote<A: Adapter>() {
    let user = [
        "--user",
        "noexpire",
        "on",
        ">noexpire-pw",
        "~*",
        "&*",
        "+@all",
        "-@scripting",
        "-pexpire",
    ];
    let nodes = Servers::start_with(3, &ServerOptions::new().deny_scripting(false).args(user));
    let holder: A = build(&nodes.urls());
    let lock = holder.lock("res", TTL).expect("lock");
    let token = lock.token();
    std::mem::forget(lock);
    // The lock returns on a quorum; the last node's `SET` may still be on its way.
    assert!(super::scenarios::eventually(Duration::from_secs(5), || {
        nodes.count_holding("res", &token) == 3
    }));
    let limited: Vec<String> = nodes
        .addrs()
        .iter()
        .map(|addr| format!("redis://noexpire:noexpire-pw@{addr}/"))
        .collect();
    let pttl_before: Vec<i64> = nodes.servers().iter().map(|s| s.pttl("res")).collect();
    let resumer: A = build(&limited);
    match resumer.resume("res", &token, 3 * TTL) {
        Err(Error::Unavailable(detail)) => {
            let refused = Vote::Failed(NodeErrorKind::NoPermission);
            assert!(detail.nodes.iter().any(|n| n.result == refused), "{detail}");
            assert!(
                detail
                    .nodes
                    .iter()
                    .all(|n| n.result == refused || n.result == Vote::Pending),
                "{detail}"
            );
        }
        other => panic!("{}: expected unavailable, got {other:?}", A::NAME),
    }
    for (server, before) in nodes.servers().iter().zip(pttl_before) {
        assert_eq!(server.get("res"), Some(token.clone()));
        assert!(server.pttl("res") <= before, "raised on {}", server.addr());
    }
}

/// `NOPERM` from an ACL user who may not touch the lock's keys.
pub fn no_permission<A: Adapter>() {
    let odd = ServerOptions::new()
        .args([
            "--user",
            "limited",
            "on",
            ">limited-pw",
            "~other:*",
            "+@all",
        ])
        .start();
    let url = format!("redis://limited:limited-pw@{}/", odd.addr());
    odd_node_fails::<A>(url, NodeErrorKind::NoPermission);
    assert!(!odd.exists("res"), "nothing left on the failing node");
}

/// `NOAUTH`: the node wants a password the URL does not give.
pub fn no_auth<A: Adapter>() {
    let odd = ServerOptions::new().requirepass("needed-pw").start();
    let url = format!("redis://{}/", odd.addr());
    odd_node_fails::<A>(url, NodeErrorKind::Auth);
    assert!(!odd.exists("res"), "nothing left on the failing node");
}

/// `BUSY`: the node is running a long script.
pub fn busy_node<A: Adapter>() {
    let odd = ServerOptions::new()
        .args(["--busy-reply-threshold", "50"])
        .start();
    let mut conn = odd.client();
    let busy = thread::spawn(move || {
        let script =
            "local s = redis.call('TIME')[1] while redis.call('TIME')[1] - s < 4 do end return 1";
        let _: redis::RedisResult<i64> = redis::cmd("EVAL").arg(script).arg(0).query(&mut conn);
    });
    let busy_now = super::scenarios::eventually(
        Duration::from_secs(5),
        || matches!(odd.try_client().map(|mut c| redis::cmd("PING").query::<String>(&mut c)), Ok(Err(e)) if e.code() == Some("BUSY")),
    );
    assert!(busy_now, "the node became busy");
    odd_node_fails::<A>(odd.url(), NodeErrorKind::Busy);
    busy.join().expect("busy script thread");
    assert!(!odd.exists("res"), "nothing left on the busy node");
}

/// Binary and oversized keys, and every TTL from 1 to 10 ms.
pub fn keys_and_tiny_ttls<A: Adapter>() {
    let nodes = Servers::start(3);
    let redlock: A = build(&nodes.urls());
    let binary = LockRequest::new(b"\0\xff\r\n lock".to_vec(), TTL).retry(RetryPolicy::once());
    let lock = redlock.acquire(binary).expect("binary-safe keys");
    let everywhere = super::scenarios::eventually(Duration::from_secs(5), || {
        nodes.count_with_key(b"\0\xff\r\n lock".to_vec()) == 3
    });
    assert!(everywhere, "the binary key reached every node");
    lock.release();
    let oversized = LockRequest::new(vec![b'k'; MAX_KEY_LEN + 1], TTL);
    assert!(matches!(redlock.acquire(oversized), Err(Error::Config(_))));
    for ms in 1..=10 {
        let start = Instant::now();
        match redlock.try_lock("tiny", Duration::from_millis(ms)) {
            Ok(lock) => {
                lock.release();
            }
            Err(
                Error::Config(_) | Error::TooSlow(_) | Error::Unavailable(_) | Error::Contended(_),
            ) => {}
            Err(other) => panic!("ttl {ms} ms: {other}"),
        }
        assert!(start.elapsed() < Duration::from_secs(5), "ttl {ms} ms hung");
    }
    assert!(matches!(
        redlock.try_lock("tiny", Duration::from_millis(2)),
        Err(Error::Config(_))
    ));
}

/// One, two and four nodes; with two, one down is already too many.
pub fn small_deployments<A: Adapter>() {
    for n in [1, 2, 4] {
        let mut nodes = Servers::start(n);
        let redlock: A = build(&nodes.urls());
        let lock = redlock
            .lock("res", TTL)
            .unwrap_or_else(|err| panic!("{n} nodes: {err}"));
        lock.release();
        if n == 2 {
            nodes.kill(1);
            assert!(matches!(
                redlock.try_lock("res", TTL),
                Err(Error::Unavailable(_))
            ));
        }
    }
}

/// A node position past the URL list in `swapdb_never_runs_on` is an error that names it.
pub fn a_node_position_past_the_list<A: Adapter>() {
    let nodes = Servers::start(2);
    let options = Options {
        swapdb_never_runs_on: vec![1, 2],
        ..Options::default()
    };
    match A::build(&nodes.urls(), &options) {
        Err(err @ Error::InvalidNode { index: 2, .. }) => {
            assert!(err.to_string().contains("2 node URLs"), "{err}");
        }
        Err(other) => panic!("expected node #2 named, got {other}"),
        Ok(_) => panic!("a position past the list was accepted"),
    }
}

/// The same server twice is a configuration error, not two votes.
pub fn duplicate_nodes<A: Adapter>() {
    let nodes = Servers::start(2);
    let mut urls = nodes.urls();
    urls.push(urls[0].clone());
    match A::build(&urls, &Options::default()) {
        Err(Error::InvalidNode { index: 2, .. }) => {}
        Err(other) => panic!("expected an invalid node, got {other}"),
        Ok(_) => panic!("the same server was accepted twice"),
    }
}

/// The ACL the README gives a lock user whose key prefix is `locks:`: its lock keys, the epoch
/// and its identity, its fence counters; its release channels and the eviction events; every
/// command but the `@dangerous` ones, and `INFO` (the memory identity; `CLIENT TRACKING` and
/// `CLIENT CACHING`, the memory watch, are not `@dangerous`).
pub(super) const LOCK_USER: [&str; 14] = [
    "--user",
    "locker",
    "on",
    ">locker-pw",
    "~locks:*",
    "~redlock:epoch",
    "~redlock:epoch:id",
    "~redlock:epoch:m:*",
    "~redlock:fence:locks:*",
    "&redlock:released:locks:*",
    "&__keyevent@*__:evicted",
    "+@all",
    "-@dangerous",
    "+info",
];

/// Node URLs for user `locker`.
pub(super) fn as_locker(nodes: &Servers) -> Vec<String> {
    nodes
        .addrs()
        .iter()
        .map(|addr| format!("redis://locker:locker-pw@{addr}/"))
        .collect()
}

/// A user granted exactly the README's ACL runs every operation: trust, a restart-aware and
/// fenced acquisition, contention, extension, release. Without the epoch's identity key in it
/// (the negative control), every vote is refused `NOPERM`, so the list is not wider than it
/// needs to be on that point.
pub fn a_user_with_the_documented_acl_runs_every_operation<A: Adapter>() {
    let options = Options {
        key_prefix: Some(b"locks:".to_vec()),
        retry: Some(RetryPolicy::once()),
        ..Options::default()
    };
    let nodes = Servers::start_with(
        3,
        &ServerOptions::new().deny_scripting(false).args(LOCK_USER),
    );
    let client = A::build(&as_locker(&nodes), &options).expect("build");
    client.trust_every_node(3, "trusted");
    let lock = client
        .acquire(LockRequest::new("job", TTL).fenced())
        .unwrap_or_else(|err| panic!("{}: fenced lock: {err}", A::NAME));
    assert!(lock.fence().is_some(), "a fence");
    let rival = A::build(&as_locker(&nodes), &options).expect("build");
    assert!(
        matches!(rival.try_lock("job", TTL), Err(Error::Contended(_))),
        "the rival sees it held"
    );
    lock.extend_shared(2 * TTL).expect("extended");
    assert_eq!(lock.release().released(), 3, "released everywhere");
    // The fast path is on: the user's connections track the epoch (client tracking, flag `t`).
    for server in nodes.servers() {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut server.client())
            .expect("CLIENT LIST");
        let tracking = list.lines().any(|client| {
            let field = |name: &str| {
                client
                    .split(' ')
                    .find_map(|kv| kv.strip_prefix(name))
                    .unwrap_or_default()
            };
            field("user=") == "locker" && field("flags=").contains('t')
        });
        assert!(tracking, "{}: no tracking connection: {list}", A::NAME);
    }

    let mut narrower: Vec<&str> = LOCK_USER.to_vec();
    narrower.retain(|rule| *rule != "~redlock:epoch:id");
    let nodes = Servers::start_with(
        3,
        &ServerOptions::new().deny_scripting(false).args(narrower),
    );
    let client = A::build(&as_locker(&nodes), &options).expect("build");
    match client.try_lock("job", TTL) {
        Err(Error::Unavailable(detail)) => assert!(
            detail
                .nodes
                .iter()
                .all(|n| n.result == Vote::Failed(NodeErrorKind::NoPermission)
                    || n.result == Vote::Pending),
            "{detail}"
        ),
        other => panic!("{}: expected unavailable, got {other:?}", A::NAME),
    }
}

/// A user whose ACL leaves out the markers (`~redlock:epoch:m:*`), or allows them for reading
/// only (`%R~redlock:epoch:m:*`), still locks, with scripts and without: each connection asks
/// when it is made (a `SET … XX` that writes nothing, refused `NOPERM`), and its proofs write
/// no marker — a native proof's transaction never includes one (a refused write would abort
/// it), and no seal waits for one a checked script could not write. Its vouched acquisitions
/// read the stamps (`MGET`), and no marker is ever written.
pub fn a_user_denied_the_markers_seals_with_the_stamps<A: Adapter>() {
    const LOCKS: usize = 3;
    let options = Options {
        key_prefix: Some(b"locks:".to_vec()),
        ..Options::default()
    };
    const READ_ONLY: Option<&str> = Some("%R~redlock:epoch:m:*");
    let cases = [
        (None, false),
        (None, true),
        (READ_ONLY, false),
        (READ_ONLY, true),
    ];
    for (markers, deny_scripting) in cases {
        let name = format!(
            "{}, markers {}, scripting denied: {deny_scripting}",
            A::NAME,
            markers.unwrap_or("left out")
        );
        let mut rules: Vec<&str> = LOCK_USER.to_vec();
        rules.retain(|rule| *rule != "~redlock:epoch:m:*");
        rules.extend(markers);
        if deny_scripting {
            rules.push("-@scripting");
        }
        let server_options = ServerOptions::new().deny_scripting(false).args(rules);
        let nodes = Servers::start_with(3, &server_options);
        let client = A::build(&as_locker(&nodes), &options).expect("build");
        client.trust_every_node(3, "trusted");
        for i in 0..LOCKS {
            let lock = client
                .lock(&format!("job-{i}"), TTL)
                .unwrap_or_else(|err| panic!("{name}: lock {i}: {err}"));
            lock.release();
        }
        for server in nodes.servers() {
            let mget = server.calls("mget");
            assert!(
                mget >= u64::try_from(LOCKS - 1).unwrap_or(0),
                "{name}: {} sealed {mget} of {LOCKS} locks with the stamps",
                server.addr()
            );
            let markers: Vec<String> = redis::cmd("KEYS")
                .arg("redlock:epoch:m:*")
                .query(&mut server.client())
                .expect("KEYS");
            assert!(markers.is_empty(), "{name}: no marker: {markers:?}");
        }
    }
}

/// A marker the user's ACL stops allowing after its connections were made (`ACL SETUSER`):
/// the next native proof's transaction, which writes one, is refused while queued and runs
/// nothing — its acquisition went inside it, so no key is left behind (on a node that can
/// delete a key only by script, none could be released) — and markers go off on that
/// connection: the next lock proves without one. With scripts, the checked script's write
/// fails quietly and the proof's probe says so. Each case, with scripts and without, on one
/// node (a refusal there is the whole round).
pub fn a_marker_refused_after_connecting_leaves_no_key_behind<A: Adapter>() {
    let options = Options {
        key_prefix: Some(b"locks:".to_vec()),
        retry: Some(RetryPolicy::once()),
        // Proofs live half of it: a second proof on the same connections after a pause.
        max_ttl: Some(Duration::from_secs(2)),
        ..Options::default()
    };
    for deny_scripting in [false, true] {
        let name = format!("{}, scripting denied: {deny_scripting}", A::NAME);
        let mut rules: Vec<&str> = LOCK_USER.to_vec();
        if deny_scripting {
            rules.push("-@scripting");
        }
        let server_options = ServerOptions::new().deny_scripting(false).args(rules);
        let nodes = Servers::start_with(1, &server_options);
        let client = A::build(&as_locker(&nodes), &options).expect("build");
        client.trust_every_node(1, "trusted");
        let ttl = Duration::from_secs(2);
        // Another resource: on a node that deletes only by script, no release deletes a key.
        let lock = client
            .lock("warm-up", ttl)
            .unwrap_or_else(|err| panic!("{name}: first lock: {err}"));
        lock.release();
        let server = &nodes.servers()[0];
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("locker")
            .arg("resetkeys")
            .arg("~locks:*")
            .arg("~redlock:epoch")
            .arg("~redlock:epoch:id")
            .arg("~redlock:fence:locks:*")
            .query(&mut server.client())
            .expect("ACL SETUSER");
        // The proof ends (half of `max_ttl`); the next lock proves again, on the same connection.
        thread::sleep(Duration::from_millis(1_200));
        let refused = client.try_lock("job", ttl);
        let left: bool = redis::cmd("EXISTS")
            .arg("locks:job")
            .query(&mut server.client())
            .expect("EXISTS");
        if deny_scripting {
            assert!(
                matches!(&refused, Err(Error::Unavailable(_))),
                "{name}: the proof's transaction was refused: {:?}",
                refused.as_ref().err()
            );
        }
        assert!(
            !left || refused.is_ok(),
            "{name}: a refused proof left its key behind"
        );
        drop(refused);
        let lock = client
            .lock("again", ttl)
            .unwrap_or_else(|err| panic!("{name}: lock after the ACL change: {err}"));
        lock.release();
    }
}
