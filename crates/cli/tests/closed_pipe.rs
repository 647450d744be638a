//! Output that has nowhere to go is never a panic: a server whose standard
//! output is a pipe nobody reads goes on serving and stops cleanly, and a
//! tool whose reader left (`wcache status | head -1`) ends quietly, by
//! SIGPIPE as other Unix tools do, not with a panic (exit 101).

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WCACHE: &str = env!("CARGO_BIN_EXE_wcache");

/// The write end of a pipe whose read end is already closed: every write
/// to it fails with EPIPE (or raises SIGPIPE).
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills two descriptors we then own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: both descriptors were just created and are owned here only.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

#[test]
fn a_closed_stdout_never_makes_wcache_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = |name: &str| dir.path().join(name).display().to_string();
    let socket = dir.path().join("w.sock");
    let mut server = Command::new(WCACHE)
        .args(["serve", "--socket", &d("w.sock"), "--control", &d("w.ctl")])
        .args(["--cache", &d("cache.img"), "--cache-size", "8M"])
        .args(["--export", &format!("disk={}", d("backing.img"))])
        .args(["--backing-size", "8M"])
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    let start = Instant::now();
    while !socket.exists() {
        if let Some(status) = server.try_wait().expect("try_wait") {
            let out = server.wait_with_output().expect("output");
            panic!(
                "serve with a closed stdout exited {status}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "serve did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for args in [
        vec!["status", "--control", &d("w.ctl")],
        vec!["stats", "--control", &d("w.ctl")],
        vec!["--help"],
    ] {
        let out = Command::new(WCACHE)
            .args(&args)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
        assert!(
            out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
            "{args:?}: {:?}: {stderr}",
            out.status
        );
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let out = server.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "serve panicked: {stderr}");
    assert!(out.status.success(), "serve: {:?}: {stderr}", out.status);
    // And the tools on the stopped server's cache.
    for tool in ["inspect", "check"] {
        let out = Command::new(WCACHE)
            .args([tool, "--cache", &d("cache.img")])
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{tool} panicked: {stderr}");
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{tool}: {stderr}");
    }
}
