//! What a one-run simulation (`wcache sim` with flags, no experiment)
//! prints beside its report: admission's effect, an application's own
//! measures, and the `--timeline` CSV. Output only.

use std::io::Write;
use std::path::Path;

use wcache_sim::experiment::rdc;
use wcache_sim::{SimReport, TimelineSample};

use crate::OneRun;

/// Admission's effect: writes cached, and critical writes' response times
/// beside the others' (printed when requests carry issuers).
pub(crate) fn print_admission(o: &OneRun, r: &SimReport) {
    if o.issuers == 0 {
        return;
    }
    let s = &r.stats;
    println!(
        "admission           {}: {} of {} writes cached ({} bypassed, {} of them reissued to the cache)",
        o.admission,
        s.writes - s.write_bypasses,
        s.writes,
        s.write_bypasses,
        s.reissued_writes
    );
    for (name, c) in [("critical", &r.critical_writes), ("other", &r.other_writes)] {
        println!(
            "{name:<8} writes      {} (ms: mean {:.3}, p50 {:.3}, p99 {:.3}, p99.9 {:.3})",
            c.writes, c.mean_ms, c.p50_ms, c.p99_ms, c.p999_ms
        );
    }
}

/// An application workload's own measures, and admission's effect on it.
pub(crate) fn print_app(o: &OneRun, r: &SimReport) {
    let Some(a) = &r.app else {
        return;
    };
    let s = &r.stats;
    println!(
        "application         {:.1} {}/s ({} in the window); latency ms mean {:.3}, p50 {:.3}, p99 {:.3}, p99.9 {:.3}, p99.99 {:.3}",
        a.per_s, a.unit, a.requests, a.latency_ms_mean, a.latency_ms_p50, a.latency_ms_p99, a.latency_ms_p999, a.latency_ms_p9999
    );
    println!(
        "admission           {}: {} of {} writes cached ({:.1} %; {:.1} % of pages; {} reissued), {} stalls, {} inheritances in the window ({} over the run, {} still open)",
        o.admission,
        rdc::writes_cached(r),
        s.writes,
        100.0 * rdc::writes_cached(r) as f64 / s.writes.max(1) as f64,
        100.0 * rdc::cached_pages_fraction(r),
        s.reissued_writes,
        s.stalls,
        a.inherits,
        a.inherits_total,
        a.inherits_open
    );
    let total: u64 = a.writes_by_role.iter().map(|w| w.1).sum();
    let mix: Vec<String> = a
        .writes_by_role
        .iter()
        .map(|(role, n)| format!("{role} {:.1} %", 100.0 * *n as f64 / total.max(1) as f64))
        .collect();
    println!(
        "write mix           {} (whole run, {total} writes)",
        mix.join(", ")
    );
    for (what, w) in &a.waits {
        println!(
            "critical waits      {what}: {} waits, mean {:.3} ms, max {:.3} ms (whole run)",
            w.count,
            w.mean_ms(),
            w.max_ms()
        );
    }
}

/// The `--timeline` CSV: one row per sample, counters as totals since the start.
pub(crate) fn write_timeline(path: &Path, samples: &[TimelineSample]) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(
        out,
        "t_s,measuring,dirty_pages,dirty_groups,destages_in_flight,requests_in_flight,stalls,destages,destaged_pages,low_pages,high_pages"
    )?;
    for s in samples {
        writeln!(
            out,
            "{:.3},{},{},{},{},{},{},{},{},{},{}",
            s.t_ns as f64 / 1e9,
            s.measuring as u8,
            s.dirty_pages,
            s.dirty_groups,
            s.destages_in_flight,
            s.requests_in_flight,
            s.stalls,
            s.destages,
            s.destaged_pages,
            s.low_pages,
            s.high_pages
        )?;
    }
    out.flush()
}
