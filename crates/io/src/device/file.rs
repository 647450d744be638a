//! `FileDevice`: a regular file or a block device as cache device or backing.
//!
//! This module exists to turn the three ways of making a write durable on
//! Linux into one honest `writes_durable()`/`flush()` pair: `fdatasync` on
//! flush, `RWF_DSYNC` per write (`pwritev2`), or `nvram` (a tmpfs or pmem
//! file: no syncs at all, and write order kept because every write is a
//! synchronous `pwrite` that has reached the page cache when it returns).
//! It must never claim durability that the sync mode does not give.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::{check_range, BlockDevice, DeviceError};

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
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            sync: SyncMode::Fdatasync,
            direct: false,
            create_size_bytes: None,
        }
    }
}

/// Direct I/O alignment used for every device (the common logical block size
/// of NVMe and 4Kn disks; 512e devices accept it too).
const DIRECT_ALIGNMENT_BYTES: usize = 4096;

pub struct FileDevice {
    file: File,
    path: PathBuf,
    size_bytes: u64,
    options: FileOptions,
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
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            size_bytes,
            options,
        })
    }

    pub fn sync_mode(&self) -> SyncMode {
        self.options.sync
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
        if a > 1
            && (!addr.is_multiple_of(a)
                || !offset_bytes.is_multiple_of(a as u64)
                || !len_bytes.is_multiple_of(a))
        {
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
    fn write_dsync(&self, mut data: &[u8], mut offset_bytes: u64) -> io::Result<()> {
        while !data.is_empty() {
            let iov = libc::iovec {
                iov_base: data.as_ptr() as *mut libc::c_void,
                iov_len: data.len(),
            };
            let offset = libc::off_t::try_from(offset_bytes)
                .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
            // SAFETY: iov points into `data`, alive for the call; fd is open.
            let n =
                unsafe { libc::pwritev2(self.file.as_raw_fd(), &iov, 1, offset, libc::RWF_DSYNC) };
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
            data = &data[n as usize..];
            offset_bytes += n as u64;
        }
        Ok(())
    }
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
        let result = match self.options.sync {
            SyncMode::Dsync => self.write_dsync(data, offset_bytes),
            SyncMode::Fdatasync | SyncMode::Nvram => self.file.write_all_at(data, offset_bytes),
        };
        result.map_err(|e| self.io_err("write", offset_bytes, data.len() as u64, e))
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

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DeviceError> {
        check_range(&|| self.name(), offset_bytes, len_bytes, self.size_bytes)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(sync: SyncMode) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("dev");
        let dev = FileDevice::open(
            &path,
            FileOptions {
                sync,
                direct: false,
                create_size_bytes: Some(1 << 20),
            },
        )
        .expect("open");
        assert_eq!(dev.len_bytes(), 1 << 20);
        dev.write_at(&[5u8; 3000], 1000).expect("write");
        dev.flush().expect("flush");
        let mut back = vec![0u8; 3002];
        dev.read_at(&mut back, 999).expect("read");
        assert_eq!(back[0], 0);
        assert!(back[1..3001].iter().all(|&b| b == 5));
        assert_eq!(back[3001], 0);
        assert!(dev.write_at(&[1], 1 << 20).is_err());
        assert_eq!(dev.writes_durable(), sync != SyncMode::Fdatasync);
    }

    #[test]
    fn file_device_round_trip_in_every_sync_mode() {
        round_trip(SyncMode::Fdatasync);
        round_trip(SyncMode::Dsync);
        round_trip(SyncMode::Nvram);
    }

    #[test]
    fn file_device_reopens_existing_file_at_its_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("dev");
        let options = FileOptions {
            create_size_bytes: Some(8192),
            ..FileOptions::default()
        };
        FileDevice::open(&path, options)
            .expect("create")
            .write_at(b"hello", 4096)
            .expect("write");
        let dev = FileDevice::open(&path, FileOptions::default()).expect("reopen");
        assert_eq!(dev.len_bytes(), 8192);
        let mut b = [0u8; 5];
        dev.read_at(&mut b, 4096).expect("read");
        assert_eq!(&b, b"hello");
    }

    #[test]
    fn missing_file_without_create_is_an_open_error() {
        let err = FileDevice::open(Path::new("/nonexistent/wcache/x"), FileOptions::default())
            .err()
            .expect("error");
        assert!(matches!(err, DeviceError::Open { .. }), "{err}");
    }
}
