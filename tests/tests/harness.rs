//! Proves every control of the real-server harness and the fault proxy works, against real
//! `redis-server` processes (no mocks).
//!
//! Timing assertions are lower bounds only ("took at least", "did not arrive within"): the CI
//! machine is a loaded 2-core box.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use redlock_tests::{FaultProxy, HarnessError, RedisCluster, RedisServer, ServerOptions, Servers};

/// A wait that must run out: nothing is supposed to arrive.
const SHORT: Duration = Duration::from_millis(300);
/// A wait that must not run out on a loaded machine.
const LONG: Duration = Duration::from_secs(10);

fn raw_connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, LONG).expect("raw TCP connect");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    stream.set_write_timeout(Some(LONG)).expect("write timeout");
    stream
}

/// Reads one RESP line (without its CRLF), waiting at most `timeout` for each read.
fn read_line(stream: &mut TcpStream, timeout: Duration) -> io::Result<Vec<u8>> {
    stream.set_read_timeout(Some(timeout))?;
    let mut line = Vec::new();
    let mut byte = [0_u8; 1];
    while !line.ends_with(b"\r\n") {
        stream.read_exact(&mut byte)?;
        line.push(byte[0]);
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn raw_ping(stream: &mut TcpStream) -> Vec<u8> {
    stream.write_all(b"PING\r\n").expect("send PING");
    read_line(stream, LONG).expect("PING reply")
}

fn assert_times_out(result: io::Result<Vec<u8>>) {
    match result {
        Err(err) => assert!(
            matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "expected a read timeout, got {err}"
        ),
        Ok(reply) => panic!(
            "expected a read timeout, got {:?}",
            String::from_utf8_lossy(&reply)
        ),
    }
}

/// A redis-rs connection to `server` through `proxy`, with long timeouts.
fn proxied(server: &RedisServer, proxy: &FaultProxy) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(server.connection_info_via(proxy.addr()))?;
    let connection = client.get_connection_with_timeout(LONG)?;
    connection.set_read_timeout(Some(LONG))?;
    connection.set_write_timeout(Some(LONG))?;
    Ok(connection)
}

fn ping(connection: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(connection)
}

#[test]
fn cluster_of_three_stores_and_counts() {
    let nodes = Servers::start(3);
    assert_eq!(nodes.len(), 3);
    let ports: BTreeSet<u16> = nodes.servers().iter().map(RedisServer::port).collect();
    assert_eq!(ports.len(), 3, "every node has its own port");
    assert_eq!(
        nodes.urls()[1],
        format!("redis://127.0.0.1:{}/", nodes[1].port())
    );

    for (index, server) in nodes.servers().iter().enumerate() {
        let mut connection = server.client();
        let value = format!("v{index}");
        let () = redis::cmd("SET")
            .arg("k")
            .arg(&value)
            .query(&mut connection)
            .expect("SET");
        assert_eq!(server.get("k"), Some(value.into_bytes()));
        assert_eq!(server.pttl("k"), -1);
    }

    nodes[0].set("lock", "mine");
    nodes[1].set("lock", "theirs");
    nodes[2].set("lock", "mine");
    assert_eq!(nodes.count_holding("lock", "mine"), 2);
    assert_eq!(nodes.count_with_key("lock"), 3);
    assert_eq!(nodes.count_with_key("absent"), 0);
}

#[test]
fn kill_makes_connections_refused() {
    let mut server = RedisServer::start();
    assert!(server.is_running());
    let addr = server.addr();
    server.kill();
    assert!(!server.is_running());

    let err = TcpStream::connect_timeout(&addr, LONG).expect_err("connect after kill");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    let err = server.try_client().err().expect("client after kill");
    assert!(err.is_connection_refusal(), "unexpected error: {err}");
}

#[test]
fn restart_empty_keeps_the_port_and_loses_the_data() {
    let mut server = RedisServer::start();
    server.set("k", "v");
    assert!(server.exists("k"));
    let port = server.port();

    server.restart_empty();
    assert_eq!(server.port(), port);
    assert!(server.is_running());
    assert_eq!(server.get("k"), None);
    assert_eq!(server.dbsize(), 0);

    // Also after an explicit kill.
    server.kill();
    server.restart_empty();
    assert_eq!(server.port(), port);
    assert_eq!(server.dbsize(), 0);
}

#[test]
fn pause_holds_replies_until_resume() {
    let mut server = RedisServer::start();
    let mut stream = raw_connect(server.addr());
    assert_eq!(raw_ping(&mut stream), b"+PONG");

    server.pause();
    assert!(server.is_running() && server.is_paused());
    stream.write_all(b"PING\r\n").expect("send PING");
    assert_times_out(read_line(&mut stream, SHORT));

    server.resume();
    assert!(!server.is_paused());
    assert_eq!(
        read_line(&mut stream, LONG).expect("reply after resume"),
        b"+PONG"
    );
}

#[test]
fn dropping_a_paused_server_does_not_hang() {
    let mut server = RedisServer::start();
    let addr = server.addr();
    server.pause();
    drop(server);
    let err = TcpStream::connect_timeout(&addr, LONG).expect_err("connect after drop");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
}

#[test]
fn requirepass_demands_auth() {
    let server = ServerOptions::new().requirepass("p@ss word/:").start();

    let anonymous = redis::Client::open(format!("redis://{}/", server.addr())).expect("client");
    let mut connection = anonymous
        .get_connection_with_timeout(LONG)
        .expect("anonymous connect");
    let err = ping(&mut connection).expect_err("PING without AUTH");
    assert_eq!(err.code(), Some("NOAUTH"), "unexpected error: {err}");

    assert_eq!(ping(&mut server.client()).expect("PING with AUTH"), "PONG");
    // The URL carries the (percent-encoded) password.
    let by_url = redis::Client::open(server.url()).expect("client from url()");
    let mut connection = by_url.get_connection_with_timeout(LONG).expect("connect");
    assert_eq!(ping(&mut connection).expect("PING via url()"), "PONG");
}

#[test]
fn acl_user_logs_in_by_name() {
    let server = ServerOptions::new().acl_user("alice", "wonder").start();
    let whoami: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query(&mut server.client())
        .expect("ACL WHOAMI");
    assert_eq!(whoami, "alice");
    assert!(server.url().starts_with("redis://alice:wonder@127.0.0.1:"));
}

#[test]
fn missing_binary_fails_loudly_with_install_hint() {
    let err = ServerOptions::new()
        .binary("/nonexistent/redis-server")
        .try_start()
        .expect_err("start with a missing binary");
    assert!(matches!(err, HarnessError::MissingBinary { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("apt-get install -y redis-server"),
        "{message}"
    );
    assert!(message.contains("REDIS_SERVER="), "{message}");
}

#[test]
fn maxmemory_one_makes_writes_fail_with_oom() {
    let server = ServerOptions::new().maxmemory(1).start();
    let err = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut server.client())
        .expect_err("SET over maxmemory");
    assert_eq!(err.code(), Some("OOM"), "unexpected error: {err}");
}

#[test]
fn replica_refuses_writes_with_readonly() {
    let primary = RedisServer::start();
    let replica = ServerOptions::new().replica_of(primary.addr()).start();
    let err = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut replica.client())
        .expect_err("SET on a replica");
    assert_eq!(err.code(), Some("READONLY"), "unexpected error: {err}");
}

#[test]
fn proxy_forwards_commands_and_counts() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    assert_eq!(proxy.target(), server.addr());
    assert_eq!(proxy.url(), format!("redis://{}/", proxy.addr()));

    let mut connection = proxied(&server, &proxy).expect("connect through proxy");
    let () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut connection)
        .expect("SET through proxy");
    assert_eq!(server.get("k"), Some(b"v".to_vec()));
    let value: Vec<u8> = redis::cmd("GET")
        .arg("k")
        .query(&mut connection)
        .expect("GET through proxy");
    assert_eq!(value, b"v");

    assert_eq!(proxy.connections_accepted(), 1);
    assert_eq!(proxy.open_connections(), 1);
    assert!(proxy.bytes_to_server() > 0);
    assert!(proxy.bytes_to_client() > 0);
}

#[test]
fn proxy_latency_delays_both_directions() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut connection = proxied(&server, &proxy).expect("connect through proxy");
    assert_eq!(ping(&mut connection).expect("PING"), "PONG");

    proxy.set_latency(Duration::from_millis(200));
    let started = Instant::now();
    assert_eq!(ping(&mut connection).expect("PING with latency"), "PONG");
    let elapsed = started.elapsed();
    // 200 ms each way: the request and the reply are both held.
    assert!(
        elapsed >= Duration::from_millis(390),
        "took only {elapsed:?}"
    );

    proxy.set_latency(Duration::ZERO);
    assert_eq!(ping(&mut connection).expect("PING after latency"), "PONG");
}

#[test]
fn proxy_stall_holds_bytes_until_heal() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut stream = raw_connect(proxy.addr());
    assert_eq!(raw_ping(&mut stream), b"+PONG");

    proxy.stall();
    stream.write_all(b"SET k v\r\n").expect("send SET");
    assert_times_out(read_line(&mut stream, SHORT));
    assert!(!server.exists("k"), "a stalled command reached the server");

    proxy.heal();
    assert_eq!(
        read_line(&mut stream, LONG).expect("reply after heal"),
        b"+OK"
    );
    assert!(server.exists("k"));
}

#[test]
fn proxy_drop_all_partitions_until_heal() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut connection = proxied(&server, &proxy).expect("connect through proxy");
    assert_eq!(ping(&mut connection).expect("PING"), "PONG");

    proxy.drop_all();
    ping(&mut connection).expect_err("PING on a dropped connection");
    let fresh = proxied(&server, &proxy).and_then(|mut connection| ping(&mut connection));
    assert!(fresh.is_err(), "a new connection worked during a partition");
    assert_eq!(proxy.open_connections(), 0);

    proxy.heal();
    let mut connection = proxied(&server, &proxy).expect("connect after heal");
    assert_eq!(ping(&mut connection).expect("PING after heal"), "PONG");
}

#[test]
fn proxy_reset_after_zero_loses_the_reply_but_the_command_runs() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut connection = proxied(&server, &proxy).expect("connect through proxy");
    assert_eq!(ping(&mut connection).expect("PING"), "PONG");

    proxy.reset_after(0);
    let result = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut connection);
    assert!(result.is_err(), "the SET reply should have been cut");
    assert_eq!(
        server.get("k"),
        Some(b"v".to_vec()),
        "the SET must have run"
    );

    // One-shot: the next connection works.
    let mut connection = proxied(&server, &proxy).expect("reconnect");
    assert_eq!(ping(&mut connection).expect("PING after reset"), "PONG");
}

#[test]
fn proxy_reset_after_n_cuts_inside_a_reply() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut stream = raw_connect(proxy.addr());

    proxy.reset_after(3);
    stream.write_all(b"PING\r\n").expect("send PING");
    stream.set_read_timeout(Some(LONG)).expect("read timeout");
    let mut received = Vec::new();
    stream
        .read_to_end(&mut received)
        .expect("read until closed");
    assert_eq!(received, b"+PO");
}

#[test]
fn dropping_a_stalled_proxy_closes_its_connections() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut stream = raw_connect(proxy.addr());
    assert_eq!(raw_ping(&mut stream), b"+PONG");
    proxy.stall();
    stream.write_all(b"PING\r\n").expect("send PING");
    // Let the proxy read the held PING before it goes.
    thread::sleep(Duration::from_millis(50));

    drop(proxy);
    stream.set_read_timeout(Some(LONG)).expect("read timeout");
    let mut rest = Vec::new();
    let closed = stream.read_to_end(&mut rest);
    assert!(
        closed.is_ok() || closed.is_err_and(|err| err.kind() == io::ErrorKind::ConnectionReset),
        "the client socket should be closed"
    );
    assert!(rest.is_empty(), "held bytes must not be delivered");
}

/// The servers a local cluster runs on: Redis 7 (`$REDIS_SERVER` or `redis-server`) and Valkey
/// 9.1 (`$VALKEY9_SERVER`, which `scripts/test.sh` sets; missing, the test fails loudly).
fn cluster_servers() -> Vec<(&'static str, ServerOptions)> {
    let valkey = ServerOptions::new()
        .valkey9()
        .unwrap_or_else(|err| panic!("{err}"));
    vec![("redis", ServerOptions::new()), ("valkey 9.1", valkey)]
}

#[test]
fn a_local_cluster_splits_the_slots_over_its_masters_and_attaches_replicas() {
    for (server, options) in cluster_servers() {
        let cluster = RedisCluster::try_start_with(3, 1, &options)
            .unwrap_or_else(|err| panic!("{server}: {err}"));
        let mut conn = cluster.masters()[0].client();
        // CLUSTER NODES, one line per node: id host:port@bus flags master-id … slots.
        let listing: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut conn)
            .expect("CLUSTER NODES");
        let lines: Vec<Vec<&str>> = listing
            .lines()
            .map(|line| line.split_whitespace().collect())
            .collect();
        let port_of = |fields: &[&str]| -> i64 {
            let addr = fields[1].split('@').next().expect("host:port");
            addr.rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("port")
        };
        let mut seen: Vec<(String, i64, Vec<i64>)> = lines
            .iter()
            .filter(|fields| fields[2].split(',').any(|flag| flag == "master"))
            .map(|master| {
                let mut replicas: Vec<i64> = lines
                    .iter()
                    .filter(|fields| fields[3] == master[0])
                    .map(|fields| port_of(fields))
                    .collect();
                replicas.sort_unstable();
                (master[8..].join(" "), port_of(master), replicas)
            })
            .collect();
        seen.sort_unstable_by_key(|(_, port, _)| *port);
        let mut expected: Vec<(String, i64, Vec<i64>)> = (0..3)
            .map(|m| {
                let (first, last) = cluster.slots_of(m);
                let replicas = cluster
                    .replicas_of(m)
                    .iter()
                    .map(|r| i64::from(r.port()))
                    .collect();
                (
                    format!("{first}-{last}"),
                    i64::from(cluster.masters()[m].port()),
                    replicas,
                )
            })
            .collect();
        expected.sort_unstable_by_key(|(_, port, _)| *port);
        assert_eq!(seen, expected, "{server}");
        assert_eq!(cluster.slots_of(0).0, 0, "{server}");
        assert_eq!(cluster.slots_of(2).1, 16383, "{server}");
    }
}

#[test]
fn the_core_hashes_keys_to_the_slots_the_servers_use() {
    use redlock_core::Slot;
    for (server, options) in cluster_servers() {
        let cluster = RedisCluster::try_start_with(3, 0, &options)
            .unwrap_or_else(|err| panic!("{server}: {err}"));
        let mut conn = cluster.masters()[0].client();
        // Every slot's tag, inside an epoch-like name, lands in that slot on the server.
        let names: Vec<String> = Slot::all()
            .map(|slot| format!("redlock:epoch:{{{}}}", slot.tag()))
            .collect();
        let mut pipe = redis::pipe();
        for name in &names {
            pipe.cmd("CLUSTER").arg("KEYSLOT").arg(name);
        }
        let slots: Vec<u16> = pipe.query(&mut conn).expect("CLUSTER KEYSLOT");
        let expected: Vec<u16> = Slot::all().map(Slot::get).collect();
        assert_eq!(slots, expected, "{server}: a slot tag lands elsewhere");
        // Keys of every shape: plain, tagged, empty braces, nested braces, binary.
        let keys: Vec<Vec<u8>> = (0u32..2000)
            .map(|i| match i % 5 {
                0 => format!("lock:{i}").into_bytes(),
                1 => format!("{{job-{}}}:{i}", i / 7).into_bytes(),
                2 => format!("x{{}}{{{i}}}").into_bytes(),
                3 => format!("a{{{{b{i}}}}}c").into_bytes(),
                _ => i.to_le_bytes().iter().map(|b| b ^ 0x7b).collect(),
            })
            .collect();
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("CLUSTER").arg("KEYSLOT").arg(key);
        }
        let served: Vec<u16> = pipe.query(&mut conn).expect("CLUSTER KEYSLOT");
        let ours: Vec<u16> = keys.iter().map(|key| Slot::of(key).get()).collect();
        assert_eq!(ours, served, "{server}");
        // A key sent to a master that does not own its slot is answered MOVED: a cluster node
        // needs the routing of issue 22.
        let key = b"lock:elsewhere";
        let owner = cluster.master_of(key);
        let other = (owner + 1) % 3;
        let mut wrong = cluster.masters()[other].client();
        let err = redis::cmd("SET")
            .arg(key)
            .arg("t")
            .query::<()>(&mut wrong)
            .expect_err("a key on the wrong master");
        assert!(
            err.to_string().contains("MOVED") || format!("{:?}", err.kind()).contains("Moved"),
            "{server}: {err}"
        );
        let mut right = cluster.masters()[owner].client();
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("t")
            .query(&mut right)
            .expect("the owner takes the key");
        assert_eq!(cluster.get(key).as_deref(), Some(&b"t"[..]), "{server}");
    }
}
