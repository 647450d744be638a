//! Exclusive ownership: while a server (or an offline flush) uses a cache
//! device, a backing or a data directory, a second server, an offline
//! flush, `check` and `inspect` on any of them are refused with an error
//! naming the holder's pid, and change nothing: every byte of the cache
//! and backing files is as it was, and the first server's acknowledged
//! writes all read back after its restart.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{serve_scattered, wcache, Nbd, Served};

const PAGE: usize = 4096;
const PAGES: u64 = 100;

fn content(page: u64) -> Vec<u8> {
    (0..PAGE)
        .map(|i| (page as usize * 131 + i * 7) as u8 | 1)
        .collect()
}

/// Runs `wcache ARGS` that must exit by itself within 20 s (a refused
/// start); returns (success, stdout + stderr). One that keeps running is
/// killed and fails the test: it was not refused.
fn run_to_exit(args: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("out.log");
    let file = std::fs::File::create(&log).expect("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_wcache"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .spawn()
        .expect("run wcache");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "wcache {args:?} was not refused: still running after 20 s: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status.success(),
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

fn files(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(dir.join("data/cache.img")).expect("cache"),
        std::fs::read(dir.join("backing.img")).expect("backing"),
    )
}

/// A server that destages nothing on its own (no idle drain, no age
/// bound), so that its files stay still while others try them; its cache
/// is the default one in its data directory `data`.
fn serve_still(dir: &Path) -> Served {
    let d = |name: &str| dir.join(name).display().to_string();
    Served::start(
        &[
            "--data-dir",
            &d("data"),
            "--cache-size",
            "8M",
            "--export",
            &format!("disk={}", d("backing.img")),
            "--backing-size",
            "8M",
            "--idle-destages",
            "0",
            "--max-dirty-age",
            "0",
            "--control",
            &d("w.ctl"),
        ],
        &dir.join("w.sock"),
    )
}

fn write_pages(socket: &Path) {
    let mut nbd = Nbd::connect(socket, "disk").expect("connect");
    for p in 0..PAGES {
        nbd.write(p * 3 * PAGE as u64, &content(p), false)
            .expect("write");
    }
    nbd.flush().expect("flush");
}

fn assert_refused(what: &str, (ok, out): (bool, String), holder: libc::pid_t, noun: &str) {
    assert!(!ok, "{what}: not refused: {out}");
    assert!(
        out.contains(&format!("pid {holder}")),
        "{what}: the holder (pid {holder}) is not named: {out}"
    );
    assert!(out.contains(noun), "{what}: does not say {noun:?}: {out}");
    assert!(
        !out.contains("panicked"),
        "{what}: a panic is not an error: {out}"
    );
}

#[test]
fn a_second_user_of_a_served_cache_backing_or_directory_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = |name: &str| dir.path().join(name).display().to_string();
    let first = serve_still(dir.path());
    let holder = first.pid();
    write_pages(&first.socket);
    let before = files(dir.path());

    let other = tempfile::tempdir().expect("tempdir");
    let o = |name: &str| other.path().join(name).display().to_string();
    let backing = format!("disk={}", d("backing.img"));
    // A second server on the same cache (its own data directory and sockets).
    let second = [
        "serve",
        "--data-dir",
        &o("data"),
        "--cache",
        &d("data/cache.img"),
        "--export",
        &format!("disk={}", o("backing.img")),
        "--backing-size",
        "8M",
        "--socket",
        &o("w.sock"),
    ];
    assert_refused(
        "second server, same cache",
        run_to_exit(&second),
        holder,
        "cache device",
    );
    // A second server on the same backing, with a cache of its own.
    let same_backing = [
        "serve",
        "--data-dir",
        &o("data"),
        "--cache",
        &o("cache.img"),
        "--cache-size",
        "8M",
        "--export",
        &backing,
        "--socket",
        &o("w.sock"),
    ];
    assert_refused(
        "second server, same backing",
        run_to_exit(&same_backing),
        holder,
        "backing",
    );
    // The same data directory (its default sockets would be replaced).
    let same_dir = [
        "serve",
        "--data-dir",
        &d("data"),
        "--cache",
        &o("cache.img"),
        "--cache-size",
        "8M",
        "--export",
        &format!("disk={}", o("backing.img")),
        "--backing-size",
        "8M",
    ];
    assert_refused(
        "second server, same data directory",
        run_to_exit(&same_dir),
        holder,
        "data directory",
    );
    // The same NBD socket, everything else its own.
    let same_socket = [
        "serve",
        "--data-dir",
        &o("data2"),
        "--cache",
        &o("cache2.img"),
        "--cache-size",
        "8M",
        "--export",
        &format!("disk={}", o("backing2.img")),
        "--backing-size",
        "8M",
        "--socket",
        &d("w.sock"),
        "--control",
        &o("w2.ctl"),
    ];
    assert_refused(
        "second server, same socket",
        run_to_exit(&same_socket),
        holder,
        "answers on it",
    );
    // An offline flush (no control socket given: it must not find the
    // server's and drain online; it must be refused offline).
    let flush = [
        "flush",
        "--cache",
        &d("data/cache.img"),
        "--export",
        &backing,
        "--control",
        &o("none.ctl"),
    ];
    assert_refused("offline flush", run_to_exit(&flush), holder, "cache device");
    for tool in ["check", "inspect"] {
        assert_refused(
            tool,
            run_to_exit(&[tool, "--cache", &d("data/cache.img")]),
            holder,
            "cache device",
        );
    }
    assert!(
        before == files(dir.path()),
        "a refused user changed the cache or the backing"
    );

    // The first server still serves every acknowledged page, and after its
    // restart too.
    let check_pages = |socket: &Path| {
        let mut nbd = Nbd::connect(socket, "disk").expect("connect");
        let mut buf = vec![0u8; PAGE];
        for p in 0..PAGES {
            nbd.read(p * 3 * PAGE as u64, &mut buf).expect("read");
            assert!(buf == content(p), "page {p} lost");
        }
    };
    check_pages(&first.socket);
    let (ok, log) = first.stop();
    assert!(ok, "{log}");
    let again = serve_still(dir.path());
    check_pages(&again.socket);
    let (ok, log) = again.stop();
    assert!(ok, "{log}");
    // With the server gone, the tools run.
    let (ok, out, err) = wcache(&["check", "--cache", &d("data/cache.img")]);
    assert!(ok, "check after the stop: {out}{err}");
}

#[test]
fn a_flush_in_progress_refuses_a_second_flush_and_a_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = |name: &str| dir.path().join(name).display().to_string();
    // Dirty pages in front of an emulated disk, so that the drain takes a while.
    let backing = format!("disk=emulated-hdd:{}", d("backing.img"));
    let extra = [
        "--data-dir",
        &d("data"),
        "--idle-destages",
        "0",
        "--max-dirty-age",
        "0",
    ];
    let (served, nbd) = serve_scattered(dir.path(), 1500, &extra);
    drop(nbd);
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    let flush_args = [
        "flush",
        "--cache",
        &d("cache.img"),
        "--export",
        &backing,
        "--control",
        &d("none.ctl"),
    ];
    let mut first = Command::new(env!("CARGO_BIN_EXE_wcache"))
        .args(flush_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("first flush");
    // It holds the lock once it says what it will destage.
    let mut out = std::io::BufReader::new(first.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.contains("to destage") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut out, &mut line).expect("read");
        assert!(n > 0, "the first flush ended before destaging");
    }
    let holder = first.id() as libc::pid_t;
    let second = run_to_exit(&flush_args);
    let server = run_to_exit(&[
        "serve",
        "--data-dir",
        &d("data"),
        "--cache",
        &d("cache.img"),
        "--export",
        &backing,
    ]);
    let finished = first.wait().expect("wait");
    assert!(finished.success(), "the first flush failed");
    assert_refused("second flush", second, holder, "cache device");
    assert_refused("server during a flush", server, holder, "in use by");
    let (ok, out, err) = wcache(&["inspect", "--cache", &d("cache.img")]);
    assert!(ok, "{err}");
    assert!(
        out.contains("0 dirty, 0 clean"),
        "the flush drained all: {out}"
    );
}
