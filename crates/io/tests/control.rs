//! The control socket against a real cache: every command answered; online
//! policy changes seen by `status`; leaving write-back drains first; an
//! online flush streams progress while requests are served, and a second
//! one meanwhile is refused; the reserved command says it is not
//! supported; `critical-issuer` sets and clears an issuer's hint in the
//! engine and refuses bad issuers by name; malformed input (bad JSON, wrong
//! types, unknown commands, lines over 64 KiB, connections cut mid-line,
//! random bytes for a few seconds) gets an error line and never brings the
//! server down; the socket is owner-only and another uid is refused.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde_json::Value;
use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_io::ops::client::{ClientError, ControlClient};
use wcache_io::ops::control::{peer_allowed, ControlListener, ControlServer};
use wcache_io::ops::protocol::{Request, REQUEST_BYTES_MAX};
use wcache_io::{
    Cache, CacheConfig, CacheDeviceSpec, DriverConfig, FormatAsked, SyncMode, VolumeSpec,
};

const PAGE_BYTES: u64 = 4096;

fn open(dir: &Path, backing: &str) -> Cache {
    let config = CacheConfig {
        cache: CacheDeviceSpec::File {
            path: dir.join("cache.img"),
            create_size_bytes: 8 << 20,
            size_given: true,
            sync: SyncMode::Nvram,
            direct: false,
            measure_sync: false,
        },
        volumes: vec![VolumeSpec {
            name: "disk".into(),
            backing: backing.to_string(),
            journal: None,
        }],
        backing_sync: SyncMode::Nvram,
        backing_create_size_bytes: Some(64 << 20),
        engine: EngineConfig {
            page_size_bytes: PAGE_BYTES,
            group_size_bytes: 16 * 1024,
            write_policy: WritePolicyKind::WriteBack,
            ..EngineConfig::default()
        },
        driver: DriverConfig {
            io_threads: 2,
            ..DriverConfig::default()
        },
        block_size_bytes: 512,
        force: false,
        format: FormatAsked::Found,
        volatile_write_back: false,
        backing_timeout: None,
        replicate: None,
    };
    Cache::open(&config).expect("open cache")
}

fn control(dir: &Path, cache: &Cache) -> ControlServer {
    let listener = ControlListener::bind(&dir.join("wcache.ctl")).expect("bind");
    listener.start(cache.operator()).expect("start")
}

fn call(path: &Path, request: &Request) -> Result<Value, ClientError> {
    let mut client = ControlClient::connect(path).expect("connect");
    client.call(request, &mut |_| {})
}

fn cmd(name: &str) -> Request {
    Request::new(name)
}

fn set(key: &str, value: &str) -> Request {
    let mut r = Request::new("set");
    r.key = Some(key.into());
    r.value = Some(value.into());
    r
}

/// Writes `pages` pages scattered over the first 32 MiB of the volume.
fn write_scattered(cache: &Cache, pages: u64) {
    let v = &cache.volumes()[0];
    let data = vec![0xa5u8; PAGE_BYTES as usize];
    for i in 0..pages {
        let page = (i * 2654435761) % (32 << 20) / PAGE_BYTES;
        v.write(page * PAGE_BYTES, &data, false).expect("write");
    }
}

fn code_of(e: ClientError) -> String {
    match e {
        ClientError::Remote { code, .. } => code,
        other => panic!("expected an error answer, got {other}"),
    }
}

#[test]
fn every_command_is_answered_and_policies_change_online() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(
        dir.path(),
        &dir.path().join("backing.img").display().to_string(),
    );
    let server = control(dir.path(), &cache);
    let path = server.path().to_path_buf();
    write_scattered(&cache, 100);
    let mut buf = vec![0u8; 8192];
    cache.volumes()[0].read(0, &mut buf).expect("read");

    let status = call(&path, &cmd("status")).expect("status");
    assert_eq!(status["state"], "serving");
    assert_eq!(status["write_policy"], "write-back");
    assert_eq!(status["destage_order"], "wow");
    assert_eq!(status["exports"][0]["name"], "disk");
    assert!(status["dirty_pages"].as_u64().expect("dirty") > 0);
    // One export: its dirty pages are the cache's; its read hit (a dirty page).
    assert_eq!(status["exports"][0]["dirty_pages"], status["dirty_pages"]);
    assert!(
        status["exports"][0]["read_hit_ratio"]
            .as_f64()
            .expect("ratio")
            > 0.0
    );

    let stats = call(&path, &cmd("stats")).expect("stats");
    let engine = stats["engine"].as_array().expect("engine metrics");
    let metric = |name: &str| engine.iter().find(|m| m["name"] == name).cloned();
    assert_eq!(metric("writes").expect("writes")["value"], 100);
    assert_eq!(metric("writes").expect("writes")["kind"], "counter");
    assert_eq!(metric("dirty_pages").expect("dirty")["kind"], "gauge");
    assert!(!metric("stall_ns_total").expect("stalls")["help"]
        .as_str()
        .expect("help")
        .is_empty());
    let requests = stats["requests"].as_array().expect("requests");
    let count =
        |kind: &str| requests.iter().find(|r| r["kind"] == kind).expect(kind)["count"].clone();
    assert_eq!(count("write"), 100);
    assert_eq!(count("read"), 1);
    assert_eq!(count("trim"), 0);

    assert_eq!(
        call(&path, &set("destage-order", "lrw")).expect("order")["old"],
        "wow"
    );
    assert_eq!(
        call(&path, &set("rate", "linear")).expect("rate")["new"],
        "linear"
    );
    assert_eq!(
        call(&path, &set("admission", "all")).expect("admission")["new"],
        "all"
    );
    let status = call(&path, &cmd("status")).expect("status");
    assert_eq!(
        (
            status["destage_order"].as_str(),
            status["destage_rate"].as_str()
        ),
        (Some("lrw"), Some("linear"))
    );

    // Leaving write-back drains first, then switches.
    let done = call(&path, &set("write-policy", "write-through")).expect("write-through");
    assert_eq!(
        (done["old"].as_str(), done["new"].as_str()),
        (Some("write-back"), Some("write-through"))
    );
    assert_eq!(cache.dirty_pages(), 0);
    write_scattered(&cache, 10);
    assert_eq!(cache.dirty_pages(), 0, "write-through leaves nothing dirty");
    call(&path, &set("write-policy", "wb")).expect("back to write-back");

    // Tunables change live, as their serve options parse them, and are
    // checked as at start.
    for (key, value, old, new) in [
        ("low-threshold", "50", "80%", "50%"),
        ("high-threshold", "70%", "90%", "70%"),
        ("destages-max", "8", "20", "8"),
        ("sequential-cutoff", "4M", "0", "4194304"),
        ("max-dirty-age", "5s", "0s", "5s"),
        ("idle-after", "200ms", "1s", "200ms"),
        ("idle-destages", "2", "0", "2"),
    ] {
        let done = call(&path, &set(key, value)).unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(
            (done["old"].as_str(), done["new"].as_str()),
            (Some(old), Some(new)),
            "{key}"
        );
    }
    for (key, value, why) in [
        ("low-threshold", "95", "low above high"),
        ("destages-max", "1", "idle destages above the maximum"),
        ("destages-max", "many", "not a number"),
        ("max-dirty-age", "1ms", "below 10 ms"),
        ("max-dirty-age", "2d", "over a day"),
        ("idle-after", "25h", "over a day"),
        ("destages-max", "100000", "over the engine's limit"),
        ("low-threshold", "NaN", "not a number"),
        ("sequential-cutoff", "lots", "not a size"),
    ] {
        let e = call(&path, &set(key, value)).expect_err(why);
        assert_eq!(code_of(e), "refused", "{key} {value}: {why}");
    }
    let done =
        call(&path, &set("destages-max", "5")).expect("5: above the idle destages and trickle");
    assert_eq!(done["old"], "8", "a refused change changed nothing");
    assert_eq!(
        code_of(call(&path, &set("colour", "blue")).expect_err("key")),
        "refused"
    );
    assert_eq!(
        code_of(call(&path, &set("order", "fifo")).expect_err("name")),
        "refused"
    );
    let mut flush = cmd("flush");
    flush.export = Some("nope".into());
    assert_eq!(code_of(call(&path, &flush).expect_err("export")), "refused");
    // A consistency point needs write-back-journaled; this cache is not.
    match call(&path, &cmd("consistency-point")).expect_err("not journaled") {
        ClientError::Remote { code, message } => {
            assert_eq!(code, "refused");
            assert!(message.contains("write-back-journaled"), "{message}");
        }
        other => panic!("expected an error answer, got {other}"),
    }
    server.stop();
    assert!(!path.exists(), "the socket is removed at stop");
    cache.close().expect("close");
}

#[test]
fn online_flush_streams_progress_while_requests_are_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backing = format!("emulated-hdd:{}", dir.path().join("backing.img").display());
    let cache = open(dir.path(), &backing);
    let server = control(dir.path(), &cache);
    write_scattered(&cache, 600);
    let dirty = cache.dirty_pages();
    assert!(dirty > 0);
    let volume = cache.volumes()[0].clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; PAGE_BYTES as usize];
        let mut reads = 0u64;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            volume
                .read(reads % 64 * PAGE_BYTES, &mut buf)
                .expect("read while flushing");
            reads += 1;
        }
        reads
    });
    let path = server.path().to_path_buf();
    let flusher = std::thread::spawn(move || {
        let mut client = ControlClient::connect(&path).expect("connect");
        let mut lines = Vec::new();
        let mut flush = cmd("flush");
        flush.export = Some("disk".into());
        let done = client
            .call(&flush, &mut |p| lines.push(p.clone()))
            .expect("flush");
        (done, lines)
    });
    // A second flush while the first runs is refused.
    let start = Instant::now();
    while call(server.path(), &cmd("status")).expect("status")["state"] != "flushing" {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the flush never showed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = call(server.path(), &cmd("flush")).expect_err("a second flush");
    assert!(second.to_string().contains("already running"), "{second}");
    let (done, lines) = flusher.join().expect("flusher");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().expect("reader");
    assert!(reads > 0, "requests were served during the flush");
    assert_eq!(done["dirty_pages"], 0);
    assert_eq!(cache.dirty_pages(), 0);
    assert!(!lines.is_empty(), "progress lines before the answer");
    for p in &lines {
        assert!(p["dirty_pages"].as_u64().expect("dirty") <= dirty);
        assert_eq!(p["dirty_pages_start"].as_u64(), Some(dirty));
        assert!(p["rate_pages_per_s"].is_number());
    }
    server.stop();
    cache.close().expect("close");
}

#[test]
fn malformed_requests_get_an_error_and_the_server_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(dir.path(), "mem:64M");
    let server = control(dir.path(), &cache);
    let path = server.path().to_path_buf();
    let mut client = ControlClient::connect(&path).expect("connect");
    let cases: [(&[u8], &str); 5] = [
        (b"not json\n", "bad-request"),
        (b"{\"v\":1,\"cmd\":7}\n", "bad-request"),
        (b"{\"v\":1}\n", "bad-request"),
        (b"{\"v\":9,\"cmd\":\"status\"}\n", "unsupported-version"),
        (b"{\"v\":1,\"cmd\":\"format\"}\n", "unknown-command"),
    ];
    for (line, code) in cases {
        client.send_raw(line).expect("send");
        let r = client.read_response().expect("answer");
        assert_eq!(
            r.error.expect("error").code,
            code,
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    // The same connection still works.
    client
        .call(&cmd("status"), &mut |_| {})
        .expect("status after errors");

    let mut long = ControlClient::connect(&path).expect("connect");
    long.send_raw(&vec![b' '; REQUEST_BYTES_MAX + 10])
        .expect("send");
    assert_eq!(
        long.read_response()
            .expect("answer")
            .error
            .expect("error")
            .code,
        "too-long"
    );

    let mut cut = ControlClient::connect(&path).expect("connect");
    cut.send_raw(b"{\"v\":1,\"cmd\":\"sta").expect("send");
    cut.shutdown_write();
    assert_eq!(
        cut.read_response()
            .expect("answer")
            .error
            .expect("error")
            .code,
        "incomplete"
    );

    fuzz(&path, Duration::from_secs(3));
    call(&path, &cmd("status")).expect("status after the fuzzing");
    // A stop returns even when the socket's file was removed, and leaves
    // alone a socket another server bound at the same path since.
    std::fs::remove_file(&path).expect("remove the socket");
    let other = std::os::unix::net::UnixListener::bind(&path).expect("another socket");
    server.stop();
    assert!(path.exists(), "the other server's socket stays");
    drop(other);
    cache.close().expect("close");
}

/// Random lines (mutated valid requests and random bytes) on fresh
/// connections for `budget`: every answer is a well-formed error or result.
fn fuzz(path: &Path, budget: Duration) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(12);
    let seeds: [&[u8]; 4] = [
        br#"{"v":1,"cmd":"status"}"#,
        br#"{"v":1,"cmd":"set","key":"order","value":"cscan"}"#,
        br#"{"v":1,"cmd":"stats"}"#,
        br#"{"v":1,"cmd":"flush","export":"disk","stall_timeout_s":1}"#,
    ];
    let start = Instant::now();
    let mut answered = 0u64;
    while start.elapsed() < budget {
        let mut line: Vec<u8> = if rng.gen_bool(0.3) {
            (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect()
        } else {
            let mut l = seeds[rng.gen_range(0..seeds.len())].to_vec();
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..l.len());
                match rng.gen_range(0..3) {
                    0 => l[i] = rng.gen(),
                    1 => {
                        l.remove(i);
                    }
                    _ => l.insert(i, rng.gen()),
                }
            }
            l
        };
        line.retain(|&b| b != b'\n');
        line.push(b'\n');
        let mut client = ControlClient::connect(path).expect("connect");
        client.send_raw(&line).expect("send");
        client.shutdown_write();
        loop {
            let r = client.read_response().expect("an answer to every line");
            if r.is_final() {
                assert!(r.error.is_some() != r.result.is_some(), "{r:?}");
                break;
            }
        }
        answered += 1;
    }
    assert!(answered > 10, "only {answered} fuzz cases ran");
}

#[test]
fn the_socket_is_owner_only_and_other_users_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(dir.path(), "mem:64M");
    let server = control(dir.path(), &cache);
    let path = server.path().to_path_buf();
    let mode = std::fs::metadata(&path)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "owner-only socket");
    assert!(peer_allowed(1000, 1000) && peer_allowed(0, 1000));
    assert!(!peer_allowed(1001, 1000));
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP (part): not root, cannot connect as another uid");
    } else {
        let nobody = 65534;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod dir");
        let as_nobody = || {
            let python = std::env::var("WCACHE_PYTHON").unwrap_or_else(|_| "python3".into());
            let script = "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1])\nexcept OSError as e:\n print('connect-error', e.errno); sys.exit(0)\nprint(s.makefile().readline())";
            let out = std::process::Command::new(python)
                .args(["-c", script])
                .arg(&path)
                .uid(nobody)
                .gid(nobody)
                .output()
                .expect("run python as nobody");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        use std::os::unix::process::CommandExt;
        let refused = as_nobody();
        assert!(
            refused.starts_with("connect-error 13"),
            "mode 0600 keeps nobody out: {refused}"
        );
        // Even with the mode opened up, the server checks the peer's uid
        // (it answers at once, before any request).
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let answer = as_nobody();
        assert!(answer.contains("permission-denied"), "{answer}");
        assert!(!answer.contains("\"ok\":true"), "{answer}");
    }
    server.stop();
    cache.close().expect("close");
}

fn critical_issuer(issuer: Option<u32>, critical: Option<bool>) -> Request {
    let mut r = Request::new("critical-issuer");
    r.issuer = issuer;
    r.critical = critical;
    r
}

fn critical_issuers_gauge(path: &Path) -> u64 {
    let stats = call(path, &cmd("stats")).expect("stats");
    let engine = stats["engine"].as_array().expect("engine metrics");
    let m = engine.iter().find(|m| m["name"] == "critical_issuers");
    m.expect("critical_issuers reported")["value"]
        .as_u64()
        .expect("a count")
}

#[test]
fn critical_issuer_sets_and_clears_the_hint_in_the_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backing = dir.path().join("backing.img").display().to_string();
    let cache = open(dir.path(), &backing);
    let server = control(dir.path(), &cache);
    let path = server.path().to_path_buf();
    call(&path, &set("admission", "cp")).expect("set admission");
    assert_eq!(critical_issuers_gauge(&path), 0);

    let on = call(&path, &critical_issuer(Some(7), Some(true))).expect("set");
    assert_eq!(on["issuer"], 7);
    assert_eq!(on["critical"], true);
    assert_eq!(on["was"], false);
    assert_eq!(on["admission"], "cp");
    assert_eq!(critical_issuers_gauge(&path), 1);
    let again = call(&path, &critical_issuer(Some(7), Some(true))).expect("again");
    assert_eq!(again["was"], true);
    let off = call(&path, &critical_issuer(Some(7), Some(false))).expect("clear");
    assert_eq!(off["was"], true);
    assert_eq!(critical_issuers_gauge(&path), 0);

    // Bad input: each error names what is wrong.
    let err = call(&path, &critical_issuer(Some(0), Some(true))).expect_err("issuer 0");
    match err {
        ClientError::Remote { code, message } => {
            assert_eq!(code, "refused");
            assert!(message.contains("issuer 0"), "{message}");
        }
        other => panic!("expected an error answer, got {other}"),
    }
    for (request, field) in [
        (critical_issuer(None, Some(true)), "issuer"),
        (critical_issuer(Some(3), None), "critical"),
    ] {
        match call(&path, &request).expect_err(field) {
            ClientError::Remote { code, message } => {
                assert_eq!(code, "bad-request");
                assert!(message.contains(field), "{message}");
            }
            other => panic!("expected an error answer, got {other}"),
        }
    }
    assert_eq!(critical_issuers_gauge(&path), 0);
    server.stop();
    cache.close().expect("close");
}
