//! End to end with the kernel as the client: ext4 on `wcache serve`, attached
//! through `nbdfuse` (NBD export as a FUSE file) and a loop device, the way the
//! README tells a user to do it.
//!
//! mkfs.ext4, mount, write files of assorted sizes, sync, umount, detach; then a
//! fresh attach (so nothing is read from the kernel's caches of the first one):
//! `e2fsck -fn` must be clean and every file must read back byte for byte;
//! SIGTERM must exit 0; a new server on the same cache and backing files must
//! serve the same filesystem (e2fsck clean, every file again).
//!
//! The backing is the emulated 10K RPM HDD over a sparse 1 GiB file; the cache a
//! file. Write-through always runs; write-back runs too when this binary
//! accepts it with a durable file cache (it is refused until crash recovery
//! exists), and the test says which.
//!
//! Needs root, /dev/fuse and loop devices (where one is missing it prints
//! `SKIP: <reason>` and passes), and the tools (apt-get install -y libnbd-bin
//! fuse3 e2fsprogs util-linux mount; a missing tool skips too, unless
//! WCACHE_REQUIRE_TOOLS=1, in which case it fails). Every mount, loop device, FUSE mount and process it starts is
//! undone by guards on every path, failures included.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WCACHE: &str = env!("CARGO_BIN_EXE_wcache");
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
const BACKING_SIZE: &str = "1G";
const CACHE_SIZE: &str = "64M";

fn tools_required() -> bool {
    std::env::var("WCACHE_REQUIRE_TOOLS").as_deref() == Ok("1")
}

/// Full path of `tool` in PATH or the sbin directories (root's tools live there).
fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file());
    found
}

struct Tools {
    nbdfuse: PathBuf,
    fusermount: PathBuf,
    losetup: PathBuf,
    blockdev: PathBuf,
    mkfs: PathBuf,
    e2fsck: PathBuf,
    mount: PathBuf,
    umount: PathBuf,
}

/// Why this machine cannot run the test at all (no root, FUSE or loop
/// devices): a property of the machine, so always a skip.
fn machine_lacks() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (mount and losetup need root)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse (FUSE unavailable)".into());
    }
    if !Path::new("/dev/loop-control").exists() && !Path::new("/dev/loop0").exists() {
        return Some("no loop devices (/dev/loop-control, /dev/loop0)".into());
    }
    None
}

/// The tools the test runs, or which one is missing (installable: fails
/// under WCACHE_REQUIRE_TOOLS=1).
fn tools() -> Result<Tools, String> {
    let get = |tool: &str, package: &str| {
        find_tool(tool)
            .ok_or_else(|| format!("{tool} not installed (apt-get install -y {package})"))
    };
    Ok(Tools {
        nbdfuse: get("nbdfuse", "nbdfuse")?,
        fusermount: get("fusermount3", "fuse3")?,
        losetup: get("losetup", "mount")?,
        blockdev: get("blockdev", "util-linux")?,
        mkfs: get("mkfs.ext4", "e2fsprogs")?,
        e2fsck: get("e2fsck", "e2fsprogs")?,
        mount: get("mount", "mount")?,
        umount: get("umount", "mount")?,
    })
}

/// Runs a command to its end, killed after `COMMAND_TIMEOUT`.
fn run(program: &Path, args: &[&str]) -> Result<Output, String> {
    let what = format!("{} {}", program.display(), args.join(" "));
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(COMMAND_TIMEOUT) {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our own child, which the waiting
            // thread has not reaped (it is still waiting for it).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            Err(format!("{what}: no end after {COMMAND_TIMEOUT:?}, killed"))
        }
    }
}

/// Runs a command that must succeed; its stdout.
fn run_ok(program: &Path, args: &[&str]) -> String {
    let out = run(program, args).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "{} {} failed ({}):\n{}\n{}",
        program.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// A running `wcache serve`; killed (SIGKILL) if dropped without `stop`.
struct Server {
    child: Option<Child>,
    log: PathBuf,
}

impl Server {
    /// Starts the server and waits until it listens; `Err` with its output if
    /// it exits first (a refused configuration).
    fn start(args: &[String], socket: &Path, log: &Path) -> Result<Server, String> {
        let _ = std::fs::remove_file(socket);
        let out = File::create(log).expect("server log");
        let child = Command::new(WCACHE)
            .arg("serve")
            .arg("--socket")
            .arg(socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log fd"))
            .stderr(out)
            .spawn()
            .expect("start wcache serve");
        let mut server = Server {
            child: Some(child),
            log: log.to_path_buf(),
        };
        let start = Instant::now();
        while !socket.exists() {
            let child = server.child.as_mut().expect("running");
            if let Ok(Some(status)) = child.try_wait() {
                server.child = None;
                return Err(format!("exited {status}: {}", server.log_text()));
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "wcache serve did not listen within 20 s: {}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM; the server must exit 0 within 20 s.
    fn stop(mut self) {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let status = wait_child(&mut child, Duration::from_secs(20));
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert!(
            status.is_some_and(|s| s.success()),
            "wcache serve after SIGTERM: {status:?}\n{}",
            self.log_text()
        );
        // What it recovered at start and left at exit (dirty pages, clean shutdown).
        for line in self.log_text().lines() {
            if line.starts_with("wcache: ") && !line.contains("serving") {
                eprintln!("  {line}");
            }
        }
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

/// An NBD export attached as a block device: nbdfuse exposes it as the file
/// `fuse_dir/nbd`, a loop device over that file, optionally mounted. Drop
/// undoes whatever is still set up (umount, losetup -d, fusermount3 -u),
/// whatever happened before; `detach` does the same and asserts each step.
struct Attached<'t> {
    tools: &'t Tools,
    fuse_dir: PathBuf,
    mount_dir: PathBuf,
    nbdfuse: Option<Child>,
    fuse_mounted: bool,
    loop_dev: Option<String>,
    mounted: bool,
}

impl<'t> Attached<'t> {
    fn attach(tools: &'t Tools, uri: &str, dir: &Path) -> Attached<'t> {
        let fuse_dir = dir.join("fuse");
        let mount_dir = dir.join("mnt");
        std::fs::create_dir_all(&fuse_dir).expect("fuse dir");
        std::fs::create_dir_all(&mount_dir).expect("mount dir");
        let pid_file = dir.join("nbdfuse.pid");
        let _ = std::fs::remove_file(&pid_file);
        let log = File::create(dir.join("nbdfuse.log")).expect("nbdfuse log");
        let child = Command::new(&tools.nbdfuse)
            .arg("-P")
            .arg(&pid_file)
            .arg(&fuse_dir)
            .arg(uri)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .expect("start nbdfuse");
        let mut me = Attached {
            tools,
            fuse_dir,
            mount_dir,
            nbdfuse: Some(child),
            fuse_mounted: false,
            loop_dev: None,
            mounted: false,
        };
        // nbdfuse writes its pid file once the FUSE file system is up.
        let start = Instant::now();
        while !pid_file.exists() {
            let child = me.nbdfuse.as_mut().expect("nbdfuse");
            if let Ok(Some(status)) = child.try_wait() {
                me.nbdfuse = None;
                panic!(
                    "nbdfuse exited {status}: {}",
                    std::fs::read_to_string(dir.join("nbdfuse.log")).unwrap_or_default()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "nbdfuse not ready within 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        me.fuse_mounted = true;
        let file = me.fuse_dir.join("nbd");
        let dev = run_ok(
            &tools.losetup,
            &["-f", "--show", file.to_str().expect("utf8")],
        );
        let dev = dev.trim().to_string();
        assert!(dev.starts_with("/dev/loop"), "losetup printed {dev:?}");
        me.loop_dev = Some(dev);
        // A loop device number is reused: drop any buffers left from an
        // earlier user so every read below reaches the server.
        run_ok(&tools.blockdev, &["--flushbufs", me.dev()]);
        me
    }

    fn dev(&self) -> &str {
        self.loop_dev.as_deref().expect("loop device attached")
    }

    fn mkfs(&self) {
        run_ok(
            &self.tools.mkfs,
            &[
                "-q",
                "-F",
                "-E",
                "lazy_itable_init=1,lazy_journal_init=1",
                self.dev(),
            ],
        );
    }

    /// `e2fsck -fn` must report a clean file system (exit 0).
    fn fsck_clean(&self) {
        run_ok(&self.tools.e2fsck, &["-f", "-n", self.dev()]);
    }

    fn mount(&mut self) -> &Path {
        assert!(!self.mounted);
        // noinit_itable: no background inode-table zeroing racing the test.
        run_ok(
            &self.tools.mount,
            &[
                "-t",
                "ext4",
                "-o",
                "noinit_itable",
                self.dev(),
                self.mount_dir.to_str().expect("utf8"),
            ],
        );
        self.mounted = true;
        &self.mount_dir
    }

    fn umount(&mut self) {
        assert!(self.mounted);
        run_ok(
            &self.tools.umount,
            &[self.mount_dir.to_str().expect("utf8")],
        );
        self.mounted = false;
    }

    /// Orderly teardown: each step must succeed, and nbdfuse must exit 0.
    fn detach(mut self) {
        if self.mounted {
            self.umount();
        }
        if let Some(dev) = self.loop_dev.take() {
            run_ok(&self.tools.losetup, &["-d", &dev]);
        }
        if self.fuse_mounted {
            let fuse_dir = self.fuse_dir.to_str().expect("utf8");
            // `losetup -d` lets go of the file in the kernel a moment
            // later: until then the FUSE mount is busy (seen in CI).
            for tries in 1.. {
                let out = run(&self.tools.fusermount, &["-u", fuse_dir])
                    .unwrap_or_else(|e| panic!("{e}"));
                if out.status.success() {
                    break;
                }
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    err.contains("busy") && tries < 50,
                    "fusermount -u {fuse_dir} failed ({}), try {tries}: {err}",
                    out.status
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            self.fuse_mounted = false;
        }
        if let Some(mut child) = self.nbdfuse.take() {
            let status = wait_child(&mut child, Duration::from_secs(10));
            if status.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            assert!(
                status.is_some_and(|s| s.success()),
                "nbdfuse after fusermount3 -u: {status:?}"
            );
        }
    }
}

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        let mount_dir = self.mount_dir.to_string_lossy().into_owned();
        let fuse_dir = self.fuse_dir.to_string_lossy().into_owned();
        if self.mounted {
            let ok = run(&self.tools.umount, &[&mount_dir]).is_ok_and(|o| o.status.success());
            if !ok {
                let _ = run(&self.tools.umount, &["-l", &mount_dir]);
            }
        }
        if let Some(dev) = self.loop_dev.take() {
            let _ = run(&self.tools.losetup, &["-d", &dev]);
        }
        if self.fuse_mounted {
            let ok =
                run(&self.tools.fusermount, &["-u", &fuse_dir]).is_ok_and(|o| o.status.success());
            if !ok {
                let _ = run(&self.tools.fusermount, &["-u", "-z", &fuse_dir]);
            }
        }
        if let Some(mut child) = self.nbdfuse.take() {
            if wait_child(&mut child, Duration::from_secs(5)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The files written: odd sizes around sectors and pages, a few MiB, and a
/// directory tree of small files.
fn file_set() -> Vec<(String, usize)> {
    let mut files: Vec<(String, usize)> = [
        ("empty", 0),
        ("one-byte", 1),
        ("odd-511", 511),
        ("sector-512", 512),
        ("page-minus-1", 4095),
        ("page-4096", 4096),
        ("page-plus-1", 4097),
        ("odd-12345", 12_345),
        ("group-plus-1", 65_537),
        ("mib-plus-4099", (1 << 20) + 4099),
        ("three-mib-plus-17", (3 << 20) + 17),
        ("five-mib", 5 << 20),
    ]
    .iter()
    .map(|(n, s)| (n.to_string(), *s))
    .collect();
    for i in 0..40usize {
        files.push((format!("tree/d{}/small-{i}", i % 5), (i * 977) % 8192 + 1));
    }
    files
}

/// Deterministic contents for a name (splitmix64 seeded by an FNV-1a hash),
/// so verification regenerates them instead of keeping copies.
fn contents(name: &str, size_bytes: usize) -> Vec<u8> {
    let mut state = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut out = Vec::with_capacity(size_bytes + 8);
    while out.len() < size_bytes {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(size_bytes);
    out
}

fn write_files(root: &Path) {
    for (name, size_bytes) in file_set() {
        let path = root.join(&name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, contents(&name, size_bytes)).expect("write file");
    }
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
}

fn verify_files(root: &Path, when: &str) {
    for (name, size_bytes) in file_set() {
        let got =
            std::fs::read(root.join(&name)).unwrap_or_else(|e| panic!("{when}: read {name}: {e}"));
        assert_eq!(got.len(), size_bytes, "{when}: size of {name}");
        let want = contents(&name, size_bytes);
        if let Some(at) = got.iter().zip(&want).position(|(g, w)| g != w) {
            panic!("{when}: {name} differs from byte {at} (of {size_bytes})");
        }
    }
}

/// The whole scenario for one write policy.
fn ext4_round_trip(tools: &Tools, policy: &str, server_args: &[String], dir: &Path) {
    let socket = dir.join("w.sock");
    let uri = format!("nbd+unix:///disk?socket={}", socket.display());
    let log = dir.join("serve.log");
    let start = Instant::now();

    let server = Server::start(server_args, &socket, &log).unwrap_or_else(|e| panic!("{e}"));
    let mut disk = Attached::attach(tools, &uri, dir);
    disk.mkfs();
    let root = disk.mount().to_path_buf();
    write_files(&root);
    disk.umount();
    disk.detach();

    // A fresh attach: new FUSE file, new loop binding, nothing cached.
    let mut disk = Attached::attach(tools, &uri, dir);
    disk.fsck_clean();
    let root = disk.mount().to_path_buf();
    verify_files(&root, &format!("{policy}, first server"));
    disk.umount();
    disk.detach();
    server.stop();

    // A clean restart on the same cache and backing files.
    let server = Server::start(server_args, &socket, &log).unwrap_or_else(|e| panic!("{e}"));
    let mut disk = Attached::attach(tools, &uri, dir);
    disk.fsck_clean();
    let root = disk.mount().to_path_buf();
    verify_files(&root, &format!("{policy}, after restart"));
    disk.umount();
    disk.fsck_clean();
    disk.detach();
    server.stop();
    eprintln!(
        "{policy}: ext4 round trip and restart in {:?}",
        start.elapsed()
    );
}

fn path_arg(p: &Path) -> String {
    p.to_str().expect("utf8 path").to_string()
}

/// The tools, or None after printing why the test skips (a machine
/// without root, FUSE or loop devices; a missing tool, a failure under
/// WCACHE_REQUIRE_TOOLS=1).
fn tools_or_skip() -> Option<Tools> {
    if let Some(reason) = machine_lacks() {
        eprintln!("SKIP: {reason}");
        return None;
    }
    match tools() {
        Ok(t) => Some(t),
        Err(reason) => {
            assert!(!tools_required(), "WCACHE_REQUIRE_TOOLS=1 but {reason}");
            eprintln!("SKIP: {reason}");
            None
        }
    }
}

#[test]
fn ext4_on_nbdfuse_loop_survives_remount_and_restart() {
    let Some(tools) = tools_or_skip() else {
        return;
    };

    // Write-through: cache file on tmpfs standing in for NV-DRAM (nvram sync
    // mode), backing the emulated HDD over a sparse file on disk.
    let shm = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    };
    let disk_dir = tempfile::tempdir().expect("tempdir");
    let wt_args = vec![
        "--write-policy".into(),
        "write-through".into(),
        "--cache".into(),
        path_arg(&shm.path().join("cache.img")),
        "--cache-size".into(),
        CACHE_SIZE.into(),
        "--cache-sync".into(),
        "nvram".into(),
        "--backing".into(),
        format!(
            "emulated-hdd:{}",
            disk_dir.path().join("wt-backing.img").display()
        ),
        "--backing-size".into(),
        BACKING_SIZE.into(),
    ];
    let wt_dir = disk_dir.path().join("wt");
    std::fs::create_dir_all(&wt_dir).expect("dir");
    ext4_round_trip(&tools, "write-through", &wt_args, &wt_dir);

    // Write-back with a durable cache file on disk (fdatasync), if this
    // binary accepts it; today it refuses write-back until crash recovery exists.
    let wb_dir = disk_dir.path().join("wb");
    std::fs::create_dir_all(&wb_dir).expect("dir");
    let wb_args = vec![
        "--write-policy".into(),
        "write-back".into(),
        "--cache".into(),
        path_arg(&wb_dir.join("cache.img")),
        "--cache-size".into(),
        CACHE_SIZE.into(),
        "--backing".into(),
        format!("emulated-hdd:{}", wb_dir.join("backing.img").display()),
        "--backing-size".into(),
        BACKING_SIZE.into(),
    ];
    match Server::start(&wb_args, &wb_dir.join("probe.sock"), &wb_dir.join("probe.log")) {
        Ok(probe) => {
            probe.stop();
            for f in ["cache.img", "backing.img"] {
                let _ = std::fs::remove_file(wb_dir.join(f));
            }
            ext4_round_trip(&tools, "write-back", &wb_args, &wb_dir);
        }
        Err(why) => eprintln!(
            "NOTE: write-back with a file cache is refused by this binary, ran write-through only: {}",
            why.lines().next().unwrap_or_default()
        ),
    }
}

/// The server arguments of `policy` over `dir`'s cache and backing files
/// (journaled write-back: its journal in a file of its own beside them).
fn policy_args(policy: &str, dir: &Path) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--write-policy".into(),
        policy.into(),
        "--cache".into(),
        path_arg(&dir.join("cache.img")),
        "--cache-size".into(),
        CACHE_SIZE.into(),
        "--backing".into(),
        path_arg(&dir.join("backing.img")),
        "--control".into(),
        path_arg(&dir.join("w.ctl")),
    ];
    if policy == "write-back-journaled" {
        args.extend(journal_args(dir));
    }
    args
}

fn journal_args(dir: &Path) -> Vec<String> {
    vec![
        "--journal-size".into(),
        "16M".into(),
        "--journal".into(),
        format!("disk={}", dir.join("journal.img").display()),
    ]
}

/// An ext4 filesystem made on the backing file directly, holding `file_set`.
fn existing_filesystem(tools: &Tools, dir: &Path) {
    let staging = dir.join("staging");
    write_files(&staging);
    let backing = dir.join("backing.img");
    File::create(&backing)
        .and_then(|f| f.set_len(256 << 20))
        .expect("backing file");
    run_ok(
        &tools.mkfs,
        &[
            "-q",
            "-F",
            "-d",
            staging.to_str().expect("utf8"),
            backing.to_str().expect("utf8"),
        ],
    );
    std::fs::remove_dir_all(&staging).expect("staging");
}

/// The backing file alone (no wcache): e2fsck clean, and every file of
/// both sets reads back through a loop device of its own.
fn check_backing_alone(tools: &Tools, dir: &Path, policy: &str) {
    let backing = dir.join("backing.img");
    run_ok(
        &tools.e2fsck,
        &["-f", "-n", backing.to_str().expect("utf8")],
    );
    let dev = run_ok(
        &tools.losetup,
        &["-f", "--show", backing.to_str().expect("utf8")],
    );
    let mut disk = Attached {
        tools,
        fuse_dir: dir.join("fuse"),
        mount_dir: dir.join("mnt"),
        nbdfuse: None,
        fuse_mounted: false,
        loop_dev: Some(dev.trim().to_string()),
        mounted: false,
    };
    run_ok(&tools.blockdev, &["--flushbufs", disk.dev()]);
    let root = disk.mount().to_path_buf();
    verify_files(&root, &format!("{policy}, backing alone"));
    verify_files(&root.join("new"), &format!("{policy}, backing alone, new"));
    disk.detach();
}

#[test]
fn an_existing_filesystem_behind_every_write_policy_mounts_through_the_cache_and_alone() {
    let Some(tools) = tools_or_skip() else {
        return;
    };
    let top = tempfile::tempdir().expect("tempdir");
    for policy in [
        "write-through",
        "write-around",
        "write-back",
        "write-back-ordered",
        "write-back-journaled",
    ] {
        let start = Instant::now();
        let dir = top.path().join(policy);
        std::fs::create_dir_all(&dir).expect("dir");
        existing_filesystem(&tools, &dir);
        let before = std::fs::read(dir.join("backing.img")).expect("backing");
        let socket = dir.join("w.sock");
        let log = dir.join("serve.log");
        if policy == "write-back-journaled" {
            // No journal place given: refused, the filesystem untouched.
            let mut args = policy_args(policy, &dir);
            args.truncate(args.len() - 2);
            let refused = Server::start(&args, &socket, &log).err();
            let why = refused.expect("journaled write-back without --journal must be refused");
            assert!(why.contains("--journal disk=PATH"), "{why}");
        }
        let server = Server::start(&policy_args(policy, &dir), &socket, &log)
            .unwrap_or_else(|e| panic!("{policy}: {e}"));
        let uri = format!("nbd+unix:///disk?socket={}", socket.display());
        let mut disk = Attached::attach(&tools, &uri, &dir);
        disk.fsck_clean();
        let root = disk.mount().to_path_buf();
        verify_files(&root, &format!("{policy}, through the cache"));
        write_files(&root.join("new"));
        disk.umount();
        disk.fsck_clean();
        disk.detach();
        // Drain online, then stop: the backing alone holds everything.
        let (ok, out, err) = {
            let o = Command::new(WCACHE)
                .args(["flush", "--control", &path_arg(&dir.join("w.ctl"))])
                .output()
                .expect("flush");
            (
                o.status.success(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        };
        assert!(ok, "{policy}: online flush: {out}{err}");
        server.stop();
        assert!(
            before != std::fs::read(dir.join("backing.img")).expect("backing"),
            "{policy}: the new files never reached the backing"
        );
        check_backing_alone(&tools, &dir, policy);
        eprintln!("{policy}: existing ext4 kept, in {:?}", start.elapsed());
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
