//! TLS for local servers (feature `tls`): a certificate authority, a server certificate for
//! 127.0.0.1 and a client certificate, all made when asked for and written to a temp dir — no
//! certificate file is ever committed.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Once;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;

use crate::error::HarnessError;

/// A certificate and its private key, in PEM.
#[derive(Clone)]
pub struct Pem {
    /// The certificate.
    pub cert: String,
    /// Its private key.
    pub key: String,
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pem(..)")
    }
}

/// A CA and the certificates it signed, with their files on disk (for `redis-server`).
#[derive(Debug)]
pub struct TlsFiles {
    /// The certificate authority's certificate (what clients trust).
    pub ca: Pem,
    /// The server's certificate, for `127.0.0.1` and `localhost`.
    pub server: Pem,
    /// A client certificate, for servers that require one (mutual TLS).
    pub client: Pem,
    dir: TempDir,
}

impl TlsFiles {
    /// Makes a fresh CA, server and client certificate, and writes them to a temp dir. Also
    /// installs the process's rustls crypto provider (ring), once.
    ///
    /// # Errors
    /// If a certificate cannot be made or written.
    pub fn generate() -> Result<Self, HarnessError> {
        install_crypto_provider();
        let ca_key = KeyPair::generate().map_err(tls_error)?;
        let mut ca_params = CertificateParams::new(Vec::new()).map_err(tls_error)?;
        ca_params.distinguished_name = name("redlock-local test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(tls_error)?;
        let issuer = Issuer::new(ca_params, &ca_key);

        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, cn: &str| {
            let key = KeyPair::generate().map_err(tls_error)?;
            let mut params = CertificateParams::new(names).map_err(tls_error)?;
            params.distinguished_name = name(cn);
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &issuer).map_err(tls_error)?;
            Ok::<_, HarnessError>(Pem {
                cert: cert.pem(),
                key: key.serialize_pem(),
            })
        };
        let server = leaf(
            vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            ExtendedKeyUsagePurpose::ServerAuth,
            "redlock-local server",
        )?;
        let client = leaf(
            Vec::new(),
            ExtendedKeyUsagePurpose::ClientAuth,
            "redlock-local client",
        )?;
        let ca = Pem {
            cert: ca_cert.pem(),
            key: ca_key.serialize_pem(),
        };
        let dir = tempfile::Builder::new().prefix("redlock-tls-").tempdir()?;
        for (file, pem) in [
            ("ca.crt", &ca.cert),
            ("server.crt", &server.cert),
            ("server.key", &server.key),
            ("client.crt", &client.cert),
            ("client.key", &client.key),
        ] {
            fs::write(dir.path().join(file), pem)?;
        }
        Ok(Self {
            ca,
            server,
            client,
            dir,
        })
    }

    /// Where file `name` (`ca.crt`, `server.crt`, `server.key`, `client.crt`, `client.key`) is.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// What a client needs to talk to these servers: the CA, and the client certificate.
    pub fn client_certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: self.client.cert.clone().into_bytes(),
                client_key: self.client.key.clone().into_bytes(),
            }),
            root_cert: Some(self.ca.cert.clone().into_bytes()),
        }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}

fn tls_error(err: rcgen::Error) -> HarnessError {
    HarnessError::Io(std::io::Error::other(format!(
        "making a test certificate: {err}"
    )))
}

/// rustls needs one crypto provider per process; the clients of these servers use ring.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Another part of the process may have installed one already; that one is fine too.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
