//! TLS settings for `rediss://` nodes (feature `tls`): which CA to trust and, for servers that
//! require one (`tls-auth-clients yes`), the client certificate to show.

use std::fmt;

/// The certificates a client uses with `rediss://` nodes: a CA to trust instead of the system's
/// roots, and a client certificate for mutual TLS. Every node of the client uses the same.
///
/// ```
/// # #[cfg(feature = "tls")] {
/// use redlock_redis::Tls;
///
/// let tls = Tls::new()
///     .ca(std::fs::read("ca.crt").unwrap_or_default())
///     .client_certificate(
///         std::fs::read("client.crt").unwrap_or_default(),
///         std::fs::read("client.key").unwrap_or_default(),
///     );
/// # let _ = tls; }
/// ```
///
/// It never prints a key: `Debug` shows only which parts are set.
#[derive(Clone, Default)]
#[must_use]
pub struct Tls {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    /// The system's trusted roots, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts only this CA certificate (PEM) for the nodes.
    pub fn ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca = Some(pem.into());
        self
    }

    /// Shows this client certificate and key (PEM) to nodes that require one.
    pub fn client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The redis crate's form.
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.clone(),
        }
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("ca", &self.ca.is_some())
            .field("client_certificate", &self.client.is_some())
            .finish()
    }
}
