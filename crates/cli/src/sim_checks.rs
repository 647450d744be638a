//! Checks of `wcache sim`'s options against the run they describe, each
//! naming the option: a cache of at least one write group, a footprint the
//! backing holds, critical volumes the workload has. The range of each
//! option alone is `crate::limits`' (at parse time); which options apply to
//! which workload is the workload registry's
//! (`wcache_sim::workload::WORKLOADS`); the engine's and the workloads' own
//! settings are theirs to check. It must never run anything.

use wcache_core::geometry::Geometry;

use crate::OneRun;

/// `--footprint`: within the backing (of `capacity_bytes`, when one device
/// holds every volume).
pub fn footprint_fits(o: &OneRun, capacity_bytes: Option<u64>) -> Result<(), String> {
    if let (Some(bytes), Some(capacity)) = (o.footprint, capacity_bytes) {
        if bytes > capacity {
            return Err(format!(
                "--footprint {bytes}: more than the {capacity} bytes of --backend {}",
                o.backend
            ));
        }
    }
    Ok(())
}

/// `--cache-pages`: at least one write group of `group_bytes` (when the
/// page and group sizes are valid: the engine names a bad one).
pub fn cache_pages(o: &OneRun, group_bytes: u64) -> Result<(), String> {
    let Ok(geometry) = Geometry::new(o.page_size, group_bytes) else {
        return Ok(());
    };
    let group_pages = u64::from(geometry.group_pages());
    if o.cache_pages < group_pages {
        return Err(format!(
            "--cache-pages {}: fewer than one write group ({group_pages} pages of {} bytes)",
            o.cache_pages, o.page_size
        ));
    }
    Ok(())
}

/// `--critical-volumes`: volumes the workload has (`volumes` of them).
pub fn critical_volumes(o: &OneRun, volumes: usize) -> Result<(), String> {
    match o
        .critical_volumes
        .iter()
        .find(|&&v| usize::from(v) >= volumes)
    {
        Some(v) => Err(format!(
            "--critical-volumes {v}: the workload has {volumes} volume(s), numbered from 0"
        )),
        None => Ok(()),
    }
}
