//! One replication connection as the two ends use it: a reading half for
//! one thread, a writing half for others, and a way to end it from anywhere
//! (which wakes a reader blocked in the socket). Plain TCP, or TLS with
//! both ends' certificates checked (`wcache_nbd::tls`). It must never
//! interpret the bytes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wcache_nbd::rustls;
use wcache_nbd::tls::{self, TlsStream};

/// The halves of one connection.
pub struct Stream {
    pub reader: Box<dyn Read + Send>,
    pub writer: Box<dyn Write + Send>,
    /// Ends the connection (both halves fail from then on).
    pub closer: Arc<dyn Fn() + Send + Sync>,
    /// The socket, for its timeouts.
    pub tcp: TcpStream,
    /// Who is at the other end, for the log.
    pub peer: String,
}

/// TLS for the link, where it is on: always both ways (each end's
/// certificate signed by the CA of its certificates directory).
#[derive(Clone)]
pub enum LinkTls {
    Off,
    /// A primary: it checks the peer's certificate and shows its own
    /// (`client-cert.pem`).
    Client(Arc<rustls::ClientConfig>),
    /// A peer: it shows its certificate and requires the primary's.
    Server(Arc<rustls::ServerConfig>),
}

impl LinkTls {
    /// A primary's TLS from a certificates directory (`ca-cert.pem`,
    /// `client-cert.pem`, `client-key.pem`): a client certificate is required.
    pub fn client(dir: &Path) -> Result<LinkTls, tls::TlsError> {
        let cert = dir.join(tls::CLIENT_CERT_FILE);
        if !cert.exists() {
            return Err(tls::TlsError::Missing { path: cert });
        }
        Ok(LinkTls::Client(tls::client_config(dir)?))
    }

    /// A peer's TLS from a certificates directory (`ca-cert.pem`,
    /// `server-cert.pem`, `server-key.pem`): primaries must show a
    /// certificate signed by that CA.
    pub fn server(dir: &Path) -> Result<LinkTls, tls::TlsError> {
        Ok(LinkTls::Server(tls::server_config(
            dir,
            tls::ClientAuth::Required,
        )?))
    }
}

impl std::fmt::Debug for LinkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LinkTls::Off => "off",
            LinkTls::Client(_) => "tls client",
            LinkTls::Server(_) => "tls server",
        })
    }
}

/// Connects to `addr` (`HOST:PORT`) within `timeout`, TLS as `tls` says.
pub fn connect(addr: &str, timeout: Duration, tls: &LinkTls) -> io::Result<Stream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(tcp) => return wrap(tcp, timeout, tls, addr),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The halves of an accepted or connected socket; the TLS handshake, when
/// on, runs here (within the socket's timeouts).
pub fn wrap(tcp: TcpStream, timeout: Duration, tls: &LinkTls, name: &str) -> io::Result<Stream> {
    tcp.set_nodelay(true)?;
    tcp.set_write_timeout(Some(timeout))?;
    let peer = tcp
        .peer_addr()
        .map_or_else(|_| name.to_string(), |a| a.to_string());
    let shut = tcp.try_clone()?;
    let control = tcp.try_clone()?;
    let closer: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        let _ = shut.shutdown(Shutdown::Both);
    });
    match tls {
        LinkTls::Off => Ok(Stream {
            reader: Box::new(tcp.try_clone()?),
            writer: Box::new(tcp),
            closer,
            tcp: control,
            peer,
        }),
        LinkTls::Client(config) => {
            let host = name.rsplit_once(':').map_or(name, |(h, _)| h);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let s = TlsStream::client(tcp.try_clone()?, Arc::clone(config), host)?;
            tls_stream(s, tcp, control, closer, peer, timeout)
        }
        LinkTls::Server(config) => {
            let s = TlsStream::server(tcp.try_clone()?, Arc::clone(config))?;
            tls_stream(s, tcp, control, closer, peer, timeout)
        }
    }
}

/// The halves of a TLS connection, once its handshake ended within `timeout`.
fn tls_stream(
    s: TlsStream,
    tcp: TcpStream,
    control: TcpStream,
    closer: Arc<dyn Fn() + Send + Sync>,
    peer: String,
    timeout: Duration,
) -> io::Result<Stream> {
    tcp.set_read_timeout(Some(timeout))?;
    s.handshake()
        .map_err(|e| io::Error::new(e.kind(), format!("TLS with {peer}: {e}")))?;
    tcp.set_read_timeout(None)?;
    Ok(Stream {
        reader: Box::new(s.try_clone()?),
        writer: Box::new(s),
        closer,
        tcp: control,
        peer,
    })
}
