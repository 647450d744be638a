//! TLS for wcache's links (NBD's STARTTLS, the replication link): the
//! configuration, loaded from a certificates directory laid out as nbdkit
//! and libnbd expect it, and `TlsStream`, a blocking TLS connection over
//! TCP that one thread reads while others write.
//!
//! It exists so that every TLS link of wcache checks its files, and moves
//! its bytes, one way. It must never hold the connection's lock while it
//! waits for the peer to send (a reader waits in `poll(2)`, unlocked), and
//! never accept a private key that does not match its certificate.
//!
//! The directory (`--tls-certificates DIR`): `ca-cert.pem` (the CA that
//! signed the peers' certificates), `server-cert.pem` and `server-key.pem`
//! (a server's), `client-cert.pem` and `client-key.pem` (a client's). The
//! crypto is rustls' with the *ring* provider: TLS 1.2 and 1.3, X.509
//! certificates only (rustls has no external pre-shared keys).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

mod stream;
pub use stream::TlsStream;

/// The CA certificate(s) peers are checked against.
pub const CA_CERT_FILE: &str = "ca-cert.pem";
/// A server's certificate chain, its own first.
pub const SERVER_CERT_FILE: &str = "server-cert.pem";
/// A server's private key.
pub const SERVER_KEY_FILE: &str = "server-key.pem";
/// A client's certificate chain (optional: presented when present).
pub const CLIENT_CERT_FILE: &str = "client-cert.pem";
/// A client's private key (needed when `client-cert.pem` is there).
pub const CLIENT_KEY_FILE: &str = "client-key.pem";

/// Whether a server asks its clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// Clients are not asked for a certificate (`ca-cert.pem` is not read).
    None,
    /// Every client must present a certificate signed by `ca-cert.pem`
    /// (mutual authentication); one that does not fails the handshake.
    Required,
}

/// Why a TLS configuration could not be loaded; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: missing", .path.display())]
    Missing { path: PathBuf },
    #[error("{}: unreadable: {source}", .path.display())]
    Unreadable { path: PathBuf, source: io::Error },
    #[error("{}: no certificate in it (a PEM \"CERTIFICATE\" block)", .path.display())]
    NoCertificate { path: PathBuf },
    #[error(
        "{}: no private key in it (a PEM \"PRIVATE KEY\", \"RSA PRIVATE KEY\" or \"EC PRIVATE KEY\" block)",
        .path.display()
    )]
    NoPrivateKey { path: PathBuf },
    #[error("{}: {reason}", .path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error("{}: does not match the certificate in {}", .key.display(), .cert.display())]
    KeyMismatch { key: PathBuf, cert: PathBuf },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// A server's configuration from `dir`: `server-cert.pem` and
/// `server-key.pem`, and with `ClientAuth::Required` `ca-cert.pem`, which
/// every client's certificate must be signed by.
pub fn server_config(
    dir: &Path,
    verify_clients: ClientAuth,
) -> Result<Arc<ServerConfig>, TlsError> {
    let (certs, key) = identity(dir, SERVER_CERT_FILE, SERVER_KEY_FILE)?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match verify_clients {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Required => {
            let roots = Arc::new(roots(dir)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| TlsError::Invalid {
                    path: dir.join(CA_CERT_FILE),
                    reason: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| key_error(dir, SERVER_CERT_FILE, SERVER_KEY_FILE, e))?;
    // Ours first (AES-128-GCM): GnuTLS clients list AES-256-GCM first.
    config.ignore_client_order = true;
    Ok(Arc::new(config))
}

/// A client's configuration from `dir`: servers must present a certificate
/// signed by `ca-cert.pem`; `client-cert.pem` and `client-key.pem` are
/// presented when `client-cert.pem` is there.
pub fn client_config(dir: &Path) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots(dir)?);
    let config = if dir.join(CLIENT_CERT_FILE).exists() {
        let (certs, key) = identity(dir, CLIENT_CERT_FILE, CLIENT_KEY_FILE)?;
        builder
            .with_client_auth_cert(certs, key)
            .map_err(|e| key_error(dir, CLIENT_CERT_FILE, CLIENT_KEY_FILE, e))?
    } else {
        builder.with_no_client_auth()
    };
    Ok(Arc::new(config))
}

/// rustls' *ring* provider with the AES-128-GCM suites first: AES-128 is
/// TLS 1.3's mandatory suite, as strong as any link needs, and takes ten
/// AES rounds a block to AES-256's fourteen, on both sides of every byte.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::CipherSuite::{
        TLS13_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    };
    let mut provider = rustls::crypto::ring::default_provider();
    let aes_128 = [
        TLS13_AES_128_GCM_SHA256,
        TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ];
    provider
        .cipher_suites
        .sort_by_key(|s| !aes_128.contains(&s.suite()));
    Arc::new(provider)
}

/// The bytes of `dir/name`, with an error that names it.
fn read_file(dir: &Path, name: &str) -> Result<(PathBuf, Vec<u8>), TlsError> {
    let path = dir.join(name);
    match std::fs::read(&path) {
        Ok(bytes) => Ok((path, bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(TlsError::Missing { path }),
        Err(source) => Err(TlsError::Unreadable { path, source }),
    }
}

/// Every certificate in `dir/name` (at least one).
fn certificates(dir: &Path, name: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let (path, bytes) = read_file(dir, name)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid {
            path: path.clone(),
            reason: format!("bad PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path });
    }
    Ok(certs)
}

/// The certificate chain and private key of one side.
fn identity(
    dir: &Path,
    cert_name: &str,
    key_name: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let certs = certificates(dir, cert_name)?;
    let (path, bytes) = read_file(dir, key_name)?;
    let key = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoPrivateKey { path: path.clone() },
        e => TlsError::Invalid {
            path: path.clone(),
            reason: format!("bad PEM: {e}"),
        },
    })?;
    Ok((certs, key))
}

/// The CAs of `ca-cert.pem`.
fn roots(dir: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(dir, CA_CERT_FILE)? {
        roots.add(cert).map_err(|e| TlsError::Invalid {
            path: dir.join(CA_CERT_FILE),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// rustls' refusal of a certificate and key, naming the file at fault.
fn key_error(dir: &Path, cert_name: &str, key_name: &str, error: rustls::Error) -> TlsError {
    let (cert, key) = (dir.join(cert_name), dir.join(key_name));
    match error {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch { key, cert },
        rustls::Error::InvalidCertificate(e) => TlsError::Invalid {
            path: cert,
            reason: format!("unusable certificate: {e:?}"),
        },
        e => TlsError::Invalid {
            path: key,
            reason: format!("unusable private key: {e}"),
        },
    }
}

#[cfg(test)]
mod tests;
