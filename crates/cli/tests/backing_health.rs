//! An NBD backing that goes away and comes back, seen from `wcache serve`:
//! with `--backing-timeout 1s`, a read of uncached data while nbdkit is
//! stopped fails with EIO (after about the timeout, well before the default
//! 30 s), `wcache status` shows the backing reconnecting, cached data is
//! still served; once nbdkit is back on the same socket the backing
//! reconnects, `status` says so, and the read succeeds. Needs nbdkit: SKIP
//! without it, a failure under WCACHE_REQUIRE_TOOLS=1.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{have, wcache, Nbd, Served};

const PAGE: usize = 4096;

/// nbdkit's file plugin on a Unix socket; killed when dropped.
struct Nbdkit(Child);

impl Nbdkit {
    fn start(socket: &Path, file: &Path) -> Nbdkit {
        let _ = std::fs::remove_file(socket);
        let kit = Nbdkit(
            Command::new("nbdkit")
                .args(["-f", "-U"])
                .arg(socket)
                .arg("file")
                .arg(file)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start nbdkit"),
        );
        wait_for("nbdkit's socket", || socket.exists());
        kit
    }
}

impl Nbdkit {
    /// A graceful stop: SIGTERM (nbdkit finishes what it has and closes
    /// its connections), then wait for it.
    fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn status(control: &str) -> String {
    let (ok, out, err) = wcache(&["status", "--control", control]);
    assert!(ok, "status: {out}{err}");
    out
}

#[test]
fn a_backing_that_goes_away_fails_uncached_reads_after_the_timeout_and_heals() {
    if !have("nbdkit", "nbdkit") {
        return;
    }
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let (kit_socket, file) = (dir.path().join("kit.sock"), dir.path().join("backing.img"));
    std::fs::write(&file, vec![0x5au8; 8 << 20]).expect("backing file");
    let mut kit = Some(Nbdkit::start(&kit_socket, &file));
    let socket = dir.path().join("w.sock");
    let control = dir.path().join("w.ctl");
    let control_s = control.to_str().expect("utf8");
    let backing = format!("nbd+unix:///?socket={}", kit_socket.display());
    let cache = dir.path().join("cache.img");
    let served = Served::start(
        &[
            "--cache",
            cache.to_str().expect("utf8"),
            "--cache-size",
            "4M",
            "--backing",
            &backing,
            "--backing-timeout",
            "1s",
            "--control",
            control_s,
        ],
        &socket,
    );
    let mut nbd = Nbd::connect(&socket, "disk").expect("connect");
    let data = vec![0xc3u8; PAGE];
    nbd.write(0, &data, false).expect("write");
    assert!(
        status(control_s).contains("backing: connected"),
        "{}",
        status(control_s)
    );

    drop(kit.take()); // the backing server goes away
    let mut buf = vec![0u8; PAGE];
    let start = Instant::now();
    let read = nbd.read(4 << 20, &mut buf);
    let waited = start.elapsed();
    assert!(
        read.is_err(),
        "an uncached read with the backing away must fail"
    );
    // A deadline, not a speed check: the default (30 s) would be far over it.
    assert!(
        waited < Duration::from_secs(15),
        "failed only after {waited:?}"
    );
    let out = status(control_s);
    assert!(out.contains("backing: reconnecting"), "{out}");
    nbd.read(0, &mut buf).expect("cached data is still served");
    assert_eq!(buf, data);

    let _kit = Nbdkit::start(&kit_socket, &file); // back on the same socket
    wait_for("the backing to reconnect", || {
        status(control_s).contains("backing: connected")
    });
    nbd.read(4 << 20, &mut buf)
        .expect("read after the backing came back");
    assert_eq!(buf, vec![0x5au8; PAGE]);
    drop(nbd);
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
}

/// Twenty restarts of the backing server under load, every other one
/// graceful (SIGTERM) and the rest `kill -9`: every cycle writes new data
/// (write-back, destaged within a second by the maximum dirty age, so
/// destages meet the outages), restarts nbdkit, reads a page nothing has
/// written (so from the backing: it must succeed within 2 s of the
/// backing's return, a deadline, not a speed check), and reads back
/// everything written so far through the server. At the end an offline
/// `wcache flush` drains the cache into the backing, whose file must then
/// hold every last write.
#[test]
fn twenty_backing_restarts_lose_nothing() {
    if !have("nbdkit", "nbdkit") {
        return;
    }
    const CYCLES: u64 = 20;
    const PAGES_PER_CYCLE: u64 = 16;
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let (kit_socket, file) = (dir.path().join("kit.sock"), dir.path().join("backing.img"));
    std::fs::write(&file, vec![0u8; 8 << 20]).expect("backing file");
    let mut kit = Nbdkit::start(&kit_socket, &file);
    let socket = dir.path().join("w.sock");
    let backing = format!("nbd+unix:///?socket={}", kit_socket.display());
    let cache = dir.path().join("cache.img");
    let cache_s = cache.to_str().expect("utf8");
    let served = Served::start(
        &[
            "--cache",
            cache_s,
            "--cache-size",
            "4M",
            "--backing",
            &backing,
            "--backing-timeout",
            "10s",
            "--max-dirty-age",
            "1s",
        ],
        &socket,
    );
    let mut nbd = Nbd::connect(&socket, "disk").expect("connect");
    // page -> the cycle that last wrote it
    let mut last: std::collections::BTreeMap<u64, u64> = Default::default();
    let image = |page: u64, cycle: u64| vec![(page * 7 + cycle * 13 + 1) as u8; PAGE];
    for cycle in 0..CYCLES {
        for i in 0..PAGES_PER_CYCLE {
            let page = (cycle * 5 + i * 97) % 2000;
            nbd.write(page * PAGE as u64, &image(page, cycle), false)
                .expect("write");
            last.insert(page, cycle);
        }
        if cycle % 2 == 0 {
            kit.stop();
        } else {
            drop(kit); // kill -9
        }
        std::thread::sleep(Duration::from_millis(300));
        kit = Nbdkit::start(&kit_socket, &file);
        let mut buf = vec![0u8; PAGE];
        let back = Instant::now();
        nbd.read((2010 + cycle) * PAGE as u64, &mut buf)
            .expect("uncached read after the backing's return");
        assert!(
            back.elapsed() < Duration::from_secs(2),
            "cycle {cycle}: an uncached read took {:?} after the backing came back",
            back.elapsed()
        );
        assert_eq!(buf, vec![0u8; PAGE]);
        for (&page, &c) in &last {
            nbd.read(page * PAGE as u64, &mut buf).expect("read");
            assert!(
                buf == image(page, c),
                "cycle {cycle}: page {page} is not cycle {c}'s"
            );
        }
    }
    drop(nbd);
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    // The restarts were met: the backing reconnected, several times.
    let reconnects = log.matches("reconnecting -> connected").count();
    assert!(reconnects >= 3, "only {reconnects} reconnects: {log}");
    let (ok, out, err) = wcache(&[
        "flush",
        "--cache",
        cache_s,
        "--export",
        &format!("disk={backing}"),
    ]);
    assert!(ok, "offline flush: {out}{err}");
    drop(kit);
    let bytes = std::fs::read(&file).expect("backing");
    for (&page, &c) in &last {
        let at = page as usize * PAGE;
        assert!(
            bytes[at..at + PAGE] == image(page, c)[..],
            "backing page {page} is not cycle {c}'s"
        );
    }
}
