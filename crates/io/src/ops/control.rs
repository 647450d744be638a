//! The control socket: a Unix socket beside the NBD socket through which
//! `wcache status`, `stats`, `flush` and `set` reach a running server
//! (protocol in `protocol`, reference in `docs/operations.md`). It exists
//! so that a running cache can be watched and changed without a restart.
//! Only the server's own user (or root) may use it: the socket is created
//! owner-only (0600) under a temporary name and renamed into place, and
//! every connection's peer uid is checked (SO_PEERCRED) as well. Bad input
//! of any kind gets an error line, never a panic; connections are bounded
//! in number, in line length and in idle time.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::ops::operator::{FlushProgress, OpError, Operator};
use crate::ops::protocol::{parse_request, Command, ProtocolError, Response, REQUEST_BYTES_MAX};

/// Control connections served at once; more are answered `busy`.
pub const CONNECTIONS_MAX: usize = 16;
/// A connection that sends nothing for this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// A client that reads nothing for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The control socket, bound (owner-only) but not yet in place.
pub struct ControlListener {
    path: PathBuf,
    temp: PathBuf,
    listener: UnixListener,
}

impl ControlListener {
    /// Binds the socket under a temporary name beside `path` with mode
    /// 0600; `start` renames it into place.
    /// A socket already at `path` that answers belongs to a live server: refused
    /// (`AddrInUse`, naming it); a dead one is replaced at `start`.
    pub fn bind(path: &Path) -> std::io::Result<ControlListener> {
        if let Some(holder) = crate::lock::socket_answering(path) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{holder} answers on it: refused, nothing was touched"),
            ));
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = path.with_file_name(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&temp);
        let listener = UnixListener::bind(&temp)?;
        if let Err(e) = std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600)) {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        Ok(ControlListener {
            path: path.to_path_buf(),
            temp,
            listener,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the bound socket (a start refused after binding).
    pub fn discard(self) {
        let _ = std::fs::remove_file(&self.temp);
    }

    /// Puts the socket in place and serves it on its own thread.
    pub fn start(self, operator: Operator) -> std::io::Result<ControlServer> {
        let _ = std::fs::remove_file(&self.path);
        if let Err(e) = std::fs::rename(&self.temp, &self.path) {
            let _ = std::fs::remove_file(&self.temp);
            return Err(e);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let listener = self.listener;
        let listener_fd = listener.as_raw_fd();
        let identity = file_identity(&self.path);
        let thread = std::thread::Builder::new()
            .name("wcache-control".into())
            .spawn(move || accept_loop(listener, operator, flag))?;
        Ok(ControlServer {
            path: self.path,
            listener_fd,
            identity,
            stop,
            thread: Some(thread),
        })
    }
}

/// A control socket being served.
pub struct ControlServer {
    path: PathBuf,
    /// The listening socket, owned by the accept thread (open until it ends).
    listener_fd: std::os::fd::RawFd,
    /// (device, inode) of the socket's file once in place.
    identity: Option<(u64, u64)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops accepting, ends running drains at their next progress report,
    /// and removes the socket (if it is still this server's).
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept call, which then sees the flag (even when the
        // socket's file was removed meanwhile, so that connecting to it
        // would not reach the listener).
        // SAFETY: the descriptor stays open until the accept thread, joined
        // below, returns; shutdown(2) does not close it.
        unsafe { libc::shutdown(self.listener_fd, libc::SHUT_RDWR) };
        let _ = UnixStream::connect(&self.path);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Another server may have bound the same path since.
        if self.identity.is_some() && file_identity(&self.path) == self.identity {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop_now();
        }
    }
}

fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

fn accept_loop(listener: UnixListener, operator: Operator, stop: Arc<AtomicBool>) {
    let live = Arc::new(AtomicUsize::new(0));
    let server_uid = unsafe { libc::geteuid() };
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut stream) = stream else {
            // Out of descriptors, say: do not spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let peer = peer_uid(&stream).unwrap_or(u32::MAX);
        if !peer_allowed(peer, server_uid) {
            tracing::warn!("control socket: refused a connection from uid {peer}");
            let e = ProtocolError::PermissionDenied {
                peer,
                server: server_uid,
            };
            let _ = stream.write_all(Response::from(&e).to_line().as_bytes());
            continue;
        }
        if live.fetch_add(1, Ordering::SeqCst) >= CONNECTIONS_MAX {
            live.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("control socket: {CONNECTIONS_MAX} connections already; one refused");
            let e = ProtocolError::Busy(CONNECTIONS_MAX);
            let _ = stream.write_all(Response::from(&e).to_line().as_bytes());
            continue;
        }
        let (operator, stop, count) = (operator.clone(), stop.clone(), live.clone());
        let spawned = std::thread::Builder::new()
            .name("wcache-control-conn".into())
            .spawn(move || {
                serve_connection(stream, &operator, &stop);
                count.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The uid of the process at the other end of `stream` (SO_PEERCRED).
pub fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    peer_credentials(stream).map(|cred| cred.uid)
}

/// The pid, uid and gid of the process at the other end of `stream` (SO_PEERCRED).
pub fn peer_credentials(stream: &UnixStream) -> std::io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket descriptor, and a buffer of the size passed.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred)
}

/// Only the server's own user, or root, may operate it.
pub fn peer_allowed(peer_uid: u32, server_uid: u32) -> bool {
    peer_uid == server_uid || peer_uid == 0
}

/// Reads request lines and answers each until the client closes, sends a
/// line too long or cut short, stays idle, or stops reading.
fn serve_connection(stream: UnixStream, operator: &Operator, stop: &AtomicBool) {
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let Ok(reader) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader);
    let mut writer = stream;
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        let limit = REQUEST_BYTES_MAX as u64 + 1;
        match (&mut reader).take(limit).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            let e = if line.len() > REQUEST_BYTES_MAX {
                ProtocolError::TooLong
            } else {
                ProtocolError::Incomplete
            };
            send(&mut writer, &Response::from(&e));
            return;
        }
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let answered = match parse_request(&line) {
            Ok(command) => {
                tracing::debug!(command = command.name(), "control socket request");
                answer(command, operator, stop, &mut writer)
            }
            Err(e) => {
                tracing::debug!("control socket: bad request: {e}");
                send(&mut writer, &Response::from(&e))
            }
        };
        if !answered {
            return;
        }
    }
}

/// Writes one line; false when the client is gone.
fn send(writer: &mut UnixStream, response: &Response) -> bool {
    writer.write_all(response.to_line().as_bytes()).is_ok()
}

fn op_error(e: &OpError) -> Response {
    let code = match e {
        OpError::NotQuiet { .. } | OpError::Cache(_) => "failed",
        _ => "refused",
    };
    Response::error(code, e.to_string())
}

/// `critical-caller`: the front end's rule added or removed.
fn critical_caller(operator: &Operator, by: &str, value: &str, critical: bool) -> Response {
    match operator.critical_caller(by, value, critical) {
        Ok(rules) => {
            tracing::info!("critical-caller {by} {value:?}: {critical}");
            Response::ok(rules)
        }
        Err(e) => op_error(&e),
    }
}

/// Carries out one command; false when the client is gone.
fn answer(command: Command, operator: &Operator, stop: &AtomicBool, w: &mut UnixStream) -> bool {
    let mut gone = false;
    let mut report = |p: &FlushProgress| {
        gone = gone || !send(w, &Response::progress(p));
        !gone && !stop.load(Ordering::SeqCst)
    };
    let response = match command {
        Command::Status => Response::ok(operator.status()),
        Command::Stats => Response::ok(operator.snapshot()),
        Command::Flush {
            export,
            stall_timeout_s,
        } => {
            let checked = export.map_or(Ok(()), |name| operator.check_export(&name));
            let stall = Duration::from_secs(stall_timeout_s);
            match checked.and_then(|()| operator.flush(stall, &mut report)) {
                Ok(done) => Response::ok(done),
                Err(e) => op_error(&e),
            }
        }
        Command::Set { key, value } => match operator.set(&key, &value, &mut report) {
            Ok(done) => {
                tracing::info!("set {}: {} -> {}", done.key, done.old, done.new);
                Response::ok(done)
            }
            Err(e) => op_error(&e),
        },
        Command::ConsistencyPoint => match operator.consistency_point() {
            Ok(done) => {
                tracing::info!("consistency point ({} commits)", done.journal_commits);
                Response::ok(done)
            }
            Err(e) => op_error(&e),
        },
        Command::Stop {
            flush,
            stall_timeout_s,
        } => {
            let stall = Duration::from_secs(stall_timeout_s);
            match operator.stop(flush, stall, &mut report) {
                Ok(done) => {
                    tracing::info!(
                        "stop asked on the control socket (flush: {flush}; {} pages destaged, {} dirty left)",
                        done.destaged_pages,
                        done.dirty_pages
                    );
                    Response::ok(done)
                }
                Err(e) => op_error(&e),
            }
        }
        Command::CriticalCaller {
            by,
            value,
            critical,
        } => critical_caller(operator, &by, &value, critical),
        Command::CriticalIssuer { issuer, critical } => {
            match operator.set_critical_issuer(issuer, critical) {
                Ok(done) => {
                    tracing::info!("critical-issuer {issuer}: {} -> {critical}", done.was);
                    Response::ok(done)
                }
                Err(e) => op_error(&e),
            }
        }
    };
    !gone && send(w, &response)
}
