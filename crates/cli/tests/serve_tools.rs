//! `wcache serve` with real NBD clients: fio's nbd engine with crc32c verify,
//! nbdinfo, and the refusals that protect the durability promise.
//! A missing tool prints SKIP with the reason, unless WCACHE_REQUIRE_TOOLS=1,
//! in which case the test fails. Install: apt-get install -y fio libnbd-bin nbdkit.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const WCACHE: &str = env!("CARGO_BIN_EXE_wcache");

fn have(tool: &str, package: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var("WCACHE_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "{tool} is required (WCACHE_REQUIRE_TOOLS=1); apt-get install -y {package}"
        );
        eprintln!("SKIP: {tool} not installed (apt-get install -y {package})");
    }
    found
}

/// A directory on tmpfs when there is one (the cache stands in for NV-DRAM).
fn shm_dir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
            return d;
        }
    }
    tempfile::tempdir().expect("tempdir")
}

struct Served {
    child: Option<Child>,
    socket: PathBuf,
}

impl Served {
    fn start(args: &[&str], socket: &Path) -> Served {
        let child = Command::new(WCACHE)
            .arg("serve")
            .arg("--socket")
            .arg(socket)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wcache serve");
        let mut served = Served {
            child: Some(child),
            socket: socket.to_path_buf(),
        };
        let start = Instant::now();
        while !socket.exists() {
            if let Some(status) = served
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let out = served
                    .child
                    .take()
                    .expect("child")
                    .wait_with_output()
                    .expect("output");
                panic!(
                    "wcache serve exited early ({status}): {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "wcache serve did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        served
    }

    fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.socket.display())
    }

    /// SIGTERM, then the exit status and output.
    fn stop(mut self) -> Output {
        let child = self.child.take().expect("running");
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        child.wait_with_output().expect("wait")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn fio(uri: &str, extra: &[&str], dir: &Path) -> Output {
    Command::new("fio")
        .current_dir(dir)
        .args([
            "--name=verify",
            "--ioengine=nbd",
            "--bsrange=512-64k",
            "--size=24M",
            "--iodepth=16",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--randseed=4242",
        ])
        .arg(format!("--uri={uri}"))
        .args(extra)
        .output()
        .expect("run fio")
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
    let stopped = served.stop();
    assert!(
        stopped.status.success(),
        "SIGTERM exit: {}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    assert!(String::from_utf8_lossy(&stopped.stderr).contains("stopped after"));

    // Write-through: everything acknowledged is on the backing, so a new
    // server (which recovers no dirty page: write-through records are clean) serves it.
    let served = Served::start(&args, &socket);
    let out = fio(
        &served.uri("disk"),
        &["--rw=randwrite", "--verify_only"],
        disk.path(),
    );
    check(&out, "fio verify_only after restart");
    assert!(served.stop().status.success());
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
    assert!(served.stop().status.success());
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
    let stopped = served.stop();
    assert!(stopped.status.success());
    let err = String::from_utf8_lossy(&stopped.stderr);
    assert!(err.contains("FOR BENCHMARKS ONLY"), "{err}");
}
