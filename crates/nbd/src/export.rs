//! The `Export` trait: what a volume must offer to be served over NBD (with
//! `WriteBatch`, writes started together), and `MemExport`, an in-memory
//! volume for tests and benchmarks.
//!
//! This module exists so that the cache engine (or anything else) can be put
//! behind the NBD server without the server knowing what it is. Exports are
//! called concurrently from the server's worker threads; they must never
//! assume requests arrive in order, and the server has already checked
//! bounds and alignment against `size_bytes` and `block_size_min_bytes`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use crate::proto::{NbdErrno, BLOCK_SIZE_MIN_MAX_BYTES};

/// Why an export operation failed. Each kind maps to one NBD error value.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("no space left")]
    NoSpace,
    #[error("invalid argument")]
    Invalid,
    #[error("operation not permitted (read-only)")]
    NotPermitted,
    #[error("operation not supported")]
    NotSupported,
    #[error("out of memory")]
    OutOfMemory,
    #[error("export is shutting down")]
    ShuttingDown,
}

impl ExportError {
    /// The NBD error value sent to the client.
    pub fn errno(&self) -> NbdErrno {
        match self {
            ExportError::Io(error) => match error.raw_os_error() {
                // The spec asks for EDQUOT and EFBIG to be reported as ENOSPC.
                Some(code) if code == ENOSPC || code == EDQUOT || code == EFBIG => NbdErrno::NoSpc,
                Some(code) if code == EPERM || code == EROFS => NbdErrno::Perm,
                Some(code) if code == ENOMEM => NbdErrno::NoMem,
                _ => NbdErrno::Io,
            },
            ExportError::NoSpace => NbdErrno::NoSpc,
            ExportError::Invalid => NbdErrno::Inval,
            ExportError::NotPermitted => NbdErrno::Perm,
            ExportError::NotSupported => NbdErrno::NotSup,
            ExportError::OutOfMemory => NbdErrno::NoMem,
            ExportError::ShuttingDown => NbdErrno::Shutdown,
        }
    }
}

// Linux errno values (the server targets Linux; see docs/nbd.md).
const EPERM: i32 = 1;
const ENOMEM: i32 = 12;
const EFBIG: i32 = 27;
const ENOSPC: i32 = 28;
const EROFS: i32 = 30;
const EDQUOT: i32 = 122;

/// What `Export::write_async` calls, once, with the outcome, the buffer,
/// and `more`: true when another call follows at once on the same thread
/// (the server then sends the replies together, after the last).
pub type WriteDone = Box<dyn FnOnce(Result<(), ExportError>, Vec<u8>, bool) + Send>;

/// A WRITE for `Export::write_async`: `buffer[start..start + len]` at
/// `offset` (the server aligns `start` in memory to 4 KiB), durable when
/// acknowledged if `fua`.
pub struct AsyncWrite {
    pub offset: u64,
    pub buffer: Vec<u8>,
    pub start: usize,
    pub len: usize,
    pub fua: bool,
}

/// Writes started together (`Export::write_batch`); dropping the batch
/// sends the device writes it held back.
pub trait WriteBatch {
    /// `Export::write_async`, its device writes perhaps held until the
    /// batch is dropped.
    fn write_async(&self, write: AsyncWrite, done: WriteDone);
}

/// The default batch: nothing held, each write is `Export::write_async`.
struct Unbatched<'a, E: Export + ?Sized>(&'a E);

impl<E: Export + ?Sized> WriteBatch for Unbatched<'_, E> {
    fn write_async(&self, write: AsyncWrite, done: WriteDone) {
        self.0.write_async(write, done)
    }
}

/// A block address space served over NBD.
///
/// Durability contract (from the NBD spec): when `write`, `trim` or
/// `write_zeroes` return `Ok` with `fua == true`, the data is on non-volatile
/// storage; when `flush` returns `Ok`, every write that returned `Ok` before
/// `flush` was called is on non-volatile storage. Requests may be called
/// concurrently, also for overlapping ranges (the client owns ordering).
pub trait Export: Send + Sync {
    /// Size of the export; fixed for the life of a connection.
    fn size_bytes(&self) -> u64;
    /// Smallest addressable unit: a power of two, 1 ..= 64 KiB.
    fn block_size_min_bytes(&self) -> u32;
    /// True when flush/FUA on one connection is visible on all others
    /// (the cache is shared among connections): advertises CAN_MULTI_CONN.
    fn multi_conn(&self) -> bool;
    /// Fill `buf` from `offset`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError>;
    /// Write `data` at `offset`; durable before returning when `fua`.
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError>;
    /// True when `write_async` finishes writes later from a thread of the
    /// export's own, without waiting for the device here (an event-driven
    /// data path): the server then starts WRITEs from the connection's
    /// reader thread and replies from `done`. Default: false.
    fn writes_async(&self) -> bool {
        false
    }
    /// With `writes_async`: a WRITE alone on its connection (nothing more
    /// received or arriving: a client at queue depth 1) is faster run to
    /// completion with `write` on the reader thread than handed to the
    /// export's threads (no wake-up). Default: false.
    fn writes_alone_inline(&self) -> bool {
        false
    }
    /// With `writes_async`: WRITEs up to this size are started on the
    /// connection's reader thread, larger ones on a worker, so that the
    /// reader receives the next request while a large one's start runs
    /// (its checksums, say). Default: 64 KiB.
    fn write_async_on_reader_max_bytes(&self) -> usize {
        64 * 1024
    }
    /// Starts `write`; `done` is called once, perhaps before this
    /// returns, with the outcome (the same promise as `write`'s return)
    /// and the buffer. Its device writes are sent before this returns.
    /// Default: `write`, then `done`.
    fn write_async(&self, write: AsyncWrite, done: WriteDone) {
        let AsyncWrite {
            offset,
            buffer,
            start,
            len,
            fua,
        } = write;
        let result = match buffer.get(start..start.saturating_add(len)) {
            Some(data) => self.write(offset, data, fua),
            None => Err(ExportError::Invalid),
        };
        done(result, buffer, false)
    }
    /// A batch of writes started together (a connection's reader starts
    /// those it receives in a row in one): the export may hold their device
    /// writes back until the batch is dropped, which must send them. The
    /// server drops it before anything that may wait (the client, a worker,
    /// room). Default: each write is `write_async`.
    fn write_batch(&self) -> Box<dyn WriteBatch + '_> {
        Box::new(Unbatched(self))
    }
    /// Make every completed write durable.
    fn flush(&self) -> Result<(), ExportError>;
    /// Hint that a range is unused; may do nothing.
    fn trim(&self, offset: u64, length_bytes: u64, fua: bool) -> Result<(), ExportError>;
    /// Make a range read back as zeroes; `no_hole` asks to keep it allocated.
    fn write_zeroes(
        &self,
        offset: u64,
        length_bytes: u64,
        fua: bool,
        no_hole: bool,
    ) -> Result<(), ExportError>;
}

/// Bytes per lock in `MemExport`.
const MEM_CHUNK_BYTES: u64 = 1024 * 1024;

/// An in-memory export. Memory is allocated per 1 MiB chunk on first write
/// and released when a whole chunk is trimmed or zeroed, so large sparse
/// exports are cheap. Each chunk has its own lock, so requests to different
/// chunks run in parallel.
#[derive(Debug)]
pub struct MemExport {
    size_bytes: u64,
    block_size_min_bytes: u32,
    multi_conn: bool,
    chunks: Vec<RwLock<Option<Box<[u8]>>>>,
    flush_count: AtomicU64,
    fua_count: AtomicU64,
}

impl MemExport {
    /// A zero-filled export of `size_bytes`. Panics if the block size is not
    /// a power of two ≤ 64 KiB (a programmer error).
    pub fn new(size_bytes: u64, block_size_min_bytes: u32) -> Self {
        assert!(block_size_min_bytes.is_power_of_two());
        assert!(block_size_min_bytes <= BLOCK_SIZE_MIN_MAX_BYTES);
        let chunk_count = size_bytes.div_ceil(MEM_CHUNK_BYTES);
        let chunks = (0..chunk_count).map(|_| RwLock::new(None)).collect();
        MemExport {
            size_bytes,
            block_size_min_bytes,
            multi_conn: true,
            chunks,
            flush_count: AtomicU64::new(0),
            fua_count: AtomicU64::new(0),
        }
    }

    /// Whether to advertise CAN_MULTI_CONN (default: true; memory is shared).
    pub fn with_multi_conn(mut self, multi_conn: bool) -> Self {
        self.multi_conn = multi_conn;
        self
    }

    /// Flushes received so far.
    pub fn flush_count(&self) -> u64 {
        self.flush_count.load(Ordering::Relaxed)
    }

    /// Writes, trims and zeroes received with FUA so far.
    pub fn fua_count(&self) -> u64 {
        self.fua_count.load(Ordering::Relaxed)
    }

    /// Bytes of memory currently allocated for data.
    pub fn allocated_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .filter(|chunk| chunk.read().map(|c| c.is_some()).unwrap_or(false))
            .count() as u64
            * MEM_CHUNK_BYTES
    }

    fn check_range(&self, offset: u64, length_bytes: u64) -> Result<(), ExportError> {
        match offset.checked_add(length_bytes) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(ExportError::Invalid),
        }
    }

    fn chunk_len_bytes(&self, index: usize) -> usize {
        let start = index as u64 * MEM_CHUNK_BYTES;
        (self.size_bytes - start).min(MEM_CHUNK_BYTES) as usize
    }

    /// Visit the chunk pieces covering `[offset, offset + length_bytes)`:
    /// (chunk index, offset in chunk, offset in request, length).
    fn pieces(
        offset: u64,
        length_bytes: u64,
    ) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        let end = offset + length_bytes;
        let mut at = offset;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let index = at / MEM_CHUNK_BYTES;
            let in_chunk = at % MEM_CHUNK_BYTES;
            let len = (MEM_CHUNK_BYTES - in_chunk).min(end - at);
            let piece = (
                index as usize,
                in_chunk as usize,
                (at - offset) as usize,
                len as usize,
            );
            at += len;
            Some(piece)
        })
    }

    fn zero_range(
        &self,
        offset: u64,
        length_bytes: u64,
        keep_allocated: bool,
    ) -> Result<(), ExportError> {
        self.check_range(offset, length_bytes)?;
        for (index, in_chunk, _, len) in Self::pieces(offset, length_bytes) {
            let chunk_len = self.chunk_len_bytes(index);
            let mut chunk = self.chunks[index].write().map_err(|_| poisoned())?;
            if in_chunk == 0 && len == chunk_len && !keep_allocated {
                *chunk = None;
            } else if let Some(data) = chunk.as_mut() {
                data[in_chunk..in_chunk + len].fill(0);
            } else if keep_allocated {
                *chunk = Some(vec![0u8; chunk_len].into_boxed_slice());
            }
        }
        Ok(())
    }

    fn note_fua(&self, fua: bool) {
        if fua {
            self.fua_count.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn poisoned() -> ExportError {
    ExportError::Io(std::io::Error::other("MemExport lock poisoned"))
}

impl Export for MemExport {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn block_size_min_bytes(&self) -> u32 {
        self.block_size_min_bytes
    }

    fn multi_conn(&self) -> bool {
        self.multi_conn
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.check_range(offset, buf.len() as u64)?;
        for (index, in_chunk, in_buf, len) in Self::pieces(offset, buf.len() as u64) {
            let chunk = self.chunks[index].read().map_err(|_| poisoned())?;
            let target = &mut buf[in_buf..in_buf + len];
            match chunk.as_ref() {
                Some(data) => target.copy_from_slice(&data[in_chunk..in_chunk + len]),
                None => target.fill(0),
            }
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError> {
        self.check_range(offset, data.len() as u64)?;
        for (index, in_chunk, in_data, len) in Self::pieces(offset, data.len() as u64) {
            let chunk_len = self.chunk_len_bytes(index);
            let mut chunk = self.chunks[index].write().map_err(|_| poisoned())?;
            let stored = chunk.get_or_insert_with(|| vec![0u8; chunk_len].into_boxed_slice());
            stored[in_chunk..in_chunk + len].copy_from_slice(&data[in_data..in_data + len]);
        }
        self.note_fua(fua);
        Ok(())
    }

    fn flush(&self) -> Result<(), ExportError> {
        self.flush_count.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn trim(&self, offset: u64, length_bytes: u64, fua: bool) -> Result<(), ExportError> {
        // Trim is a hint; releasing whole chunks is what makes it useful here.
        self.zero_range(offset, length_bytes, false)?;
        self.note_fua(fua);
        Ok(())
    }

    fn write_zeroes(
        &self,
        offset: u64,
        length_bytes: u64,
        fua: bool,
        no_hole: bool,
    ) -> Result<(), ExportError> {
        self.zero_range(offset, length_bytes, no_hole)?;
        self.note_fua(fua);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_export_round_trip_across_chunks() {
        let export = MemExport::new(3 * MEM_CHUNK_BYTES + 512, 512);
        let offset = MEM_CHUNK_BYTES - 1024;
        let data: Vec<u8> = (0..MEM_CHUNK_BYTES as usize + 2048)
            .map(|i| (i % 251) as u8)
            .collect();
        export.write(offset, &data, false).expect("write");
        let mut back = vec![0u8; data.len()];
        export.read(offset, &mut back).expect("read");
        assert_eq!(back, data);
        let mut tail = vec![1u8; 512];
        export
            .read(3 * MEM_CHUNK_BYTES, &mut tail)
            .expect("read tail");
        assert!(tail.iter().all(|&b| b == 0));
    }

    #[test]
    fn mem_export_trim_releases_whole_chunks_and_zeroes_parts() {
        let export = MemExport::new(2 * MEM_CHUNK_BYTES, 512);
        export
            .write(0, &vec![7u8; 2 * MEM_CHUNK_BYTES as usize], true)
            .expect("write");
        assert_eq!(export.allocated_bytes(), 2 * MEM_CHUNK_BYTES);
        export.trim(0, MEM_CHUNK_BYTES + 512, false).expect("trim");
        assert_eq!(export.allocated_bytes(), MEM_CHUNK_BYTES);
        let mut back = vec![1u8; 1024];
        export.read(MEM_CHUNK_BYTES, &mut back).expect("read");
        assert!(back[..512].iter().all(|&b| b == 0));
        assert!(back[512..].iter().all(|&b| b == 7));
        assert_eq!(export.fua_count(), 1);
    }

    #[test]
    fn mem_export_write_zeroes_no_hole_allocates() {
        let export = MemExport::new(MEM_CHUNK_BYTES, 512);
        export
            .write_zeroes(0, MEM_CHUNK_BYTES, false, true)
            .expect("zero");
        assert_eq!(export.allocated_bytes(), MEM_CHUNK_BYTES);
        export
            .write_zeroes(0, MEM_CHUNK_BYTES, false, false)
            .expect("zero");
        assert_eq!(export.allocated_bytes(), 0);
    }

    #[test]
    fn mem_export_rejects_out_of_range() {
        let export = MemExport::new(4096, 512);
        assert!(matches!(
            export.write(4096, &[0u8; 512], false),
            Err(ExportError::Invalid)
        ));
        assert!(matches!(
            export.read(u64::MAX, &mut [0u8; 1]),
            Err(ExportError::Invalid)
        ));
    }

    #[test]
    fn export_error_errno_mapping() {
        assert_eq!(ExportError::NoSpace.errno(), NbdErrno::NoSpc);
        assert_eq!(ExportError::Invalid.errno(), NbdErrno::Inval);
        assert_eq!(ExportError::NotPermitted.errno(), NbdErrno::Perm);
        assert_eq!(ExportError::ShuttingDown.errno(), NbdErrno::Shutdown);
        let io = |code| ExportError::Io(std::io::Error::from_raw_os_error(code));
        assert_eq!(io(EDQUOT).errno(), NbdErrno::NoSpc);
        assert_eq!(io(EFBIG).errno(), NbdErrno::NoSpc);
        assert_eq!(io(EROFS).errno(), NbdErrno::Perm);
        assert_eq!(io(5).errno(), NbdErrno::Io);
        assert_eq!(
            ExportError::Io(std::io::Error::other("x")).errno(),
            NbdErrno::Io
        );
    }
}
