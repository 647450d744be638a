//! What a service says about its cache: the banner's lines on the cache
//! device and on what the open found, the staleness bounds in force, the
//! warning of volatile write-back, and the close report. It exists so that
//! every front end describes the cache in the same words (tests and
//! operators grep them). Lines a front end prints as its output are
//! returned (`Vec<String>`: the binary prints them, never panicking on a
//! closed stdout); events are logged through `tracing`. It must never
//! print to stdout itself.

use std::time::Duration;

use wcache_core::config::StalenessConfig;

use crate::cache::{Cache, CacheConfig, CloseReport};
use crate::device::journaled::JournalOpen;
use crate::format::FORMAT_VERSION;
use crate::ops::Snapshot;

/// The banner's lines on the cache device: size, data path, format.
pub fn cache_device_lines(cache: &Cache) -> Vec<String> {
    let device = cache.device();
    let page = cache.page_size_bytes();
    let mut lines = vec![format!(
        "  cache: {} ({} MiB, {} slots of {page} bytes{})",
        device.name,
        device.size_bytes >> 20,
        cache.engine_config().cache_slots,
        if device.mapped {
            "; mapped: written by memory copies"
        } else {
            ""
        }
    )];
    if let Some(choice) = &device.durability {
        lines.push(format!("  durability (--cache-sync auto): {choice}"));
    }
    lines.push(format!("  data path: {}", cache.data_path()));
    if let Some(log) = cache.open_report().and_then(|r| r.log.as_ref()) {
        lines.push(format!(
            "  format 3: a log of batches, one device write each (checkpoint: {}, read in {:.3} s; then {} batches ({} MiB) read back in {:.3} s; the log ended: {})",
            log.checkpoint,
            log.times.0.as_secs_f64(),
            log.batches,
            (log.slots_read * cache.page_size_bytes()) >> 20,
            log.times.1.as_secs_f64(),
            log.end,
        ));
    }
    lines
}

/// The warning printed (to stderr) before a cache in volatile memory
/// acknowledges writes it may lose.
pub fn volatile_write_back_warning() -> Vec<String> {
    vec![
        "!".repeat(78),
        "!! WARNING: volatile write-back FOR BENCHMARKS ONLY.".into(),
        "!! Writes are acknowledged from a cache in volatile memory with no crash".into(),
        "!! recovery: a crash, kill or power loss LOSES acknowledged writes, and".into(),
        "!! dirty pages not destaged at exit are lost. Never put real data here.".into(),
        "!".repeat(78),
    ]
}

/// How the cache device was found: formatted, reformatted, or recovered,
/// and each backing's journal. Returns the output lines; the warnings and
/// notes are logged.
pub fn open_report(cache: &Cache, config: &CacheConfig) -> Vec<String> {
    let mut lines = Vec::new();
    let journals = cache.volumes().iter().zip(cache.backing_journals());
    for ((volume, found), spec) in journals.zip(&config.volumes) {
        let place = spec.journal.as_deref().unwrap_or_default();
        let what = match found {
            JournalOpen::Formatted => format!("formatted ({place})"),
            JournalOpen::Empty => format!("empty ({place})"),
            JournalOpen::Replayed { txn, pages } => {
                format!("replayed transaction {txn} ({pages} pages) in place ({place})")
            }
        };
        lines.push(format!(
            "wcache: export {:?}: backing journal {what}; the export has {} bytes",
            volume.name(),
            volume.size_bytes()
        ));
    }
    if let Some(report) = cache.open_report() {
        device_report(cache, report, &mut lines);
    }
    lines
}

/// `open_report`'s part on the cache device.
fn device_report(cache: &Cache, report: &crate::store::OpenReport, lines: &mut Vec<String>) {
    let cache_name = &cache.device().name;
    if report.formatted {
        lines.push(format!("wcache: formatted a new cache device {cache_name}"));
    }
    if report.filled_bytes > 0 {
        lines.push(format!(
            "  wrote {} MiB of zeros where the cache file had no storage of its own (so that a flush writes data, not allocations)",
            report.filled_bytes.div_ceil(1 << 20)
        ));
    }
    if let Some(what) = &report.reformatted {
        tracing::warn!("--force: formatted {cache_name} anew, DISCARDING {what}");
    } else if !report.formatted {
        lines.push(format!(
            "wcache: opened cache device {cache_name} (last shutdown {}); recovering {} dirty pages",
            if report.was_clean { "clean" } else { "NOT clean: crash or power loss" },
            report.dirty_pages
        ));
    }
    for bad in &report.discarded {
        tracing::warn!("discarded a damaged record: {bad}");
    }
    if report.reformatted.is_none() && report.format_version_found < FORMAT_VERSION {
        lines.push(format!(
            "wcache: superblock format version {} upgraded to {FORMAT_VERSION}: it now records \
             the engine configuration",
            report.format_version_found
        ));
    }
    if cache.device().on_volatile_memory {
        tracing::info!(
            "note: the cache file is on tmpfs: it survives a crash of this process, \
             not a reboot or power loss (a stand-in for NV-DRAM)"
        );
    }
}

/// The staleness bounds in force, as the banner states them.
pub fn staleness_text(s: &StalenessConfig) -> String {
    let age = |ns: u64| humantime::format_duration(Duration::from_nanos(ns)).to_string();
    let bound = match s.max_dirty_age_ns {
        0 => "no maximum dirty age".to_string(),
        ns => format!("dirty pages destaged once {} old", age(ns)),
    };
    let idle = match s.idle_destages {
        0 => "no idle drain".to_string(),
        n => format!(
            "idle after {}: {n} destages outstanding",
            age(s.idle_after_ns)
        ),
    };
    format!("{bound}; {idle}")
}

/// Logs what the stop left behind, then the statistics of the whole run;
/// `front_end` are the front end's own lines, logged after the request count.
pub(super) fn log_close_report(closed: &CloseReport, front_end: &[String]) {
    if closed.threads_left {
        tracing::warn!(
            "driver threads still in device calls (a backing that does not answer); \
             exiting without them (their pages stay dirty in the cache)"
        );
    }
    if closed.recorded_clean {
        tracing::info!(
            "clean shutdown recorded; {} dirty pages stay in the cache and are \
             destaged after the next start (or by wcache flush)",
            closed.dirty_pages
        );
    } else if closed.dirty_pages > 0 {
        tracing::warn!(
            "{} dirty pages were never destaged (volatile write-back): they are lost",
            closed.dirty_pages
        );
    }
    log_stop_stats(closed, front_end);
}

fn log_stop_stats(closed: &CloseReport, front_end: &[String]) {
    let stats = &closed.snapshot.driver;
    let snap: &Snapshot = &closed.snapshot;
    let v = |name: &str| snap.engine_value(name).unwrap_or(0);
    tracing::info!(
        "stopped after {} requests ({} cache errors, {} backing errors{})",
        stats.requests,
        stats.cache_errors,
        stats.backing_errors,
        stats
            .last_error
            .as_ref()
            .map(|e| format!("; last: {e}"))
            .unwrap_or_default()
    );
    for line in front_end {
        tracing::info!("{line}");
    }
    tracing::info!(
        "{} writes ({} stalled for room, {} ms in all), {} reads ({} hits), {} destages \
         of {} pages, {} cache flushes, {} backing flushes",
        v("writes"),
        v("stalls"),
        v("stall_ns_total") / 1_000_000,
        v("reads"),
        v("read_hits"),
        v("destages"),
        v("destaged_pages"),
        stats.cache_flushes,
        stats.backing_flushes
    );
    tracing::info!(
        "admission: {} writes admitted to the cache, {} bypassed it, {} reissued to it \
         while bypassing (I/O criticality inheritance; {} late completions discarded)",
        v("writes") - v("write_bypasses"),
        v("write_bypasses"),
        v("reissued_writes"),
        v("discarded_completions")
    );
    for r in snap.requests.iter().filter(|r| r.count > 0) {
        tracing::info!(
            "export {} {}: {} requests, response time p50 {} us, p99 {} us, max {} us",
            r.export,
            r.kind,
            r.count,
            r.p50_us,
            r.p99_us,
            r.max_us
        );
    }
}
