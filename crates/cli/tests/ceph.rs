//! `wcache serve` in front of Ceph RBD images on a real cluster
//! (`scripts/ceph-cluster.sh`; the test command starts one and names it in
//! CEPH_CONF, CEPH_KEYRING and CEPH_POOL): pages
//! written and flushed survive a SIGKILL and a restart and reach the image;
//! a second wcache on a served image is refused naming the lock's holder;
//! an OSD or the monitor restarted under a writer loses no acknowledged
//! write; a full pool fails destages by name and loses nothing; a missing
//! image or pool and wrong credentials are named. Without a cluster the
//! tests SKIP, or fail under WCACHE_REQUIRE_CEPH=1.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{scattered_offset, wcache, Nbd, Served};

struct Cluster {
    conf: String,
    keyring: String,
    pool: String,
}

/// One test at a time: an OSD restart would stall the others.
static SERIAL: Mutex<()> = Mutex::new(());

/// The cluster the environment names with this test's turn on it, or
/// None after SKIP.
fn cluster() -> Option<(Cluster, MutexGuard<'static, ()>)> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (var("CEPH_CONF"), var("CEPH_KEYRING"), var("CEPH_POOL")) {
        (Some(conf), Some(keyring), Some(pool)) => Some((
            Cluster {
                conf,
                keyring,
                pool,
            },
            SERIAL.lock().unwrap_or_else(|e| e.into_inner()),
        )),
        _ => {
            let reason = "no Ceph cluster: run `eval $(scripts/ceph-cluster.sh env)` after `scripts/ceph-cluster.sh start`, as CEPH_CONF, CEPH_KEYRING, CEPH_POOL";
            assert!(
                std::env::var("WCACHE_REQUIRE_CEPH").as_deref() != Ok("1"),
                "required by WCACHE_REQUIRE_CEPH=1: {reason}"
            );
            eprintln!("SKIP: {reason}");
            None
        }
    }
}

impl Cluster {
    /// `rbd ARGS` against the cluster; panics naming the output on failure.
    fn rbd(&self, args: &[&str]) -> String {
        let out = Command::new("rbd")
            .args(["-c", &self.conf, "-k", &self.keyring])
            .args(args)
            .output()
            .expect("run rbd (ceph-common)");
        assert!(
            out.status.success(),
            "rbd {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `ceph ARGS` against the cluster: (success, stdout and stderr).
    fn ceph(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("ceph")
            .args(["-c", &self.conf, "-k", &self.keyring])
            .args(args)
            .output()
            .expect("run ceph (ceph-common)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }

    /// Polls `ceph health detail` until `full` says whether `pool` is full.
    fn wait_full(&self, pool: &str, full: bool) {
        let start = Instant::now();
        let says = format!("pool '{pool}' is full");
        loop {
            let (_, health) = self.ceph(&["health", "detail"]);
            if health.contains(&says) == full {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{health}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// A fresh image `name` of `size` with the exclusive-lock feature.
    fn image(&self, name: &str, size: &str) -> String {
        let full = format!("{}/{name}", self.pool);
        // An image a killed process had open keeps its watcher for 30 s.
        let start = Instant::now();
        loop {
            let out = Command::new("rbd")
                .args(["-c", &self.conf, "-k", &self.keyring])
                .args(["rm", "--no-progress", &full])
                .output()
                .expect("run rbd");
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.contains("watchers") || start.elapsed() > Duration::from_secs(45) {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        self.rbd(&[
            "create",
            "--size",
            size,
            "--image-feature",
            "layering,exclusive-lock",
            &full,
        ]);
        self.spec(name)
    }

    fn spec(&self, name: &str) -> String {
        format!(
            "rbd:{}/{name}:conf={}:keyring={}",
            self.pool, self.conf, self.keyring
        )
    }

    /// The image's bytes, read around any cache.
    fn export(&self, name: &str, dir: &Path) -> Vec<u8> {
        let file = dir.join(format!("{name}.export"));
        let _ = std::fs::remove_file(&file);
        let full = format!("{}/{name}", self.pool);
        self.rbd(&[
            "export",
            "--no-progress",
            &full,
            &file.display().to_string(),
        ]);
        std::fs::read(&file).expect("exported image")
    }
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// `wcache serve` of export `disk` on `spec`, cache `cache` in `dir`.
fn serve(dir: &Path, cache: &str, spec: &str) -> Result<Served, String> {
    serve_with(dir, cache, spec, &[])
}

/// As `serve`, with `extra` options.
fn serve_with(dir: &Path, cache: &str, spec: &str, extra: &[&str]) -> Result<Served, String> {
    let d = |name: &str| dir.join(name).display().to_string();
    let (export, file, control) = (format!("disk={spec}"), d(cache), d(&format!("{cache}.ctl")));
    let mut args = vec![
        "--cache",
        &file,
        "--cache-size",
        "32M",
        "--export",
        &export,
        "--control",
        &control,
    ];
    args.extend(extra);
    // A SIGKILLed holder's lock is broken once its watch expires (30 s).
    let wait = Duration::from_secs(60);
    Served::try_start_within(&args, &dir.join(format!("{cache}.sock")), &[], wait)
}

fn page(p: u64, round: u64) -> Vec<u8> {
    vec![(p as u8 | 1) ^ (round as u8).wrapping_mul(0x5b); 4096]
}

/// Written and flushed pages survive SIGKILL: the next start recovers
/// them from the cache (once the dead holder's lock is broken), a second
/// wcache on the image meanwhile is refused naming the lock's holder, a
/// drain puts them on the image, and a clean stop releases the lock.
#[test]
fn flushed_pages_survive_a_sigkill_and_reach_the_image() {
    let Some((c, _turn)) = cluster() else { return };
    let dir = tmp();
    let spec = c.image("kill9", "256M");
    let served = serve(dir.path(), "a", &spec).unwrap();
    let mut nbd = Nbd::connect(&served.socket, "disk").unwrap();
    let pages = 200;
    let at = |p: u64| scattered_offset(p) % (256 << 20);
    for p in 0..pages {
        nbd.write(at(p), &page(p, 0), false).unwrap();
    }
    nbd.flush().unwrap();
    let second = serve(dir.path(), "b", &spec);
    let refused = second
        .err()
        .expect("a second wcache on the image is refused");
    assert!(refused.contains("exclusive lock is held by"), "{refused}");
    served.kill9();

    let start = Instant::now();
    let served = serve(dir.path(), "a", &spec).unwrap();
    eprintln!(
        "restarted on the image in {:.1} s (the dead holder's lock broken)",
        start.elapsed().as_secs_f64()
    );
    let mut nbd = Nbd::connect(&served.socket, "disk").unwrap();
    let mut buf = vec![0u8; 4096];
    for p in 0..pages {
        nbd.read(at(p), &mut buf).unwrap();
        assert!(buf == page(p, 0), "page {p} after the restart");
    }
    let control = dir.path().join("a.ctl").display().to_string();
    let (ok, _, err) = wcache(&["flush", "--control", &control]);
    assert!(ok, "{err}");
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    // A clean stop hands the lock back: the next holder need not wait.
    assert!(log.contains("its exclusive lock released"), "{log}");
    let image = c.export("kill9", dir.path());
    for p in 0..pages {
        let a = at(p) as usize;
        assert!(image[a..a + 4096] == page(p, 0), "page {p} on the image");
    }
}

/// A writer flushes after every round of writes while OSD 0 is killed and
/// started again (`scripts/ceph-cluster.sh restart-osd 0`), under
/// write-through (every write reaches the image, so the writer waits out
/// the restart) and under write-back destaging every 100 ms; then while
/// the monitor is restarted under write-through. After a drain every write
/// whose flush returned is on the image, each page holding its last
/// acknowledged round or the one after it.
#[test]
fn an_osd_restart_under_a_writer_loses_no_acknowledged_write() {
    let Some((c, _turn)) = cluster() else { return };
    let (osd, mon) = (&["restart-osd", "0"][..], &["restart-mon"][..]);
    for (i, (mode, restart)) in [
        (&["--write-policy", "write-through"][..], osd),
        (&["--max-dirty-age", "100ms"][..], osd),
        (&["--write-policy", "write-through"][..], mon),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = tmp();
        let name = format!("osd-restart-{i}");
        let spec = c.image(&name, "256M");
        let served = serve_with(dir.path(), "a", &spec, mode).unwrap();
        let (acked, slowest) = write_through_a_restart(&served.socket, restart);
        let control = dir.path().join("a.ctl").display().to_string();
        let (ok, _, err) = wcache(&["flush", "--control", &control]);
        assert!(ok, "{err}");
        let (ok, log) = served.stop();
        assert!(ok, "{log}");
        let image = c.export(&name, dir.path());
        for (p, last) in acked.iter().enumerate() {
            let last = last.expect("each page acknowledged at least once");
            let a = p * 4096 * 17;
            let on = &image[a..a + 4096];
            let p = p as u64;
            assert!(
                on == page(p, last) || on == page(p, last + 1),
                "{mode:?} {restart:?}, page {p}: neither round {last} nor the next"
            );
        }
        eprintln!(
            "{mode:?} {restart:?}: {} pages checked, {:?} rounds, slowest round {:.1} s",
            acked.len(),
            acked[0],
            slowest.as_secs_f64()
        );
    }
}

/// Rounds of 64 writes and a flush to `socket` from 2 s before
/// `scripts/ceph-cluster.sh RESTART` to 3 s after it: each page's last
/// acknowledged round, and the slowest round.
fn write_through_a_restart(socket: &Path, restart: &[&str]) -> (Vec<Option<u64>>, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, socket) = (Arc::clone(&stop), socket.to_path_buf());
        std::thread::spawn(move || {
            let mut nbd = Nbd::connect(&socket, "disk").unwrap();
            let (mut acked, mut slowest) = (vec![None; 64], Duration::ZERO);
            let mut round = 0u64;
            while !stop.load(Ordering::Acquire) {
                round += 1;
                let start = Instant::now();
                for p in 0..64u64 {
                    nbd.write(p * 4096 * 17, &page(p, round), false).unwrap();
                }
                nbd.flush().unwrap();
                slowest = slowest.max(start.elapsed());
                acked.iter_mut().for_each(|a| *a = Some(round));
            }
            (acked, slowest)
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/ceph-cluster.sh");
    let start = Instant::now();
    let out = Command::new(script).args(restart).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "{restart:?} in {:.1} s under the writer",
        start.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Release);
    writer.join().expect("the writer got every answer")
}

/// A pool over its quota (Ceph holds its writes): under write-back the
/// writer's writes and flushes are acknowledged from the cache, the
/// destages fail after the backing timeout with an error that names the
/// likely cause, their pages stay dirty; once the quota is lifted a drain
/// puts every page on the image.
#[test]
fn a_full_pool_fails_destages_by_name_and_loses_nothing() {
    let Some((c, _turn)) = cluster() else { return };
    let dir = tmp();
    let pool = "wcache-full";
    let remove = [
        "osd",
        "pool",
        "rm",
        pool,
        pool,
        "--yes-i-really-really-mean-it",
    ];
    // A failed run's pool, full, would refuse to be emptied.
    let _ = c.ceph(&remove);
    let (ok, out) = c.ceph(&["osd", "pool", "create", pool, "8"]);
    assert!(ok, "{out}");
    let size_one = [
        "osd",
        "pool",
        "set",
        pool,
        "size",
        "1",
        "--yes-i-really-mean-it",
    ];
    assert!(c.ceph(&size_one).0);
    c.rbd(&["pool", "init", pool]);
    let full = Cluster {
        pool: pool.to_string(),
        conf: c.conf.clone(),
        keyring: c.keyring.clone(),
    };
    let spec = full.image("img", "64M");
    // Served before the pool fills: opening an image takes its lock, a write.
    let served = serve_with(dir.path(), "a", &spec, &["--backing-timeout", "3s"]).unwrap();
    // Over a quota of 1 MiB: 4 MiB written to the pool around wcache.
    assert!(
        c.ceph(&["osd", "pool", "set-quota", pool, "max_bytes", "1048576"])
            .0
    );
    let fill = dir.path().join("fill");
    std::fs::write(&fill, vec![7u8; 4 << 20]).unwrap();
    let target = format!("{pool}/filler");
    full.rbd(&[
        "import",
        "--no-progress",
        &fill.display().to_string(),
        &target,
    ]);
    c.wait_full(pool, true);

    let mut nbd = Nbd::connect(&served.socket, "disk").unwrap();
    for p in 0..64u64 {
        nbd.write(p * 8192, &page(p, 7), false).unwrap();
    }
    nbd.flush().unwrap();
    let control = dir.path().join("a.ctl").display().to_string();
    // A drain cannot finish while the pool is full; its error names why.
    let (ok, _, err) = wcache(&["flush", "--control", &control, "--stall-timeout-s", "8"]);
    assert!(
        !ok,
        "a drain to a full pool succeeded ({err}): {}",
        served.log_text()
    );
    let (_, status, _) = wcache(&["status", "--control", &control]);
    assert!(status.contains("64 dirty pages"), "{status}");
    assert!(
        served.log_text().contains("a full pool or quota"),
        "{}",
        served.log_text()
    );

    assert!(
        c.ceph(&["osd", "pool", "set-quota", pool, "max_bytes", "0"])
            .0
    );
    c.wait_full(pool, false);
    let (ok, _, err) = wcache(&["flush", "--control", &control]);
    assert!(ok, "{err}");
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    let image = full.export("img", dir.path());
    for p in 0..64u64 {
        let a = (p * 8192) as usize;
        assert!(image[a..a + 4096] == page(p, 7), "page {p} on the image");
    }
    let (ok, out) = c.ceph(&remove);
    assert!(ok, "{out}");
}

/// A missing image, a missing pool, a keyring of no use: the serve fails
/// at start with an error that says which.
#[test]
fn a_missing_image_or_pool_and_bad_credentials_are_named() {
    let Some((c, _turn)) = cluster() else { return };
    let dir = tmp();
    let bad_keyring = dir.path().join("bad.keyring");
    std::fs::write(
        &bad_keyring,
        "[client.admin]\n\tkey = AQBtOhhnAAAAABAAx2V0bWVqYXZhc2NyaXB0dGVzdA==\n",
    )
    .unwrap();
    let cases = [
        (
            format!(
                "rbd:{}/no-such-image:conf={}:keyring={}",
                c.pool, c.conf, c.keyring
            ),
            "no image \"no-such-image\"",
        ),
        (
            format!("rbd:no-such-pool/x:conf={}:keyring={}", c.conf, c.keyring),
            "no pool \"no-such-pool\"",
        ),
        (
            format!(
                "rbd:{}/x:conf={}:keyring={}",
                c.pool,
                c.conf,
                bad_keyring.display()
            ),
            "refused client.admin's credentials",
        ),
        (format!("rbd:{}", c.pool), "is not POOL/IMAGE"),
    ];
    for (i, (spec, says)) in cases.iter().enumerate() {
        let err = serve(dir.path(), &format!("c{i}"), spec)
            .err()
            .unwrap_or_else(|| panic!("{spec} was served"));
        assert!(err.contains(says), "{spec}: {err}");
    }
}
