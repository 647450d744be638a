//! `NbdDevice`: a minimal NBD client, so a remote export (nbdkit, qemu-nbd,
//! another wcache) can be the backing store — networked storage behind the cache.
//!
//! Fixed newstyle handshake with `NBD_OPT_GO`, then READ, WRITE, FLUSH, TRIM
//! with simple replies, over TCP or a Unix socket. Each connection carries
//! one request at a time; several connections are opened when the server
//! advertises `CAN_MULTI_CONN` (flush on one covers writes on all),
//! otherwise exactly one, so `flush()` always covers every earlier write.
//! The bytes are encoded and decoded by the codec the server shares
//! (`wcache_nbd::proto::client`); this file moves them (sockets, threads,
//! reconnection, timeouts).
//!
//! Connections heal: a connection that breaks (I/O error, EOF, a reply out of
//! step) or that the server asks to leave (ESHUTDOWN: soft disconnect with
//! `NBD_CMD_DISC`) is dropped, a reconnector thread opens a new one with
//! bounded exponential backoff (same export, same size or refused), and the
//! request is retried on it; a request fails (EIO) only when no connection
//! came back within `NbdOptions::unavailable_timeout`. Writes the server
//! acknowledged but no FLUSH has covered yet are kept (the replay log) and
//! written again on a new connection before anything else reads or flushes,
//! since a restarted server may have lost them from its volatile cache.
//!
//! It must never report a write done before the server replied success to it
//! on some connection, and never treat a write as durable before a FLUSH reply
//! that covers it on a live connection, unless the server offers no flush (it
//! then has no volatile cache to flush).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wcache_nbd::proto::client::{self, ClientError, GoReplies};
use wcache_nbd::proto::{
    NbdErrno, CMD_DISC, CMD_FLUSH, CMD_READ, CMD_TRIM, CMD_WRITE, FLAG_CAN_MULTI_CONN,
    FLAG_SEND_FLUSH, FLAG_SEND_TRIM, GREETING_LEN, OPTION_REPLY_HEADER_LEN, PAYLOAD_MAX_BYTES,
    SIMPLE_REPLY_HEADER_LEN,
};

use super::{check_range, BlockDevice, DeviceError};

/// Largest READ/WRITE sent in one request (the spec's safe maximum).
const REQUEST_MAX_BYTES: usize = PAYLOAD_MAX_BYTES as usize;

/// Where the export is: parsed from an NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NbdAddress {
    Tcp { host_port: String, export: String },
    Unix { socket: String, export: String },
}

impl NbdAddress {
    /// Parses `nbd://host[:port][/export]` and `nbd+unix:///[export]?socket=PATH`.
    pub fn parse(uri: &str) -> Result<NbdAddress, DeviceError> {
        let bad = |what: &str| DeviceError::Open {
            device: uri.to_string(),
            what: format!(
                "{what} (expected nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH)"
            ),
        };
        if let Some(rest) = uri.strip_prefix("nbd+unix://") {
            let (path, query) = rest.split_once('?').ok_or_else(|| bad("no ?socket="))?;
            let socket = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("socket="))
                .ok_or_else(|| bad("no socket= in the query"))?;
            let export = path.strip_prefix('/').unwrap_or(path).to_string();
            return Ok(NbdAddress::Unix {
                socket: socket.to_string(),
                export,
            });
        }
        if let Some(rest) = uri.strip_prefix("nbd://") {
            let (host, export) = rest.split_once('/').unwrap_or((rest, ""));
            if host.is_empty() {
                return Err(bad("no host"));
            }
            let host_port = if host.contains(':') && !host.ends_with(']') {
                host.to_string()
            } else {
                format!("{host}:{}", client::DEFAULT_PORT)
            };
            return Ok(NbdAddress::Tcp {
                host_port,
                export: export.to_string(),
            });
        }
        Err(bad("not an NBD URI"))
    }

    fn export(&self) -> &str {
        match self {
            NbdAddress::Tcp { export, .. } | NbdAddress::Unix { export, .. } => export,
        }
    }
}

/// First wait between reconnect attempts; doubles up to the maximum.
pub const RECONNECT_BACKOFF_MIN_MS: u64 = 10;
/// Longest wait between reconnect attempts.
pub const RECONNECT_BACKOFF_MAX_MS: u64 = 1_000;
/// How long a request waits for a lost backing before it fails with EIO.
pub const UNAVAILABLE_TIMEOUT_DEFAULT_MS: u64 = 30_000;
/// Acknowledged, not yet flushed write bytes kept for replay; when full, a
/// FLUSH empties the log before the next write is sent.
pub const REPLAY_LOG_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;
/// A connect or handshake that takes longer than this counts as a failed attempt.
const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Replay-and-retry rounds of one flush or read before it gives up.
const ROUNDS_MAX: u32 = 8;
/// Attempts of one request (each on a fresh connection) before it gives up.
const ATTEMPTS_MAX: u32 = 1_000;

const _: () = assert!(RECONNECT_BACKOFF_MIN_MS > 0);
const _: () = assert!(RECONNECT_BACKOFF_MIN_MS <= RECONNECT_BACKOFF_MAX_MS);
const _: () = assert!(REPLAY_LOG_BYTES_MAX_DEFAULT >= REQUEST_MAX_BYTES);

/// How an `NbdDevice` connects and heals.
#[derive(Clone, Debug)]
pub struct NbdOptions {
    /// Connections to open when the server offers `CAN_MULTI_CONN` (else 1).
    pub connections_max: usize,
    /// How long a request waits for a connection while the backing is away
    /// before it fails with EIO.
    pub unavailable_timeout: Duration,
    /// First and longest wait between reconnect attempts.
    pub reconnect_backoff_min: Duration,
    pub reconnect_backoff_max: Duration,
    /// Bound of the replay log (raised to the largest single request).
    pub replay_log_bytes_max: usize,
    /// Print one line to stderr per state change.
    pub log_state_changes: bool,
}

impl Default for NbdOptions {
    fn default() -> Self {
        NbdOptions {
            connections_max: 1,
            unavailable_timeout: Duration::from_millis(UNAVAILABLE_TIMEOUT_DEFAULT_MS),
            reconnect_backoff_min: Duration::from_millis(RECONNECT_BACKOFF_MIN_MS),
            reconnect_backoff_max: Duration::from_millis(RECONNECT_BACKOFF_MAX_MS),
            replay_log_bytes_max: REPLAY_LOG_BYTES_MAX_DEFAULT,
            log_state_changes: true,
        }
    }
}

/// Health of the connections to the backing server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NbdState {
    /// Every connection wanted is open.
    Connected,
    /// Fewer connections than wanted; the reconnector is trying with backoff.
    Reconnecting,
    /// The server answers, but its export no longer matches (its size
    /// changed): requests fail at once until a matching export is back.
    Incompatible,
}

impl NbdState {
    pub fn name(self) -> &'static str {
        match self {
            NbdState::Connected => "connected",
            NbdState::Reconnecting => "reconnecting",
            NbdState::Incompatible => "incompatible",
        }
    }
}

/// A snapshot of an `NbdDevice`'s connections, for status and tests.
#[derive(Clone, Debug)]
pub struct NbdStatus {
    pub state: NbdState,
    /// When the device entered `state`.
    pub since: Instant,
    /// Connections open now, and wanted.
    pub connections: usize,
    pub connections_wanted: usize,
    /// Connections lost (broken or left after ESHUTDOWN) since the start.
    pub connections_lost: u64,
    /// Connections opened again after a loss.
    pub reconnects: u64,
    /// ESHUTDOWN replies received (each followed by a soft disconnect).
    pub shutdowns_seen: u64,
    /// Requests sent again on a new connection after theirs was lost.
    pub requests_retried: u64,
    /// Acknowledged writes written again from the replay log.
    pub writes_replayed: u64,
    /// Bytes in the replay log now.
    pub replay_log_bytes: usize,
    /// Why the last connection was lost or the last attempt failed.
    pub last_error: Option<String>,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)
            }
            Stream::Unix(s) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)
            }
        }
    }

    /// Soft disconnect: `NBD_CMD_DISC` (no reply), then close.
    fn disconnect(mut self) {
        let _ = self.write_all(&client::encode_request(CMD_DISC, 0, 0, 0));
        self.shutdown();
    }

    fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One open connection; owned by at most one request at a time.
struct Conn {
    stream: Stream,
    transmission_flags: u16,
    /// `Pool::shutdown_epoch` when opened: a connection older than the
    /// current epoch belongs to a server that said ESHUTDOWN and is not reused.
    epoch: u64,
}

impl Conn {
    /// Soft disconnect: `NBD_CMD_DISC` (no reply), then close. Only with no
    /// reply outstanding (one request at a time: the caller has its reply).
    fn disconnect(self) {
        self.stream.disconnect();
    }
}

struct Pool {
    idle: Vec<Conn>,
    /// Connections open: idle plus in use by a request.
    live: usize,
    wanted: usize,
    state: NbdState,
    since: Instant,
    shutdown_epoch: u64,
    reconnects: u64,
    shutdowns_seen: u64,
    requests_retried: u64,
    writes_replayed: u64,
    last_error: Option<String>,
    /// Set while the server's export does not match: requests fail at once.
    incompatible: Option<String>,
    closing: bool,
}

struct Shared {
    uri: String,
    address: NbdAddress,
    size_bytes: u64,
    options: NbdOptions,
    pool: Mutex<Pool>,
    /// A connection was returned or opened, or the state changed.
    conn_ready: Condvar,
    /// A connection was lost, or the device is closing.
    wake_reconnector: Condvar,
    /// Connections lost so far; read without the pool lock.
    lost_total: AtomicU64,
}

enum TakeError {
    Unavailable { waited: Duration, why: String },
    Incompatible(String),
}

impl Shared {
    fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_state(&self, pool: &mut Pool, state: NbdState, why: &str) {
        if pool.state == state {
            return;
        }
        let was = pool.state;
        if self.options.log_state_changes {
            tracing::warn!(
                backing = %self.uri,
                after_s = pool.since.elapsed().as_secs_f64(),
                why,
                "backing {} -> {}",
                was.name(),
                state.name()
            );
        }
        pool.state = state;
        pool.since = Instant::now();
    }

    /// A connection in use is gone (dropped by the caller or disconnected).
    fn lost(&self, why: String, shutdown: bool) {
        let mut pool = self.pool();
        assert!(pool.live > 0, "a connection lost that was not open");
        pool.live -= 1;
        self.lost_total.fetch_add(1, Ordering::SeqCst);
        if shutdown {
            pool.shutdowns_seen += 1;
            // Every connection to this server leaves: idle ones now, those
            // in use when their request returns (`put_back`).
            pool.shutdown_epoch += 1;
            let idle = std::mem::take(&mut pool.idle);
            for conn in idle {
                conn.disconnect();
                pool.live -= 1;
                self.lost_total.fetch_add(1, Ordering::SeqCst);
            }
        }
        if pool.state == NbdState::Connected {
            self.set_state(&mut pool, NbdState::Reconnecting, &why);
        }
        pool.last_error = Some(why);
        self.wake_reconnector.notify_all();
        self.conn_ready.notify_all();
    }

    fn put_back(&self, conn: Conn) {
        let mut pool = self.pool();
        if conn.epoch < pool.shutdown_epoch {
            drop(pool);
            conn.disconnect();
            self.lost(
                "server is shutting down (ESHUTDOWN on another connection)".into(),
                false,
            );
            return;
        }
        pool.idle.push(conn);
        drop(pool);
        self.conn_ready.notify_one();
    }

    /// A connection for one request. Waits while all are busy; while none is
    /// open, waits until `away_since + unavailable_timeout`.
    fn take(&self, away_since: &mut Option<Instant>) -> Result<Conn, TakeError> {
        let mut pool = self.pool();
        loop {
            if let Some(conn) = pool.idle.pop() {
                return Ok(conn);
            }
            if let Some(why) = &pool.incompatible {
                return Err(TakeError::Incompatible(why.clone()));
            }
            if pool.closing {
                return Err(TakeError::Unavailable {
                    waited: Duration::ZERO,
                    why: "device closing".into(),
                });
            }
            if pool.live > 0 {
                pool = self
                    .conn_ready
                    .wait(pool)
                    .unwrap_or_else(|p| p.into_inner());
                continue;
            }
            let since = *away_since.get_or_insert_with(Instant::now);
            let deadline = since + self.options.unavailable_timeout;
            let now = Instant::now();
            if now >= deadline {
                return Err(TakeError::Unavailable {
                    waited: now - since,
                    why: pool.last_error.clone().unwrap_or_default(),
                });
            }
            pool = self
                .conn_ready
                .wait_timeout(pool, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The reconnector thread: keeps `wanted` connections open.
    fn reconnect_loop(&self) {
        let backoff_min = self.options.reconnect_backoff_min;
        let backoff_max = self.options.reconnect_backoff_max.max(backoff_min);
        let mut backoff = backoff_min;
        let mut attempts: u64 = 0;
        loop {
            {
                let mut pool = self.pool();
                if !pool.closing && pool.live >= pool.wanted {
                    let satisfied_at = Instant::now();
                    attempts = 0;
                    while !pool.closing && pool.live >= pool.wanted {
                        pool = self
                            .wake_reconnector
                            .wait(pool)
                            .unwrap_or_else(|p| p.into_inner());
                    }
                    if satisfied_at.elapsed() >= backoff_max {
                        // The connections were stable: start the backoff over.
                        backoff = backoff_min;
                    } else if !pool.closing {
                        // Lost again at once (a server that keeps closing or
                        // answering ESHUTDOWN): keep backing off.
                        pool = self
                            .wake_reconnector
                            .wait_timeout(pool, backoff)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                        backoff = (backoff * 2).min(backoff_max);
                    }
                }
                if pool.closing {
                    return;
                }
            }
            attempts += 1;
            let failure = match open_one(&self.uri, &self.address) {
                Ok((conn, size_bytes, flags)) if size_bytes == self.size_bytes => {
                    let mut pool = self.pool();
                    if pool.closing {
                        drop(pool);
                        conn.disconnect();
                        return;
                    }
                    if flags & FLAG_CAN_MULTI_CONN == 0 {
                        pool.wanted = 1;
                    }
                    if pool.live >= pool.wanted {
                        drop(pool);
                        conn.disconnect();
                        continue;
                    }
                    let epoch = pool.shutdown_epoch;
                    pool.idle.push(Conn {
                        stream: conn,
                        transmission_flags: flags,
                        epoch,
                    });
                    pool.live += 1;
                    pool.reconnects += 1;
                    pool.incompatible = None;
                    let why = format!("reconnected ({attempts} attempts)");
                    if pool.live >= pool.wanted {
                        self.set_state(&mut pool, NbdState::Connected, &why);
                    } else if pool.state == NbdState::Incompatible {
                        // Requests run again; more connections to open.
                        self.set_state(&mut pool, NbdState::Reconnecting, &why);
                    }
                    drop(pool);
                    self.conn_ready.notify_all();
                    backoff = backoff_min;
                    continue;
                }
                Ok((conn, size_bytes, _)) => {
                    conn.disconnect();
                    let why = format!(
                        "export {:?} is now {size_bytes} bytes, was {} bytes: refusing it (data would be misplaced); waiting for the original export",
                        self.address.export(),
                        self.size_bytes
                    );
                    let mut pool = self.pool();
                    self.set_state(&mut pool, NbdState::Incompatible, &why);
                    pool.incompatible = Some(why.clone());
                    pool.last_error = Some(why);
                    drop(pool);
                    self.conn_ready.notify_all();
                    None
                }
                Err(e) => Some(e.to_string()),
            };
            let mut pool = self.pool();
            if let Some(why) = failure {
                pool.last_error = Some(why);
            }
            if !pool.closing {
                pool = self
                    .wake_reconnector
                    .wait_timeout(pool, backoff)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            drop(pool);
            backoff = (backoff * 2).min(backoff_max);
        }
    }
}

/// One acknowledged write not yet covered by a FLUSH.
struct Logged {
    seq: u64,
    /// `lost_total` before it was sent: a loss after that may have lost it.
    epoch: u64,
    offset_bytes: u64,
    data: Vec<u8>,
}

struct ReplayLog {
    entries: VecDeque<Logged>,
    bytes: usize,
    next_seq: u64,
    /// Smallest `epoch` of the entries (`u64::MAX` when empty).
    epoch_min: u64,
    /// Buffers of retired entries, reused for new ones, and their capacity.
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
}

/// Capacity of the retired buffers kept for reuse by the replay log.
const REPLAY_SPARE_BYTES_MAX: usize = 4 * 1024 * 1024;

impl ReplayLog {
    fn new() -> ReplayLog {
        ReplayLog {
            entries: VecDeque::new(),
            bytes: 0,
            next_seq: 0,
            epoch_min: u64::MAX,
            spare: Vec::new(),
            spare_bytes: 0,
        }
    }

    /// Some entry was sent before a connection was lost.
    fn stale(&self, lost_total: u64) -> bool {
        debug_assert_eq!(
            self.epoch_min,
            self.entries
                .iter()
                .map(|e| e.epoch)
                .min()
                .unwrap_or(u64::MAX)
        );
        self.epoch_min < lost_total
    }

    fn recompute_epoch_min(&mut self) {
        self.epoch_min = self
            .entries
            .iter()
            .map(|e| e.epoch)
            .min()
            .unwrap_or(u64::MAX);
    }

    fn push(&mut self, epoch: u64, offset_bytes: u64, piece: &[u8]) {
        let mut data = match self.spare.pop() {
            Some(buffer) => {
                self.spare_bytes -= buffer.capacity();
                buffer
            }
            None => Vec::new(),
        };
        data.clear();
        data.extend_from_slice(piece);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += data.len();
        self.epoch_min = self.epoch_min.min(epoch);
        self.entries.push_back(Logged {
            seq,
            epoch,
            offset_bytes,
            data,
        });
    }

    /// Entries up to `end_seq` are durable (a FLUSH covered them).
    fn retire(&mut self, end_seq: u64) {
        while self.entries.front().is_some_and(|e| e.seq < end_seq) {
            let e = self.entries.pop_front().expect("front exists");
            assert!(self.bytes >= e.data.len());
            self.bytes -= e.data.len();
            if self.spare_bytes + e.data.capacity() <= REPLAY_SPARE_BYTES_MAX {
                self.spare_bytes += e.data.capacity();
                self.spare.push(e.data);
            }
        }
        self.recompute_epoch_min();
    }
}

pub struct NbdDevice {
    shared: Arc<Shared>,
    /// Flags of the first connection (what the device promises).
    transmission_flags: u16,
    /// Requests hold it shared; a replay holds it exclusive, so no read sees
    /// a half-replayed log and no write interleaves with a replayed one.
    gate: RwLock<()>,
    log: Mutex<ReplayLog>,
    /// `ReplayLog::bytes` and `epoch_min`, readable without the log's lock
    /// (stored under it).
    log_bytes: AtomicUsize,
    log_epoch_min: AtomicU64,
    next_cookie: AtomicU64,
    reconnector: Option<JoinHandle<()>>,
}

fn proto_err(uri: &str, what: impl Into<String>) -> DeviceError {
    DeviceError::Protocol {
        device: uri.to_string(),
        what: what.into(),
    }
}

/// Opens one connection and runs the handshake: the stream, the export's
/// size and its transmission flags.
fn open_one(uri: &str, address: &NbdAddress) -> Result<(Stream, u64, u16), DeviceError> {
    let timeout = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
    let io = |e: io::Error| proto_err(uri, format!("handshake: {e}"));
    let open_err = |e: io::Error| DeviceError::Open {
        device: uri.to_string(),
        what: e.to_string(),
    };
    let mut stream = match address {
        NbdAddress::Tcp { host_port, .. } => {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
            let mut found = None;
            for addr in host_port.to_socket_addrs().map_err(open_err)? {
                match TcpStream::connect_timeout(&addr, timeout) {
                    Ok(s) => {
                        found = Some(s);
                        break;
                    }
                    Err(e) => last = e,
                }
            }
            let s = found.ok_or_else(|| open_err(last))?;
            s.set_nodelay(true).map_err(io)?;
            Stream::Tcp(s)
        }
        NbdAddress::Unix { socket, .. } => {
            Stream::Unix(UnixStream::connect(socket).map_err(open_err)?)
        }
    };
    stream.set_timeouts(Some(timeout)).map_err(io)?;
    let export = handshake(uri, &mut stream, address.export())?;
    // Transmission: requests wait for replies as long as the server takes.
    stream.set_timeouts(None).map_err(io)?;
    Ok((stream, export.size_bytes, export.transmission_flags))
}

/// The client's side of the fixed newstyle handshake with `NBD_OPT_GO` for
/// `export`: this moves the bytes, `wcache_nbd::proto::client` reads them.
fn handshake(
    uri: &str,
    stream: &mut Stream,
    export: &str,
) -> Result<client::InfoExport, DeviceError> {
    let io = |e: io::Error| proto_err(uri, format!("handshake: {e}"));
    let codec = |e: ClientError| match e {
        ClientError::OptionRefused {
            reply_type,
            message,
        } => DeviceError::Open {
            device: uri.to_string(),
            what: format!("server refused export {export:?}: error {reply_type:#x} {message}"),
        },
        e => proto_err(uri, e.to_string()),
    };
    let mut greeting = [0u8; GREETING_LEN];
    stream.read_exact(&mut greeting).map_err(io)?;
    let server_flags = client::decode_greeting(&greeting).map_err(codec)?;
    let mut go = Vec::new();
    client::encode_go(&mut go, server_flags, export).map_err(codec)?;
    stream.write_all(&go).map_err(io)?;
    let mut replies = GoReplies::new();
    let mut data = Vec::new();
    loop {
        let mut header = [0u8; OPTION_REPLY_HEADER_LEN];
        stream.read_exact(&mut header).map_err(io)?;
        let header = client::decode_option_reply_header(&header).map_err(codec)?;
        // At most `client::OPTION_REPLY_DATA_MAX_BYTES`: the decoder checked.
        data.resize(header.length as usize, 0);
        stream.read_exact(&mut data).map_err(io)?;
        if let Some(export) = replies.handle(header.reply_type, &data).map_err(codec)? {
            return Ok(export);
        }
    }
}

/// One request and its simple reply on `stream`: `Ok(None)` on success,
/// `Ok(Some(errno))` when the server answered an error, `Err` when the
/// connection is broken or out of step.
fn exchange(
    stream: &mut Stream,
    cookie: u64,
    command: u16,
    offset_bytes: u64,
    len_bytes: u32,
    payload: Option<&[u8]>,
    read_into: Option<&mut [u8]>,
) -> io::Result<Option<u32>> {
    let header = client::encode_request(command, cookie, offset_bytes, len_bytes);
    stream.write_all(&header)?;
    if let Some(p) = payload {
        stream.write_all(p)?;
    }
    let mut reply = [0u8; SIMPLE_REPLY_HEADER_LEN];
    stream.read_exact(&mut reply)?;
    let error = client::decode_simple_reply(&reply, cookie)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if error.is_none() {
        if let Some(buf) = read_into {
            stream.read_exact(buf)?;
        }
    }
    Ok(error)
}

impl NbdDevice {
    /// Connects to `uri`; opens up to `connections_max` connections when the
    /// server allows several (`CAN_MULTI_CONN`). Default healing options.
    pub fn connect(uri: &str, connections_max: usize) -> Result<NbdDevice, DeviceError> {
        Self::connect_with(
            uri,
            NbdOptions {
                connections_max,
                ..NbdOptions::default()
            },
        )
    }

    /// Connects to `uri` with `options`. The first connection must succeed
    /// (a backing that is not there at start is an error, not a wait).
    pub fn connect_with(uri: &str, options: NbdOptions) -> Result<NbdDevice, DeviceError> {
        let address = NbdAddress::parse(uri)?;
        let (first, size_bytes, flags) = open_one(uri, &address)?;
        let mut idle = vec![Conn {
            stream: first,
            transmission_flags: flags,
            epoch: 0,
        }];
        let wanted = if flags & FLAG_CAN_MULTI_CONN != 0 {
            options.connections_max.max(1)
        } else {
            1
        };
        for _ in 1..wanted {
            let (stream, size, more_flags) = open_one(uri, &address)?;
            if size != size_bytes {
                return Err(proto_err(
                    uri,
                    format!(
                        "export size changed between connections: {size_bytes} then {size} bytes"
                    ),
                ));
            }
            idle.push(Conn {
                stream,
                transmission_flags: more_flags,
                epoch: 0,
            });
        }
        let mut options = options;
        options.replay_log_bytes_max = options.replay_log_bytes_max.max(REQUEST_MAX_BYTES);
        let live = idle.len();
        let shared = Arc::new(Shared {
            uri: uri.to_string(),
            address,
            size_bytes,
            options,
            pool: Mutex::new(Pool {
                idle,
                live,
                wanted,
                state: NbdState::Connected,
                since: Instant::now(),
                shutdown_epoch: 0,
                reconnects: 0,
                shutdowns_seen: 0,
                requests_retried: 0,
                writes_replayed: 0,
                last_error: None,
                incompatible: None,
                closing: false,
            }),
            conn_ready: Condvar::new(),
            wake_reconnector: Condvar::new(),
            lost_total: AtomicU64::new(0),
        });
        let for_thread = shared.clone();
        let reconnector = std::thread::Builder::new()
            .name("nbd-reconnect".into())
            .spawn(move || for_thread.reconnect_loop())
            .map_err(|e| DeviceError::Open {
                device: uri.to_string(),
                what: format!("cannot start the reconnect thread: {e}"),
            })?;
        Ok(NbdDevice {
            shared,
            transmission_flags: flags,
            gate: RwLock::new(()),
            log: Mutex::new(ReplayLog::new()),
            log_bytes: AtomicUsize::new(0),
            log_epoch_min: AtomicU64::new(u64::MAX),
            next_cookie: AtomicU64::new(1),
            reconnector: Some(reconnector),
        })
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.shared.pool().live
    }

    /// Health of the connections (for live status).
    pub fn state(&self) -> NbdState {
        self.shared.pool().state
    }

    /// Health and counters.
    pub fn status(&self) -> NbdStatus {
        let replay_log_bytes = self.log_bytes.load(Ordering::Relaxed);
        let pool = self.shared.pool();
        NbdStatus {
            state: pool.state,
            since: pool.since,
            connections: pool.live,
            connections_wanted: pool.wanted,
            connections_lost: self.shared.lost_total.load(Ordering::SeqCst),
            reconnects: pool.reconnects,
            shutdowns_seen: pool.shutdowns_seen,
            requests_retried: pool.requests_retried,
            writes_replayed: pool.writes_replayed,
            replay_log_bytes,
            last_error: pool.last_error.clone(),
        }
    }

    fn log(&self) -> MutexGuard<'_, ReplayLog> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn shared_gate(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().unwrap_or_else(|p| p.into_inner())
    }

    fn lost_total(&self) -> u64 {
        self.shared.lost_total.load(Ordering::SeqCst)
    }

    /// Whether the server keeps writes in a volatile cache (then acknowledged
    /// writes are logged until a FLUSH covers them).
    fn logs_writes(&self) -> bool {
        self.transmission_flags & FLAG_SEND_FLUSH != 0
    }

    /// One request and its simple reply, on whatever connection is open;
    /// sent again on a new connection when its connection is lost. `payload`
    /// is sent after the header (WRITE); `read_into` receives the reply data
    /// (READ).
    fn request(
        &self,
        op: &'static str,
        command: u16,
        offset_bytes: u64,
        len_bytes: u32,
        payload: Option<&[u8]>,
        mut read_into: Option<&mut [u8]>,
    ) -> Result<(), DeviceError> {
        let shared = &self.shared;
        let mut away_since: Option<Instant> = None;
        let unavailable = |waited: Duration, why: String| DeviceError::Io {
            device: shared.uri.clone(),
            op,
            offset_bytes,
            len_bytes: len_bytes as u64,
            source: io::Error::other(format!(
                "backing unavailable for {:.3} s (EIO): {why}",
                waited.as_secs_f64()
            )),
        };
        for attempt in 0..ATTEMPTS_MAX {
            if let Some(since) = away_since {
                if since.elapsed() >= shared.options.unavailable_timeout {
                    let why = shared.pool().last_error.clone().unwrap_or_default();
                    return Err(unavailable(since.elapsed(), why));
                }
            }
            let mut conn = match shared.take(&mut away_since) {
                Ok(conn) => conn,
                Err(TakeError::Unavailable { waited, why }) => {
                    return Err(unavailable(waited, why))
                }
                Err(TakeError::Incompatible(why)) => return Err(proto_err(&shared.uri, why)),
            };
            if attempt > 0 {
                shared.pool().requests_retried += 1;
            }
            if command == CMD_FLUSH && conn.transmission_flags & FLAG_SEND_FLUSH == 0 {
                // This server keeps no volatile cache: nothing to flush.
                shared.put_back(conn);
                return Ok(());
            }
            let cookie = self.next_cookie.fetch_add(1, Ordering::Relaxed);
            let result = exchange(
                &mut conn.stream,
                cookie,
                command,
                offset_bytes,
                len_bytes,
                payload,
                read_into.as_deref_mut(),
            );
            match result {
                Ok(None) => {
                    shared.put_back(conn);
                    return Ok(());
                }
                Ok(Some(errno)) if errno == NbdErrno::Shutdown.code() => {
                    // The reply is in and no other is outstanding on this
                    // connection: leave it, and try again on a new one.
                    conn.disconnect();
                    shared.lost(format!("server answered {op} with ESHUTDOWN"), true);
                    away_since.get_or_insert_with(Instant::now);
                }
                Ok(Some(errno)) => {
                    shared.put_back(conn);
                    return Err(DeviceError::Remote {
                        device: shared.uri.clone(),
                        op,
                        errno,
                    });
                }
                Err(e) => {
                    conn.stream.shutdown();
                    drop(conn);
                    shared.lost(
                        format!("connection lost during {op} at {offset_bytes}: {e}"),
                        false,
                    );
                    away_since.get_or_insert_with(Instant::now);
                }
            }
        }
        let why = shared.pool().last_error.clone().unwrap_or_default();
        Err(unavailable(
            away_since.map(|s| s.elapsed()).unwrap_or_default(),
            format!("{ATTEMPTS_MAX} attempts: {why}"),
        ))
    }

    /// When a connection was lost after logged writes were sent, writes them
    /// all again, in order, before any other request runs.
    fn replay_if_stale(&self) -> Result<(), DeviceError> {
        if !self.logs_writes() || self.log_epoch_min.load(Ordering::SeqCst) >= self.lost_total() {
            return Ok(());
        }
        let _exclusive = self.gate.write().unwrap_or_else(|p| p.into_inner());
        let mut log = self.log();
        if !log.stale(self.lost_total()) {
            return Ok(());
        }
        let mut replayed = 0u64;
        for entry in log.entries.iter_mut() {
            let epoch = self.lost_total();
            let len = entry.data.len() as u32;
            self.request(
                "write (replay)",
                CMD_WRITE,
                entry.offset_bytes,
                len,
                Some(&entry.data),
                None,
            )?;
            entry.epoch = epoch;
            replayed += 1;
        }
        log.recompute_epoch_min();
        self.log_epoch_min.store(log.epoch_min, Ordering::SeqCst);
        drop(log);
        self.shared.pool().writes_replayed += replayed;
        Ok(())
    }

    fn read_piece(&self, piece: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError> {
        for _ in 0..ROUNDS_MAX {
            self.replay_if_stale()?;
            let _gate = self.shared_gate();
            let lost_before = self.lost_total();
            let len = piece.len() as u32;
            self.request("read", CMD_READ, offset_bytes, len, None, Some(piece))?;
            if self.lost_total() == lost_before || !self.logs_writes() {
                return Ok(());
            }
            // A connection was lost meanwhile: the server may have forgotten
            // logged writes; read again after they are replayed.
            if !self.log().stale(self.lost_total()) {
                return Ok(());
            }
        }
        Err(proto_err(
            &self.shared.uri,
            format!("read at {offset_bytes}: connections kept breaking ({ROUNDS_MAX} rounds)"),
        ))
    }

    fn write_piece(&self, piece: &[u8], offset_bytes: u64) -> Result<(), DeviceError> {
        let len = piece.len() as u32;
        if !self.logs_writes() {
            let _gate = self.shared_gate();
            return self.request("write", CMD_WRITE, offset_bytes, len, Some(piece), None);
        }
        let full = self.log_bytes.load(Ordering::Relaxed) + piece.len()
            > self.shared.options.replay_log_bytes_max;
        if full {
            self.flush_logged()?;
        }
        self.replay_if_stale()?;
        let _gate = self.shared_gate();
        let epoch = self.lost_total();
        self.request("write", CMD_WRITE, offset_bytes, len, Some(piece), None)?;
        let mut log = self.log();
        log.push(epoch, offset_bytes, piece);
        self.log_bytes.store(log.bytes, Ordering::Relaxed);
        self.log_epoch_min.store(log.epoch_min, Ordering::SeqCst);
        Ok(())
    }

    /// FLUSH that covers every write acknowledged before the call: logged
    /// writes are written again first when a connection was lost since, and
    /// the FLUSH counts only if no connection was lost while it ran.
    fn flush_logged(&self) -> Result<(), DeviceError> {
        for _ in 0..ROUNDS_MAX {
            self.replay_if_stale()?;
            let _gate = self.shared_gate();
            let lost_before = self.lost_total();
            let end_seq = {
                let log = self.log();
                if log.stale(lost_before) {
                    continue;
                }
                log.next_seq
            };
            self.request("flush", CMD_FLUSH, 0, 0, None, None)?;
            if self.lost_total() == lost_before {
                let mut log = self.log();
                log.retire(end_seq);
                self.log_bytes.store(log.bytes, Ordering::Relaxed);
                self.log_epoch_min.store(log.epoch_min, Ordering::SeqCst);
                return Ok(());
            }
        }
        Err(proto_err(
            &self.shared.uri,
            format!("flush: connections kept breaking ({ROUNDS_MAX} rounds)"),
        ))
    }
}

impl BlockDevice for NbdDevice {
    fn len_bytes(&self) -> u64 {
        self.shared.size_bytes
    }

    fn health(&self) -> Option<String> {
        let s = self.status();
        let mut text = format!(
            "{} for {:.0} s, {}/{} connections, {} lost, {} reconnects, {} requests retried, {} writes replayed",
            s.state.name(),
            s.since.elapsed().as_secs_f64(),
            s.connections,
            s.connections_wanted,
            s.connections_lost,
            s.reconnects,
            s.requests_retried,
            s.writes_replayed
        );
        if let Some(e) = &s.last_error {
            text.push_str(&format!("; last error: {e}"));
        }
        Some(text)
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError> {
        check_range(
            &|| self.name(),
            offset_bytes,
            buf.len() as u64,
            self.shared.size_bytes,
        )?;
        let mut at = offset_bytes;
        for piece in buf.chunks_mut(REQUEST_MAX_BYTES) {
            let len = piece.len() as u64;
            self.read_piece(piece, at)?;
            at += len;
        }
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset_bytes: u64) -> Result<(), DeviceError> {
        check_range(
            &|| self.name(),
            offset_bytes,
            data.len() as u64,
            self.shared.size_bytes,
        )?;
        let mut at = offset_bytes;
        for piece in data.chunks(REQUEST_MAX_BYTES) {
            self.write_piece(piece, at)?;
            at += piece.len() as u64;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        if !self.logs_writes() {
            return Ok(());
        }
        self.flush_logged()
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DeviceError> {
        if self.transmission_flags & FLAG_SEND_TRIM == 0 {
            return Ok(());
        }
        check_range(
            &|| self.name(),
            offset_bytes,
            len_bytes,
            self.shared.size_bytes,
        )?;
        let mut at = offset_bytes;
        let end = offset_bytes + len_bytes;
        while at < end {
            let len = (end - at).min(u32::MAX as u64 / 2) as u32;
            self.replay_if_stale()?;
            let _gate = self.shared_gate();
            self.request("trim", CMD_TRIM, at, len, None, None)?;
            at += len as u64;
        }
        Ok(())
    }

    fn writes_durable(&self) -> bool {
        // A server that offers no FLUSH has no volatile cache to flush.
        !self.logs_writes()
    }

    fn name(&self) -> String {
        self.shared.uri.clone()
    }
}

impl Drop for NbdDevice {
    fn drop(&mut self) {
        {
            let mut pool = self.shared.pool();
            pool.closing = true;
            for conn in std::mem::take(&mut pool.idle) {
                conn.disconnect();
            }
            pool.live = 0;
        }
        self.shared.wake_reconnector.notify_all();
        self.shared.conn_ready.notify_all();
        if let Some(thread) = self.reconnector.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_log_tracks_staleness_and_retires_what_a_flush_covered() {
        let mut log = ReplayLog::new();
        assert!(!log.stale(0) && !log.stale(u64::MAX - 1));
        log.push(0, 0, &[1u8; 4096]);
        log.push(2, 4096, &[2u8; 512]);
        assert_eq!(log.bytes, 4096 + 512);
        assert!(!log.stale(0), "nothing lost since the first was sent");
        assert!(log.stale(1), "a loss after the first was sent");
        let end_seq = log.next_seq;
        log.push(5, 8192, &[3u8; 100]);
        log.retire(end_seq);
        assert_eq!(log.entries.len(), 1, "the write after the flush stays");
        assert_eq!(log.bytes, 100);
        assert_eq!(log.epoch_min, 5);
        assert!(!log.stale(5) && log.stale(6));
        let reused = log.spare_bytes;
        assert!(reused >= 4096 + 512, "retired buffers kept for reuse");
        log.push(6, 0, &[4u8; 10]);
        assert!(log.spare_bytes < reused, "a spare buffer was reused");
        log.retire(log.next_seq);
        assert_eq!(
            (log.bytes, log.entries.len(), log.epoch_min),
            (0, 0, u64::MAX)
        );
        assert!(log.spare_bytes <= REPLAY_SPARE_BYTES_MAX);
    }

    #[test]
    fn uris_parse() {
        assert_eq!(
            NbdAddress::parse("nbd://localhost/disk").expect("tcp"),
            NbdAddress::Tcp {
                host_port: format!("localhost:{}", client::DEFAULT_PORT),
                export: "disk".into()
            }
        );
        assert_eq!(
            NbdAddress::parse("nbd://127.0.0.1:1234").expect("tcp port"),
            NbdAddress::Tcp {
                host_port: "127.0.0.1:1234".into(),
                export: "".into()
            }
        );
        assert_eq!(
            NbdAddress::parse("nbd+unix:///vol?socket=/tmp/s.sock").expect("unix"),
            NbdAddress::Unix {
                socket: "/tmp/s.sock".into(),
                export: "vol".into()
            }
        );
        assert!(NbdAddress::parse("http://x").is_err());
        assert!(NbdAddress::parse("nbd+unix:///vol").is_err());
    }
}
