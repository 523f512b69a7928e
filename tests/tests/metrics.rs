//! The `metrics` feature, read back through a recorder: each metric of the table in
//! `redlock_redis::telemetry` moves when its event happens, with the documented labels.

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use redlock_tests::{RedisCluster, Servers};

/// The recorder's view: `name{label=value,…}` → value.
fn read(snapshotter: &Snapshotter) -> HashMap<String, DebugValue> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (name(&key), value))
        .collect()
}

fn name(key: &CompositeKey) -> String {
    let mut labels: Vec<String> = key
        .key()
        .labels()
        .map(|label| format!("{}={}", label.key(), label.value()))
        .collect();
    labels.sort();
    let kind = match key.kind() {
        MetricKind::Counter => "",
        MetricKind::Gauge => "gauge:",
        MetricKind::Histogram => "histogram:",
    };
    format!("{kind}{}{{{}}}", key.key().name(), labels.join(","))
}

fn counter(metrics: &HashMap<String, DebugValue>, key: &str) -> u64 {
    match metrics.get(key) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!(
            "{key}: {other:?}\nall: {:#?}",
            metrics.keys().collect::<Vec<_>>()
        ),
    }
}

fn samples(metrics: &HashMap<String, DebugValue>, key: &str) -> usize {
    match metrics.get(key) {
        Some(DebugValue::Histogram(values)) => values.len(),
        other => panic!(
            "{key}: {other:?}\nall: {:#?}",
            metrics.keys().collect::<Vec<_>>()
        ),
    }
}

#[test]
fn every_metric_moves_with_its_event() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let mut nodes = Servers::start(3);
    let redlock = redlock_blocking::Redlock::new(nodes.urls()).expect("client");
    let other = redlock_blocking::Redlock::new(nodes.urls()).expect("client");

    // Acquired, extended, held, released; a contended try; a waiter that hears the release.
    let lock = redlock.lock("m", Duration::from_secs(10)).expect("lock");
    lock.extend(Duration::from_secs(10)).expect("extend");
    assert!(other.try_lock("m", Duration::from_secs(10)).is_err());
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| other.lock("m", Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(300));
        assert!(lock.release().released() >= 2);
        waiter
            .join()
            .expect("waiter")
            .expect("taken after the release")
            .release();
    });

    // A node that lost its memory sits out: a new client's lock there names why.
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut nodes[0].client())
        .expect("FLUSHALL");
    let fresh = redlock_blocking::Redlock::new(nodes.urls()).expect("client");
    fresh
        .lock("sit", Duration::from_secs(10))
        .expect("the two other nodes grant")
        .release();

    // A lock lost while its work runs: two of three nodes die.
    let lost = redlock.with_lock("lost", Duration::from_secs(1), |lease| {
        nodes.kill(1);
        nodes.kill(2);
        lease.wait_lost(Duration::from_secs(10))
    });
    assert!(lost.is_err(), "reported lost");

    let metrics = read(&snapshotter);
    assert!(counter(&metrics, "redlock_acquisitions_total{outcome=acquired}") >= 3);
    assert!(counter(&metrics, "redlock_acquisitions_total{outcome=contended}") >= 1);
    assert!(
        samples(
            &metrics,
            "histogram:redlock_acquire_seconds{outcome=acquired}"
        ) >= 3
    );
    assert!(
        samples(
            &metrics,
            "histogram:redlock_acquire_attempts{outcome=contended}"
        ) >= 1
    );
    assert!(
        counter(
            &metrics,
            "redlock_extensions_total{result=extended,trigger=caller}"
        ) >= 1
    );
    assert!(counter(&metrics, "redlock_releases_total{}") >= 2);
    assert!(samples(&metrics, "histogram:redlock_hold_seconds{}") >= 2);
    let lost: u64 = ["not_held", "expired", "no_time_left"]
        .iter()
        .map(|cause| format!("redlock_locks_lost_total{{cause={cause}}}"))
        .filter(|key| metrics.contains_key(key))
        .map(|key| counter(&metrics, &key))
        .sum();
    assert!(lost >= 1, "a lost lock is counted with its cause");
    let node = format!("node={}", nodes[0].addr());
    assert!(
        samples(
            &metrics,
            &format!("histogram:redlock_node_request_seconds{{{node}}}")
        ) >= 5
    );
    assert!(
        counter(
            &metrics,
            &format!("redlock_node_sit_outs_total{{cause=no-epoch,{node}}}")
        ) >= 1
    );
    let dead = format!("node={}", nodes[1].addr());
    assert!(
        counter(
            &metrics,
            &format!("redlock_node_errors_total{{kind=connection,{dead}}}")
        ) >= 1
    );
    match metrics.get("gauge:redlock_waiting_locks{}") {
        Some(DebugValue::Gauge(value)) => assert_eq!(value.into_inner(), 0.0, "no lock waits now"),
        other => panic!("waiting gauge: {other:?}"),
    }

    // A cluster node: per master, its slot's requests and sit-outs, labelled by both.
    let cluster = RedisCluster::start(3, 0);
    let seed = cluster.masters()[1].url();
    let on_master_0 = (0..)
        .map(|i| format!("metric-{i}"))
        .find(|key| cluster.master_of(key.as_bytes()) == 0)
        .expect("a key on master 0");
    let client = redlock_blocking::Redlock::builder([&seed])
        .retry(redlock_blocking::RetryPolicy::once())
        .build()
        .expect("client");
    assert!(
        client
            .try_lock(on_master_0.as_str(), Duration::from_secs(10))
            .is_err(),
        "a fresh slot sits out"
    );
    client.trust_nodes().expect("trust every slot");
    client
        .lock(on_master_0.as_str(), Duration::from_secs(10))
        .expect("lock")
        .release();
    let metrics = read(&snapshotter);
    let labels = format!(
        "master={},node={}",
        cluster.masters()[0].addr(),
        cluster.masters()[1].addr()
    );
    assert!(
        samples(
            &metrics,
            &format!("histogram:redlock_master_request_seconds{{{labels}}}")
        ) >= 3,
        "the sit-out, the lock and the release on master 0"
    );
    assert_eq!(
        counter(
            &metrics,
            &format!("redlock_master_sit_outs_total{{cause=no-epoch,{labels}}}")
        ),
        1
    );
}
