//! A volume of a running cache: the calls a front end makes (read, write,
//! write_async and its batches, flush, trim, write-zeroes), each timed per
//! request class.

use super::*;
use crate::driver::{DriverBatch, WriteDone};

/// One volume of a running cache: what a front end reads, writes, flushes.
/// Cheap to clone; every clone talks to the same driver. Calls block until
/// the engine answers (`RequestError` if it failed), from many threads at once.
#[derive(Clone)]
pub struct Volume {
    pub(super) driver: Arc<Driver>,
    pub(super) id: VolumeId,
    pub(super) name: String,
    pub(super) backing_name: String,
    pub(super) backing_size_bytes: u64,
    pub(super) size_bytes: u64,
    pub(super) block_size_bytes: u32,
    pub(super) latency: Arc<VolumeLatency>,
}

impl Volume {
    pub fn id(&self) -> VolumeId {
        self.id
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The backing device's name (path, URI, model).
    pub fn backing_name(&self) -> &str {
        &self.backing_name
    }
    pub fn backing_size_bytes(&self) -> u64 {
        self.backing_size_bytes
    }
    /// The addressable size: the backing's whole blocks.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    pub fn block_size_bytes(&self) -> u32 {
        self.block_size_bytes
    }

    /// The response times of this volume's requests, per kind.
    pub fn latency(&self) -> &Arc<VolumeLatency> {
        &self.latency
    }

    /// Runs one request, recording its response time under `class`.
    fn timed(
        &self,
        class: RequestClass,
        run: impl FnOnce() -> Result<(), RequestError>,
    ) -> Result<(), RequestError> {
        let start = Instant::now();
        let result = run();
        self.latency.record(class, start.elapsed(), result.is_err());
        result
    }

    /// One request with its flags (issuer, sync, critical, FUA), blocking
    /// until the engine answers: the call every front end can make.
    /// `payload` holds the bytes of a read or write (`len_bytes` of them);
    /// flush, trim and write-zeroes take `Payload::None`.
    pub fn submit(&self, io: Io, payload: Payload<'_>) -> Result<(), RequestError> {
        let class = match io.kind {
            RequestKind::Read => RequestClass::Read,
            RequestKind::Write => RequestClass::Write,
            RequestKind::WriteZeroes => RequestClass::WriteZeroes,
            RequestKind::Trim => RequestClass::Trim,
            RequestKind::Flush => RequestClass::Flush,
        };
        self.timed(class, || {
            self.driver.submit(
                self.id,
                io.kind,
                io.offset_bytes,
                io.len_bytes,
                io.flags,
                payload,
            )
        })
    }

    /// Whether `issuer` is critical now by the engine's tables (a hint, or
    /// an inheritance in force): for a front end deciding whether a waiter
    /// passes its criticality on.
    pub fn issuer_is_critical(&self, issuer: u32) -> bool {
        let (hinted, inherited) = self.driver.inspect_engine(|e| e.issuer_criticality(issuer));
        hinted || inherited
    }

    /// Process criticality inheritance (Kim et al. §4.2.1): `issuer` holds
    /// something a critical request waits for, and is critical until
    /// `end_inherited_criticality` (counted: one end per call). Its bypass
    /// writes in flight are promoted where the admission policy says.
    pub fn inherit_criticality(
        &self,
        issuer: u32,
    ) -> Result<u32, wcache_core::engine::CriticalityError> {
        self.driver.change_engine(|e| e.inherit_criticality(issuer))
    }

    /// One cause of `issuer`'s inherited criticality ended.
    pub fn end_inherited_criticality(
        &self,
        issuer: u32,
    ) -> Result<u32, wcache_core::engine::CriticalityError> {
        self.driver
            .change_engine(|e| e.end_inherited_criticality(issuer))
    }

    pub fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), RequestError> {
        self.timed(RequestClass::Read, || {
            self.driver.read(self.id, offset_bytes, buf)
        })
    }

    /// Acknowledged means durable under the write policy in force
    /// (`docs/consistency.md`), FUA or not.
    pub fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), RequestError> {
        self.timed(RequestClass::Write, || {
            self.driver.write(self.id, offset_bytes, data, fua)
        })
    }

    /// True when `write_async` returns before the write is done (the
    /// driver's io_uring data path, or a format-3 cache).
    pub fn writes_async(&self) -> bool {
        self.driver.writes_async()
    }

    /// A write with no other on the way runs faster to completion on its
    /// caller than through `write_async` (`Driver::writes_alone_inline`).
    pub fn writes_alone_inline(&self) -> bool {
        self.driver.writes_alone_inline()
    }

    /// The largest `write_async` worth starting on a connection's reader
    /// (`Driver::write_async_on_reader_max_bytes`).
    pub fn write_async_on_reader_max_bytes(&self) -> usize {
        self.driver.write_async_on_reader_max_bytes()
    }

    /// A write (`io`: of kind `Write`, with the request's flags) of
    /// `buffer[start..start + io.len_bytes]` that calls `done` when it is
    /// acknowledged, from the thread that finished it; its device writes
    /// are sent before this returns (`DriverBatch::write_async`, a batch of one).
    pub fn write_async(&self, io: Io, buffer: Vec<u8>, start: usize, done: WriteDone) {
        self.batch().write_async(io, buffer, start, done);
    }

    /// A batch of `write_async`s whose device writes may wait until the
    /// batch is dropped, which sends them (`Driver::write_batch`): a front
    /// end that starts several writes in a row starts them in one batch,
    /// and drops it before it waits for anything.
    pub fn batch(&self) -> WriteBatch<'_> {
        WriteBatch {
            volume: self,
            batch: self.driver.write_batch(),
        }
    }

    pub fn flush(&self) -> Result<(), RequestError> {
        self.timed(RequestClass::Flush, || self.driver.flush(self.id))
    }

    pub fn trim(&self, offset_bytes: u64, len_bytes: u64, fua: bool) -> Result<(), RequestError> {
        self.timed(RequestClass::Trim, || {
            self.no_payload(RequestKind::Trim, offset_bytes, len_bytes, fua)
        })
    }

    pub fn write_zeroes(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        fua: bool,
    ) -> Result<(), RequestError> {
        self.timed(RequestClass::WriteZeroes, || {
            self.no_payload(RequestKind::WriteZeroes, offset_bytes, len_bytes, fua)
        })
    }

    fn no_payload(
        &self,
        kind: RequestKind,
        offset_bytes: u64,
        len_bytes: u64,
        fua: bool,
    ) -> Result<(), RequestError> {
        let flags = RequestFlags {
            fua,
            ..RequestFlags::default()
        };
        self.driver
            .submit(self.id, kind, offset_bytes, len_bytes, flags, Payload::None)
    }
}

/// Writes to one volume started together (`Volume::batch`): their device
/// writes are held until the batch is dropped, which sends them, so none
/// is left unsent. Drop it before waiting for any of its writes' answers,
/// or for anything they may hold up.
#[must_use = "a batch sends its writes when dropped"]
pub struct WriteBatch<'a> {
    volume: &'a Volume,
    batch: DriverBatch<'a>,
}

impl WriteBatch<'_> {
    /// `Volume::write_async`, its device writes held until the batch ends;
    /// its response time recorded as a write's.
    pub fn write_async(&self, io: Io, buffer: Vec<u8>, start: usize, done: WriteDone) {
        let started = Instant::now();
        let latency = Arc::clone(&self.volume.latency);
        let timed: WriteDone = Box::new(move |result, buffer, more| {
            latency.record(RequestClass::Write, started.elapsed(), result.is_err());
            done(result, buffer, more)
        });
        self.batch
            .write_async(self.volume.id, io, buffer, start, timed);
    }
}
