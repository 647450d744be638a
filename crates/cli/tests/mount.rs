//! `wcache mount` as a process: killed with SIGKILL under a writer and
//! mounted again, every acknowledged fsync'd byte is in its file; a stop
//! by SIGTERM unmounts; callers made critical by each mechanism (the
//! real-time I/O class, a command name, a pid through `wcache critical`)
//! have their sync writes admitted under `cp`, the others bypass; writes
//! held in memory reach the engine as their fsync's caller's or, never
//! fsynced, as background writeback with no issuer; bad
//! input (no --cache, a missing backing directory, a mountpoint in use, a
//! pid or cgroup that does not exist, a critical directory outside the
//! backing directory) is a clear error; files under `--critical-dir` lie
//! in the critical volume, cached alone under `--admission volume`, and
//! survive a SIGKILL.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{wcache, WCACHE};

struct Mount {
    child: Option<Child>,
    mnt: PathBuf,
    log: PathBuf,
    control: PathBuf,
}

impl Mount {
    fn start(dir: &Path, extra: &[&str]) -> Mount {
        let (backing, mnt) = (dir.join("backing"), dir.join("mnt"));
        fs::create_dir_all(&backing).unwrap();
        fs::create_dir_all(&mnt).unwrap();
        let log = dir.join(format!("mount-{}.log", Instant::now().elapsed().as_nanos()));
        let file = fs::File::create(&log).unwrap();
        let child = Command::new(WCACHE)
            .arg("mount")
            .arg(&backing)
            .arg(&mnt)
            .arg("--cache")
            .arg(dir.join("cache.img"))
            .args(["--cache-size", "64M"])
            .args(extra)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start wcache mount");
        let m = Mount {
            child: Some(child),
            mnt,
            log,
            control: dir.join("cache.ctl"),
        };
        let start = Instant::now();
        while !m.log_text().contains("Unmount with") {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "not mounted: {}",
                m.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill9(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        // The dead connection's mount stays until it is unmounted.
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }

    fn stop(mut self) -> String {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        assert!(child.wait().unwrap().success(), "{}", self.log_text());
        self.log_text()
    }

    fn engine(&self, name: &str) -> u64 {
        self.stat("engine", name)
    }

    /// A counter or gauge of `stats --json`'s `section` (engine, front).
    fn stat(&self, section: &str, name: &str) -> u64 {
        let control = self.control.display().to_string();
        let (ok, out, err) = wcache(&["stats", "--json", "--control", &control]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        v[section]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["value"].as_u64())
            .unwrap_or(0)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// File `file`'s bytes in round `round` (its length is the file's own).
fn content(file: usize, round: usize) -> Vec<u8> {
    let len = 3000 + (file * 1237) % 9000;
    (0..len)
        .map(|i| (i * 7 + file * 13 + round * 29) as u8)
        .collect()
}

/// A writer rewrites files in place and fsyncs each; SIGKILL in the
/// middle; the next mount destages the cache to the backing files: each
/// page of each file holds the last round whose fsync returned, or the one
/// after it (written, not acknowledged: it may be torn at pages), never
/// anything else.
#[test]
fn every_fsynced_byte_survives_a_sigkill_and_a_remount() {
    let dir = tmp();
    for trial in 0..3 {
        let m = Mount::start(dir.path(), &[]);
        let mut acked = vec![None; 16];
        let deadline = Instant::now() + Duration::from_millis(300 + trial * 200);
        let mut round = trial as usize * 1000;
        while Instant::now() < deadline {
            for (f, last) in acked.iter_mut().enumerate() {
                let mut file = OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .open(m.mnt.join(format!("f{f}")))
                    .unwrap();
                file.write_all(&content(f, round)).unwrap();
                file.sync_all().unwrap();
                *last = Some(round);
            }
            round += 1;
        }
        m.kill9();
        let m = Mount::start(dir.path(), &[]);
        for (f, last) in acked.iter().enumerate() {
            let last = last.expect("each file written at least once");
            let name = format!("f{f}");
            let on_backing = fs::read(dir.path().join("backing").join(&name)).unwrap();
            let (was, next) = (content(f, last), content(f, last + 1));
            assert_eq!(on_backing.len(), was.len(), "trial {trial}, {name}");
            for (p, page) in on_backing.chunks(4096).enumerate() {
                let at = p * 4096..p * 4096 + page.len();
                assert!(
                    page == &was[at.clone()] || page == &next[at],
                    "trial {trial}, {name}, page {p}: neither round {last} nor the next"
                );
            }
            assert_eq!(fs::read(m.mnt.join(&name)).unwrap(), on_backing);
        }
        let log = m.stop();
        assert!(
            log.contains("clean shutdown recorded") || log.contains("stopped after"),
            "{log}"
        );
    }
}

/// `dd` with O_DSYNC writes 8 pages: under `cp` they are admitted when the
/// caller is critical and bypass the cache when it is not.
fn dsync_writes(m: &Mount, name: &str, wrap: &[&str]) -> (u64, u64) {
    let mut cmd: Vec<&str> = wrap.to_vec();
    cmd.push("dd");
    dd_writes(m, name, &cmd, "oflag=dsync")
}

/// `cmd` (a `dd`) writes 8 pages to `name` with `flag`: the engine's
/// writes admitted and bypassed meanwhile. Under `oflag=dsync` each write
/// grows the file, so each is a page and a size record: 16 writes.
fn dd_writes(m: &Mount, name: &str, cmd: &[&str], flag: &str) -> (u64, u64) {
    let (writes, bypasses) = (m.engine("writes"), m.engine("write_bypasses"));
    let of = format!("of={}", m.mnt.join(name).display());
    let mut cmd: Vec<&str> = cmd.to_vec();
    cmd.extend([
        "if=/dev/zero",
        &of,
        "bs=4096",
        "count=8",
        flag,
        "status=none",
    ]);
    let status = Command::new(cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{cmd:?}");
    let w = m.engine("writes") - writes;
    let b = m.engine("write_bypasses") - bypasses;
    (w - b, b)
}

#[test]
fn critical_callers_by_io_class_command_and_pid_are_admitted_under_cp() {
    let dir = tmp();
    let m = Mount::start(dir.path(), &["--admission", "cp", "--realtime-io-critical"]);
    assert_eq!(
        dsync_writes(&m, "plain", &[]),
        (0, 16),
        "not critical: bypassed"
    );
    assert_eq!(
        dsync_writes(&m, "rt", &["ionice", "-c1", "-n0"]),
        (16, 0),
        "real-time I/O class"
    );
    let control = m.control.display().to_string();
    let (ok, _, err) = wcache(&["critical", "--control", &control, "--command", "dd"]);
    assert!(ok, "{err}");
    assert_eq!(dsync_writes(&m, "cmd", &[]), (16, 0), "command name dd");
    let (ok, _, err) = wcache(&[
        "critical",
        "--control",
        &control,
        "--command",
        "dd",
        "--clear",
    ]);
    assert!(ok, "{err}");
    assert_eq!(dsync_writes(&m, "cleared", &[]), (0, 16));
    // By pid: a shell made critical, which then becomes dd (exec: the same pid).
    let of = format!("of={}", m.mnt.join("by-pid").display());
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "read x; exec dd if=/dev/zero {of} bs=4096 count=8 oflag=dsync status=none"
        ))
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = shell.id().to_string();
    let (ok, _, err) = wcache(&["critical", "--control", &control, "--pid", &pid]);
    assert!(ok, "{err}");
    let (writes, bypasses) = (m.engine("writes"), m.engine("write_bypasses"));
    writeln!(shell.stdin.take().unwrap(), "go").unwrap();
    assert!(shell.wait().unwrap().success());
    let bypassed = m.engine("write_bypasses") - bypasses;
    let admitted = m.engine("writes") - writes - bypassed;
    assert_eq!((admitted, bypassed), (16, 0), "the pid's hint");
    for (args, says) in [
        (vec!["--pid", "4000000000"], "no process 4000000000"),
        (vec!["--cgroup", "/no/such/group"], "no cgroup"),
    ] {
        let mut all = vec!["critical", "--control", &control];
        all.extend(args);
        let (ok, _, err) = wcache(&all);
        assert!(!ok && err.contains(says), "{err}");
    }
    m.stop();
}

/// dd copied under another name into `dir`: not critical where `dd` is.
fn dd_renamed(dir: &Path) -> PathBuf {
    let dd = ["/usr/bin/dd", "/bin/dd"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
    let ddx = dir.join("ddx");
    fs::copy(dd, &ddx).unwrap();
    ddx
}

/// Writes held in memory: they reach the engine as the writes of the
/// process whose fsync waits for them (admitted under `cp` when it is
/// critical, bypassed when not) or, never fsynced, as background
/// writeback with no issuer (bypassed under `cp`, whoever wrote them).
#[test]
fn held_writes_reach_the_engine_as_the_fsyncs_caller_or_as_background() {
    let dir = tmp();
    let args = [
        "--admission",
        "cp",
        "--critical-command",
        "dd",
        "--dirty-expire",
        "2",
    ];
    let m = Mount::start(dir.path(), &args);
    let ddx = dd_renamed(dir.path()).display().to_string();
    let (admitted, bypassed) = dd_writes(&m, "critical", &["dd"], "conv=fsync");
    assert!(admitted > 0 && bypassed == 0, "{admitted} {bypassed}");
    let (admitted, bypassed) = dd_writes(&m, "not", &[&ddx], "conv=fsync");
    assert!(admitted == 0 && bypassed > 0, "{admitted} {bypassed}");
    // Never fsynced, by a critical dd: held, then written back with no issuer.
    let (writes, bypasses) = (m.engine("writes"), m.engine("write_bypasses"));
    assert_eq!(
        dd_writes(&m, "later", &["dd"], "conv=notrunc"),
        (0, 0),
        "held"
    );
    let held = m.stat("front", "mount_held_bytes");
    assert!(
        held >= 8 * 4096,
        "the mount's stats show the held writes: {held}"
    );
    assert_eq!(m.stat("front", "mount_held_limit_bytes"), 256 << 20);
    let start = Instant::now();
    while m.engine("write_bypasses") == bypasses {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "never written back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let bypassed = m.engine("write_bypasses") - bypasses;
    assert_eq!(
        m.engine("writes") - writes,
        bypassed,
        "background: bypassed"
    );
    assert_eq!(fs::read(m.mnt.join("later")).unwrap(), vec![0u8; 8 * 4096]);
    assert_eq!(m.stat("front", "mount_held_bytes"), 0, "written back");
}

/// FUSE holds a file's inode lock across an FSYNC request, and
/// `lseek(SEEK_END)` takes it: a critical process's lseek waits for
/// another process's fsync, whose writes bypass the cache to the slow
/// disk. The mount finds the wait in /proc and lends the fsync's issuer
/// criticality, so the rest of its writes are admitted.
#[test]
fn a_critical_process_blocked_on_a_files_inode_lock_lends_the_fsync_criticality() {
    let dir = tmp();
    let args = [
        "--admission",
        "cp-pi-ioi",
        "--critical-command",
        "python3*",
        "--emulate",
        "hdd",
        "--dirty-expire",
        "60",
    ];
    let m = Mount::start(dir.path(), &args);
    let ddx = dd_renamed(dir.path());
    let big = m.mnt.join("big");
    let (writes, bypasses) = (m.engine("writes"), m.engine("write_bypasses"));
    let mut writer = Command::new(&ddx)
        .arg("if=/dev/zero")
        .arg(format!("of={}", big.display()))
        .args(["bs=1M", "count=120", "conv=fsync", "status=none"])
        .spawn()
        .unwrap();
    // Its fsync is under way once the held pages start to bypass.
    let start = Instant::now();
    while m.engine("write_bypasses") == bypasses {
        assert!(start.elapsed() < Duration::from_secs(30), "no fsync");
        std::thread::sleep(Duration::from_millis(2));
    }
    let seek = "import os, sys; print(os.lseek(os.open(sys.argv[1], os.O_RDONLY), 0, os.SEEK_END))";
    let end = Command::new("python3")
        .args(["-c", seek])
        .arg(&big)
        .output()
        .unwrap();
    assert!(end.status.success(), "{end:?}");
    assert!(writer.wait().unwrap().success());
    let lent = m.stat("front", "mount_inode_lock_lends");
    let admitted = (m.engine("writes") - writes) - (m.engine("write_bypasses") - bypasses);
    assert!(lent >= 1, "criticality lent {lent} times");
    assert!(
        admitted > 0,
        "the rest of the fsync's writes admitted: {admitted}"
    );
    assert_eq!(fs::metadata(&big).unwrap().len(), 120 << 20);
}

/// The mount's write group is 1 MiB unless `--group-size` is given (as
/// the cache records it).
#[test]
fn the_mount_destages_in_groups_of_1_mib_unless_told() {
    for (extra, group) in [(&[][..], 1 << 20), (&["--group-size", "65536"][..], 65536)] {
        let dir = tmp();
        Mount::start(dir.path(), extra).stop();
        let cache = dir.path().join("cache.img").display().to_string();
        let (ok, out, err) = wcache(&["inspect", "--cache", &cache]);
        assert!(ok, "{err}");
        assert!(out.contains(&format!("write group {group} bytes")), "{out}");
    }
}

#[test]
fn bad_input_to_wcache_mount_is_named() {
    let dir = tmp();
    let (backing, mnt) = (dir.path().join("backing"), dir.path().join("mnt"));
    fs::create_dir_all(&mnt).unwrap();
    let b = backing.display().to_string();
    let mn = mnt.display().to_string();
    let (ok, _, err) = wcache(&["mount", &b, &mn]);
    assert!(!ok && err.contains("--cache"), "{err}");
    let cache = dir.path().join("cache.img").display().to_string();
    let (ok, _, err) = wcache(&["mount", &b, &mn, "--cache", &cache]);
    assert!(
        !ok && err.contains("backing directory") && err.contains("backing"),
        "{err}"
    );
    assert!(
        !dir.path().join("cache.img").exists(),
        "nothing created on a refused start"
    );
    let m = Mount::start(dir.path(), &[]);
    let (ok, _, err) = wcache(&[
        "mount",
        &b,
        &mn,
        "--cache",
        &dir.path().join("other.img").display().to_string(),
    ]);
    assert!(!ok && err.contains("mountpoint"), "{err}");
    m.stop();
    assert!(
        !fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&mn),
        "unmounted at stop"
    );
    let other = dir.path().join("other.img").display().to_string();
    let own = |extra: &[&str]| {
        let mut args = vec!["mount", &b, &mn, "--cache", &other];
        args.extend_from_slice(extra);
        wcache(&args)
    };
    let (ok, _, err) = own(&["--emulate-own-disk", "pg_wal"]);
    assert!(!ok && err.contains("--emulate"), "{err}");
    let (ok, _, err) = own(&["--emulate", "hdd", "--emulate-own-disk", "../pg_wal"]);
    assert!(!ok && err.contains("../pg_wal"), "{err}");
    let (ok, _, err) = own(&["--critical-dir", "/abs/wal"]);
    assert!(!ok && err.contains("--critical-dir /abs/wal"), "{err}");
    let journaled = ["--write-policy", "write-back-journaled", "--journal"];
    let journal = dir.path().join("journal").display().to_string();
    let (ok, _, err) = own(&[&journaled[..], &[&journal, "--critical-dir", "wal"]].concat());
    assert!(!ok && err.contains("--critical-dir"), "{err}");
    assert!(
        !Path::new(&other).exists(),
        "nothing created on a refused start"
    );
}

/// The dirty pages of each volume (`stats --json`'s exports, in order).
fn dirty_per_volume(m: &Mount) -> Vec<u64> {
    let control = m.control.display().to_string();
    let (ok, out, err) = wcache(&["stats", "--json", "--control", &control]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let exports = v["exports"].as_array().expect("exports");
    exports
        .iter()
        .map(|e| e["dirty_pages"].as_u64().unwrap())
        .collect()
}

/// With `--critical-dir wal`, files under `wal` lie in the second volume,
/// marked critical: under `--admission volume` their writes are cached
/// and the others bypass; a file renamed into `wal` after its first write
/// stays in its volume; after a SIGKILL, the next mount destages the
/// critical volume too, each file whole at its fsynced size.
#[test]
fn files_under_a_critical_dir_alone_are_cached_under_volume_and_survive_a_sigkill() {
    let dir = tmp();
    let args = ["--admission", "volume", "--critical-dir", "wal"];
    let m = Mount::start(dir.path(), &args);
    fs::create_dir(m.mnt.join("wal")).unwrap();
    assert_eq!(dsync_writes(&m, "table", &[]), (0, 16), "outside: bypassed");
    assert_eq!(
        dsync_writes(&m, "wal/log", &[]),
        (16, 0),
        "under wal: cached"
    );
    fs::rename(m.mnt.join("table"), m.mnt.join("wal/table")).unwrap();
    let over = dd_writes(&m, "wal/table", &["dd", "conv=notrunc"], "oflag=dsync");
    assert_eq!(
        over,
        (0, 8),
        "renamed after its first write: still bypassed"
    );
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 4096) as u8).collect();
    let mut file = fs::File::create(m.mnt.join("wal/data")).unwrap();
    file.write_all(&data).unwrap();
    file.sync_all().unwrap();
    drop(file);
    let dirty = dirty_per_volume(&m);
    assert!(
        dirty.len() == 2 && dirty[0] == 0 && dirty[1] > 0,
        "dirty pages per volume (files, files-critical): {dirty:?}"
    );
    m.kill9();
    let m = Mount::start(dir.path(), &args);
    let on_backing = fs::read(dir.path().join("backing/wal/data")).unwrap();
    assert!(
        on_backing == data,
        "wal/data whole on the backing after the remount"
    );
    assert_eq!(fs::read(m.mnt.join("wal/data")).unwrap(), data);
    assert_eq!(dirty_per_volume(&m), vec![0, 0], "destaged at the mount");
    m.stop();
}
