//! The peer's side of replication (`wcache replica`): one primary at a
//! time writes its cache device's bytes into this host's copy, which is
//! then a cache a takeover recovers like any other after a crash. It checks
//! each primary's hello against the state file (same cache, epoch not
//! older: an old primary is fenced), keeps the state's `consistent` false
//! from a resync's first frame to its end, and answers a flush only once
//! every earlier frame is durable here. It must never answer a flush it has
//! not made durable, nor take a hello it cannot check.

use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::link::{self, LinkTls, Stream};
use super::state::{ReplicaState, Role, StateError};
use super::wire::{self, Answer, Header, Hello, Kind, Reply};
use crate::device::file::{FileDevice, FileOptions, SyncMode};
use crate::device::BlockDevice;
use crate::lock::{DeviceLock, LockMode};

/// What `wcache replica` runs with.
#[derive(Debug)]
pub struct PeerOptions {
    /// This host's copy of the primary's cache device (created at the
    /// primary's size when missing).
    pub cache: PathBuf,
    pub state_path: PathBuf,
    pub tls: LinkTls,
    /// A primary silent for this long is gone (it sends a flush every second).
    pub timeout: Duration,
    /// Take the next primary's hello whatever this copy held before
    /// (another cache, a newer epoch, a copy that was taken over).
    pub force: bool,
}

/// Why the peer cannot run.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
    #[error("{cache}: {why}")]
    Device { cache: String, why: String },
    #[error("{state}: this copy of cache {cache_id} serves it now (epoch {epoch}, taken over); it can mirror a primary only anew: --force (its content is replaced by the primary's)")]
    TakenOver {
        state: String,
        cache_id: String,
        epoch: u64,
    },
}

/// The largest range one sums request covers.
pub const SUMS_RANGE_MAX: u64 = 64 << 20;

/// What one receive from the primary may take.
const RECEIVE_BYTES: usize = 256 << 10;

/// Why a session with one primary ended.
enum End {
    Bye,
    Lost(String),
}

/// A running peer: its copy, locked, and what it knows of it.
pub struct Peer {
    options: PeerOptions,
    state: Option<ReplicaState>,
    device: Option<FileDevice>,
    force: bool,
    _lock: Option<DeviceLock>,
}

impl Peer {
    /// Opens this host's copy (if it exists) and its state, locking the copy.
    pub fn open(options: PeerOptions) -> Result<Peer, PeerError> {
        let state = ReplicaState::load(&options.state_path)?;
        if let Some(s) = state.as_ref().filter(|s| s.role == Role::Primary) {
            if !options.force {
                return Err(PeerError::TakenOver {
                    state: options.state_path.display().to_string(),
                    cache_id: s.cache_id.clone(),
                    epoch: s.epoch,
                });
            }
        }
        // A state without its copy (deleted, replaced): nothing is known of
        // what the copy holds; it is adopted anew and compared whole.
        let state = match state {
            Some(s) if !options.cache.exists() => {
                tracing::warn!(cache = %s.cache_id, "replication: the copy {} is missing: it is made anew from the primary", options.cache.display());
                None
            }
            s => s,
        };
        let mut peer = Peer {
            force: options.force,
            state,
            device: None,
            _lock: None,
            options,
        };
        if peer.options.cache.exists() {
            peer.open_device(None)?;
        }
        Ok(peer)
    }

    fn open_device(&mut self, create_size_bytes: Option<u64>) -> Result<(), PeerError> {
        let cache = &self.options.cache;
        if self._lock.is_none() && cache.exists() {
            self._lock = Some(DeviceLock::acquire(
                cache,
                LockMode::Exclusive,
                "replica copy",
            )?);
        }
        let options = FileOptions {
            sync: SyncMode::Fdatasync,
            direct: false,
            create_size_bytes,
            map: false,
            direct_large_reads: false,
        };
        let device = FileDevice::open(cache, options).map_err(|e| PeerError::Device {
            cache: cache.display().to_string(),
            why: e.to_string(),
        })?;
        if self._lock.is_none() {
            self._lock = Some(DeviceLock::acquire(
                cache,
                LockMode::Exclusive,
                "replica copy",
            )?);
        }
        self.device = Some(device);
        Ok(())
    }

    /// Serves primaries one after another, until `stop` (`wcache replica`
    /// runs until it is killed: everything it answered is durable, so a
    /// kill loses nothing). One session at a time: an old session never
    /// writes after a new one starts; a new primary's connection waits
    /// until the old one's silence passes the timeout.
    pub fn serve(&mut self, listener: &TcpListener, stop: &AtomicBool) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        while !stop.load(Ordering::Acquire) {
            let tcp = match listener.accept() {
                Ok((tcp, _)) => tcp,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                Err(e) => return Err(e),
            };
            tcp.set_nonblocking(false)?;
            let name = tcp
                .peer_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string());
            let mut stream = match link::wrap(tcp, self.options.timeout, &self.options.tls, &name) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(primary = %name, "replication: refused a connection: {e}");
                    continue;
                }
            };
            match self.session(&mut stream) {
                Ok(End::Bye) => {
                    tracing::info!(primary = %stream.peer, "replication: the primary stopped cleanly")
                }
                Ok(End::Lost(why)) | Err(why) => {
                    tracing::warn!(primary = %stream.peer, "replication: the primary is gone: {why}")
                }
            }
            (stream.closer)();
        }
        Ok(())
    }

    /// One primary: its hello, then its frames until it leaves.
    fn session(&mut self, stream: &mut Stream) -> Result<End, String> {
        stream
            .tcp
            .set_read_timeout(Some(self.options.timeout))
            .map_err(|e| e.to_string())?;
        let hello = match Hello::read(&mut stream.reader).map_err(|e| e.to_string())? {
            Ok(h) => h,
            Err(version) => {
                let text = format!(
                    "link version {version} is not this peer's {}",
                    wire::VERSION
                );
                self.answer(stream, Answer::Version, &text)?;
                return Err(text);
            }
        };
        let (answer, text) = self.check_hello(&hello);
        self.answer(stream, answer, &text)?;
        if !matches!(answer, Answer::Accepted | Answer::AcceptedNew) {
            return Err(format!("refused its hello: {text}"));
        }
        tracing::info!(primary = %stream.peer, cache = %wire::show_id(&hello.cache_id), epoch = hello.epoch, "replication: mirroring a primary");
        self.frames(stream)
    }

    fn answer(&self, stream: &mut Stream, answer: Answer, text: &str) -> Result<(), String> {
        let (epoch, cache_id) = self
            .state
            .as_ref()
            .map_or((0, [0; 16]), |s| (s.epoch, s.id_bytes()));
        Reply {
            answer,
            epoch,
            cache_id,
            text: text.to_string(),
        }
        .write(&mut stream.writer)
        .map_err(|e| e.to_string())
    }

    /// Whether this copy takes `hello`'s primary, and why not.
    fn check_hello(&mut self, hello: &Hello) -> (Answer, String) {
        let id = wire::show_id(&hello.cache_id);
        let adopt = self.force || self.state.is_none();
        if !adopt {
            let s = self.state.as_ref().expect("a state");
            if s.cache_id != id {
                return (
                    Answer::OtherCache,
                    format!("this peer mirrors cache {} (epoch {}), not cache {id}; start it with --force to mirror this one instead", s.cache_id, s.epoch),
                );
            }
            if hello.epoch < s.epoch {
                return (
                    Answer::TakenOver,
                    format!("cache {id} is at epoch {} here: it was taken over after epoch {}; this primary is fenced (make it a replica of the new primary)", s.epoch, hello.epoch),
                );
            }
        }
        match self.device.as_ref().map(|d| d.len_bytes()) {
            Some(size) if size != hello.size_bytes => {
                return (
                    Answer::Size,
                    format!(
                        "this peer's copy {} holds {size} bytes, the primary's cache {}",
                        self.options.cache.display(),
                        hello.size_bytes
                    ),
                )
            }
            Some(_) => {}
            None => {
                if let Err(e) = self.open_device(Some(hello.size_bytes)) {
                    return (Answer::Failed, e.to_string());
                }
            }
        }
        let mut state = ReplicaState {
            cache_id: id,
            epoch: hello.epoch,
            role: Role::Replica,
            consistent: false,
        };
        if !adopt {
            state.consistent = self.state.as_ref().is_some_and(|s| s.consistent);
        }
        if let Err(e) = state.store(&self.options.state_path) {
            return (Answer::Failed, e.to_string());
        }
        self.state = Some(state);
        self.force = false;
        match adopt {
            true => (Answer::AcceptedNew, String::new()),
            false => (Answer::Accepted, String::new()),
        }
    }

    fn set_consistent(&mut self, consistent: bool) -> Result<(), String> {
        let state = self.state.as_mut().expect("a state once accepted");
        if state.consistent != consistent {
            state.consistent = consistent;
            state
                .store(&self.options.state_path)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Applies frames until the primary leaves, the link fails or a device
    /// write fails (said to the primary, which then goes on alone).
    fn frames(&mut self, stream: &mut Stream) -> Result<End, String> {
        let mut data = Vec::new();
        // Frames come back to back: one receive takes many of them.
        let mut reader = io::BufReader::with_capacity(RECEIVE_BYTES, &mut stream.reader);
        loop {
            let header = match Header::read(&mut reader) {
                Ok(h) => h,
                Err(e) => return Ok(End::Lost(e.to_string())),
            };
            data.resize(header.len as usize, 0);
            if matches!(header.kind, Kind::Write | Kind::SumsAsk) {
                if let Err(e) = reader.read_exact(&mut data) {
                    return Ok(End::Lost(e.to_string()));
                }
            }
            if header.kind == Kind::SumsAsk {
                let answer = self.sums(header.offset, &data).map_err(|e| e.to_string())?;
                let h = Header::new(Kind::Sums, answer.len() as u32, header.offset, header.id);
                stream
                    .writer
                    .write_all(&h.encode())
                    .map_err(|e| e.to_string())?;
                stream
                    .writer
                    .write_all(&answer)
                    .and_then(|_| stream.writer.flush())
                    .map_err(|e| e.to_string())?;
                continue;
            }
            match self.apply(header, &data) {
                Ok(Some(id)) => {
                    let ok = Header::new(Kind::Flushed, 0, 0, id).encode();
                    stream
                        .writer
                        .write_all(&ok)
                        .and_then(|_| stream.writer.flush())
                        .map_err(|e| e.to_string())?;
                }
                Ok(None) if header.kind == Kind::Bye => return Ok(End::Bye),
                Ok(None) => {}
                Err(why) => {
                    let text = why.as_bytes();
                    let h = Header::new(Kind::Failed, text.len() as u32, 0, header.id).encode();
                    let _ = stream
                        .writer
                        .write_all(&h)
                        .and_then(|_| stream.writer.write_all(text));
                    return Err(why);
                }
            }
        }
    }

    /// The checksums of a range of this copy (`Kind::SumsAsk`: its length
    /// in `len_le`), as `wire::page_sums` makes them.
    fn sums(&self, offset: u64, len_le: &[u8]) -> Result<Vec<u8>, String> {
        let device = self.device.as_ref().expect("a device once accepted");
        let len = len_le
            .try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| "a sums request without its length".to_string())?;
        let pages = len.div_ceil(wire::SUM_PAGE_BYTES);
        if len > SUMS_RANGE_MAX
            || offset
                .checked_add(len)
                .is_none_or(|end| end > device.len_bytes())
        {
            return Err(format!("a sums request of {len} bytes at {offset}"));
        }
        let mut data = vec![0u8; len as usize];
        device
            .read_at(&mut data, offset)
            .map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(pages as usize * 4);
        wire::page_sums(&data, &mut out);
        Ok(out)
    }

    /// One frame on this copy; `Some(id)`: answer a flush.
    fn apply(&mut self, header: Header, data: &[u8]) -> Result<Option<u64>, String> {
        let device = self.device.as_ref().expect("a device once accepted");
        let err = |e: crate::device::DeviceError| e.to_string();
        match header.kind {
            Kind::Write => device.write_at(data, header.offset).map_err(err)?,
            Kind::Zero => zero(device, header.offset, header.len as u64).map_err(err)?,
            Kind::Flush => {
                device.flush().map_err(err)?;
                return Ok(Some(header.id));
            }
            Kind::ResyncBegin => self.set_consistent(false)?,
            Kind::ResyncEnd => {
                device.flush().map_err(err)?;
                self.set_consistent(true)?;
                return Ok(Some(header.id));
            }
            Kind::Bye => device.flush().map_err(err)?,
            Kind::Flushed | Kind::Failed | Kind::SumsAsk | Kind::Sums => {
                return Err(format!("a primary sent a {:?} frame", header.kind))
            }
        }
        Ok(None)
    }
}

/// Makes a range read as zeros: a hole punched in a regular file, else
/// (a block device, whose discard need not read back as zeros, or a
/// filesystem without holes) written zeros.
fn zero(device: &FileDevice, offset: u64, len: u64) -> Result<(), crate::device::DeviceError> {
    use std::os::unix::io::AsRawFd;
    if let (Some(file), Ok(off), Ok(n)) = (
        device.regular_file(),
        libc::off_t::try_from(offset),
        libc::off_t::try_from(len),
    ) {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: a plain syscall on an open descriptor.
        if unsafe { libc::fallocate(file.as_raw_fd(), mode, off, n) } == 0 {
            return Ok(());
        }
    }
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(ZEROS.len() as u64) as usize;
        device.write_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}
