//! Helpers for the tests that run `wcache serve` as a real process: start it
//! (output to files, so a chatty server never blocks on a full pipe), kill
//! it with SIGKILL or stop it with SIGTERM, find external tools (SKIP with a
//! reason unless WCACHE_REQUIRE_TOOLS=1), and a small fallible NBD client
//! written for these tests (every error is returned, since the server may
//! be killed under it).

#![allow(dead_code)]

pub mod certs;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const WCACHE: &str = env!("CARGO_BIN_EXE_wcache");

/// True if `tool` runs; otherwise prints SKIP, or fails under WCACHE_REQUIRE_TOOLS=1.
pub fn have(tool: &str, package: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        skip_or_fail(&format!(
            "{tool} not installed (apt-get install -y {package})"
        ));
    }
    found
}

/// Prints SKIP with `reason`, or fails under WCACHE_REQUIRE_TOOLS=1.
pub fn skip_or_fail(reason: &str) {
    assert!(
        std::env::var("WCACHE_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "required by WCACHE_REQUIRE_TOOLS=1: {reason}"
    );
    eprintln!("SKIP: {reason}");
}

/// fio's nbd engine against `uri`: 512 B..64 KiB blocks over 24 MiB at
/// depth 16, every block checked with crc32c; `extra` picks the pattern.
pub fn fio_verify(
    name: &str,
    seed: u32,
    uri: &str,
    extra: &[&str],
    dir: &Path,
) -> std::process::Output {
    Command::new("fio")
        .current_dir(dir)
        .arg(format!("--name={name}"))
        .args([
            "--ioengine=nbd",
            "--bsrange=512-64k",
            "--size=24M",
            "--iodepth=16",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--verify_state_save=0",
        ])
        .arg(format!("--randseed={seed}"))
        .arg(format!("--uri={uri}"))
        .args(extra)
        .output()
        .expect("run fio")
}

/// Runs `wcache ARGS`, returning (success, stdout, stderr).
pub fn wcache(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(WCACHE)
        .args(args)
        .output()
        .expect("run wcache");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub struct Served {
    child: Option<Child>,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Served {
    /// `wcache serve --socket SOCKET ARGS`; waits until it listens.
    pub fn start(args: &[&str], socket: &Path) -> Served {
        Served::try_start(args, socket).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As `start`, but an early exit is returned as its output.
    pub fn try_start(args: &[&str], socket: &Path) -> Result<Served, String> {
        Served::try_start_env(args, socket, &[])
    }

    /// As `try_start`, with environment variables set for the server.
    pub fn try_start_env(
        args: &[&str],
        socket: &Path,
        env: &[(&str, &str)],
    ) -> Result<Served, String> {
        Served::try_start_within(args, socket, env, Duration::from_secs(20))
    }

    /// As `try_start_env`, waiting up to `wait` for it to listen.
    pub fn try_start_within(
        args: &[&str],
        socket: &Path,
        env: &[(&str, &str)],
        wait: Duration,
    ) -> Result<Served, String> {
        let _ = std::fs::remove_file(socket);
        let log = socket.with_extension("log");
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(WCACHE)
            .arg("serve")
            .arg("--socket")
            .arg(socket)
            .args(args)
            .envs(env.iter().copied())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("start wcache serve");
        let mut served = Served {
            child: Some(child),
            socket: socket.to_path_buf(),
            log,
        };
        let start = Instant::now();
        while !socket.exists() {
            let child = served.child.as_mut().expect("child");
            if let Some(status) = child.try_wait().expect("try_wait") {
                served.child = None;
                return Err(format!(
                    "wcache serve exited ({status}): {}",
                    served.log_text()
                ));
            }
            assert!(
                start.elapsed() < wait,
                "wcache serve did not listen: {}",
                served.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(served)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.socket.display())
    }

    /// The server's pid, for signals (it is this test's own child).
    pub fn pid(&self) -> libc::pid_t {
        self.child.as_ref().expect("running").id() as libc::pid_t
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().expect("try_wait").is_none(),
            None => false,
        }
    }

    /// SIGKILL: no chance to clean up (as a crash).
    pub fn kill9(mut self) -> String {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        let _ = child.wait();
        self.log_text()
    }

    /// SIGTERM; returns (exit success, log).
    pub fn stop(mut self) -> (bool, String) {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let status = child.wait().expect("wait");
        (status.success(), self.log_text())
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

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_FLUSH: u16 = 3;
pub const FLAG_FUA: u16 = 1;

/// One NBD connection (fixed newstyle, OPT_GO, simple replies), one request at a time.
pub struct Nbd {
    stream: UnixStream,
    pub size_bytes: u64,
    cookie: u64,
}

fn rd<const N: usize>(s: &mut UnixStream) -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    s.read_exact(&mut b)?;
    Ok(b)
}

fn bad(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

impl Nbd {
    pub fn connect(socket: &Path, export: &str) -> std::io::Result<Nbd> {
        let mut s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let hello: [u8; 18] = rd(&mut s)?;
        if &hello[0..8] != b"NBDMAGIC" || &hello[8..16] != b"IHAVEOPT" {
            return Err(bad("not an NBD newstyle server".into()));
        }
        let server_flags = u16::from_be_bytes([hello[16], hello[17]]);
        let no_zeroes = server_flags & 2;
        s.write_all(&(1u32 | no_zeroes as u32).to_be_bytes())?;
        let mut opt = Vec::new();
        opt.extend_from_slice(b"IHAVEOPT");
        opt.extend_from_slice(&7u32.to_be_bytes()); // NBD_OPT_GO
        opt.extend_from_slice(&((4 + export.len() + 2) as u32).to_be_bytes());
        opt.extend_from_slice(&(export.len() as u32).to_be_bytes());
        opt.extend_from_slice(export.as_bytes());
        opt.extend_from_slice(&0u16.to_be_bytes());
        s.write_all(&opt)?;
        let mut size_bytes = None;
        loop {
            let head: [u8; 20] = rd(&mut s)?;
            let reply = u32::from_be_bytes([head[12], head[13], head[14], head[15]]);
            let len = u32::from_be_bytes([head[16], head[17], head[18], head[19]]) as usize;
            let mut data = vec![0u8; len];
            s.read_exact(&mut data)?;
            if reply & 0x8000_0000 != 0 {
                return Err(bad(format!("export {export:?} refused ({reply:#x})")));
            }
            if reply == 3 && len >= 12 && data[0..2] == [0, 0] {
                let mut b = [0u8; 8];
                b.copy_from_slice(&data[2..10]);
                size_bytes = Some(u64::from_be_bytes(b));
            }
            if reply == 1 {
                break;
            }
        }
        Ok(Nbd {
            stream: s,
            size_bytes: size_bytes.ok_or_else(|| bad("no export size".into()))?,
            cookie: 0,
        })
    }

    /// As `connect`, retrying for up to 5 s while the socket refuses (the
    /// socket file appears at bind(2), a moment before listen(2)).
    pub fn connect_retry(socket: &Path, export: &str) -> std::io::Result<Nbd> {
        let start = Instant::now();
        loop {
            match Nbd::connect(socket, export) {
                Err(e)
                    if e.kind() == std::io::ErrorKind::ConnectionRefused
                        && start.elapsed() < Duration::from_secs(5) =>
                {
                    std::thread::sleep(Duration::from_millis(5))
                }
                other => return other,
            }
        }
    }

    /// One request; Ok(Err(errno)) for an error reply.
    pub fn call(
        &mut self,
        command: u16,
        flags: u16,
        offset_bytes: u64,
        len_bytes: u32,
        payload: &[u8],
        read_into: Option<&mut [u8]>,
    ) -> std::io::Result<Result<(), u32>> {
        self.cookie += 1;
        let mut h = Vec::with_capacity(28 + payload.len());
        h.extend_from_slice(&0x2560_9513u32.to_be_bytes());
        h.extend_from_slice(&flags.to_be_bytes());
        h.extend_from_slice(&command.to_be_bytes());
        h.extend_from_slice(&self.cookie.to_be_bytes());
        h.extend_from_slice(&offset_bytes.to_be_bytes());
        h.extend_from_slice(&len_bytes.to_be_bytes());
        h.extend_from_slice(payload);
        self.stream.write_all(&h)?;
        let r: [u8; 16] = rd(&mut self.stream)?;
        if r[0..4] != 0x6744_6698u32.to_be_bytes() || r[8..16] != self.cookie.to_be_bytes() {
            return Err(bad("reply out of step".into()));
        }
        let errno = u32::from_be_bytes([r[4], r[5], r[6], r[7]]);
        if errno != 0 {
            return Ok(Err(errno));
        }
        if let Some(buf) = read_into {
            self.stream.read_exact(buf)?;
        }
        Ok(Ok(()))
    }

    pub fn write(&mut self, offset_bytes: u64, data: &[u8], fua: bool) -> std::io::Result<()> {
        let flags = if fua { FLAG_FUA } else { 0 };
        self.call(
            CMD_WRITE,
            flags,
            offset_bytes,
            data.len() as u32,
            data,
            None,
        )?
        .map_err(|e| bad(format!("write error {e}")))
    }

    pub fn read(&mut self, offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let len = buf.len() as u32;
        self.call(CMD_READ, 0, offset_bytes, len, &[], Some(buf))?
            .map_err(|e| bad(format!("read error {e}")))
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.call(CMD_FLUSH, 0, 0, 0, &[], None)?
            .map_err(|e| bad(format!("flush error {e}")))
    }
}

/// Where page `p` of `serve_scattered` lies: spread over the 1 GiB disk,
/// so that every destage is a seek.
pub fn scattered_offset(p: u64) -> u64 {
    p * 2_621_440 % (1 << 30) / 4096 * 4096
}

/// A server over an emulated 1 GiB disk in `dir` (cache `cache.img` of
/// 16 MiB, control `w.ctl`, socket `w.sock`, `extra` options after), and
/// `pages` pages written and flushed through it at `scattered_offset(p)`,
/// each holding `p as u8 | 1`: about 3 s of destaging on the emulated disk.
pub fn serve_scattered(dir: &Path, pages: u64, extra: &[&str]) -> (Served, Nbd) {
    let d = |name: &str| dir.join(name).display().to_string();
    let mut args: Vec<String> = [
        "--cache",
        &d("cache.img"),
        "--cache-size",
        "16M",
        "--export",
        &format!("disk=emulated-hdd:{}", d("backing.img")),
        "--backing-size",
        "1G",
        "--control",
        &d("w.ctl"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let served = Served::start(&args, &dir.join("w.sock"));
    let mut nbd = Nbd::connect(&served.socket, "disk").expect("connect");
    for p in 0..pages {
        nbd.write(scattered_offset(p), &[p as u8 | 1; 4096], false)
            .expect("write");
    }
    nbd.flush().expect("flush");
    (served, nbd)
}
