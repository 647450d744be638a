//! Ownership of the files and devices a cache uses: one server, flush or
//! check at a time. It exists because two users of one cache device (or
//! one backing) each believe they own every slot and page, and the second
//! frees, formats or overwrites what the first acknowledged.
//!
//! A `DeviceLock` is an advisory `flock(2)` on a descriptor of its own,
//! held for as long as the lock value lives: exclusive for whoever writes
//! (serve, offline flush, backing-recover), shared for read-only tools
//! (check, inspect). A block device opened exclusively is also claimed with
//! `O_EXCL`, as the kernel's own caches claim theirs: then a mounted
//! filesystem, device-mapper or another cache holding it refuses us, and we
//! refuse them. A lock that is held is an error naming the holder (pid and
//! command line, from `/proc/locks`); it is taken before anything is
//! written, so a refused user changes nothing. A lock dies with its
//! process, so a crash (even `kill -9`) never leaves a stale one.
//! It must never wait for a lock (a second server must fail, not queue) or
//! lock a remote backing (those fence by their own means).

use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Who may share a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// Read-only tools: any number of them, and no writer.
    Shared,
    /// One writer and nobody else.
    Exclusive,
}

/// Why a lock could not be taken. Nothing was written by whoever asked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "{what} {path} is in use by {holder}: refused, nothing was touched. \
         {hint}"
    )]
    Held {
        what: &'static str,
        path: String,
        holder: String,
        hint: &'static str,
    },
    #[error(
        "{what} {path} is a block device claimed by the kernel or another program \
         (a mounted filesystem, device-mapper, another cache): refused, nothing was touched"
    )]
    Claimed { what: &'static str, path: String },
    #[error("cannot lock {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
}

/// What a refused user can do, by what it tried.
const HINT_SERVER: &str = "A running server is operated through its control socket \
     (wcache status, stats, flush, set); stop it first (SIGTERM) to use its files otherwise.";

/// A held lock on one file, block device or directory; released when dropped.
#[derive(Debug)]
pub struct DeviceLock {
    _file: File,
    mode: LockMode,
}

impl DeviceLock {
    /// Takes the lock on `path` (which must exist), without waiting.
    /// `what` names it in errors ("cache device", "backing", ...).
    pub fn acquire(
        path: &Path,
        mode: LockMode,
        what: &'static str,
    ) -> Result<DeviceLock, LockError> {
        let shown = path.display().to_string();
        let io = |source| LockError::Io {
            what,
            path: shown.clone(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        if mode == LockMode::Exclusive && meta.file_type().is_block_device() {
            options.custom_flags(libc::O_EXCL);
        }
        let file = match options.open(path) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(match holders(&meta) {
                    Some(holder) => held(what, shown, holder),
                    None => LockError::Claimed { what, path: shown },
                });
            }
            Err(e) => return Err(io(e)),
        };
        let operation = match mode {
            LockMode::Shared => libc::LOCK_SH,
            LockMode::Exclusive => libc::LOCK_EX,
        } | libc::LOCK_NB;
        let mut tries = 0;
        // SAFETY: flock(2) on a descriptor this function owns.
        while unsafe { libc::flock(file.as_raw_fd(), operation) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::WouldBlock {
                return Err(io(e));
            }
            match holders(&meta) {
                Some(holder) => return Err(held(what, shown, holder)),
                // No process listed: a child forked by this process (or
                // another holder's) between its fork and its exec holds a
                // copy of the locked descriptor for a moment. Try again.
                None if tries < TRANSIENT_TRIES => {
                    tries += 1;
                    std::thread::sleep(TRANSIENT_WAIT);
                }
                None => return Err(held(what, shown, "another process".to_string())),
            }
        }
        Ok(DeviceLock { _file: file, mode })
    }

    pub fn mode(&self) -> LockMode {
        self.mode
    }
}

/// A lock held by no process `/proc/locks` lists is tried again this many
/// times, this long apart (a child between fork and exec holds it).
const TRANSIENT_TRIES: u32 = 50;
const TRANSIENT_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

fn held(what: &'static str, path: String, holder: String) -> LockError {
    LockError::Held {
        what,
        path,
        holder,
        hint: HINT_SERVER,
    }
}

/// The processes `/proc/locks` lists as holding a lock on the file of
/// `meta`, described; None when none is listed.
fn holders(meta: &std::fs::Metadata) -> Option<String> {
    // Read again when nothing is found: a line of /proc/locks can be
    // skipped when locks before it go away between two reads of the file.
    (0..3).find_map(|_| holders_once(meta))
}

/// `holders` from one reading of /proc/locks, in one read where it fits
/// (the kernel then lists the locks in one pass).
fn holders_once(meta: &std::fs::Metadata) -> Option<String> {
    let mut buf = vec![0u8; 1 << 20];
    let mut file = std::fs::File::open("/proc/locks").ok()?;
    let n = std::io::Read::read(&mut file, &mut buf).ok()?;
    if n == buf.len() {
        std::io::Read::read_to_end(&mut file, &mut buf).ok()?;
    } else {
        buf.truncate(n);
    }
    let text = String::from_utf8_lossy(&buf);
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let key = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let mut pids: Vec<i32> = text
        .lines()
        .filter(|line| !line.contains("->")) // waiters, not holders
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // "1: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END"
            (fields.get(5) == Some(&key.as_str()))
                .then(|| fields.get(4)?.parse().ok())
                .flatten()
        })
        .filter(|&pid: &i32| pid > 0)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    if pids.is_empty() {
        return None;
    }
    Some(
        pids.iter()
            .map(|&pid| describe_process(pid))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// "pid N (command line)", or "this process (pid N)".
pub fn describe_process(pid: i32) -> String {
    if pid == std::process::id() as i32 {
        return format!("this process (pid {pid}): is it given twice?");
    }
    let command = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|raw| {
            let words: Vec<String> = raw
                .split(|&b| b == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            let mut line = words.join(" ");
            if line.chars().count() > 120 {
                line = line.chars().take(117).collect::<String>() + "...";
            }
            line
        })
        .filter(|line| !line.is_empty());
    match command {
        Some(line) => format!("pid {pid} ({line})"),
        None => format!("pid {pid}"),
    }
}

/// Who answers on the Unix socket at `path`, if anything does: a socket
/// that answers belongs to a live server and must not be replaced.
pub fn socket_answering(path: &Path) -> Option<String> {
    let stream = UnixStream::connect(path).ok()?;
    Some(match crate::ops::control::peer_credentials(&stream) {
        Ok(cred) if cred.pid > 0 => describe_process(cred.pid),
        _ => "a live process".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exclusive_lock_refuses_every_other_and_names_this_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cache.img");
        std::fs::write(&path, b"x").expect("write");
        let first = DeviceLock::acquire(&path, LockMode::Exclusive, "cache device").expect("lock");
        for mode in [LockMode::Exclusive, LockMode::Shared] {
            let e = DeviceLock::acquire(&path, mode, "cache device").expect_err("held");
            let text = e.to_string();
            assert!(text.contains("is in use by this process"), "{text}");
            assert!(
                text.contains(&format!("pid {}", std::process::id())),
                "{text}"
            );
            assert!(text.contains("cache device"), "{text}");
        }
        drop(first);
        DeviceLock::acquire(&path, LockMode::Exclusive, "cache device").expect("free again");
    }

    #[test]
    fn shared_locks_share_and_keep_a_writer_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cache.img");
        std::fs::write(&path, b"x").expect("write");
        let a = DeviceLock::acquire(&path, LockMode::Shared, "cache device").expect("first");
        let b = DeviceLock::acquire(&path, LockMode::Shared, "cache device").expect("second");
        assert_eq!(a.mode(), LockMode::Shared);
        let e = DeviceLock::acquire(&path, LockMode::Exclusive, "cache device")
            .expect_err("readers hold it");
        assert!(matches!(e, LockError::Held { .. }), "{e}");
        drop((a, b));
        DeviceLock::acquire(&path, LockMode::Exclusive, "cache device").expect("free");
    }

    #[test]
    fn a_directory_locks_and_a_missing_path_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _held = DeviceLock::acquire(dir.path(), LockMode::Exclusive, "data directory")
            .expect("directory");
        let e = DeviceLock::acquire(dir.path(), LockMode::Exclusive, "data directory")
            .expect_err("held");
        assert!(e.to_string().contains("data directory"), "{e}");
        let missing = dir.path().join("nope");
        let e = DeviceLock::acquire(&missing, LockMode::Shared, "backing").expect_err("missing");
        assert!(e.to_string().contains("nope"), "{e}");
    }

    #[test]
    fn a_socket_that_answers_is_named_and_a_dead_one_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let who = socket_answering(&path).expect("answers");
        assert!(who.contains(&std::process::id().to_string()), "{who}");
        drop(listener);
        assert_eq!(socket_answering(&path), None, "nothing listens");
    }
}
