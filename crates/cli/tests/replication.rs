//! Replicated write-back between two network namespaces that each test
//! makes (a veth pair; no other address): the primary (`wcache serve
//! --replicate-to`) in one, the peer (`wcache replica`) in the other, the
//! backing a file both see. A writer writes rounds of scattered pages and
//! flushes after each; the checker reads the backing after a takeover:
//! every page holds its last acknowledged round or the round in flight,
//! whole (never torn, never invented).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{wcache, Nbd, WCACHE};

const PAGES: u64 = 64;
const PAGE: usize = 4096;
/// Pages 17 pages apart: each in a write group of its own.
const STRIDE: u64 = 17 * PAGE as u64;

/// Two network namespaces joined by a veth pair, removed on drop.
struct Net {
    a: String,
    b: String,
    addr_b: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Net {
    /// Namespaces `wcr<pid><tag>a` and `...b`, 10.77.`subnet`.1 and .2.
    fn new(tag: &str, subnet: u8) -> Net {
        assert!(
            netns_available(),
            "network namespaces (ip netns) are needed: run as root"
        );
        let base = format!("wcr{}{tag}", std::process::id());
        let (a, b) = (format!("{base}a"), format!("{base}b"));
        let (va, vb) = (
            format!("v{subnet}a{}", std::process::id() % 10000),
            format!("v{subnet}b{}", std::process::id() % 10000),
        );
        let (addr_a, addr_b) = (format!("10.77.{subnet}.1"), format!("10.77.{subnet}.2"));
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip(&["link", "set", &va, "netns", &a]);
        ip(&["link", "set", &vb, "netns", &b]);
        for (ns, dev, addr) in [(&a, &va, &addr_a), (&b, &vb, &addr_b)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        Net { a, b, addr_b }
    }

    /// The primary's side of the link, down (a partition) or up.
    fn link_a(&self, up: bool) {
        let dev = self.dev_a();
        ip(&[
            "-n",
            &self.a,
            "link",
            "set",
            &dev,
            if up { "up" } else { "down" },
        ]);
    }

    fn dev_a(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.a, "-o", "link", "show", "type", "veth"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let name = text
            .split(':')
            .nth(1)
            .expect("a veth in the namespace")
            .trim();
        name.split('@').next().unwrap().to_string()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A wcache process in a namespace, its output in a file.
struct Proc {
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    fn start(ns: &str, args: &[&str], log: &Path) -> Proc {
        let file = std::fs::File::create(log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns, WCACHE])
            .args(args)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .expect("start wcache in a namespace");
        Proc {
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `text` in the log; panics with the log after `within`.
    fn wait_for(&mut self, text: &str, within: Duration) {
        let start = Instant::now();
        while !self.log().contains(text) {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("exited ({status}) before {text:?}: {}", self.log());
            }
            assert!(
                start.elapsed() < within,
                "no {text:?} within {within:?}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit; its status and log.
    fn exit_within(&mut self, within: Duration) -> (bool, String) {
        let start = Instant::now();
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return (status.success(), self.log());
            }
            assert!(start.elapsed() < within, "still running: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        c.wait().unwrap().success()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn page(p: u64, round: u64) -> Vec<u8> {
    let mut v = vec![(p as u8) ^ 0x5a; PAGE];
    v[..8].copy_from_slice(&round.to_le_bytes());
    v[8..16].copy_from_slice(&p.to_le_bytes());
    v
}

/// The round a backing page holds: `Some(0)` never written, `None` torn or invented.
fn round_of(p: u64, bytes: &[u8]) -> Option<u64> {
    if bytes.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let round = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    (bytes == page(p, round).as_slice()).then_some(round)
}

/// The writer: rounds of every page, a flush after each, until stopped or
/// the server fails; the last round acknowledged.
fn writer(socket: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let Ok(mut nbd) = Nbd::connect_retry(&socket, "disk") else {
            return 0;
        };
        let mut acked = 0;
        while !stop.load(Ordering::Acquire) {
            let round = acked + 1;
            for p in 0..PAGES {
                if nbd.write(p * STRIDE, &page(p, round), false).is_err() {
                    return acked;
                }
            }
            if nbd.flush().is_err() {
                return acked;
            }
            acked = round;
        }
        acked
    })
}

/// Every page of `backing` holds round `acked` or `acked + 1`, whole.
fn check_backing(backing: &Path, acked: u64) -> Result<(), String> {
    let data = std::fs::read(backing).unwrap();
    for p in 0..PAGES {
        let at = (p * STRIDE) as usize;
        match round_of(p, &data[at..at + PAGE]) {
            Some(r) if r == acked || r == acked + 1 => {}
            Some(r) => return Err(format!("page {p} holds round {r}, acknowledged {acked}")),
            None => return Err(format!("page {p} is torn or invented")),
        }
    }
    Ok(())
}

struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        Site {
            dir: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn s(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

fn replica(net: &Net, site: &Site, port: u16, extra: &[&str]) -> Proc {
    let listen = format!("{}:{port}", net.addr_b);
    let (copy, log) = (
        site.s("copy.img"),
        site.path(&format!("replica-{port}.log")),
    );
    let mut args = vec!["replica", "--cache", &copy, "--listen", &listen];
    args.extend(extra);
    let mut p = Proc::start(&net.b, &args, &log);
    p.wait_for("listening on", Duration::from_secs(10));
    p
}

/// `wcache serve` in the primary's namespace over a Unix socket (the test,
/// in its own namespace, reaches it through the file system).
fn primary(net: &Net, site: &Site, port: u16, extra: &[&str]) -> Proc {
    let peer = format!("{}:{port}", net.addr_b);
    // Dirty pages stay in the caches: a takeover must bring them.
    let mut more = vec!["--write-policy", "write-back", "--max-dirty-age", "1h"];
    more.extend(["--idle-after", "1h"]);
    more.extend(extra);
    let args = serve_args(site, &peer, &more);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut p = Proc::start(&net.a, &args, &site.path("primary.log"));
    p.wait_for("serving 1 export", Duration::from_secs(20));
    p
}

/// `wcache serve` of `site`'s cache and backing (64 MiB each) on Unix
/// socket p.sock, control p.ctl, replicated to `peer`, then `extra`.
fn serve_args(site: &Site, peer: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["serve", "--cache-size", "64M", "--backing-size", "64M"]
        .map(String::from)
        .into();
    for (option, file) in [
        ("--cache", "cache.img"),
        ("--backing", "backing.img"),
        ("--socket", "p.sock"),
        ("--control", "p.ctl"),
    ] {
        args.extend([option.to_string(), site.s(file)]);
    }
    args.extend([
        "--replicate-to".into(),
        peer.to_string(),
        "--peer-timeout".into(),
        "2s".into(),
    ]);
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// A start of `args` in namespace `ns` that must fail: its log.
fn refused(ns: &str, args: &[String], log: &Path) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, log) = Proc::start(ns, &args, log).exit_within(Duration::from_secs(20));
    assert!(!ok, "started: {log}");
    log
}

/// Takes over the copy (the replica stopped), drains it to the backing, stops.
fn take_over(site: &Site) -> String {
    let (copy, backing, socket, control) = (
        site.s("copy.img"),
        site.s("backing.img"),
        site.s("t.sock"),
        site.s("t.ctl"),
    );
    let args = [
        "serve",
        "--cache",
        &copy,
        "--backing",
        &backing,
        "--socket",
        &socket,
        "--control",
        &control,
        "--write-policy",
        "write-back",
        "--takeover",
    ];
    let file = std::fs::File::create(site.path("takeover.log")).unwrap();
    let child = Command::new(WCACHE)
        .args(args)
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    let mut t = Proc {
        child: Some(child),
        log: site.path("takeover.log"),
    };
    t.wait_for("serving 1 export", Duration::from_secs(20));
    let (ok, out, err) = wcache(&["flush", "--control", &control]);
    assert!(ok, "drain after takeover: {out}{err}");
    assert!(t.stop(), "takeover server stop: {}", t.log());
    t.log()
}

/// The dirty pages a start recovered, from its log.
fn recovered_pages(log: &str) -> u64 {
    log.split("recovering ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn status_json(control: &str) -> serde_json::Value {
    let (ok, out, err) = wcache(&["status", "--json", "--control", control]);
    assert!(ok, "status: {out}{err}");
    serde_json::from_str(&out).unwrap()
}

fn wait_state(control: &str, state: &str, within: Duration) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let s = status_json(control);
        if s["replication"]["state"] == state {
            return s;
        }
        assert!(start.elapsed() < within, "replication never {state}: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A count from the environment (the long runs of docs/replication.md), or `default`.
fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn netns_available() -> bool {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Rounds of: kill -9 the primary under a writer, take the copy over,
/// drain it, check every page on the backing; the old primary is then
/// refused (its peer is gone, and the copy will not mirror it again).
#[test]
fn a_killed_primary_is_taken_over_with_every_acknowledged_write() {
    let rounds: usize = env_count("WCACHE_TAKEOVER_ROUNDS", 3);
    let net = Net::new("k", 31);
    let mut checked = 0;
    for round in 0..rounds {
        let site = Site::new();
        let port = 10900 + round as u16;
        let mut peer = replica(&net, &site, port, &[]);
        let mut p = primary(&net, &site, port, &[]);
        let stop = Arc::new(AtomicBool::new(false));
        let w = writer(site.path("p.sock"), Arc::clone(&stop));
        std::thread::sleep(Duration::from_millis(700 + 137 * round as u64 % 500));
        p.kill9();
        let acked = w.join().unwrap();
        assert!(acked > 0, "no round acknowledged: {}", p.log());
        peer.wait_for("the primary is gone", Duration::from_secs(10));
        peer.stop();
        let log = take_over(&site);
        assert!(log.contains("took over cache"), "{log}");
        // The pages were dirty in the caches only: the copy brought them.
        let recovered = recovered_pages(&log);
        assert!(
            recovered >= PAGES,
            "the copy held {recovered} dirty pages: {log}"
        );
        check_backing(&site.path("backing.img"), acked)
            .unwrap_or_else(|e| panic!("round {round}: {e}; takeover: {log}"));
        checked += PAGES;
        // The old primary comes back: its peer is gone, so it does not start.
        let peer_addr = format!("{}:{port}", net.addr_b);
        let log = refused(
            &net.a,
            &serve_args(&site, &peer_addr, &[]),
            &site.path("again.log"),
        );
        assert!(
            log.contains("cannot reach it") && log.contains("--start-without-peer"),
            "{log}"
        );
        // And the copy, now a primary, will not mirror the old one.
        let mut refused = Proc::start(
            &net.b,
            &[
                "replica",
                "--cache",
                &site.s("copy.img"),
                "--listen",
                &format!("{}:{port}", net.addr_b),
            ],
            &site.path("refused.log"),
        );
        let (ok, log) = refused.exit_within(Duration::from_secs(10));
        assert!(
            !ok && log.contains("taken over") && log.contains("--force"),
            "{log}"
        );
        eprintln!("round {round}: {acked} rounds acknowledged, every page checked");
    }
    eprintln!("{rounds} primaries killed and taken over; {checked} pages checked, 0 lost");
}

/// Partitions under a writer (the primary's side of the link down, then
/// up): the primary goes on alone (write-back, by configuration) with what
/// the peer lacks shown, resyncs once the link is back, and a takeover
/// after the last resync finds every acknowledged write.
#[test]
fn partitions_under_a_writer_degrade_resync_and_lose_nothing() {
    let partitions: usize = env_count("WCACHE_PARTITIONS", 3);
    let net = Net::new("p", 32);
    let site = Site::new();
    let port = 10950;
    let mut peer = replica(&net, &site, port, &[]);
    let mut p = primary(&net, &site, port, &["--on-peer-lost", "write-back"]);
    let control = site.s("p.ctl");
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(site.path("p.sock"), Arc::clone(&stop));
    for i in 0..partitions {
        std::thread::sleep(Duration::from_millis(500));
        net.link_a(false);
        let s = wait_state(&control, "degraded", Duration::from_secs(15));
        std::thread::sleep(Duration::from_millis(500));
        let lacking = status_json(&control)["replication"]["unprotected_bytes"]
            .as_u64()
            .unwrap();
        assert!(lacking > 0, "degraded, yet nothing unprotected: {s}");
        net.link_a(true);
        let s = wait_state(&control, "connected", Duration::from_secs(30));
        assert_eq!(s["replication"]["unprotected_bytes"], 0, "{s}");
        eprintln!("partition {i}: {lacking} bytes unprotected while away, resynced");
    }
    stop.store(true, Ordering::Release);
    let acked = w.join().unwrap();
    let s = status_json(&control);
    assert!(
        s["replication"]["links_lost"].as_u64().unwrap() >= partitions as u64,
        "{s}"
    );
    assert!(acked > 0);
    p.kill9();
    peer.wait_for("the primary is gone", Duration::from_secs(10));
    peer.stop();
    let log = take_over(&site);
    check_backing(&site.path("backing.img"), acked)
        .unwrap_or_else(|e| panic!("{e}; takeover: {log}"));
    eprintln!("{partitions} partitions healed under the writer; {acked} rounds acknowledged, {PAGES} pages checked, 0 lost");
}

/// The peer killed: the primary (default --on-peer-lost write-through)
/// drains and goes through to the backing; the peer restarted: resynced,
/// write-back again. Status, the log and the metrics say so.
#[test]
fn a_lost_peer_means_write_through_until_it_is_back_in_sync() {
    let net = Net::new("l", 33);
    let site = Site::new();
    let port = 10960;
    let mut peer = replica(&net, &site, port, &[]);
    let mut p = primary(&net, &site, port, &[]);
    let control = site.s("p.ctl");
    let mut nbd = Nbd::connect_retry(&site.path("p.sock"), "disk").unwrap();
    for i in 0..PAGES {
        nbd.write(i * STRIDE, &page(i, 1), false).unwrap();
    }
    nbd.flush().unwrap();
    assert!(status_json(&control)["dirty_pages"].as_u64().unwrap() >= PAGES);
    peer.kill9();
    // Noticed at the next flush or heartbeat.
    let s = wait_state(&control, "degraded", Duration::from_secs(10));
    let start = Instant::now();
    loop {
        let s = status_json(&control);
        if s["write_policy"] == "write-through" && s["dirty_pages"] == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not write-through and drained: {s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Writes now reach the backing before they are acknowledged.
    nbd.write(0, &page(0, 2), false).unwrap();
    let data = std::fs::read(site.path("backing.img")).unwrap();
    assert_eq!(
        round_of(0, &data[..PAGE]),
        Some(2),
        "write-through while the peer is away: {s}"
    );
    let mut peer = replica(&net, &site, port, &[]);
    let s = wait_state(&control, "connected", Duration::from_secs(30));
    let start = Instant::now();
    while status_json(&control)["write_policy"] != "write-back" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not write-back again: {s}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = p.log();
    assert!(
        log.contains("lost the peer") && log.contains("the peer is in sync"),
        "{log}"
    );
    drop(nbd);
    assert!(p.stop(), "{}", p.log());
    peer.stop();
}

/// Bad input: a peer that cannot be reached, a peer that mirrors another
/// cache, --takeover of a cache that is no replica's copy, and an
/// inconsistent copy: each refused by name, nothing written.
#[test]
fn bad_peers_and_takeovers_are_refused_by_name() {
    let net = Net::new("b", 34);
    let site = Site::new();
    // Nobody listens.
    let nobody = format!("{}:10970", net.addr_b);
    let log = refused(
        &net.a,
        &serve_args(&site, &nobody, &[]),
        &site.path("unreachable.log"),
    );
    assert!(
        log.contains("cannot reach it") && log.contains(&nobody),
        "{log}"
    );
    // A peer that mirrors another cache.
    let mut peer = replica(&net, &site, 10971, &[]);
    let other = Site::new();
    let peer_addr = format!("{}:10971", net.addr_b);
    let first = serve_args(&site, &peer_addr, &[]);
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let mut p = Proc::start(&net.a, &first, &site.path("first.log"));
    p.wait_for("serving 1 export", Duration::from_secs(20));
    assert!(p.stop(), "{}", p.log());
    let log = refused(
        &net.a,
        &serve_args(&other, &peer_addr, &[]),
        &other.path("second.log"),
    );
    assert!(
        log.contains("refused this primary") && log.contains("mirrors cache"),
        "{log}"
    );
    peer.stop();
    // `wcache serve` of `cache` on `site` (no replication), as a failure's stderr.
    let serve_fails = |site: &Site, cache: &str, extra: &[&str]| {
        let (cache, backing, socket) = (site.s(cache), site.s("backing.img"), site.s("t.sock"));
        let mut args = vec![
            "serve",
            "--cache",
            &cache,
            "--backing",
            &backing,
            "--socket",
            &socket,
        ];
        args.extend(extra);
        let (ok, out, err) = wcache(&args);
        assert!(!ok, "served: {out}{err}");
        err
    };
    // --takeover of a cache that was never replicated.
    let err = serve_fails(&Site::new(), "cache.img", &["--takeover"]);
    assert!(err.contains("not a replica's copy"), "{err}");
    // An inconsistent copy (a resync was running).
    let state = site.path("copy.img.replica");
    let text = std::fs::read_to_string(&state)
        .unwrap()
        .replace("\"consistent\": true", "\"consistent\": false");
    std::fs::write(&state, text).unwrap();
    let err = serve_fails(&site, "copy.img", &["--takeover"]);
    assert!(err.contains("not consistent"), "{err}");
    // A replica's copy served without --takeover, or drained offline.
    let err = serve_fails(&site, "copy.img", &[]);
    assert!(err.contains("--takeover"), "{err}");
    let export = format!("disk={}", site.s("backing.img"));
    let (ok, out, err) = wcache(&["flush", "--cache", &site.s("copy.img"), "--export", &export]);
    assert!(
        !ok && err.contains("--takeover"),
        "offline flush of a copy: {out}{err}"
    );
}

/// TLS on the link, both ways: a primary with a client certificate of the
/// peer's CA mirrors; a plaintext primary, one whose certificate another
/// CA signed, and a certificates directory without the client's
/// certificate are refused, each by name.
#[test]
fn the_link_is_tls_both_ways_and_strangers_are_refused() {
    use common::certs::{make_ca, sign};
    let net = Net::new("t", 35);
    let site = Site::new();
    let (ca, stranger) = (site.path("ca"), site.path("stranger"));
    make_ca(&ca, "replication CA");
    sign(&ca, &ca, "server", &net.addr_b);
    sign(&ca, &ca, "client", "10.77.35.1");
    make_ca(&stranger, "another CA");
    sign(&stranger, &stranger, "client", "10.77.35.1");
    std::fs::copy(ca.join("ca-cert.pem"), stranger.join("peer-ca.pem")).unwrap();
    let port = 10980;
    let dir = ca.display().to_string();
    let mut peer = replica(&net, &site, port, &["--tls-certificates", &dir]);
    let mut p = primary(&net, &site, port, &["--replicate-tls-certificates", &dir]);
    let control = site.s("p.ctl");
    let mut nbd = Nbd::connect_retry(&site.path("p.sock"), "disk").unwrap();
    nbd.write(0, &page(0, 1), false).unwrap();
    nbd.flush().unwrap();
    wait_state(&control, "connected", Duration::from_secs(10));
    drop(nbd);
    assert!(p.stop(), "{}", p.log());
    let peer_addr = format!("{}:{port}", net.addr_b);
    let other = Site::new();
    let attempt = |extra: &[&str], name: &str| {
        refused(
            &net.a,
            &serve_args(&other, &peer_addr, extra),
            &other.path(name),
        )
    };
    let log = attempt(&[], "plain.log");
    assert!(
        log.contains("--replicate-tls-certificates"),
        "plaintext: {log}"
    );
    // The stranger trusts the peer's CA, but its own certificate is another CA's.
    std::fs::rename(stranger.join("ca-cert.pem"), stranger.join("own-ca.pem")).unwrap();
    std::fs::rename(stranger.join("peer-ca.pem"), stranger.join("ca-cert.pem")).unwrap();
    let s = stranger.display().to_string();
    let log = attempt(&["--replicate-tls-certificates", &s], "stranger.log");
    assert!(
        log.contains("cannot reach it") && log.to_lowercase().contains("tls"),
        "stranger: {log}"
    );
    let empty = other.path("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let e = empty.display().to_string();
    let log = attempt(&["--replicate-tls-certificates", &e], "empty.log");
    assert!(log.contains("client-cert.pem"), "no certificate: {log}");
    assert!(peer.log().contains("mirroring a primary"), "{}", peer.log());
    peer.stop();
}

/// A graceful handover: a primary stopped cleanly (SIGTERM) with dirty
/// pages leaves the peer's copy identical and marked clean; the peer takes
/// it over warm, every dirty page recovered from the copy and destaged.
#[test]
fn a_clean_stop_hands_the_dirty_pages_to_the_peer() {
    let net = Net::new("h", 36);
    let site = Site::new();
    let port = 10990;
    let mut peer = replica(&net, &site, port, &[]);
    let mut p = primary(&net, &site, port, &[]);
    let mut nbd = Nbd::connect_retry(&site.path("p.sock"), "disk").unwrap();
    for i in 0..PAGES {
        nbd.write(i * STRIDE, &page(i, 1), false).unwrap();
    }
    nbd.flush().unwrap();
    drop(nbd);
    assert!(p.stop(), "{}", p.log());
    assert!(p.log().contains("dirty"), "{}", p.log());
    peer.wait_for("the primary stopped cleanly", Duration::from_secs(10));
    peer.stop();
    let data = std::fs::read(site.path("backing.img")).unwrap();
    assert_eq!(
        round_of(0, &data[..PAGE]),
        Some(0),
        "destaged before the handover"
    );
    let log = take_over(&site);
    assert!(log.contains("last shutdown clean"), "{log}");
    assert!(recovered_pages(&log) >= PAGES, "{log}");
    check_backing(&site.path("backing.img"), 1).unwrap_or_else(|e| panic!("{e}: {log}"));
}

/// A primary killed and restarted while its peer runs: the restart
/// compares the peer's copy with its cache, page checksums region by
/// region, and sends only the regions that differ; a writer and a second
/// kill with takeover then find every acknowledged write.
#[test]
fn a_restarted_primary_sends_the_peer_only_what_differs() {
    let net = Net::new("r", 37);
    let site = Site::new();
    let port = 10995;
    let mut peer = replica(&net, &site, port, &[]);
    let mut p = primary(&net, &site, port, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(site.path("p.sock"), Arc::clone(&stop));
    std::thread::sleep(Duration::from_millis(800));
    p.kill9();
    let first = w.join().unwrap();
    assert!(first > 0);
    peer.wait_for("the primary is gone", Duration::from_secs(10));
    let mut p = primary(&net, &site, port, &[]);
    let held = p
        .log()
        .split("regions_held=")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no comparison in the log: {}", p.log()));
    let resynced = status_json(&site.s("p.ctl"))["replication"]["resynced_bytes"]
        .as_u64()
        .unwrap();
    // 64 regions of 1 MiB: the copy held all but the few written last.
    assert!(
        held >= 56 && resynced <= 8 << 20,
        "held {held} regions, resynced {resynced} bytes: {}",
        p.log()
    );
    stop.store(false, Ordering::Release);
    let w = writer(site.path("p.sock"), Arc::clone(&stop));
    std::thread::sleep(Duration::from_millis(800));
    p.kill9();
    let acked = w.join().unwrap();
    peer.wait_for("the primary is gone", Duration::from_secs(10));
    peer.stop();
    let log = take_over(&site);
    // The second writer started its rounds at 1 again: every page holds
    // its last acknowledged round or the next one.
    check_backing(&site.path("backing.img"), acked).unwrap_or_else(|e| panic!("{e}: {log}"));
    eprintln!("restart: the copy held {held} of 64 regions, {resynced} bytes resynced; {first} then {acked} rounds acknowledged");
}

/// A peer whose copy was lost (deleted while its state file stayed) comes
/// back: it says it holds nothing known, the primary compares every region
/// and sends what differs, and a takeover after a kill finds every write
/// made before the loss.
#[test]
fn a_peer_that_lost_its_copy_gets_all_of_it_again() {
    let net = Net::new("c", 38);
    let site = Site::new();
    let port = 10996;
    let mut peer = replica(&net, &site, port, &[]);
    let mut p = primary(&net, &site, port, &["--on-peer-lost", "write-back"]);
    let control = site.s("p.ctl");
    let mut nbd = Nbd::connect_retry(&site.path("p.sock"), "disk").unwrap();
    for i in 0..PAGES {
        nbd.write(i * STRIDE, &page(i, 1), false).unwrap();
    }
    nbd.flush().unwrap();
    peer.kill9();
    std::fs::remove_file(site.path("copy.img")).unwrap();
    wait_state(&control, "degraded", Duration::from_secs(10));
    let mut peer = replica(&net, &site, port, &[]);
    wait_state(&control, "connected", Duration::from_secs(30));
    assert!(peer.log().contains("is missing"), "{}", peer.log());
    drop(nbd);
    p.kill9();
    peer.wait_for("the primary is gone", Duration::from_secs(10));
    peer.stop();
    let log = take_over(&site);
    check_backing(&site.path("backing.img"), 1).unwrap_or_else(|e| panic!("{e}: {log}"));
}
