//! Write-back on a persistent cache with real tools: fio's nbd engine with
//! crc32c verify across a restart; nbdkit's error filter as a failing
//! backing (destages fail, are retried and reported, the server keeps
//! serving the dirty data, and once the errors stop the data reaches the
//! backing); refusal to start over another configuration's dirty cache
//! without --force; the engine configuration `serve` records, shown by
//! `inspect` and used by `flush` (and, on a version-1 device, which records
//! none, a guess that `flush` says is one). A missing tool prints SKIP with the reason, unless
//! WCACHE_REQUIRE_TOOLS=1. Install: apt-get install -y fio nbdkit.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{have, wcache, Nbd, Served};

const PAGE_BYTES: usize = 4096;

fn image(page: u64, round: u8) -> Vec<u8> {
    (0..PAGE_BYTES)
        .map(|i| (page as usize * 31 + i * 7 + round as usize * 101) as u8 ^ 0x5a)
        .collect()
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn fio(uri: &str, extra: &[&str], dir: &Path) -> std::process::Output {
    common::fio_verify("wb", 77, uri, extra, dir)
}

#[test]
fn fio_verify_in_write_back_survives_a_kill_and_a_restart() {
    fio_verify_survives_a_kill_and_a_restart(&[], "write policy write-back,");
}

/// Ordered write-back recovers every version and destages them in order.
#[test]
fn fio_verify_in_ordered_write_back_survives_a_kill_and_a_restart() {
    let args = ["--write-policy", "wb-o"];
    fio_verify_survives_a_kill_and_a_restart(&args, "write policy write-back-ordered,");
}

/// Format 3 (a log of batches) reads its log back after a kill: every
/// acknowledged write is there, and `check` verifies the log.
#[test]
fn fio_verify_on_format_3_survives_a_kill_and_a_restart() {
    let args = ["--cache-format", "3"];
    fio_verify_survives_a_kill_and_a_restart(&args, "format 3: a log of batches");
}

/// The same with the cache device opened O_DIRECT: batches built in
/// aligned memory where a request's buffer is not.
#[test]
fn fio_verify_on_format_3_with_o_direct_survives_a_kill_and_a_restart() {
    let args = ["--cache-format", "3", "--direct"];
    fio_verify_survives_a_kill_and_a_restart(&args, "format 3: a log of batches");
}

fn fio_verify_survives_a_kill_and_a_restart(extra: &[&str], banner: &str) {
    if !have("fio", "fio") {
        return;
    }
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let socket = dir.path().join("w.sock");
    let cache = dir.path().join("cache.img");
    let backing = dir.path().join("backing.img");
    let mut args = vec![
        "--cache",
        cache.to_str().expect("utf8"),
        "--cache-size",
        "16M",
        "--backing",
        backing.to_str().expect("utf8"),
        "--backing-size",
        "32M",
    ];
    args.extend(extra);
    let log_format = extra.contains(&"--cache-format");
    let served = Served::start(&args, &socket);
    assert!(served.log_text().contains(banner), "{}", served.log_text());
    let out = fio(&served.uri("disk"), &["--rw=randwrite"], dir.path());
    assert!(
        out.status.success(),
        "fio randwrite+verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    served.kill9();
    let (ok, out, err) = wcache(&["check", "--cache", cache.to_str().expect("utf8")]);
    if log_format {
        assert!(
            ok && out.contains("a log of") && out.contains("verified"),
            "check of format 3 after a kill: {out}{err}"
        );
        // inspect reads the log back as recovery would, and writes nothing.
        let before = std::fs::read(&cache).expect("cache bytes");
        let (ok, out, err) = wcache(&["inspect", "--cache", cache.to_str().expect("utf8")]);
        let dirty = out
            .lines()
            .any(|l| l.starts_with("  0 disk:") && !l.contains(": 0 dirty"));
        assert!(
            ok && out.contains("log:") && out.contains("batches") && dirty,
            "inspect of format 3: {out}{err}"
        );
        assert!(std::fs::read(&cache).expect("cache bytes") == before);
    } else {
        assert!(ok, "check after kill: {out}{err}");
    }
    // The dirty pages come back from the cache file.
    let served = Served::start(&args, &socket);
    let log = served.log_text();
    assert!(
        log.contains("NOT clean") && log.contains("recovering"),
        "{log}"
    );
    let out = fio(
        &served.uri("disk"),
        &["--rw=randwrite", "--verify_only"],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "fio verify_only after kill -9 and restart: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, log) = served.stop();
    assert!(ok && log.contains("clean shutdown recorded"), "{log}");
}

struct Nbdkit(Child);

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Format 2: ~250 slots, 230 dirty pages past the destage thresholds.
#[test]
fn failing_backing_keeps_dirty_data_serves_it_and_destages_after_recovery() {
    failing_backing_case("2", 230);
}

/// Format 3: one page a write at queue depth 1 is a batch of two slots
/// (its header and the page), and the log keeps room for reclaim, so
/// fewer pages fit dirty in the same 1 MiB while the backing fails.
#[test]
fn failing_backing_keeps_dirty_data_serves_it_and_destages_after_recovery_on_format_3() {
    failing_backing_case("3", 80);
}

fn failing_backing_case(format: &str, pages: u64) {
    if !have("nbdkit", "nbdkit") {
        return;
    }
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let kit_socket = dir.path().join("kit.sock");
    let errors_on = dir.path().join("errors-on");
    std::fs::write(&errors_on, b"").expect("error switch");
    let kit = Nbdkit(
        Command::new("nbdkit")
            .args(["-f", "-U"])
            .arg(&kit_socket)
            .args([
                "--filter=error",
                "memory",
                "8M",
                "error-pwrite=EIO",
                "error-pwrite-rate=100%",
            ])
            .arg(format!("error-pwrite-file={}", errors_on.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nbdkit"),
    );
    wait_for("nbdkit's socket", Duration::from_secs(10), || {
        kit_socket.exists()
    });
    let backing_uri = format!("nbd+unix:///?socket={}", kit_socket.display());
    let socket = dir.path().join("w.sock");
    let cache = dir.path().join("cache.img");
    let cache_s = cache.to_str().expect("utf8").to_string();
    let args = [
        "--cache",
        &cache_s,
        "--cache-size",
        "1M",
        "--group-size",
        "4096",
        "--backing",
        &backing_uri,
        "--cache-format",
        format,
    ];
    let mut served = Served::start(&args, &socket);
    let mut nbd = Nbd::connect_retry(&socket, "disk").expect("connect");
    for page in 0..pages {
        nbd.write(page * PAGE_BYTES as u64, &image(page, 1), page % 8 == 0)
            .expect("write-back acknowledges from the cache");
    }
    nbd.flush().expect("flush");
    wait_for("destage errors in the log", Duration::from_secs(15), || {
        served.log_text().contains("I/O errors so far")
    });
    std::thread::sleep(Duration::from_millis(300)); // retries keep failing
    assert!(
        served.is_running(),
        "the server stays up: {}",
        served.log_text()
    );
    let mut buf = vec![0u8; PAGE_BYTES];
    for page in 0..pages {
        nbd.read(page * PAGE_BYTES as u64, &mut buf).expect("read");
        assert!(
            buf == image(page, 1),
            "dirty page {page} readable during errors"
        );
    }
    // New writes are still accepted while the backing fails.
    nbd.write(0, &image(0, 2), true)
        .expect("write during errors");
    let mut kit_direct = Nbd::connect_retry(&kit_socket, "").expect("nbdkit");
    kit_direct.read(0, &mut buf).expect("read nbdkit");
    assert!(
        buf.iter().all(|&b| b == 0),
        "nothing reached the backing yet"
    );

    // Errors stop: the retried destages succeed.
    std::fs::remove_file(&errors_on).expect("errors off");
    wait_for("a destage to reach nbdkit", Duration::from_secs(20), || {
        (0..pages).any(|page| {
            kit_direct.read(page * PAGE_BYTES as u64, &mut buf).is_ok()
                && buf.iter().any(|&b| b != 0)
        })
    });
    drop(nbd);
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    let (ok, out, err) = wcache(&["inspect", "--cache", &cache_s]);
    let version = format!("format:  version {format},");
    assert!(ok && out.contains(&version), "{out}{err}");
    let errors_line = log
        .lines()
        .find(|l| l.contains("I/O errors so far"))
        .unwrap_or_default()
        .to_string();
    assert!(errors_line.contains("backing"), "{errors_line}");
    // What is still dirty, the offline flush drains.
    let (ok, out, err) = wcache(&[
        "flush",
        "--cache",
        &cache_s,
        "--export",
        &format!("disk={backing_uri}"),
    ]);
    assert!(ok, "flush: {out}{err}");
    for page in 0..pages {
        kit_direct
            .read(page * PAGE_BYTES as u64, &mut buf)
            .expect("read nbdkit");
        let round = if page == 0 { 2 } else { 1 };
        assert!(
            buf == image(page, round),
            "backing page {page} after errors stopped"
        );
    }
    eprintln!("backing errors: {errors_line}");
    drop(kit);
}

#[test]
fn another_configurations_dirty_cache_is_refused_without_force() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let socket = dir.path().join("w.sock");
    let cache = dir.path().join("cache.img");
    let cache_s = cache.to_str().expect("utf8").to_string();
    let b1 = dir.path().join("b1.img");
    let b2 = dir.path().join("b2.img");
    let served = Served::start(
        &[
            "--cache",
            &cache_s,
            "--cache-size",
            "2M",
            "--export",
            &format!("one={}", b1.display()),
            "--backing-size",
            "4M",
        ],
        &socket,
    );
    let mut nbd = Nbd::connect_retry(&socket, "one").expect("connect");
    for page in 0..10u64 {
        nbd.write(page * PAGE_BYTES as u64, &image(page, 1), true)
            .expect("write");
    }
    drop(nbd);
    served.kill9();
    let other = [
        "--cache",
        &cache_s,
        "--export",
        &format!("two={}", b2.display()),
        "--backing-size",
        "4M",
    ];
    let err = Served::try_start(&other, &socket)
        .err()
        .expect("another configuration over dirty pages is refused");
    assert!(
        err.contains("holds 10 dirty pages of another configuration")
            && err.contains("one=")
            && err.contains("--force"),
        "{err}"
    );
    let (ok, out, _) = wcache(&["inspect", "--cache", &cache_s]);
    assert!(
        ok && out.contains("10 dirty pages"),
        "the refusal kept them: {out}"
    );
    // The same export with another size is another configuration too.
    let resized = ["--cache", &cache_s, "--export", "one=mem:8M"];
    let err = Served::try_start(&resized, &socket).err().expect("refused");
    assert!(err.contains("refusing"), "{err}");
    // --force discards them, and says so.
    let forced: Vec<&str> = other.iter().copied().chain(["--force"]).collect();
    let served = Served::start(&forced, &socket);
    let log = served.log_text();
    assert!(log.contains("DISCARDING 10 dirty pages"), "{log}");
    assert!(served.stop().0);
    // A file that is not a cache device is not formatted over.
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![0xabu8; 1 << 20]).expect("junk");
    let err = Served::try_start(
        &[
            "--cache",
            junk.to_str().expect("utf8"),
            "--backing",
            "mem:4M",
        ],
        &socket,
    )
    .err()
    .expect("refused");
    assert!(err.contains("no valid wcache superblock"), "{err}");
    let (ok, _, err) = wcache(&["check", "--cache", junk.to_str().expect("utf8")]);
    assert!(!ok && err.contains("no wcache superblock"), "{err}");
}

/// Rewrites a cache file's superblock as version 1 (what a version-1
/// wcache wrote: no engine configuration), keeping everything else.
fn downgrade_to_version_1(cache: &Path) {
    use wcache_io::format::Superblock;
    let mut bytes = std::fs::read(cache).expect("cache bytes");
    let mut sb = Superblock::decode(&bytes[..4096]).expect("superblock");
    sb.format_version = 1;
    sb.engine = None;
    let v1 = sb.encode().expect("encode version 1");
    bytes[..4096].copy_from_slice(&v1);
    std::fs::write(cache, bytes).expect("rewrite");
}

#[test]
fn flush_drains_with_the_group_size_and_policies_serve_recorded() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let socket = dir.path().join("w.sock");
    let cache = dir.path().join("cache.img");
    let cache_s = cache.to_str().expect("utf8").to_string();
    let backing = dir.path().join("b.img");
    let backing_s = backing.to_str().expect("utf8").to_string();
    let serve = |round: u8| {
        let served = Served::start(
            &[
                "--cache",
                &cache_s,
                "--cache-size",
                "4M",
                "--backing",
                &backing_s,
                "--backing-size",
                "4M",
                "--group-size",
                "262144",
                "--order",
                "cscan",
                "--rate",
                "linear",
                // Format 2: its version-1 predecessor is read below.
                "--cache-format",
                "2",
            ],
            &socket,
        );
        let mut nbd = Nbd::connect_retry(&socket, "disk").expect("connect");
        for page in 0..10u64 {
            nbd.write(page * PAGE_BYTES as u64, &image(page, round), true)
                .expect("write");
        }
        drop(nbd);
        served.kill9();
    };
    let assert_backing = |round: u8| {
        let on_backing = std::fs::read(&backing).expect("backing");
        for page in 0..10usize {
            let at = page * PAGE_BYTES;
            assert!(
                on_backing[at..at + PAGE_BYTES] == image(page as u64, round),
                "page {page} of round {round}"
            );
        }
    };
    let export = format!("disk={backing_s}");
    let recorded = "write group 262144 bytes, write policy write-back, destage order cscan, \
                    destage rate linear, admission all, no sequential cutoff";

    serve(1);
    let (ok, out, err) = wcache(&["inspect", "--cache", &cache_s]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("format:  version 2,"), "{out}");
    assert!(out.contains(&format!("engine:  {recorded}")), "{out}");
    let (ok, out, err) = wcache(&["flush", "--cache", &cache_s, "--export", &export]);
    assert!(ok, "flush: {out}{err}");
    assert!(
        out.contains(&format!(
            "engine configuration as recorded by the last server: {recorded}"
        )),
        "flush uses the recorded configuration: {out}"
    );
    assert_backing(1);

    // A version-1 device: the tools work as before and say nothing is recorded.
    serve(2);
    downgrade_to_version_1(&cache);
    let (ok, out, err) = wcache(&["inspect", "--cache", &cache_s]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("format:  version 1 (rewritten as version 2"),
        "{out}"
    );
    assert!(out.contains("engine:  not recorded"), "{out}");
    assert!(out.contains("10 dirty pages"), "{out}");
    let (ok, out, err) = wcache(&["check", "--cache", &cache_s]);
    assert!(ok && out.contains("engine:  not recorded"), "{out}{err}");
    let (ok, out, err) = wcache(&["flush", "--cache", &cache_s, "--export", &export]);
    assert!(ok, "flush: {out}{err}");
    assert!(
        out.contains("note: the engine configuration is not recorded (version-1 superblock); draining with a guess: write group 65536 bytes"),
        "{out}"
    );
    assert_backing(2);
    let (ok, out, _) = wcache(&["inspect", "--cache", &cache_s]);
    assert!(
        ok && out.contains("format:  version 1"),
        "flush records no guess: {out}"
    );
    // The next server upgrades it and records its configuration.
    serve(3);
    let log = std::fs::read_to_string(socket.with_extension("log")).expect("serve log");
    assert!(
        log.contains("superblock format version 1 upgraded to 2"),
        "{log}"
    );
    let (ok, out, _) = wcache(&["inspect", "--cache", &cache_s]);
    assert!(ok && out.contains("format:  version 2,"), "{out}");
    assert!(out.contains(&format!("engine:  {recorded}")), "{out}");
}

/// `check` of a format-3 cache whose last batch is damaged: after a crash
/// it is a write in flight (a warning, exit 0), with `--strict` it is
/// corruption (non-zero, naming the batch); the batches before it verify.
#[test]
fn check_of_format_3_warns_of_a_torn_last_batch_and_strict_refuses_it() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let (socket, cache, backing) = (
        dir.path().join("w.sock"),
        dir.path().join("cache.img"),
        dir.path().join("backing.img"),
    );
    let cache_s = cache.to_str().expect("utf8");
    let args = [
        "--cache",
        cache_s,
        "--cache-size",
        "4M",
        "--backing",
        backing.to_str().expect("utf8"),
        "--backing-size",
        "8M",
        "--cache-format",
        "3",
    ];
    let served = Served::start(&args, &socket);
    let mut nbd = Nbd::connect_retry(&socket, "disk").expect("connect");
    for (i, page) in [3u64, 9, 27].into_iter().enumerate() {
        let data: Vec<u8> = (page..page + 4).flat_map(|p| image(p, 1)).collect();
        nbd.write(page * PAGE_BYTES as u64, &data, i == 2)
            .expect("write");
    }
    drop(nbd);
    served.kill9();
    let (ok, out, err) = wcache(&["check", "--cache", cache_s]);
    assert!(ok && out.contains("a log of 3 batches"), "{out}{err}");
    assert!(!out.contains("WARN"), "{out}");
    // The last batch's last page: the slot before the log's end.
    let (_, inspect, _) = wcache(&["inspect", "--cache", cache_s]);
    // "log:     3 batches from slot T (batch B), S slots; …", "… data at D".
    let field = |line: &str, after: &str| -> u64 {
        let l = inspect.lines().find(|l| l.starts_with(line)).expect(line);
        let rest = &l[l.find(after).expect(after) + after.len()..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().expect("a number")
    };
    let tail = field("log:", "from slot ");
    let slots = field("log:", "), ");
    let data_at = field("geometry:", "data at ");
    let at = (data_at + (tail + slots - 1) * PAGE_BYTES as u64) as usize;
    let mut bytes = std::fs::read(&cache).expect("cache bytes");
    bytes[at + 100] ^= 0xff;
    std::fs::write(&cache, &bytes).expect("damage");
    let (ok, out, err) = wcache(&["check", "--cache", cache_s]);
    assert!(
        ok && out.contains("WARN write in flight") && out.contains("a log of 2 batches"),
        "{out}{err}"
    );
    let (ok, out, err) = wcache(&["check", "--strict", "--cache", cache_s]);
    assert!(
        !ok && out.contains("CORRUPT") && out.contains("is not whole"),
        "{out}{err}"
    );
}
