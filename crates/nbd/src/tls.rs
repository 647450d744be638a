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

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, Connection, RootCertStore, ServerConfig};

use crate::socket::{peek_input, recv_dontwait};

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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
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
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| key_error(dir, SERVER_CERT_FILE, SERVER_KEY_FILE, e))?;
    Ok(Arc::new(config))
}

/// A client's configuration from `dir`: servers must present a certificate
/// signed by `ca-cert.pem`; `client-cert.pem` and `client-key.pem` are
/// presented when `client-cert.pem` is there.
pub fn client_config(dir: &Path) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
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

fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A panic while holding the lock leaves rustls' state behind; the next
    // call reports whatever error that state is in.
    conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A TLS connection over TCP, server or client side, blocking, shared by
/// clones (`try_clone`): one thread may read while others write.
///
/// Reads take the connection's lock only to decrypt: a reader that finds
/// nothing waits for the socket in `poll(2)` without it (the socket's read
/// timeout applies). Writes encrypt and send under the lock, so records of
/// two writers never interleave; the socket's write timeout applies.
/// `Read` and `Write` are implemented for `&TlsStream` too.
#[derive(Debug)]
pub struct TlsStream {
    tcp: TcpStream,
    conn: Arc<Mutex<Connection>>,
}

/// What one `receive` found.
enum Received {
    /// Bytes, now decrypted (or handshake messages processed).
    Data,
    /// The peer closed its side.
    End,
    /// Nothing yet.
    Nothing,
}

impl TlsStream {
    /// A stream over `tcp` for a rustls connection of either side; nothing
    /// is sent until `handshake` or the first read or write.
    pub fn new(tcp: TcpStream, conn: impl Into<Connection>) -> TlsStream {
        TlsStream {
            tcp,
            conn: Arc::new(Mutex::new(conn.into())),
        }
    }

    /// The server side of a TLS connection on `tcp` (call `handshake`).
    pub fn server(tcp: TcpStream, config: Arc<ServerConfig>) -> io::Result<TlsStream> {
        let conn = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(TlsStream::new(tcp, conn))
    }

    /// The client side of a TLS connection on `tcp` to `server_name` (a
    /// DNS name or an IP address, which the server's certificate must
    /// name); call `handshake`.
    pub fn client(
        tcp: TcpStream,
        config: Arc<ClientConfig>,
        server_name: &str,
    ) -> io::Result<TlsStream> {
        let name = ServerName::try_from(server_name.to_owned()).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{server_name:?}: {e}"))
        })?;
        let conn = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
        Ok(TlsStream::new(tcp, conn))
    }

    /// Runs the TLS handshake to its end. An error (`InvalidData` with
    /// rustls' words: an unknown issuer, an expired certificate, no
    /// certificate from a client that must present one...) means the
    /// connection is unusable: close it.
    pub fn handshake(&self) -> io::Result<()> {
        loop {
            let mut conn = lock(&self.conn);
            self.send_pending(&mut conn)?;
            if !conn.is_handshaking() {
                return Ok(());
            }
            match self.receive(&mut conn)? {
                Received::Data => continue,
                Received::End => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the connection during the TLS handshake",
                    ))
                }
                Received::Nothing => {}
            }
            drop(conn);
            wait_readable(&self.tcp)?;
        }
    }

    /// Another handle on the same connection (for another thread).
    pub fn try_clone(&self) -> io::Result<TlsStream> {
        Ok(TlsStream {
            tcp: self.tcp.try_clone()?,
            conn: Arc::clone(&self.conn),
        })
    }

    /// The TCP socket, for its timeouts, addresses and `shutdown`.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Shuts the TCP socket down (no `close_notify`: see `close_notify`).
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.tcp.shutdown(how)
    }

    /// Tells the peer that nothing more will be sent (a TLS `close_notify`).
    pub fn close_notify(&self) -> io::Result<()> {
        let mut conn = lock(&self.conn);
        conn.send_close_notify();
        self.send_pending(&mut conn)
    }

    /// A read that never waits: `Ok(None)` when nothing can be read yet.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.read_inner(buf, false)
    }

    /// Whether a read would find bytes (decrypted, or on the socket);
    /// never waits for the peer.
    pub fn has_input(&self) -> bool {
        let mut conn = lock(&self.conn);
        let decrypted = matches!(io::BufRead::fill_buf(&mut conn.reader()), Ok(b) if !b.is_empty());
        decrypted || peek_input(self.tcp.as_raw_fd())
    }

    fn read_inner(&self, buf: &mut [u8], wait: bool) -> io::Result<Option<usize>> {
        if buf.is_empty() {
            return Ok(Some(0));
        }
        loop {
            let mut conn = lock(&self.conn);
            loop {
                match conn.reader().read(buf) {
                    Ok(n) => return Ok(Some(n)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                // After the peer's end, the reader says 0 or UnexpectedEof.
                if let Received::Nothing = self.receive(&mut conn)? {
                    break;
                }
            }
            drop(conn);
            if !wait {
                return Ok(None);
            }
            wait_readable(&self.tcp)?;
        }
    }

    /// Takes what the socket holds now (never waits) into rustls and
    /// processes it; sends what that makes rustls send (handshake
    /// messages, a key update's answer, an alert on a failure).
    fn receive(&self, conn: &mut Connection) -> io::Result<Received> {
        let mut source = Dontwait(&self.tcp, false);
        match conn.read_tls(&mut source) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Received::Nothing),
            Err(e) => return Err(e),
        }
        let end = source.1;
        if let Err(error) = conn.process_new_packets() {
            // The alert that tells the peer why, if the socket takes it.
            let _ = self.send_pending(conn);
            return Err(io::Error::new(io::ErrorKind::InvalidData, error));
        }
        self.send_pending(conn)?;
        Ok(if end { Received::End } else { Received::Data })
    }

    /// Writes out every TLS record rustls has ready.
    fn send_pending(&self, conn: &mut Connection) -> io::Result<()> {
        while conn.wants_write() {
            match conn.write_tls(&mut &self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The socket as a source that never waits (`WouldBlock` when empty);
/// the flag notes the end of the peer's stream.
struct Dontwait<'a>(&'a TcpStream, bool);

impl Read for Dontwait<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match recv_dontwait(self.0.as_raw_fd(), buf)? {
            Some(0) if !buf.is_empty() => {
                self.1 = true;
                Ok(0)
            }
            Some(n) => Ok(n),
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

/// Waits until `tcp` has bytes (or its end, or an error) to read, for up to
/// its read timeout (`TimedOut` then).
fn wait_readable(tcp: &TcpStream) -> io::Result<()> {
    let timeout_ms = match tcp.read_timeout()? {
        None => -1,
        Some(t) => i32::try_from(t.as_millis().max(1)).unwrap_or(i32::MAX),
    };
    let mut fd = libc::pollfd {
        fd: tcp.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd for the call.
        let n = unsafe { libc::poll(&mut fd, 1, timeout_ms) };
        if n > 0 {
            return Ok(());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS: no bytes from the peer within the read timeout",
            ));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl Read for &TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(self.read_inner(buf, true)?.unwrap_or(0))
    }
}

impl Write for &TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    /// Encrypts as much of `bufs` as rustls takes at once (64 KiB at most)
    /// and sends it, under the lock.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut conn = lock(&self.conn);
        let taken = conn.writer().write_vectored(bufs)?;
        self.send_pending(&mut conn)?;
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut conn = lock(&self.conn);
        self.send_pending(&mut conn)
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&*self).flush()
    }
}

#[cfg(test)]
mod tests;
