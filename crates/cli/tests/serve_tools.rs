//! `wcache serve` with real NBD clients: fio's nbd engine with crc32c verify,
//! nbdinfo, and the refusals that protect the durability promise.
//! A missing tool prints SKIP with the reason, unless WCACHE_REQUIRE_TOOLS=1,
//! in which case the test fails. Install: apt-get install -y fio libnbd-bin nbdkit.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{fio_verify, have, Nbd, Served, WCACHE};

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

/// A backing whose size is not a whole number of blocks: the export ends at
/// its last whole block (NBD clients address whole blocks), a write into the
/// last block reaches the backing after an offline flush, and the tail past
/// it is left as it was. A backing under one block is refused by name.
#[test]
fn serve_exports_whole_blocks_of_an_odd_sized_backing() {
    let shm = shm_dir();
    let socket = shm.path().join("w.sock");
    let cache = shm.path().join("cache.img");
    let backing = shm.path().join("backing.img");
    std::fs::write(&backing, vec![0xEEu8; 5000]).expect("backing");
    let (cache_s, backing_s) = (
        cache.to_str().expect("utf8").to_string(),
        backing.to_str().expect("utf8").to_string(),
    );
    let args = [
        "--cache",
        &cache_s,
        "--cache-size",
        "1M",
        "--backing",
        &backing_s,
    ];
    let served = Served::start(&args, &socket);
    assert!(
        served.log_text().contains("last 392 bytes"),
        "{}",
        served.log_text()
    );
    let mut nbd = Nbd::connect_retry(&socket, "disk").expect("connect");
    assert_eq!(nbd.size_bytes, 4608);
    nbd.write(4096, &[0x11u8; 512], true)
        .expect("write the last block");
    let mut buf = [0u8; 512];
    nbd.read(4096, &mut buf).expect("read it back");
    assert_eq!(buf, [0x11u8; 512]);
    assert!(
        nbd.read(4608, &mut buf).is_err(),
        "a read past the export's end is refused"
    );
    drop(nbd);
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    let (ok, out, err) = common::wcache(&[
        "flush",
        "--cache",
        &cache_s,
        "--export",
        &format!("disk={backing_s}"),
    ]);
    assert!(ok, "{out}{err}");
    let data = std::fs::read(&backing).expect("backing");
    assert_eq!(data.len(), 5000, "the backing keeps its size");
    assert!(data[..4096].iter().all(|&b| b == 0xEE));
    assert!(data[4096..4608].iter().all(|&b| b == 0x11));
    assert!(
        data[4608..].iter().all(|&b| b == 0xEE),
        "the tail is untouched"
    );

    let tiny = shm.path().join("tiny.img");
    std::fs::write(&tiny, [0u8; 100]).expect("tiny backing");
    let err = Served::try_start(
        &[
            "--cache",
            &cache_s,
            "--backing",
            tiny.to_str().expect("utf8"),
        ],
        &socket,
    )
    .err()
    .expect("a 100-byte backing is refused");
    assert!(
        err.contains("100 bytes: smaller than one block of 512"),
        "{err}"
    );
}

/// Large read misses of a backing file written before the start: the
/// backing reads them around its page cache (O_DIRECT, aligned READs from
/// 64 KiB, whose data the server places at an aligned address), smaller or
/// misaligned ones through it; every byte must be the file's, before and
/// after the clean copies are in the cache.
#[test]
fn large_read_misses_return_the_backing_files_bytes() {
    let disk = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let (socket, cache, backing) = (
        disk.path().join("w.sock"),
        disk.path().join("cache.img"),
        disk.path().join("backing.img"),
    );
    let image: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&backing, &image).expect("backing file");
    let args = [
        "--cache",
        cache.to_str().expect("utf8"),
        "--cache-size",
        "16M",
        "--backing",
        backing.to_str().expect("utf8"),
        "--write-policy",
        "write-back",
    ];
    let served = Served::start(&args, &socket);
    let mut nbd = Nbd::connect_retry(&socket, "disk").expect("connect");
    // (offset, length): aligned large, aligned at the threshold, large at
    // a sector offset, sizes in sectors that are not whole pages (the
    // export's block size is 512 B), and each again once cached.
    let reads = [
        (1u64 << 20, 1usize << 20),
        (3 << 20, 64 << 10),
        ((4 << 20) + 512, (1 << 20) - 512),
        ((6 << 20) + 4096, 200 << 10),
        ((7 << 20) + 512, 70_144),
    ];
    for round in ["miss", "hit"] {
        for &(offset, len) in &reads {
            let mut buf = vec![0u8; len];
            nbd.read(offset, &mut buf)
                .unwrap_or_else(|e| panic!("{round}: read of {len} at {offset}: {e}"));
            let want = &image[offset as usize..offset as usize + len];
            assert!(
                buf == want,
                "{round}: {len} bytes at {offset} differ from the backing file"
            );
        }
    }
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
}

/// `--cache-sync auto` measures the cache device at start, prints what it
/// chose, and serves acknowledged writes that survive a restart; under
/// persist-on-flush it measures nothing (fdatasync, as documented).
#[test]
fn cache_sync_auto_measures_prints_its_choice_and_keeps_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path");
    let socket = dir.path().join("wc.sock");
    let args = [
        "--data-dir",
        d,
        "--cache-size",
        "64M",
        "--cache-sync",
        "auto",
    ];
    let served = Served::start(&args, &socket);
    let log = served.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("durability (--cache-sync auto):"))
        .unwrap_or_else(|| panic!("no durability line: {log}"));
    assert!(
        line.contains("dsync + O_DIRECT") || line.contains("fdatasync"),
        "{line}"
    );
    assert!(line.contains("64 KiB"), "{line}");
    let page = vec![0x5au8; 4096];
    let mut nbd = Nbd::connect_retry(&socket, "disk").expect("connect");
    nbd.write(8192, &page, true).expect("write");
    drop(nbd);
    let (ok, out) = served.stop();
    assert!(ok, "{out}");
    let served = Served::start(&args, &socket);
    let mut nbd = Nbd::connect_retry(&socket, "disk").expect("reconnect");
    let mut back = vec![0u8; 4096];
    nbd.read(8192, &mut back).expect("read");
    assert_eq!(back, page, "the acknowledged write after a restart");
    drop(nbd);
    assert!(served.stop().0);
    let flush = [
        "--data-dir",
        d,
        "--cache-sync",
        "auto",
        "--persist-on-flush",
    ];
    let served = Served::start(&flush, &socket);
    assert!(!served.log_text().contains("durability (--cache-sync auto)"));
    assert!(served.stop().0);
}
