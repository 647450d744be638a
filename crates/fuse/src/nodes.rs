//! The inode table: a FUSE inode number for each backing file, directory
//! or link the kernel looked up, held by an `O_PATH` descriptor (so a
//! rename in the backing directory moves nothing here), counted by the
//! kernel's lookups and dropped at its `forget`. Hard links share a node.

use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::disk::Disks;
use crate::files::BackingFile;

pub const ROOT: u64 = 1;

/// One looked-up backing inode.
pub struct Node {
    pub fd: Arc<OwnedFd>,
    key: (u64, u64),
    lookups: u64,
}

#[derive(Default)]
struct Inner {
    by_ino: HashMap<u64, Node>,
    by_key: HashMap<(u64, u64), u64>,
    /// Regular files' data states, by backing inode: kept past the node's
    /// forget while the file has a window (one inode, one window, one size).
    files: HashMap<(u64, u64), Arc<BackingFile>>,
    next: u64,
}

pub struct Nodes {
    inner: Mutex<Inner>,
    disk: Option<Arc<Disks>>,
}

pub fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

pub fn last_error<T>() -> io::Result<T> {
    Err(io::Error::last_os_error())
}

/// `fstatat(fd, "", AT_EMPTY_PATH)`: the inode `fd` holds.
pub fn stat_fd(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: valid descriptor, empty C string, and out-buffer.
    let r = unsafe {
        libc::fstatat(
            fd,
            empty.as_ptr(),
            &mut st,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return last_error();
    }
    Ok(st)
}

/// `openat(dir, name, flags)` as an owned descriptor.
pub fn open_at(dir: RawFd, name: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: a valid descriptor and C string.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return last_error();
    }
    // SAFETY: a descriptor openat just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The `/proc/self/fd` path of a descriptor: how an `O_PATH` descriptor
/// is reopened, chmod-ed or timed.
pub fn proc_path(fd: RawFd) -> CString {
    CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a number")
}

impl Nodes {
    /// The table with the backing directory as the root.
    pub fn new(root: OwnedFd, disk: Option<Arc<Disks>>) -> io::Result<Nodes> {
        let st = stat_fd(root.as_raw_fd())?;
        let mut inner = Inner {
            next: ROOT + 1,
            ..Inner::default()
        };
        let key = (st.st_dev, st.st_ino);
        inner.by_key.insert(key, ROOT);
        inner.by_ino.insert(
            ROOT,
            Node {
                fd: Arc::new(root),
                key,
                lookups: u64::MAX / 2,
            },
        );
        Ok(Nodes {
            inner: Mutex::new(inner),
            disk,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The descriptor of inode `ino` (ENOENT: the kernel forgot it).
    pub fn fd(&self, ino: u64) -> io::Result<Arc<OwnedFd>> {
        self.lock()
            .by_ino
            .get(&ino)
            .map(|n| Arc::clone(&n.fd))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }

    /// Looks `name` up in directory `parent`: its inode number (one more
    /// lookup counted) and attributes.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> io::Result<(u64, libc::stat)> {
        let dir = self.fd(parent)?;
        let name = cstr(name)?;
        let fd = open_at(dir.as_raw_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let st = stat_fd(fd.as_raw_fd())?;
        Ok((self.add(fd, &st), st))
    }

    /// Counts a lookup of the inode `fd` holds, adding it if new.
    pub fn add(&self, fd: OwnedFd, st: &libc::stat) -> u64 {
        let key = (st.st_dev, st.st_ino);
        let mut inner = self.lock();
        if let Some(&ino) = inner.by_key.get(&key) {
            if let Some(node) = inner.by_ino.get_mut(&ino) {
                node.lookups += 1;
                return ino;
            }
        }
        let ino = inner.next;
        inner.next += 1;
        inner.by_key.insert(key, ino);
        let fd = Arc::new(fd);
        inner.by_ino.insert(
            ino,
            Node {
                fd,
                key,
                lookups: 1,
            },
        );
        ino
    }

    /// The kernel forgets `n` lookups of `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut inner = self.lock();
        let Some(node) = inner.by_ino.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups == 0 && ino != ROOT {
            let key = node.key;
            inner.by_ino.remove(&ino);
            inner.by_key.remove(&key);
            if inner
                .files
                .get(&key)
                .is_some_and(|f| f.slot.get().is_none())
            {
                inner.files.remove(&key);
            }
        }
    }

    /// The data state of regular file `ino`, made (opening the backing
    /// file read-write) at its first open.
    pub fn file(&self, ino: u64) -> io::Result<Arc<BackingFile>> {
        let (fd, key) = {
            let inner = self.lock();
            let node = inner
                .by_ino
                .get(&ino)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
            if let Some(file) = inner.files.get(&node.key) {
                return Ok(Arc::clone(file));
            }
            (Arc::clone(&node.fd), node.key)
        };
        let path = proc_path(fd.as_raw_fd());
        let rw = open_at(libc::AT_FDCWD, &path, libc::O_RDWR, 0)
            .or_else(|_| open_at(libc::AT_FDCWD, &path, libc::O_RDONLY, 0))?;
        let made = Arc::new(BackingFile::new(rw, self.disk.as_deref())?);
        let mut inner = self.lock();
        Ok(Arc::clone(inner.files.entry(key).or_insert(made)))
    }

    /// The data state of `ino` if it was opened before.
    pub fn opened(&self, ino: u64) -> Option<Arc<BackingFile>> {
        let inner = self.lock();
        let key = inner.by_ino.get(&ino)?.key;
        inner.files.get(&key).cloned()
    }
}
