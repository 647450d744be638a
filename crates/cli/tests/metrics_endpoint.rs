//! `wcache serve --metrics ADDR`: `GET /metrics` scraped before, during and
//! after a load over NBD, each scrape parsed by the reference parser
//! (Python `prometheus_client.parser.text_string_to_metric_families`; the
//! test fails, never skips, when it is missing: scripts/test.sh installs it),
//! and every number checked to move as the load implies; every metric the
//! Grafana dashboard in docs/ queries is one it serves.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Nbd, Served};

const PAGE: u64 = 4096;
const WRITES: u64 = 300;
const READS: u64 = 50;

/// The parser prints one JSON object: families' types and every sample.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
types, samples = {}, []
for f in text_string_to_metric_families(sys.stdin.read()):
    types[f.name] = f.type
    for s in f.samples:
        samples.append([s.name, s.labels, s.value])
print(json.dumps({"types": types, "samples": samples}))
"#;

struct Scrape {
    types: HashMap<String, String>,
    samples: Vec<(String, HashMap<String, String>, f64)>,
}

impl Scrape {
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found = self.samples.iter().find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        });
        found
            .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
            .2
    }
}

fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("response");
    let (head, body) = text.split_once("\r\n\r\n").expect("headers");
    (head.to_string(), body.to_string())
}

fn scrape(addr: &str) -> Scrape {
    let (head, body) = http_get(addr, "/metrics");
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    let python = std::env::var("WCACHE_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut child = Command::new(&python)
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{python} is needed to parse /metrics: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("feed");
    let out = child.wait_with_output().expect("parser");
    assert!(
        out.status.success(),
        "the Prometheus parser refused the exposition (or prometheus_client is missing: \
         {python} -m pip install prometheus_client; scripts/test.sh does): {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("parser output");
    let types = json["types"]
        .as_object()
        .expect("types")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect();
    let samples = json["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| {
            let labels = s[1]
                .as_object()
                .expect("labels")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect();
            (
                s[0].as_str().expect("name").to_string(),
                labels,
                s[2].as_f64().expect("value"),
            )
        })
        .collect();
    Scrape { types, samples }
}

#[test]
fn metrics_parse_with_the_reference_parser_and_move_with_the_load() {
    let dir = tempfile::tempdir_in("/tmp").expect("tempdir");
    let socket = dir.path().join("w.sock");
    let (cache, backing) = (dir.path().join("cache.img"), dir.path().join("backing.img"));
    let args = [
        "--cache",
        cache.to_str().expect("utf8"),
        "--cache-size",
        "16M",
        // The cache's flushes are counted below: fdatasync, not whatever
        // `auto` finds faster on this machine.
        "--cache-sync",
        "fdatasync",
        "--backing",
        backing.to_str().expect("utf8"),
        "--backing-size",
        "64M",
        "--metrics",
        "127.0.0.1:0",
    ];
    let served = Served::start(&args, &socket);
    let log = served.log_text();
    let addr = log
        .split("metrics: http://")
        .nth(1)
        .and_then(|rest| rest.split("/metrics").next())
        .unwrap_or_else(|| panic!("no metrics address in {log}"))
        .to_string();
    let (head, _) = http_get(&addr, "/other");
    assert!(head.contains(" 404 "), "{head}");
    // Prometheus's naming conventions, on the real exposition.
    let (_, body) = http_get(&addr, "/metrics");
    let problems = wcache_io::ops::prometheus::naming_problems(&body);
    assert!(problems.is_empty(), "naming: {problems:?}");
    assert!(
        body.contains("wcache_config_info{") && body.contains("write_policy=\"write-back\""),
        "no configuration info metric"
    );
    assert!(
        body.contains("wcache_build_info{version=\""),
        "no build info metric"
    );
    assert!(
        body.contains("wcache_dirty_age_seconds "),
        "dirty age in seconds"
    );
    // Prometheus's own linter too, where it is installed (Debian: prometheus).
    if let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(body.as_bytes()).expect("to promtool");
        drop(stdin);
        let out = child.wait_with_output().expect("promtool");
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!("promtool check metrics: clean");
    }

    let before = scrape(&addr);
    assert_eq!(before.types["wcache_requests"], "counter");
    assert_eq!(before.types["wcache_request_duration_seconds"], "histogram");
    assert_eq!(before.types["wcache_dirty_pages"], "gauge");
    assert_eq!(before.types["wcache_writes"], "counter");
    assert_eq!(before.types["wcache_stall_seconds"], "counter");

    let load_socket = socket.clone();
    let load = std::thread::spawn(move || {
        let mut nbd = Nbd::connect(&load_socket, "disk").expect("connect");
        let data = vec![0x77u8; PAGE as usize];
        for page in 0..WRITES {
            nbd.write(page * 3 * PAGE, &data, false).expect("write");
        }
        let mut buf = vec![0u8; PAGE as usize];
        for page in 0..READS {
            nbd.read(page * 3 * PAGE, &mut buf).expect("read");
        }
        nbd.flush().expect("flush");
    });
    // Scrapes while the load runs parse too.
    let start = Instant::now();
    let mut during = 0;
    while !load.is_finished() && start.elapsed() < Duration::from_secs(60) {
        scrape(&addr);
        during += 1;
    }
    load.join().expect("load");
    assert!(during > 0, "scraped during the load");
    let after = scrape(&addr);

    let delta =
        |name: &str, labels: &[(&str, &str)]| after.get(name, labels) - before.get(name, labels);
    let disk = |kind| [("export", "disk"), ("kind", kind)];
    assert_eq!(
        delta("wcache_requests_total", &disk("write")),
        WRITES as f64
    );
    assert_eq!(delta("wcache_requests_total", &disk("read")), READS as f64);
    assert_eq!(delta("wcache_requests_total", &disk("flush")), 1.0);
    assert_eq!(delta("wcache_requests_total", &disk("trim")), 0.0);
    assert_eq!(delta("wcache_request_errors_total", &disk("write")), 0.0);
    assert_eq!(
        after.get("wcache_request_duration_seconds_count", &disk("write")),
        after.get("wcache_requests_total", &disk("write"))
    );
    assert!(delta("wcache_request_duration_seconds_sum", &disk("write")) > 0.0);
    let inf = after.get(
        "wcache_request_duration_seconds_bucket",
        &[("kind", "write"), ("le", "+Inf")],
    );
    assert_eq!(inf, WRITES as f64);
    let mut buckets: Vec<(f64, f64)> = after
        .samples
        .iter()
        .filter(|(n, l, _)| n == "wcache_request_duration_seconds_bucket" && l["kind"] == "write")
        .map(|(_, l, v)| (l["le"].parse::<f64>().unwrap_or(f64::INFINITY), *v))
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(
        buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "cumulative buckets: {buckets:?}"
    );

    assert_eq!(delta("wcache_writes_total", &[]), WRITES as f64);
    assert_eq!(delta("wcache_write_pages_total", &[]), WRITES as f64);
    assert_eq!(delta("wcache_reads_total", &[]), READS as f64);
    assert_eq!(
        delta("wcache_read_hits_total", &[]),
        READS as f64,
        "every read hits a dirty page"
    );
    assert_eq!(delta("wcache_flush_requests_total", &[]), 1.0);
    // Per export: every read page hit a dirty page of this export.
    let export = [("export", "disk")];
    assert_eq!(
        delta("wcache_export_read_page_hits_total", &export),
        READS as f64
    );
    assert_eq!(
        delta("wcache_export_write_pages_total", &export),
        WRITES as f64
    );
    assert!(after.get("wcache_export_dirty_pages", &export) > 0.0);
    assert_eq!(
        after.get("wcache_export_destaged_pages_total", &export),
        after.get("wcache_destaged_pages_total", &[]),
        "one export: its destaged pages are the cache's"
    );
    assert_eq!(
        delta("wcache_driver_requests_total", &[]),
        (WRITES + READS + 1) as f64
    );
    assert!(delta("wcache_cache_flushes_total", &[]) > 0.0);
    // Each page written once: it is still dirty, or it was destaged.
    let dirty = after.get("wcache_dirty_pages", &[]);
    assert!(dirty + delta("wcache_destaged_pages_total", &[]) >= WRITES as f64);
    assert!(after.get("wcache_occupancy_ratio", &[]) > 0.0);
    assert!(after.get("wcache_dirty_ratio", &[]) > 0.0 || dirty == 0.0);
    // No counter goes down.
    for (name, labels, value) in &before.samples {
        let family = name.trim_end_matches("_total");
        if before.types.get(family).map(String::as_str) == Some("counter") {
            let pairs: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert!(after.get(name, &pairs) >= *value, "{name} went down");
        }
    }
    dashboard_names_exist(&after);
    let (ok, log) = served.stop();
    assert!(ok, "{log}");
}

/// Every metric the Grafana dashboard in docs/ queries is one the endpoint serves.
fn dashboard_names_exist(scrape: &Scrape) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/grafana-dashboard.json"
    );
    let text = std::fs::read_to_string(path).expect("docs/grafana-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    assert!(exprs.len() >= 8, "{exprs:?}");
    for expr in &exprs {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("wcache_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                scrape.samples.iter().any(|(n, _, _)| *n == name),
                "the dashboard queries {name}, which /metrics does not serve ({expr})"
            );
            rest = &rest[at + name.len()..];
        }
    }
}
