//! The statistics snapshot in the Prometheus text exposition format
//! (version 0.0.4), and a tiny HTTP server (`tiny_http`) that serves it at
//! `GET /metrics`. It exists so that monitoring reads the same `Snapshot`
//! as the control socket. Naming follows Prometheus conventions: the
//! `wcache_` prefix, base units (seconds), `_total` on counters. Rendering
//! never fails and the server answers anything else with 404.

use std::fmt::Write as _;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::ops::operator::{Operator, Status};
use crate::ops::snapshot::Snapshot;

/// The Content-Type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label value with `\`, `"` and newlines escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Help text with `\` and newlines escaped.
fn help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help_text: &str) {
    let _ = writeln!(out, "# HELP {name} {}", help(help_text));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Engine metrics exposed under another name, where the engine's own
/// would read wrongly in Prometheus (a FLUSH request beside the device's
/// flushes; a counter of summed distances is a counter of sectors).
const RENAMES: &[(&str, &str)] = &[
    ("flushes", "flush_requests"),
    ("destage_distance_sectors_sum", "destage_distance_sectors"),
];

/// An engine metric's exposed name (without `_total`) and value in base
/// units: nanoseconds, microseconds and milliseconds become seconds.
fn exposed(name: &str, value: u64) -> (String, f64) {
    let base = name.strip_suffix("_total").unwrap_or(name);
    let base = RENAMES
        .iter()
        .find(|(from, _)| *from == base)
        .map_or(base, |(_, to)| to);
    for (unit, per_second) in [("_ns", 1e9), ("_us", 1e6), ("_ms", 1e3)] {
        if let Some(stem) = base.strip_suffix(unit) {
            return (format!("wcache_{stem}_seconds"), value as f64 / per_second);
        }
    }
    (format!("wcache_{base}"), value as f64)
}

/// Every engine metric: counters as `wcache_<name>_total`, gauges as
/// `wcache_<name>`, in base units (`exposed`).
fn render_engine(out: &mut String, snap: &Snapshot) {
    for m in snap.engine.iter().chain(&snap.front) {
        let (name, value) = exposed(&m.name, m.value);
        if m.kind == "counter" {
            let name = format!("{name}_total");
            family(out, &name, "counter", &m.help);
            let _ = writeln!(out, "{name} {value}");
        } else {
            family(out, &name, "gauge", &m.help);
            let _ = writeln!(out, "{name} {value}");
        }
    }
    let capacity = snap.engine_value("capacity_pages").unwrap_or(0);
    let used = capacity.saturating_sub(snap.engine_value("free_slots").unwrap_or(0));
    let dirty = snap.engine_value("dirty_pages").unwrap_or(0);
    let ratio = |n: u64| {
        if capacity == 0 {
            0.0
        } else {
            n as f64 / capacity as f64
        }
    };
    family(
        out,
        "wcache_occupancy_ratio",
        "gauge",
        "Share of cache slots holding a page version.",
    );
    let _ = writeln!(out, "wcache_occupancy_ratio {}", ratio(used));
    family(
        out,
        "wcache_dirty_ratio",
        "gauge",
        "Share of cache slots holding dirty pages.",
    );
    let _ = writeln!(out, "wcache_dirty_ratio {}", ratio(dirty));
}

fn render_driver(out: &mut String, snap: &Snapshot) {
    let d = &snap.driver;
    let counters = [
        (
            "wcache_driver_requests_total",
            "Requests submitted to the driver.",
            d.requests,
        ),
        (
            "wcache_cache_errors_total",
            "Cache device calls that failed.",
            d.cache_errors,
        ),
        (
            "wcache_backing_errors_total",
            "Backing device calls that failed.",
            d.backing_errors,
        ),
        (
            "wcache_cache_flushes_total",
            "Cache device flushes.",
            d.cache_flushes,
        ),
        (
            "wcache_backing_flushes_total",
            "Backing device flushes.",
            d.backing_flushes,
        ),
    ];
    for (name, text, value) in counters {
        family(out, name, "counter", text);
        let _ = writeln!(out, "{name} {value}");
    }
    family(
        out,
        "wcache_uptime_seconds",
        "gauge",
        "Seconds since the cache was opened.",
    );
    let _ = writeln!(out, "wcache_uptime_seconds {}", snap.uptime_s);
}

fn render_requests(out: &mut String, snap: &Snapshot) {
    let labels = |r: &crate::ops::RequestStats| {
        format!(
            "export=\"{}\",kind=\"{}\"",
            label(&r.export),
            label(&r.kind)
        )
    };
    family(
        out,
        "wcache_requests_total",
        "counter",
        "Requests answered, per export and kind.",
    );
    for r in &snap.requests {
        let _ = writeln!(out, "wcache_requests_total{{{}}} {}", labels(r), r.count);
    }
    family(
        out,
        "wcache_request_errors_total",
        "counter",
        "Requests answered with an error.",
    );
    for r in &snap.requests {
        let _ = writeln!(
            out,
            "wcache_request_errors_total{{{}}} {}",
            labels(r),
            r.errors
        );
    }
    let name = "wcache_request_duration_seconds";
    family(
        out,
        name,
        "histogram",
        "Response time from the front end's call into the cache to its answer.",
    );
    for r in &snap.requests {
        let l = labels(r);
        for (le, count) in &r.buckets {
            let _ = writeln!(out, "{name}_bucket{{{l},le=\"{le}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{l},le=\"+Inf\"}} {}", r.count);
        let _ = writeln!(out, "{name}_sum{{{l}}} {}", r.sum_seconds);
        let _ = writeln!(out, "{name}_count{{{l}}} {}", r.count);
    }
}

/// What is running, as info metrics (value 1, the facts in labels): the
/// build, and the policies in force.
pub fn render_info(status: &Status) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "wcache_build_info",
        "gauge",
        "The wcache build serving.",
    );
    let _ = writeln!(
        out,
        "wcache_build_info{{version=\"{}\"}} 1",
        label(env!("CARGO_PKG_VERSION"))
    );
    family(
        &mut out,
        "wcache_config_info",
        "gauge",
        "The cache device and the policies in force.",
    );
    let _ = writeln!(
        out,
        "wcache_config_info{{cache_device=\"{}\",write_policy=\"{}\",admission=\"{}\",destage_order=\"{}\",destage_rate=\"{}\",page_size_bytes=\"{}\"}} 1",
        label(&status.cache_device),
        label(&status.write_policy),
        label(&status.admission),
        label(&status.destage_order),
        label(&status.destage_rate),
        status.page_size_bytes
    );
    if let Some(r) = &status.replication {
        render_replication(&mut out, r);
    }
    out
}

/// The replication link (where the cache is replicated): its state as an
/// info metric, what the peer may lack, losses and resyncs.
fn render_replication(out: &mut String, r: &crate::replica::ReplicationStatus) {
    family(
        out,
        "wcache_replication_info",
        "gauge",
        "The replication peer and the link's state (connected, resyncing, degraded).",
    );
    let _ = writeln!(
        out,
        "wcache_replication_info{{peer=\"{}\",state=\"{}\",cache_id=\"{}\",epoch=\"{}\"}} 1",
        label(&r.peer),
        label(&r.state),
        label(&r.cache_id),
        r.epoch
    );
    let gauges: [(&str, &str, &str, u64); 4] = [
        (
            "wcache_replication_connected",
            "gauge",
            "1 while the peer holds every acknowledged write (connected and in sync).",
            u64::from(r.state == "connected"),
        ),
        (
            "wcache_replication_unprotected_bytes",
            "gauge",
            "Bytes of the cache device the peer may lack (whole regions).",
            r.unprotected_bytes,
        ),
        (
            "wcache_replication_links_lost_total",
            "counter",
            "Links to the peer lost since start.",
            r.links_lost,
        ),
        (
            "wcache_replication_resynced_bytes_total",
            "counter",
            "Bytes copied to the peer by resyncs since start.",
            r.resynced_bytes,
        ),
    ];
    for (name, kind, help, value) in gauges {
        family(out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
}

/// What breaks Prometheus's naming conventions in an exposition, one line
/// each (none: it follows them): the `wcache_` prefix and snake case, a
/// `_total` suffix on every counter and on nothing else, base units (no
/// `_ms`, `_us` or `_ns`), no counter of sums, and HELP and TYPE for every
/// family.
pub fn naming_problems(text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut helped = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap_or("").to_string());
            continue;
        }
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split(' ');
        let (name, kind) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let valid = name.strip_prefix("wcache_").is_some_and(|n| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        });
        if !valid {
            problems.push(format!("{name}: not wcache_ and snake case"));
        }
        let stem = name.strip_suffix("_total").unwrap_or(name);
        match (kind, name.ends_with("_total")) {
            ("counter", false) => problems.push(format!("{name}: a counter without _total")),
            ("counter", true) => {}
            (_, true) => problems.push(format!("{name}: a {kind} with _total")),
            _ => {}
        }
        for unit in ["_ms", "_us", "_ns"] {
            if stem.ends_with(unit) || stem.contains(&format!("{unit}_")) {
                problems.push(format!("{name}: {unit} is not a base unit"));
            }
        }
        if kind == "counter" && stem.ends_with("_sum") {
            problems.push(format!("{name}: a counter of a sum"));
        }
        if !helped.contains(name) {
            problems.push(format!("{name}: no HELP before its TYPE"));
        }
    }
    problems
}

/// Per export: its dirty pages (a gauge) and page counts (counters).
fn render_exports(out: &mut String, snap: &Snapshot) {
    type Field = fn(&crate::ops::snapshot::ExportCounts) -> u64;
    let families: [(&str, &str, &str, Field); 6] = [
        (
            "wcache_export_dirty_pages",
            "gauge",
            "The export's pages newer in the cache than on the backing.",
            |e| e.dirty_pages,
        ),
        (
            "wcache_export_read_pages_total",
            "counter",
            "Pages the export's reads asked for.",
            |e| e.read_pages,
        ),
        (
            "wcache_export_read_page_hits_total",
            "counter",
            "Of those, pages found in the cache.",
            |e| e.read_page_hits,
        ),
        (
            "wcache_export_write_pages_total",
            "counter",
            "Pages the export's writes wrote.",
            |e| e.write_pages,
        ),
        (
            "wcache_export_destaged_pages_total",
            "counter",
            "Pages destaged to the export's backing (its destage rate).",
            |e| e.destaged_pages,
        ),
        (
            "wcache_export_write_page_hits_total",
            "counter",
            "Of those, pages written over a dirty page.",
            |e| e.write_page_hits,
        ),
    ];
    for (name, kind, text, field) in families {
        family(out, name, kind, text);
        for e in &snap.exports {
            let _ = writeln!(
                out,
                "{name}{{export=\"{}\"}} {}",
                label(&e.export),
                field(e)
            );
        }
    }
}

/// The snapshot as a Prometheus text exposition.
pub fn render(snap: &Snapshot) -> String {
    let mut out = String::with_capacity(16 * 1024);
    render_requests(&mut out, snap);
    render_exports(&mut out, snap);
    render_engine(&mut out, snap);
    render_driver(&mut out, snap);
    out
}

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {addr}: {reason}")]
pub struct MetricsError {
    pub addr: String,
    pub reason: String,
}

/// `GET /metrics` on a TCP address, on its own thread.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    addr: std::net::SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `GET /metrics` on `listener` (bound by the caller, so that
    /// a front end can refuse to start before it opens the cache).
    pub fn start(
        listener: std::net::TcpListener,
        operator: Operator,
    ) -> Result<MetricsServer, MetricsError> {
        let addr = listener.local_addr().map_err(|e| MetricsError {
            addr: "?".into(),
            reason: e.to_string(),
        })?;
        let error = |reason: String| MetricsError {
            addr: addr.to_string(),
            reason,
        };
        let server =
            tiny_http::Server::from_listener(listener, None).map_err(|e| error(e.to_string()))?;
        let server = Arc::new(server);
        let serving = server.clone();
        let thread = std::thread::Builder::new()
            .name("wcache-metrics".into())
            .spawn(move || serve_metrics(&serving, &operator))
            .map_err(|e| error(e.to_string()))?;
        Ok(MetricsServer {
            server,
            addr,
            thread: Some(thread),
        })
    }

    /// The address bound (the port chosen when 0 was asked).
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    pub fn stop(mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve_metrics(server: &tiny_http::Server, operator: &Operator) {
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("");
        let response = if *request.method() == tiny_http::Method::Get && path == "/metrics" {
            let body = render(&operator.snapshot()) + &render_info(&operator.status());
            let header = tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE)
                .expect("a constant, valid header");
            tiny_http::Response::from_string(body).with_header(header)
        } else {
            tiny_http::Response::from_string("only GET /metrics is served here\n")
                .with_status_code(404)
        };
        let _ = request.respond(response);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::snapshot::{Metric, RequestStats};

    #[test]
    fn names_units_and_escaping() {
        let metric = |name: &str, kind: &str, value| Metric {
            name: name.into(),
            kind: kind.into(),
            help: "A \\ help\nline.".into(),
            value,
        };
        let snap = Snapshot {
            uptime_s: 1.5,
            engine: vec![
                metric("writes", "counter", 7),
                metric("stall_ns_total", "counter", 2_500_000_000),
                metric("dirty_pages", "gauge", 3),
                metric("capacity_pages", "gauge", 10),
                metric("free_slots", "gauge", 6),
            ],
            driver: Default::default(),
            requests: vec![RequestStats {
                export: "a\"b\\c".into(),
                kind: "write".into(),
                count: 2,
                errors: 0,
                sum_seconds: 0.25,
                p50_us: 1,
                p90_us: 1,
                p99_us: 1,
                max_us: 1,
                buckets: vec![(0.001, 1), (0.01, 2)],
            }],
            exports: Vec::new(),
            front: Vec::new(),
        };
        let text = render(&snap);
        for line in [
            "wcache_writes_total 7",
            "wcache_stall_seconds_total 2.5",
            "# TYPE wcache_stall_seconds_total counter",
            "# HELP wcache_writes_total A \\\\ help\\nline.",
            "wcache_dirty_pages 3",
            "wcache_occupancy_ratio 0.4",
            "wcache_dirty_ratio 0.3",
            "wcache_requests_total{export=\"a\\\"b\\\\c\",kind=\"write\"} 2",
            "wcache_request_duration_seconds_bucket{export=\"a\\\"b\\\\c\",kind=\"write\",le=\"0.001\"} 1",
            "wcache_request_duration_seconds_bucket{export=\"a\\\"b\\\\c\",kind=\"write\",le=\"+Inf\"} 2",
            "wcache_request_duration_seconds_sum{export=\"a\\\"b\\\\c\",kind=\"write\"} 0.25",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert_eq!(naming_problems(&text), Vec::<String>::new(), "{text}");
    }

    #[test]
    fn engine_names_become_base_units_and_clear_names() {
        assert_eq!(
            exposed("dirty_age_ms", 1500),
            ("wcache_dirty_age_seconds".into(), 1.5)
        );
        assert_eq!(exposed("stall_ns_total", 2_000_000_000).1, 2.0);
        assert_eq!(exposed("flushes", 3).0, "wcache_flush_requests");
        assert_eq!(
            exposed("destage_distance_sectors_sum", 9).0,
            "wcache_destage_distance_sectors"
        );
    }

    #[test]
    fn the_naming_lint_finds_each_kind_of_problem() {
        let text = "# HELP wcache_a_ms x\n# TYPE wcache_a_ms gauge\n\
                    # HELP wcache_b x\n# TYPE wcache_b counter\n\
                    # HELP wcache_c_total x\n# TYPE wcache_c_total gauge\n\
                    # HELP wcache_d_sum_total x\n# TYPE wcache_d_sum_total counter\n\
                    # TYPE wcache_e gauge\n# HELP Bad x\n# TYPE Bad gauge\n";
        let problems = naming_problems(text);
        for needle in [
            "wcache_a_ms: _ms",
            "wcache_b: a counter without _total",
            "wcache_c_total: a gauge with _total",
            "wcache_d_sum_total: a counter of a sum",
            "wcache_e: no HELP",
            "Bad: not wcache_",
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(needle)),
                "{needle} not found in {problems:?}"
            );
        }
        assert_eq!(problems.len(), 6, "{problems:?}");
    }
}
