//! The backing directory's files as one volume of the cache: each file
//! that takes a write gets a window of the volume's address space (a
//! slot: `WINDOW_BITS` of bytes), so a page of the cache is a page of one
//! file, destaged by a `pwrite` to that file, clamped to the file's size.
//! It exists so that the engine, its write policies, destage orders and
//! admission run unchanged under a filesystem: to them the directory is a
//! block device. It must never write a byte beyond a file's size (a
//! truncated file stays truncated), nor into a file the table does not name.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use wcache_io::{BlockDevice, DeviceError};

use wcache_models::DevOpKind;

use crate::dirs::Dirs;
use crate::disk::{Disk, Disks};
use crate::file_lock::FileLock;
use crate::handle::FileHandle;
use crate::table::{Table, TableError};

/// Bytes of a file's window.
pub const WINDOW_BITS: u32 = 36;
pub const WINDOW_BYTES: u64 = 1 << WINDOW_BITS;
/// The end of each window holds the file's size record (`SizeRecord`), one
/// page of the largest page size there.
pub const RECORD_BYTES: u64 = 1 << 16;
/// A file is cached up to 64 GiB less `RECORD_BYTES` (beyond, its writes
/// are refused with EFBIG: `docs/mount.md`).
pub const FILE_BYTES_MAX: u64 = WINDOW_BYTES - RECORD_BYTES;

/// A file's size made durable through the cache, as the first bytes of a
/// page at `FILE_BYTES_MAX` in its window: an fsync after the file grew
/// writes one with its caller's flags, so the size is as durable as the
/// data under the write policy, with no sync of the backing file. Destaged,
/// its bytes go nowhere: the backing file is synced with the next flush.
/// After a crash the start of the next mount grows each file to its record
/// before the cache is destaged (a size the host lost comes back).
pub struct SizeRecord;

impl SizeRecord {
    const MAGIC: &'static [u8; 8] = b"wcsize01";

    /// The page for `size` (`page` bytes).
    pub fn encode(size: u64, page: u64) -> Vec<u8> {
        let mut buf = vec![0u8; page as usize];
        buf[..8].copy_from_slice(SizeRecord::MAGIC);
        buf[8..16].copy_from_slice(&size.to_le_bytes());
        buf[16..24].copy_from_slice(&(!size).to_le_bytes());
        buf
    }

    /// The size a page records, if it is a record (zeros: none).
    pub fn decode(page: &[u8]) -> Option<u64> {
        let word = |at: usize| u64::from_le_bytes(page[at..at + 8].try_into().unwrap_or([0; 8]));
        if page.len() < 24 || &page[..8] != SizeRecord::MAGIC {
            return None;
        }
        let size = word(8);
        (word(16) == !size && size <= FILE_BYTES_MAX).then_some(size)
    }
}

/// One backing file whose data goes through the cache.
pub struct BackingFile {
    /// Read-write, on the backing file.
    pub fd: OwnedFd,
    /// The file's size as the mount shows it: destages are clamped to it.
    pub size: RwLock<u64>,
    /// Destages to the file hold it shared while they write, a truncation
    /// exclusively while it cuts the file (taken before `size`), so no
    /// destage writes past a cut. Growth does not take it: an append does
    /// not wait for a destage in flight (one held `size` across its write,
    /// timed on the emulated disk, and every append of a file being
    /// destaged waited for it: Redis's AOF, `docs/experiments/rdc-real.md`).
    pub cut: RwLock<()>,
    /// The size last recorded (`SizeRecord`) or found at open: the next
    /// fsync records the size if it differs.
    pub recorded: Mutex<u64>,
    /// The file was cut since the last fsync: the next one syncs the
    /// backing file too (a record only ever grows a file).
    pub shrunk: AtomicBool,
    /// The end of the highest page ever written to the cache for this file.
    pub cached_end: AtomicU64,
    /// Pages past a truncation that the cache may still hold (from, to):
    /// zeroed through the cache before the file grows over them again.
    pub stale: Mutex<Option<(u64, u64)>>,
    /// Writes to this file, one at a time (read-modify-write of a page).
    pub io: FileLock,
    /// The window, once the file took its first write.
    pub slot: std::sync::OnceLock<u32>,
    /// The emulated disk its data I/O is timed on, if any; its inode there.
    disk: Option<(Arc<Disk>, u64)>,
}

impl BackingFile {
    pub fn new(fd: OwnedFd, disks: Option<&Disks>) -> io::Result<BackingFile> {
        let meta = std::fs::File::from(fd.try_clone()?).metadata()?;
        let size = meta.len();
        use std::os::unix::fs::MetadataExt;
        let disk = disks.map(|d| (d.of(fd.as_raw_fd()), meta.ino()));
        Ok(BackingFile {
            disk,
            fd,
            size: RwLock::new(size),
            cut: RwLock::new(()),
            recorded: Mutex::new(size),
            shrunk: AtomicBool::new(false),
            cached_end: AtomicU64::new(0),
            stale: Mutex::new(None),
            io: FileLock::default(),
            slot: std::sync::OnceLock::new(),
        })
    }

    /// The first byte of the file's window, once it has one.
    pub fn window(&self) -> Option<u64> {
        self.slot.get().map(|slot| (*slot as u64) << WINDOW_BITS)
    }

    pub fn size(&self) -> u64 {
        *self.size.read().unwrap_or_else(|e| e.into_inner())
    }

    fn file(&self) -> std::mem::ManuallyDrop<std::fs::File> {
        use std::os::fd::FromRawFd;
        // SAFETY: a File borrowed over our descriptor, never dropped (so never closed).
        std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(self.fd.as_raw_fd()) })
    }

    /// `io` timed as one operation of the emulated disk, if any.
    fn timed<R>(&self, kind: DevOpKind, at: u64, len: usize, io: impl FnOnce() -> R) -> R {
        match &self.disk {
            Some((disk, ino)) => disk.timed(kind, *ino, at, len as u64, io),
            None => io(),
        }
    }

    pub fn pread(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let len = buf.len();
        self.timed(DevOpKind::Read, offset, len, || self.pread_all(buf, offset))
    }

    fn pread_all(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file().read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    pub fn pwrite(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.timed(DevOpKind::Write, offset, data.len(), || {
            self.file().write_all_at(data, offset)
        })
    }

    /// Sets the backing file's size (under the size lock held by the caller).
    pub fn set_len(&self, size: &mut u64, to: u64) -> io::Result<()> {
        self.file().set_len(to)?;
        if to < *size {
            self.shrunk.store(true, Ordering::Release);
        }
        *size = to;
        Ok(())
    }

    pub fn sync_data(&self) -> io::Result<()> {
        self.timed(DevOpKind::Flush, 0, 0, || self.file().sync_data())
    }
}

/// The volume over the backing directory's files.
pub struct Files {
    dir: PathBuf,
    table: Mutex<Table>,
    slots: RwLock<HashMap<u32, Arc<BackingFile>>>,
    next_slot: Mutex<u32>,
    slots_max: u32,
    /// Slots written since the last flush.
    written: Mutex<HashSet<u32>>,
    len_bytes: u64,
    disk: Option<Arc<Disks>>,
    /// The directories whose files go to the critical volume (`volumes.rs`).
    critical: Dirs<()>,
    /// Windows in the critical volume: files under `critical` when they
    /// took their first write.
    critical_slots: RwLock<HashSet<u32>>,
}

#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error(transparent)]
    Table(#[from] TableError),
    #[error("{dir}: {source}")]
    Dir { dir: String, source: io::Error },
    #[error("the mount's volume has {slots_max} file windows, all used since the mount started: remount to reuse them")]
    Full { slots_max: u32 },
    #[error("the size record of file window {slot}: {why}")]
    Record { slot: u32, why: String },
    #[error("cannot name a file by its handle (name_to_handle_at): {0}")]
    Handle(io::Error),
}

impl Files {
    /// The files of `dir` as a volume of `len_bytes` (the engine's
    /// largest): every file of its table is opened by handle (a file gone
    /// since is left out: its pages have nowhere to go and are dropped).
    /// Files under a directory of `critical` take their windows in the
    /// critical volume.
    pub fn open(
        dir: &Path,
        len_bytes: u64,
        disk: Option<Arc<Disks>>,
        critical: Dirs<()>,
    ) -> Result<Files, FilesError> {
        let dir_err = |source| FilesError::Dir {
            dir: dir.display().to_string(),
            source,
        };
        let dir_fd: OwnedFd = std::fs::File::open(dir).map_err(dir_err)?.into();

        let table = Table::open(dir)?;
        let mut slots = HashMap::new();
        for (slot, handle) in &table.entries {
            match handle.open(dir_fd.as_fd()) {
                Ok(fd) => {
                    let file = BackingFile::new(fd, disk.as_deref()).map_err(dir_err)?;
                    slots.insert(*slot, Arc::new(file));
                }
                Err(e) if e.raw_os_error() == Some(libc::ESTALE) => {
                    tracing::info!(
                        "file window {slot}: its file was deleted; its cached pages are dropped"
                    );
                }
                Err(e) => return Err(dir_err(e)),
            }
        }
        let next = table.entries.iter().map(|(s, _)| s + 1).max().unwrap_or(0);
        Ok(Files {
            dir: dir.to_path_buf(),
            table: Mutex::new(table),
            slots: RwLock::new(slots),
            next_slot: Mutex::new(next),
            slots_max: (len_bytes >> WINDOW_BITS).min(u32::MAX as u64) as u32,
            written: Mutex::new(HashSet::new()),
            len_bytes,
            disk,
            critical,
            critical_slots: RwLock::new(HashSet::new()),
        })
    }

    /// The cache device the table was made for (empty: a new table).
    pub fn table_identity(&self) -> String {
        self.lock_table().identity.clone()
    }

    /// Files in the table: how many windows may hold pages.
    pub fn table_len(&self) -> usize {
        self.lock_table().entries.len()
    }

    fn lock_table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The window at `window` is in the critical volume.
    pub fn in_critical_volume(&self, window: u64) -> bool {
        let slot = (window >> WINDOW_BITS) as u32;
        self.critical_slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&slot)
    }

    /// Forgets every window (the cache holds no page of any): the table
    /// is emptied for `identity`, durably.
    pub fn reset(&self, identity: &str) -> Result<(), FilesError> {
        self.lock_table().reset(identity)?;
        self.slots
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.critical_slots
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        *self.next_slot.lock().unwrap_or_else(|e| e.into_inner()) = 0;
        Ok(())
    }

    /// `file`'s window (its byte offset in the volume), given one now if it
    /// has none: its handle is in the table, durably, when this returns.
    pub fn window_of(&self, file: &Arc<BackingFile>) -> Result<u64, FilesError> {
        if let Some(slot) = file.slot.get() {
            return Ok((*slot as u64) << WINDOW_BITS);
        }
        let mut next = self.next_slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = file.slot.get() {
            return Ok((*slot as u64) << WINDOW_BITS);
        }
        if *next >= self.slots_max {
            return Err(FilesError::Full {
                slots_max: self.slots_max,
            });
        }
        let handle = FileHandle::of(file.fd.as_fd()).map_err(FilesError::Handle)?;
        let slot = *next;
        self.lock_table().append(slot, &handle)?;
        *next += 1;
        if self.critical.of(file.fd.as_raw_fd()).is_some() {
            self.critical_slots
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(slot);
        }
        self.slots
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(slot, Arc::clone(file));
        let _ = file.slot.set(slot);
        Ok((slot as u64) << WINDOW_BITS)
    }

    fn file_at(&self, slot: u32) -> Option<Arc<BackingFile>> {
        self.slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&slot)
            .cloned()
    }

    fn io_error(
        &self,
        op: &'static str,
        offset: u64,
        len: usize,
        source: io::Error,
    ) -> DeviceError {
        DeviceError::Io {
            device: self.name(),
            op,
            offset_bytes: offset,
            len_bytes: len as u64,
            source,
        }
    }

    /// Runs `each(slot, offset in the file, range of the buffer)` over the
    /// windows `[offset, offset + len)` crosses.
    fn split(
        offset: u64,
        len: usize,
        mut each: impl FnMut(u32, u64, std::ops::Range<usize>) -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let mut done = 0usize;
        while done < len {
            let at = offset + done as u64;
            let in_window = at & (WINDOW_BYTES - 1);
            let n = ((WINDOW_BYTES - in_window) as usize).min(len - done);
            each((at >> WINDOW_BITS) as u32, in_window, done..done + n)?;
            done += n;
        }
        Ok(())
    }
}

impl BlockDevice for Files {
    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    /// Bytes of a file up to its size; zeros beyond it and in windows of
    /// no file.
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError> {
        Files::split(offset_bytes, buf.len(), |slot, at, range| {
            let part = &mut buf[range];
            let Some(file) = self.file_at(slot) else {
                part.fill(0);
                return Ok(());
            };
            // A window's size record reads as none: a record is in the cache or nowhere.
            let data = FILE_BYTES_MAX.saturating_sub(at).min(part.len() as u64) as usize;
            let n = file
                .pread(&mut part[..data], at)
                .map_err(|e| self.io_error("read", offset_bytes, part.len(), e))?;
            part[n..].fill(0);
            Ok(())
        })
    }

    /// A destage: the bytes below the file's size now are written; those
    /// beyond are dropped (the file was truncated since they were cached).
    /// A size record writes nothing: the file has its size already (it is
    /// set at once, and at the start after a crash), made durable by the
    /// next flush. A window of no file (its file deleted before a crash)
    /// takes nothing.
    fn write_at(&self, data: &[u8], offset_bytes: u64) -> Result<(), DeviceError> {
        Files::split(offset_bytes, data.len(), |slot, at, range| {
            let Some(file) = self.file_at(slot) else {
                return Ok(());
            };
            let _cut = file.cut.read().unwrap_or_else(|e| e.into_inner());
            let size = file.size();
            let end = at + range.len() as u64;
            let keep = size.min(FILE_BYTES_MAX).saturating_sub(at);
            let keep = keep.min(range.len() as u64) as usize;
            if keep > 0 {
                file.pwrite(&data[range.start..range.start + keep], at)
                    .map_err(|e| self.io_error("write", offset_bytes, data.len(), e))?;
            }
            if keep > 0 || end > FILE_BYTES_MAX {
                self.written
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(slot);
            }
            Ok(())
        })
    }

    /// `fdatasync` of every file written since the last flush.
    fn flush(&self) -> Result<(), DeviceError> {
        let written: Vec<u32> =
            std::mem::take(&mut *self.written.lock().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .collect();
        for (i, slot) in written.iter().enumerate() {
            let Some(file) = self.file_at(*slot) else {
                continue;
            };
            if let Err(e) = file.sync_data() {
                // Not flushed: they stay to be flushed again.
                self.written
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(&written[i..]);
                return Err(self.io_error("flush", (*slot as u64) << WINDOW_BITS, 0, e));
            }
        }
        Ok(())
    }

    fn name(&self) -> String {
        match &self.disk {
            Some(disk) => format!("files:{} on {}", self.dir.display(), disk.name()),
            None => format!("files:{}", self.dir.display()),
        }
    }
}

impl Files {
    /// After a crash, before the cache is destaged: each file of the table
    /// grows to the size its record in the cache holds, if larger (its
    /// pages up to it are then destaged, not dropped). `read` reads the
    /// volume through the cache.
    pub fn apply_size_records(
        &self,
        page: u64,
        mut read: impl FnMut(u64, &mut [u8]) -> Result<(), String>,
    ) -> Result<(), FilesError> {
        let files: Vec<(u32, Arc<BackingFile>)> = self
            .slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(slot, file)| (*slot, Arc::clone(file)))
            .collect();
        let mut buf = vec![0u8; page as usize];
        for (slot, file) in files {
            let at = ((slot as u64) << WINDOW_BITS) + FILE_BYTES_MAX;
            read(at, &mut buf).map_err(|why| FilesError::Record { slot, why })?;
            let Some(recorded) = SizeRecord::decode(&buf) else {
                continue;
            };
            let mut size = file.size.write().unwrap_or_else(|e| e.into_inner());
            if recorded > *size {
                tracing::info!(
                    "file window {slot}: its file grows from {} to its recorded size {recorded} bytes",
                    *size
                );
                file.set_len(&mut size, recorded)
                    .map_err(|e| FilesError::Record {
                        slot,
                        why: e.to_string(),
                    })?;
            }
        }
        Ok(())
    }

    /// The file table's path, for messages.
    pub fn dir_name(&self) -> String {
        self.dir
            .join(crate::table::TABLE_NAME)
            .display()
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_record_reads_back_and_anything_else_is_none() {
        for size in [0, 1, 4095, 1 << 30, FILE_BYTES_MAX] {
            assert_eq!(
                SizeRecord::decode(&SizeRecord::encode(size, 4096)),
                Some(size)
            );
        }
        assert_eq!(
            SizeRecord::decode(&[0u8; 4096]),
            None,
            "a page never written"
        );
        let mut torn = SizeRecord::encode(12345, 512);
        torn[9] ^= 1;
        assert_eq!(SizeRecord::decode(&torn), None, "size and check disagree");
        let beyond = SizeRecord::encode(FILE_BYTES_MAX + 1, 512);
        assert_eq!(SizeRecord::decode(&beyond), None, "past the window");
        assert_eq!(SizeRecord::decode(b"wcsize01"), None, "short");
    }
}
