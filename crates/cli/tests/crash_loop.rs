//! Crash loop: `wcache serve` in write-back on a cache file in /tmp
//! (fdatasync; dsync with O_DIRECT), on a loop device with O_DIRECT (a
//! real block device, as root), and on a cache file on /dev/shm (sync mode
//! nvram, so the cache is mapped and written by memory copies), with a file
//! backing; four writer connections write runs of whole pages (one page
//! mostly, up to 32 pages = 128 KiB, which the io_uring path writes
//! through O_DIRECT; some with FUA, with FLUSH now and then) and note what
//! was acknowledged; the server is killed with SIGKILL at a random moment,
//! `wcache check` must pass on the cache left behind, and a new server on the
//! same files must return, for every page, the last acknowledged version or
//! the one in flight at the kill — never anything else, never a mix within
//! a page. At the end: SIGTERM (clean shutdown), `wcache flush`, and the
//! backing file must hold exactly the final versions.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{wcache, Nbd, Served};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const PAGE_BYTES: usize = 4096;
const VOLUME_PAGES: u64 = 1024;
const WRITERS: u64 = 4;
/// Writer `w` owns the extents e with e % WRITERS == w; a write covers
/// pages of one extent.
const EXTENT_PAGES: u64 = 32;
const ITERATIONS: u32 = 24;

/// A page's bytes for (page, version): a header naming both, then bytes from
/// a generator seeded by both, so that any mix of two versions is detected.
fn page_image(page: u64, version: u64) -> Vec<u8> {
    let mut out = vec![0u8; PAGE_BYTES];
    if version == 0 {
        return out; // never written: the sparse backing's zeros
    }
    out[0..8].copy_from_slice(&page.to_le_bytes());
    out[8..16].copy_from_slice(&version.to_le_bytes());
    let mut rng = SmallRng::seed_from_u64(page.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version);
    rng.fill(&mut out[16..]);
    out
}

/// Which version a page holds, or why it holds none.
fn version_of(page: u64, bytes: &[u8]) -> Result<u64, String> {
    if bytes.iter().all(|&b| b == 0) {
        return Ok(0);
    }
    let mut v = [0u8; 8];
    v.copy_from_slice(&bytes[8..16]);
    let version = u64::from_le_bytes(v);
    if bytes != page_image(page, version).as_slice() {
        return Err(format!(
            "page {page}: bytes match no single version (header says {version}): a mix or corruption"
        ));
    }
    Ok(version)
}

#[derive(Clone, Copy, Default)]
struct PageState {
    acked: u64,
    in_flight: Option<u64>,
}

struct Counts {
    writes_acked: u64,
    fua: u64,
    flushes: u64,
}

/// Writer `w` owns the extents e with e % WRITERS == w, one write in flight.
fn writer(
    socket: &Path,
    w: u64,
    seed: u64,
    state: &Mutex<Vec<PageState>>,
    stop: &AtomicBool,
) -> Counts {
    let mut counts = Counts {
        writes_acked: 0,
        fua: 0,
        flushes: 0,
    };
    let Ok(mut nbd) = Nbd::connect_retry(socket, "disk") else {
        return counts;
    };
    let mut rng = SmallRng::seed_from_u64(seed ^ w);
    let extents = VOLUME_PAGES / EXTENT_PAGES;
    while !stop.load(Ordering::Relaxed) {
        let extent = rng.gen_range(0..extents / WRITERS) * WRITERS + w;
        let count = if rng.gen_bool(0.8) {
            1
        } else {
            rng.gen_range(2..=EXTENT_PAGES)
        };
        let first = extent * EXTENT_PAGES + rng.gen_range(0..=EXTENT_PAGES - count);
        let mut data = Vec::with_capacity(count as usize * PAGE_BYTES);
        {
            let mut s = state.lock().expect("state");
            for page in first..first + count {
                let e = &mut s[page as usize];
                assert!(e.in_flight.is_none(), "one write per page at a time");
                let v = e.acked + 1;
                e.in_flight = Some(v);
                data.extend_from_slice(&page_image(page, v));
            }
        }
        let fua = rng.gen_bool(0.2);
        if let Err(e) = nbd.write(first * PAGE_BYTES as u64, &data, fua) {
            // An error reply is a fault of the server; a lost connection
            // is the kill (this write stays in flight).
            assert!(!e.to_string().starts_with("write error"), "{e}");
            return counts;
        }
        {
            let mut s = state.lock().expect("state");
            for page in first..first + count {
                let e = &mut s[page as usize];
                e.acked = e.in_flight.take().expect("in flight");
            }
        }
        counts.writes_acked += 1;
        counts.fua += u64::from(fua);
        if rng.gen_bool(0.05) {
            if let Err(e) = nbd.flush() {
                assert!(!e.to_string().starts_with("flush error"), "{e}");
                return counts;
            }
            counts.flushes += 1;
        }
    }
    counts
}

/// Reads every page and checks it against the state; then the state holds
/// what is there (an in-flight version that made it is now durable).
fn verify(socket: &Path, state: &Mutex<Vec<PageState>>, iteration: u32) -> (u64, u64) {
    let mut nbd = Nbd::connect_retry(socket, "disk").unwrap_or_else(|e| {
        let log = std::fs::read_to_string(socket.with_extension("log")).unwrap_or_default();
        panic!("iteration {iteration}: connect after restart: {e}; server log:\n{log}")
    });
    assert_eq!(nbd.size_bytes, VOLUME_PAGES * PAGE_BYTES as u64);
    let mut s = state.lock().expect("state");
    let (mut old, mut new) = (0, 0);
    let mut buf = vec![0u8; PAGE_BYTES];
    for page in 0..VOLUME_PAGES {
        nbd.read(page * PAGE_BYTES as u64, &mut buf).expect("read");
        let found = version_of(page, &buf).unwrap_or_else(|e| panic!("iteration {iteration}: {e}"));
        let e = s[page as usize];
        match e.in_flight {
            Some(v) if found == v => new += 1,
            Some(_) if found == e.acked => old += 1,
            _ => assert_eq!(
                found, e.acked,
                "iteration {iteration}: page {page} lost its acknowledged version (in flight: {:?})",
                e.in_flight
            ),
        }
        s[page as usize] = PageState {
            acked: found,
            in_flight: None,
        };
    }
    (old, new)
}

/// Format 2: records beside the pages.
#[test]
fn crash_loop_keeps_every_acknowledged_write_on_format_2() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    crash_loop_with(dir.path(), "fdatasync", &["--cache-format", "2"]);
}

#[test]
fn crash_loop_keeps_every_acknowledged_write_on_format_2_persist_on_flush() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    let extra = ["--cache-format", "2", "--persist-on-flush"];
    crash_loop_with(dir.path(), "fdatasync", &extra);
}

/// RWF_DSYNC on O_DIRECT: records written beside the page data, no flush.
#[test]
fn crash_loop_keeps_every_acknowledged_write_on_format_2_dsync_direct() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    crash_loop_with(dir.path(), "dsync", &["--cache-format", "2", "--direct"]);
}

#[test]
fn crash_loop_keeps_every_acknowledged_write_on_format_2_dsync_direct_persist_on_flush() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    let extra = ["--cache-format", "2", "--direct", "--persist-on-flush"];
    crash_loop_with(dir.path(), "dsync", &extra);
}

/// Format 3 (the default): the cache a log of batches, one write each.
#[test]
fn crash_loop_keeps_every_acknowledged_write_on_format_3() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    crash_loop_with(dir.path(), "fdatasync", &["--cache-format", "3"]);
}

#[test]
fn crash_loop_keeps_every_acknowledged_write_on_format_3_persist_on_flush() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    let extra = ["--cache-format", "3", "--persist-on-flush"];
    crash_loop_with(dir.path(), "fdatasync", &extra);
}

/// Format 3 under ordered write-back: recovery keeps a page's older
/// versions (each is destaged in turn), so `check` after each kill reads
/// them too.
#[test]
fn crash_loop_keeps_every_acknowledged_write_on_format_3_ordered() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    let extra = [
        "--cache-format",
        "3",
        "--write-policy",
        "write-back-ordered",
    ];
    crash_loop_with(dir.path(), "fdatasync", &extra);
}

/// Format 3 under journaled write-back, its backing journal in a file of
/// its own.
#[test]
fn crash_loop_keeps_every_acknowledged_write_on_format_3_journaled() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    let journal = format!("disk={}", dir.path().join("journal.img").display());
    let extra = [
        "--cache-format",
        "3",
        "--write-policy",
        "write-back-journaled",
        "--journal-size",
        "4M",
        "--journal",
        &journal,
    ];
    crash_loop_with(dir.path(), "fdatasync", &extra);
}

/// Format 3 with each batch written O_DIRECT and RWF_DSYNC (no flush).
#[test]
fn crash_loop_keeps_every_acknowledged_write_on_format_3_dsync_direct() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    let extra = ["--cache-format", "3", "--direct"];
    crash_loop_with(dir.path(), "dsync", &extra);
}

/// A loop device (a real block device) over a 2 MiB file as the cache,
/// opened with O_DIRECT: needs root and losetup.
#[test]
fn crash_loop_keeps_every_acknowledged_write_on_a_loop_device_with_o_direct() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    let Some(dev) = LoopDevice::attach(&dir.path().join("loop.img"), 2 << 20) else {
        return;
    };
    let extra = ["--direct", "--cache-format", "2"];
    crash_loop_on(dir.path(), &dev.path, "fdatasync", &extra);
}

/// Format 3 on a loop device with O_DIRECT.
#[test]
fn crash_loop_keeps_every_acknowledged_write_on_format_3_on_a_loop_device() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir in /tmp");
    let Some(dev) = LoopDevice::attach(&dir.path().join("loop.img"), 2 << 20) else {
        return;
    };
    let extra = ["--direct", "--cache-format", "3"];
    crash_loop_on(dir.path(), &dev.path, "fdatasync", &extra);
}

/// A loop device over a file, detached when dropped.
struct LoopDevice {
    path: std::path::PathBuf,
}

impl LoopDevice {
    /// None (after `skip_or_fail`) where loop devices cannot be set up.
    fn attach(file: &Path, len_bytes: u64) -> Option<LoopDevice> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            common::skip_or_fail("not root: losetup needs root");
            return None;
        }
        std::fs::File::create(file)
            .and_then(|f| f.set_len(len_bytes))
            .expect("loop device's file");
        let out = std::process::Command::new("losetup")
            .args(["--find", "--show", "--direct-io=on"])
            .arg(file)
            .output();
        match out {
            Ok(o) if o.status.success() => {
                let path = String::from_utf8_lossy(&o.stdout).trim().to_string();
                assert!(path.starts_with("/dev/loop"), "losetup printed {path:?}");
                Some(LoopDevice { path: path.into() })
            }
            Ok(o) => {
                common::skip_or_fail(&format!(
                    "losetup failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
                None
            }
            Err(e) => {
                common::skip_or_fail(&format!("losetup: {e}"));
                None
            }
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = std::process::Command::new("losetup")
            .arg("-d")
            .arg(&self.path)
            .status();
    }
}

#[test]
fn crash_loop_keeps_every_acknowledged_write_on_a_mapped_tmpfs_cache() {
    if !wcache_io::device::file::is_on_volatile_memory(Path::new("/dev/shm")) {
        common::skip_or_fail("/dev/shm is not tmpfs here");
        return;
    }
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    crash_loop(dir.path(), "nvram");
}

fn crash_loop(dir: &Path, cache_sync: &str) {
    crash_loop_with(dir, cache_sync, &[]);
}

fn crash_loop_with(dir: &Path, cache_sync: &str, extra: &[&str]) {
    crash_loop_on(dir, &dir.join("cache.img"), cache_sync, extra);
}

/// The crash loop with the cache device at `cache` (a file made there, or
/// a block device).
fn crash_loop_on(dir: &Path, cache: &Path, cache_sync: &str, extra: &[&str]) {
    let backing = dir.join("backing.img");
    let socket = dir.join("w.sock");
    let (cache_s, backing_s) = (
        cache.to_str().expect("utf8").to_string(),
        backing.to_str().expect("utf8").to_string(),
    );
    let args = [
        "--cache",
        &cache_s,
        "--cache-size",
        "2M",
        "--cache-sync",
        cache_sync,
        "--backing",
        &backing_s,
        "--backing-size",
        "4M",
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect::<Vec<&str>>();
    // Write-back unless `extra` names a policy.
    let mut args = args;
    if !extra.contains(&"--write-policy") {
        args.extend(["--write-policy", "write-back"]);
    }
    let seed: u64 = std::env::var("WCACHE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("crash loop seed {seed} (replay: WCACHE_CRASH_SEED={seed})");
    let mut rng = SmallRng::seed_from_u64(seed);
    let state = Arc::new(Mutex::new(vec![
        PageState::default();
        VOLUME_PAGES as usize
    ]));
    let started = Instant::now();
    let (mut acked, mut fua, mut flushes, mut in_flight_old, mut in_flight_new) = (0, 0, 0, 0, 0);
    let mut warned = 0;
    let mut checked_checkpoints = 0usize;
    for iteration in 0..ITERATIONS {
        let served = Served::start(&args, &socket);
        let log = served.log_text();
        if iteration > 0 {
            assert!(log.contains("NOT clean"), "a crash is reported: {log}");
        }
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (socket, state, stop) = (socket.clone(), state.clone(), stop.clone());
                let seed = seed ^ (iteration as u64) << 32;
                std::thread::spawn(move || writer(&socket, w, seed, &state, &stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..300)));
        let log = served.kill9();
        stop.store(true, Ordering::Relaxed);
        if cache_sync == "nvram" {
            // Read from the whole log: the line comes after the socket exists.
            assert!(log.contains("mapped"), "the tmpfs cache is mapped: {log}");
        } else {
            // A cache file on a disk takes the event-driven data path
            // wherever the kernel allows io_uring (the line says why not);
            // format 3 writes each batch with one write from a driver thread.
            assert!(
                log.contains("data path: io_uring")
                    || log.contains("io_uring unavailable")
                    || log.contains("data path: threads (format 3"),
                "the data path is io_uring where available: {log}"
            );
        }
        for w in writers {
            let c = w.join().expect("writer");
            acked += c.writes_acked;
            fua += c.fua;
            flushes += c.flushes;
        }
        let (ok, out, err) = wcache(&["check", "--cache", &cache_s]);
        warned += out.matches("WARN write in flight").count();
        // Format 3: check compared recovery from the checkpoint in force
        // with the whole log's replay.
        checked_checkpoints += out.matches("checkpoint: through batch").count();
        if !ok {
            if let Ok(keep) = std::env::var("WCACHE_CRASH_KEEP") {
                let _ = std::fs::copy(cache, keep);
            }
        }
        assert!(
            ok,
            "iteration {iteration}: wcache check failed:\n{out}\n{err}\nserver log:\n{log}"
        );
        let served = Served::start(&args, &socket);
        let (old, new) = verify(&socket, &state, iteration);
        in_flight_old += old;
        in_flight_new += new;
        // The next iteration restarts on these files after one more kill.
        served.kill9();
    }
    // A clean stop, then an offline flush puts everything on the backing.
    let served = Served::start(&args, &socket);
    verify(&socket, &state, ITERATIONS);
    let (ok, log) = served.stop();
    assert!(ok, "SIGTERM exit: {log}");
    assert!(log.contains("clean shutdown recorded"), "{log}");
    let (ok, out, err) = wcache(&["inspect", "--cache", &cache_s]);
    assert!(ok && out.contains("state:   clean shutdown"), "{out}{err}");
    // Format 3 keeps checkpoints (checked below); the default is the
    // format a new cache got (format 2 on a mapped tmpfs file).
    let format_3 = out.contains("format:  version 3,");
    let asked_2 = extra.windows(2).any(|w| w == ["--cache-format", "2"]);
    assert!(!(format_3 && asked_2), "format 2 was asked for: {out}");
    let export = format!("disk={backing_s}");
    let mut flush = vec!["flush", "--cache", &cache_s, "--export", &export];
    // Journaled write-back drains through its journal, as served.
    for option in ["--journal-size", "--journal"] {
        if let Some(at) = extra.iter().position(|&a| a == option) {
            flush.extend([option, extra[at + 1]]);
        }
    }
    let (ok, out, err) = wcache(&flush);
    assert!(ok, "flush: {out}\n{err}");
    let (ok, out, err) = wcache(&["check", "--strict", "--cache", &cache_s]);
    assert!(
        ok,
        "strict check after a clean stop and flush: {out}\n{err}"
    );
    let on_backing = std::fs::read(&backing).expect("read backing");
    let s = state.lock().expect("state");
    for page in 0..VOLUME_PAGES {
        let at = page as usize * PAGE_BYTES;
        let found = version_of(page, &on_backing[at..at + PAGE_BYTES]).expect("backing page");
        assert_eq!(
            found, s[page as usize].acked,
            "backing page {page} after flush"
        );
    }
    let (ok, out, _) = wcache(&["inspect", "--cache", &cache_s]);
    assert!(ok && out.contains("0 dirty, 0 clean"), "{out}");
    eprintln!(
        "crash loop ({cache_sync}): {ITERATIONS} kills (+{ITERATIONS} between verifications), {acked} writes acknowledged \
         ({fua} FUA, {flushes} FLUSH), in flight at a kill: {in_flight_new} found new, {in_flight_old} found old; \
         0 lost; wcache check warned of {warned} writes in flight, compared {checked_checkpoints} checkpoints with the whole log; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        acked > 1000,
        "the writers did too little to test anything: {acked}"
    );
    assert!(
        !format_3 || checked_checkpoints > ITERATIONS as usize / 2,
        "check compared a checkpoint with the log after only {checked_checkpoints} of {ITERATIONS} kills"
    );
}
