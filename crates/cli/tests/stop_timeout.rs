//! A stop that ends: `wcache serve` in write-back over an nbdkit backing
//! whose writes never finish within the test (nbdkit's delay filter, one
//! hour per write), with a small cache, so destages hang and writes stall
//! once the cache is full. SIGTERM (and, in the second test, a second
//! SIGTERM during a long grace period) must end the server within the grace
//! period + 2 s, the stalled write must be answered with an error, the
//! clean shutdown must be recorded (`wcache inspect`), and a restart over an
//! nbdkit without the delay on the same file must return every
//! acknowledged write. The third test stops the backing server itself
//! (SIGSTOP) while a read of uncached data waits on it: the stop must end
//! all the same. Every child is ended by its pid; every wait is bounded. Needs nbdkit: SKIP without it, a failure under
//! WCACHE_REQUIRE_TOOLS=1. Install: apt-get install -y nbdkit.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{have, serve_scattered, wcache, Nbd, Served};

const PAGE_BYTES: usize = 4096;
const BACKING_BYTES: u64 = 8 << 20;
/// Writes beyond what the 1 MiB cache (about 250 slots) can hold.
const PAGES_MAX: u64 = 1024;
const EIO: u32 = 5;

/// nbdkit's file plugin on a Unix socket; killed (by pid) when dropped.
struct Nbdkit(Child);

impl Nbdkit {
    fn start(socket: &Path, file: &Path, write_delay: bool) -> Nbdkit {
        let _ = std::fs::remove_file(socket);
        let mut command = Command::new("nbdkit");
        command.args(["-f", "-U"]).arg(socket);
        if write_delay {
            command.arg("--filter=delay");
        }
        command.arg("file").arg(file);
        if write_delay {
            command.arg("wdelay=3600");
        }
        let kit = Nbdkit(
            command
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start nbdkit"),
        );
        wait_for("nbdkit's socket", Duration::from_secs(10), || {
            socket.exists()
        });
        kit
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn image(page: u64) -> Vec<u8> {
    let mut out = vec![0u8; PAGE_BYTES];
    for (i, b) in out.iter_mut().enumerate() {
        *b = (page as usize * 31 + i * 7 + 1) as u8;
    }
    out[0..8].copy_from_slice(&page.to_le_bytes());
    out
}

/// What one writer saw: pages acknowledged, and how its last write ended.
#[derive(Default)]
struct Writes {
    acked: Vec<u64>,
    last_errno: Option<u32>,
    broken: bool,
}

/// Writes pages 0, 1, 2, … until one fails; notes each acknowledgement.
fn writer(socket: PathBuf, writes: Arc<Mutex<Writes>>) {
    let mut nbd = Nbd::connect_retry(&socket, "disk").expect("connect");
    for page in 0..PAGES_MAX {
        let data = image(page);
        let offset = page * PAGE_BYTES as u64;
        match nbd.call(common::CMD_WRITE, 0, offset, PAGE_BYTES as u32, &data, None) {
            Ok(Ok(())) => writes.lock().unwrap().acked.push(page),
            Ok(Err(errno)) => {
                writes.lock().unwrap().last_errno = Some(errno);
                return;
            }
            Err(_) => {
                writes.lock().unwrap().broken = true;
                return;
            }
        }
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    kit_socket: PathBuf,
    backing_file: PathBuf,
    socket: PathBuf,
    cache: String,
    backing_uri: String,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let backing_file = dir.path().join("backing.img");
    std::fs::File::create(&backing_file)
        .and_then(|f| f.set_len(BACKING_BYTES))
        .expect("backing file");
    let kit_socket = dir.path().join("kit.sock");
    Setup {
        backing_uri: format!("nbd+unix:///?socket={}", kit_socket.display()),
        socket: dir.path().join("w.sock"),
        cache: dir.path().join("cache.img").display().to_string(),
        kit_socket,
        backing_file,
        _dir: dir,
    }
}

/// `wcache serve` with a 1 MiB cache (about 250 slots) over the nbdkit backing.
fn serve_small(s: &Setup, stop_timeout_s: u64) -> Served {
    let stop_timeout = stop_timeout_s.to_string();
    let args = [
        "--cache",
        &s.cache,
        "--cache-size",
        "1M",
        "--group-size",
        "4096",
        "--backing",
        &s.backing_uri,
        "--stop-timeout",
        &stop_timeout,
    ];
    Served::start(&args, &s.socket)
}

/// Serves over a backing that cannot drain until a write stalls, stops it
/// with SIGTERM (twice when `second_signal`), and returns the stop time,
/// what the writer saw, and the server's log.
fn stall_and_stop(
    s: &Setup,
    stop_timeout_s: u64,
    second_signal: bool,
) -> (Duration, Writes, String) {
    let _kit = Nbdkit::start(&s.kit_socket, &s.backing_file, true);
    let mut served = serve_small(s, stop_timeout_s);
    let writes = Arc::new(Mutex::new(Writes::default()));
    let w = writes.clone();
    let socket = s.socket.clone();
    let writer = std::thread::spawn(move || writer(socket, w));
    // A stall: no acknowledgement for a second after the cache filled
    // (format 3 holds about 100 of these one-page writes in 1 MiB: each is
    // a batch of two slots, its header and its page).
    let mut last = (0usize, Instant::now());
    wait_for("a write to stall", Duration::from_secs(30), || {
        let acked = writes.lock().unwrap().acked.len();
        if acked != last.0 {
            last = (acked, Instant::now());
        }
        acked > 50 && last.1.elapsed() > Duration::from_secs(1)
    });
    assert!(served.is_running(), "{}", served.log_text());
    let pid = served.pid();
    let start = Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    if second_signal {
        std::thread::sleep(Duration::from_millis(500));
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let limit = Duration::from_secs(stop_timeout_s + 2);
    wait_for("the server to exit", limit + Duration::from_secs(5), || {
        !served.is_running()
    });
    let stop_time = start.elapsed();
    let log = served.log_text();
    writer.join().expect("writer");
    let writes = Arc::try_unwrap(writes)
        .ok()
        .expect("writer done")
        .into_inner()
        .unwrap();
    eprintln!(
        "stop took {:.3} s (grace {stop_timeout_s} s, second signal: {second_signal})",
        stop_time.as_secs_f64()
    );
    assert!(
        stop_time < limit,
        "stop took {stop_time:?}, over {limit:?}: {log}"
    );
    (stop_time, writes, log)
}

/// Restarts over the same backing file without the delay; every
/// acknowledged page must read back.
fn check_recovered(s: &Setup, acked: &[u64]) {
    let (ok, out, err) = wcache(&["inspect", "--cache", &s.cache]);
    assert!(ok, "inspect: {out}{err}");
    assert!(out.contains("state:   clean shutdown"), "{out}");
    let _kit = Nbdkit::start(&s.kit_socket, &s.backing_file, false);
    let args = [
        "--cache",
        &s.cache,
        "--group-size",
        "4096",
        "--backing",
        &s.backing_uri,
    ];
    let served = Served::start(&args, &s.socket);
    let mut nbd = Nbd::connect_retry(&s.socket, "disk").expect("connect");
    let mut buf = vec![0u8; PAGE_BYTES];
    for &page in acked {
        nbd.read(page * PAGE_BYTES as u64, &mut buf).expect("read");
        assert!(
            buf == image(page),
            "acknowledged page {page} after the stop"
        );
    }
    drop(nbd);
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
}

fn check_stop(writes: &Writes, log: &str) {
    assert!(log.contains("clean shutdown recorded"), "{log}");
    assert!(
        log.contains("writes still waiting for room with an error"),
        "{log}"
    );
    assert_eq!(
        writes.last_errno,
        Some(EIO),
        "the stalled write is answered with EIO: {log}"
    );
    assert!(
        !writes.broken,
        "the connection stayed up until the reply: {log}"
    );
    assert!(
        writes.acked.len() > 50,
        "the cache filled first (see stall_and_stop)"
    );
}

#[test]
fn sigterm_during_a_stall_ends_within_the_grace_period() {
    if !have("nbdkit", "nbdkit") {
        return;
    }
    let s = setup();
    let (_, writes, log) = stall_and_stop(&s, 2, false);
    check_stop(&writes, &log);
    assert!(log.contains("grace period of 2.0 s over"), "{log}");
    check_recovered(&s, &writes.acked);
}

#[test]
fn a_second_sigterm_ends_the_grace_period_at_once() {
    if !have("nbdkit", "nbdkit") {
        return;
    }
    let s = setup();
    let (stop_time, writes, log) = stall_and_stop(&s, 60, true);
    check_stop(&writes, &log);
    assert!(log.contains("again: ending the grace period"), "{log}");
    assert!(
        stop_time < Duration::from_secs(5),
        "stop took {stop_time:?}"
    );
    check_recovered(&s, &writes.acked);
}

#[test]
fn sigterm_while_a_read_waits_on_a_stopped_backing_ends_within_the_grace_period() {
    if !have("nbdkit", "nbdkit") {
        return;
    }
    let s = setup();
    let kit = Nbdkit::start(&s.kit_socket, &s.backing_file, false);
    let mut served = serve_small(&s, 2);
    let mut nbd = Nbd::connect_retry(&s.socket, "disk").expect("connect");
    let acked: Vec<u64> = (0..32).collect();
    for &page in &acked {
        nbd.write(page * PAGE_BYTES as u64, &image(page), false)
            .expect("write");
    }
    // SAFETY: kill(2) on our own child's pid (nbdkit).
    unsafe { libc::kill(kit.0.id() as libc::pid_t, libc::SIGSTOP) };
    let socket = s.socket.clone();
    let reader = std::thread::spawn(move || {
        let mut nbd = Nbd::connect_retry(&socket, "disk").expect("connect");
        let mut buf = vec![0u8; PAGE_BYTES];
        // Uncached: it waits on the stopped backing.
        nbd.call(
            common::CMD_READ,
            0,
            4 << 20,
            PAGE_BYTES as u32,
            &[],
            Some(&mut buf),
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !reader.is_finished(),
        "the read waits on the stopped backing"
    );
    let start = Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(served.pid(), libc::SIGTERM) };
    let limit = Duration::from_secs(4);
    wait_for("the server to exit", limit + Duration::from_secs(5), || {
        !served.is_running()
    });
    let stop_time = start.elapsed();
    let log = served.log_text();
    eprintln!(
        "stop took {:.3} s (grace 2 s, backing stopped)",
        stop_time.as_secs_f64()
    );
    assert!(stop_time < limit, "stop took {stop_time:?}: {log}");
    assert!(log.contains("clean shutdown recorded"), "{log}");
    assert!(log.contains("requests still wait on a backing"), "{log}");
    let read = reader.join().expect("reader");
    assert!(
        !matches!(read, Ok(Ok(()))),
        "the read did not succeed: {read:?}"
    );
    drop(nbd);
    // SAFETY: as above; SIGKILL (in drop) also ends a stopped process.
    unsafe { libc::kill(kit.0.id() as libc::pid_t, libc::SIGCONT) };
    drop(kit);
    check_recovered(&s, &acked);
}

/// An idle server draining its dirty pages (the idle drain, to an emulated
/// disk that takes seconds for them) stops at SIGTERM without using its
/// grace period: destaging stops, the pages stay dirty in the cache (the
/// log says how many), and nothing is warned of. Before, the stop ran the
/// idle drain for the whole grace period and then warned of "a backing
/// that does not answer". The bound is the grace period, not a speed.
#[test]
fn sigterm_of_an_idle_server_with_dirty_pages_stops_without_draining_or_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = |name: &str| dir.path().join(name).display().to_string();
    let extra = ["--idle-after", "100ms", "--stop-timeout", "30"];
    let (served, nbd) = serve_scattered(dir.path(), 1500, &extra);
    drop(nbd);
    std::thread::sleep(Duration::from_millis(500)); // idle: the drain runs
    let start = Instant::now();
    let (ok, log) = served.stop();
    let took = start.elapsed();
    assert!(ok, "{log}");
    println!("stop of an idle server draining: {took:?}");
    assert!(
        took < Duration::from_secs(15),
        "the stop took {took:?}: it drained instead of stopping\n{log}"
    );
    assert!(
        !log.contains("WARN"),
        "a warning at an ordinary stop:\n{log}"
    );
    let left: u64 = log
        .lines()
        .find_map(|l| {
            let rest = l.split("clean shutdown recorded; ").nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no clean shutdown line:\n{log}"));
    assert!(
        left > 0,
        "every page was drained: the test saw no stop\n{log}"
    );
    let (ok, out, err) = wcache(&["inspect", "--cache", &d("cache.img")]);
    assert!(ok, "{err}");
    assert!(out.contains("clean"), "{out}");
}

/// `wcache stop --flush`: the server refuses writes (ESHUTDOWN) while it
/// drains every dirty page, still answers reads, then stops by itself; the
/// cache is left with no dirty page and `wcache stop` returns once the
/// server is gone.
#[test]
fn stop_with_flush_refuses_writes_drains_and_stops() {
    const ESHUTDOWN: u32 = 108;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = |name: &str| dir.path().join(name).display().to_string();
    let extra = ["--idle-destages", "0", "--max-dirty-age", "0"];
    let (mut served, mut nbd) = serve_scattered(dir.path(), 1500, &extra);
    let stopper = Command::new(env!("CARGO_BIN_EXE_wcache"))
        .args(["stop", "--flush", "--control", &d("w.ctl")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wcache stop");
    // Writes are refused once the drain begins; reads go on.
    let start = Instant::now();
    let refused = loop {
        match nbd.call(1, 0, 0, PAGE_BYTES as u32, &[7u8; PAGE_BYTES], None) {
            Ok(Err(errno)) => break errno,
            Ok(Ok(())) => {}
            Err(e) => panic!("the connection broke before a write was refused: {e}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no write was refused"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(refused, ESHUTDOWN, "a write during the drain");
    // The drain of 1,500 scattered pages on the emulated disk takes seconds.
    let mut page = vec![0u8; PAGE_BYTES];
    nbd.read(2_621_440, &mut page)
        .expect("a read during the drain");
    assert!(page == vec![1u8; PAGE_BYTES], "page 1 reads back");
    let out = stopper.wait_with_output().expect("wait");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "wcache stop: {text}");
    assert!(
        text.contains("drained") && text.contains("stopped"),
        "{text}"
    );
    let start = Instant::now();
    while served.is_running() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the server did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = served.log_text();
    assert!(!log.contains("WARN"), "{log}");
    let (ok, out, err) = wcache(&["inspect", "--cache", &d("cache.img")]);
    assert!(ok, "{err}");
    assert!(out.contains("slots:   0 dirty"), "pages left dirty: {out}");
}
