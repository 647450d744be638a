//! Opening a cache device for service: format it if blank, else check it
//! against the configuration being started and scan its records.

use super::*;
use crate::format::log as format_log;

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
    /// Format 3: where the log found stands, and why it ends there.
    pub log: Option<LogFound>,
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
    #[error("cache device {device} is format {found}, and the other format was asked for (--cache-format). To change it, drain it first with the format it has (wcache flush --cache {device}, or a clean stop of a server that leaves no dirty page), then start with --force, which formats it anew; or leave --cache-format out to keep format {found}")]
    OtherFormat { device: String, found: u32 },
}

impl CacheStore {
    /// Formats `dev`: every record free, a new UUID, `volumes` and the
    /// engine configuration `engine` in the superblock (current version).
    /// The old superblock is invalidated first, so that a crash in the
    /// middle leaves a device that is recognisably unformatted.
    /// With `log`, format 3: the record area holds the two log-start
    /// blocks (A written with the empty log), and the superblock a salt.
    pub fn format(
        dev: Arc<dyn BlockDevice>,
        page_size_bytes: u64,
        engine: &EngineRecord,
        volumes: Vec<VolumeEntry>,
        log: bool,
    ) -> Result<CacheStore, StoreError> {
        let fmt_err = |source| StoreError::Format {
            device: dev.name(),
            source,
        };
        let (layout, version) = if log {
            let layout = format_log::layout_for_device(dev.len_bytes(), page_size_bytes);
            (layout.map_err(fmt_err)?, format_log::FORMAT_VERSION_LOG)
        } else {
            let layout = Layout::for_device(dev.len_bytes(), page_size_bytes);
            (layout.map_err(fmt_err)?, FORMAT_VERSION)
        };
        let uuid = new_uuid();
        let sb = Superblock {
            format_version: version,
            uuid,
            layout,
            clean: true,
            open_count: 0,
            volumes,
            engine: Some(engine.clone()),
            epoch: 0,
            transaction_id: 0,
            salt: u64::from_le_bytes(new_uuid()[..8].try_into().expect("8 bytes")),
        };
        let encoded = sb.encode().map_err(fmt_err)?;
        // First, before anything else is written: the data area is written
        // at random, and a write where a file has no storage yet makes the
        // next flush commit the allocation too.
        let filled_bytes = dev.fill_holes()?;
        let mut buf = AlignedBuf::new();
        const ZERO_CHUNK_BYTES: u64 = 1 << 20;
        let zeros = buf.get(ZERO_CHUNK_BYTES as usize);
        zeros.fill(0);
        dev.write_at(&zeros[..SUPERBLOCK_BYTES as usize], 0)?;
        sync(dev.as_ref())?;
        let mut at = layout.record_offset_bytes;
        let end = layout.record_offset_bytes + layout.record_area_bytes;
        while at < end {
            let n = (end - at).min(ZERO_CHUNK_BYTES);
            dev.write_at(&zeros[..n as usize], at)?;
            at += n;
        }
        if log {
            let start = format_log::LogStart {
                generation: 1,
                tail_slot: 0,
                tail_seq: 1,
                checkpoint: None,
            };
            let block = buf.get(format_log::LOG_START_BYTES as usize);
            block.copy_from_slice(&start.encode(&uuid));
            dev.write_at(block, layout.record_offset_bytes)?;
        }
        sync(dev.as_ref())?;
        let sb_buf = buf.get(SUPERBLOCK_BYTES as usize);
        sb_buf.copy_from_slice(&encoded);
        dev.write_at(sb_buf, 0)?;
        sync(dev.as_ref())?;
        let mut store = CacheStore::with_blocks(dev, sb, None);
        store.filled_bytes = filled_bytes;
        Ok(store)
    }

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
        let asked = Asked {
            page_size_bytes,
            engine,
            log: None,
            new_log: false,
            force,
        };
        CacheStore::open_or_format_as(dev, asked, volumes)
    }

    /// `open_or_format` with the format asked for: `log` Some(true) for
    /// format 3, Some(false) for format 2, None for whatever an existing
    /// cache has (a new one: format 3 if `new_log`). An existing cache of the other
    /// format is refused (naming both and what to do) unless `force`.
    pub fn open_or_format_as(
        dev: Arc<dyn BlockDevice>,
        asked: Asked<'_>,
        volumes: Vec<VolumeEntry>,
    ) -> Result<(CacheStore, Vec<RecoveredSlot>, OpenReport), OpenError> {
        let mut report = OpenReport {
            formatted: false,
            reformatted: None,
            was_clean: true,
            format_version_found: FORMAT_VERSION,
            discarded: Vec::new(),
            dirty_pages: 0,
            filled_bytes: 0,
            log: None,
        };
        let format = |dev, volumes, mut report: OpenReport| {
            let log = asked.log.unwrap_or(asked.new_log);
            let store = CacheStore::format(dev, asked.page_size_bytes, asked.engine, volumes, log)?;
            report.filled_bytes = store.filled_bytes;
            if log {
                // The empty log just written.
                report.log = Some(store.read_log()?.1);
            }
            Ok((store, Vec::new(), report))
        };
        if CacheStore::is_blank(dev.as_ref()).map_err(StoreError::from)? {
            report.formatted = true;
            return format(dev, volumes, report);
        }
        let store = match CacheStore::open(dev.clone()) {
            Ok(store) => store,
            Err(source) if asked.force => {
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
        let differences = asked.differences(&sb, dev.as_ref(), &volumes)?;
        let (found, dirty_pages) = store.found_versions(&mut report)?;
        if !differences.is_empty() {
            if dirty_pages > 0 && !asked.force {
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
            report.log = None;
            report.discarded.clear();
            drop(store);
            return format(dev, volumes, report);
        }
        report.dirty_pages = dirty_pages;
        Ok((store, found, report))
    }

    /// The versions recovery starts from, and how many pages are dirty:
    /// format 2's scan of every record (those that fail are zeroed, and
    /// named in the report), or format 3's log (its position in the report).
    fn found_versions(
        &self,
        report: &mut OpenReport,
    ) -> Result<(Vec<RecoveredSlot>, u64), OpenError> {
        if self.layout.log {
            let (found, log) = self.read_log()?;
            report.log = Some(log);
            let keeps_older = super::keeps_older_versions(&self.superblock());
            let dirty_pages = dirty_pages_of(&found, keeps_older);
            return Ok((found, dirty_pages));
        }
        let scan = self.scan(true).map_err(StoreError::from)?;
        let bad_slots: Vec<SlotIndex> = scan
            .bad
            .iter()
            .map(|b| match b {
                BadSlot::Record { slot, .. } | BadSlot::Data { slot, .. } => SlotIndex(*slot),
            })
            .collect();
        if !bad_slots.is_empty() {
            self.free_records_durably(&bad_slots)
                .map_err(StoreError::from)?;
        }
        let dirty_pages = scan.dirty_pages();
        report.discarded = scan.bad;
        Ok((scan.found, dirty_pages))
    }
}

impl Asked<'_> {
    /// How the device's format differs from what is asked; another
    /// format is refused unless `force`.
    fn differences(
        &self,
        sb: &Superblock,
        dev: &dyn BlockDevice,
        volumes: &[VolumeEntry],
    ) -> Result<Vec<String>, OpenError> {
        let other_format = self.log.is_some_and(|log| log != sb.layout.log);
        if other_format && !self.force {
            return Err(OpenError::OtherFormat {
                device: dev.name(),
                found: sb.format_version,
            });
        }
        let mut differences = differences(sb, dev.len_bytes(), self.page_size_bytes, volumes);
        if other_format {
            differences.push(format!("format version {}, now another", sb.format_version));
        }
        Ok(differences)
    }
}

/// What a start asks of the cache device's format.
#[derive(Clone, Copy, Debug)]
pub struct Asked<'a> {
    pub page_size_bytes: u64,
    pub engine: &'a EngineRecord,
    /// Format 3 (true), 2 (false), or as found (None; `new_log` if new).
    pub log: Option<bool>,
    /// A new cache asked no format is format 3 (else 2).
    pub new_log: bool,
    /// Format over what cannot be opened, or opened as asked.
    pub force: bool,
}

/// Pages whose newest version found is dirty. The log's replay finds one
/// version a page, or under ordered write-back older ones before it (the
/// versions come in log order: the last of a page is its newest).
fn dirty_pages_of(found: &[RecoveredSlot], keeps_older: bool) -> u64 {
    if !keeps_older {
        return found.iter().filter(|f| f.record.dirty).count() as u64;
    }
    let mut newest: rustc_hash::FxHashMap<u64, bool> = rustc_hash::FxHashMap::default();
    for f in found {
        newest.insert(f.record.key.0, f.record.dirty);
    }
    newest.values().filter(|&&dirty| dirty).count() as u64
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
    let layout = if sb.layout.log {
        format_log::layout_for_device(device_bytes, page_size_bytes)
    } else {
        Layout::for_device(device_bytes, page_size_bytes)
    };
    let fits = layout.map(|l| l.slot_count).unwrap_or(0);
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

#[cfg(test)]
mod tests {
    use super::*;
    use wcache_core::types::{PageIndex, PageKey, VolumeId};
    use wcache_core::SlotRecord;

    /// An ordered cache's log finds a page's older versions before its
    /// newest: the page counts once, as its newest version says.
    #[test]
    fn dirty_pages_count_each_page_once_by_its_newest_version() {
        let v = |slot, page, seq, dirty| RecoveredSlot {
            slot: SlotIndex(slot),
            record: SlotRecord {
                key: PageKey::new(VolumeId(0), PageIndex(page)),
                seq,
                dirty,
            },
        };
        let found = [
            v(1, 7, 1, true),
            v(2, 7, 2, true),
            v(3, 8, 3, true),
            v(4, 8, 4, false),
            v(5, 9, 5, true),
        ];
        assert_eq!(dirty_pages_of(&found, true), 2, "pages 7 and 9");
        assert_eq!(dirty_pages_of(&found[4..], false), 1);
    }
}
