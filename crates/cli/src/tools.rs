//! What the offline cache tools (`inspect`, `check`, `flush`) share: opening
//! a cache device by path without creating or formatting anything, and
//! describing its superblock. Tools must never format a device, and never
//! write to one they were only asked to read.

use std::path::Path;
use std::sync::Arc;

use wcache_io::device::file::{FileDevice, FileOptions, SyncMode};
use wcache_io::format::Superblock;
use wcache_io::BlockDevice;

pub type AnyError = Box<dyn std::error::Error>;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("cache device {0} does not exist")]
    Missing(String),
    #[error("cache device {0} is blank (all zeros): it was never formatted, nothing to do")]
    Blank(String),
}

/// Opens an existing cache device (never created here).
pub fn open_cache(path: &Path, sync: SyncMode) -> Result<Arc<dyn BlockDevice>, AnyError> {
    if !path.exists() {
        return Err(ToolError::Missing(path.display().to_string()).into());
    }
    let options = FileOptions {
        sync,
        direct: false,
        create_size_bytes: None,
        map: false,
    };
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(path, options)?);
    if wcache_io::CacheStore::is_blank(dev.as_ref())? {
        return Err(ToolError::Blank(path.display().to_string()).into());
    }
    Ok(dev)
}

/// The superblock in words, one field a line.
pub fn describe(sb: &Superblock) -> String {
    let l = &sb.layout;
    let mut out = String::new();
    out.push_str(&format!(
        "format:  version {}, uuid {}\n",
        wcache_io::format::FORMAT_VERSION,
        sb.uuid_string()
    ));
    out.push_str(&format!(
        "geometry: {} slots of {} bytes; records at {} ({} bytes), data at {}\n",
        l.slot_count,
        l.page_size_bytes,
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
    out
}
