//! The filesystem the kernel sees: metadata operations pass through to
//! the backing directory (by `*at` calls on the nodes' descriptors), file
//! data goes through the cache (`data.rs`). Files and directories created
//! here belong to the caller (uid, gid), as on a local filesystem. The
//! file table (`.wcache-files`) is hidden from the mount.

use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use crate::callers::{Caller, Callers};
use crate::data::Data;
use crate::files::BackingFile;
use crate::kernel_locks::KernelLocks;
use crate::nodes::{cstr, open_at, proc_path, stat_fd, Nodes, ROOT};
use crate::table::TABLE_NAME;

/// How long the kernel may keep attributes and entries: every change goes
/// through this mount, which is the backing directory's only writer.
const TTL: Duration = Duration::from_secs(1);

/// An open keeps the kernel's page cache of the file (else FUSE empties it
/// at every open, and a database's tables are read from the disk again and
/// again): every change to a file's data passes through this mount.
const KEEP_CACHE: FopenFlags = FopenFlags::FOPEN_KEEP_CACHE;
/// The largest WRITE the kernel sends.
const MAX_WRITE: u32 = 1 << 20;

/// The mount's filesystem.
pub struct WcacheFs {
    pub nodes: Nodes,
    pub data: Data,
    pub callers: Arc<Callers>,
    /// Requests that hold the kernel's inode lock (`kernel_locks.rs`).
    locks: Arc<KernelLocks>,
    /// Open directories' entries, by handle.
    dirs: Mutex<(u64, std::collections::HashMap<u64, Vec<DirEntry>>)>,
}

struct DirEntry {
    ino: u64,
    kind: FileType,
    name: Vec<u8>,
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs())
    }
}

fn attr(ino: u64, st: &libc::stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: kind_of(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: 4096,
        flags: 0,
    }
}

/// The table's name in the root: hidden.
fn hidden(parent: u64, name: &OsStr) -> bool {
    parent == ROOT && name.as_bytes() == TABLE_NAME.as_bytes()
}

fn check(r: libc::c_int) -> Result<(), Errno> {
    if r < 0 {
        Err(Errno::from(std::io::Error::last_os_error()))
    } else {
        Ok(())
    }
}

impl WcacheFs {
    pub fn new(
        nodes: Nodes,
        data: Data,
        callers: Arc<Callers>,
        locks: Arc<KernelLocks>,
    ) -> WcacheFs {
        WcacheFs {
            nodes,
            data,
            callers,
            locks,
            dirs: Mutex::new((1, Default::default())),
        }
    }

    fn caller(&self, req: &Request) -> Caller {
        self.callers.of(req.pid())
    }

    fn fd(&self, ino: INodeNo) -> Result<Arc<std::os::fd::OwnedFd>, Errno> {
        self.nodes.fd(ino.0).map_err(errno)
    }

    /// The attributes of `ino`, with the size the mount holds for an open file.
    fn stat(&self, ino: u64) -> Result<FileAttr, Errno> {
        let fd = self.nodes.fd(ino).map_err(errno)?;
        let mut st = stat_fd(fd.as_raw_fd()).map_err(errno)?;
        if let Some(file) = self.nodes.opened(ino) {
            st.st_size = file.size() as i64;
        }
        Ok(attr(ino, &st))
    }

    /// Looks a new entry up after it was made, and gives it to the caller.
    fn entry(&self, req: &Request, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
        let (ino, st) = self.nodes.lookup(parent.0, name).map_err(errno)?;
        if req.uid() != 0 || req.gid() != 0 {
            let fd = self.nodes.fd(ino).map_err(errno)?;
            // SAFETY: a valid descriptor and an empty C string.
            check(unsafe {
                libc::fchownat(
                    fd.as_raw_fd(),
                    c"".as_ptr(),
                    req.uid(),
                    req.gid(),
                    libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
                )
            })?;
        }
        let mut a = attr(ino, &st);
        a.uid = req.uid();
        a.gid = req.gid();
        Ok(a)
    }

    fn set_times(
        &self,
        fd: i32,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
    ) -> Result<(), Errno> {
        let spec = |t: Option<TimeOrNow>| match t {
            None => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
            Some(TimeOrNow::Now) => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_NOW,
            },
            Some(TimeOrNow::SpecificTime(t)) => {
                let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                libc::timespec {
                    tv_sec: d.as_secs() as i64,
                    tv_nsec: d.subsec_nanos() as i64,
                }
            }
        };
        let times = [spec(atime), spec(mtime)];
        let path = proc_path(fd);
        // SAFETY: a valid path and two timespecs.
        check(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) })
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr_all(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        owner: (Option<u32>, Option<u32>),
        size: Option<u64>,
        times: (Option<TimeOrNow>, Option<TimeOrNow>),
    ) -> Result<FileAttr, Errno> {
        let fd = self.fd(ino)?;
        let raw = fd.as_raw_fd();
        if let Some(mode) = mode {
            let path = proc_path(raw);
            // SAFETY: a valid path.
            check(unsafe { libc::chmod(path.as_ptr(), mode & 0o7777) })?;
        }
        if owner.0.is_some() || owner.1.is_some() {
            let (uid, gid) = (owner.0.unwrap_or(u32::MAX), owner.1.unwrap_or(u32::MAX));
            // SAFETY: a valid descriptor and an empty C string.
            check(unsafe {
                libc::fchownat(
                    raw,
                    c"".as_ptr(),
                    uid,
                    gid,
                    libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
                )
            })?;
        }
        if let Some(size) = size {
            let file = self.nodes.file(ino.0).map_err(errno)?;
            self.data.set_size(&file, size, self.caller(req))?;
        }
        if times.0.is_some() || times.1.is_some() {
            self.set_times(raw, times.0, times.1)?;
        }
        self.stat(ino.0)
    }

    fn read_dir(&self, ino: INodeNo) -> Result<Vec<DirEntry>, Errno> {
        let fd = self.fd(ino)?;
        let path = proc_path(fd.as_raw_fd());
        let dir =
            std::fs::read_dir(Path::new(OsStr::from_bytes(path.as_bytes()))).map_err(errno)?;
        let mut entries = vec![
            DirEntry {
                ino: ino.0,
                kind: FileType::Directory,
                name: b".".to_vec(),
            },
            DirEntry {
                ino: ino.0,
                kind: FileType::Directory,
                name: b"..".to_vec(),
            },
        ];
        for e in dir {
            let e = e.map_err(errno)?;
            if hidden(ino.0, &e.file_name()) {
                continue;
            }
            let kind = e
                .file_type()
                .ok()
                .and_then(FileType::from_std)
                .unwrap_or(FileType::RegularFile);
            use std::os::unix::fs::DirEntryExt;
            entries.push(DirEntry {
                ino: e.ino(),
                kind,
                name: e.file_name().as_bytes().to_vec(),
            });
        }
        Ok(entries)
    }

    /// Opens (creating) `name` in `parent` for `create`.
    fn create_file(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<FileAttr, Errno> {
        let dir = self.fd(parent)?;
        let c = cstr(name).map_err(errno)?;
        let keep = flags & (libc::O_EXCL | libc::O_CREAT);
        let made = open_at(
            dir.as_raw_fd(),
            &c,
            libc::O_RDWR | libc::O_CREAT | keep,
            mode & !umask & 0o7777,
        )
        .map_err(errno)?;
        drop(made);
        let a = self.entry(req, parent, name)?;
        let file = self.nodes.file(a.ino.0).map_err(errno)?;
        if flags & libc::O_TRUNC != 0 {
            self.data.set_size(&file, 0, self.caller(req))?;
        }
        self.stat(a.ino.0)
    }
}

impl Filesystem for WcacheFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if hidden(parent.0, name) {
            return reply.error(Errno::ENOENT);
        }
        match self.nodes.lookup(parent.0, name) {
            Ok((ino, st)) => {
                let mut a = attr(ino, &st);
                if let Some(file) = self.nodes.opened(ino) {
                    a.size = file.size();
                }
                reply.entry(&TTL, &a, Generation(0))
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.nodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.stat(ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.setattr_all(req, ino, mode, (uid, gid), size, (atime, mtime)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let run = || -> Result<Vec<u8>, Errno> {
            let fd = self.fd(ino)?;
            let mut buf = vec![0u8; libc::PATH_MAX as usize];
            // SAFETY: a valid descriptor, empty C string and buffer.
            let n = unsafe {
                libc::readlinkat(
                    fd.as_raw_fd(),
                    c"".as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            check(n as libc::c_int)?;
            buf.truncate(n as usize);
            Ok(buf)
        };
        match run() {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let made = self.make(req, parent, name, |dir, c| {
            // SAFETY: a valid descriptor and C string.
            unsafe { libc::mknodat(dir, c.as_ptr(), mode & !umask, rdev as libc::dev_t) }
        });
        reply_entry(reply, made);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let made = self.make(req, parent, name, |dir, c| {
            // SAFETY: a valid descriptor and C string.
            unsafe { libc::mkdirat(dir, c.as_ptr(), mode & !umask & 0o7777) }
        });
        reply_entry(reply, made);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.remove(parent, name, 0));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.remove(parent, name, libc::AT_REMOVEDIR));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let Ok(t) = cstr(target.as_os_str()) else {
            return reply.error(Errno::EINVAL);
        };
        let made = self.make(req, parent, link_name, |dir, c| {
            // SAFETY: a valid descriptor and C strings.
            unsafe { libc::symlinkat(t.as_ptr(), dir, c.as_ptr()) }
        });
        reply_entry(reply, made);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let run = || -> Result<(), Errno> {
            if hidden(parent.0, name) || hidden(newparent.0, newname) {
                return Err(Errno::EPERM);
            }
            let (from, to) = (self.fd(parent)?, self.fd(newparent)?);
            let (a, b) = (cstr(name).map_err(errno)?, cstr(newname).map_err(errno)?);
            // SAFETY: valid descriptors and C strings.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_renameat2,
                    from.as_raw_fd(),
                    a.as_ptr(),
                    to.as_raw_fd(),
                    b.as_ptr(),
                    flags.bits(),
                )
            };
            check(r as libc::c_int)
        };
        reply_empty(reply, run());
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let run = || -> Result<FileAttr, Errno> {
            let (fd, dir) = (self.fd(ino)?, self.fd(newparent)?);
            let c = cstr(newname).map_err(errno)?;
            // SAFETY: valid descriptors and C strings.
            check(unsafe {
                libc::linkat(
                    fd.as_raw_fd(),
                    c"".as_ptr(),
                    dir.as_raw_fd(),
                    c.as_ptr(),
                    libc::AT_EMPTY_PATH,
                )
            })?;
            let (ino, st) = self.nodes.lookup(newparent.0, newname).map_err(errno)?;
            let _ = req;
            Ok(attr(ino, &st))
        };
        match run() {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        // Known from its open on, so that a critical caller blocked on the
        // file before its first write is seen (`kernel_locks.rs`).
        let caller = self.caller(req);
        let run = || -> Result<(), Errno> {
            let st = stat_fd(self.fd(ino)?.as_raw_fd()).map_err(errno)?;
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Ok(());
            }
            let file = self.nodes.file(ino.0).map_err(errno)?;
            if flags.0 & libc::O_TRUNC != 0 && flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                self.data.set_size(&file, 0, caller)?;
            }
            Ok(())
        };
        match run() {
            Ok(()) => reply.opened(FileHandle(0), KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let run = || -> Result<Vec<u8>, Errno> {
            let file = self.nodes.file(ino.0).map_err(errno)?;
            self.data.read(&file, offset, size)
        };
        match run() {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // A write from the kernel's page cache (writeback, mmap) has no caller.
        let caller = if write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
            Caller::default()
        } else {
            self.caller(req)
        };
        let durable = flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0;
        let run = || -> Result<u32, Errno> {
            let file = self.nodes.file(ino.0).map_err(errno)?;
            let _hold = self.locks.hold(ino.0, file.window(), caller);
            self.data.write(&file, offset, data, caller, durable)
        };
        match run() {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let file = self.nodes.opened(ino.0);
        let caller = self.caller(req);
        self.callers.note_fsync(caller.issuer);
        let window = file.as_deref().and_then(BackingFile::window);
        let _hold = self.locks.hold(ino.0, window, caller);
        reply_empty(reply, self.data.fsync(file.as_deref(), caller));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.read_dir(ino) {
            Ok(entries) => {
                let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
                let fh = dirs.0;
                dirs.0 += 1;
                dirs.1.insert(fh, entries);
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entries) = dirs.1.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(
                INodeNo(e.ino),
                (i + 1) as u64,
                e.kind,
                OsStr::from_bytes(&e.name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let run = || -> Result<(), Errno> {
            let fd = self.fd(ino)?;
            let dir = open_at(
                libc::AT_FDCWD,
                &proc_path(fd.as_raw_fd()),
                libc::O_RDONLY | libc::O_DIRECTORY,
                0,
            )
            .map_err(errno)?;
            std::fs::File::from(dir).sync_all().map_err(errno)
        };
        reply_empty(reply, run());
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let run = || -> Result<libc::statvfs, Errno> {
            let fd = self.fd(INodeNo(ROOT))?;
            // SAFETY: an all-zero statvfs is a valid out-buffer.
            let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
            // SAFETY: a valid descriptor and out-buffer.
            check(unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut s) })?;
            Ok(s)
        };
        match run() {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        if hidden(parent.0, name) {
            return reply.error(Errno::EPERM);
        }
        match self.create_file(req, parent, name, mode, umask, flags) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let run = || -> Result<(), Errno> {
            if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                // Punching holes and zeroing ranges change data: not offered.
                return Err(Errno::EOPNOTSUPP);
            }
            let file = self.nodes.file(ino.0).map_err(errno)?;
            let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
            // SAFETY: a valid descriptor.
            let r = unsafe {
                libc::fallocate(
                    file.fd.as_raw_fd(),
                    libc::FALLOC_FL_KEEP_SIZE,
                    offset as i64,
                    length as i64,
                )
            };
            check(r)?;
            if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && end > file.size() {
                self.data.set_size(&file, end, self.caller(req))?;
            }
            Ok(())
        };
        reply_empty(reply, run());
    }
}

impl WcacheFs {
    /// Makes `name` in `parent` with `make(dir, name)` (mknodat, mkdirat,
    /// symlinkat: 0 or -1), then looks it up and gives it to the caller.
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        make: impl FnOnce(i32, &std::ffi::CStr) -> libc::c_int,
    ) -> Result<FileAttr, Errno> {
        let dir = self.fd(parent)?;
        let c = cstr(name).map_err(errno)?;
        check(make(dir.as_raw_fd(), &c))?;
        self.entry(req, parent, name)
    }

    fn remove(&self, parent: INodeNo, name: &OsStr, flags: i32) -> Result<(), Errno> {
        if hidden(parent.0, name) {
            return Err(Errno::EPERM);
        }
        let dir = self.fd(parent)?;
        let c = cstr(name).map_err(errno)?;
        // SAFETY: a valid descriptor and C string.
        check(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) })
    }
}

fn reply_entry(reply: ReplyEntry, r: Result<FileAttr, Errno>) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}
