//! What the offline cache tools (`inspect`, `check`, `flush`) share:
//! describing a superblock and the engine configuration a drain runs with
//! (they open a cache device by path with
//! `wcache_io::cache::open_existing_cache_device`, which never creates or
//! formats anything). Tools must never format a device, and never write to
//! one they were only asked to read.

use std::path::Path;

use wcache_core::EngineConfig;
use wcache_io::cache::open_existing_cache_device;
use wcache_io::device::file::SyncMode;
use wcache_io::format::{EngineRecord, Superblock, FORMAT_VERSION};
use wcache_io::lock::{DeviceLock, LockError, LockMode};
use wcache_io::CacheStore;
use wcache_io::EngineSource;

pub type AnyError = Box<dyn std::error::Error>;

/// The superblock in words, one field a line.
pub fn describe(sb: &Superblock) -> String {
    let l = &sb.layout;
    let mut out = String::new();
    out.push_str(&format!(
        "format:  version {}{}, uuid {}\n",
        sb.format_version,
        if sb.format_version < FORMAT_VERSION {
            format!(" (rewritten as version {FORMAT_VERSION} at the next open for service)")
        } else {
            String::new()
        },
        sb.uuid_string()
    ));
    out.push_str(&format!(
        "geometry: {} slots of {} bytes; {} at {} ({} bytes), data at {}\n",
        l.slot_count,
        l.page_size_bytes,
        match (
            l.log,
            wcache_io::format::log::checkpoint_copy(l, 0).is_some()
        ) {
            (false, _) => "records",
            (true, true) => "log-start blocks and checkpoint copies",
            (true, false) => "log-start blocks (no checkpoint copies)",
        },
        l.record_offset_bytes,
        l.record_area_bytes,
        l.data_offset_bytes
    ));
    out.push_str(&format!(
        "state:   {} (opened for service {} times)\n",
        if sb.clean {
            "clean shutdown"
        } else {
            "NOT clean: a server has it open, or it crashed"
        },
        sb.open_count
    ));
    match &sb.engine {
        Some(engine) => {
            out.push_str(&format!(
                "engine:  {engine} (recorded at the last open for service)\n"
            ));
            out.push_str(&format!(
                "ordering: epoch {}, transaction {} (for ordered and journaled write-back; 0 until they exist)\n",
                sb.epoch, sb.transaction_id
            ));
        }
        None => out.push_str(&format!(
            "engine:  not recorded (a version-{} superblock records no engine configuration; the next open for service records it)\n",
            sb.format_version
        )),
    }
    out
}

/// The engine configuration an offline drain runs with, in words, and
/// whether it is the recorded one or a guess.
pub fn describe_offline_engine(engine: &EngineConfig, source: EngineSource) -> String {
    let settings = match EngineRecord::from_config(engine) {
        Ok(record) => record.to_string(),
        Err(e) => format!("(cannot describe: {e})"),
    };
    match source {
        EngineSource::Recorded | EngineSource::Settings => {
            format!("engine configuration as recorded by the last server: {settings}")
        }
        EngineSource::Guessed => format!(
            "note: the engine configuration is not recorded (version-1 superblock); \
             draining with a guess: {settings}. Every page is destaged all the same, \
             perhaps more slowly than the server would; its next open records its configuration"
        ),
    }
}

/// A shared lock on the cache device at `path` for a read-only tool (check,
/// inspect): refused while a server or an offline flush holds it, since
/// what they write meanwhile would read as damage. A missing path is left
/// for the tool's own error.
pub fn lock_for_reading(path: &Path) -> Result<Option<DeviceLock>, LockError> {
    if !path.exists() {
        return Ok(None);
    }
    DeviceLock::acquire(path, LockMode::Shared, "cache device").map(Some)
}

/// Opens the cache device at `path` to read it, with its superblock (a bad
/// one is an error that names the field).
pub fn open_cache(path: &Path) -> Result<(CacheStore, Superblock), AnyError> {
    let dev = open_existing_cache_device(path, SyncMode::Fdatasync)?;
    let store = CacheStore::open(dev)?;
    let sb = store.superblock();
    Ok((store, sb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wcache_io::cache::offline_engine_config;
    use wcache_io::format::{Layout, VolumeEntry};

    fn superblock(engine: Option<EngineRecord>) -> Superblock {
        Superblock {
            format_version: if engine.is_some() { FORMAT_VERSION } else { 1 },
            uuid: [7; 16],
            layout: Layout::for_device(64 << 20, 4096).expect("layout"),
            clean: true,
            open_count: 2,
            volumes: vec![VolumeEntry::new("disk", 1 << 30, "/b.img").expect("entry")],
            engine,
            epoch: 0,
            transaction_id: 0,
            salt: 0,
        }
    }

    #[test]
    fn a_recorded_configuration_is_shown_and_used_by_the_offline_drain() {
        let config = EngineConfig {
            group_size_bytes: 256 * 1024,
            destage_order: "cscan".into(),
            destage_rate: "linear".into(),
            sequential_cutoff_bytes: 1 << 20,
            ..EngineConfig::default()
        };
        let sb = superblock(Some(EngineRecord::from_config(&config).expect("record")));
        let text = describe(&sb);
        assert!(text.contains("format:  version 2, uuid"), "{text}");
        assert!(
            text.contains(
                "engine:  write group 262144 bytes, write policy write-back, destage order cscan, \
                 destage rate linear, admission all, sequential cutoff 1048576 bytes (recorded"
            ),
            "{text}"
        );
        assert!(text.contains("ordering: epoch 0, transaction 0"), "{text}");
        let (engine, source) = offline_engine_config(&sb);
        assert_eq!(source, EngineSource::Recorded);
        assert_eq!(engine.group_size_bytes, 256 * 1024);
        assert_eq!(
            (engine.destage_order.as_str(), engine.destage_rate.as_str()),
            ("cscan", "linear")
        );
        assert_eq!(engine.cache_slots, sb.layout.slot_count);
        let said = describe_offline_engine(&engine, source);
        assert!(
            said.starts_with(
                "engine configuration as recorded by the last server: write group 262144 bytes"
            ),
            "{said}"
        );
    }

    #[test]
    fn a_version_1_superblock_says_not_recorded_and_the_drain_guesses_with_a_note() {
        let sb = superblock(None);
        let text = describe(&sb);
        assert!(
            text.contains(
                "format:  version 1 (rewritten as version 2 at the next open for service)"
            ),
            "{text}"
        );
        assert!(text.contains("engine:  not recorded"), "{text}");
        assert!(!text.contains("ordering:"), "{text}");
        let (engine, source) = offline_engine_config(&sb);
        assert_eq!(source, EngineSource::Guessed);
        assert_eq!(engine.group_size_bytes, 64 * 1024);
        assert_eq!(engine.destage_order, EngineConfig::default().destage_order);
        let said = describe_offline_engine(&engine, source);
        assert!(
            said.starts_with("note: the engine configuration is not recorded (version-1 superblock); draining with a guess: write group 65536 bytes"),
            "{said}"
        );
    }
}
