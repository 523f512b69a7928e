//! A cluster in the middle of a rolling upgrade, against a real local cluster whose masters run
//! different servers: each master speaks its own dialect, whichever master the client was
//! given as its seed.

use std::time::Duration;

use super::adapter::{Adapter, HeldLock};
use super::cluster::{build, once, one_per_master};
use crate::{RedisCluster, RedisServer, ServerOptions};

const TTL: Duration = Duration::from_secs(10);

/// Whether `server` has the native `DELIFEQ` (Valkey 9): its releases need no script.
fn has_delifeq(server: &RedisServer) -> bool {
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("DELIFEQ")
        .query(&mut server.client())
        .expect("COMMAND INFO");
    info.first()
        .is_some_and(|entry| *entry != redis::Value::Nil)
}

/// A cluster of a Valkey 8.1, a Valkey 9.1 and a default server (Redis 7 in the main run):
/// through a seed on the old version and then on the new one, a lock of a key on each master is
/// granted, extended and released there, no key left. Each master's releases take its own form:
/// `DELIFEQ` exactly where the server has it (one per release there), a script elsewhere. A
/// client that took one dialect for the whole cluster would send `DELIFEQ` to a server without
/// it (the release fails) or never send it (the count stays).
pub fn a_mixed_version_cluster_speaks_each_masters_dialect<A: Adapter>() {
    let base = ServerOptions::new().deny_scripting(false);
    let masters = [
        base.clone()
            .valkey()
            .expect("VALKEY_SERVER names a Valkey 8.1 (scripts/ensure-valkey.sh)"),
        base.clone()
            .valkey9()
            .expect("VALKEY9_SERVER names a Valkey 9.1 (scripts/ensure-valkey.sh 9.1)"),
        base,
    ];
    let cluster = RedisCluster::try_start_each(&masters, 0).expect("a cluster of three versions");
    let native: Vec<bool> = cluster.masters().iter().map(has_delifeq).collect();
    assert_eq!(
        &native[..2],
        [false, true],
        "Valkey 8.1 has no DELIFEQ, Valkey 9.1 has"
    );
    let resources = one_per_master(&cluster, "upgrade");
    for seed in [0, 1] {
        let client: A = build(&[cluster.masters()[seed].url()], &once());
        client.trust_every_node(1, "trust every slot");
        let before: Vec<u64> = cluster
            .masters()
            .iter()
            .map(|master| master.calls("delifeq"))
            .collect();
        for (master, resource) in resources.iter().enumerate() {
            let mut lock = client
                .lock(resource, TTL)
                .unwrap_or_else(|err| panic!("{}: master {master} grants: {err}", A::NAME));
            assert_eq!(cluster.get(resource.as_bytes()), Some(lock.token()));
            lock.extend(TTL)
                .unwrap_or_else(|err| panic!("{}: master {master} extends: {err}", A::NAME));
            let report = lock.release();
            assert_eq!(
                report.released(),
                1,
                "{}: master {master} releases (seed {seed}): {report:?}",
                A::NAME
            );
            assert_eq!(cluster.get(resource.as_bytes()), None, "no key left");
        }
        for (master, server) in cluster.masters().iter().enumerate() {
            assert_eq!(
                server.calls("delifeq") - before[master],
                u64::from(native[master]),
                "{}: master {master}'s release form (seed {seed}, native: {})",
                A::NAME,
                native[master]
            );
        }
    }
}
