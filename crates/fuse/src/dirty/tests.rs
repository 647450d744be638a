//! The held writes under failures and slow disks.

use super::*;
use crate::test_support::{memory_cache, memory_cache_with, until};
use wcache_io::{BlockDevice, FaultPlan, FaultyDevice, MemDevice};

/// 4 MiB of memory behind a fault plan.
fn faulty_backing() -> (Arc<FaultPlan>, Arc<dyn BlockDevice>) {
    let plan = FaultPlan::new();
    let backing = FaultyDevice::new(Arc::new(MemDevice::new(4 << 20)), Arc::clone(&plan));
    (plan, Arc::new(backing))
}

/// While the writeback fails, a writer over the limit gets the error
/// instead of waiting forever, nothing held is dropped, and the file's
/// next fsync hears of it; once the backing heals, everything lands.
#[test]
fn a_failing_writeback_keeps_the_pages_and_refuses_writers_over_the_limit() {
    // Write-through over a backing that fails writes while `plan` says.
    let (plan, backing) = faulty_backing();
    let cache = memory_cache("all", Some(backing));
    let volume = cache.volumes()[0].clone();
    let limits = DirtyLimits {
        max_bytes: 8192,
        expire: Duration::from_millis(50),
    };
    let dirty = DirtyPages::start(Arc::new(Volumes::one(volume)), 4096, limits);
    let tmp = tempfile::tempfile().unwrap();
    let file = Arc::new(BackingFile::new(tmp.into(), None).unwrap());
    plan.set_fail_writes(true);
    assert!(dirty.put(&file, 0, 0, &[7u8; 8192]));
    until("a failed writeback", || dirty.lock().failing.is_some());
    assert_eq!(dirty.held_bytes(), 8192, "nothing dropped");
    assert_eq!(dirty.throttle(), Err(Errno::EIO));
    let flags = RequestFlags::default();
    assert_eq!(dirty.write_back(0, None, flags, None), Err(Errno::EIO));
    plan.set_fail_writes(false);
    until("the pages landed", || dirty.held_bytes() == 0);
    assert_eq!(dirty.throttle(), Ok(()));
    assert_eq!(dirty.page(0, 0), None);
    let mut back = vec![0u8; 8192];
    cache.volumes()[0].read(0, &mut back).unwrap();
    assert_eq!(back, vec![7u8; 8192]);
    assert_eq!(dirty.stop(), 0);
}

/// A background writeback bypassing to a slow disk gives the pages it
/// has not sent to a critical fsync of the file that began meanwhile,
/// which caches them: the fsync waits for one part of the writeback,
/// not for all of it behind the disk, and nothing is lost.
#[test]
fn a_background_writeback_gives_its_unsent_pages_to_a_critical_fsync() {
    let (plan, backing) = faulty_backing();
    let cache = memory_cache_with(
        "cp-pi-ioi",
        Some(backing),
        wcache_core::WritePolicyKind::WriteBack,
    );
    let volume = cache.volumes()[0].clone();
    let limits = DirtyLimits {
        max_bytes: 8 << 20,
        expire: Duration::from_millis(20),
    };
    let dirty = DirtyPages::start(Arc::new(Volumes::one(volume)), 4096, limits);
    let tmp = tempfile::tempfile().unwrap();
    let file = Arc::new(BackingFile::new(tmp.into(), None).unwrap());
    // 256 pages, every other one: 256 writes of one page each, in 16 parts.
    let pages = 256u64;
    plan.set_latency(Duration::from_millis(10));
    for i in 0..pages {
        assert!(dirty.put(&file, 0, 2 * i, &[(i % 250) as u8 + 1; 4096]));
    }
    until("the background writeback began", || {
        plan.writes_passed() > 0
    });
    let critical = RequestFlags {
        fua: false,
        sync: true,
        critical: true,
        issuer: 7,
    };
    assert_eq!(dirty.write_back(0, None, critical, None), Ok(None));
    let passed = plan.writes_passed();
    assert!(
        passed < pages,
        "the fsync waited for the whole background writeback ({passed} of {pages} on the disk)"
    );
    assert_eq!(dirty.held_bytes(), 0, "every page landed");
    for i in 0..pages {
        let mut back = vec![0u8; 4096];
        cache.volumes()[0].read(2 * i * 4096, &mut back).unwrap();
        assert_eq!(back, vec![(i % 250) as u8 + 1; 4096], "page {}", 2 * i);
    }
    plan.set_latency(Duration::ZERO);
    assert_eq!(dirty.stop(), 0);
}
