//! Opening a cache device for service: format it if blank, else check it
//! against the configuration being started and scan its records.

use super::*;

/// How `open_or_format` found the cache device.
#[derive(Debug)]
pub struct OpenReport {
    /// A new (blank) device was formatted.
    pub formatted: bool,
    /// The device held another configuration (or, with force, an unreadable
    /// superblock) and was formatted anew; what was discarded, in words.
    pub reformatted: Option<String>,
    /// The superblock said the last shutdown was clean.
    pub was_clean: bool,
    /// The superblock's format version as found (`FORMAT_VERSION` after a
    /// format); below it, the open for service upgrades the superblock.
    pub format_version_found: u32,
    /// Zeros written at format where the cache file had no storage of its
    /// own (`BlockDevice::fill_holes`).
    pub filled_bytes: u64,
    /// Records that failed verification and were freed (an in-flight write
    /// at a power loss shows as a data checksum mismatch).
    pub discarded: Vec<BadSlot>,
    /// Dirty pages handed to recovery (newest versions).
    pub dirty_pages: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("cache device {device} is not empty and has no valid wcache superblock ({source}); refusing to format over it without --force")]
    NotACache { device: String, source: StoreError },
    #[error("cache device {device} holds {dirty_pages} dirty pages of another configuration ({differences}); refusing to start, which would lose them. Drain them first (wcache flush with the old exports), or --force to discard them")]
    OtherConfiguration {
        device: String,
        dirty_pages: u64,
        differences: String,
    },
}

impl CacheStore {
    /// Opens `dev` for service with `page_size_bytes` and `volumes`:
    /// formats a blank device; otherwise verifies the superblock, scans and
    /// verifies every record, frees the bad ones durably, and returns the
    /// verified records for `Driver::recover`. A device whose superblock
    /// names another page size or other volumes is formatted anew only when
    /// it holds no dirty page, or with `force` (the report says what was
    /// discarded). A format records `engine`; another engine configuration
    /// is no reason to format (any configuration recovers any records).
    /// Does not touch the clean flag or an existing superblock's engine
    /// record (the caller's `record_open` does, once it serves).
    pub fn open_or_format(
        dev: Arc<dyn BlockDevice>,
        page_size_bytes: u64,
        engine: &EngineRecord,
        volumes: Vec<VolumeEntry>,
        force: bool,
    ) -> Result<(CacheStore, Vec<RecoveredSlot>, OpenReport), OpenError> {
        let mut report = OpenReport {
            formatted: false,
            reformatted: None,
            was_clean: true,
            format_version_found: FORMAT_VERSION,
            discarded: Vec::new(),
            dirty_pages: 0,
            filled_bytes: 0,
        };
        let format = |dev, volumes, mut report: OpenReport| {
            let store = CacheStore::format(dev, page_size_bytes, engine, volumes)?;
            report.filled_bytes = store.filled_bytes;
            Ok((store, Vec::new(), report))
        };
        if CacheStore::is_blank(dev.as_ref()).map_err(StoreError::from)? {
            report.formatted = true;
            return format(dev, volumes, report);
        }
        let store = match CacheStore::open(dev.clone()) {
            Ok(store) => store,
            Err(source) if force => {
                report.reformatted = Some(format!(
                    "an unreadable cache device ({source}) and whatever it held"
                ));
                return format(dev, volumes, report);
            }
            Err(source) => {
                return Err(OpenError::NotACache {
                    device: dev.name(),
                    source,
                })
            }
        };
        let sb = store.superblock();
        report.was_clean = sb.clean;
        report.format_version_found = sb.format_version;
        let differences = differences(&sb, dev.len_bytes(), page_size_bytes, &volumes);
        let scan = store.scan(true).map_err(StoreError::from)?;
        if !differences.is_empty() {
            let dirty_pages = scan.dirty_pages();
            if dirty_pages > 0 && !force {
                return Err(OpenError::OtherConfiguration {
                    device: dev.name(),
                    dirty_pages,
                    differences: differences.join("; "),
                });
            }
            report.reformatted = Some(format!(
                "{dirty_pages} dirty pages of the previous configuration ({})",
                differences.join("; ")
            ));
            drop(store);
            return format(dev, volumes, report);
        }
        let bad_slots: Vec<SlotIndex> = scan
            .bad
            .iter()
            .map(|b| match b {
                BadSlot::Record { slot, .. } | BadSlot::Data { slot, .. } => SlotIndex(*slot),
            })
            .collect();
        if !bad_slots.is_empty() {
            store
                .free_records_durably(&bad_slots)
                .map_err(StoreError::from)?;
        }
        report.dirty_pages = scan.dirty_pages();
        report.discarded = scan.bad;
        Ok((store, scan.found, report))
    }
}

/// How a formatted device differs from the configuration being started
/// (page size, slots the device fits, volumes), in words.
fn differences(
    sb: &Superblock,
    device_bytes: u64,
    page_size_bytes: u64,
    volumes: &[VolumeEntry],
) -> Vec<String> {
    let mut differences = Vec::new();
    if sb.layout.page_size_bytes != page_size_bytes {
        differences.push(format!(
            "page size {} bytes, now {page_size_bytes}",
            sb.layout.page_size_bytes
        ));
    }
    let fits = Layout::for_device(device_bytes, page_size_bytes)
        .map(|l| l.slot_count)
        .unwrap_or(0);
    if sb.layout.page_size_bytes == page_size_bytes && fits != sb.layout.slot_count {
        differences.push(format!(
            "{} slots, the device now fits {fits}",
            sb.layout.slot_count
        ));
    }
    if sb.volumes != volumes {
        differences.push(format!(
            "volumes [{}], now [{}]",
            show_volumes(&sb.volumes),
            show_volumes(volumes)
        ));
    }
    differences
}

/// A volume table in words: `NAME=IDENTITY (SIZE bytes), …`.
pub fn show_volumes(volumes: &[VolumeEntry]) -> String {
    volumes
        .iter()
        .map(|v| format!("{}={} ({} bytes)", v.name, v.identity, v.size_bytes))
        .collect::<Vec<_>>()
        .join(", ")
}
