//! The conformance subset over TLS, for every adapter: servers that speak only TLS with
//! certificates made at test time (`redlock_local::TlsFiles`), server-only and mutual TLS, and a
//! client that trusts the wrong CA.

use std::sync::Arc;
use std::time::Duration;

use redlock_core::{NodeErrorKind, Vote};
use redlock_redis::{Error, Tls};

use super::adapter::{Adapter, HeldLock, Options};
use super::scenarios::eventually;
use crate::{ServerOptions, Servers};
use redlock_local::TlsFiles;

const TTL: Duration = Duration::from_secs(10);

fn tls_cluster(count: usize, client_certs: bool) -> (Servers, Arc<TlsFiles>) {
    let files = Arc::new(TlsFiles::generate().unwrap_or_else(|err| panic!("{err}")));
    let options = ServerOptions::new().tls(files.clone(), client_certs);
    let nodes =
        Servers::try_start_each(&vec![options; count]).unwrap_or_else(|err| panic!("{err}"));
    (nodes, files)
}

fn client<A: Adapter>(nodes: &Servers, tls: Tls) -> A {
    let options = Options {
        tls: Some(tls),
        retry: Some(redlock_core::RetryPolicy::once()),
        ..Options::default()
    };
    A::build(&nodes.urls(), &options).unwrap_or_else(|err| panic!("{}: {err}", A::NAME))
}

/// Server-only TLS: lock, contention, release, and a node down.
pub fn tls_lock_contention_release_and_node_down<A: Adapter>() {
    let (mut nodes, files) = tls_cluster(5, false);
    assert!(nodes.urls().iter().all(|url| url.starts_with("rediss://")));
    let trust = || Tls::new().ca(files.ca.cert.clone());
    let first: A = client(&nodes, trust());
    let second: A = client(&nodes, trust());
    let lock = first.lock("tls", TTL).expect("lock over TLS");
    assert!(
        eventually(Duration::from_secs(5), || nodes
            .count_holding("tls", lock.token())
            == 5),
        "held on every node"
    );
    assert!(matches!(
        second.try_lock("tls", TTL),
        Err(Error::Contended(_))
    ));
    // A quorum answered in time; every key goes (a loaded machine may answer late).
    assert!(lock.release().released() >= 3);
    assert!(
        eventually(Duration::from_secs(5), || nodes.count_with_key("tls") == 0),
        "released on every node"
    );
    nodes.kill(0);
    let lock = second.lock("tls", TTL).expect("4 of 5 nodes over TLS");
    assert!(lock.release().released() >= 3);
}

/// Mutual TLS: with the client certificate it works; without, every node refuses, and the
/// error says so per node.
pub fn mutual_tls_needs_the_client_certificate<A: Adapter>() {
    let (nodes, files) = tls_cluster(3, true);
    let with_cert: A = client(
        &nodes,
        Tls::new()
            .ca(files.ca.cert.clone())
            .client_certificate(files.client.cert.clone(), files.client.key.clone()),
    );
    let lock = with_cert
        .lock("mtls", TTL)
        .expect("lock with a client certificate");
    assert!(lock.release().released() >= 2);

    let without: A = client(&nodes, Tls::new().ca(files.ca.cert.clone()));
    match without.lock("mtls", TTL) {
        Err(Error::Unavailable(detail)) => {
            println!("{}: without a client certificate: {detail}", A::NAME);
            let refused = detail
                .nodes
                .iter()
                .filter(|node| node.result == Vote::Failed(NodeErrorKind::Tls))
                .count();
            assert!(
                refused >= 2,
                "a quorum refused the handshake, and said so: {detail}"
            );
        }
        other => panic!("{}: expected every node to refuse, got {other:?}", A::NAME),
    }
    assert_eq!(nodes.count_with_key("mtls"), 0);
}

/// A client that trusts another CA: every node's failure is named, nothing is locked.
pub fn a_wrong_ca_is_a_clear_per_node_error<A: Adapter>() {
    let (nodes, _files) = tls_cluster(3, false);
    let other = TlsFiles::generate().unwrap_or_else(|err| panic!("{err}"));
    let wrong: A = client(&nodes, Tls::new().ca(other.ca.cert.clone()));
    match wrong.lock("ca", TTL) {
        Err(Error::Unavailable(detail)) => {
            let text = detail.to_string();
            println!("{}: wrong CA: {text}", A::NAME);
            for server in nodes.servers() {
                assert!(
                    text.contains(&server.addr().to_string()),
                    "names each node: {text}"
                );
            }
            assert!(
                text.contains("TLS handshake: certificate not accepted"),
                "{text}"
            );
        }
        other => panic!("{}: expected every node to fail, got {other:?}", A::NAME),
    }
    assert_eq!(nodes.count_with_key("ca"), 0);
}
