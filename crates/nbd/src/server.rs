//! Serving NBD exports over TCP and Unix sockets with std threads.
//!
//! This module exists to move bytes between sockets and `Export`s; every
//! protocol decision is made by `proto`. Threads: one accept thread per
//! listener, one reader thread per connection (handshake, then parsing
//! requests and receiving WRITE payloads), and one worker pool shared by all
//! connections that runs export calls and writes replies, one `write` per
//! reply, under a per-connection writer lock. Replies may leave out of order,
//! as the protocol allows. WRITEs to an export that `writes_async` are
//! started with `Export::write_async` (by the reader, or a worker when large)
//! and answered from the export's completion thread, replies of a run of
//! completions sent together.
//!
//! Limits: the shared job queue holds at most `queue_depth_max` jobs; each
//! connection has at most `in_flight_per_connection_max` requests and
//! `in_flight_bytes_per_connection_max` payload bytes in flight (one request
//! is always admitted, so a 32 MiB request is never starved). Payload
//! buffers are reused per connection. It must never let one client's death
//! or stall block other clients: a vanished client turns into read/write
//! errors on its own socket only, and replies time out after `reply_timeout`.

use crate::clients::Clients;
use crate::socket::{is_transient_accept_error, ReadHalf, Socket};
use std::io::{self, BufRead, BufReader, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::export::Export;
use inline_policy::{thread_preemptions, InlinePolicy};
use job_queue::JobQueue;
pub use starttls::ServerTls;
use writes::{more_input, receive_async_write, start_write, ReaderBatch, Start};

mod inline_policy;
mod job_queue;
mod starttls;
mod writes;
use crate::proto::{
    decide, decode_request_header, encode_simple_reply, Command, ExportInfo, Handshake,
    HandshakeEvent, NbdErrno, Payload, TlsMode, BLOCK_SIZE_MIN_MAX_BYTES, PAYLOAD_MAX_BYTES,
    REQUEST_HEADER_LEN, SIMPLE_REPLY_HEADER_LEN, STRING_MAX_BYTES,
};

/// Socket read buffer per connection (request headers and small payloads).
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Payload buffers larger than this are freed after use instead of pooled.
const POOLED_BUFFER_MAX_BYTES: usize = 4 * 1024 * 1024 + SIMPLE_REPLY_HEADER_LEN;

/// Tunables; `Default` suits a 2-core host.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Worker threads running export calls, shared by all connections.
    pub workers_count: usize,
    /// Jobs waiting for a worker, over all connections.
    pub queue_depth_max: usize,
    /// Requests of one connection being processed at once.
    pub in_flight_per_connection_max: usize,
    /// READ/WRITE payload bytes of one connection in flight at once.
    pub in_flight_bytes_per_connection_max: u64,
    /// A client that does not finish the handshake within this is dropped.
    pub handshake_timeout: Duration,
    /// A client that does not take a reply within this is dropped.
    pub reply_timeout: Duration,
    /// Requests run on the connection's reader thread itself (no handoff to
    /// a worker, replies batched) while at most 1 in 20 recent ones took
    /// longer than this; otherwise they go to the workers, so that slow
    /// devices see the client's queue depth. `Duration::ZERO`: always hand
    /// over to the workers.
    pub inline_service_max: Duration,
    /// A connection's reader polls its socket for up to this long before
    /// sleeping, while the client's requests come back to back (see
    /// `ReadHalf`). `Duration::ZERO`: never poll.
    pub receive_poll: Duration,
    /// TLS (NBD_OPT_STARTTLS) on TCP connections; Unix ones stay plaintext.
    pub tls: ServerTls,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            workers_count: 8,
            queue_depth_max: 256,
            in_flight_per_connection_max: 64,
            in_flight_bytes_per_connection_max: 2 * u64::from(PAYLOAD_MAX_BYTES),
            handshake_timeout: Duration::from_secs(30),
            reply_timeout: Duration::from_secs(60),
            inline_service_max: Duration::from_micros(100),
            receive_poll: Duration::from_micros(50),
            tls: ServerTls::Off,
        }
    }
}

/// Why a server could not be built or could not listen.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("export name {0:?} is used twice")]
    DuplicateExport(String),
    #[error("export name or description longer than {STRING_MAX_BYTES} bytes")]
    StringTooLong,
    #[error(
        "export {name:?}: minimum block size {block_size_min_bytes} is not a power of two ≤ 64 KiB"
    )]
    InvalidBlockSize {
        name: String,
        block_size_min_bytes: u32,
    },
    #[error("default export {0:?} is not defined")]
    UnknownDefaultExport(String),
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

/// Counters, read with `Server::stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub connections_accepted: u64,
    pub handshakes_failed: u64,
    pub requests_served: u64,
    pub requests_refused: u64,
    /// Requests run on their connection's reader thread (the rest went to
    /// the workers).
    pub requests_inline: u64,
}

#[derive(Default)]
struct Counters {
    connections_accepted: AtomicU64,
    handshakes_failed: AtomicU64,
    requests_served: AtomicU64,
    requests_refused: AtomicU64,
    requests_inline: AtomicU64,
}

struct ExportEntry {
    name: String,
    description: Option<String>,
    block_size_min_bytes: u32,
    export: Arc<dyn Export>,
}

/// Collects exports and configuration, then starts a `Server`.
pub struct ServerBuilder {
    config: ServerConfig,
    exports: Vec<ExportEntry>,
    default_export: Option<String>,
}

impl ServerBuilder {
    /// Serve `export` under `name`.
    pub fn export(self, name: &str, export: Arc<dyn Export>) -> Self {
        self.export_described(name, None, export)
    }

    /// Serve `export` under `name`, with a description for NBD_OPT_LIST/INFO.
    pub fn export_described(
        mut self,
        name: &str,
        description: Option<&str>,
        export: Arc<dyn Export>,
    ) -> Self {
        let block_size_min_bytes = export.block_size_min_bytes();
        self.exports.push(ExportEntry {
            name: name.to_owned(),
            description: description.map(str::to_owned),
            block_size_min_bytes,
            export,
        });
        self
    }

    /// The export a client gets when it asks for the empty name. Without
    /// this, the empty name selects the only export when there is exactly one.
    pub fn default_export(mut self, name: &str) -> Self {
        self.default_export = Some(name.to_owned());
        self
    }

    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// Check the exports and start the worker pool. Listen with
    /// `Server::listen_unix` / `listen_tcp`.
    pub fn start(self) -> Result<Server, ServerError> {
        let config = self.config;
        if config.workers_count == 0
            || config.queue_depth_max == 0
            || config.in_flight_per_connection_max == 0
        {
            return Err(ServerError::InvalidConfig("counts must be at least 1"));
        }
        for (index, entry) in self.exports.iter().enumerate() {
            if self.exports[..index].iter().any(|e| e.name == entry.name) {
                return Err(ServerError::DuplicateExport(entry.name.clone()));
            }
            let description_len = entry.description.as_ref().map_or(0, String::len);
            if entry.name.len() > STRING_MAX_BYTES || description_len > STRING_MAX_BYTES {
                return Err(ServerError::StringTooLong);
            }
            let block = entry.block_size_min_bytes;
            if !block.is_power_of_two() || block > BLOCK_SIZE_MIN_MAX_BYTES {
                return Err(ServerError::InvalidBlockSize {
                    name: entry.name.clone(),
                    block_size_min_bytes: block,
                });
            }
        }
        let default_export = match &self.default_export {
            Some(name) => Some(
                self.exports
                    .iter()
                    .position(|e| &e.name == name)
                    .ok_or_else(|| ServerError::UnknownDefaultExport(name.clone()))?,
            ),
            None if self.exports.len() == 1 => Some(0),
            None => None,
        };
        let shared = Arc::new(Shared {
            queue: JobQueue::new(config.queue_depth_max),
            config,
            exports: self.exports,
            default_export,
            stopping: AtomicBool::new(false),
            connections: Mutex::new(Vec::new()),
            clients: Clients::default(),
            counters: Counters::default(),
        });
        let mut workers = Vec::with_capacity(shared.config.workers_count);
        for index in 0..shared.config.workers_count {
            let shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("nbd-worker-{index}"))
                .spawn(move || worker_loop(&shared))?;
            workers.push(handle);
        }
        Ok(Server {
            shared,
            workers,
            listeners: Vec::new(),
            stopped: false,
        })
    }
}

/// A running server; `stop` (or drop) shuts it down gracefully.
pub struct Server {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    listeners: Vec<(WakeAddr, JoinHandle<()>)>,
    stopped: bool,
}

impl Server {
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            config: ServerConfig::default(),
            exports: Vec::new(),
            default_export: None,
        }
    }

    /// Accept connections on a bound Unix socket until `stop`.
    pub fn listen_unix(&mut self, listener: UnixListener) -> Result<(), ServerError> {
        let path = listener
            .local_addr()?
            .as_pathname()
            .map(PathBuf::from)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "Unix listener needs a path")
            })?;
        let shared = Arc::clone(&self.shared);
        let handle = std::thread::Builder::new()
            .name("nbd-accept-unix".into())
            .spawn(move || {
                accept_loop(&shared, || listener.accept().map(|(s, _)| Socket::Unix(s)));
            })?;
        self.listeners.push((WakeAddr::Unix(path), handle));
        Ok(())
    }

    /// Accept connections on a bound TCP socket until `stop`.
    pub fn listen_tcp(&mut self, listener: TcpListener) -> Result<(), ServerError> {
        let mut addr = listener.local_addr()?;
        if addr.ip().is_unspecified() {
            let loopback = match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            };
            addr.set_ip(loopback);
        }
        let shared = Arc::clone(&self.shared);
        let handle = std::thread::Builder::new()
            .name("nbd-accept-tcp".into())
            .spawn(move || {
                accept_loop(&shared, || listener.accept().map(|(s, _)| Socket::Tcp(s)));
            })?;
        self.listeners.push((WakeAddr::Tcp(addr), handle));
        Ok(())
    }

    /// The clients connected, now and for as long as the server runs.
    pub fn clients(&self) -> Clients {
        self.shared.clients.clone()
    }

    pub fn stats(&self) -> ServerStats {
        let c = &self.shared.counters;
        ServerStats {
            connections_accepted: c.connections_accepted.load(Ordering::Relaxed),
            handshakes_failed: c.handshakes_failed.load(Ordering::Relaxed),
            requests_served: c.requests_served.load(Ordering::Relaxed),
            requests_refused: c.requests_refused.load(Ordering::Relaxed),
            requests_inline: c.requests_inline.load(Ordering::Relaxed),
        }
    }

    /// Connections whose thread is still running.
    pub fn connections_count(&self) -> usize {
        lock(&self.shared.connections)
            .iter()
            .filter(|c| !c.handle.is_finished())
            .count()
    }

    /// Stop accepting, let in-flight requests finish and their replies go
    /// out, close every connection, and join every thread.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.shared.stopping.store(true, Ordering::SeqCst);
        for (wake, handle) in self.listeners.drain(..) {
            // accept() does not return on its own: poke it with a connection.
            let woken = match &wake {
                WakeAddr::Tcp(addr) => TcpStream::connect(addr).map(drop),
                WakeAddr::Unix(path) => UnixStream::connect(path).map(drop),
            };
            if woken.is_ok() {
                let _ = handle.join();
            }
            // Otherwise the address is gone; the thread is left blocked in accept.
        }
        let connections = std::mem::take(&mut *lock(&self.shared.connections));
        for connection in &connections {
            // Readers see end-of-stream; replies of in-flight requests still go out.
            let _ = connection.control.shutdown(Shutdown::Read);
        }
        for connection in connections {
            let _ = connection.handle.join();
        }
        self.shared.queue.close();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

enum WakeAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

struct Shared {
    config: ServerConfig,
    exports: Vec<ExportEntry>,
    default_export: Option<usize>,
    queue: JobQueue<Job>,
    stopping: AtomicBool,
    connections: Mutex<Vec<ConnectionEntry>>,
    clients: Clients,
    counters: Counters,
}

struct ConnectionEntry {
    control: Socket,
    handle: JoinHandle<()>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of our locks leaves plain data behind; go on.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------
// Accepting.

fn accept_loop(shared: &Arc<Shared>, mut accept: impl FnMut() -> io::Result<Socket>) {
    loop {
        let socket = match accept() {
            Ok(socket) => socket,
            Err(_) if shared.stopping.load(Ordering::SeqCst) => return,
            Err(error) if is_transient_accept_error(&error) => {
                // Out of fds or similar: back off instead of spinning.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(_) => return,
        };
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        shared
            .counters
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        let Ok(control) = socket.try_clone() else {
            continue;
        };
        let shared_for_thread = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("nbd-conn".into())
            .spawn(move || serve_connection(&shared_for_thread, socket));
        let Ok(handle) = spawned else { continue };
        let mut connections = lock(&shared.connections);
        // Reap finished connections so their handles and fds do not pile up.
        let mut index = 0;
        while index < connections.len() {
            if connections[index].handle.is_finished() {
                let done = connections.swap_remove(index);
                let _ = done.handle.join();
            } else {
                index += 1;
            }
        }
        connections.push(ConnectionEntry { control, handle });
    }
}

// ---------------------------------------------------------------------------
// One connection: handshake, then the request reader.

fn serve_connection(shared: &Arc<Shared>, socket: Socket) {
    // The accept thread keeps a clone of this socket, so dropping ours does
    // not close it: shut it down explicitly on every exit path.
    let closer = socket.try_clone();
    serve_connection_inner(shared, socket);
    if let Ok(closer) = closer {
        let _ = closer.shutdown(Shutdown::Both);
    }
}

fn serve_connection_inner(shared: &Arc<Shared>, socket: Socket) {
    if let Socket::Tcp(stream) = &socket {
        // The spec asks both sides to disable Nagle.
        let _ = stream.set_nodelay(true);
    }
    let Ok(read_half) = socket.try_clone() else {
        return;
    };
    // No polling during the handshake (its messages come at human pace).
    let read_half = ReadHalf {
        socket: read_half,
        poll_budget: Duration::ZERO,
        poll_next: true,
    };
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, read_half);
    let mut writer = socket;
    let _ = writer.set_read_timeout(Some(shared.config.handshake_timeout));
    let _ = writer.set_write_timeout(Some(shared.config.reply_timeout));
    let peer = writer.peer();
    let export_index = match handshake(shared, &mut reader, &mut writer) {
        Ok(Some(index)) => index,
        Ok(None) => return,
        Err(()) => {
            shared
                .counters
                .handshakes_failed
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(peer = %peer, "NBD handshake failed");
            let _ = writer.shutdown(Shutdown::Both);
            return;
        }
    };
    let export_name = shared.exports[export_index].name.clone();
    let peer = writer.peer(); // `tls ADDR` after STARTTLS
    tracing::info!(peer = %peer, export = %export_name, "NBD client connected");
    let _listed = shared.clients.register(&peer, &export_name);
    let _ = writer.set_read_timeout(None);
    reader.get_mut().poll_budget = shared.config.receive_poll;
    let Ok(control) = writer.try_clone() else {
        return;
    };
    let entry = &shared.exports[export_index];
    let connection = Arc::new(Connection {
        writer: Mutex::new(Writer {
            socket: writer,
            pending: Vec::new(),
        }),
        control,
        export: Arc::clone(&entry.export),
        in_flight: Mutex::new(InFlight::default()),
        in_flight_changed: Condvar::new(),
        buffers: Mutex::new(Vec::new()),
        broken: AtomicBool::new(false),
        in_flight_max: shared.config.in_flight_per_connection_max,
        in_flight_bytes_max: shared.config.in_flight_bytes_per_connection_max,
    });
    let info = export_info(entry);
    transmission(shared, &connection, &mut reader, info);
    connection.send_queued();
    connection.wait_idle();
    if let Socket::Tls(stream) = &connection.control {
        let _ = stream.close_notify();
    }
    let _ = connection.control.shutdown(Shutdown::Both);
    tracing::info!(peer = %peer, export = %export_name, "NBD client disconnected");
}

fn export_info(entry: &ExportEntry) -> ExportInfo {
    let mut info = ExportInfo::new(
        &entry.name,
        entry.export.size_bytes(),
        entry.block_size_min_bytes,
        entry.export.multi_conn(),
    );
    info.description = entry.description.clone();
    info
}

/// Runs option haggling. `Ok(Some(index))`: serve that export;
/// `Ok(None)`: the client left politely; `Err`: protocol or socket failure.
fn handshake(
    shared: &Shared,
    reader: &mut BufReader<ReadHalf>,
    writer: &mut Socket,
) -> Result<Option<usize>, ()> {
    let infos = shared.exports.iter().map(export_info).collect();
    let tls = match writer {
        Socket::Tcp(_) => shared.config.tls.mode(),
        _ => TlsMode::Off,
    };
    let mut machine = Handshake::new(infos, shared.default_export).with_tls(tls);
    loop {
        if !machine.output().is_empty() {
            writer.write_all(machine.output()).map_err(drop)?;
            machine.clear_output();
        }
        match machine.poll_event() {
            Some(HandshakeEvent::Ready { export_index, .. }) => return Ok(Some(export_index)),
            Some(HandshakeEvent::Aborted) => return Ok(None),
            Some(HandshakeEvent::StartTls) => {
                starttls::upgrade(&shared.config.tls, reader, writer)?;
                machine.tls_started();
                continue;
            }
            None => {}
        }
        let input = reader.fill_buf().map_err(drop)?;
        if input.is_empty() {
            return Err(());
        }
        let used = machine.handle_input(input).map_err(drop)?;
        reader.consume(used);
    }
}

/// Replies batched by the reader are sent once they reach this many bytes
/// (and whenever the reader is about to wait for the client).
const REPLY_BATCH_MAX_BYTES: usize = 64 * 1024;

fn transmission(
    shared: &Arc<Shared>,
    connection: &Arc<Connection>,
    reader: &mut BufReader<ReadHalf>,
    info: ExportInfo,
) {
    let geometry = info.geometry();
    let mut header_bytes = [0u8; REQUEST_HEADER_LEN];
    let mut policy = InlinePolicy {
        max_ns: u64::try_from(shared.config.inline_service_max.as_nanos()).unwrap_or(u64::MAX),
        slow_share: 0,
        handed_over: 0,
        preemptions: thread_preemptions(),
    };
    // The buffer of requests run on this thread, reused.
    let mut inline_buffer: Vec<u8> = Vec::new();
    let mut batch = ReaderBatch::new(&*connection.export);
    loop {
        if connection.broken.load(Ordering::SeqCst) {
            return;
        }
        if reader.buffer().len() < REQUEST_HEADER_LEN {
            // About to wait for the client: send the replies batched so far.
            batch.flush(connection);
        }
        if reader.read_exact(&mut header_bytes).is_err() {
            return; // Client gone, or server stopping (read side shut down).
        }
        let Ok(header) = decode_request_header(&header_bytes) else {
            return; // Bad magic: the stream cannot be resynchronised.
        };
        let decision = decide(&header, &geometry);
        let command = match decision.command {
            Ok(Command::Disconnect) => return,
            Ok(command) => command,
            Err(errno) => {
                shared
                    .counters
                    .requests_refused
                    .fetch_add(1, Ordering::Relaxed);
                if let Payload::Discard(length) = decision.payload {
                    // Refused WRITE: skip its payload (io::copy uses a fixed-size
                    // buffer) so the next header is found.
                    batch.flush(connection);
                    let mut payload = reader.by_ref().take(u64::from(length));
                    match io::copy(&mut payload, &mut io::sink()) {
                        Ok(copied) if copied == u64::from(length) => {}
                        _ => return,
                    }
                }
                connection.queue_reply(&encode_simple_reply(Some(errno), decision.cookie));
                continue;
            }
        };
        let (buffer_len, charge_bytes) = match command {
            Command::Read { length, .. } => {
                (SIMPLE_REPLY_HEADER_LEN + length as usize, u64::from(length))
            }
            Command::Write { length, .. } => (length as usize, u64::from(length)),
            _ => (0, 0),
        };
        if let (Command::Write { length, .. }, true) = (command, connection.export.writes_async()) {
            let Some(job) =
                receive_async_write(connection, &mut batch, reader, decision.cookie, command)
            else {
                return; // Client vanished mid-payload.
            };
            if connection.export.writes_alone_inline() && !more_input(reader) {
                // Alone on its connection (nothing more received or on the
                // way: a client at QD1): run to completion here, where a
                // hand-off would only add a wake-up and its latency.
                start_write(shared, job, Start::Inline);
            } else if length as usize <= connection.export.write_async_on_reader_max_bytes() {
                start_write(shared, job, Start::Batched(batch.get()));
            } else if let Err(job) = shared.queue.push(job) {
                job.connection.release(job.charge_bytes);
                return;
            }
            continue;
        }
        let slack = data_slack(command);
        if policy.run_inline() {
            // Run to completion here: no wake-up of a worker, and the reply
            // leaves with the others of this batch.
            if inline_buffer.len() < buffer_len + slack {
                inline_buffer.resize(buffer_len + slack, 0);
            }
            let start = area_start(&inline_buffer, command);
            let area = &mut inline_buffer[start..];
            if let Payload::Receive(length) = decision.payload {
                if !receive(connection, &mut batch, reader, &mut area[..length as usize]) {
                    return; // Client vanished mid-payload.
                }
            }
            shared
                .counters
                .requests_inline
                .fetch_add(1, Ordering::Relaxed);
            // The request may wait for writes held back (a FLUSH does).
            batch.end();
            let started = Instant::now();
            let error = run_export(&*connection.export, command, area);
            policy.note(started.elapsed());
            reply(
                shared,
                connection,
                decision.cookie,
                command,
                error,
                area,
                true,
            );
            if inline_buffer.capacity() > POOLED_BUFFER_MAX_BYTES {
                inline_buffer = Vec::new();
            }
            continue;
        }
        // admit() may wait for workers: nothing batched may wait with it.
        batch.flush(connection);
        connection.admit(charge_bytes);
        let mut buffer = connection.take_buffer(buffer_len + slack);
        let reply_start = area_start(&buffer, command);
        if let Payload::Receive(length) = decision.payload {
            let payload = &mut buffer[reply_start..reply_start + length as usize];
            if !receive(connection, &mut batch, reader, payload) {
                connection.release(charge_bytes);
                return; // Client vanished mid-payload.
            }
        }
        let job = Job {
            connection: Arc::clone(connection),
            cookie: decision.cookie,
            command,
            buffer,
            charge_bytes,
            payload_start: None,
            reply_start,
        };
        if let Err(job) = shared.queue.push(job) {
            job.connection.release(job.charge_bytes);
            return;
        }
    }
}

/// Alignment of the payload of a WRITE started with `Export::write_async`,
/// and of a large READ's data (so that direct I/O can take or fill the
/// buffer as it is).
const DIRECT_IO_ALIGNMENT_BYTES: usize = 4096;

/// READs and WRITEs of this size or more that run on a worker get their
/// data at an address aligned to `DIRECT_IO_ALIGNMENT_BYTES` (a backing
/// file reads such reads with direct I/O, no copy out of the page cache;
/// a cache device writes such writes' pages from the buffer as it is).
const DATA_ALIGNED_MIN_BYTES: usize = 64 * 1024;

/// Bytes a request's buffer holds beyond its area, so that the area can
/// start where a large READ's data or WRITE's payload is aligned.
fn data_slack(command: Command) -> usize {
    match command {
        Command::Read { length, .. } | Command::Write { length, .. }
            if length as usize >= DATA_ALIGNED_MIN_BYTES =>
        {
            DIRECT_IO_ALIGNMENT_BYTES
        }
        _ => 0,
    }
}

/// Where the request's area (a READ's reply header and data, a WRITE's
/// payload) starts in `buffer`, which has `data_slack` to spare: a large
/// READ's data and a large WRITE's payload at an aligned address, so a
/// device can read or write them with direct I/O, with no copy.
fn area_start(buffer: &[u8], command: Command) -> usize {
    if data_slack(command) == 0 {
        return 0;
    }
    let data_at = match command {
        Command::Read { .. } => SIMPLE_REPLY_HEADER_LEN,
        _ => 0,
    };
    buffer[data_at..]
        .as_ptr()
        .align_offset(DIRECT_IO_ALIGNMENT_BYTES)
}

/// Reads a WRITE payload; the batch ends and the batched replies go
/// first if the read may wait.
fn receive(
    connection: &Connection,
    batch: &mut ReaderBatch<'_>,
    reader: &mut BufReader<ReadHalf>,
    buffer: &mut [u8],
) -> bool {
    if reader.buffer().len() < buffer.len() {
        batch.flush(connection);
    }
    reader.read_exact(buffer).is_ok()
}

// ---------------------------------------------------------------------------
// Per-connection state shared by its reader and the workers.

#[derive(Default)]
struct InFlight {
    count: usize,
    bytes: u64,
}

/// The sending side of a connection: the socket and replies not sent yet.
struct Writer {
    socket: Socket,
    /// Replies of requests run on the reader thread, sent together.
    pending: Vec<u8>,
}

impl Writer {
    /// Sends the pending replies and then `tail`, with one `writev` when the
    /// socket takes it all.
    fn write_out(&mut self, tail: &[u8]) -> io::Result<()> {
        let Writer { socket, pending } = self;
        if pending.is_empty() {
            return socket.write_all(tail);
        }
        let mut slices = [IoSlice::new(pending), IoSlice::new(tail)];
        let mut bufs = &mut slices[..];
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            match socket.write_vectored(bufs) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        pending.clear();
        Ok(())
    }
}

struct Connection {
    writer: Mutex<Writer>,
    /// A clone for shutting the socket down without taking the writer lock.
    control: Socket,
    export: Arc<dyn Export>,
    in_flight: Mutex<InFlight>,
    in_flight_changed: Condvar,
    buffers: Mutex<Vec<Vec<u8>>>,
    broken: AtomicBool,
    in_flight_max: usize,
    in_flight_bytes_max: u64,
}

impl Connection {
    /// Block until this request fits the connection's in-flight limits. One
    /// request is always admitted when nothing is in flight.
    fn admit(&self, bytes: u64) {
        let mut state = lock(&self.in_flight);
        while state.count > 0
            && (state.count >= self.in_flight_max || state.bytes + bytes > self.in_flight_bytes_max)
        {
            state = self
                .in_flight_changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        state.count += 1;
        state.bytes += bytes;
    }

    fn release(&self, bytes: u64) {
        let mut state = lock(&self.in_flight);
        assert!(state.count > 0);
        assert!(state.bytes >= bytes);
        state.count -= 1;
        state.bytes -= bytes;
        drop(state);
        self.in_flight_changed.notify_all();
    }

    fn wait_idle(&self) {
        let mut state = lock(&self.in_flight);
        while state.count > 0 {
            state = self
                .in_flight_changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A buffer of at least `len` bytes, reused when possible. Contents are stale.
    fn take_buffer(&self, len: usize) -> Vec<u8> {
        if len == 0 {
            return Vec::new();
        }
        let mut pool = lock(&self.buffers);
        let found = pool.iter().position(|b| b.len() >= len);
        let mut buffer = match found {
            Some(index) => pool.swap_remove(index),
            None => pool.pop().unwrap_or_default(),
        };
        drop(pool);
        if buffer.len() < len {
            buffer.resize(len, 0);
        }
        buffer
    }

    fn recycle(&self, buffer: Vec<u8>) {
        if buffer.capacity() == 0 || buffer.capacity() > POOLED_BUFFER_MAX_BYTES {
            return;
        }
        let mut pool = lock(&self.buffers);
        if pool.len() < self.in_flight_max {
            pool.push(buffer);
        }
    }

    /// Send one whole reply (after any batched ones) with one `writev`; on
    /// failure the connection is marked broken and shut down so its reader
    /// stops too.
    fn send(&self, bytes: &[u8]) {
        let mut writer = lock(&self.writer);
        self.write_out(&mut writer, bytes);
    }

    /// Add a reply to the batch, sending the batch once it is large.
    fn queue_reply(&self, bytes: &[u8]) {
        let mut writer = lock(&self.writer);
        if writer.pending.len() + bytes.len() > REPLY_BATCH_MAX_BYTES {
            self.write_out(&mut writer, bytes);
        } else if !self.broken.load(Ordering::SeqCst) {
            writer.pending.extend_from_slice(bytes);
        }
    }

    /// Send the batched replies (nothing else).
    fn send_queued(&self) {
        let mut writer = lock(&self.writer);
        if !writer.pending.is_empty() {
            self.write_out(&mut writer, &[]);
        }
    }

    fn write_out(&self, writer: &mut Writer, bytes: &[u8]) {
        if self.broken.load(Ordering::SeqCst) {
            writer.pending.clear();
            return;
        }
        if writer.write_out(bytes).is_err() {
            writer.pending.clear();
            self.broken.store(true, Ordering::SeqCst);
            let _ = self.control.shutdown(Shutdown::Both);
        }
    }
}

// ---------------------------------------------------------------------------
// Workers.

struct Job {
    connection: Arc<Connection>,
    cookie: u64,
    command: Command,
    buffer: Vec<u8>,
    charge_bytes: u64,
    /// A WRITE received for `Export::write_async`: where its payload starts.
    payload_start: Option<usize>,
    /// Where the reply (header, then a READ's data), or a WRITE's payload,
    /// starts in `buffer`.
    reply_start: usize,
}

fn worker_loop(shared: &Arc<Shared>) {
    while let Some(job) = shared.queue.pop() {
        if job.payload_start.is_some() {
            start_write(shared, job, Start::Alone);
            continue;
        }
        run_job(shared, job);
    }
}

fn run_job(shared: &Shared, job: Job) {
    let Job {
        connection,
        cookie,
        command,
        mut buffer,
        charge_bytes,
        payload_start: _,
        reply_start,
    } = job;
    if !connection.broken.load(Ordering::SeqCst) {
        let area = &mut buffer[reply_start..];
        let error = run_export(&*connection.export, command, area);
        reply(shared, &connection, cookie, command, error, area, false);
    }
    connection.recycle(buffer);
    connection.release(charge_bytes);
}

/// Calls the export; a panicking export must not kill the thread or wedge
/// the connection (it is answered EIO).
fn run_export(export: &dyn Export, command: Command, buffer: &mut [u8]) -> Option<NbdErrno> {
    match catch_unwind(AssertUnwindSafe(|| execute(export, command, buffer))) {
        Ok(Ok(())) => None,
        Ok(Err(errno)) => Some(errno),
        Err(_) => Some(NbdErrno::Io),
    }
}

/// Sends (or, with `batch`, queues) the reply of a request that ran, and
/// counts it.
fn reply(
    shared: &Shared,
    connection: &Connection,
    cookie: u64,
    command: Command,
    error: Option<NbdErrno>,
    buffer: &mut [u8],
    batch: bool,
) {
    let send = |bytes: &[u8]| {
        if batch {
            connection.queue_reply(bytes);
        } else {
            connection.send(bytes);
        }
    };
    // Counted before the reply leaves, so that a client that has its reply
    // finds it counted.
    let counter = if error.is_some() {
        &shared.counters.requests_refused
    } else {
        &shared.counters.requests_served
    };
    counter.fetch_add(1, Ordering::Relaxed);
    match (command, error) {
        (Command::Read { length, .. }, None) => {
            let end = SIMPLE_REPLY_HEADER_LEN + length as usize;
            buffer[..SIMPLE_REPLY_HEADER_LEN].copy_from_slice(&encode_simple_reply(None, cookie));
            send(&buffer[..end]);
        }
        (_, error) => send(&encode_simple_reply(error, cookie)),
    }
}

fn execute(export: &dyn Export, command: Command, buffer: &mut [u8]) -> Result<(), NbdErrno> {
    let result = match command {
        Command::Read { offset, length } => {
            let end = SIMPLE_REPLY_HEADER_LEN + length as usize;
            export.read(offset, &mut buffer[SIMPLE_REPLY_HEADER_LEN..end])
        }
        Command::Write {
            offset,
            length,
            fua,
        } => export.write(offset, &buffer[..length as usize], fua),
        Command::Flush => export.flush(),
        Command::Trim {
            offset,
            length,
            fua,
        } => export.trim(offset, u64::from(length), fua),
        Command::WriteZeroes {
            offset,
            length,
            fua,
            no_hole,
        } => export.write_zeroes(offset, u64::from(length), fua, no_hole),
        // The reader handles DISC itself; nothing to do.
        Command::Disconnect => Ok(()),
    };
    result.map_err(|error| error.errno())
}
