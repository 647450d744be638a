//! The on-device format of a persistent cache device, as pure encoding and
//! decoding (no I/O): the superblock, the per-slot records and the layout
//! that places them. `docs/on-disk-format.md` describes the same bytes; the
//! two must change together (bump `FORMAT_VERSION`).
//!
//! Layout: superblock (4 KiB at offset 0), record area (32 bytes per slot,
//! rounded up to whole 4 KiB blocks), data area (slot i at
//! `data_offset_bytes + i * page_size_bytes`, aligned to the page and to 4 KiB).
//! All integers are little-endian. Every structure carries a crc32c.
//! This module must never guess: a field that does not decode is an error
//! that names the field.
//!
//! Superblock versions: 2 (written) records the engine configuration a
//! server last opened the cache with (`EngineRecord`), and room for the
//! ordered/journaled write-back state (epoch, transaction id); 1 (read)
//! does not record the configuration: it decodes with `engine: None`, the
//! offline tools say so, and the next open for service rewrites it as 2.

use wcache_core::geometry::Geometry;
use wcache_core::policy::admission::ADMISSIONS;
use wcache_core::policy::destage_order::DESTAGE_ORDERS;
use wcache_core::policy::destage_rate::DESTAGE_RATES;
use wcache_core::policy::registry::UnknownPolicy;
use wcache_core::{EngineConfig, WritePolicyKind};

/// Superblock magic, the first 8 bytes of a formatted cache device.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"WCACHEsb";
/// The superblock version this build writes.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest superblock version this build reads (upgraded when a server opens it).
pub const FORMAT_VERSION_MIN: u32 = 1;
pub const SUPERBLOCK_BYTES: u64 = 4096;
/// The unit in which records are written (one in-memory copy per block).
pub const RECORD_BLOCK_BYTES: u64 = 4096;
pub const RECORD_BYTES: u64 = 32;
pub const RECORDS_PER_BLOCK: u64 = RECORD_BLOCK_BYTES / RECORD_BYTES;
pub const RECORD_MAGIC: u16 = 0x5257; // "WR"
pub const RECORD_VERSION: u8 = 1;
pub const RECORD_FLAG_USED: u8 = 1;
pub const RECORD_FLAG_DIRTY: u8 = 2;

pub const VOLUME_ENTRY_BYTES: usize = 256;
pub const VOLUME_NAME_BYTES_MAX: usize = 64;
pub const VOLUME_IDENTITY_BYTES_MAX: usize = 184;
const VOLUME_TABLE_OFFSET_BYTES: usize = 128;
/// Volumes the superblock's table holds.
pub const VOLUMES_MAX: usize = 15;
const SUPERBLOCK_CRC_OFFSET_BYTES: usize = SUPERBLOCK_BYTES as usize - 4;

pub const SUPERBLOCK_FLAG_CLEAN: u32 = 1;

// Version 2 fields, in bytes version 1 kept reserved (zero): the ordering
// state at 84..128, the engine configuration at 3968..4092.
const EPOCH_OFFSET_BYTES: usize = 88;
const TRANSACTION_ID_OFFSET_BYTES: usize = 96;
const GROUP_SIZE_OFFSET_BYTES: usize = 3968;
const SEQUENTIAL_CUTOFF_OFFSET_BYTES: usize = 3976;
const WRITE_POLICY_OFFSET_BYTES: usize = 3984;
const DESTAGE_ORDER_OFFSET_BYTES: usize = 4008;
const DESTAGE_RATE_OFFSET_BYTES: usize = 4032;
const ADMISSION_OFFSET_BYTES: usize = 4056;
/// Width of a policy name field (ASCII, NUL-padded).
pub const POLICY_NAME_BYTES_MAX: usize = 24;
/// Bytes of a version-2 superblock that must be zero: (offset, length).
const RESERVED_V2: [(usize, usize); 3] = [(84, 4), (104, 24), (4080, 12)];
/// Version 3 keeps the salt at 104 and the rest reserved.
const SALT_OFFSET_BYTES: usize = 104;
const RESERVED_V3: [(usize, usize); 3] = [(84, 4), (112, 16), (4080, 12)];
/// What version 1 kept reserved, and version 2 uses or keeps reserved.
#[cfg(test)]
const RESERVED_V1: [(usize, usize); 2] = [(84, 44), (3968, 124)];

const _: () = assert!(RECORD_BLOCK_BYTES.is_multiple_of(RECORD_BYTES));
const _: () = assert!(
    512u64.is_multiple_of(RECORD_BYTES),
    "a record never crosses a sector"
);
const _: () = assert!(
    VOLUME_TABLE_OFFSET_BYTES + VOLUMES_MAX * VOLUME_ENTRY_BYTES <= SUPERBLOCK_CRC_OFFSET_BYTES
);
const _: () = assert!(VOLUME_NAME_BYTES_MAX + 8 + VOLUME_IDENTITY_BYTES_MAX == VOLUME_ENTRY_BYTES);
const _: () = assert!(TRANSACTION_ID_OFFSET_BYTES + 8 == RESERVED_V2[1].0);
const _: () = assert!(RESERVED_V2[1].0 + RESERVED_V2[1].1 == VOLUME_TABLE_OFFSET_BYTES);
const _: () = assert!(
    VOLUME_TABLE_OFFSET_BYTES + VOLUMES_MAX * VOLUME_ENTRY_BYTES == GROUP_SIZE_OFFSET_BYTES
);
const _: () = assert!(ADMISSION_OFFSET_BYTES + POLICY_NAME_BYTES_MAX == RESERVED_V2[2].0);
const _: () = assert!(RESERVED_V2[2].0 + RESERVED_V2[2].1 == SUPERBLOCK_CRC_OFFSET_BYTES);
const _: () =
    assert!(WRITE_POLICY_OFFSET_BYTES + POLICY_NAME_BYTES_MAX == DESTAGE_ORDER_OFFSET_BYTES);
const _: () =
    assert!(DESTAGE_ORDER_OFFSET_BYTES + POLICY_NAME_BYTES_MAX == DESTAGE_RATE_OFFSET_BYTES);
const _: () = assert!(DESTAGE_RATE_OFFSET_BYTES + POLICY_NAME_BYTES_MAX == ADMISSION_OFFSET_BYTES);

/// Why a superblock or record does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("no wcache superblock (magic is {found:02x?}, expected {SUPERBLOCK_MAGIC:02x?}); is this a cache device? (a new one is formatted only when it is all zeros)")]
    BadMagic { found: [u8; 8] },
    #[error(
        "superblock format version {found}: this wcache reads versions {FORMAT_VERSION_MIN} to \
         {} only{}", log::FORMAT_VERSION_LOG,
        if *found > log::FORMAT_VERSION_LOG { " (written by a newer wcache? use that one)" } else { "" }
    )]
    BadVersion { found: u32 },
    #[error("superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the superblock is corrupt")]
    BadSuperblockChecksum { stored: u32, computed: u32 },
    #[error("superblock field {field} = {value} is invalid: {why}")]
    BadField {
        field: &'static str,
        value: u64,
        why: &'static str,
    },
    #[error("superblock field {field}: {why}")]
    BadName {
        field: &'static str,
        why: &'static str,
    },
    #[error("superblock field {field}: {source}")]
    UnknownName {
        field: &'static str,
        /// Boxed: keeps `FormatError` (inside every open error) small.
        source: Box<UnknownPolicy>,
    },
    #[error("a version {version} superblock cannot be written: {why}")]
    CannotEncode { version: u32, why: &'static str },
    #[error("policy name {name:?} does not fit the superblock ({POLICY_NAME_BYTES_MAX} ASCII bytes at most)")]
    PolicyNameTooLong { name: String },
    #[error("volume {index} in the superblock: {why}")]
    BadVolume { index: usize, why: &'static str },
    #[error("{count} volumes do not fit the superblock (at most {VOLUMES_MAX})")]
    TooManyVolumes { count: usize },
    #[error("volume name {name:?} is longer than {VOLUME_NAME_BYTES_MAX} bytes")]
    NameTooLong { name: String },
    #[error("cache device of {size_bytes} bytes is too small for one {page_size_bytes}-byte slot after its metadata")]
    DeviceTooSmall {
        size_bytes: u64,
        page_size_bytes: u64,
    },
}

/// Where each area lies on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub page_size_bytes: u64,
    pub slot_count: u64,
    pub record_offset_bytes: u64,
    pub record_area_bytes: u64,
    pub data_offset_bytes: u64,
    /// Format 3 (`log::layout_with_slots`): the record area holds the two
    /// log-start blocks, and the slots are the log's ring.
    pub log: bool,
}

impl Layout {
    /// The most slots of `page_size_bytes` that fit a device of `size_bytes`
    /// with their records.
    pub fn for_device(size_bytes: u64, page_size_bytes: u64) -> Result<Layout, FormatError> {
        Layout::fit(size_bytes, page_size_bytes, Layout::with_slots)
    }

    /// The layout `with_slots` gives for the most slots that fit a device
    /// of `size_bytes` (its areas other than the slots grow with them).
    pub(crate) fn fit(
        size_bytes: u64,
        page_size_bytes: u64,
        with_slots: impl Fn(u64, u64) -> Layout,
    ) -> Result<Layout, FormatError> {
        let too_small = FormatError::DeviceTooSmall {
            size_bytes,
            page_size_bytes,
        };
        if page_size_bytes == 0 {
            return Err(too_small);
        }
        let mut slots = size_bytes / page_size_bytes;
        loop {
            let layout = with_slots(page_size_bytes, slots);
            let end = layout.end_bytes();
            if end <= size_bytes {
                // The step below may overshoot by a few slots: take them back.
                let mut best = layout;
                loop {
                    let more = with_slots(page_size_bytes, best.slot_count + 1);
                    if more.end_bytes() > size_bytes || more.slot_count == best.slot_count {
                        break;
                    }
                    best = more;
                }
                if best.slot_count == 0 {
                    return Err(too_small);
                }
                return Ok(best);
            }
            let over_pages = (end - size_bytes).div_ceil(page_size_bytes);
            if over_pages >= slots {
                return Err(too_small);
            }
            slots -= over_pages;
        }
    }

    pub fn with_slots(page_size_bytes: u64, slot_count: u64) -> Layout {
        let record_offset_bytes = SUPERBLOCK_BYTES;
        let record_area_bytes = (slot_count * RECORD_BYTES).next_multiple_of(RECORD_BLOCK_BYTES);
        let align = page_size_bytes.max(RECORD_BLOCK_BYTES);
        let data_offset_bytes = (record_offset_bytes + record_area_bytes).next_multiple_of(align);
        Layout {
            page_size_bytes,
            slot_count,
            record_offset_bytes,
            record_area_bytes,
            data_offset_bytes,
            log: false,
        }
    }

    pub fn end_bytes(&self) -> u64 {
        self.data_offset_bytes + self.slot_count * self.page_size_bytes
    }

    pub fn slot_offset_bytes(&self, slot: u32) -> u64 {
        self.data_offset_bytes + slot as u64 * self.page_size_bytes
    }

    /// Blocks of records (none in format 3, whose record area holds the
    /// log-start blocks).
    pub fn record_blocks(&self) -> u64 {
        if self.log {
            return 0;
        }
        self.record_area_bytes / RECORD_BLOCK_BYTES
    }
}

/// One volume the cache serves, as the superblock names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeEntry {
    /// The export name.
    pub name: String,
    pub size_bytes: u64,
    /// What the backing is (canonical path, NBD URI, …), to refuse another
    /// backing under the same name. Long identities are shortened with a checksum.
    pub identity: String,
}

impl VolumeEntry {
    pub fn new(name: &str, size_bytes: u64, identity: &str) -> Result<VolumeEntry, FormatError> {
        if name.len() > VOLUME_NAME_BYTES_MAX {
            return Err(FormatError::NameTooLong {
                name: name.to_string(),
            });
        }
        Ok(VolumeEntry {
            name: name.to_string(),
            size_bytes,
            identity: shorten_identity(identity),
        })
    }
}

/// Identities longer than the field keep a prefix and the crc32c of the whole.
fn shorten_identity(identity: &str) -> String {
    if identity.len() <= VOLUME_IDENTITY_BYTES_MAX {
        return identity.to_string();
    }
    let suffix = format!("…#{:08x}", crate::checksum::crc32c(identity.as_bytes()));
    let mut cut = VOLUME_IDENTITY_BYTES_MAX - suffix.len();
    while !identity.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}", &identity[..cut])
}

/// The engine configuration a superblock records (version 2): what a
/// server last opened the cache for service with, so that recovery and the
/// offline tools use it instead of guessing. Names are the registries'
/// canonical names, so a record built here always encodes and decodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineRecord {
    pub group_size_bytes: u64,
    pub write_policy: WritePolicyKind,
    /// `DESTAGE_ORDERS` name.
    pub destage_order: &'static str,
    /// `DESTAGE_RATES` name.
    pub destage_rate: &'static str,
    /// `ADMISSIONS` name.
    pub admission: &'static str,
    /// 0: no sequential cutoff.
    pub sequential_cutoff_bytes: u64,
}

impl EngineRecord {
    /// The record of `config` (names canonicalised through the registries).
    pub fn from_config(config: &EngineConfig) -> Result<EngineRecord, FormatError> {
        let field = |field, source| FormatError::UnknownName {
            field,
            source: Box::new(source),
        };
        let record = EngineRecord {
            group_size_bytes: config.group_size_bytes,
            write_policy: config.write_policy,
            destage_order: DESTAGE_ORDERS
                .find(&config.destage_order)
                .map_err(|e| field("destage_order", e))?
                .name,
            destage_rate: DESTAGE_RATES
                .find(&config.destage_rate)
                .map_err(|e| field("destage_rate", e))?
                .name,
            admission: ADMISSIONS
                .find(&config.admission)
                .map_err(|e| field("admission", e))?
                .name,
            sequential_cutoff_bytes: config.sequential_cutoff_bytes,
        };
        for name in record.names().map(|(_, name, _)| name) {
            if name.len() > POLICY_NAME_BYTES_MAX || !name.is_ascii() {
                return Err(FormatError::PolicyNameTooLong {
                    name: name.to_string(),
                });
            }
        }
        Ok(record)
    }

    /// `config` with this record's settings (page size, slots and the rest
    /// are `config`'s).
    pub fn apply(&self, config: &mut EngineConfig) {
        config.group_size_bytes = self.group_size_bytes;
        config.write_policy = self.write_policy;
        config.destage_order = self.destage_order.to_string();
        config.destage_rate = self.destage_rate.to_string();
        config.admission = self.admission.to_string();
        config.sequential_cutoff_bytes = self.sequential_cutoff_bytes;
    }

    /// (field, name, offset) of each name field.
    fn names(&self) -> [(&'static str, &'static str, usize); 4] {
        [
            (
                "write_policy",
                self.write_policy.name(),
                WRITE_POLICY_OFFSET_BYTES,
            ),
            (
                "destage_order",
                self.destage_order,
                DESTAGE_ORDER_OFFSET_BYTES,
            ),
            ("destage_rate", self.destage_rate, DESTAGE_RATE_OFFSET_BYTES),
            ("admission", self.admission, ADMISSION_OFFSET_BYTES),
        ]
    }
}

impl std::fmt::Display for EngineRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "write group {} bytes, write policy {}, destage order {}, destage rate {}, admission {}, ",
            self.group_size_bytes,
            self.write_policy.name(),
            self.destage_order,
            self.destage_rate,
            self.admission
        )?;
        match self.sequential_cutoff_bytes {
            0 => write!(f, "no sequential cutoff"),
            n => write!(f, "sequential cutoff {n} bytes"),
        }
    }
}

/// The superblock's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The version read from the device, and the one `encode` writes:
    /// `FORMAT_VERSION` for a new superblock; `1` for a device not yet
    /// upgraded (the offline tools keep it so), which records no engine
    /// configuration.
    pub format_version: u32,
    pub uuid: [u8; 16],
    pub layout: Layout,
    /// Set by a clean shutdown, cleared when a server opens the cache.
    pub clean: bool,
    /// How many times the cache was opened for service (each open bumps it).
    pub open_count: u64,
    pub volumes: Vec<VolumeEntry>,
    /// The engine configuration of the last open for service: always
    /// present in version 2, `None` (not recorded) in version 1.
    pub engine: Option<EngineRecord>,
    /// Ordered/journaled write-back (to come): the current epoch and
    /// transaction id. Written 0 until then; kept as read by every rewrite.
    pub epoch: u64,
    pub transaction_id: u64,
    /// Format 3: chosen at format; every batch header carries it (0 before).
    pub salt: u64,
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// A NUL-padded UTF-8 string field.
fn get_str(b: &[u8]) -> Option<String> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    if b[end..].iter().any(|&c| c != 0) {
        return None;
    }
    String::from_utf8(b[..end].to_vec()).ok()
}

/// A policy name field: NUL-padded ASCII, not empty.
fn get_policy_name(b: &[u8], field: &'static str) -> Result<String, FormatError> {
    let bad = |why| FormatError::BadName { field, why };
    let name = get_str(b).ok_or(bad("not NUL-padded text"))?;
    if name.is_empty() {
        return Err(bad(
            "empty (a version-2 superblock always names its policies)",
        ));
    }
    if !name.bytes().all(|c| c.is_ascii_graphic()) {
        return Err(bad("not printable ASCII"));
    }
    Ok(name)
}

/// The version-2 engine configuration at its offsets, each name checked
/// against its registry.
fn decode_engine(b: &[u8], page_size_bytes: u64) -> Result<EngineRecord, FormatError> {
    let name_at = |at: usize, field| get_policy_name(&b[at..at + POLICY_NAME_BYTES_MAX], field);
    let unknown = |field| {
        move |source| FormatError::UnknownName {
            field,
            source: Box::new(source),
        }
    };
    let group_size_bytes = get_u64(b, GROUP_SIZE_OFFSET_BYTES);
    if Geometry::new(page_size_bytes, group_size_bytes).is_err() {
        return Err(FormatError::BadField {
            field: "group_size_bytes",
            value: group_size_bytes,
            why: "not a whole number of pages (1 to 4096 of them)",
        });
    }
    let write_policy =
        WritePolicyKind::from_name(&name_at(WRITE_POLICY_OFFSET_BYTES, "write_policy")?)
            .map_err(unknown("write_policy"))?;
    let destage_order = DESTAGE_ORDERS
        .find(&name_at(DESTAGE_ORDER_OFFSET_BYTES, "destage_order")?)
        .map_err(unknown("destage_order"))?
        .name;
    let destage_rate = DESTAGE_RATES
        .find(&name_at(DESTAGE_RATE_OFFSET_BYTES, "destage_rate")?)
        .map_err(unknown("destage_rate"))?
        .name;
    let admission = ADMISSIONS
        .find(&name_at(ADMISSION_OFFSET_BYTES, "admission")?)
        .map_err(unknown("admission"))?
        .name;
    Ok(EngineRecord {
        group_size_bytes,
        write_policy,
        destage_order,
        destage_rate,
        admission,
        sequential_cutoff_bytes: get_u64(b, SEQUENTIAL_CUTOFF_OFFSET_BYTES),
    })
}

/// The layout of `slots` slots of `page` bytes in the format the version
/// says, checked against the offsets the superblock stores.
fn decode_layout(b: &[u8], page: u64, slots: u64, is_log: bool) -> Result<Layout, FormatError> {
    let layout = if is_log {
        // A cache formatted before the checkpoint area was added has only
        // the two log-start blocks in its record area.
        let checkpoint = get_u64(b, 56) != 2 * log::LOG_START_BYTES;
        log::layout_with_slots_and(page, slots, checkpoint)
    } else {
        Layout::with_slots(page, slots)
    };
    let fields = [
        ("record_offset_bytes", 48, layout.record_offset_bytes),
        ("record_area_bytes", 56, layout.record_area_bytes),
        ("data_offset_bytes", 64, layout.data_offset_bytes),
    ];
    for (field, at, expect) in fields {
        let value = get_u64(b, at);
        if value != expect {
            return Err(FormatError::BadField {
                field,
                value,
                why: "does not match the layout computed from page size and slot count",
            });
        }
    }
    Ok(layout)
}

impl Superblock {
    /// Whether this superblock can be written as its version says.
    fn check_encodable(&self) -> Result<(), FormatError> {
        if self.volumes.len() > VOLUMES_MAX {
            return Err(FormatError::TooManyVolumes {
                count: self.volumes.len(),
            });
        }
        let cannot = |why| FormatError::CannotEncode {
            version: self.format_version,
            why,
        };
        match (self.format_version, &self.engine) {
            (FORMAT_VERSION | log::FORMAT_VERSION_LOG, Some(_)) => {}
            (FORMAT_VERSION, None) => return Err(cannot("no engine configuration")),
            (1, Some(_)) => return Err(cannot("it records no engine configuration")),
            (1, None) if self.epoch != 0 || self.transaction_id != 0 => {
                return Err(cannot("it has no epoch or transaction id"))
            }
            (1, None) => {}
            _ => return Err(cannot("not a version this wcache writes")),
        }
        Ok(())
    }

    pub fn encode(&self) -> Result<[u8; SUPERBLOCK_BYTES as usize], FormatError> {
        self.check_encodable()?;
        let mut b = [0u8; SUPERBLOCK_BYTES as usize];
        b[0..8].copy_from_slice(&SUPERBLOCK_MAGIC);
        put_u32(&mut b, 8, self.format_version);
        put_u32(
            &mut b,
            12,
            if self.clean { SUPERBLOCK_FLAG_CLEAN } else { 0 },
        );
        b[16..32].copy_from_slice(&self.uuid);
        let l = &self.layout;
        put_u64(&mut b, 32, l.page_size_bytes);
        put_u64(&mut b, 40, l.slot_count);
        put_u64(&mut b, 48, l.record_offset_bytes);
        put_u64(&mut b, 56, l.record_area_bytes);
        put_u64(&mut b, 64, l.data_offset_bytes);
        put_u64(&mut b, 72, self.open_count);
        put_u32(&mut b, 80, self.volumes.len() as u32);
        for (i, v) in self.volumes.iter().enumerate() {
            let at = VOLUME_TABLE_OFFSET_BYTES + i * VOLUME_ENTRY_BYTES;
            if v.name.len() > VOLUME_NAME_BYTES_MAX {
                return Err(FormatError::NameTooLong {
                    name: v.name.clone(),
                });
            }
            b[at..at + v.name.len()].copy_from_slice(v.name.as_bytes());
            put_u64(&mut b, at + VOLUME_NAME_BYTES_MAX, v.size_bytes);
            let id = shorten_identity(&v.identity);
            let id_at = at + VOLUME_NAME_BYTES_MAX + 8;
            b[id_at..id_at + id.len()].copy_from_slice(id.as_bytes());
        }
        if self.format_version == log::FORMAT_VERSION_LOG {
            put_u64(&mut b, SALT_OFFSET_BYTES, self.salt);
        }
        if let Some(engine) = &self.engine {
            put_u64(&mut b, EPOCH_OFFSET_BYTES, self.epoch);
            put_u64(&mut b, TRANSACTION_ID_OFFSET_BYTES, self.transaction_id);
            put_u64(&mut b, GROUP_SIZE_OFFSET_BYTES, engine.group_size_bytes);
            put_u64(
                &mut b,
                SEQUENTIAL_CUTOFF_OFFSET_BYTES,
                engine.sequential_cutoff_bytes,
            );
            for (_, name, at) in engine.names() {
                if name.len() > POLICY_NAME_BYTES_MAX || !name.is_ascii() {
                    return Err(FormatError::PolicyNameTooLong {
                        name: name.to_string(),
                    });
                }
                b[at..at + name.len()].copy_from_slice(name.as_bytes());
            }
        }
        let crc = crate::checksum::crc32c(&b[..SUPERBLOCK_CRC_OFFSET_BYTES]);
        put_u32(&mut b, SUPERBLOCK_CRC_OFFSET_BYTES, crc);
        Ok(b)
    }

    pub fn decode(b: &[u8]) -> Result<Superblock, FormatError> {
        assert!(b.len() >= SUPERBLOCK_BYTES as usize, "superblock buffer");
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&b[0..8]);
        if magic != SUPERBLOCK_MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let version = get_u32(b, 8);
        if !(FORMAT_VERSION_MIN..=log::FORMAT_VERSION_LOG).contains(&version) {
            return Err(FormatError::BadVersion { found: version });
        }
        let stored = get_u32(b, SUPERBLOCK_CRC_OFFSET_BYTES);
        let computed = crate::checksum::crc32c(&b[..SUPERBLOCK_CRC_OFFSET_BYTES]);
        if stored != computed {
            return Err(FormatError::BadSuperblockChecksum { stored, computed });
        }
        let flags = get_u32(b, 12);
        if flags & !SUPERBLOCK_FLAG_CLEAN != 0 {
            return Err(FormatError::BadField {
                field: "flags",
                value: flags as u64,
                why: "unknown flag bits",
            });
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[16..32]);
        let page = get_u64(b, 32);
        if page == 0 || !page.is_power_of_two() || page < 512 {
            return Err(FormatError::BadField {
                field: "page_size_bytes",
                value: page,
                why: "not a power of two of at least 512",
            });
        }
        let slots = get_u64(b, 40);
        if slots == 0 || slots >= u32::MAX as u64 {
            return Err(FormatError::BadField {
                field: "slot_count",
                value: slots,
                why: "must be between 1 and 2^32 - 2",
            });
        }
        let is_log = version == log::FORMAT_VERSION_LOG;
        let layout = decode_layout(b, page, slots, is_log)?;
        let count = get_u32(b, 80) as usize;
        if count > VOLUMES_MAX {
            return Err(FormatError::BadField {
                field: "volume_count",
                value: count as u64,
                why: "more than the table holds",
            });
        }
        let mut volumes = Vec::with_capacity(count);
        for index in 0..count {
            let at = VOLUME_TABLE_OFFSET_BYTES + index * VOLUME_ENTRY_BYTES;
            let name =
                get_str(&b[at..at + VOLUME_NAME_BYTES_MAX]).ok_or(FormatError::BadVolume {
                    index,
                    why: "name is not NUL-padded UTF-8",
                })?;
            let id_at = at + VOLUME_NAME_BYTES_MAX + 8;
            let identity = get_str(&b[id_at..id_at + VOLUME_IDENTITY_BYTES_MAX]).ok_or(
                FormatError::BadVolume {
                    index,
                    why: "backing identity is not NUL-padded UTF-8",
                },
            )?;
            volumes.push(VolumeEntry {
                name,
                size_bytes: get_u64(b, at + VOLUME_NAME_BYTES_MAX),
                identity,
            });
        }
        // Version 1 never checked its reserved bytes: read it as it always was.
        let (engine, epoch, transaction_id) = if version == 1 {
            (None, 0, 0)
        } else {
            let reserved = if is_log { &RESERVED_V3 } else { &RESERVED_V2 };
            for &(at, len) in reserved {
                if let Some(i) = b[at..at + len].iter().position(|&c| c != 0) {
                    return Err(FormatError::BadField {
                        field: "reserved",
                        value: (at + i) as u64,
                        why: "a reserved byte (at this offset) is not zero",
                    });
                }
            }
            (
                Some(decode_engine(b, page)?),
                get_u64(b, EPOCH_OFFSET_BYTES),
                get_u64(b, TRANSACTION_ID_OFFSET_BYTES),
            )
        };
        Ok(Superblock {
            format_version: version,
            uuid,
            layout,
            clean: flags & SUPERBLOCK_FLAG_CLEAN != 0,
            open_count: get_u64(b, 72),
            volumes,
            engine,
            epoch,
            transaction_id,
            salt: if is_log {
                get_u64(b, SALT_OFFSET_BYTES)
            } else {
                0
            },
        })
    }

    pub fn uuid_string(&self) -> String {
        let h: String = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// A version-4 style UUID from the process's random hasher keys, the time and the pid.
pub fn new_uuid() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut out = [0u8; 16];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        h.write_u32(std::process::id());
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out[6] = (out[6] & 0x0f) | 0x40;
    out[8] = (out[8] & 0x3f) | 0x80;
    out
}

mod record;
pub use record::{decode_record, encode_record, RecordError, RecordState};

pub mod log;
#[cfg(test)]
mod tests;
