//! What the offline cache tools (`inspect`, `check`, `flush`) share:
//! describing a superblock (they open a cache device by path with
//! `wcache_io::cache::open_existing_cache_device`, which never creates or
//! formats anything). Tools must never format a device, and never write to
//! one they were only asked to read.

use wcache_io::format::Superblock;

pub type AnyError = Box<dyn std::error::Error>;

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
