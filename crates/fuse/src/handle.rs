//! A file's persistent identity (its kernel file handle), so that the
//! pages of a file found in the cache after a crash reach that file again,
//! whatever it is called by then.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The longest handle the kernel gives (`MAX_HANDLE_SZ`).
pub const HANDLE_BYTES_MAX: usize = 128;

/// `struct file_handle` with room for the longest handle.
#[repr(C)]
struct RawHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; HANDLE_BYTES_MAX],
}

/// A file handle: its type and bytes, as `name_to_handle_at(2)` gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHandle {
    pub kind: i32,
    pub bytes: Vec<u8>,
}

impl FileHandle {
    /// The handle of the file open as `fd`.
    pub fn of(fd: BorrowedFd<'_>) -> io::Result<FileHandle> {
        let mut raw = RawHandle {
            handle_bytes: HANDLE_BYTES_MAX as u32,
            handle_type: 0,
            f_handle: [0; HANDLE_BYTES_MAX],
        };
        let mut mount_id: libc::c_int = 0;
        let empty = CString::default();
        // SAFETY: `raw` has room for MAX_HANDLE_SZ bytes, as handle_bytes says.
        let r = unsafe {
            libc::name_to_handle_at(
                fd.as_raw_fd(),
                empty.as_ptr(),
                (&mut raw as *mut RawHandle).cast(),
                &mut mount_id,
                libc::AT_EMPTY_PATH,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = (raw.handle_bytes as usize).min(HANDLE_BYTES_MAX);
        Ok(FileHandle {
            kind: raw.handle_type,
            bytes: raw.f_handle[..len].to_vec(),
        })
    }

    /// Opens the file read-write by its handle, on the filesystem of
    /// `mount_fd` (needs CAP_DAC_READ_SEARCH). ESTALE: the file is gone.
    pub fn open(&self, mount_fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
        if self.bytes.len() > HANDLE_BYTES_MAX {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut raw = RawHandle {
            handle_bytes: self.bytes.len() as u32,
            handle_type: self.kind,
            f_handle: [0; HANDLE_BYTES_MAX],
        };
        raw.f_handle[..self.bytes.len()].copy_from_slice(&self.bytes);
        // SAFETY: `raw` is a valid file_handle of handle_bytes bytes.
        let fd = unsafe {
            libc::open_by_handle_at(
                mount_fd.as_raw_fd(),
                (&mut raw as *mut RawHandle).cast(),
                libc::O_RDWR | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor open_by_handle_at just returned to us.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}
