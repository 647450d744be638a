//! `wcache serve` with real NBD clients: fio's nbd engine with crc32c verify,
//! nbdinfo, and the refusals that protect the durability promise.
//! A missing tool prints SKIP with the reason, unless WCACHE_REQUIRE_TOOLS=1,
//! in which case the test fails. Install: apt-get install -y fio libnbd-bin nbdkit.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{fio_verify, have, Served, WCACHE};

/// A directory on tmpfs when there is one (the cache stands in for NV-DRAM).
fn shm_dir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
            return d;
        }
    }
    tempfile::tempdir().expect("tempdir")
}

fn fio(uri: &str, extra: &[&str], dir: &Path) -> Output {
    fio_verify("verify", 4242, uri, extra, dir)
}

fn check(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn serve_write_through_fio_verify_survives_restart_and_sigterm_exits_zero() {
    if !have("fio", "fio") {
        return;
    }
    let shm = shm_dir();
    let disk = tempfile::tempdir().expect("tempdir");
    let socket = shm.path().join("w.sock");
    let cache = shm.path().join("cache.img");
    let backing = disk.path().join("backing.img");
    let args = [
        "--cache",
        cache.to_str().expect("utf8"),
        "--cache-size",
        "16M",
        "--backing",
        backing.to_str().expect("utf8"),
        "--backing-size",
        "64M",
        "--write-policy",
        "write-through",
    ];
    let served = Served::start(&args, &socket);
    // Random writes of 512 B..64 KiB (a 16 MiB cache under 24 MiB of data:
    // slots are reused), then every block read back and checked.
    let out = fio(&served.uri("disk"), &["--rw=randwrite"], disk.path());
    check(&out, "fio randwrite + verify");
    let (ok, log) = served.stop();
    assert!(ok, "SIGTERM exit: {log}");
    assert!(log.contains("stopped after"));

    // Write-through: everything acknowledged is on the backing, so a new
    // server (which recovers no dirty page: write-through records are clean) serves it.
    let served = Served::start(&args, &socket);
    let out = fio(
        &served.uri("disk"),
        &["--rw=randwrite", "--verify_only"],
        disk.path(),
    );
    check(&out, "fio verify_only after restart");
    assert!(served.stop().0);
}

#[test]
fn serve_two_exports_share_one_cache_and_nbdinfo_sees_them() {
    if !have("nbdinfo", "libnbd-bin") {
        return;
    }
    let shm = shm_dir();
    let socket = shm.path().join("w.sock");
    let cache = shm.path().join("cache.img");
    let served = Served::start(
        &[
            "--cache",
            cache.to_str().expect("utf8"),
            "--cache-size",
            "8M",
            "--cache-sync",
            "nvram",
            "--export",
            "a=mem:32M",
            "--export",
            &format!("b={}", shm.path().join("b.img").display()),
            "--backing-size",
            "16M",
        ],
        &socket,
    );
    let out = Command::new("nbdinfo")
        .arg("--list")
        .arg(served.uri(""))
        .output()
        .expect("nbdinfo");
    check(&out, "nbdinfo --list");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("export=\"a\"") && text.contains("export=\"b\""),
        "{text}"
    );
    let out = Command::new("nbdinfo")
        .arg("--json")
        .arg(served.uri("b"))
        .output()
        .expect("nbdinfo");
    check(&out, "nbdinfo --json");
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains("\"export-size\": 16777216"), "{json}");
    assert!(json.contains("\"can_multi_conn\": true"), "{json}");
    assert!(served.stop().0);
}

#[test]
fn serve_refuses_write_back_on_a_memory_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(WCACHE)
        .current_dir(dir.path())
        .args([
            "serve",
            "--write-policy",
            "write-back",
            "--cache",
            "mem",
            "--backing",
            "mem:16M",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("write-back is refused with --cache mem") && err.contains("persistent"),
        "{err}"
    );

    // The benchmark flag is refused for a cache file (persistent: write-back
    // needs no flag there).
    let cache = dir.path().join("cache.img");
    let out = Command::new(WCACHE)
        .current_dir(dir.path())
        .args([
            "serve",
            "--volatile-write-back-for-benchmarks",
            "--backing",
            "mem:16M",
            "--cache",
        ])
        .arg(&cache)
        .args(["--socket", "x.sock"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs the cache in process memory"), "{err}");
    assert!(
        !dir.path().join("wcache-data").exists() && !cache.exists(),
        "a refusal creates no files"
    );
}

#[test]
fn serve_volatile_write_back_for_benchmarks_warns_and_serves() {
    if !have("fio", "fio") {
        return;
    }
    let shm = shm_dir();
    let socket = shm.path().join("w.sock");
    let served = Served::start(
        &[
            "--cache",
            "mem",
            "--cache-size",
            "8M",
            "--backing",
            "mem:32M",
            "--volatile-write-back-for-benchmarks",
        ],
        &socket,
    );
    let out = fio(
        &served.uri("disk"),
        &["--rw=randwrite", "--size=16M"],
        shm.path(),
    );
    check(&out, "fio write-back verify");
    let (ok, log) = served.stop();
    assert!(ok);
    assert!(log.contains("FOR BENCHMARKS ONLY"), "{log}");
}
