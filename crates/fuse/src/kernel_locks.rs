//! The kernel's inode lock, held for a request in service here: FUSE
//! holds a file's inode lock across each FSYNC and WRITE request it sends
//! (and a truncation's or an allocation's), and every `lseek(SEEK_END)`,
//! `write`, `fsync`, `ftruncate` and `fallocate` of the file takes it. A
//! critical process blocked there waits for a request of another process,
//! and sends none of its own that would show it (a database's backends
//! stop at `lseek(SEEK_END)` of a table while its checkpointer's fsync of
//! that table writes past the cache to the disk). A watcher finds such
//! waits in `/proc` and lends the request's issuer criticality until the
//! request ends: process criticality inheritance (Kim et al. §4.2.1) for
//! a lock the mount cannot see, and, through the file's FLUSH, I/O
//! criticality inheritance for the writes in flight that the request
//! waits for.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::volumes::Volumes;
use wcache_core::RequestFlags;

use crate::callers::{Caller, Callers};

/// A request held this long before the watcher looks for its waiters.
const HELD_BEFORE_LOOKING: Duration = Duration::from_millis(10);
/// How often the watcher looks while a request is held that long.
const LOOK_EVERY: Duration = Duration::from_millis(10);
/// Callers seen this recently are the watcher's candidates.
const CANDIDATE_SEEN_WITHIN: Duration = Duration::from_secs(60);

/// The system calls that take a file's inode lock on FUSE, their first
/// argument the file's descriptor.
const LOCKING_CALLS: [libc::c_long; 11] = [
    libc::SYS_lseek,
    libc::SYS_write,
    libc::SYS_pwrite64,
    libc::SYS_writev,
    libc::SYS_pwritev,
    libc::SYS_pwritev2,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_copy_file_range,
];

/// One request that holds its file's inode lock in the kernel.
struct Hold {
    /// The file's inode number on the mount (as the kernel knows it).
    ino: u64,
    issuer: u32,
    /// The file's window, for the FLUSH that promotes its writes in flight.
    window: Option<u64>,
    since: Instant,
    /// Criticality lent to `issuer` for it (ended with the request).
    lent: bool,
}

#[derive(Default)]
struct State {
    next: u64,
    holds: HashMap<u64, Hold>,
    stop: bool,
    /// Criticality lent since the mount started.
    lent: u64,
}

/// The requests in service that hold an inode lock, and their watcher.
pub struct KernelLocks {
    state: Mutex<State>,
    wake: Condvar,
    volumes: Arc<Volumes>,
    callers: Arc<Callers>,
    mountpoint: PathBuf,
    watcher: Mutex<Option<JoinHandle<()>>>,
}

/// A request's hold, released when the request ends.
pub struct HoldGuard<'a> {
    locks: &'a KernelLocks,
    id: u64,
}

impl Drop for HoldGuard<'_> {
    fn drop(&mut self) {
        let hold = self.locks.lock().holds.remove(&self.id);
        if let Some(hold) = hold.filter(|h| h.lent) {
            tracing::debug!(
                issuer = hold.issuer,
                ino = hold.ino,
                held_ms = hold.since.elapsed().as_millis() as u64,
                "the request lent criticality ended"
            );
            if let Err(e) = self
                .locks
                .volumes
                .engine()
                .end_inherited_criticality(hold.issuer)
            {
                tracing::warn!("issuer {}: {e}", hold.issuer);
            }
        }
    }
}

impl KernelLocks {
    /// The holds of the mount at `mountpoint` (canonical), its watcher started.
    pub fn start(
        volumes: Arc<Volumes>,
        callers: Arc<Callers>,
        mountpoint: &Path,
    ) -> Arc<KernelLocks> {
        let locks = Arc::new(KernelLocks {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            volumes,
            callers,
            mountpoint: mountpoint.to_path_buf(),
            watcher: Mutex::new(None),
        });
        let l = Arc::clone(&locks);
        match std::thread::Builder::new()
            .name("wcache-inode-locks".into())
            .spawn(move || l.watch())
        {
            Ok(handle) => *locks.watcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle),
            Err(e) => tracing::warn!("the inode lock watcher: {e}"),
        }
        locks
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request of `caller` on the file `ino` (its window, if it has one)
    /// holds the file's inode lock until the guard drops. None for a
    /// caller that is critical already, or unknown (nothing to lend).
    pub fn hold(&self, ino: u64, window: Option<u64>, caller: Caller) -> Option<HoldGuard<'_>> {
        if caller.critical || caller.issuer == 0 {
            return None;
        }
        let mut st = self.lock();
        st.next += 1;
        let id = st.next;
        st.holds.insert(
            id,
            Hold {
                ino,
                issuer: caller.issuer,
                window,
                since: Instant::now(),
                lent: false,
            },
        );
        if st.holds.len() == 1 {
            self.wake.notify_one();
        }
        Some(HoldGuard { locks: self, id })
    }

    /// Times criticality was lent since the mount started.
    pub fn lent(&self) -> u64 {
        self.lock().lent
    }

    /// Its counter, for `wcache stats` and the metrics.
    pub fn metrics(&self) -> Vec<wcache_io::ops::Metric> {
        vec![wcache_io::ops::Metric {
            name: "mount_inode_lock_lends".into(),
            kind: "counter".into(),
            help: "Requests holding a file's inode lock in the kernel that a critical process \
                   was blocked on, lent criticality"
                .into(),
            value: self.lent(),
        }]
    }

    /// Stops the watcher.
    pub fn stop(&self) {
        self.lock().stop = true;
        self.wake.notify_all();
        let handle = self
            .watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }

    fn watch(&self) {
        let mut mount_id = None;
        loop {
            let st = self.lock();
            if st.stop {
                return;
            }
            let now = Instant::now();
            let waiting: Vec<u64> = st
                .holds
                .values()
                .filter(|h| !h.lent && now.duration_since(h.since) >= HELD_BEFORE_LOOKING)
                .map(|h| h.ino)
                .collect();
            if st.holds.is_empty() {
                let _ = self.wake.wait_timeout(st, Duration::from_secs(1));
                continue;
            }
            drop(st);
            if !waiting.is_empty() {
                if mount_id.is_none() {
                    mount_id = mount_id_of(&self.mountpoint);
                }
                if let Some(mount_id) = mount_id {
                    let blocked = self.critical_waits(mount_id, &waiting);
                    if !blocked.is_empty() {
                        self.lend(&blocked);
                    }
                }
            }
            std::thread::sleep(LOOK_EVERY);
        }
    }

    /// The inodes of `inos` that a critical thread is blocked on now (in
    /// a system call that takes the inode lock, on a file of this mount).
    fn critical_waits(&self, mount_id: u64, inos: &[u64]) -> Vec<u64> {
        let is_critical = |issuer: u32| self.volumes.engine().issuer_is_critical(issuer);
        let mut found = Vec::new();
        for tid in self
            .callers
            .critical_threads(CANDIDATE_SEEN_WITHIN, is_critical)
        {
            if let Some((mnt, ino)) = blocked_on(tid) {
                if mnt == mount_id && inos.contains(&ino) && !found.contains(&ino) {
                    found.push(ino);
                }
            }
        }
        found
    }

    /// Lends criticality to the holders of `inos` and promotes their
    /// files' bypass writes in flight.
    fn lend(&self, inos: &[u64]) {
        let mut promote = Vec::new();
        {
            let mut st = self.lock();
            let st = &mut *st;
            for hold in st.holds.values_mut() {
                // A holder critical already (a hinted process) needs nothing lent.
                if hold.lent
                    || !inos.contains(&hold.ino)
                    || self.volumes.engine().issuer_is_critical(hold.issuer)
                {
                    continue;
                }
                match self.volumes.engine().inherit_criticality(hold.issuer) {
                    Ok(_) => {
                        tracing::debug!(
                            issuer = hold.issuer,
                            ino = hold.ino,
                            held_ms = hold.since.elapsed().as_millis() as u64,
                            "criticality lent: a critical thread waits on the file's inode lock"
                        );
                        hold.lent = true;
                        st.lent += 1;
                        promote.extend(hold.window.map(|w| (w, hold.issuer)));
                    }
                    Err(e) => tracing::warn!("issuer {}: {e}", hold.issuer),
                }
            }
        }
        for (window, issuer) in promote {
            let flags = RequestFlags {
                fua: false,
                sync: true,
                critical: true,
                issuer,
            };
            if let Err(e) = crate::data::flush_file(self.volumes.of(window), window, flags) {
                tracing::warn!("promoting the writes of file window {window:#x}: {e:?}");
            }
        }
    }
}

/// The mount ID (`/proc/self/mountinfo`'s first field) of the mount at
/// `mountpoint`.
fn mount_id_of(mountpoint: &Path) -> Option<u64> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let point = unescape_mountinfo(fields.get(4)?);
        (Path::new(&point) == mountpoint)
            .then(|| fields[0].parse().ok())
            .flatten()
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            match u8::from_str_radix(&code, 8) {
                Ok(b) => out.push(b as char),
                Err(_) => {
                    out.push('\\');
                    out.push_str(&code);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The file (mount ID, inode number) thread `tid` is blocked on in a
/// system call that takes the inode lock, if it is.
fn blocked_on(tid: u32) -> Option<(u64, u64)> {
    let call = std::fs::read_to_string(format!("/proc/{tid}/syscall")).ok()?;
    let (nr, fd) = parse_syscall(&call)?;
    if !LOCKING_CALLS.contains(&nr) {
        return None;
    }
    let info = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")).ok()?;
    parse_fdinfo(&info)
}

/// `/proc/TID/syscall`: the call's number and its first argument, while
/// the thread is blocked in one ("running" or "-1 ..." otherwise).
fn parse_syscall(text: &str) -> Option<(libc::c_long, u64)> {
    let mut words = text.split_whitespace();
    let nr: libc::c_long = words.next()?.parse().ok().filter(|nr| *nr >= 0)?;
    let arg = words.next()?.strip_prefix("0x")?;
    Some((nr, u64::from_str_radix(arg, 16).ok()?))
}

/// `/proc/TID/fdinfo/FD`: the file's mount ID and inode number.
fn parse_fdinfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((field("mnt_id:")?, field("ino:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_lseek_names_its_descriptor() {
        assert_eq!(
            parse_syscall("8 0x5 0x0 0x2 0x7ffd 0x0 0x0 0x7ffd1 0x7f12\n"),
            Some((libc::SYS_lseek, 5))
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffd 0x7f12\n"), None);
        assert_eq!(parse_syscall(""), None);
    }

    #[test]
    fn fdinfo_gives_the_mount_and_the_inode() {
        let text = "pos:\t8192\nflags:\t0100002\nmnt_id:\t412\nino:\t77\n";
        assert_eq!(parse_fdinfo(text), Some((412, 77)));
        assert_eq!(parse_fdinfo("pos:\t0\n"), None);
    }

    #[test]
    fn this_thread_blocked_in_a_read_is_not_in_a_locking_call() {
        // A thread blocked reading a pipe: in a system call, not one of the
        // inode lock's, so nothing is reported.
        let (r, w) = nix_pipe();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no arguments.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let mut b = [0u8; 1];
            // SAFETY: a valid descriptor and buffer.
            unsafe { libc::read(r, b.as_mut_ptr().cast(), 1) };
        });
        let tid = rx.recv().unwrap();
        let start = Instant::now();
        loop {
            let call = std::fs::read_to_string(format!("/proc/{tid}/syscall")).unwrap();
            if let Some((nr, fd)) = parse_syscall(&call) {
                assert_eq!((nr, fd), (libc::SYS_read, r as u64));
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "{call}");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(blocked_on(tid), None);
        // SAFETY: a valid descriptor and buffer.
        unsafe { libc::write(w, [1u8].as_ptr().cast(), 1) };
        t.join().unwrap();
    }

    fn nix_pipe() -> (i32, i32) {
        let mut fds = [0; 2];
        // SAFETY: a valid two-element array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        (fds[0], fds[1])
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }
}
