//! Argument parsers the commands share (`serve`, `flush`, `sim`): sizes,
//! sync modes and `NAME=BACKING` exports, each refused with an error naming
//! the option and the text. Parsing only: it must never open a device.

use wcache_core::config::CACHE_SLOTS_MAX;
use wcache_io::device::parse_size_bytes;
use wcache_io::{SyncMode, VolumeSpec};

use crate::limits::DURATION_NS_MAX;

#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    #[error("--{option}: cannot parse size {text:?} (examples: 4096, 64K, 1G)")]
    Size { option: &'static str, text: String },
    #[error("--{option}: unknown sync mode {text:?}; valid: fdatasync, dsync, nvram")]
    SyncMode { option: &'static str, text: String },
    #[error("--export {0:?}: expected NAME=BACKING")]
    Export(String),
    #[error("--journal {0:?}: expected EXPORT=PATH or EXPORT=backing-end")]
    Journal(String),
    #[error("--journal {value:?}: no export is called {name:?} (the exports: {exports})")]
    JournalExport {
        value: String,
        name: String,
        exports: String,
    },
    #[error("--journal {0:?}: that export's journal is given twice")]
    JournalTwice(String),
    #[error("--{option}: cannot parse duration {text:?} (examples: 30s, 500ms, 2m, 0)")]
    Duration { option: &'static str, text: String },
    #[error("--{option} {text:?}: longer than a day (at most 24h)")]
    DurationTooLong { option: &'static str, text: String },
    #[error("--{option} {text}: from {min_bytes} to {max_bytes} bytes")]
    SizeRange {
        option: &'static str,
        text: String,
        min_bytes: u64,
        max_bytes: u64,
    },
    #[error("--cache-size {text}: {slots} pages of {page_bytes} bytes; a cache holds from one write group ({group_pages} pages) to {CACHE_SLOTS_MAX} pages")]
    CacheSize {
        text: String,
        slots: u64,
        group_pages: u64,
        page_bytes: u64,
    },
    #[error("--{option} {text}: from one page of {page_bytes} bytes to {CACHE_SLOTS_MAX} pages{or_zero}")]
    Pages {
        option: &'static str,
        text: String,
        page_bytes: u64,
        or_zero: &'static str,
    },
}

/// A duration in nanoseconds: `0`, or a number with a unit (`30s`, `500ms`,
/// `1m 30s`), of at most a day.
pub fn duration_ns_arg(option: &'static str, text: &str) -> Result<u64, ArgError> {
    let d = humantime::parse_duration(text.trim()).map_err(|_| ArgError::Duration {
        option,
        text: text.to_string(),
    })?;
    match u64::try_from(d.as_nanos()) {
        Ok(ns) if ns <= DURATION_NS_MAX => Ok(ns),
        _ => Err(ArgError::DurationTooLong {
            option,
            text: text.to_string(),
        }),
    }
}

pub fn size_arg(option: &'static str, text: &str) -> Result<u64, ArgError> {
    parse_size_bytes(text).ok_or_else(|| ArgError::Size {
        option,
        text: text.to_string(),
    })
}

/// A size from `min_bytes` to `max_bytes`.
pub fn size_within_arg(
    option: &'static str,
    text: &str,
    (min_bytes, max_bytes): (u64, u64),
) -> Result<u64, ArgError> {
    let bytes = size_arg(option, text)?;
    if !(min_bytes..=max_bytes).contains(&bytes) {
        return Err(ArgError::SizeRange {
            option,
            text: text.to_string(),
            min_bytes,
            max_bytes,
        });
    }
    Ok(bytes)
}

/// A size in whole pages of `page_bytes` (rounded down): from one page to
/// as many as the cache has slots at most, or 0 if `or_zero` says what 0
/// means (", or 0: ...").
pub fn pages_arg(
    option: &'static str,
    text: &str,
    page_bytes: u64,
    or_zero: &'static str,
) -> Result<u64, ArgError> {
    let bytes = size_arg(option, text)?;
    let pages = bytes / page_bytes.max(1);
    let zero_allowed = bytes == 0 && !or_zero.is_empty();
    if (pages == 0 && !zero_allowed) || pages > CACHE_SLOTS_MAX {
        return Err(ArgError::Pages {
            option,
            text: text.to_string(),
            page_bytes,
            or_zero,
        });
    }
    Ok(pages)
}

pub fn sync_arg(option: &'static str, text: &str) -> Result<SyncMode, ArgError> {
    SyncMode::from_name(text).ok_or_else(|| ArgError::SyncMode {
        option,
        text: text.to_string(),
    })
}

/// `--export NAME=BACKING`, in order.
pub fn export_args(exports: &[String]) -> Result<Vec<VolumeSpec>, ArgError> {
    exports
        .iter()
        .map(|e| {
            let (name, backing) = e
                .split_once('=')
                .ok_or_else(|| ArgError::Export(e.clone()))?;
            Ok(VolumeSpec {
                name: name.to_string(),
                backing: backing.to_string(),
                journal: None,
            })
        })
        .collect()
}

/// `--journal EXPORT=PATH|backing-end`: where each export's backing
/// journal lives (write-back-journaled), set on `volumes`.
pub fn journal_args(journals: &[String], volumes: &mut [VolumeSpec]) -> Result<(), ArgError> {
    for j in journals {
        let (name, place) = j
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .ok_or_else(|| ArgError::Journal(j.clone()))?;
        let exports = volumes
            .iter()
            .map(|v| v.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let volume =
            volumes
                .iter_mut()
                .find(|v| v.name == name)
                .ok_or_else(|| ArgError::JournalExport {
                    value: j.clone(),
                    name: name.to_string(),
                    exports,
                })?;
        if volume.journal.is_some() {
            return Err(ArgError::JournalTwice(j.clone()));
        }
        volume.journal = Some(place.to_string());
    }
    Ok(())
}

/// `--footprint`: a byte count with an optional binary unit.
pub fn parse_footprint(text: &str) -> Result<u64, String> {
    let bytes = parse_size_bytes(text)
        .ok_or_else(|| format!("{text:?} is not a size (e.g. 4096, 64K, 3635200K, 8G)"))?;
    if bytes < 4096 {
        return Err(format!("{text:?} is less than one 4 KiB page"));
    }
    Ok(bytes)
}

pub fn parse_duration_ns(text: &str) -> Result<u64, String> {
    duration_ns_arg("duration", text).map_err(|e| match e {
        ArgError::DurationTooLong { .. } => format!("{text:?} is longer than a day (at most 24h)"),
        _ => format!("{text:?} is not a duration (e.g. 0, 500ms, 30s)"),
    })
}

pub fn parse_cutoff(text: &str) -> Result<u64, String> {
    parse_size_bytes(text).ok_or_else(|| format!("{text:?} is not a size (e.g. 0, 1M, 4M)"))
}
