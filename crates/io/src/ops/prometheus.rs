//! The statistics snapshot in the Prometheus text exposition format
//! (version 0.0.4), and a tiny HTTP server (`tiny_http`) that serves it at
//! `GET /metrics`. It exists so that monitoring reads the same `Snapshot`
//! as the control socket. Naming follows Prometheus conventions: the
//! `wcache_` prefix, base units (seconds), `_total` on counters. Rendering
//! never fails and the server answers anything else with 404.

use std::fmt::Write as _;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::ops::operator::Operator;
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

/// Every engine metric: counters as `wcache_<name>_total` (nanoseconds
/// become seconds), gauges as `wcache_<name>`.
fn render_engine(out: &mut String, snap: &Snapshot) {
    for m in &snap.engine {
        let base = m.name.strip_suffix("_total").unwrap_or(&m.name);
        if m.kind == "counter" {
            let (name, value) = match base.strip_suffix("_ns") {
                Some(stem) => (format!("wcache_{stem}_seconds_total"), m.value as f64 / 1e9),
                None => (format!("wcache_{base}_total"), m.value as f64),
            };
            family(out, &name, "counter", &m.help);
            let _ = writeln!(out, "{name} {value}");
        } else {
            let name = format!("wcache_{base}");
            family(out, &name, "gauge", &m.help);
            let _ = writeln!(out, "{name} {}", m.value);
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

/// The snapshot as a Prometheus text exposition.
pub fn render(snap: &Snapshot) -> String {
    let mut out = String::with_capacity(16 * 1024);
    render_requests(&mut out, snap);
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
            let body = render(&operator.snapshot());
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
    }
}
