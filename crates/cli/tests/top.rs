//! `wcache top` under tmux: it draws the running server's numbers (the
//! export's request rows appear once requests come, and the total counts
//! them), and `q` quits it. A missing tmux prints SKIP, or fails under
//! WCACHE_REQUIRE_TOOLS=1 (scripts/test.sh installs it).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{have, wcache, Nbd, Served, WCACHE};

fn tmux(args: &[&str]) -> (bool, String) {
    let out = Command::new("tmux").args(args).output().expect("run tmux");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Kills the tmux session when the test ends, passed or not.
struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .output();
    }
}

#[test]
fn top_shows_live_numbers_and_quits_on_q() {
    if !have("tmux", "tmux") {
        return;
    }
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let socket = dir.path().join("w.sock");
    let control = dir.path().join("w.ctl");
    let served = Served::start(
        &[
            "--cache",
            "mem",
            "--cache-size",
            "8M",
            "--backing",
            "mem:32M",
        ],
        &socket,
    );
    let session = format!("wcache-top-{}", std::process::id());
    let command = format!(
        "{WCACHE} top --control {} --interval 0.2",
        control.display()
    );
    let (ok, _) = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "110",
        "-y",
        "36",
        &command,
    ]);
    assert!(ok, "tmux new-session");
    let _session = Session(session.clone());
    let mut nbd = Nbd::connect(&socket, "disk").expect("connect");
    let data = vec![1u8; 4096];
    for page in 0..200u64 {
        nbd.write(page * 4096, &data, false).expect("write");
    }
    let start = Instant::now();
    let screen = loop {
        let (_, screen) = tmux(&["capture-pane", "-p", "-t", &session]);
        let row = screen
            .lines()
            .find(|l| l.contains("disk") && l.contains("write"));
        if row.is_some_and(|r| r.split_whitespace().any(|w| w == "200")) {
            break screen;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no live numbers:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for needle in [
        "wcache top",
        "q quits",
        "occupancy",
        "dirty",
        "write/s",
        "destaged pages/s",
        "p99 us",
    ] {
        assert!(screen.contains(needle), "{needle:?} not in\n{screen}");
    }
    tmux(&["send-keys", "-t", &session, "q"]);
    let start = Instant::now();
    while tmux(&["has-session", "-t", &session]).0 {
        assert!(start.elapsed() < Duration::from_secs(5), "q did not quit");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(nbd);
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    let (ok, _, err) = wcache(&["top", "--control", control.to_str().expect("utf8")]);
    assert!(!ok && err.contains("no server at"), "{err}");
}
