//! `FileDevice`: a regular file or a block device as cache device or backing.
//!
//! This module exists to turn the three ways of making a write durable on
//! Linux into one honest `writes_durable()`/`flush()` pair: `fdatasync` on
//! flush, `RWF_DSYNC` per write (`pwritev2`), or `nvram` (a tmpfs or pmem
//! file: no syncs at all, and write order kept because every write is a
//! synchronous `pwrite` that has reached the page cache when it returns).
//! A `nvram` file on tmpfs may also be mapped (`FileOptions::map`): then a
//! read or write is a plain memory copy into the shared mapping, with no
//! system call, and a process crash still finds every returned write in the
//! page cache, in order. It must never claim durability that the sync mode
//! does not give.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::{check_range, is_aligned, BlockDevice, DeviceError, DIRECT_ALIGNMENT_BYTES};

/// How writes become durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// `fdatasync` in `flush()`; writes are volatile until then.
    Fdatasync,
    /// Every write with `RWF_DSYNC`: durable when it returns.
    Dsync,
    /// Non-volatile memory (pmem, battery-backed RAM; tmpfs stands in for it):
    /// no syncs; a returned write is as durable as the medium.
    Nvram,
}

impl SyncMode {
    pub const NAMES: &'static [&'static str] = &["fdatasync", "dsync", "nvram"];

    pub fn from_name(name: &str) -> Option<SyncMode> {
        match name.to_ascii_lowercase().as_str() {
            "fdatasync" | "fsync" => Some(SyncMode::Fdatasync),
            "dsync" | "rwf_dsync" => Some(SyncMode::Dsync),
            "nvram" | "none" => Some(SyncMode::Nvram),
            _ => None,
        }
    }
}

/// How to open a `FileDevice`.
#[derive(Clone, Debug)]
pub struct FileOptions {
    pub sync: SyncMode,
    /// O_DIRECT: bypass the page cache (offsets, lengths, buffers aligned to 4 KiB).
    pub direct: bool,
    /// Create a sparse regular file of this size if the path does not exist
    /// (an existing file shorter than this is extended).
    pub create_size_bytes: Option<u64>,
    /// Map the file and copy bytes in and out of the mapping instead of
    /// calling pread/pwrite — only where that keeps the promise of pwrite:
    /// sync mode nvram, no O_DIRECT, a regular file on tmpfs or ramfs. Its
    /// whole size is allocated first (no SIGBUS when tmpfs fills up later).
    /// Elsewhere, or when allocation or mapping fails, the flag is ignored
    /// (`FileDevice::is_mapped` tells).
    pub map: bool,
    /// Reads of `DIRECT_MIN_BYTES` or more into aligned buffers, at
    /// aligned offsets, go around the page cache (O_DIRECT on a second
    /// descriptor; the kernel writes dirty cached pages of the range first):
    /// no copy out of the page cache, the device's own speed. For backings,
    /// whose large reads are read misses no one reads twice through it.
    pub direct_large_reads: bool,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            sync: SyncMode::Fdatasync,
            direct: false,
            create_size_bytes: None,
            map: false,
            direct_large_reads: false,
        }
    }
}

pub struct FileDevice {
    file: File,
    /// The same file opened with O_DIRECT beside a buffered `file`, for the
    /// io_uring path's large writes (`UringTarget::direct_fd`); opened on
    /// first use, None when the file refuses O_DIRECT.
    direct_file: std::sync::OnceLock<Option<File>>,
    path: PathBuf,
    size_bytes: u64,
    options: FileOptions,
    mapping: Option<Mapping>,
}

/// A shared read-write mapping of a whole file.
struct Mapping {
    ptr: *mut u8,
    len_bytes: usize,
}

// SAFETY: the mapping is shared memory owned by this struct; callers of
// `BlockDevice` never issue concurrent calls on overlapping ranges, so the
// copies in and out of it never race.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Allocates the file's `len_bytes` (so that no later store faults for
    /// want of space) and maps them.
    fn new(file: &File, len_bytes: u64) -> io::Result<Mapping> {
        let len = usize::try_from(len_bytes)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        let off_len = libc::off_t::try_from(len_bytes)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: plain syscalls on an open fd; the result is checked.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, off_len) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh shared mapping of an open fd, checked for failure.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len_bytes: len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; no borrow outlives self.
        unsafe { libc::munmap(self.ptr.cast(), self.len_bytes) };
    }
}

impl FileDevice {
    pub fn open(path: &Path, options: FileOptions) -> Result<FileDevice, DeviceError> {
        let name = path.display().to_string();
        let open_err = |what: String| DeviceError::Open {
            device: name.clone(),
            what,
        };
        let mut open = OpenOptions::new();
        open.read(true).write(true);
        if options.create_size_bytes.is_some() {
            open.create(true);
        }
        if options.direct {
            open.custom_flags(libc::O_DIRECT);
        }
        let file = open.open(path).map_err(|e| open_err(e.to_string()))?;
        let meta = file.metadata().map_err(|e| open_err(e.to_string()))?;
        let size_bytes = if meta.file_type().is_block_device() {
            block_device_size_bytes(&file).map_err(|e| open_err(e.to_string()))?
        } else if !meta.is_file() {
            return Err(open_err("not a regular file or block device".into()));
        } else {
            match options.create_size_bytes {
                Some(want) if meta.len() < want => {
                    file.set_len(want)
                        .map_err(|e| open_err(format!("extend to {want} bytes: {e}")))?;
                    want
                }
                _ => meta.len(),
            }
        };
        if size_bytes == 0 {
            return Err(open_err("size is 0 bytes".into()));
        }
        let mapping = if options.map
            && options.sync == SyncMode::Nvram
            && !options.direct
            && meta.is_file()
            && is_on_volatile_memory(path)
        {
            Mapping::new(&file, size_bytes).ok()
        } else {
            None
        };
        Ok(FileDevice {
            file,
            direct_file: std::sync::OnceLock::new(),
            path: path.to_path_buf(),
            size_bytes,
            options,
            mapping,
        })
    }

    pub fn sync_mode(&self) -> SyncMode {
        self.options.sync
    }

    /// The file, where it is a regular file (not a block device), not
    /// mapped: for calls only a regular file takes (punching a hole).
    pub fn regular_file(&self) -> Option<&File> {
        let regular = self.file.metadata().is_ok_and(|m| m.is_file());
        (regular && self.mapping.is_none()).then_some(&self.file)
    }

    /// True when reads and writes are memory copies into a mapping.
    pub fn is_mapped(&self) -> bool {
        self.mapping.is_some()
    }

    fn io_err(
        &self,
        op: &'static str,
        offset_bytes: u64,
        len_bytes: u64,
        e: io::Error,
    ) -> DeviceError {
        DeviceError::Io {
            device: self.name(),
            op,
            offset_bytes,
            len_bytes,
            source: e,
        }
    }

    fn check_aligned(
        &self,
        addr: usize,
        offset_bytes: u64,
        len_bytes: usize,
    ) -> Result<(), DeviceError> {
        let a = self.alignment_bytes();
        if a > 1 && !is_aligned(addr, offset_bytes, len_bytes, a) {
            return Err(DeviceError::Misaligned {
                device: self.name(),
                offset_bytes,
                len_bytes: len_bytes as u64,
                alignment_bytes: a,
            });
        }
        Ok(())
    }

    /// `pwritev2(RWF_DSYNC)` until all of `data` is written.
    fn write_dsync(&self, data: &[u8], offset_bytes: u64) -> io::Result<()> {
        let mut iov = [libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        }];
        pwritev_all(
            self.file.as_raw_fd(),
            &mut iov,
            offset_bytes,
            libc::RWF_DSYNC,
        )
    }

    /// `pwritev2` (with `RWF_DSYNC` in dsync mode) until every buffer is
    /// written.
    fn write_vectored(&self, bufs: &[&[u8]], offset_bytes: u64) -> io::Result<()> {
        let flags = match self.options.sync {
            SyncMode::Dsync => libc::RWF_DSYNC,
            SyncMode::Fdatasync | SyncMode::Nvram => 0,
        };
        let mut iovs = iovecs(bufs);
        pwritev_all(self.file.as_raw_fd(), &mut iovs, offset_bytes, flags)
    }
}

/// The iovecs of `bufs`, empty ones left out and each run of buffers that
/// follow one another in memory (the pages of one request) joined in one.
fn iovecs(bufs: &[&[u8]]) -> Vec<libc::iovec> {
    let mut iovs: Vec<libc::iovec> = Vec::with_capacity(bufs.len());
    for b in bufs.iter().filter(|b| !b.is_empty()) {
        match iovs.last_mut() {
            Some(last) if last.iov_base as usize + last.iov_len == b.as_ptr() as usize => {
                last.iov_len += b.len()
            }
            _ => iovs.push(libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            }),
        }
    }
    iovs
}

/// `pwritev2(flags)` on `fd` from `offset_bytes` until every byte the
/// iovecs name is written (short writes resumed), at most `IOV_MAX` per
/// call. The iovecs must point into buffers alive for the call.
fn pwritev_all(
    fd: std::os::fd::RawFd,
    iovs: &mut [libc::iovec],
    offset_bytes: u64,
    flags: libc::c_int,
) -> io::Result<()> {
    const IOV_MAX: usize = 1024;
    let mut first = 0;
    let mut at = offset_bytes;
    while first < iovs.len() {
        if iovs[first].iov_len == 0 {
            first += 1;
            continue;
        }
        let count = (iovs.len() - first).min(IOV_MAX);
        let offset =
            libc::off_t::try_from(at).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: the iovecs point into live buffers (caller); fd is open.
        let n = unsafe {
            libc::pwritev2(
                fd,
                iovs[first..].as_ptr(),
                count as libc::c_int,
                offset,
                flags,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        at += n as u64;
        let mut n = n as usize;
        while n > 0 {
            let iov = &mut iovs[first];
            if n >= iov.iov_len {
                n -= iov.iov_len;
                first += 1;
            } else {
                // Within the iovec (n < its length), which may span
                // buffers that follow one another (`iovecs`): plain
                // address arithmetic, never dereferenced here.
                iov.iov_base = iov.iov_base.cast::<u8>().wrapping_add(n).cast();
                iov.iov_len -= n;
                n = 0;
            }
        }
    }
    Ok(())
}

fn block_device_size_bytes(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    let end = f.seek(SeekFrom::End(0))?;
    f.seek(SeekFrom::Start(0))?;
    Ok(end)
}

impl BlockDevice for FileDevice {
    fn len_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError> {
        check_range(
            &|| self.name(),
            offset_bytes,
            buf.len() as u64,
            self.size_bytes,
        )?;
        self.check_aligned(buf.as_ptr() as usize, offset_bytes, buf.len())?;
        if let Some(m) = &self.mapping {
            // SAFETY: the range is inside the mapping (checked above) and no
            // write to it runs concurrently (the trait's contract).
            unsafe {
                let src = m.ptr.add(offset_bytes as usize);
                std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len());
            }
            return Ok(());
        }
        if self.options.direct_large_reads
            && buf.len() >= super::DIRECT_MIN_BYTES
            && is_aligned(
                buf.as_ptr() as usize,
                offset_bytes,
                buf.len(),
                DIRECT_ALIGNMENT_BYTES,
            )
        {
            if let Some(direct) = self.direct_file() {
                return direct
                    .read_exact_at(buf, offset_bytes)
                    .map_err(|e| self.io_err("read", offset_bytes, buf.len() as u64, e));
            }
        }
        self.file
            .read_exact_at(buf, offset_bytes)
            .map_err(|e| self.io_err("read", offset_bytes, buf.len() as u64, e))
    }

    fn write_at(&self, data: &[u8], offset_bytes: u64) -> Result<(), DeviceError> {
        check_range(
            &|| self.name(),
            offset_bytes,
            data.len() as u64,
            self.size_bytes,
        )?;
        self.check_aligned(data.as_ptr() as usize, offset_bytes, data.len())?;
        if let Some(m) = &self.mapping {
            // SAFETY: as in read_at.
            unsafe {
                let dst = m.ptr.add(offset_bytes as usize);
                std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
            }
            // The copy is done before anything after this call is stored:
            // a crash never finds a later write (a record) without this one.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            return Ok(());
        }
        let result = match self.options.sync {
            SyncMode::Dsync => self.write_dsync(data, offset_bytes),
            SyncMode::Fdatasync | SyncMode::Nvram => self.file.write_all_at(data, offset_bytes),
        };
        result.map_err(|e| self.io_err("write", offset_bytes, data.len() as u64, e))
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset_bytes: u64) -> Result<(), DeviceError> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(&|| self.name(), offset_bytes, total as u64, self.size_bytes)?;
        let mut at = offset_bytes;
        for b in bufs {
            self.check_aligned(b.as_ptr() as usize, at, b.len())?;
            at += b.len() as u64;
        }
        if self.mapping.is_some() || bufs.len() <= 1 {
            let mut at = offset_bytes;
            for b in bufs {
                self.write_at(b, at)?;
                at += b.len() as u64;
            }
            return Ok(());
        }
        self.write_vectored(bufs, offset_bytes)
            .map_err(|e| self.io_err("write", offset_bytes, total as u64, e))
    }

    /// `dsync` mode: all at once through native AIO (`aio.rs`), each with
    /// `RWF_DSYNC`; a short write is finished with `write_at`. Otherwise,
    /// or where AIO is not available, one `write_at` after another.
    fn write_many(&self, writes: &[(&[u8], u64)], failed: &mut dyn FnMut(usize, DeviceError)) {
        let checked = writes.iter().all(|(d, at)| {
            check_range(&|| self.name(), *at, d.len() as u64, self.size_bytes).is_ok()
                && self
                    .check_aligned(d.as_ptr() as usize, *at, d.len())
                    .is_ok()
        });
        let mut results = Vec::new();
        let aio = checked
            && writes.len() > 1
            && self.mapping.is_none()
            && self.options.sync == SyncMode::Dsync
            && super::aio::write_all(self.file.as_raw_fd(), writes, libc::RWF_DSYNC, &mut results)
                .is_ok();
        if !aio {
            for (i, (data, at)) in writes.iter().enumerate() {
                if let Err(e) = self.write_at(data, *at) {
                    failed(i, e);
                }
            }
            return;
        }
        for (i, ((data, at), result)) in writes.iter().zip(results).enumerate() {
            let outcome = match result {
                Ok(n) if n == data.len() => Ok(()),
                // Short (or empty) write: the rest, the ordinary way.
                Ok(n) => self.write_at(&data[n..], at + n as u64),
                Err(e) => Err(self.io_err("write", *at, data.len() as u64, e)),
            };
            if let Err(e) = outcome {
                failed(i, e);
            }
        }
    }

    fn flush(&self) -> Result<(), DeviceError> {
        match self.options.sync {
            SyncMode::Nvram | SyncMode::Dsync => Ok(()),
            SyncMode::Fdatasync => self
                .file
                .sync_data()
                .map_err(|e| self.io_err("fdatasync", 0, 0, e)),
        }
    }

    /// Through the O_DIRECT descriptor beside the buffered one, in
    /// `fdatasync` mode (its flush makes these writes durable too), when
    /// every buffer (address and length) and the offset are aligned to 4 KiB.
    fn write_direct_vectored_at(
        &self,
        bufs: &[&[u8]],
        offset_bytes: u64,
    ) -> Result<bool, DeviceError> {
        let aligned =
            |b: &&[u8]| is_aligned(b.as_ptr() as usize, 0, b.len(), DIRECT_ALIGNMENT_BYTES);
        if self.options.sync != SyncMode::Fdatasync
            || !offset_bytes.is_multiple_of(DIRECT_ALIGNMENT_BYTES as u64)
            || !bufs.iter().all(aligned)
        {
            return Ok(false);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(&|| self.name(), offset_bytes, total as u64, self.size_bytes)?;
        let Some(direct) = self.direct_file() else {
            return Ok(false);
        };
        let mut iovs = iovecs(bufs);
        pwritev_all(direct.as_raw_fd(), &mut iovs, offset_bytes, 0)
            .map_err(|e| self.io_err("write", offset_bytes, total as u64, e))?;
        Ok(true)
    }

    /// Regular files on a disk filesystem: the holes `SEEK_HOLE` finds
    /// (unwritten extents count as holes on ext4 and XFS) are written with
    /// zeros. Memory filesystems are left alone: allocation costs them
    /// memory and their flush nothing.
    fn fill_holes(&self) -> Result<u64, DeviceError> {
        let is_file = self.file.metadata().map(|m| m.is_file()).unwrap_or(false);
        if !is_file || self.mapping.is_some() || is_on_volatile_memory(&self.path) {
            return Ok(0);
        }
        const CHUNK_BYTES: u64 = 1 << 20;
        let mut zeros = super::AlignedBuf::new();
        let zeros = zeros.get(CHUNK_BYTES as usize);
        zeros.fill(0);
        let fd = self.file.as_raw_fd();
        let seek = |from: u64, whence: libc::c_int| -> Option<u64> {
            let from = libc::off_t::try_from(from).ok()?;
            // SAFETY: plain syscall on an open fd; the result is checked.
            let at = unsafe { libc::lseek(fd, from, whence) };
            u64::try_from(at).ok()
        };
        let a = self.alignment_bytes() as u64;
        let mut written = 0;
        let mut at = 0;
        while at < self.size_bytes {
            // No hole from `at` on (or no SEEK_HOLE here): done.
            let Some(hole) = seek(at, libc::SEEK_HOLE).filter(|&h| h < self.size_bytes) else {
                break;
            };
            let end = seek(hole, libc::SEEK_DATA)
                .unwrap_or(self.size_bytes)
                .min(self.size_bytes);
            // Whole aligned chunks for O_DIRECT: the hole widened to the
            // alignment, which may zero bytes beside it (a format calls
            // this before it writes anything).
            let mut w = hole / a * a;
            let stop = end.div_ceil(a) * a;
            while w < stop.min(self.size_bytes) {
                let n = (stop.min(self.size_bytes) - w).min(CHUNK_BYTES);
                self.write_at(&zeros[..n as usize], w)?;
                written += n;
                w += n;
            }
            at = end.max(w);
        }
        if written > 0 {
            self.file
                .sync_data()
                .map_err(|e| self.io_err("fdatasync", 0, 0, e))?;
        }
        Ok(written)
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DeviceError> {
        check_range(&|| self.name(), offset_bytes, len_bytes, self.size_bytes)?;
        if self.mapping.is_some() {
            // A punched hole would be refilled by the next store to it, which
            // could fault if tmpfs is full by then: keep the space.
            return Ok(());
        }
        let (Ok(offset), Ok(len)) = (
            libc::off_t::try_from(offset_bytes),
            libc::off_t::try_from(len_bytes),
        ) else {
            return Ok(());
        };
        // SAFETY: plain syscall on an open fd. Failure (block devices,
        // filesystems without hole punching) is fine: trim is advisory.
        unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset,
                len,
            )
        };
        Ok(())
    }

    fn writes_durable(&self) -> bool {
        matches!(self.options.sync, SyncMode::Dsync | SyncMode::Nvram)
    }

    fn writes_wait_for_medium(&self) -> bool {
        self.options.sync == SyncMode::Dsync && self.mapping.is_none()
    }

    fn uring_target(&self) -> Option<super::UringTarget> {
        if self.mapping.is_some() {
            return None;
        }
        let (rw_flags, needs_flush) = match self.options.sync {
            SyncMode::Dsync => (libc::RWF_DSYNC, false),
            SyncMode::Fdatasync => (0, true),
            // Memory-like: a write is a copy, done faster where it arises.
            SyncMode::Nvram => return None,
        };
        let direct_fd = self.direct_file().map(|f| f.as_raw_fd());
        Some(super::UringTarget {
            fd: self.file.as_raw_fd(),
            rw_flags,
            needs_flush,
            direct_fd,
            buffered: !self.options.direct,
        })
    }

    fn alignment_bytes(&self) -> usize {
        if self.options.direct {
            DIRECT_ALIGNMENT_BYTES
        } else {
            1
        }
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

impl FileDevice {
    /// The file opened again with O_DIRECT beside a buffered descriptor
    /// (opened on first use); None when the file is O_DIRECT already,
    /// mapped, or refuses O_DIRECT.
    fn direct_file(&self) -> Option<&File> {
        if self.options.direct || self.mapping.is_some() {
            return None;
        }
        self.direct_file
            .get_or_init(|| {
                // Through /proc: the very file open here, whatever its
                // path names now.
                let own = format!("/proc/self/fd/{}", self.file.as_raw_fd());
                let direct = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(own)
                    .ok()?;
                // Some filesystems open with O_DIRECT and refuse the
                // I/O: one aligned read tells.
                let mut probe = super::AlignedBuf::default();
                let len = DIRECT_ALIGNMENT_BYTES.min(self.size_bytes as usize);
                direct.read_exact_at(probe.get(len), 0).ok()?;
                Some(direct)
            })
            .as_ref()
    }
}

/// True when `path` (or, if it does not exist yet, its directory) is on tmpfs
/// or ramfs: memory that a power loss erases.
pub fn is_on_volatile_memory(path: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let probe = if path.exists() {
        path.to_path_buf()
    } else {
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    };
    let Ok(c_path) = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into a zeroed struct we own; path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c_path.as_ptr(), &mut st) };
    if rc != 0 {
        return false;
    }
    let kind = st.f_type as i64;
    kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
}

pub mod durability;
#[cfg(test)]
mod tests;
