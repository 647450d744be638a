//! Under systemd: `wcache serve` tells the service manager it is ready
//! (READY=1) once its socket is in place, and that it is stopping
//! (STOPPING=1) at SIGTERM, through NOTIFY_SOCKET (Type=notify); and the
//! unit in `docs/wcache.service` scores at most 5 (OK) in
//! `systemd-analyze security` (skipped where systemd-analyze is missing,
//! a failure then under WCACHE_REQUIRE_TOOLS=1).

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::Served;

fn next_message(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a notification within 20 s");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn serve_notifies_ready_once_listening_and_stopping_at_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = |name: &str| dir.path().join(name).display().to_string();
    let notify_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&notify_path).expect("bind");
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let served = Served::try_start_env(
        &[
            "--cache",
            &d("cache.img"),
            "--cache-size",
            "8M",
            "--export",
            &format!("disk={}", d("backing.img")),
            "--backing-size",
            "8M",
            "--control",
            &d("w.ctl"),
        ],
        &dir.path().join("w.sock"),
        &[("NOTIFY_SOCKET", &notify_path.display().to_string())],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let ready = next_message(&socket);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(ready.contains("STATUS=serving 1 export(s)"), "{ready:?}");
    assert!(
        Path::new(&served.socket).exists(),
        "READY=1 before the socket was in place"
    );
    let pid = served.pid();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let stopping = next_message(&socket);
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    let mut served = served;
    let start = std::time::Instant::now();
    while served.is_running() {
        assert!(start.elapsed() < Duration::from_secs(20), "no stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = served.log_text();
    assert!(log.contains("clean shutdown recorded"), "{log}");
}

#[test]
fn the_unit_scores_ok_in_systemd_analyze_security() {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/wcache.service");
    let out = match Command::new("systemd-analyze")
        .args(["security", "--offline=true"])
        .arg(&unit)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var("WCACHE_REQUIRE_TOOLS").as_deref() != Ok("1"),
                "systemd-analyze is required (WCACHE_REQUIRE_TOOLS=1): {e}"
            );
            eprintln!("SKIP: no systemd-analyze ({e})");
            return;
        }
    };
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let score: f64 = text
        .lines()
        .find_map(|l| {
            let rest = l
                .split("Overall exposure level for wcache.service: ")
                .nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no overall exposure level in:\n{text}"));
    assert!(score <= 5.0, "exposure {score} > 5:\n{text}");
    println!("systemd-analyze security: {score}");
}
