//! The one narrow device trait every store sits behind, and its durability
//! contract (redb's `StorageBackend` is the model).
//!
//! This module exists so that the driver moves bytes the same way whether the
//! cache device or a backing is a file, memory, a remote NBD export or an
//! emulated disk. A device never decides anything about caching; it must
//! never reorder the bytes of one call, and it must state honestly when a
//! write is durable.

use std::alloc::{self, Layout};
use std::io;

pub mod aio;
pub mod emulated;
pub mod faulty;
pub mod file;
pub mod journaled;
pub mod mem;
pub mod nbd;
pub mod rbd;

/// Why a device operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{device}: {op} of {len_bytes} bytes at offset {offset_bytes}: {source}")]
    Io {
        device: String,
        op: &'static str,
        offset_bytes: u64,
        len_bytes: u64,
        source: io::Error,
    },
    #[error("{device}: range {offset_bytes}+{len_bytes} is beyond the end ({size_bytes} bytes)")]
    OutOfRange {
        device: String,
        offset_bytes: u64,
        len_bytes: u64,
        size_bytes: u64,
    },
    #[error("{device}: range {offset_bytes}+{len_bytes} is not aligned to {alignment_bytes} bytes (direct I/O)")]
    Misaligned {
        device: String,
        offset_bytes: u64,
        len_bytes: u64,
        alignment_bytes: usize,
    },
    #[error("{device}: injected {op} error")]
    Injected { device: String, op: &'static str },
    #[error("{device}: NBD server answered {op} with error {errno}")]
    Remote {
        device: String,
        op: &'static str,
        errno: u32,
    },
    #[error("{device}: NBD protocol: {what}")]
    Protocol { device: String, what: String },
    #[error("{device}: cannot open: {what}")]
    Open { device: String, what: String },
}

impl DeviceError {
    /// True when the device ran out of space (reported to clients as ENOSPC).
    pub fn is_no_space(&self) -> bool {
        match self {
            DeviceError::Io { source, .. } => source.raw_os_error() == Some(libc::ENOSPC),
            DeviceError::Remote { errno, .. } => *errno == libc::ENOSPC as u32,
            _ => false,
        }
    }
}

/// A byte-addressed store.
///
/// Durability contract: a write that returned `Ok` is durable (survives a
/// crash and power loss of the host) once a later `flush()` returned `Ok`,
/// or at once when `writes_durable()` is true. Calls may come from many
/// threads at once; concurrent calls on overlapping ranges have no defined
/// order (the driver never issues them). A device with
/// `alignment_bytes() > 1` (direct I/O) needs offsets, lengths and buffer
/// addresses aligned to it; callers bounce through aligned buffers.
pub trait BlockDevice: Send + Sync {
    /// Size of the addressable range.
    fn len_bytes(&self) -> u64;
    /// Fill `buf` from `offset_bytes`.
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError>;
    /// Write all of `data` at `offset_bytes`.
    fn write_at(&self, data: &[u8], offset_bytes: u64) -> Result<(), DeviceError>;
    /// Write `bufs` one after another from `offset_bytes`, as one write
    /// where the device can (`pwritev`). Same contract as `write_at` for
    /// the whole range. Default: one `write_at` per buffer.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset_bytes: u64) -> Result<(), DeviceError> {
        let mut at = offset_bytes;
        for b in bufs {
            self.write_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// Writes every `(data, offset_bytes)` (ranges that do not overlap),
    /// in flight together where the device can, and returns once all are
    /// done; a write that failed is reported through `failed` with its
    /// index. Same contract as `write_at` for each. Default: one `write_at`
    /// after another.
    fn write_many(&self, writes: &[(&[u8], u64)], failed: &mut dyn FnMut(usize, DeviceError)) {
        for (i, (data, offset_bytes)) in writes.iter().enumerate() {
            if let Err(e) = self.write_at(data, *offset_bytes) {
                failed(i, e);
            }
        }
    }
    /// Write `bufs`, one after the other from `offset_bytes`, around the
    /// page cache of a buffered file (its O_DIRECT descriptor), where the
    /// device has one and every buffer and `offset_bytes` suit it: a large
    /// write then costs no copy into the page cache and no writeback at the
    /// next flush. Same contract as `write_vectored_at`. Returns false
    /// (nothing written) where it cannot.
    fn write_direct_vectored_at(
        &self,
        bufs: &[&[u8]],
        offset_bytes: u64,
    ) -> Result<bool, DeviceError> {
        let _ = (bufs, offset_bytes);
        Ok(false)
    }
    /// Make every write that returned before this call durable.
    fn flush(&self) -> Result<(), DeviceError>;
    /// Advise that a range is unused. Content afterwards is unspecified
    /// until rewritten. Default: do nothing.
    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DeviceError> {
        let _ = (offset_bytes, len_bytes);
        Ok(())
    }
    /// Give every byte of the device storage of its own, where it may have
    /// none (a sparse or preallocated regular file: holes and unwritten
    /// extents), by writing zeros there, then flush. May zero bytes beside
    /// a hole: for a device being formatted only. A write into storage
    /// the filesystem has not allocated makes the next flush commit the
    /// allocation too; a cache writes its data area at random, so it is
    /// filled once, at format. Returns the bytes written. Default: nothing
    /// to do (block devices, memory).
    fn fill_holes(&self) -> Result<u64, DeviceError> {
        Ok(0)
    }
    /// True when a write is durable as soon as it returns (flush not needed).
    fn writes_durable(&self) -> bool {
        false
    }
    /// True when each write returns only once it is durable on a medium
    /// that takes time for it (`RWF_DSYNC` on a disk): a caller gains by
    /// running independent writes at once rather than one after another.
    /// Implies `writes_durable()`. Default false.
    fn writes_wait_for_medium(&self) -> bool {
        false
    }
    /// Alignment that offsets, lengths and buffers must have (1: none).
    fn alignment_bytes(&self) -> usize {
        1
    }
    /// How to write the device through io_uring, where writes can go
    /// there (a file or block device that is not mapped): the driver's
    /// event-driven data path (`driver/uring.rs`). Default: `None`.
    fn uring_target(&self) -> Option<UringTarget> {
        None
    }
    /// Short description for errors and reports.
    fn name(&self) -> String;
    /// How the device is doing, for live status, where that can change (a
    /// networked backing's connections); None: nothing to say.
    fn health(&self) -> Option<String> {
        None
    }
    /// The cache is closed, its threads joined: give up what the device
    /// holds that another user would wait for (an RBD image's exclusive
    /// lock). No I/O follows. Default: nothing held.
    fn release(&self) {}
    /// The journal region a backing keeps for journaled write-back's
    /// atomic checkpoints (`journaled::JournaledDevice`); None: it has none.
    fn journal(&self) -> Option<&journaled::BackingJournal> {
        None
    }
}

/// I/O of at least this many bytes, aligned to 4 KiB, goes around the page
/// cache of a buffered file (its O_DIRECT descriptor): the io_uring path's
/// page-data writes to a cache file (`UringTarget::direct_fd`) and a backing
/// file's reads (`FileOptions::direct_large_reads`): no copy into or out of
/// the page cache, and no writeback work at the barrier. Smaller writes keep
/// the page cache, whose writeback merges neighbouring slots (4 KiB writes
/// at QD32 ran at 0.6x with every write O_DIRECT; docs/benchmarks.md).
/// Records never go this way: they share the page cache's pages with their
/// neighbours, and a direct write beside a buffered one in the same page
/// could be undone by the page's later writeback.
pub const DIRECT_MIN_BYTES: usize = 64 << 10;

/// Direct I/O alignment used for every device (the common logical block
/// size of NVMe and 4Kn disks; 512e devices accept it too).
pub const DIRECT_ALIGNMENT_BYTES: usize = 4096;

/// A buffer address, device offset and length all multiples of `a`.
pub(crate) fn is_aligned(addr: usize, offset_bytes: u64, len_bytes: usize, a: usize) -> bool {
    addr.is_multiple_of(a) && offset_bytes.is_multiple_of(a as u64) && len_bytes.is_multiple_of(a)
}

/// A device's file descriptor for io_uring writes, and what its
/// durability contract asks of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UringTarget {
    /// Open as long as the device is.
    pub fd: std::os::unix::io::RawFd,
    /// `rw_flags` of every write (`RWF_DSYNC` when writes are durable on return).
    pub rw_flags: i32,
    /// A write is durable only after a later `fdatasync` (`IORING_OP_FSYNC`).
    pub needs_flush: bool,
    /// A second descriptor of the same file opened with O_DIRECT, when `fd`
    /// goes through the page cache and the file takes O_DIRECT: large
    /// aligned data writes go there and skip the copy into the page cache
    /// (same `rw_flags`, same barrier: `fdatasync` flushes the device's
    /// cache after direct writes too). None where `fd` is O_DIRECT already.
    pub direct_fd: Option<std::os::unix::io::RawFd>,
    /// `fd` goes through the page cache: io_uring hands each write on it
    /// to a kernel worker thread (no non-blocking buffered writes here).
    pub buffered: bool,
}

/// Checks `offset_bytes + len_bytes <= size_bytes` without overflow.
pub(crate) fn check_range(
    name: &dyn Fn() -> String,
    offset_bytes: u64,
    len_bytes: u64,
    size_bytes: u64,
) -> Result<(), DeviceError> {
    match offset_bytes.checked_add(len_bytes) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => Err(DeviceError::OutOfRange {
            device: name(),
            offset_bytes,
            len_bytes,
            size_bytes,
        }),
    }
}

/// Parses sizes like `4096`, `64K`, `1G`, `8GiB`, `512M` (binary units).
pub fn parse_size_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits_end);
    let number: u64 = number.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

/// A zeroed heap buffer whose address is aligned (for direct I/O). Grows on
/// demand; reused per thread so the hot path does not allocate.
pub struct AlignedBuf {
    ptr: *mut u8,
    capacity_bytes: usize,
    alignment_bytes: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub const ALIGNMENT_BYTES: usize = 4096;

    pub fn new() -> AlignedBuf {
        AlignedBuf {
            ptr: std::ptr::null_mut(),
            capacity_bytes: 0,
            alignment_bytes: Self::ALIGNMENT_BYTES,
        }
    }

    /// A slice of exactly `len_bytes` (contents unspecified but initialised).
    pub fn get(&mut self, len_bytes: usize) -> &mut [u8] {
        if len_bytes > self.capacity_bytes {
            self.release();
            let capacity = len_bytes.next_multiple_of(self.alignment_bytes);
            let layout = Layout::from_size_align(capacity, self.alignment_bytes)
                .expect("aligned buffer layout");
            // SAFETY: layout has a nonzero size (len_bytes > capacity >= 0).
            let ptr = unsafe { alloc::alloc_zeroed(layout) };
            if ptr.is_null() {
                alloc::handle_alloc_error(layout);
            }
            self.ptr = ptr;
            self.capacity_bytes = capacity;
        }
        if len_bytes == 0 {
            return &mut [];
        }
        // SAFETY: ptr is a live allocation of capacity_bytes >= len_bytes,
        // initialised (zeroed at allocation), borrowed mutably through self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len_bytes) }
    }

    fn release(&mut self) {
        if !self.ptr.is_null() {
            let layout = Layout::from_size_align(self.capacity_bytes, self.alignment_bytes)
                .expect("aligned buffer layout");
            // SAFETY: allocated in `get` with this very layout.
            unsafe { alloc::dealloc(self.ptr, layout) };
            self.ptr = std::ptr::null_mut();
            self.capacity_bytes = 0;
        }
    }
}

impl Default for AlignedBuf {
    fn default() -> Self {
        AlignedBuf::new()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        self.release();
    }
}

/// Reads into `dst`, bouncing through an aligned buffer when the device
/// needs alignment that `dst` or the range lacks.
pub(crate) fn read_aligned(
    dev: &dyn BlockDevice,
    dst: &mut [u8],
    offset_bytes: u64,
    bounce: &mut AlignedBuf,
) -> Result<(), DeviceError> {
    let a = dev.alignment_bytes();
    if dst.is_empty() {
        return Ok(());
    }
    if a <= 1 || is_aligned(dst.as_ptr() as usize, offset_bytes, dst.len(), a) {
        return dev.read_at(dst, offset_bytes);
    }
    let start = offset_bytes / a as u64 * a as u64;
    let end = (offset_bytes + dst.len() as u64).next_multiple_of(a as u64);
    let tmp = bounce.get((end - start) as usize);
    dev.read_at(tmp, start)?;
    let skip = (offset_bytes - start) as usize;
    dst.copy_from_slice(&tmp[skip..skip + dst.len()]);
    Ok(())
}

/// Writes `data`, copying it into an aligned buffer when only its address
/// is misaligned. A misaligned range is the device's error to report.
pub(crate) fn write_aligned(
    dev: &dyn BlockDevice,
    data: &[u8],
    offset_bytes: u64,
    bounce: &mut AlignedBuf,
) -> Result<(), DeviceError> {
    let a = dev.alignment_bytes();
    if a <= 1 || data.is_empty() || is_aligned(data.as_ptr() as usize, offset_bytes, data.len(), a)
    {
        return dev.write_at(data, offset_bytes);
    }
    let tmp = bounce.get(data.len());
    tmp.copy_from_slice(data);
    dev.write_at(tmp, offset_bytes)
}

/// Zeros written to `len_bytes` of `dev` from `offset_bytes`, a megabyte
/// at a time from `buf`.
pub(crate) fn write_zeros(
    dev: &dyn BlockDevice,
    offset_bytes: u64,
    len_bytes: u64,
    buf: &mut AlignedBuf,
) -> Result<(), DeviceError> {
    const ZERO_CHUNK_BYTES: u64 = 1024 * 1024;
    let (mut at, end) = (offset_bytes, offset_bytes + len_bytes);
    while at < end {
        let n = (end - at).min(ZERO_CHUNK_BYTES) as usize;
        let zeros = buf.get(n);
        zeros.fill(0);
        dev.write_at(zeros, at)?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size_bytes("4096"), Some(4096));
        assert_eq!(parse_size_bytes("64K"), Some(65536));
        assert_eq!(parse_size_bytes("1G"), Some(1 << 30));
        assert_eq!(parse_size_bytes("8GiB"), Some(8 << 30));
        assert_eq!(parse_size_bytes("x"), None);
        assert_eq!(parse_size_bytes("1Q"), None);
        assert_eq!(parse_size_bytes("99999999999999T"), None);
    }

    #[test]
    fn aligned_buf_is_aligned_and_grows() {
        let mut b = AlignedBuf::new();
        let s = b.get(100);
        assert_eq!(s.len(), 100);
        assert_eq!(s.as_ptr() as usize % AlignedBuf::ALIGNMENT_BYTES, 0);
        s.fill(7);
        let s = b.get(10_000);
        assert_eq!(s.len(), 10_000);
        assert_eq!(s.as_ptr() as usize % AlignedBuf::ALIGNMENT_BYTES, 0);
    }
}
