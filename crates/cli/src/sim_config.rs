//! `wcache sim`'s engine settings from its command line: journaled
//! write-back's and the issuers' (the rest is wiring in `main.rs`).

use wcache_core::config::{CheckpointMode, ConsistencyPoints, JournalConfig};
use wcache_sim::workload::IssuerMix;

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
