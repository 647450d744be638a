//! Named experiments: sweeps of simulation points that reproduce a paper's
//! figures, run on all cores, written as CSV (one row per run) and SVG.
//! Every parameter a point uses is in its row or in `docs/experiments/`.

pub mod rdc;
pub mod svg;
pub mod wow;

use crate::run::{RunLimits, SimError, SimReport, Simulation};
use crate::workload::WorkloadSpec;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use wcache_core::EngineConfig;
use wcache_models::{build_device, build_device_with, ConcatModel, DeviceModel, HddParams};

/// A backing of one disk per volume of the workload, each volume at the
/// start of its own disk (the admission paper's data and log disks).
pub const BACKING_PER_VOLUME: &str = "hdd-per-volume";

/// One `disk` per volume of `sizes_bytes`, concatenated so that the
/// simulator's volume layout (one after another) puts each on its own.
pub fn backing_per_volume(disk: &HddParams, sizes_bytes: &[u64]) -> Box<dyn DeviceModel> {
    let members = sizes_bytes
        .iter()
        .map(|&size| {
            let d = build_device_with("hdd", disk).expect("hdd is a model");
            (d, size.div_ceil(512) * 512)
        })
        .collect();
    Box::new(ConcatModel::new(members))
}

/// One simulation to run.
#[derive(Clone, Debug)]
pub struct Point {
    pub experiment: &'static str,
    /// Backing device name for the registry, e.g. "raid5", or
    /// [`BACKING_PER_VOLUME`] (one disk per volume of the workload).
    pub backend: &'static str,
    /// Cache device name for the registry: "nvram", "ssd".
    pub cache_device: &'static str,
    /// "full" or "partial" (the WOW paper's footprints).
    pub footprint: &'static str,
    pub policy: String,
    pub nvs_pages: u64,
    /// Open-loop target, 0 for closed loop.
    pub target_iops: f64,
    pub seed: u64,
    /// Command queue depth of each disk of the backing.
    pub disk_queue_depth: usize,
    pub engine: EngineConfig,
    pub workload: WorkloadSpec,
    pub limits: RunLimits,
}

/// A point and what it measured.
#[derive(Clone, Debug)]
pub struct Row {
    pub point: Point,
    pub report: SimReport,
}

pub fn run_point(p: &Point) -> Result<SimReport, SimError> {
    let disk = HddParams::ultrastar_10k().with_queue_depth(p.disk_queue_depth);
    let workload = p.workload.build(p.seed)?;
    let backing: Box<dyn DeviceModel> = if p.backend == BACKING_PER_VOLUME {
        backing_per_volume(&disk, &workload.volume_sizes_bytes())
    } else {
        build_device_with(p.backend, &disk).map_err(|e| {
            SimError::Workload(crate::workload::WorkloadError::InvalidConfig(e.to_string()))
        })?
    };
    let cache = build_device(p.cache_device).map_err(|e| {
        SimError::Workload(crate::workload::WorkloadError::InvalidConfig(e.to_string()))
    })?;
    let mut sim = Simulation::new(
        p.engine.clone(),
        cache,
        backing,
        workload,
        p.limits.check_data,
    )?;
    sim.run(p.limits)
}

/// Run all points on `threads` threads; `progress(done, total)` after each.
/// Results come back in the order of `points`.
pub fn run_points(
    points: Vec<Point>,
    threads: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<Row>, SimError> {
    let total = points.len();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<SimReport, SimError>>>> =
        Mutex::new((0..total).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                let r = run_point(&points[i]);
                let failed = r.is_err();
                results.lock().expect("results lock")[i] = Some(r);
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                if failed {
                    next.store(total, Ordering::Relaxed);
                }
            });
        }
    });
    let results = results.into_inner().expect("results lock");
    let mut rows = Vec::with_capacity(total);
    for (point, r) in points.into_iter().zip(results) {
        match r {
            Some(Ok(report)) => rows.push(Row { point, report }),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    Ok(rows)
}

pub const CSV_HEADER: &str = "experiment,backend,footprint,policy,nvs_pages,target_iops,seed,iops,response_ms_mean,read_response_ms_mean,write_response_ms_mean,write_hit_ratio,destage_distance_mean,destages,destaged_pages,stalls,occupancy_pages_mean,high_threshold_pages,requests,warmup_s,window_s,backing_reads,backing_writes,sectors_checked,destage_skips,write_group_hits,write_group_hits_sequential,disk_queue_depth,disk_read_ms,disk_read_position_ms,disk_write_ms,disk_write_position_ms";

pub fn csv_row(r: &Row) -> String {
    let p = &r.point;
    let m = &r.report;
    // Member disks' mean mechanism time per operation (zero for models without heads).
    let disk = m.backing_members.mechanism_ms_each();
    format!(
        "{},{},{},{},{},{},{},{:.2},{:.3},{:.3},{:.3},{:.4},{:.1},{},{},{},{:.1},{},{},{:.1},{:.1},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3}",
        p.experiment,
        p.backend,
        p.footprint,
        p.policy,
        p.nvs_pages,
        p.target_iops,
        p.seed,
        m.iops,
        m.response_ms_mean,
        m.read_response_ms_mean,
        m.write_response_ms_mean,
        m.stats.write_hit_ratio(),
        m.stats.destage_distance_sectors_mean(),
        m.stats.destages,
        m.stats.destaged_pages,
        m.stats.stalls,
        m.occupancy_pages_mean,
        m.thresholds_pages.1,
        m.requests,
        m.warmup_ns as f64 / 1e9,
        m.window_ns as f64 / 1e9,
        m.backing.reads,
        m.backing.writes,
        m.sectors_checked,
        m.stats.destage_skips,
        m.stats.write_group_hits,
        m.stats.write_group_hits_sequential,
        p.disk_queue_depth,
        disk[0],
        disk[1],
        disk[2],
        disk[3],
    )
}

pub fn to_csv(rows: &[Row]) -> String {
    csv_with(CSV_HEADER, csv_row, rows)
}

/// A header line, then one line per row.
pub fn csv_with(header: &str, row: fn(&Row) -> String, rows: &[Row]) -> String {
    let mut s = String::from(header);
    s.push('\n');
    for r in rows {
        s.push_str(&row(r));
        s.push('\n');
    }
    s
}

/// One line per policy of `policies` that has rows: the mean over seeds of
/// `y` against `x`, over the rows `filter` keeps.
pub fn series(
    rows: &[Row],
    policies: &[&str],
    filter: &dyn Fn(&Row) -> bool,
    x: &dyn Fn(&Row) -> f64,
    y: &dyn Fn(&Row) -> f64,
) -> Vec<svg::Series> {
    policies
        .iter()
        .filter(|policy| rows.iter().any(|r| r.point.policy == **policy))
        .map(|policy| {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.point.policy == *policy && filter(r))
                .map(|r| (x(r), y(r)))
                .collect();
            svg::Series {
                name: policy.to_string(),
                points: svg::mean_by_x(pts),
            }
        })
        .collect()
}
