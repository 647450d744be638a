//! `wcache sim`'s settings from its command line: journaled write-back's,
//! the issuers' and the workload's options (the rest is wiring in `main.rs`;
//! what each workload makes of its options is the workload registry's).

use wcache_core::config::{CheckpointMode, ConsistencyPoints, JournalConfig};
use wcache_sim::workload::{HrrwModel, IssuerMix, WorkloadOptions};

use crate::OneRun;

/// Journaled write-back's settings from `--journal-pages`, `--commit-pages`,
/// `--commit-age`, `--consistency-points` and `--checkpoint` (a backing
/// journal is as large as the host journal).
pub fn journal_config(o: &OneRun) -> Result<JournalConfig, String> {
    let points = ConsistencyPoints::from_option(&o.consistency_points)?;
    let mut journal = JournalConfig {
        journal_pages: o.journal_pages,
        commit_pages: o.commit_pages,
        commit_age_ns: o.commit_age,
        points,
        checkpoint: CheckpointMode::Nvram,
    };
    journal.checkpoint = match o.checkpoint.as_str() {
        "nvram" => CheckpointMode::Nvram,
        "backing-journal" => CheckpointMode::BackingJournal {
            pages: journal.journal_pages(o.cache_pages),
        },
        other => {
            return Err(format!(
                "--checkpoint {other:?}: valid: backing-journal, nvram"
            ))
        }
    };
    Ok(journal)
}

/// The issuers and sync tags of `--issuers`, `--critical-issuers`, `--sync-fraction`.
pub fn issuer_mix(o: &OneRun) -> IssuerMix {
    IssuerMix {
        issuers: o.issuers,
        critical_issuers: o.critical_issuers,
        sync_fraction: o.sync_fraction,
    }
}

/// The workload's options, a field per option; `hrrw` parsed, and the
/// backing's bytes when one device holds every volume.
pub fn workload_options(
    o: &OneRun,
    hrrw: HrrwModel,
    backing_bytes: Option<u64>,
) -> WorkloadOptions {
    WorkloadOptions {
        footprint_bytes: o.footprint,
        backing_bytes,
        outstanding: o.outstanding,
        target_iops: o.target_iops,
        read_fraction: o.read_fraction,
        issuers: issuer_mix(o),
        hrrw,
        bsus: o.bsus,
        trace: o.trace.clone(),
        trace_format: o.trace_format.clone(),
        trace_speed: o.trace_speed,
        files: o.files,
        cpu_us: o.cpu_us,
    }
}
