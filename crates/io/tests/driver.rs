//! Driver tests: the real engine, real threads, byte-exact checks.
//!
//! Several threads issue random, unaligned, overlapping reads and writes;
//! a byte range lock serialises only requests whose *bytes* overlap, so
//! requests that share a page but not bytes run concurrently (the case the
//! cache's copy-on-write has to get right). Every read must equal the shadow
//! of acknowledged writes; after a drain the backing must equal it too.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wcache_core::types::VolumeId;
use wcache_core::{EngineConfig, RequestFlags, RequestKind, WritePolicyKind};
use wcache_io::device::file::{FileDevice, FileOptions, SyncMode};
use wcache_io::{
    BlockDevice, Driver, DriverConfig, EmulatedDevice, FaultPlan, FaultyDevice, MemDevice, Payload,
};

#[path = "common/hung.rs"]
mod hung;
use hung::HungBacking;

const VOLUME_BYTES: u64 = 192 * 1024 + 1536;

/// Serialises requests whose byte ranges overlap (writers exclusive).
#[derive(Default)]
struct RangeLock {
    held: Mutex<Vec<(u16, u64, u64, bool)>>,
    freed: Condvar,
}

impl RangeLock {
    fn lock(&self, vol: u16, start: u64, end: u64, write: bool) {
        let mut held = self.held.lock().expect("range lock");
        while held
            .iter()
            .any(|&(v, s, e, w)| v == vol && s < end && start < e && (w || write))
        {
            held = self.freed.wait(held).expect("range lock");
        }
        held.push((vol, start, end, write));
    }
    fn unlock(&self, vol: u16, start: u64, end: u64, write: bool) {
        let mut held = self.held.lock().expect("range lock");
        let i = held
            .iter()
            .position(|&h| h == (vol, start, end, write))
            .expect("held range");
        held.swap_remove(i);
        self.freed.notify_all();
    }
}

fn config(policy: WritePolicyKind, slots: u64) -> EngineConfig {
    EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 16 * 1024,
        cache_slots: slots,
        write_policy: policy,
        requests_max: 64,
        ..EngineConfig::default()
    }
}

struct Rig {
    driver: Arc<Driver>,
    backings: Vec<Arc<MemDevice>>,
    shadow: Arc<Vec<Mutex<Vec<u8>>>>,
}

fn rig(policy: WritePolicyKind, slots: u64, volumes: usize) -> Rig {
    let cache = Arc::new(MemDevice::new(slots * 4096));
    let backings: Vec<Arc<MemDevice>> = (0..volumes)
        .map(|_| Arc::new(MemDevice::new(VOLUME_BYTES)))
        .collect();
    let devs: Vec<Arc<dyn BlockDevice>> = backings
        .iter()
        .map(|b| b.clone() as Arc<dyn BlockDevice>)
        .collect();
    let driver = Driver::new(
        config(policy, slots),
        cache,
        devs,
        DriverConfig {
            io_threads: 3,
            ..DriverConfig::default()
        },
    )
    .expect("driver");
    let shadow = (0..volumes)
        .map(|_| Mutex::new(vec![0u8; VOLUME_BYTES as usize]))
        .collect();
    Rig {
        driver: Arc::new(driver),
        backings,
        shadow: Arc::new(shadow),
    }
}

/// Runs `threads` × `ops` random requests; returns the reads checked.
fn hammer(rig: &Rig, threads: usize, ops: usize, seed: u64) -> u64 {
    let lock = Arc::new(RangeLock::default());
    let volumes = rig.backings.len();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let driver = rig.driver.clone();
            let shadow = rig.shadow.clone();
            let lock = lock.clone();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 1000 + t as u64);
                let mut checked = 0u64;
                let mut buf = Vec::new();
                for op in 0..ops {
                    let vol = rng.gen_range(0..volumes) as u16;
                    let sectors = VOLUME_BYTES / 512;
                    let len = 512 * rng.gen_range(1..=24u64);
                    let start = 512 * rng.gen_range(0..sectors);
                    let len = len.min(VOLUME_BYTES - start);
                    let end = start + len;
                    let roll = rng.gen_range(0..100);
                    let write = roll < 55;
                    lock.lock(vol, start, end, write);
                    if write {
                        let kind = if roll < 5 { RequestKind::WriteZeroes } else { RequestKind::Write };
                        let stamp = (t as u8).wrapping_mul(37).wrapping_add(op as u8) | 1;
                        buf.clear();
                        buf.extend((0..len).map(|i| stamp.wrapping_add((i / 512) as u8)));
                        let payload = if kind == RequestKind::Write { Payload::Write(&buf) } else { Payload::None };
                        driver
                            .submit(VolumeId(vol), kind, start, len, RequestFlags::default(), payload)
                            .expect("write");
                        let mut s = shadow[vol as usize].lock().expect("shadow");
                        if kind == RequestKind::Write {
                            s[start as usize..end as usize].copy_from_slice(&buf);
                        } else {
                            s[start as usize..end as usize].fill(0);
                        }
                    } else if roll < 58 {
                        driver.flush(VolumeId(vol)).expect("flush");
                    } else {
                        buf.clear();
                        buf.resize(len as usize, 0xEE);
                        driver.read(VolumeId(vol), start, &mut buf).expect("read");
                        let s = shadow[vol as usize].lock().expect("shadow");
                        let want = &s[start as usize..end as usize];
                        if buf[..] != want[..] {
                            let at = buf.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                            panic!(
                                "seed {seed} thread {t} op {op}: read vol {vol} {start}+{len} differs at byte {} (got {}, want {})",
                                start + at as u64,
                                buf[at],
                                want[at]
                            );
                        }
                        checked += len;
                    }
                    lock.unlock(vol, start, end, write);
                }
                checked
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("thread")).sum()
}

fn backing_equals_shadow(rig: &Rig) {
    for (v, b) in rig.backings.iter().enumerate() {
        let mut got = vec![0u8; VOLUME_BYTES as usize];
        b.read_at(&mut got, 0).expect("read backing");
        let want = rig.shadow[v].lock().expect("shadow");
        let diff = got.iter().zip(want.iter()).position(|(a, b)| a != b);
        assert_eq!(
            diff, None,
            "volume {v}: backing differs from shadow at byte {diff:?}"
        );
    }
}

#[test]
fn write_back_random_overlapping_requests_read_acknowledged_data_and_drain_to_backing() {
    let rig = rig(WritePolicyKind::WriteBack, 32, 2);
    let checked = hammer(&rig, 4, 600, 1);
    assert!(checked > 100_000, "only {checked} bytes read back");
    let stats = rig.driver.engine_stats();
    assert!(stats.destages > 0, "a 32-slot cache must destage");
    rig.driver.drain().expect("drain");
    assert_eq!(rig.driver.dirty_pages(), 0);
    backing_equals_shadow(&rig);
    // After the drain, reads still agree (clean pages or backing).
    hammer(&rig, 2, 100, 2);
    rig.driver.drain().expect("drain");
    backing_equals_shadow(&rig);
}

#[test]
fn write_through_random_overlapping_requests_keep_backing_current() {
    let rig = rig(WritePolicyKind::WriteThrough, 48, 2);
    let checked = hammer(&rig, 4, 500, 3);
    assert!(checked > 50_000, "only {checked} bytes read back");
    assert_eq!(
        rig.driver.dirty_pages(),
        0,
        "write-through leaves nothing dirty"
    );
    backing_equals_shadow(&rig);
}

#[test]
fn backing_eio_on_destage_is_retried_and_loses_nothing() {
    let slots = 64;
    let cache = Arc::new(MemDevice::new(slots * 4096));
    let backing = Arc::new(MemDevice::new(VOLUME_BYTES));
    let plan = FaultPlan::new();
    let faulty: Arc<dyn BlockDevice> = Arc::new(FaultyDevice::new(backing.clone(), plan.clone()));
    let driver = Driver::new(
        config(WritePolicyKind::WriteBack, slots),
        cache,
        vec![faulty],
        DriverConfig::default(),
    )
    .expect("driver");
    let vol = VolumeId(0);
    plan.set_fail_writes(true);
    let mut shadow = vec![0u8; VOLUME_BYTES as usize];
    for i in 0..20u64 {
        let data = vec![i as u8 + 1; 4096];
        driver
            .write(vol, i * 8192, &data, false)
            .expect("write-back write is acknowledged from the cache");
        shadow[(i * 8192) as usize..][..4096].copy_from_slice(&data);
    }
    let err = driver
        .drain_timeout(Duration::from_millis(400))
        .expect_err("drain cannot finish while the backing fails");
    assert!(err.to_string().contains("dirty pages left"), "{err}");
    assert_eq!(
        driver.dirty_pages(),
        20,
        "failed destages keep every page dirty"
    );
    let stats = driver.engine_stats();
    assert!(
        stats.destage_errors >= 2,
        "the engine retried (destage_errors = {})",
        stats.destage_errors
    );
    assert!(plan.injected() >= 2);
    assert!(driver.stats().backing_errors >= 2);
    // Reads are served from the cache meanwhile.
    let mut back = vec![0u8; 4096];
    driver
        .read(vol, 5 * 8192, &mut back)
        .expect("read dirty page");
    assert!(back.iter().all(|&b| b == 6));
    plan.set_fail_writes(false);
    driver.drain().expect("drain after the backing recovers");
    assert_eq!(driver.dirty_pages(), 0);
    let mut got = vec![0u8; VOLUME_BYTES as usize];
    backing.read_at(&mut got, 0).expect("backing");
    assert!(got == shadow, "backing holds every acknowledged write");
    assert!(plan.writes_passed() > 0);
}

#[test]
fn cache_write_error_fails_the_request_and_keeps_old_data() {
    let slots = 16;
    let plan = FaultPlan::new();
    let cache: Arc<dyn BlockDevice> = Arc::new(FaultyDevice::new(
        Arc::new(MemDevice::new(slots * 4096)),
        plan.clone(),
    ));
    let backing: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(VOLUME_BYTES));
    let driver = Driver::new(
        config(WritePolicyKind::WriteBack, slots),
        cache,
        vec![backing],
        DriverConfig::default(),
    )
    .expect("driver");
    let vol = VolumeId(0);
    driver.write(vol, 0, &[1u8; 4096], false).expect("write");
    plan.set_fail_writes(true);
    assert!(
        driver.write(vol, 0, &[2u8; 4096], false).is_err(),
        "a failed cache write is not acknowledged"
    );
    plan.set_fail_writes(false);
    let mut back = vec![0u8; 4096];
    driver.read(vol, 0, &mut back).expect("read");
    assert!(
        back.iter().all(|&b| b == 1),
        "the acknowledged version survives"
    );
}

#[test]
fn file_devices_with_fdatasync_and_dsync_round_trip_through_the_driver() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (policy, sync) in [
        (WritePolicyKind::WriteThrough, SyncMode::Fdatasync),
        (WritePolicyKind::WriteBack, SyncMode::Dsync),
    ] {
        let open = |name: &str, size: u64| -> Arc<dyn BlockDevice> {
            Arc::new(
                FileDevice::open(
                    &dir.path().join(format!("{name}-{sync:?}")),
                    FileOptions {
                        sync,
                        direct: false,
                        create_size_bytes: Some(size),
                        map: false,
                        direct_large_reads: false,
                    },
                )
                .expect("open"),
            )
        };
        let driver = Driver::new(
            config(policy, 32),
            open("cache", 32 * 4096),
            vec![open("backing", 1 << 20)],
            DriverConfig::default(),
        )
        .expect("driver");
        let vol = VolumeId(0);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        driver.write(vol, 1024, &data, true).expect("write");
        let mut back = vec![0u8; data.len()];
        driver.read(vol, 1024, &mut back).expect("read");
        assert!(back == data);
        driver.drain().expect("drain");
        let stats = driver.stats();
        if sync == SyncMode::Fdatasync {
            assert!(
                stats.cache_flushes > 0 && stats.backing_flushes > 0,
                "{stats:?}"
            );
        } else {
            assert_eq!(
                stats.cache_flushes, 0,
                "RWF_DSYNC needs no flush: {stats:?}"
            );
        }
    }
}

#[test]
fn oversized_and_wrong_payloads_are_refused() {
    let r = rig(WritePolicyKind::WriteThrough, 16, 1);
    let err = r
        .driver
        .write(VolumeId(0), VOLUME_BYTES - 10, &[0u8; 20], false)
        .expect_err("past the end");
    assert!(err.to_string().contains("beyond the end"), "{err}");
    let err = r
        .driver
        .submit(
            VolumeId(0),
            RequestKind::Write,
            0,
            4096,
            RequestFlags::default(),
            Payload::Write(&[0u8; 10]),
        )
        .expect_err("short payload");
    assert!(err.to_string().contains("payload"), "{err}");
    assert!(
        r.driver.read(VolumeId(3), 0, &mut [0u8; 512]).is_err(),
        "unknown volume"
    );
}

/// The emulated 10K RPM disk serves random 4 KiB reads at QD1 at the rate of
/// its mechanics (seek + half a rotation + overhead ≈ 7-8 ms), in real time.
#[test]
fn emulated_hdd_gives_disk_like_iops_at_qd1() {
    // The whole disk (36.4 GB, sparse in memory): seeks span every cylinder.
    let capacity_bytes = wcache_models::build_device("hdd")
        .expect("hdd")
        .capacity_bytes();
    let store = Arc::new(MemDevice::new(capacity_bytes));
    let dev = EmulatedDevice::with_model_name("hdd", store).expect("hdd");
    let mut rng = SmallRng::seed_from_u64(7);
    let mut buf = vec![0u8; 4096];
    let start = Instant::now();
    let mut ops = 0u64;
    while start.elapsed() < Duration::from_millis(1500) {
        let offset = rng.gen_range(0..capacity_bytes / 4096) * 4096;
        dev.read_at(&mut buf, offset).expect("read");
        ops += 1;
    }
    let iops = ops as f64 / start.elapsed().as_secs_f64();
    eprintln!("emulated hdd: {iops:.0} IOPS random 4 KiB QD1");
    assert!(
        (90.0..=170.0).contains(&iops),
        "emulated HDD gave {iops:.0} IOPS"
    );
}

/// While destages hang in the backing and writes stall, `fail_waiting`
/// answers the stalled writes with an error, refuses new requests, and
/// `shutdown_within` returns at its deadline with threads left in the
/// backing; the acknowledged pages stay dirty and readable.
#[test]
fn stop_with_a_hung_backing_fails_stalled_writes_and_ends_at_its_deadline() {
    let slots = 16;
    let hung = Arc::new(HungBacking::new(VOLUME_BYTES));
    let driver = Arc::new(
        Driver::new(
            config(WritePolicyKind::WriteBack, slots),
            Arc::new(MemDevice::new(slots * 4096)),
            vec![hung.clone() as Arc<dyn BlockDevice>],
            DriverConfig::default(),
        )
        .expect("driver"),
    );
    let vol = VolumeId(0);
    let d = driver.clone();
    let writer = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for page in 0..(slots + 8) {
            match d.write(vol, page * 4096, &[page as u8 + 1; 4096], false) {
                Ok(()) => acked.push(page),
                Err(e) => return (acked, Some(e.to_string())),
            }
        }
        (acked, None)
    });
    let start = Instant::now();
    while driver.engine_stats().stalls == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no write stalled"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let dirty_before = driver.dirty_pages();
    assert_eq!(driver.fail_waiting(), 1, "one writer, one stalled write");
    let (acked, error) = writer.join().expect("writer");
    assert!(
        error.is_some(),
        "the stalled write is answered with an error"
    );
    assert_eq!(
        acked.len() as u64,
        slots,
        "every slot held an acknowledged write"
    );
    assert_eq!(
        driver.dirty_pages(),
        dirty_before,
        "nothing admitted changed"
    );
    let refused = driver.write(vol, 0, &[9; 4096], false);
    assert!(matches!(refused, Err(wcache_io::RequestError::ShutDown)));
    let mut back = vec![0u8; 4096];
    let refused = driver.read(vol, 0, &mut back);
    assert!(matches!(refused, Err(wcache_io::RequestError::ShutDown)));
    let deadline_start = Instant::now();
    assert!(
        !driver.shutdown_within(Duration::from_millis(200)),
        "threads blocked in the backing are left"
    );
    assert!(deadline_start.elapsed() < Duration::from_secs(2));
    assert_eq!(driver.dirty_pages(), slots, "acknowledged pages stay dirty");
    // Let the blocked threads finish, so the test leaves none behind.
    hung.release();
}
