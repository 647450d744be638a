//! Tests of the file device.

use super::*;
use crate::device::AlignedBuf;

/// `/var/tmp` is a disk filesystem on every machine this runs on
/// (tmpfs would be skipped by design: the test refuses it).
fn disk_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir in /var/tmp");
    assert!(
        !is_on_volatile_memory(dir.path()),
        "/var/tmp is memory here: the hole test needs a disk filesystem"
    );
    dir
}

fn first_hole(dev: &FileDevice) -> u64 {
    // SAFETY: plain syscall on an open fd.
    let at = unsafe { libc::lseek(dev.file.as_raw_fd(), 0, libc::SEEK_HOLE) };
    assert!(at >= 0, "SEEK_HOLE: {}", io::Error::last_os_error());
    at as u64
}

#[test]
fn fill_holes_gives_a_sparse_or_preallocated_file_its_storage() {
    const MIB: u64 = 1 << 20;
    let dir = disk_dir();
    for (name, preallocate) in [("sparse", false), ("fallocated", true)] {
        let path = dir.path().join(name);
        let options = FileOptions {
            create_size_bytes: Some(8 * MIB),
            ..FileOptions::default()
        };
        let dev = FileDevice::open(&path, options).expect("open");
        if preallocate {
            // SAFETY: plain syscall on an open fd, checked.
            let rc = unsafe { libc::fallocate(dev.file.as_raw_fd(), 0, 0, 8 * MIB as i64) };
            assert_eq!(rc, 0, "fallocate");
        }
        dev.write_at(&[0xab; 4096], MIB).expect("write");
        dev.flush().expect("flush");
        assert_eq!(first_hole(&dev), 0, "{name}: a hole at the start before");
        let written = dev.fill_holes().expect("fill");
        assert!(
            (8 * MIB - 4096..=8 * MIB).contains(&written),
            "{name}: wrote {written} bytes"
        );
        assert_eq!(first_hole(&dev), 8 * MIB, "{name}: a hole left");
        assert_eq!(dev.fill_holes().expect("again"), 0, "{name}: filled twice");
        let mut back = vec![0u8; 4096];
        dev.read_at(&mut back, MIB).expect("read");
        assert!(
            back.iter().all(|&b| b == 0xab),
            "{name}: data beside the holes kept"
        );
        dev.read_at(&mut back, 4 * MIB).expect("read");
        assert!(back.iter().all(|&b| b == 0), "{name}: holes read as zeros");
    }
}

fn round_trip(sync: SyncMode) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev");
    let dev = FileDevice::open(
        &path,
        FileOptions {
            sync,
            direct: false,
            create_size_bytes: Some(1 << 20),
            map: false,
            direct_large_reads: false,
        },
    )
    .expect("open");
    assert_eq!(dev.len_bytes(), 1 << 20);
    dev.write_at(&[5u8; 3000], 1000).expect("write");
    dev.flush().expect("flush");
    let mut back = vec![0u8; 3002];
    dev.read_at(&mut back, 999).expect("read");
    assert_eq!(back[0], 0);
    assert!(back[1..3001].iter().all(|&b| b == 5));
    assert_eq!(back[3001], 0);
    assert!(dev.write_at(&[1], 1 << 20).is_err());
    assert_eq!(dev.writes_durable(), sync != SyncMode::Fdatasync);
}

#[test]
fn file_device_round_trip_in_every_sync_mode() {
    round_trip(SyncMode::Fdatasync);
    round_trip(SyncMode::Dsync);
    round_trip(SyncMode::Nvram);
}

#[test]
fn vectored_writes_land_in_order_in_every_sync_mode() {
    for sync in [SyncMode::Fdatasync, SyncMode::Dsync, SyncMode::Nvram] {
        let dir = tempfile::tempdir().expect("tempdir");
        let dev = FileDevice::open(
            &dir.path().join("dev"),
            FileOptions {
                sync,
                create_size_bytes: Some(1 << 20),
                ..FileOptions::default()
            },
        )
        .expect("open");
        // More buffers than one pwritev takes (IOV_MAX), odd lengths, an empty one.
        let bufs: Vec<Vec<u8>> = (0..1100u32)
            .map(|i| vec![(i % 251) as u8; (i % 7) as usize * 3])
            .collect();
        let slices: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
        let expect: Vec<u8> = bufs.concat();
        dev.write_vectored_at(&slices, 777).expect("write");
        let mut back = vec![0u8; expect.len()];
        dev.read_at(&mut back, 777).expect("read");
        assert!(back == expect, "{sync:?}");
        let too_far = [&[1u8; 8][..], &[2u8; 8][..]];
        assert!(dev.write_vectored_at(&too_far, (1 << 20) - 15).is_err());
    }
}

#[test]
fn direct_vectored_writes_join_adjacent_pages_and_decline_what_does_not_suit() {
    const P: usize = 4096;
    let dir = disk_dir();
    let dev = FileDevice::open(
        &dir.path().join("dev"),
        FileOptions {
            create_size_bytes: Some(1 << 20),
            ..FileOptions::default()
        },
    )
    .expect("open");
    let mut a = AlignedBuf::new();
    let a = a.get(8 * P);
    for (i, page) in a.chunks_mut(P).enumerate() {
        page.fill(i as u8 + 1);
    }
    let mut b = AlignedBuf::new();
    let b = b.get(P);
    b.fill(0xee);
    // Pages 0-2 of `a` follow one another (one iovec), then `b`, then
    // page 5 of `a` alone: out of memory order, as a batch's pages are.
    let bufs: Vec<&[u8]> = vec![&a[..P], &a[P..2 * P], &a[2 * P..3 * P], b, &a[5 * P..6 * P]];
    assert_eq!(iovecs(&bufs).len(), 3, "adjacent pages joined");
    let written = dev
        .write_direct_vectored_at(&bufs, 16 * P as u64)
        .expect("write");
    if dev.direct_file().is_none() {
        assert!(!written, "no O_DIRECT here: declined");
        return;
    }
    assert!(written, "aligned pages go direct");
    let expect: Vec<u8> = bufs.concat();
    let mut back = vec![0u8; expect.len()];
    dev.read_at(&mut back, 16 * P as u64).expect("read");
    assert!(back == expect, "read back what went around the page cache");
    // An offset or a buffer off the alignment: declined, nothing written.
    assert!(!dev
        .write_direct_vectored_at(&bufs, 16 * P as u64 + 512)
        .expect("declined"));
    let odd: Vec<&[u8]> = vec![&a[1..P + 1]];
    assert!(!dev.write_direct_vectored_at(&odd, 0).expect("declined"));
    let mut zero = vec![0xffu8; P];
    dev.read_at(&mut zero, 0).expect("read");
    assert!(
        zero.iter().all(|&x| x == 0),
        "the declined write wrote nothing"
    );
}

#[test]
fn large_aligned_reads_go_around_the_page_cache_and_see_every_write() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let dev = FileDevice::open(
        &dir.path().join("dev"),
        FileOptions {
            create_size_bytes: Some(4 << 20),
            direct_large_reads: true,
            ..FileOptions::default()
        },
    )
    .expect("open");
    // Written through the page cache and not flushed: the direct read
    // must still find it (the kernel writes the range back first).
    let data: Vec<u8> = (0..super::super::DIRECT_MIN_BYTES * 2)
        .map(|i| (i % 253) as u8)
        .collect();
    dev.write_at(&data, 1 << 20).expect("write");
    let mut buf = super::super::AlignedBuf::default();
    let aligned = buf.get(data.len());
    dev.read_at(aligned, 1 << 20).expect("direct read");
    assert!(aligned == data.as_slice());
    assert!(
        dev.direct_file.get().is_some_and(|f| f.is_some()),
        "the large aligned read went through the O_DIRECT descriptor"
    );
    // Misaligned offset, buffer or length, and small reads: the page cache.
    let mut plain = vec![0u8; data.len() + 1];
    dev.read_at(&mut plain[1..], 1 << 20)
        .expect("misaligned buffer");
    assert!(plain[1..] == data[..]);
    dev.read_at(&mut plain[..data.len() - 1], (1 << 20) + 1)
        .expect("misaligned offset");
    assert!(plain[..data.len() - 1] == data[1..]);
    let small = &mut buf.get(4096)[..4096];
    dev.read_at(small, 1 << 20).expect("small read");
    assert!(small == &data[..4096]);
    // The end of the device is checked before either path.
    let too_far = buf.get(super::super::DIRECT_MIN_BYTES);
    assert!(dev.read_at(too_far, (4 << 20) - 4096).is_err());
}

#[test]
fn mapped_tmpfs_file_shares_bytes_with_pread_and_pwrite() {
    let shm = Path::new("/dev/shm");
    if !is_on_volatile_memory(shm) {
        eprintln!("SKIP: /dev/shm is not tmpfs here");
        return;
    }
    let dir = tempfile::tempdir_in(shm).expect("tempdir");
    let path = dir.path().join("dev");
    let options = |map| FileOptions {
        sync: SyncMode::Nvram,
        direct: false,
        create_size_bytes: Some(1 << 20),
        map,
        direct_large_reads: false,
    };
    let mapped = FileDevice::open(&path, options(true)).expect("open mapped");
    assert!(mapped.is_mapped());
    assert!(mapped.writes_durable());
    let plain = FileDevice::open(&path, options(false)).expect("open plain");
    assert!(!plain.is_mapped());
    // Odd offsets and lengths, both ways, and the end of the device.
    mapped.write_at(&[5u8; 3000], 1001).expect("write");
    let mut back = vec![0u8; 3002];
    plain.read_at(&mut back, 1000).expect("read");
    assert_eq!(back[0], 0);
    assert!(back[1..3001].iter().all(|&b| b == 5));
    assert_eq!(back[3001], 0);
    plain.write_at(b"tail", (1 << 20) - 4).expect("write tail");
    let mut tail = [0u8; 4];
    mapped.read_at(&mut tail, (1 << 20) - 4).expect("read tail");
    assert_eq!(&tail, b"tail");
    assert!(mapped.write_at(&[1], 1 << 20).is_err());
    assert!(mapped.read_at(&mut [0u8; 2], (1 << 20) - 1).is_err());
    // The whole file was allocated up front: no hole for a store to fault on.
    let blocks = std::fs::metadata(&path).expect("meta");
    assert!(std::os::unix::fs::MetadataExt::blocks(&blocks) * 512 >= 1 << 20);
}

#[test]
fn map_is_ignored_where_it_would_weaken_the_promise() {
    let dir = tempfile::tempdir_in(".").expect("tempdir");
    let path = dir.path().join("dev");
    let dev = FileDevice::open(
        &path,
        FileOptions {
            sync: SyncMode::Fdatasync,
            direct: false,
            create_size_bytes: Some(8192),
            map: true,
            direct_large_reads: false,
        },
    )
    .expect("open");
    assert!(!dev.is_mapped(), "fdatasync files are never mapped");
    if !is_on_volatile_memory(dir.path()) {
        let nvram = FileDevice::open(
            &path,
            FileOptions {
                sync: SyncMode::Nvram,
                map: true,
                ..FileOptions::default()
            },
        )
        .expect("open nvram");
        assert!(!nvram.is_mapped(), "only tmpfs files are mapped");
    }
}

#[test]
fn file_device_reopens_existing_file_at_its_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev");
    let options = FileOptions {
        create_size_bytes: Some(8192),
        ..FileOptions::default()
    };
    FileDevice::open(&path, options)
        .expect("create")
        .write_at(b"hello", 4096)
        .expect("write");
    let dev = FileDevice::open(&path, FileOptions::default()).expect("reopen");
    assert_eq!(dev.len_bytes(), 8192);
    let mut b = [0u8; 5];
    dev.read_at(&mut b, 4096).expect("read");
    assert_eq!(&b, b"hello");
}

#[test]
fn missing_file_without_create_is_an_open_error() {
    let err = FileDevice::open(Path::new("/nonexistent/wcache/x"), FileOptions::default())
        .err()
        .expect("error");
    assert!(matches!(err, DeviceError::Open { .. }), "{err}");
}
