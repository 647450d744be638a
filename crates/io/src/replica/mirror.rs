//! The primary's side of replication: its cache device behind a
//! `BlockDevice` that sends every write to the peer as it goes to the local
//! device, and whose flush returns once the local device and the peer both
//! made every earlier write durable (DRBD's protocol C). The cache's own
//! durability rule (a write is acknowledged after a flush or FUA) then makes
//! every acknowledged write durable on both hosts while the link is up.
//!
//! Lost link: the device goes on alone (degraded); what the peer lacks is
//! kept as a set of regions (the writes sent since the last flush it
//! answered, and every write while away); a thread connects again and
//! copies those regions (reading each under the send lock, so a newer write
//! of the same region always reaches the peer after the copy), then ends
//! the resync with a flush. The mirror is not consistent while it runs.
//!
//! A write goes to the peer before the local device while the link is up
//! (so the peer's write and the local one overlap); a region is read for a
//! comparison or a copy only with no such write under way (`order`), so
//! the copy holds every write whose frame went before it.
//!
//! Lock order: `order`, then `tx`, then `rx`, then `lacking`. This module must never
//! report a flush done on the peer that the peer did not answer, and never
//! forget a region the peer may lack.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::link::{self, Stream};
use super::state::{ReplicaState, Role};
use super::wire::{self, Answer, Header, Hello, Kind, Reply};
use super::{MirrorError, MirrorOptions, ReplicationStatus};

mod device;
mod resync;

use crate::device::{BlockDevice, DeviceError};
use resync::Lacking;

/// The unit of what the peer lacks, and of a resync's reads.
pub const REGION_BYTES: u64 = 1 << 20;
/// A link with nothing sent for this long is tested with a flush.
const HEARTBEAT: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum LinkState {
    /// Every write goes to the peer; a flush waits for it.
    Connected = 0,
    /// Connected, copying what the peer lacks: the mirror is not consistent.
    Resyncing = 1,
    /// No peer: writes are on this host only.
    Degraded = 2,
}

impl LinkState {
    pub fn name(self) -> &'static str {
        match self {
            LinkState::Connected => "connected",
            LinkState::Resyncing => "resyncing",
            LinkState::Degraded => "degraded",
        }
    }
}

struct Tx {
    writer: Option<Box<dyn Write + Send>>,
    closer: Option<Arc<dyn Fn() + Send + Sync>>,
    generation: u64,
    next_id: u64,
    /// Regions sent since the last flush frame.
    current: Vec<u32>,
    buf: Vec<u8>,
    last_send: Instant,
}

struct Rx {
    acked_id: u64,
    /// Flush frames not answered yet, with the regions sent before each.
    pending: VecDeque<(u64, Vec<u32>)>,
    /// The newest generation lost.
    lost: u64,
}

/// The primary's cache device, mirrored to a peer.
pub struct Mirror {
    local: Arc<dyn BlockDevice>,
    options: MirrorOptions,
    hello: Hello,
    regions: u32,
    /// Shared by each write under way (`write_both`), exclusive while a
    /// region is read to be compared or copied. Taken before `tx`.
    order: RwLock<()>,
    tx: Mutex<Tx>,
    rx: Mutex<Rx>,
    answered: Condvar,
    lacking: Mutex<Lacking>,
    state: AtomicU8,
    stop: AtomicBool,
    wake: Condvar,
    since: Mutex<Option<(Instant, String)>>,
    resynced_bytes: AtomicU64,
    losses: AtomicU64,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Mirror {
    /// Mirrors `local` to the peer of `options`: loads (or draws) the
    /// cache's replication state, connects and copies the whole device to
    /// the peer before returning, so that nothing is written to the cache
    /// before the peer holds it too. A peer that refuses (another cache, a
    /// newer epoch: this cache was taken over) fails the start; an
    /// unreachable one too, unless `start_without_peer`.
    pub fn start(
        local: Arc<dyn BlockDevice>,
        options: MirrorOptions,
    ) -> Result<Arc<Mirror>, MirrorError> {
        let state = primary_state(&options)?;
        let mirror = Arc::new(Mirror::new(local, options, &state));
        match mirror.connect() {
            Ok(mut stream) => {
                let failed = |e: io::Error| MirrorError::Resync {
                    peer: mirror.options.peer.clone(),
                    why: e.to_string(),
                };
                mirror
                    .skip_what_the_peer_holds(&mut stream)
                    .map_err(failed)?;
                mirror.attach(stream);
                mirror.resync().map_err(failed)?;
            }
            Err(e @ MirrorError::Refused { .. }) => return Err(e),
            Err(e) if !mirror.options.start_without_peer => return Err(e),
            Err(e) => tracing::warn!("replication: starting without the peer: {e}"),
        }
        let keeper = Arc::clone(&mirror);
        let handle = std::thread::Builder::new()
            .name("wcache-replica".into())
            .spawn(move || keeper.keep_link())
            .expect("spawn the replication thread");
        lock(&mirror.threads).push(handle);
        Ok(mirror)
    }

    /// A mirror of `local` not connected yet, every region lacking.
    fn new(local: Arc<dyn BlockDevice>, options: MirrorOptions, state: &ReplicaState) -> Mirror {
        let size_bytes = local.len_bytes();
        let regions = u32::try_from(size_bytes.div_ceil(REGION_BYTES)).expect("regions fit");
        let hello = Hello {
            cache_id: state.id_bytes(),
            epoch: state.epoch,
            size_bytes,
        };
        let mut lacking = Lacking {
            bits: vec![0; (regions as usize).div_ceil(64)],
            count: 0,
        };
        (0..regions).for_each(|r| lacking.mark(r));
        Mirror {
            local,
            hello,
            regions,
            order: RwLock::new(()),
            tx: Mutex::new(Tx {
                writer: None,
                closer: None,
                generation: 0,
                next_id: 1,
                current: Vec::new(),
                buf: Vec::new(),
                last_send: Instant::now(),
            }),
            rx: Mutex::new(Rx {
                acked_id: 0,
                pending: VecDeque::new(),
                lost: 0,
            }),
            answered: Condvar::new(),
            lacking: Mutex::new(lacking),
            state: AtomicU8::new(LinkState::Degraded as u8),
            stop: AtomicBool::new(false),
            wake: Condvar::new(),
            since: Mutex::new(Some((Instant::now(), "not connected yet".into()))),
            resynced_bytes: AtomicU64::new(0),
            losses: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
            options,
        }
    }

    pub fn link_state(&self) -> LinkState {
        match self.state.load(Ordering::Acquire) {
            0 => LinkState::Connected,
            1 => LinkState::Resyncing,
            _ => LinkState::Degraded,
        }
    }

    /// What the operator sees of the link.
    pub fn status(&self) -> ReplicationStatus {
        let lacking = lock(&self.lacking).count;
        let since = lock(&self.since).clone();
        ReplicationStatus {
            peer: self.options.peer.clone(),
            state: self.link_state().name().to_string(),
            cache_id: wire::show_id(&self.hello.cache_id),
            epoch: self.hello.epoch,
            unprotected_bytes: (lacking * REGION_BYTES).min(self.hello.size_bytes),
            resynced_bytes: self.resynced_bytes.load(Ordering::Relaxed),
            links_lost: self.losses.load(Ordering::Relaxed),
            away_s: since.as_ref().map(|(t, _)| t.elapsed().as_secs_f64()),
            last_error: since.map(|(_, why)| why),
        }
    }

    /// Connects and says hello; a refusal is an error naming its reason.
    fn connect(&self) -> Result<Stream, MirrorError> {
        let peer = &self.options.peer;
        let unreachable = |why: String| MirrorError::Unreachable {
            peer: peer.clone(),
            why,
        };
        let mut stream = link::connect(peer, self.options.timeout, &self.options.tls)
            .map_err(|e| unreachable(e.to_string()))?;
        let plain = matches!(self.options.tls, link::LinkTls::Off);
        let answer_is_new = stream_hello(&mut stream, &self.hello, self.options.timeout)
            .map_err(|e| match plain {
                true => unreachable(format!("{e} (a peer that requires TLS closes a plaintext link: --replicate-tls-certificates)")),
                // TLS 1.3: the peer checks this host's certificate after the
                // handshake; its refusal comes as an alert at the first read.
                false if e.kind() == io::ErrorKind::InvalidData => {
                    unreachable(format!("TLS: {e} (the peer refused this host's certificate or the other way round)"))
                }
                false => unreachable(e.to_string()),
            })
            .and_then(|reply| check_reply(peer, &self.hello, reply))?;
        if answer_is_new {
            // The copy holds nothing known: every region is compared.
            let mut lacking = lock(&self.lacking);
            (0..self.regions).for_each(|r| lacking.mark(r));
        }
        Ok(stream)
    }

    /// Puts a connected stream in place (resyncing) and starts its reader.
    fn attach(self: &Arc<Self>, stream: Stream) {
        let Stream {
            mut reader,
            writer,
            closer,
            peer,
            ..
        } = stream;
        let generation = {
            let mut tx = lock(&self.tx);
            tx.generation += 1;
            tx.writer = Some(writer);
            tx.closer = Some(closer);
            tx.last_send = Instant::now();
            self.state
                .store(LinkState::Resyncing as u8, Ordering::Release);
            tx.generation
        };
        tracing::info!(peer = %peer, epoch = self.hello.epoch, "replication: connected to the peer");
        let me = Arc::clone(self);
        let handle = std::thread::Builder::new()
            .name("wcache-replica-rx".into())
            .spawn(move || {
                let why = me.read_answers(&mut reader);
                me.lose(generation, why);
            })
            .expect("spawn the replication reader");
        lock(&self.threads).push(handle);
    }

    /// Reads the peer's answers until the link fails; returns why.
    fn read_answers(&self, reader: &mut dyn Read) -> String {
        loop {
            let header = match Header::read(reader) {
                Ok(h) => h,
                Err(e) => return format!("reading from the peer: {e}"),
            };
            match header.kind {
                Kind::Flushed => {
                    let mut rx = lock(&self.rx);
                    rx.acked_id = rx.acked_id.max(header.id);
                    while rx.pending.front().is_some_and(|(id, _)| *id <= header.id) {
                        rx.pending.pop_front();
                    }
                    self.answered.notify_all();
                }
                Kind::Failed => {
                    let mut text = vec![0u8; header.len as usize];
                    let _ = reader.read_exact(&mut text);
                    return format!("the peer failed: {}", String::from_utf8_lossy(&text));
                }
                other => return format!("the peer sent a {other:?} frame"),
            }
        }
    }

    /// The link of `generation` is gone: everything the peer may not have
    /// made durable is marked lacking, waiters are woken, the device goes on alone.
    fn lose(&self, generation: u64, why: String) {
        let mut tx = lock(&self.tx);
        if tx.generation != generation || tx.writer.is_none() {
            return;
        }
        if let Some(close) = tx.closer.take() {
            close();
        }
        tx.writer = None;
        let current = std::mem::take(&mut tx.current);
        let mut rx = lock(&self.rx);
        rx.lost = generation;
        let mut lacking = lock(&self.lacking);
        for r in current {
            lacking.mark(r);
        }
        for (_, regions) in rx.pending.drain(..) {
            regions.into_iter().for_each(|r| lacking.mark(r));
        }
        self.state
            .store(LinkState::Degraded as u8, Ordering::Release);
        self.answered.notify_all();
        self.wake.notify_all();
        drop((lacking, rx, tx));
        if !self.stop.load(Ordering::Acquire) {
            self.losses.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(peer = %self.options.peer, "replication: lost the peer ({why}); going on alone");
        }
        *lock(&self.since) = Some((Instant::now(), why));
    }

    /// Sends one frame (and its data) if the link is up; false if it is not.
    fn send(&self, tx: &mut Tx, header: Header, data: &[&[u8]]) -> bool {
        let Some(writer) = tx.writer.as_mut() else {
            return false;
        };
        tx.buf.clear();
        tx.buf.extend_from_slice(&header.encode());
        data.iter().for_each(|d| tx.buf.extend_from_slice(d));
        let sent = writer.write_all(&tx.buf).and_then(|_| writer.flush());
        tx.last_send = Instant::now();
        if let Err(e) = sent {
            // The reader sees the closed socket and calls `lose`; until
            // then every write counts as sent but unanswered (`current`).
            tracing::debug!("replication: sending to the peer: {e}");
            if let Some(close) = tx.closer.as_ref() {
                close();
            }
            return false;
        }
        true
    }

    fn regions_of(&self, offset: u64, len: u64) -> std::ops::RangeInclusive<u32> {
        let first = (offset / REGION_BYTES) as u32;
        let last = ((offset + len.max(1) - 1) / REGION_BYTES) as u32;
        first..=last.min(self.regions - 1)
    }

    /// Writes to the peer and the local device: sent first where the link
    /// is up (the peer's write then runs beside the local one), else
    /// written locally first and then sent or marked lacking. Holds `order`
    /// shared throughout: a region is read for a comparison or a resync
    /// only when no write sent before it reached this device is under way.
    fn write_both(
        &self,
        data: &[&[u8]],
        offset: u64,
        local: impl FnOnce() -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let _order = self.order.read().unwrap_or_else(|p| p.into_inner());
        let sent = self.send_first(data, offset);
        let result = local();
        self.after_local(sent, result.is_ok(), data, offset);
        result
    }

    /// Sends a write before the local device takes it; false (nothing
    /// sent) when the link is down.
    fn send_first(&self, data: &[&[u8]], offset: u64) -> bool {
        let mut tx = lock(&self.tx);
        if tx.writer.is_none() {
            return false;
        }
        self.mirror_locked(&mut tx, data, offset);
        true
    }

    /// After the local write: one not sent first is sent (or marked
    /// lacking) now; one sent first that failed here left the peer with
    /// bytes this device may not hold: its regions are marked lacking and
    /// the link is ended, so the resync copies them from this device.
    fn after_local(&self, sent: bool, ok: bool, data: &[&[u8]], offset: u64) {
        match (sent, ok) {
            (false, true) => self.mirror(data, offset),
            (true, false) => {
                let len: usize = data.iter().map(|d| d.len()).sum();
                let tx = lock(&self.tx);
                let mut lacking = lock(&self.lacking);
                self.regions_of(offset, len as u64)
                    .for_each(|r| lacking.mark(r));
                drop(lacking);
                if let Some(close) = tx.closer.as_ref() {
                    close();
                }
            }
            _ => {}
        }
    }

    /// Sends a write the local device took, or marks it lacking.
    fn mirror(&self, data: &[&[u8]], offset: u64) {
        let mut tx = lock(&self.tx);
        self.mirror_locked(&mut tx, data, offset);
    }

    fn mirror_locked(&self, tx: &mut Tx, data: &[&[u8]], offset: u64) {
        let len: usize = data.iter().map(|d| d.len()).sum();
        let mut at = offset;
        let mut sent_all = tx.writer.is_some();
        // Frames carry at most FRAME_DATA_MAX bytes: cut longer writes.
        let mut pieces: Vec<&[u8]> = Vec::new();
        let mut piece_len = 0usize;
        let flush_piece =
            |tx: &mut Tx, pieces: &mut Vec<&[u8]>, piece_len: &mut usize, at: &mut u64| {
                let header = Header::new(Kind::Write, *piece_len as u32, *at, 0);
                let ok = self.send(tx, header, pieces);
                *at += *piece_len as u64;
                pieces.clear();
                *piece_len = 0;
                ok
            };
        for d in data {
            let mut rest = *d;
            while !rest.is_empty() {
                let take = rest.len().min(wire::FRAME_DATA_MAX - piece_len);
                pieces.push(&rest[..take]);
                piece_len += take;
                rest = &rest[take..];
                if piece_len == wire::FRAME_DATA_MAX && sent_all {
                    sent_all = flush_piece(tx, &mut pieces, &mut piece_len, &mut at);
                }
            }
        }
        if piece_len > 0 && sent_all {
            flush_piece(tx, &mut pieces, &mut piece_len, &mut at);
        }
        let regions = self.regions_of(offset, len as u64);
        if tx.writer.is_some() {
            // Sent (or in part, before the link failed: the reader's `lose`
            // then marks `current` lacking).
            tx.current.extend(regions);
        } else {
            let mut lacking = lock(&self.lacking);
            regions.for_each(|r| lacking.mark(r));
        }
    }

    /// Asks the peer to make every earlier write durable and waits for its
    /// answer (or the link's loss, or the timeout, which ends the link).
    fn flush_peer(&self, kind: Kind) {
        if let Some(asked) = self.ask_flush(kind) {
            self.await_flush(asked);
        }
    }

    /// Sends a flush frame (covering every write sent before it); None
    /// when the link is down (nothing to wait for).
    fn ask_flush(&self, kind: Kind) -> Option<(u64, u64)> {
        let mut tx = lock(&self.tx);
        tx.writer.as_ref()?;
        let id = tx.next_id;
        tx.next_id += 1;
        let current = std::mem::take(&mut tx.current);
        lock(&self.rx).pending.push_back((id, current));
        let generation = tx.generation;
        // A failed send closes the socket: the reader then calls `lose`,
        // which the wait sees.
        self.send(&mut tx, Header::new(kind, 0, 0, id), &[]);
        Some((id, generation))
    }

    /// Waits for the answer to the flush `ask_flush` sent, or the link's
    /// loss; a peer silent past the timeout is lost.
    fn await_flush(&self, (id, generation): (u64, u64)) {
        if !self.wait_answer(id, generation) {
            let why = format!(
                "the peer did not answer a flush within {:?}",
                self.options.timeout
            );
            let tx = lock(&self.tx);
            if tx.generation == generation {
                if let Some(close) = tx.closer.as_ref() {
                    close();
                }
            }
            drop(tx);
            self.lose(generation, why);
        }
    }

    /// True once flush `id` was answered; false on the timeout; true too
    /// when the link was lost (the loss marked what the peer lacks).
    fn wait_answer(&self, id: u64, generation: u64) -> bool {
        let deadline = Instant::now() + self.options.timeout;
        let mut rx = lock(&self.rx);
        loop {
            if rx.acked_id >= id || rx.lost >= generation {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            rx = self
                .answered
                .wait_timeout(rx, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The replication thread: connects again while degraded, resyncs, and
    /// tests an idle link with a flush now and then.
    fn keep_link(self: Arc<Self>) {
        let mut retry = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            match self.link_state() {
                LinkState::Degraded if Instant::now() >= retry => match self.connect() {
                    Ok(mut stream) => {
                        if let Err(e) = self.skip_what_the_peer_holds(&mut stream) {
                            tracing::warn!("replication: comparing with the peer: {e}");
                            (stream.closer)();
                            retry = Instant::now() + HEARTBEAT;
                            continue;
                        }
                        self.attach(stream);
                        if let Err(e) = self.resync() {
                            // The link ends with it (if it has not already):
                            // degraded, tried again.
                            tracing::warn!("replication: resync stopped: {e}");
                            if let Some(close) = lock(&self.tx).closer.as_ref() {
                                close();
                            }
                        }
                    }
                    Err(e) => {
                        let mut since = lock(&self.since);
                        let from = since.as_ref().map_or_else(Instant::now, |s| s.0);
                        *since = Some((from, e.to_string()));
                        retry = Instant::now() + HEARTBEAT;
                    }
                },
                LinkState::Connected => {
                    let idle = lock(&self.tx).last_send.elapsed();
                    if idle >= HEARTBEAT {
                        self.flush_peer(Kind::Flush);
                    }
                }
                _ => {}
            }
            let tx = lock(&self.tx);
            let _ = self
                .wake
                .wait_timeout(tx, HEARTBEAT / 4)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A clean stop: a last flush, goodbye, the threads joined.
    pub fn close(&self) {
        if self.link_state() != LinkState::Degraded {
            self.flush_peer(Kind::Flush);
            let mut tx = lock(&self.tx);
            self.send(&mut tx, Header::new(Kind::Bye, 0, 0, 0), &[]);
        }
        self.stop.store(true, Ordering::Release);
        let generation = lock(&self.tx).generation;
        self.lose(generation, "stopping".into());
        self.wake.notify_all();
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The primary's replication state: loaded, or drawn for a cache
/// replicated for the first time. A replica's mirror is refused: it is
/// served only after a takeover (`wcache serve --takeover`).
fn primary_state(options: &MirrorOptions) -> Result<ReplicaState, MirrorError> {
    let path = &options.state_path;
    let state = match ReplicaState::load(path)? {
        Some(s) if s.role == Role::Replica => {
            return Err(MirrorError::IsReplica {
                state: path.display().to_string(),
            })
        }
        Some(s) => s,
        None => {
            let s = ReplicaState::new_primary().map_err(|e| MirrorError::Unreachable {
                peer: options.peer.clone(),
                why: format!("drawing a cache id: {e}"),
            })?;
            s.store(path)?;
            s
        }
    };
    Ok(state)
}

fn stream_hello(stream: &mut Stream, hello: &Hello, timeout: Duration) -> io::Result<Reply> {
    hello.write(&mut stream.writer)?;
    // A peer that does not answer within the timeout is not one (or is
    // still serving an older connection of ours: the next try gets it).
    stream.tcp.set_read_timeout(Some(timeout))?;
    let reply = Reply::read(&mut stream.reader)?;
    stream.tcp.set_read_timeout(None)?;
    Ok(reply)
}

/// Ok(true): accepted on a copy that holds nothing known of this cache.
fn check_reply(peer: &str, hello: &Hello, reply: Reply) -> Result<bool, MirrorError> {
    if matches!(reply.answer, Answer::Accepted | Answer::AcceptedNew) {
        return Ok(reply.answer == Answer::AcceptedNew);
    }
    Err(MirrorError::Refused {
        peer: peer.to_string(),
        answer: format!("{:?}", reply.answer),
        why: reply.text,
        ours: format!(
            "cache {} epoch {}",
            wire::show_id(&hello.cache_id),
            hello.epoch
        ),
        theirs: format!(
            "cache {} epoch {}",
            wire::show_id(&reply.cache_id),
            reply.epoch
        ),
    })
}
