//! Tests of the on-device format's encoding.

use super::*;
use wcache_core::types::{PageIndex, PageKey, VolumeId};
use wcache_core::SlotRecord;

#[test]
fn layout_fits_and_aligns() {
    let l = Layout::for_device(64 << 20, 4096).expect("layout");
    assert!(l.end_bytes() <= 64 << 20);
    assert_eq!(l.record_offset_bytes, 4096);
    assert_eq!(l.data_offset_bytes % 4096, 0);
    assert!(l.slot_count * RECORD_BYTES <= l.record_area_bytes);
    // One more slot would not fit.
    assert!(Layout::with_slots(4096, l.slot_count + 1).end_bytes() > 64 << 20);
    assert!(Layout::for_device(8192, 4096).is_err());
}

/// Format 3: the log layout has room for two checkpoint copies, fits the
/// device, and a superblock of either layout (with copies, or of a cache
/// formatted before them) reads back as written.
#[test]
fn log_layouts_fit_and_read_back_with_or_without_checkpoint_copies() {
    let size = 64 << 20;
    let l = log::layout_for_device(size, 4096).expect("layout");
    assert!(l.end_bytes() <= size);
    assert!(log::layout_with_slots(4096, l.slot_count + 1).end_bytes() > size);
    let (offset, bytes) = log::checkpoint_copy(&l, 1).expect("copies");
    assert_eq!(offset + bytes, l.record_offset_bytes + l.record_area_bytes);
    assert!(bytes >= log::checkpoint::copy_bytes(l.slot_count));
    assert_eq!(l.data_offset_bytes % 4096, 0);
    let old = log::layout_with_slots_and(4096, l.slot_count, false);
    assert_eq!(log::checkpoint_copy(&old, 0), None);
    for layout in [l, old] {
        let sb = Superblock {
            format_version: log::FORMAT_VERSION_LOG,
            uuid: new_uuid(),
            layout,
            clean: false,
            open_count: 1,
            volumes: vec![VolumeEntry::new("disk", 8 << 30, "/b").expect("entry")],
            engine: Some(record()),
            epoch: 0,
            transaction_id: 0,
            salt: 5,
        };
        let back = Superblock::decode(&sb.encode().expect("encode")).expect("decode");
        assert_eq!(back.layout, layout);
    }
}

fn record() -> EngineRecord {
    EngineRecord::from_config(&EngineConfig::default()).expect("default config records")
}

#[test]
fn superblock_round_trip_and_corruption() {
    let sb = Superblock {
        format_version: FORMAT_VERSION,
        uuid: new_uuid(),
        layout: Layout::for_device(1 << 30, 4096).expect("layout"),
        clean: true,
        open_count: 7,
        volumes: vec![
            VolumeEntry::new("disk", 8 << 30, "/tmp/backing.img").expect("entry"),
            VolumeEntry::new("two", 4096, &"x".repeat(500)).expect("entry"),
        ],
        engine: Some(record()),
        epoch: 0,
        transaction_id: 0,
        salt: 0,
    };
    let b = sb.encode().expect("encode");
    let back = Superblock::decode(&b).expect("decode");
    assert_eq!(back.volumes[0], sb.volumes[0]);
    assert!(back.volumes[1].identity.len() <= VOLUME_IDENTITY_BYTES_MAX);
    assert_eq!(back.layout, sb.layout);
    assert!(back.clean);
    assert_eq!(back.format_version, FORMAT_VERSION);
    assert_eq!(back.engine, sb.engine);
    assert_eq!((back.epoch, back.transaction_id), (0, 0));
    for at in [0usize, 9, 40, 200, 4000, 4093] {
        let mut bad = b;
        bad[at] ^= 1;
        assert!(Superblock::decode(&bad).is_err(), "flip at {at} undetected");
    }
}

/// A version-2 superblock with every field away from its default.
fn every_field_v2() -> Superblock {
    Superblock {
        format_version: 2,
        uuid: new_uuid(),
        layout: Layout::for_device(64 << 20, 8192).expect("layout"),
        clean: false,
        open_count: 41,
        volumes: vec![
            VolumeEntry::new("db", 8 << 30, "/dev/sdb").expect("entry"),
            VolumeEntry::new("log", 1 << 30, "nbd://host/log").expect("entry"),
        ],
        engine: Some(EngineRecord {
            group_size_bytes: 256 * 1024,
            write_policy: WritePolicyKind::WriteThrough,
            destage_order: "cscan",
            destage_rate: "linear",
            admission: "all",
            sequential_cutoff_bytes: 1 << 20,
        }),
        epoch: 0x0102_0304_0506_0708,
        transaction_id: 0x1112_1314_1516_1718,
        salt: 0,
    }
}

/// Rewrites the checksum after a test changed bytes on purpose.
fn reseal(b: &mut [u8; SUPERBLOCK_BYTES as usize]) {
    let crc = crate::checksum::crc32c(&b[..SUPERBLOCK_CRC_OFFSET_BYTES]);
    put_u32(b, SUPERBLOCK_CRC_OFFSET_BYTES, crc);
}

#[test]
fn superblock_v2_round_trips_every_field_at_its_documented_offset() {
    let sb = every_field_v2();
    let b = sb.encode().expect("encode");
    assert_eq!(Superblock::decode(&b).expect("decode"), sb);
    // The byte table of docs/on-disk-format.md.
    assert_eq!(get_u32(&b, 8), 2, "format_version");
    assert_eq!(get_u64(&b, 88), 0x0102_0304_0506_0708, "epoch");
    assert_eq!(get_u64(&b, 96), 0x1112_1314_1516_1718, "transaction_id");
    assert_eq!(get_u64(&b, 3968), 256 * 1024, "group_size_bytes");
    assert_eq!(get_u64(&b, 3976), 1 << 20, "sequential_cutoff_bytes");
    let name = |at: usize| get_str(&b[at..at + 24]).expect("name");
    assert_eq!(name(3984), "write-through");
    assert_eq!(name(4008), "cscan");
    assert_eq!(name(4032), "linear");
    assert_eq!(name(4056), "all");
    for (at, len) in RESERVED_V2 {
        assert!(b[at..at + len].iter().all(|&c| c == 0), "reserved at {at}");
    }
    // Every field is covered by the checksum.
    for at in [88usize, 100, 3970, 3980, 3990, 4010, 4040, 4060] {
        let mut bad = b;
        bad[at] ^= 0x20;
        assert!(
            matches!(
                Superblock::decode(&bad),
                Err(FormatError::BadSuperblockChecksum { .. })
            ),
            "flip at {at}"
        );
    }
    // Names are stored canonical: an alias in the configuration is not.
    let config = EngineConfig {
        write_policy: WritePolicyKind::from_name("wa").expect("alias"),
        destage_order: "WOW".into(),
        ..EngineConfig::default()
    };
    let canonical = EngineRecord::from_config(&config).expect("record");
    assert_eq!(
        (canonical.write_policy.name(), canonical.destage_order),
        ("write-around", "wow")
    );
    let mut applied = EngineConfig::default();
    sb.engine.as_ref().expect("engine").apply(&mut applied);
    assert_eq!(applied.group_size_bytes, 256 * 1024);
    assert_eq!(applied.write_policy, WritePolicyKind::WriteThrough);
    assert_eq!(
        (
            applied.destage_order.as_str(),
            applied.destage_rate.as_str()
        ),
        ("cscan", "linear")
    );
    assert_eq!(applied.sequential_cutoff_bytes, 1 << 20);
}

/// A version-1 superblock as a version-1 wcache wrote it, byte by byte
/// (not through `encode`).
fn v1_bytes_by_hand(layout: Layout, volume: (&str, u64, &str)) -> [u8; 4096] {
    let mut b = [0u8; 4096];
    b[0..8].copy_from_slice(b"WCACHEsb");
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&1u32.to_le_bytes()); // clean
    b[16..32].copy_from_slice(&[0xab; 16]);
    b[32..40].copy_from_slice(&layout.page_size_bytes.to_le_bytes());
    b[40..48].copy_from_slice(&layout.slot_count.to_le_bytes());
    b[48..56].copy_from_slice(&layout.record_offset_bytes.to_le_bytes());
    b[56..64].copy_from_slice(&layout.record_area_bytes.to_le_bytes());
    b[64..72].copy_from_slice(&layout.data_offset_bytes.to_le_bytes());
    b[72..80].copy_from_slice(&3u64.to_le_bytes());
    b[80..84].copy_from_slice(&1u32.to_le_bytes());
    let (name, size_bytes, identity) = volume;
    b[128..128 + name.len()].copy_from_slice(name.as_bytes());
    b[192..200].copy_from_slice(&size_bytes.to_le_bytes());
    b[200..200 + identity.len()].copy_from_slice(identity.as_bytes());
    let crc = crate::checksum::crc32c(&b[..4092]);
    b[4092..].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn version_1_superblock_made_by_hand_decodes_as_not_recorded_and_upgrades() {
    let layout = Layout::for_device(16 << 20, 4096).expect("layout");
    let v1 = v1_bytes_by_hand(layout, ("disk", 1 << 30, "/srv/backing.img"));
    let sb = Superblock::decode(&v1).expect("a version-1 superblock reads");
    assert_eq!(sb.format_version, 1);
    assert_eq!(sb.engine, None, "version 1 records no configuration");
    assert_eq!((sb.epoch, sb.transaction_id), (0, 0));
    assert_eq!(sb.layout, layout);
    assert!(sb.clean);
    assert_eq!(sb.open_count, 3);
    assert_eq!(sb.uuid, [0xab; 16]);
    assert_eq!(
        sb.volumes,
        vec![VolumeEntry::new("disk", 1 << 30, "/srv/backing.img").expect("entry")]
    );
    // The offline tools rewrite it as it was (version 1).
    assert!(sb.encode().expect("encode v1") == v1);
    // A server's open rewrites it as version 2 with its configuration.
    let upgraded = Superblock {
        format_version: FORMAT_VERSION,
        engine: Some(record()),
        ..sb.clone()
    };
    let v2 = upgraded.encode().expect("encode v2");
    assert_eq!(Superblock::decode(&v2).expect("decode v2"), upgraded);
    for (at, (old, new)) in v1.iter().zip(v2.iter()).enumerate() {
        let in_v1_reserved = RESERVED_V1
            .iter()
            .any(|&(from, len)| (from..from + len).contains(&at));
        let version_or_crc = (8..12).contains(&at) || at >= SUPERBLOCK_CRC_OFFSET_BYTES;
        assert!(
            old == new || in_v1_reserved || version_or_crc,
            "byte {at} outside version 1's reserved bytes changed"
        );
    }
    // Either version with the other's content is refused at encode.
    let mixed = Superblock {
        format_version: 1,
        ..upgraded.clone()
    };
    assert!(matches!(
        mixed.encode(),
        Err(FormatError::CannotEncode { version: 1, .. })
    ));
    let mixed = Superblock {
        format_version: 2,
        engine: None,
        ..upgraded
    };
    assert!(matches!(
        mixed.encode(),
        Err(FormatError::CannotEncode { version: 2, .. })
    ));
}

#[test]
fn a_newer_or_unknown_version_is_refused_naming_it_and_the_versions_read() {
    let mut b = every_field_v2().encode().expect("encode");
    put_u32(&mut b, 8, 4);
    reseal(&mut b);
    let e = Superblock::decode(&b).expect_err("version 4 refused");
    assert_eq!(e, FormatError::BadVersion { found: 4 });
    assert_eq!(
        e.to_string(),
        "superblock format version 4: this wcache reads versions 1 to 3 only \
         (written by a newer wcache? use that one)"
    );
    put_u32(&mut b, 8, 0);
    reseal(&mut b);
    let e = Superblock::decode(&b).expect_err("version 0 refused");
    assert_eq!(
        e.to_string(),
        "superblock format version 0: this wcache reads versions 1 to 3 only"
    );
}

#[test]
fn a_bad_stored_policy_name_is_an_error_naming_the_field() {
    let good = every_field_v2().encode().expect("encode");
    let fields = [
        ("write_policy", 3984usize, "write policy"),
        ("destage_order", 4008, "destage order"),
        ("destage_rate", 4032, "destage rate"),
        ("admission", 4056, "admission policy"),
    ];
    for (field, at, family) in fields {
        let mut b = good;
        b[at..at + 24].fill(0);
        b[at..at + 4].copy_from_slice(b"nope");
        reseal(&mut b);
        let e = Superblock::decode(&b).expect_err("unknown name refused");
        assert!(
            matches!(&e, FormatError::UnknownName { field: f, source } if *f == field && source.name == "nope"),
            "{field}: {e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "superblock field {field}: unknown {family} \"nope\"; valid: "
            )),
            "{text}"
        );
        // Not NUL-padded (a byte after the first NUL), not ASCII, empty.
        for (bytes, why) in [
            (&b"lrw\0x"[..], "not NUL-padded text"),
            (&[0xc3, 0xa9][..], "not printable ASCII"),
            (&b""[..], "empty"),
        ] {
            let mut b = good;
            b[at..at + 24].fill(0);
            b[at..at + bytes.len()].copy_from_slice(bytes);
            reseal(&mut b);
            let e = Superblock::decode(&b).expect_err("bad name refused");
            assert!(
                matches!(&e, FormatError::BadName { field: f, why: w } if *f == field && w.starts_with(why)),
                "{field} {bytes:?}: {e:?}"
            );
        }
    }
    let mut b = good;
    put_u64(&mut b, 3968, 4096 * 3 + 1);
    reseal(&mut b);
    assert!(matches!(
        Superblock::decode(&b),
        Err(FormatError::BadField {
            field: "group_size_bytes",
            ..
        })
    ));
    for at in [85usize, 110, 4085] {
        let mut b = good;
        b[at] = 1;
        reseal(&mut b);
        assert_eq!(
            Superblock::decode(&b),
            Err(FormatError::BadField {
                field: "reserved",
                value: at as u64,
                why: "a reserved byte (at this offset) is not zero"
            })
        );
    }
}

#[test]
fn every_registered_policy_name_fits_its_field() {
    let names = WritePolicyKind::ALL
        .iter()
        .map(|k| k.name())
        .chain(DESTAGE_ORDERS.names())
        .chain(DESTAGE_RATES.names())
        .chain(ADMISSIONS.names());
    for name in names {
        assert!(name.len() <= POLICY_NAME_BYTES_MAX, "{name}");
        assert!(name.bytes().all(|c| c.is_ascii_graphic()), "{name}");
    }
}

#[test]
fn record_round_trip_and_corruption() {
    let record = SlotRecord {
        key: PageKey::new(VolumeId(3), PageIndex(12345)),
        seq: 99,
        dirty: true,
    };
    let mut b = [0u8; 32];
    encode_record(&mut b, 17, &record, 0xdead_beef);
    assert_eq!(
        decode_record(&b, 17),
        Ok(RecordState::Used {
            record,
            data_crc32c: 0xdead_beef
        })
    );
    assert_eq!(
        decode_record(&b, 18),
        Err(RecordError::Misplaced { found: 17, at: 18 })
    );
    for at in 0..32 {
        let mut bad = b;
        bad[at] ^= 0x10;
        assert!(decode_record(&bad, 17).is_err(), "flip at {at} undetected");
    }
    assert_eq!(decode_record(&[0u8; 32], 5), Ok(RecordState::Free));
}
