//! The request-oriented admission paper's experiments (Kim et al., ATC'15):
//! rdc-capacity (Fig. 4a, 7: the PostgreSQL-like app over NV-DRAM cache
//! sizes), rdc-ssd (Figs. 1b, 4b: an SSD cache over client counts) and
//! rdc-redis (Fig. 9, Table 4: the Redis-like app's latency tail), each
//! policy on the same request streams. Set-up and choices:
//! `docs/experiments/rdc.md`.

use super::series;
use super::svg::{Chart, Series};
use super::{Point, Row, BACKING_PER_VOLUME};
use crate::run::{RunLimits, SimReport};
use crate::workload::{
    pglike::WAL_VOLUME, PgLikeConfig, RedisLikeConfig, WorkloadSpec, OUTSTANDING_MAX_DEFAULT,
};
use wcache_core::policy::admission::ADMISSIONS;
use wcache_core::time::Nanos;
use wcache_core::EngineConfig;

pub const EXPERIMENTS: &[&str] = &["rdc-capacity", "rdc-ssd", "rdc-redis"];

/// No cache (the paper's "No NVWC", which Fig. 1 normalizes to), then the
/// paper's policies in its order; the names are the engine's. `none` is the
/// `volume` policy with no volume marked (every write bypasses), `wal` the
/// `volume` policy with the WAL volume marked critical.
pub const POLICIES: &[&str] = &["none", "all", "sync", "wal", "cp", "cp-pi", "cp-pi-ioi"];

/// The policies this build can run (`cp-pi-ioi` only once the engine has it).
pub fn policies_available() -> Vec<&'static str> {
    POLICIES
        .iter()
        .copied()
        .filter(|p| ["none", "wal"].contains(p) || ADMISSIONS.find(p).is_ok())
        .collect()
}

/// Backends of the PostgreSQL-like app in rdc-capacity (the paper: 24).
pub const PG_BACKENDS: u32 = 24;
/// Redis clients (the paper: 40 YCSB client threads).
pub const REDIS_CLIENTS: u32 = 40;

#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub quick: bool,
    pub seeds: u64,
    pub check_data: bool,
    pub disk_queue_depth: usize,
}

#[derive(Debug, thiserror::Error)]
#[error("unknown experiment {0:?}; valid: rdc-capacity, rdc-ssd, rdc-redis")]
pub struct UnknownExperiment(pub String);

fn engine(policy: &str, cache_pages: u64, wal_volume: Option<u32>) -> EngineConfig {
    let (admission, critical_volumes) = match (policy, wal_volume) {
        ("wal", Some(v)) => ("volume".to_string(), vec![v as u16]),
        ("none", _) => ("volume".to_string(), Vec::new()),
        _ => (policy.to_string(), Vec::new()),
    };
    EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 64 * 1024,
        cache_slots: cache_pages,
        destage_order: "wow".into(),
        destage_rate: "adaptive".into(),
        admission,
        critical_volumes,
        keep_clean: false,
        read_insert: false,
        requests_max: OUTSTANDING_MAX_DEFAULT as u32 + 64,
        ..EngineConfig::default()
    }
}

/// Virtual time: warm-up (the cache fills, checkpoints start) then a window.
fn limits(opts: &Options, warmup_s: u64, measure_s: u64) -> RunLimits {
    let (w, m) = if opts.quick {
        (warmup_s / 6, measure_s / 6)
    } else {
        (warmup_s, measure_s)
    };
    RunLimits {
        warmup_ns: Nanos::from_ms(w * 1000).0,
        measure_ns: Nanos::from_ms(m * 1000).0,
        time_limit: Nanos::from_ms((w + m) * 1000 + 60_000),
        check_data: opts.check_data,
        ..RunLimits::default()
    }
}

const MIB_PAGES: u64 = 256;

pub fn points(name: &str, opts: &Options) -> Result<Vec<Point>, UnknownExperiment> {
    let mut points = Vec::new();
    let seeds = 1..=opts.seeds.max(1);
    let policies = policies_available();
    let mut add = |backend: &'static str,
                   cache_device: &'static str,
                   policy: &str,
                   cache_pages: u64,
                   clients: u64,
                   workload: WorkloadSpec,
                   wal: Option<u32>,
                   limits: RunLimits| {
        for seed in seeds.clone() {
            points.push(Point {
                experiment: EXPERIMENTS
                    .iter()
                    .copied()
                    .find(|e| *e == name)
                    .expect("a known experiment"),
                backend,
                cache_device,
                footprint: "app",
                policy: policy.to_string(),
                nvs_pages: cache_pages,
                target_iops: clients as f64,
                seed,
                disk_queue_depth: opts.disk_queue_depth,
                engine: engine(policy, cache_pages, wal),
                workload: workload.clone(),
                limits,
            });
        }
    };
    match name {
        "rdc-capacity" => {
            let sizes_mib: &[u64] = if opts.quick {
                &[32, 4096]
            } else {
                &[32, 128, 512, 1024, 4096]
            };
            for &mib in sizes_mib {
                for policy in &policies {
                    add(
                        BACKING_PER_VOLUME,
                        "nvram",
                        policy,
                        mib * MIB_PAGES,
                        PG_BACKENDS as u64,
                        WorkloadSpec::PgLike(PgLikeConfig::tpcc_like(PG_BACKENDS)),
                        Some(WAL_VOLUME),
                        limits(opts, 120, 300),
                    );
                }
            }
        }
        "rdc-ssd" => {
            let clients: &[u32] = if opts.quick {
                &[8, 48]
            } else {
                &[8, 16, 24, 32, 48]
            };
            for &n in clients {
                for policy in &policies {
                    add(
                        BACKING_PER_VOLUME,
                        "ssd",
                        policy,
                        4096 * MIB_PAGES,
                        n as u64,
                        WorkloadSpec::PgLike(PgLikeConfig::tpcc_like(n)),
                        Some(WAL_VOLUME),
                        limits(opts, 120, 300),
                    );
                }
            }
        }
        "rdc-redis" => {
            for cache_device in ["nvram", "ssd"] {
                for policy in policies.iter().filter(|p| **p != "wal") {
                    add(
                        "hdd",
                        cache_device,
                        policy,
                        512 * MIB_PAGES,
                        REDIS_CLIENTS as u64,
                        WorkloadSpec::RedisLike(RedisLikeConfig::ycsb_a(REDIS_CLIENTS)),
                        None,
                        limits(opts, 120, 300),
                    );
                }
            }
        }
        other => return Err(UnknownExperiment(other.to_string())),
    }
    Ok(points)
}

pub const CSV_HEADER: &str = "experiment,backend,cache_device,policy,cache_mib,clients,seed,app_per_s,latency_ms_mean,latency_ms_p50,latency_ms_p99,latency_ms_p999,latency_ms_p9999,app_requests,writes,writes_cached,cached_fraction,cached_pages_fraction,reissued_writes,stalls,inherits,inherits_open,io_per_s,warmup_s,window_s,share_critical_role,share_checkpointer,share_kworker,critical_waits_mean_max_ms,critical_pages_cp,critical_pages_pi,critical_pages_ioi";

pub fn csv_row(r: &Row) -> String {
    let p = &r.point;
    let m = &r.report;
    let app = m.app.clone().unwrap_or_default();
    let cached = writes_cached(m);
    let share = |role: &str| app.write_share(role);
    let by_cause = critical_pages_by_cause(m);
    format!(
        "{},{},{},{},{},{},{},{:.1},{:.3},{:.3},{:.3},{:.3},{:.3},{},{},{},{:.4},{:.4},{},{},{},{},{:.1},{:.1},{:.1},{:.4},{:.4},{:.4},{},{:.4},{:.4},{:.4}",
        p.experiment,
        p.backend,
        p.cache_device,
        p.policy,
        p.nvs_pages / MIB_PAGES,
        p.target_iops,
        p.seed,
        app.per_s,
        app.latency_ms_mean,
        app.latency_ms_p50,
        app.latency_ms_p99,
        app.latency_ms_p999,
        app.latency_ms_p9999,
        app.requests,
        m.stats.writes,
        cached,
        if m.stats.writes == 0 {
            0.0
        } else {
            cached as f64 / m.stats.writes as f64
        },
        cached_pages_fraction(m),
        m.stats.reissued_writes,
        m.stats.stalls,
        app.inherits,
        app.inherits_open,
        m.iops,
        m.warmup_ns as f64 / 1e9,
        m.window_ns as f64 / 1e9,
        share("backends") + share("main"),
        share("checkpointer"),
        share("kworker"),
        app.waits
            .iter()
            .map(|(what, w)| format!("{what} {:.3}/{:.1}", w.mean_ms(), w.max_ms()))
            .collect::<Vec<_>>()
            .join("; "),
        by_cause[0],
        by_cause[1],
        by_cause[2],
    )
}

/// The critical pages cached, by cause (the paper's Table 3): a critical
/// issuer's own (CP), an inheriting issuer's (PI), reissued bypasses
/// (IOI), as shares of their sum (zeros when there are none).
pub fn critical_pages_by_cause(m: &SimReport) -> [f64; 3] {
    let s = &m.stats;
    let pages = [
        s.admitted_pages_hinted,
        s.admitted_pages_inherited,
        s.reissued_pages,
    ];
    let total: u64 = pages.iter().sum();
    pages.map(|p| {
        if total == 0 {
            0.0
        } else {
            p as f64 / total as f64
        }
    })
}

/// Write requests that reached the cache: admitted, or reissued to it
/// (I/O criticality inheritance) after bypassing.
pub fn writes_cached(m: &SimReport) -> u64 {
    m.stats.writes - m.stats.write_bypasses + m.stats.reissued_writes
}

/// The share of written pages that reached the cache (the paper counts
/// cached 4 KB blocks): pages written, less those the backing took
/// without a destage (bypasses), plus the reissued ones.
pub fn cached_pages_fraction(m: &SimReport) -> f64 {
    let page = 4096;
    let pages = m.stats.write_pages;
    if pages == 0 {
        return 0.0;
    }
    let to_backing = m.backing.write_bytes.div_ceil(page);
    let bypassed = to_backing.saturating_sub(m.stats.destaged_pages);
    let cached = (pages + m.stats.reissued_pages).saturating_sub(bypassed);
    (cached as f64 / pages as f64).clamp(0.0, 1.0)
}

pub fn to_csv(rows: &[Row]) -> String {
    super::csv_with(CSV_HEADER, csv_row, rows)
}

fn app_per_s(r: &Row) -> f64 {
    r.report.app.as_ref().map_or(0.0, |a| a.per_s)
}

/// Charts for an experiment's rows: (file name, SVG).
/// Per policy, its latency tail on `device`'s cache: the percentile (as 2,
/// 3, 4 nines) on x, latency on y.
fn latency_tail_series(rows: &[Row], device: &str) -> Vec<Series> {
    let mut s = Vec::new();
    for policy in POLICIES {
        let found = rows
            .iter()
            .find(|r| r.point.policy == *policy && r.point.cache_device == device);
        let Some(r) = found else {
            continue;
        };
        let a = r.report.app.clone().unwrap_or_default();
        s.push(Series {
            name: policy.to_string(),
            points: vec![
                (2.0, a.latency_ms_p99),
                (3.0, a.latency_ms_p999),
                (4.0, a.latency_ms_p9999),
            ],
        });
    }
    s
}

pub fn charts(name: &str, rows: &[Row]) -> Vec<(String, String)> {
    let all = |_: &Row| true;
    let mib = |r: &Row| (r.point.nvs_pages / MIB_PAGES) as f64;
    let clients = |r: &Row| r.point.target_iops;
    let mut out = Vec::new();
    match name {
        "rdc-capacity" => {
            let c = Chart {
                title: "rdc-capacity: PostgreSQL-like, NV-DRAM cache, transactions/s".into(),
                x_label: "cache size (MiB, log scale)".into(),
                y_label: "transactions/s".into(),
                x_log: true,
                series: series(rows, POLICIES, &all, &mib, &app_per_s),
            };
            out.push(("rdc-capacity.svg".into(), c.render()));
            let efficiency = |r: &Row| {
                let cached = writes_cached(&r.report).max(1) as f64;
                app_per_s(r) * r.report.window_ns as f64 / 1e9 / cached
            };
            let c = Chart {
                title: "rdc-capacity: transactions per cached write (Fig. 7)".into(),
                x_label: "cache size (MiB, log scale)".into(),
                y_label: "transactions / cached write".into(),
                x_log: true,
                series: series(rows, POLICIES, &all, &mib, &efficiency),
            };
            out.push(("rdc-capacity-efficiency.svg".into(), c.render()));
        }
        "rdc-ssd" => {
            let c = Chart {
                title: "rdc-ssd: PostgreSQL-like, SSD cache, transactions/s".into(),
                x_label: "clients (backends)".into(),
                y_label: "transactions/s".into(),
                x_log: false,
                series: series(rows, POLICIES, &all, &clients, &app_per_s),
            };
            out.push(("rdc-ssd.svg".into(), c.render()));
        }
        "rdc-redis" => {
            for device in ["nvram", "ssd"] {
                let s = latency_tail_series(rows, device);
                let c = Chart {
                    title: format!("rdc-redis: {device} cache, command latency tail (Table 4)"),
                    x_label: "percentile (nines: 2 = p99, 3 = p99.9, 4 = p99.99)".into(),
                    y_label: "latency (ms)".into(),
                    x_log: false,
                    series: s,
                };
                out.push((format!("rdc-redis-{device}.svg"), c.render()));
            }
        }
        _ => {}
    }
    out
}
