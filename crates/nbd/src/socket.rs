//! A connection's socket, TCP, TCP with TLS, or Unix, for the server: one
//! type with the calls the server makes (timeouts, shutdown, a read that
//! never blocks, vectored writes), the reading half that polls before it
//! sleeps, and who is at the other end (for the log). It must never
//! interpret the bytes. TLS (`crate::tls`) comes after STARTTLS; without
//! it, a read or write is the plain socket's call, with no lock or copy.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::tls::TlsStream;

pub(crate) enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(TlsStream),
}

impl Socket {
    /// Who is at the other end, for the log: `tcp ADDR`, or `unix pid N`.
    pub(crate) fn peer(&self) -> String {
        match self {
            Socket::Tcp(s) => s
                .peer_addr()
                .map_or_else(|_| "tcp ?".into(), |a| format!("tcp {a}")),
            Socket::Unix(s) => {
                unix_peer_pid(s).map_or_else(|| "unix".into(), |p| format!("unix pid {p}"))
            }
            Socket::Tls(s) => s
                .tcp()
                .peer_addr()
                .map_or_else(|_| "tls ?".into(), |a| format!("tls {a}")),
        }
    }

    pub(crate) fn try_clone(&self) -> io::Result<Socket> {
        Ok(match self {
            Socket::Tcp(s) => Socket::Tcp(s.try_clone()?),
            Socket::Unix(s) => Socket::Unix(s.try_clone()?),
            Socket::Tls(s) => Socket::Tls(s.try_clone()?),
        })
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.shutdown(how),
            Socket::Unix(s) => s.shutdown(how),
            Socket::Tls(s) => s.shutdown(how),
        }
    }

    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(timeout),
            Socket::Unix(s) => s.set_read_timeout(timeout),
            Socket::Tls(s) => s.tcp().set_read_timeout(timeout),
        }
    }

    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_write_timeout(timeout),
            Socket::Unix(s) => s.set_write_timeout(timeout),
            Socket::Tls(s) => s.tcp().set_write_timeout(timeout),
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
            Socket::Tls(s) => (&*s).read(buf),
        }
    }
}

impl Socket {
    pub(crate) fn raw_fd(&self) -> std::os::unix::io::RawFd {
        use std::os::unix::io::AsRawFd;
        match self {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
            Socket::Tls(s) => s.tcp().as_raw_fd(),
        }
    }

    /// Bytes wait to be read (never blocks; an error counts as none: the
    /// next read reports it).
    pub(crate) fn has_input(&self) -> bool {
        match self {
            Socket::Tls(s) => s.has_input(),
            _ => peek_input(self.raw_fd()),
        }
    }

    /// A read that never blocks: `Ok(None)` when nothing is there yet.
    pub(crate) fn try_read(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self {
            Socket::Tls(s) => s.try_read(buf),
            _ => recv_dontwait(self.raw_fd(), buf),
        }
    }
}

/// Bytes wait to be read on `fd` (a peek that never blocks; an error
/// counts as none).
pub(crate) fn peek_input(fd: std::os::unix::io::RawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: one byte of valid memory for the call.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// One `recv` on `fd` that never blocks: `Ok(None)` when nothing is there yet.
pub(crate) fn recv_dontwait(
    fd: std::os::unix::io::RawFd,
    buf: &mut [u8],
) -> io::Result<Option<usize>> {
    // SAFETY: `buf` is valid for writes of its length for the call.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
        _ => Err(e),
    }
}

/// The reading side of a connection. With a poll budget, a read that finds
/// nothing first polls the socket for up to the budget before sleeping in
/// the kernel: a client that sends its next request right after a reply
/// (QD1) then finds the reader awake, which saves the wake-up of a sleeping
/// thread (tens of µs on a VM, more than the request costs). Adaptive: it
/// polls only while the previous wait ended within the budget, so a client
/// that thinks between requests costs no polling; CPU spent polling is at
/// most the budget per request.
pub(crate) struct ReadHalf {
    pub(crate) socket: Socket,
    pub(crate) poll_budget: Duration,
    pub(crate) poll_next: bool,
}

impl Read for ReadHalf {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.poll_budget.is_zero() || buf.is_empty() {
            return self.socket.read(buf);
        }
        if let Some(n) = self.socket.try_read(buf)? {
            return Ok(n);
        }
        let started = Instant::now();
        if self.poll_next {
            while started.elapsed() < self.poll_budget {
                std::hint::spin_loop();
                if let Some(n) = self.socket.try_read(buf)? {
                    return Ok(n);
                }
            }
        }
        let n = self.socket.read(buf)?;
        self.poll_next = started.elapsed() < self.poll_budget;
        Ok(n)
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Unix(s) => s.write(buf),
            Socket::Tls(s) => (&*s).write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write_vectored(bufs),
            Socket::Unix(s) => s.write_vectored(bufs),
            Socket::Tls(s) => (&*s).write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The pid of the process at the other end of a Unix socket (SO_PEERCRED).
fn unix_peer_pid(stream: &UnixStream) -> Option<i32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt(2) with a buffer of the size given.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0 && cred.pid > 0).then_some(cred.pid)
}

/// An accept error worth retrying after a pause (out of descriptors or
/// memory, an aborted connection), not the end of the listener.
pub(crate) fn is_transient_accept_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted | io::ErrorKind::WouldBlock
    ) || matches!(
        error.raw_os_error(),
        Some(23) | Some(24) | Some(105) | Some(12)
    )
}
