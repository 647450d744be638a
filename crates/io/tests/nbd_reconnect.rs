//! NbdDevice connections that heal, against a real nbdkit (file plugin over a
//! temporary file, Unix socket): the server is killed (-9) or stopped
//! (SIGTERM) under load and started again on the same socket; no write the
//! device acknowledged is lost, reads come back, a backing away longer than
//! the timeout fails requests with EIO and heals when it returns, and an
//! export whose size changed is refused with both sizes named.
//! Prints SKIP when nbdkit is missing, unless WCACHE_REQUIRE_TOOLS=1.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::have;
use wcache_core::types::VolumeId;
use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_io::{BlockDevice, Driver, DriverConfig, MemDevice, NbdDevice, NbdOptions, NbdState};

const PAGE_BYTES: usize = 4096;
const PAGES: u64 = 1024;
const EXPORT_BYTES: u64 = PAGES * PAGE_BYTES as u64;
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(10);
const SERVER_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// The bound: reads of uncached data succeed again this soon after
/// the backing returns.
const READ_AGAIN_WITHIN: Duration = Duration::from_secs(2);

/// An nbdkit file-plugin server on a Unix socket, restartable.
struct Server {
    socket: PathBuf,
    file: PathBuf,
    log: PathBuf,
    /// Filter arguments before the plugin, and plugin arguments after the file.
    filters: Vec<String>,
    params: Vec<String>,
    child: Option<Child>,
}

impl Server {
    fn new(dir: &Path, size_bytes: u64) -> Server {
        Server::with_filters(dir, size_bytes, &[], &[])
    }

    fn with_filters(dir: &Path, size_bytes: u64, filters: &[&str], params: &[&str]) -> Server {
        let file = dir.join("backing.img");
        let f = std::fs::File::create(&file).expect("create backing file");
        f.set_len(size_bytes).expect("size backing file");
        let mut server = Server {
            socket: dir.join("kit.sock"),
            file,
            log: dir.join("nbdkit.log"),
            filters: filters.iter().map(|s| s.to_string()).collect(),
            params: params.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        server.start();
        server
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///disk?socket={}", self.socket.display())
    }

    /// Starts nbdkit and returns when its socket accepts connections.
    fn start(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let _ = std::fs::remove_file(&self.socket);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open nbdkit log");
        let child = Command::new("nbdkit")
            .args(["-f", "-v", "-U"])
            .arg(&self.socket)
            .arg("--exportname=disk")
            .args(&self.filters)
            .arg("file")
            .arg(&self.file)
            .args(&self.params)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nbdkit");
        self.child = Some(child);
        let start = Instant::now();
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            assert!(
                start.elapsed() < SERVER_START_TIMEOUT,
                "nbdkit did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn kill9(&mut self) {
        let mut child = self.child.take().expect("server running");
        child.kill().expect("kill -9 nbdkit");
        child.wait().expect("reap nbdkit");
    }

    /// SIGTERM, then waits (bounded) for the server to exit; returns how long
    /// it took to stop.
    fn terminate(&mut self) -> Duration {
        let mut child = self.child.take().expect("server running");
        let pid = child.id() as libc::pid_t;
        let start = Instant::now();
        // SAFETY: kill(2) on the pid of our own child, not yet reaped.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(rc, 0, "SIGTERM to nbdkit");
        loop {
            if child.try_wait().expect("poll nbdkit").is_some() {
                return start.elapsed();
            }
            if start.elapsed() > SERVER_STOP_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "nbdkit did not stop within {SERVER_STOP_TIMEOUT:?} of SIGTERM (a client kept it alive)"
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn options(timeout: Duration) -> NbdOptions {
    NbdOptions {
        connections_max: 2,
        unavailable_timeout: timeout,
        ..NbdOptions::default()
    }
}

/// The bytes of version `version` of `page` (version 0: never written, zeros).
fn page_bytes(page: u64, version: u64) -> Vec<u8> {
    if version == 0 {
        return vec![0u8; PAGE_BYTES];
    }
    let mut out = vec![0u8; PAGE_BYTES];
    for (i, chunk) in out.chunks_mut(16).enumerate() {
        chunk[0..8].copy_from_slice(&page.to_le_bytes());
        chunk[8..16].copy_from_slice(&(version ^ (i as u64) << 40).to_le_bytes());
    }
    out
}

/// Writers and readers on the device while the server comes and goes. Each
/// worker owns the pages `p % workers == w`, so its shadow (the last
/// acknowledged version of each page) is exact for its own reads.
struct Load {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    shadow: Arc<Mutex<Vec<u64>>>,
    errors: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

const WORKERS: u64 = 3;
const OPS_PER_WORKER_MAX: u64 = 2_000_000;

impl Load {
    fn start(dev: Arc<NbdDevice>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let shadow = Arc::new(Mutex::new(vec![0u64; PAGES as usize]));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for w in 0..WORKERS {
            let (dev, stop, ops, shadow, errors) = (
                dev.clone(),
                stop.clone(),
                ops.clone(),
                shadow.clone(),
                errors.clone(),
            );
            threads.push(std::thread::spawn(move || {
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ (w + 1);
                let mut buf = vec![0u8; PAGE_BYTES];
                for n in 0..OPS_PER_WORKER_MAX {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let page = (x % (PAGES / WORKERS)) * WORKERS + w;
                    let offset = page * PAGE_BYTES as u64;
                    let known = shadow.lock().expect("shadow")[page as usize];
                    let result = match n % 4 {
                        0 | 1 => {
                            let version = known + 1;
                            let r = dev.write_at(&page_bytes(page, version), offset);
                            if r.is_ok() {
                                shadow.lock().expect("shadow")[page as usize] = version;
                            }
                            r
                        }
                        2 => dev.read_at(&mut buf, offset).map(|()| {
                            if buf != page_bytes(page, known) {
                                errors
                                    .lock()
                                    .expect("errors")
                                    .push(format!("page {page}: read is not version {known}"));
                            }
                        }),
                        _ => dev.flush(),
                    };
                    if let Err(e) = result {
                        errors.lock().expect("errors").push(e.to_string());
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        Load {
            stop,
            ops,
            shadow,
            errors,
            threads,
        }
    }

    fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    /// Waits (bounded) until `count` more operations completed.
    fn wait_ops(&self, count: u64) {
        let target = self.ops() + count;
        let start = Instant::now();
        while self.ops() < target {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "load made no progress"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Stops the workers; returns the shadow, failing on any error seen.
    fn finish(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("worker");
        }
        let errors = self.errors.lock().expect("errors");
        assert!(
            errors.is_empty(),
            "{} requests failed or read wrong data, first: {:?}",
            errors.len(),
            errors.iter().take(3).collect::<Vec<_>>()
        );
        let shadow = self.shadow.lock().expect("shadow").clone();
        shadow
    }
}

/// Every page of the backing file holds its last acknowledged version.
fn assert_file_matches(file: &Path, shadow: &[u64]) {
    let f = std::fs::File::open(file).expect("open backing file");
    let mut buf = vec![0u8; PAGE_BYTES];
    let mut written = 0;
    for (page, &version) in shadow.iter().enumerate() {
        f.read_exact_at(&mut buf, page as u64 * PAGE_BYTES as u64)
            .expect("read backing file");
        assert!(
            buf == page_bytes(page as u64, version),
            "page {page}: the backing file lost acknowledged version {version}"
        );
        written += (version > 0) as u64;
    }
    assert!(
        written > PAGES / 4,
        "the load wrote too little ({written} pages)"
    );
}

/// Waits (bounded) until every connection wanted is open again.
fn wait_connected(dev: &NbdDevice) {
    let start = Instant::now();
    while dev.state() != NbdState::Connected {
        assert!(
            start.elapsed() < READ_AGAIN_WITHIN,
            "not connected: {:?}",
            dev.status()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Time from the server's return until a read of the device succeeds.
fn read_again_latency(dev: &NbdDevice) -> Duration {
    let start = Instant::now();
    let mut buf = vec![0u8; PAGE_BYTES];
    dev.read_at(&mut buf, (PAGES - 1) * PAGE_BYTES as u64)
        .expect("read after the server returned");
    start.elapsed()
}

/// What `restart_under_load` saw.
struct Restarts {
    dev: Arc<NbdDevice>,
    shadow: Vec<u64>,
    /// How long each stop took, and each read after the server's return.
    stop_times: Vec<Duration>,
    latencies: Vec<Duration>,
}

/// Stops the server `restarts` times under load with `stop` (returning how
/// long it took), starts it again after `away`, and measures the first read
/// after each return; ends with the load stopped and a final flush.
fn restart_under_load(
    server: &mut Server,
    restarts: usize,
    away: Duration,
    stop: fn(&mut Server) -> Duration,
) -> Restarts {
    let dev = Arc::new(
        NbdDevice::connect_with(&server.uri(), options(Duration::from_secs(10))).expect("connect"),
    );
    let load = Load::start(dev.clone());
    let mut stop_times = Vec::new();
    let mut latencies = Vec::new();
    for _ in 0..restarts {
        load.wait_ops(300);
        stop_times.push(stop(server));
        std::thread::sleep(away);
        server.start();
        latencies.push(read_again_latency(&dev));
    }
    load.wait_ops(300);
    let shadow = load.finish();
    dev.flush().expect("final flush");
    eprintln!(
        "stop times: {stop_times:?}; read-again latencies: {latencies:?}; {:?}",
        dev.status()
    );
    assert!(dev.status().connections_lost >= restarts as u64);
    wait_connected(&dev);
    for latency in &latencies {
        assert!(*latency < READ_AGAIN_WITHIN, "{latencies:?}");
    }
    Restarts {
        dev,
        shadow,
        stop_times,
        latencies,
    }
}

/// The restart tests run one at a time: each drives servers, clients and
/// timeouts measured in wall-clock time, which a neighbour test's load on a
/// two-core machine would stretch.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn kill_9_restarts_of_the_backing_lose_no_acknowledged_write() {
    let _serial = serial();
    if !have("nbdkit") {
        return;
    }
    const RESTARTS: usize = 10;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Server::new(dir.path(), EXPORT_BYTES);
    let run = restart_under_load(&mut server, RESTARTS, Duration::from_millis(150), |s| {
        s.kill9();
        Duration::ZERO
    });
    assert!(run.dev.status().reconnects >= RESTARTS as u64);
    assert_eq!(run.latencies.len(), RESTARTS);
    drop(run.dev);
    assert_file_matches(&server.file, &run.shadow);
}

#[test]
fn graceful_stops_of_the_backing_get_a_soft_disconnect_and_a_reconnect() {
    let _serial = serial();
    if !have("nbdkit") {
        return;
    }
    const RESTARTS: usize = 10;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Server::new(dir.path(), EXPORT_BYTES);
    // Each server stops only once every client has left (bounded in
    // `terminate`).
    let run = restart_under_load(
        &mut server,
        RESTARTS,
        Duration::from_millis(100),
        Server::terminate,
    );
    assert_eq!(run.stop_times.len(), RESTARTS);
    let status = run.dev.status();
    assert!(status.shutdowns_seen >= 1, "no ESHUTDOWN seen: {status:?}");
    // Each ESHUTDOWN was followed by NBD_CMD_DISC on its connection (the
    // servers stopped above have written their whole log).
    let discs = server
        .log_text()
        .matches("client sent NBD_CMD_DISC")
        .count() as u64;
    assert!(discs >= status.shutdowns_seen, "{discs} DISC, {status:?}");
    drop(run.dev);
    assert_file_matches(&server.file, &run.shadow);
}

#[test]
fn writes_a_restarted_server_lost_from_its_cache_are_replayed_before_reads_and_flush() {
    let _serial = serial();
    if !have("nbdkit") {
        return;
    }
    // nbdkit's cache filter in write-back mode keeps writes in a cache that a
    // kill -9 loses; only a FLUSH writes them to the file.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Server::with_filters(
        dir.path(),
        EXPORT_BYTES,
        &["--filter=cache"],
        &["cache=writeback"],
    );
    let dev =
        NbdDevice::connect_with(&server.uri(), options(Duration::from_secs(10))).expect("connect");
    let mut shadow = vec![0u64; PAGES as usize];
    let write = |dev: &NbdDevice, page: u64, shadow: &mut [u64]| {
        let version = shadow[page as usize] + 1;
        dev.write_at(&page_bytes(page, version), page * PAGE_BYTES as u64)
            .expect("write");
        shadow[page as usize] = version;
    };
    for page in 0..PAGES / 2 {
        write(&dev, page, &mut shadow);
    }
    dev.flush().expect("flush");
    // Acknowledged, not flushed: half of them overwrite flushed pages.
    for page in PAGES / 4..PAGES * 3 / 4 {
        write(&dev, page, &mut shadow);
    }
    let logged = dev.status().replay_log_bytes;
    assert_eq!(
        logged,
        (PAGES / 2) as usize * PAGE_BYTES,
        "unflushed writes are logged"
    );
    server.kill9();
    server.start();
    // Read before any flush: the replay comes first.
    let mut buf = vec![0u8; PAGE_BYTES];
    let page = PAGES / 2;
    dev.read_at(&mut buf, page * PAGE_BYTES as u64)
        .expect("read");
    assert!(
        buf == page_bytes(page, shadow[page as usize]),
        "read after restart"
    );
    dev.flush().expect("flush after restart");
    let status = dev.status();
    assert!(status.writes_replayed >= PAGES / 2, "{status:?}");
    assert_eq!(status.replay_log_bytes, 0, "{status:?}");
    drop(dev);
    // Only what the server flushed is in the file: every acknowledged write.
    assert_file_matches(&server.file, &shadow);
}

#[test]
fn a_backing_away_past_the_timeout_fails_requests_with_eio_then_heals() {
    let _serial = serial();
    if !have("nbdkit") {
        return;
    }
    let timeout = Duration::from_millis(400);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Server::new(dir.path(), EXPORT_BYTES);
    let uri = server.uri();
    let dev = NbdDevice::connect_with(&uri, options(timeout)).expect("connect");
    let data = page_bytes(7, 1);
    dev.write_at(&data, 7 * PAGE_BYTES as u64).expect("write");
    server.kill9();

    let mut buf = vec![0u8; PAGE_BYTES];
    let start = Instant::now();
    let err = dev
        .read_at(&mut buf, 7 * PAGE_BYTES as u64)
        .expect_err("read while the backing is away");
    let waited = start.elapsed();
    eprintln!("read failed after {waited:?} (timeout {timeout:?}): {err}");
    let text = err.to_string();
    assert!(
        waited >= timeout,
        "failed after {waited:?}, before the timeout"
    );
    assert!(
        waited < timeout + Duration::from_secs(2),
        "waited {waited:?}"
    );
    assert!(
        text.contains(&uri),
        "error does not name the backing: {text}"
    );
    assert!(text.contains("EIO"), "{text}");
    assert!(
        matches!(&err, wcache_io::DeviceError::Io { .. }),
        "reported to clients as EIO: {err:?}"
    );
    assert_eq!(dev.state(), NbdState::Reconnecting);
    let err = dev
        .write_at(&page_bytes(8, 1), 8 * PAGE_BYTES as u64)
        .expect_err("write while the backing is away");
    assert!(err.to_string().contains(&uri), "{err}");
    assert!(dev.flush().is_err(), "flush while the backing is away");

    server.start();
    let latency = read_again_latency(&dev);
    eprintln!("read-again latency after {timeout:?} timeout: {latency:?}");
    assert!(latency < READ_AGAIN_WITHIN);
    dev.read_at(&mut buf, 7 * PAGE_BYTES as u64).expect("read");
    assert!(buf == data, "the write before the outage is still there");
    dev.write_at(&page_bytes(8, 1), 8 * PAGE_BYTES as u64)
        .expect("write after the return");
    dev.flush().expect("flush after the return");
    wait_connected(&dev);
    let status = dev.status();
    assert_eq!(status.replay_log_bytes, 0, "the flush emptied the log");
    assert!(
        status.writes_replayed >= 1,
        "the unflushed write was replayed"
    );
}

#[test]
fn an_export_whose_size_changed_is_refused_naming_both_sizes() {
    let _serial = serial();
    if !have("nbdkit") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Server::new(dir.path(), EXPORT_BYTES);
    let timeout = Duration::from_secs(10);
    let dev = NbdDevice::connect_with(&server.uri(), options(timeout)).expect("connect");
    let data = page_bytes(3, 1);
    dev.write_at(&data, 3 * PAGE_BYTES as u64).expect("write");
    dev.flush().expect("flush");

    server.kill9();
    let grown = EXPORT_BYTES * 2;
    std::fs::File::options()
        .write(true)
        .open(&server.file)
        .expect("open backing file")
        .set_len(grown)
        .expect("grow backing file");
    server.start();
    let mut buf = vec![0u8; PAGE_BYTES];
    let start = Instant::now();
    let err = dev.read_at(&mut buf, 0).expect_err("size changed");
    let text = err.to_string();
    assert!(
        start.elapsed() < timeout,
        "refused at once, not after the timeout"
    );
    assert!(text.contains(&EXPORT_BYTES.to_string()), "{text}");
    assert!(text.contains(&grown.to_string()), "{text}");
    assert_eq!(dev.state(), NbdState::Incompatible);

    // The original export back: the device heals.
    server.kill9();
    std::fs::File::options()
        .write(true)
        .open(&server.file)
        .expect("open backing file")
        .set_len(EXPORT_BYTES)
        .expect("shrink backing file");
    server.start();
    let start = Instant::now();
    loop {
        match dev.read_at(&mut buf, 3 * PAGE_BYTES as u64) {
            Ok(()) => break,
            Err(e) => assert!(
                start.elapsed() < READ_AGAIN_WITHIN,
                "not healed after the original export returned: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(buf == data);
    wait_connected(&dev);
}

#[test]
fn a_write_back_cache_keeps_destaging_across_backing_restarts_and_loses_nothing() {
    let _serial = serial();
    if !have("nbdkit") {
        return;
    }
    const RESTARTS: usize = 3;
    const WRITES_MAX: u64 = 1_000_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Server::new(dir.path(), EXPORT_BYTES);
    let dev = Arc::new(
        NbdDevice::connect_with(&server.uri(), options(Duration::from_secs(10))).expect("connect"),
    );
    let config = EngineConfig {
        cache_slots: 64,
        group_size_bytes: 16 * 1024,
        write_policy: WritePolicyKind::WriteBack,
        ..EngineConfig::default()
    };
    let driver = Arc::new(
        Driver::new(
            config,
            Arc::new(MemDevice::new(64 * PAGE_BYTES as u64)),
            vec![dev.clone() as Arc<dyn BlockDevice>],
            DriverConfig::default(),
        )
        .expect("driver"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    // One writer: 64 cache slots over 1024 pages, so writes wait for
    // destages (to the backing that comes and goes) and reads miss.
    let writer = {
        let (driver, stop, ops) = (driver.clone(), stop.clone(), ops.clone());
        std::thread::spawn(move || {
            let mut shadow = vec![0u64; PAGES as usize];
            let mut buf = vec![0u8; PAGE_BYTES];
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            for n in 0..WRITES_MAX {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let page = x % PAGES;
                let offset = page * PAGE_BYTES as u64;
                if n % 3 == 2 {
                    driver
                        .read(VolumeId(0), offset, &mut buf)
                        .expect("read through the cache");
                    assert!(
                        buf == page_bytes(page, shadow[page as usize]),
                        "page {page}"
                    );
                } else {
                    let version = shadow[page as usize] + 1;
                    driver
                        .write(VolumeId(0), offset, &page_bytes(page, version), false)
                        .expect("write through the cache");
                    shadow[page as usize] = version;
                }
                ops.fetch_add(1, Ordering::Relaxed);
            }
            shadow
        })
    };
    let wait_ops = |count: u64| {
        let target = ops.load(Ordering::Relaxed) + count;
        let start = Instant::now();
        while ops.load(Ordering::Relaxed) < target {
            assert!(start.elapsed() < Duration::from_secs(20), "no progress");
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    for _ in 0..RESTARTS {
        wait_ops(500);
        server.kill9();
        std::thread::sleep(Duration::from_millis(150));
        server.start();
    }
    wait_ops(500);
    stop.store(true, Ordering::Relaxed);
    let shadow = writer.join().expect("writer");
    driver
        .drain_timeout(Duration::from_secs(30))
        .expect("drain onto the backing");
    let status = dev.status();
    assert!(status.reconnects >= RESTARTS as u64, "{status:?}");
    drop(driver);
    drop(dev);
    assert_file_matches(&server.file, &shadow);
}
