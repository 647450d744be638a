//! The operator's verbs against a real `wcache serve`: `status`, `stats`
//! (`--json`, `--watch`), `set`, and `flush` online through the control
//! socket while the server serves; the exit summary's latency lines; and
//! with no server, `status` reading the cache device and `flush` draining
//! offline as before; `WCACHE_LOG` raising one subsystem's verbosity.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{wcache, Nbd, Served, WCACHE};

const PAGE: u64 = 4096;

#[test]
fn status_stats_set_and_online_flush_through_the_control_socket() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let socket = dir.path().join("w.sock");
    let control = dir.path().join("w.ctl");
    let cache = dir.path().join("cache.img");
    let backing = dir.path().join("backing.img");
    let (cache_s, backing_s, control_s) = (
        cache.to_str().expect("utf8"),
        backing.to_str().expect("utf8"),
        control.to_str().expect("utf8"),
    );
    let emulated = format!("emulated-hdd:{backing_s}");
    let args = [
        "--cache",
        cache_s,
        "--cache-size",
        "16M",
        "--backing",
        &emulated,
        "--backing-size",
        "64M",
    ];
    let served = Served::start(&args, &socket);
    assert!(
        served.log_text().contains(control_s),
        "{}",
        served.log_text()
    );
    let mut nbd = Nbd::connect(&socket, "disk").expect("connect");
    let data = vec![0x3cu8; PAGE as usize];
    for i in 0..400u64 {
        let page = (i * 7919) % (48 << 20) / PAGE;
        nbd.write(page * PAGE, &data, false).expect("write");
    }

    let (ok, out, err) = wcache(&["status", "--control", control_s]);
    assert!(ok, "status: {out}{err}");
    assert!(
        out.contains("state:     serving") && out.contains("write write-back"),
        "{out}"
    );
    assert!(out.contains("export disk:"), "{out}");
    assert!(out.contains("staleness: the backing lags"), "{out}");
    let (ok, out, _) = wcache(&["status", "--control", control_s, "--json"]);
    let status: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert!(ok && status["dirty_pages"].as_u64() > Some(0), "{out}");
    // Dirty pages have an age (one age period coarse: under 10 s here).
    let age = status["dirty_age_ms"].as_u64().expect("dirty_age_ms");
    assert!(age <= 10_000, "{out}");

    let (ok, out, err) = wcache(&["stats", "--control", control_s, "--json"]);
    assert!(ok, "stats --json: {out}{err}");
    let snap: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    let writes = snap["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .find(|r| r["kind"] == "write")
        .expect("write")["count"]
        .as_u64();
    assert_eq!(writes, Some(400));
    let (ok, out, err) = wcache(&["stats", "--control", control_s]);
    assert!(ok && out.contains("writes     400"), "stats: {out}{err}");

    let (ok, out, err) = wcache(&["set", "--control", control_s, "destage-order", "cscan"]);
    assert!(
        ok && out.contains("destage-order wow -> cscan"),
        "set: {out}{err}"
    );
    let (ok, out, err) = wcache(&["set", "--control", control_s, "order", "fifo"]);
    assert!(!ok && err.contains("fifo"), "bad set: {out}{err}");

    // --watch prints a header and a line per interval until stopped.
    let mut watch = Command::new(WCACHE)
        .args(["stats", "--control", control_s, "--watch", "0.2"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let header = lines.next().expect("header").expect("line");
    assert!(
        header.contains("write/s") && header.contains("dirty"),
        "{header}"
    );
    let row = lines.next().expect("a row").expect("line");
    assert_eq!(row.split_whitespace().count(), 9, "{row}");
    let _ = watch.kill();
    let _ = watch.wait();

    // Online flush, while the server keeps serving.
    let (ok, out, err) = wcache(&["flush", "--control", control_s, "--export", "disk"]);
    assert!(ok, "online flush: {out}{err}");
    assert!(out.contains("online drain done"), "{out}");
    let (ok, out, _) = wcache(&["status", "--control", control_s, "--json"]);
    let status: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert!(ok && status["dirty_pages"] == 0, "{out}");
    let mut buf = vec![0u8; PAGE as usize];
    nbd.read(0, &mut buf).expect("served after the flush");
    drop(nbd);

    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    assert!(
        log.contains("export disk write: 400 requests, response time p50"),
        "{log}"
    );
    assert!(!control.exists(), "control socket removed at stop");

    // No server: status reads the cache device, flush works offline.
    let (ok, out, err) = wcache(&["status", "--control", control_s, "--cache", cache_s]);
    assert!(
        ok && out.contains("no server at") && out.contains("slots:"),
        "{out}{err}"
    );
    let export = format!("disk={emulated}");
    let (ok, out, err) = wcache(&["flush", "--cache", cache_s, "--export", &export]);
    assert!(
        ok && out.contains("the cache is clean and empty"),
        "offline flush: {out}{err}"
    );
    let (ok, out, err) = wcache(&["stats", "--control", control_s]);
    assert!(!ok && err.contains("no server at"), "{out}{err}");
}

/// A server on a memory cache and backing in `dir` (socket `w.sock`,
/// control `w.ctl`), started with `env`.
fn serve_mem(dir: &std::path::Path, env: &[(&str, &str)]) -> Served {
    let control = dir.join("w.ctl");
    let args = [
        "--cache",
        "mem",
        "--cache-size",
        "4M",
        "--backing",
        "mem:16M",
        "--control",
        control.to_str().expect("utf8"),
    ];
    Served::try_start_env(&args, &dir.join("w.sock"), env).expect("serve")
}

#[test]
fn wcache_log_filters_events_per_subsystem() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let control = dir.path().join("w.ctl");
    let env = [("WCACHE_LOG", "warn,wcache_io::ops=debug")];
    let served = serve_mem(dir.path(), &env);
    let (ok, out, err) = wcache(&["status", "--control", control.to_str().expect("utf8")]);
    assert!(ok, "{out}{err}");
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    assert!(
        log.contains("DEBUG") && log.contains("control socket request command=\"status\""),
        "{log}"
    );
    assert!(
        !log.contains("stopped after"),
        "info events are filtered out: {log}"
    );
    assert!(
        log.contains("wcache: serving 1 export(s)"),
        "the banner is output, not a log: {log}"
    );

    let (ok, out, err) = wcache(&[
        "status",
        "--control",
        "/nonexistent/x.ctl",
        "--cache",
        "/nonexistent/c.img",
    ]);
    assert!(!ok, "{out}{err}");
    let out = Command::new(WCACHE)
        .args([
            "status",
            "--control",
            "/nonexistent/x.ctl",
            "--cache",
            "/nonexistent/c.img",
        ])
        .env("WCACHE_LOG", "=[bad")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WCACHE_LOG") && err.contains("is not a log filter"),
        "{err}"
    );
}

/// Clients connecting and leaving are log events with their fields, and
/// `WCACHE_LOG_FORMAT=json` writes every event as one JSON object a line.
#[test]
fn connections_are_logged_with_fields_and_json_logs_parse() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let socket = dir.path().join("w.sock");
    let served = serve_mem(dir.path(), &[("WCACHE_LOG_FORMAT", "json")]);
    {
        let mut nbd = Nbd::connect(&socket, "disk").expect("connect");
        nbd.write(0, &[1u8; 4096], false).expect("write");
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
    let events: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let event = |message: &str| {
        events
            .iter()
            .find(|e| e["fields"]["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} event in:\n{log}"))
    };
    for message in ["NBD client connected", "NBD client disconnected"] {
        let e = event(message);
        assert_eq!(e["level"], "INFO", "{e}");
        assert_eq!(e["fields"]["export"], "disk", "{e}");
        let peer = e["fields"]["peer"].as_str().expect("peer");
        assert!(peer.starts_with("unix pid "), "{peer}");
        assert!(e["timestamp"].is_string(), "{e}");
    }
}

/// `status` lists the NBD clients connected now: peer, export.
#[test]
fn status_lists_the_connected_clients() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let socket = dir.path().join("w.sock");
    let control = dir.path().join("w.ctl");
    let served = serve_mem(dir.path(), &[]);
    let status = || {
        let (ok, out, err) = wcache(&[
            "status",
            "--json",
            "--control",
            control.to_str().expect("utf8"),
        ]);
        assert!(ok, "{out}{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let a = Nbd::connect(&socket, "disk").expect("connect");
    let b = Nbd::connect(&socket, "disk").expect("connect");
    let clients = status()["clients"].as_array().expect("clients").clone();
    assert_eq!(clients.len(), 2, "{clients:?}");
    let me = format!("unix pid {}", std::process::id());
    assert!(
        clients
            .iter()
            .all(|c| c["peer"] == me.as_str() && c["export"] == "disk"),
        "{clients:?}"
    );
    drop((a, b));
    let start = std::time::Instant::now();
    while !status()["clients"].as_array().expect("clients").is_empty() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "clients not gone"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
}
