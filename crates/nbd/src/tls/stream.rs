//! `TlsStream`: a blocking TLS connection over TCP that several threads
//! share, one reading while others write (the NBD server's connection, a
//! replication link). It exists so that a reader waiting for the peer never
//! stops a writer: it must never hold the connection's lock (rustls' state)
//! while it waits for bytes.

use std::io::{self, BufRead, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, Connection, ServerConfig};

use crate::socket::{peek_input, recv_dontwait};

/// Bytes received from the socket at once, before rustls takes them (it
/// takes 4 KiB a call: one `recv` here saves it the other calls).
const RECEIVE_BUFFER_BYTES: usize = 64 * 1024;

/// A TLS connection over TCP, server or client side, blocking, shared by
/// clones (`try_clone`): one thread may read while others write.
///
/// A reader receives into a buffer of its own, under a lock that only
/// readers take, and takes the connection's lock only to decrypt: while
/// it waits for the peer in `recv`, writers go on. Writes encrypt and send under the connection's lock, so
/// records of two writers never interleave. The socket's read and write
/// timeouts apply. `Read` and `Write` are implemented for `&TlsStream` too.
#[derive(Debug)]
pub struct TlsStream {
    tcp: TcpStream,
    conn: Arc<Mutex<Connection>>,
    received: Arc<Mutex<Received>>,
}

/// Ciphertext received and not yet given to rustls: `bytes[start..end]`.
#[derive(Debug)]
struct Received {
    bytes: Box<[u8]>,
    start: usize,
    end: usize,
    /// The peer closed its side (a `recv` returned 0).
    ended: bool,
}

impl Received {
    fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves rustls' state behind; the next
    // call reports whatever error that state is in.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl TlsStream {
    /// A stream over `tcp` for a rustls connection of either side; nothing
    /// is sent until `handshake` or the first read or write.
    pub fn new(tcp: TcpStream, conn: impl Into<Connection>) -> TlsStream {
        let received = Received {
            bytes: vec![0u8; RECEIVE_BUFFER_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            ended: false,
        };
        TlsStream {
            tcp,
            conn: Arc::new(Mutex::new(conn.into())),
            received: Arc::new(Mutex::new(received)),
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
        let mut received = lock(&self.received);
        loop {
            {
                let mut conn = lock(&self.conn);
                while conn.is_handshaking() && !received.is_empty() {
                    self.take(&mut conn, &mut received)?;
                }
                self.send_pending(&mut conn)?;
                if !conn.is_handshaking() {
                    return Ok(());
                }
            }
            if received.ended {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection during the TLS handshake",
                ));
            }
            self.receive(&mut received, true)?;
        }
    }

    /// The TLS version and cipher suite agreed, for the log
    /// (`TLSv1_3 TLS13_AES_128_GCM_SHA256`); empty before the handshake.
    pub fn negotiated(&self) -> String {
        let conn = lock(&self.conn);
        match (conn.protocol_version(), conn.negotiated_cipher_suite()) {
            (Some(version), Some(suite)) => format!("{version:?} {:?}", suite.suite()),
            _ => String::new(),
        }
    }

    /// Another handle on the same connection (for another thread).
    pub fn try_clone(&self) -> io::Result<TlsStream> {
        Ok(TlsStream {
            tcp: self.tcp.try_clone()?,
            conn: Arc::clone(&self.conn),
            received: Arc::clone(&self.received),
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

    /// Whether a read would find bytes (decrypted, received, or on the
    /// socket); never waits. A reader busy in another thread counts as none.
    pub fn has_input(&self) -> bool {
        let Ok(received) = self.received.try_lock() else {
            return false;
        };
        if !received.is_empty() || peek_input(self.tcp.as_raw_fd()) {
            return true;
        }
        let mut conn = lock(&self.conn);
        let decrypted = matches!(conn.reader().fill_buf(), Ok(b) if !b.is_empty());
        decrypted
    }

    fn read_inner(&self, buf: &mut [u8], wait: bool) -> io::Result<Option<usize>> {
        if buf.is_empty() {
            return Ok(Some(0));
        }
        let mut received = lock(&self.received);
        loop {
            if let Some(n) = self.decrypt(&mut received, buf)? {
                return Ok(Some(n));
            }
            if !self.receive(&mut received, wait)? {
                return Ok(None);
            }
        }
    }

    /// Fills `buf` with what rustls has decrypted and what it decrypts of
    /// the bytes received; `None` when there is nothing (all received
    /// bytes taken). After the peer's end: `Some(0)` (a `close_notify`
    /// came) or `UnexpectedEof`.
    fn decrypt(&self, received: &mut Received, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut conn = lock(&self.conn);
        let mut filled = 0;
        loop {
            match conn.reader().read(&mut buf[filled..]) {
                Ok(0) => return Ok(Some(filled)),
                Ok(n) => {
                    filled += n;
                    if filled == buf.len() {
                        return Ok(Some(filled));
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if filled == 0 => return Err(e),
                Err(_) => return Ok(Some(filled)), // it comes again next time
            }
            // Nothing decrypted is left: rustls may take more.
            let taken = if !received.is_empty() {
                self.take(&mut conn, received)
            } else if received.ended {
                // Its reader then says 0 after a close_notify, else UnexpectedEof.
                conn.read_tls(&mut io::empty())
                    .and_then(|_| conn.process_new_packets().map_err(invalid_data))
                    .map(drop)
            } else {
                return Ok((filled > 0).then_some(filled));
            };
            if let Err(e) = taken {
                // rustls keeps its error: the next call reports it.
                return if filled == 0 {
                    Err(e)
                } else {
                    Ok(Some(filled))
                };
            }
        }
    }

    /// Gives rustls the next received bytes (it takes up to 4 KiB), and
    /// processes them; sends what that makes rustls send (handshake
    /// messages, a key update's answer, an alert on a failure).
    fn take(&self, conn: &mut Connection, received: &mut Received) -> io::Result<()> {
        debug_assert!(!received.is_empty());
        let mut bytes = &received.bytes[received.start..received.end];
        let taken = conn.read_tls(&mut bytes)?;
        received.start += taken;
        if received.is_empty() {
            received.start = 0;
            received.end = 0;
        }
        if let Err(error) = conn.process_new_packets() {
            // The alert that tells the peer why, if the socket takes it.
            let _ = self.send_pending(conn);
            return Err(invalid_data(error));
        }
        if taken == 0 {
            // rustls takes nothing after a close_notify: drop the rest.
            received.start = received.end;
        }
        self.send_pending(conn)
    }

    /// Receives ciphertext into the (empty) buffer, waiting for it when
    /// `wait` (the socket's read timeout applies), without the connection's
    /// lock. False when nothing came and `wait` is off.
    fn receive(&self, received: &mut Received, wait: bool) -> io::Result<bool> {
        debug_assert!(received.is_empty());
        let n = if wait {
            loop {
                match (&self.tcp).read(&mut received.bytes) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    other => break other?,
                }
            }
        } else {
            match recv_dontwait(self.tcp.as_raw_fd(), &mut received.bytes)? {
                Some(n) => n,
                None => return Ok(false),
            }
        };
        received.start = 0;
        received.end = n;
        received.ended |= n == 0;
        Ok(true)
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

fn invalid_data(error: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
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
