//! Device models against the figures they must reproduce (docs/sim-models.md).
//! Run with `-- --nocapture` to see the measured sanity figures.

/// Grouped under `device` so that `cargo test --workspace device` selects them.
mod device {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use wcache_core::time::Nanos;
    use wcache_models::{
        build_device, DevCompletion, DevOp, DevOpKind, DeviceModel, DeviceSpecError, DeviceStats,
        HddModel, HddParams, NvramModel, NvramParams, RaidLevel, RaidModel, SsdModel, SsdParams,
        DEVICE_NAMES,
    };

    const KIB: u64 = 1024;

    /// Keeps `qd` operations outstanding until `count` have completed; returns
    /// operations per second and the completions in order.
    fn run_closed(
        dev: &mut dyn DeviceModel,
        qd: usize,
        count: u64,
        mut make: impl FnMut(u64) -> DevOp,
    ) -> (f64, Vec<DevCompletion>) {
        let mut issued = 0u64;
        let mut all = Vec::with_capacity(count as usize);
        while issued < qd as u64 && issued < count {
            dev.submit(Nanos::ZERO, make(issued));
            issued += 1;
        }
        let mut done = Vec::new();
        while (all.len() as u64) < count {
            let t = dev.next_event_time().expect("work outstanding");
            dev.advance(t, &mut done);
            for c in done.drain(..) {
                assert!(c.time <= t);
                all.push(c);
                if issued < count {
                    dev.submit(t, make(issued));
                    issued += 1;
                }
            }
        }
        assert_eq!(dev.outstanding(), 0);
        let end = all.last().map_or(Nanos::ZERO, |c| c.time);
        (count as f64 / end.as_secs_f64(), all)
    }

    /// Random aligned `len` ops of `kind` in `[lo, hi)` bytes of the device.
    fn random_ops(
        seed: u64,
        kind: DevOpKind,
        len: u64,
        lo: u64,
        hi: u64,
    ) -> impl FnMut(u64) -> DevOp {
        let mut rng = SmallRng::seed_from_u64(seed);
        let slots = (hi - lo) / len;
        move |id| DevOp {
            id,
            kind,
            offset_bytes: lo + rng.gen_range(0..slots) * len,
            len_bytes: len,
        }
    }

    fn hdd_with_qd(qd: usize) -> HddModel {
        HddModel::new(HddParams::ultrastar_10k().with_queue_depth(qd))
    }

    fn hdd_random_iops(qd: usize, band_fraction: f64, kind: DevOpKind) -> f64 {
        let mut disk = hdd_with_qd(32);
        let cap = disk.capacity_bytes();
        let hi = ((cap as f64 * band_fraction) as u64) / (4 * KIB) * (4 * KIB);
        let (iops, _) = run_closed(&mut disk, qd, 4_000, random_ops(7, kind, 4 * KIB, 0, hi));
        iops
    }

    #[test]
    fn hdd_random_write_qd1_matches_spec() {
        let iops = hdd_random_iops(1, 1.0, DevOpKind::Write);
        let read_iops = hdd_random_iops(1, 1.0, DevOpKind::Read);
        println!("hdd random 4KiB write QD1: {iops:.1} IOPS; read QD1: {read_iops:.1} IOPS");
        assert!((100.0..140.0).contains(&iops), "{iops}");
        assert!((100.0..140.0).contains(&read_iops), "{read_iops}");
        assert!(read_iops > iops, "writes pay the settle");
    }

    #[test]
    fn hdd_satf_beats_fifo() {
        let qd1 = hdd_random_iops(1, 1.0, DevOpKind::Write);
        let qd4 = hdd_random_iops(4, 1.0, DevOpKind::Write);
        let qd16 = hdd_random_iops(16, 1.0, DevOpKind::Write);
        let qd32 = hdd_random_iops(32, 1.0, DevOpKind::Write);
        println!(
        "hdd random 4KiB write: QD1 {qd1:.1}, QD4 {qd4:.1}, QD16 {qd16:.1}, QD32 {qd32:.1} IOPS"
    );
        assert!(qd16 > 1.4 * qd1, "QD16 {qd16} vs QD1 {qd1}");
        assert!(qd4 > qd1 && qd16 > qd4 && qd32 > qd16);
    }

    #[test]
    fn hdd_queue_depth_limit_is_fifo_beyond() {
        // With a drive queue depth of 1 nothing is reordered, whatever is submitted.
        let mut fifo = hdd_with_qd(1);
        let (fifo_iops, completions) = run_closed(
            &mut fifo,
            16,
            2_000,
            random_ops(7, DevOpKind::Write, 4 * KIB, 0, 36_000_000_000),
        );
        for (i, c) in completions.iter().enumerate() {
            assert_eq!(c.id, i as u64, "drive of depth 1 completes in order");
        }
        let qd1 = hdd_random_iops(1, 1.0, DevOpKind::Write);
        println!("hdd drive depth 1 with 16 submitted: {fifo_iops:.1} IOPS (QD1 {qd1:.1})");
        assert!((fifo_iops / qd1 - 1.0).abs() < 0.1);
    }

    #[test]
    fn hdd_narrow_band_is_much_faster() {
        for qd in [1, 16] {
            let full = hdd_random_iops(qd, 1.0, DevOpKind::Write);
            let band = hdd_random_iops(qd, 0.01, DevOpKind::Write);
            println!("hdd random 4KiB write QD{qd}: full disk {full:.1} IOPS, 1% band {band:.1} IOPS ({:.2}x)", band / full);
            assert!(band > 1.4 * full, "QD{qd}: band {band} vs full {full}");
        }
    }

    #[test]
    fn hdd_sequential_read_reaches_media_rate() {
        let disk = hdd_with_qd(32);
        let media_mb_s = disk.sectors_per_track(0) as f64 * 512.0 / 0.006 / 1e6;
        for qd in [1, 2, 4] {
            let mut disk = hdd_with_qd(32);
            let len = 64 * KIB;
            let (iops, _) = run_closed(&mut disk, qd, 2_000, |id| DevOp {
                id,
                kind: DevOpKind::Read,
                offset_bytes: id * len,
                len_bytes: len,
            });
            let mb_s = iops * len as f64 / 1e6;
            println!("hdd sequential 64KiB read QD{qd} at outer zone: {mb_s:.1} MB/s (raw media rate {media_mb_s:.1} MB/s)");
            assert!((30.0..=media_mb_s).contains(&mb_s), "QD{qd}: {mb_s}");
        }
        // Without read-ahead a QD1 stream misses most of a turn per command.
        let mut disk = HddModel::new(HddParams::ultrastar_10k().with_read_ahead_bytes(0));
        let len = 64 * KIB;
        let (iops, _) = run_closed(&mut disk, 1, 1_000, |id| DevOp {
            id,
            kind: DevOpKind::Read,
            offset_bytes: id * len,
            len_bytes: len,
        });
        let mb_s = iops * len as f64 / 1e6;
        println!("hdd sequential 64KiB read QD1 without read-ahead: {mb_s:.1} MB/s");
        assert!(mb_s < 15.0, "{mb_s}");
    }

    #[test]
    fn hdd_read_ahead_is_bounded_and_dropped_by_other_commands() {
        // A host slower than the media: each read is served from the buffer
        // while within the 512 KiB window, then pays a fresh access.
        let mut disk = hdd_with_qd(32);
        let len = 64 * KIB;
        let mut now = Nanos::ZERO;
        let mut latencies = Vec::new();
        let mut done = Vec::new();
        for id in 0..24u64 {
            disk.submit(
                now,
                DevOp {
                    id,
                    kind: DevOpKind::Read,
                    offset_bytes: id * len,
                    len_bytes: len,
                },
            );
            let t = disk.next_event_time().expect("pending");
            disk.advance(t, &mut done);
            latencies.push((t - now).as_ms_f64());
            now = t + Nanos::from_ms(20);
        }
        let fast = latencies.iter().filter(|&&l| l < 0.5).count();
        println!("hdd read-ahead, host 20 ms behind: latencies ms {latencies:.2?}");
        assert!((16..=22).contains(&fast), "{fast} buffered of 24");
        // A write in between drops the stream.
        let mut disk = hdd_with_qd(32);
        let a = one_op(&mut disk, DevOpKind::Read, 0, len);
        let op = |id, kind, offset_bytes| DevOp {
            id,
            kind,
            offset_bytes,
            len_bytes: len,
        };
        disk.submit(a, op(2, DevOpKind::Write, 1 << 30));
        let w = disk.next_event_time().expect("pending");
        disk.advance(w, &mut done);
        disk.submit(w, op(3, DevOpKind::Read, len));
        let r = disk.next_event_time().expect("pending");
        assert!(
            (r - w).as_ms_f64() > 1.5,
            "read after a write pays an access"
        );
    }

    #[test]
    fn hdd_sequential_write_inner_zone_is_slower() {
        let len = 64 * KIB;
        let rate = |start: u64| {
            let mut disk = hdd_with_qd(32);
            let (iops, _) = run_closed(&mut disk, 4, 1_000, |id| DevOp {
                id,
                kind: DevOpKind::Write,
                offset_bytes: start + id * len,
                len_bytes: len,
            });
            iops * len as f64 / 1e6
        };
        let outer = rate(0);
        let cap = hdd_with_qd(1).capacity_bytes();
        let inner = rate(cap - 2_000 * len);
        println!("hdd sequential 64KiB write QD4: outer {outer:.1} MB/s, inner {inner:.1} MB/s");
        assert!(
            inner < 0.7 * outer && inner > 18.0,
            "outer {outer} inner {inner}"
        );
    }

    #[test]
    fn hdd_geometry_matches_spec() {
        let disk = HddModel::new(HddParams::ultrastar_10k());
        assert_eq!(disk.cylinders(), 15_110);
        let gb = disk.capacity_bytes() as f64 / 1e9;
        assert!((36.0..36.8).contains(&gb), "capacity {gb} GB");
        assert_eq!(disk.sectors_per_track(0), 470);
        assert_eq!(disk.sectors_per_track(disk.capacity_sectors() - 1), 270);
        let last = disk.chs(disk.capacity_sectors() - 1);
        assert_eq!(last.cylinder, 15_109);
        assert_eq!(last.head, 11);
        assert_eq!(last.sector, 269);
        let first = disk.chs(0);
        assert_eq!((first.cylinder, first.head, first.sector), (0, 0, 0));
        assert_eq!(disk.chs(470).head, 1);
        assert_eq!(disk.chs(470 * 12).cylinder, 1);
    }

    #[test]
    fn hdd_seek_curve_hits_spec_points() {
        let disk = HddModel::new(HddParams::ultrastar_10k());
        assert_eq!(disk.seek_ns(0, DevOpKind::Read), 0);
        assert_eq!(disk.seek_ns(1, DevOpKind::Read), 1_000_000);
        assert_eq!(disk.seek_ns(15_109, DevOpKind::Read), 10_500_000);
        assert_eq!(disk.seek_ns(1, DevOpKind::Write), 1_500_000);
        let mut previous = 0;
        for d in 1..15_110 {
            let s = disk.seek_ns(d, DevOpKind::Read);
            assert!(s >= previous, "seek curve falls at {d}");
            previous = s;
        }
    }

    #[test]
    fn hdd_mean_seek_matches_spec() {
        let disk = hdd_with_qd(32);
        let mut rng = SmallRng::seed_from_u64(3);
        let n = disk.cylinders();
        let mut sum_ns = 0u64;
        let mut count = 0u64;
        while count < 200_000 {
            let a = rng.gen_range(0..n);
            let b = rng.gen_range(0..n);
            if a == b {
                continue;
            }
            sum_ns += disk.seek_ns(a.abs_diff(b), DevOpKind::Read);
            count += 1;
        }
        let mean_ms = sum_ns as f64 / count as f64 / 1e6;
        let write_ms = disk.seek_ns(n / 3, DevOpKind::Write) as f64 / 1e6;
        println!(
        "hdd mean read seek over random cylinder pairs: {mean_ms:.3} ms (spec 4.7); 1/3 stroke write {write_ms:.2} ms; seek(10) {:.2} ms, seek(100) {:.2} ms, seek(1000) {:.2} ms",
        disk.seek_ns(10, DevOpKind::Read) as f64 / 1e6,
        disk.seek_ns(100, DevOpKind::Read) as f64 / 1e6,
        disk.seek_ns(1000, DevOpKind::Read) as f64 / 1e6,
    );
        assert!((mean_ms / 4.7 - 1.0).abs() < 0.1, "{mean_ms}");
    }

    /// The mechanism-time counters: service splits into positioning and
    /// transfer; a full-stroke random load positions for about a seek plus
    /// half a turn, a narrow band at depth 16 for much less; read-ahead hits
    /// position for nothing.
    #[test]
    fn hdd_counts_service_and_positioning() {
        // One 4 KiB read on an idle disk: positioning is overhead and rotation,
        // the rest is the transfer of 8 sectors of the outer zone.
        let mut disk = hdd_with_qd(32);
        let end = one_op(&mut disk, DevOpKind::Read, 0, 4 * KIB);
        let s = disk.stats();
        assert_eq!(
            s.read_service_ns, end.0,
            "one op from t=0: service is its whole time"
        );
        assert_eq!(s.read_service_ns, s.busy_ns);
        assert_eq!((s.write_service_ns, s.write_position_ns), (0, 0));
        let transfer_ns = s.read_service_ns - s.read_position_ns;
        let expect_ns = 6_000_000 * 8 / disk.sectors_per_track(0) as u64;
        assert!(
            transfer_ns.abs_diff(expect_ns) <= 1,
            "{transfer_ns} vs {expect_ns}"
        );

        let position_ms = |qd: usize, band: f64, kind: DevOpKind| {
            let mut disk = hdd_with_qd(32);
            let hi = ((disk.capacity_bytes() as f64 * band) as u64) / (4 * KIB) * (4 * KIB);
            run_closed(&mut disk, qd, 4_000, random_ops(5, kind, 4 * KIB, 0, hi));
            let s = disk.stats();
            let (ops, service, position) = match kind {
                DevOpKind::Write => (s.writes, s.write_service_ns, s.write_position_ns),
                _ => (s.reads, s.read_service_ns, s.read_position_ns),
            };
            assert!(position < service);
            assert_eq!(
                service, s.busy_ns,
                "{kind:?}: one kind of op, all busy time is its service"
            );
            position as f64 / ops as f64 / 1e6
        };
        let full_read = position_ms(1, 1.0, DevOpKind::Read);
        let full_write = position_ms(1, 1.0, DevOpKind::Write);
        let band = position_ms(16, 0.01, DevOpKind::Write);
        println!("hdd positioning per 4 KiB op: full stroke QD1 read {full_read:.2} ms, write {full_write:.2} ms; 1% band QD16 write {band:.2} ms");
        // Seek 4.7 ms + half a turn 3.0 ms + overhead 0.3 ms, and the settle for writes.
        assert!((7.0..9.0).contains(&full_read), "{full_read}");
        assert!(full_write > full_read, "writes settle");
        assert!(band < 0.5 * full_write, "{band} vs {full_write}");

        // Sequential 4 KiB reads at depth 1: read-ahead serves nearly all of
        // them as the platter passes, with no positioning.
        let mut disk = hdd_with_qd(32);
        run_closed(&mut disk, 1, 200, |id| DevOp {
            id,
            kind: DevOpKind::Read,
            offset_bytes: id * 4 * KIB,
            len_bytes: 4 * KIB,
        });
        let s = disk.stats();
        let mean_ms = s.read_position_ns as f64 / s.reads as f64 / 1e6;
        assert!(
            mean_ms < 0.1,
            "sequential reads position for {mean_ms} ms each"
        );
    }

    fn member_totals(dev: &dyn DeviceModel) -> DeviceStats {
        DeviceStats::sum(&dev.member_stats())
    }

    /// Submits one op at t=0 and runs it to completion.
    fn one_op(
        dev: &mut dyn DeviceModel,
        kind: DevOpKind,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Nanos {
        dev.submit(
            Nanos::ZERO,
            DevOp {
                id: 1,
                kind,
                offset_bytes,
                len_bytes,
            },
        );
        let mut done = Vec::new();
        while let Some(t) = dev.next_event_time() {
            dev.advance(t, &mut done);
        }
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].id, 1);
        done[0].time
    }

    #[test]
    fn raid10_op_counts() {
        let mut raid = RaidModel::raid10_2x2_hdd();
        one_op(&mut raid, DevOpKind::Write, 128 * KIB, 4 * KIB);
        let s = member_totals(&raid);
        assert_eq!((s.reads, s.writes), (0, 2));
        let per_member: Vec<_> = raid.member_stats().iter().map(|m| m.writes).collect();
        // Strip 2 lives on pair 0 (members 0 and 1).
        assert_eq!(per_member, vec![1, 1, 0, 0]);

        let mut raid = RaidModel::raid10_2x2_hdd();
        one_op(&mut raid, DevOpKind::Read, 64 * KIB, 4 * KIB);
        let s = member_totals(&raid);
        assert_eq!((s.reads, s.writes), (1, 0));

        // 256 KiB spanning 4 strips: one contiguous 128 KiB run per pair, mirrored.
        let mut raid = RaidModel::raid10_2x2_hdd();
        one_op(&mut raid, DevOpKind::Write, 0, 256 * KIB);
        let s = member_totals(&raid);
        assert_eq!((s.reads, s.writes, s.write_bytes), (0, 4, 512 * KIB));
        println!("raid10: 4KiB write = 2 member writes, 4KiB read = 1 member read, 256KiB write = 4 member writes of 128KiB");
        let cap = raid.capacity_bytes();
        assert_eq!(cap % (128 * KIB), 0);
        assert_eq!(
            cap,
            2 * (hdd_with_qd(1).capacity_bytes() / (64 * KIB)) * 64 * KIB
        );
    }

    #[test]
    fn raid10_reads_spread_over_mirrors() {
        let mut raid = RaidModel::raid10_2x2_hdd();
        for id in 0..4 {
            raid.submit(
                Nanos::ZERO,
                DevOp {
                    id,
                    kind: DevOpKind::Read,
                    offset_bytes: id * 100_000 * 128 * KIB,
                    len_bytes: 4 * KIB,
                },
            );
        }
        let stats = raid.member_stats();
        let reads: Vec<_> = stats.iter().map(|s| s.reads).collect();
        assert_eq!(reads, vec![2, 2, 0, 0], "less loaded mirror first");
    }

    #[test]
    fn raid5_op_counts() {
        let cases: [(u64, u64, u64, u64, &str); 5] = [
            (4 * KIB, 4 * KIB, 2, 2, "4KiB write: read-modify-write"),
            (0, 256 * KIB, 0, 5, "full stripe: no reads"),
            (0, 128 * KIB, 2, 3, "two whole strips: reconstruct-write"),
            (
                60 * KIB,
                8 * KIB,
                4,
                4,
                "8KiB across a strip boundary: read-modify-write",
            ),
            (
                192 * KIB,
                128 * KIB,
                4,
                4,
                "last strip of one stripe + first of next",
            ),
        ];
        for (offset, len, reads, writes, what) in cases {
            let mut raid = RaidModel::raid5_4p1_hdd();
            one_op(&mut raid, DevOpKind::Write, offset, len);
            let s = member_totals(&raid);
            println!(
                "raid5 {what}: {} member reads + {} member writes",
                s.reads, s.writes
            );
            assert_eq!((s.reads, s.writes), (reads, writes), "{what}");
        }
        let mut raid = RaidModel::raid5_4p1_hdd();
        one_op(&mut raid, DevOpKind::Read, 0, 256 * KIB);
        let s = member_totals(&raid);
        assert_eq!((s.reads, s.writes), (4, 0));
        let per_member: Vec<_> = raid.member_stats().iter().map(|m| m.reads).collect();
        assert_eq!(
            per_member,
            vec![1, 1, 1, 1, 0],
            "stripe 0 parity on the last member"
        );
        assert_eq!(raid.capacity_bytes() % (256 * KIB), 0);
    }

    /// Writes `(offset, len, submit time)` to `dev`, runs them all; returns
    /// each one's completion time, in submission order.
    fn writes_at(dev: &mut dyn DeviceModel, ops: &[(u64, u64, Nanos)]) -> Vec<Nanos> {
        let mut done = Vec::new();
        for (i, &(offset_bytes, len_bytes, at)) in ops.iter().enumerate() {
            while let Some(t) = dev.next_event_time().filter(|&t| t <= at) {
                dev.advance(t, &mut done);
            }
            let op = DevOp {
                id: i as u64,
                kind: DevOpKind::Write,
                offset_bytes,
                len_bytes,
            };
            dev.submit(at, op);
        }
        while let Some(t) = dev.next_event_time() {
            dev.advance(t, &mut done);
        }
        assert_eq!(done.len(), ops.len());
        assert_eq!(dev.outstanding(), 0);
        (0..ops.len() as u64)
            .map(|i| done.iter().find(|c| c.id == i).expect("completed").time)
            .collect()
    }

    /// The stripe cache: two 4 KiB writes to the same rows of one stripe
    /// (strips 0 and 1) share one parity read and write; a write that comes
    /// while the first is writing waits for it; rows that do not overlap
    /// run apart, as without the cache.
    #[test]
    fn raid5_stripe_cache_merges_overlapping_writes_and_orders_the_rest() {
        let t0 = Nanos::ZERO;
        let same_rows = [(0, 4 * KIB, t0), (64 * KIB, 4 * KIB, t0)];
        let mut plain = RaidModel::raid5_4p1_hdd();
        writes_at(&mut plain, &same_rows);
        let s = member_totals(&plain);
        assert_eq!(
            (s.reads, s.writes),
            (4, 4),
            "no cache: two read-modify-writes"
        );
        let mut md = RaidModel::raid5_4p1_hdd().with_stripe_cache();
        let done = writes_at(&mut md, &same_rows);
        let s = member_totals(&md);
        assert_eq!((s.reads, s.writes), (3, 3), "one parity update for both");
        assert_eq!(
            done[0], done[1],
            "the joined write completes with the first"
        );

        // The second comes once the first's reads are back (its writes are out).
        let mut alone = RaidModel::raid5_4p1_hdd();
        let first_done = one_op(&mut alone, DevOpKind::Write, 0, 4 * KIB);
        let later = Nanos(first_done.0 - 1_000);
        let mut md = RaidModel::raid5_4p1_hdd().with_stripe_cache();
        let done = writes_at(&mut md, &[(0, 4 * KIB, t0), (64 * KIB, 4 * KIB, later)]);
        let s = member_totals(&md);
        assert_eq!(
            (s.reads, s.writes),
            (4, 4),
            "it waited: a read-modify-write of its own"
        );
        assert_eq!(done[0], first_done);
        assert!(
            done[1].0 > done[0].0 + 5_000_000,
            "{done:?}: it started after the first"
        );

        // Rows 0-4 KiB and 8-12 KiB: no overlap, no interaction.
        let apart = [(0, 4 * KIB, t0), (64 * KIB + 8 * KIB, 4 * KIB, t0)];
        let mut plain = RaidModel::raid5_4p1_hdd();
        let plain_done = writes_at(&mut plain, &apart);
        let mut md = RaidModel::raid5_4p1_hdd().with_stripe_cache();
        let md_done = writes_at(&mut md, &apart);
        assert_eq!(plain_done, md_done);
        assert_eq!(member_totals(&md).reads, 4);
    }

    #[test]
    fn raid5_parity_rotates_left_symmetric() {
        // A 4 KiB write at the start of stripe s reads/writes data on member
        // (p+1)%5 and parity on p = 4 - s%5.
        for stripe in 0..5u64 {
            let mut raid = RaidModel::raid5_4p1_hdd();
            one_op(&mut raid, DevOpKind::Write, stripe * 256 * KIB, 4 * KIB);
            let parity = (4 - stripe % 5) as usize;
            let data = (parity + 1) % 5;
            let writes: Vec<_> = raid.member_stats().iter().map(|m| m.writes).collect();
            for (member, w) in writes.iter().enumerate() {
                let expected = u64::from(member == parity || member == data);
                assert_eq!(*w, expected, "stripe {stripe} member {member}");
            }
        }
    }

    #[test]
    fn raid5_small_write_costs_reads_then_writes() {
        // The rewrite waits for the reads: about a read access plus one revolution.
        let mut raid = RaidModel::raid5_4p1_hdd();
        let write = one_op(&mut raid, DevOpKind::Write, 4 * KIB, 4 * KIB);
        let mut raid = RaidModel::raid5_4p1_hdd();
        let read = one_op(&mut raid, DevOpKind::Read, 4 * KIB, 4 * KIB);
        println!("raid5 lone 4KiB at t=0: read {read}, write {write}");
        assert!(write.0 > read.0 + 5_000_000, "read {read} write {write}");
    }

    #[test]
    fn raid_random_write_throughput() {
        let mut raid10 = RaidModel::raid10_2x2_hdd();
        let cap10 = raid10.capacity_bytes();
        let (iops10, _) = run_closed(
            &mut raid10,
            20,
            4_000,
            random_ops(5, DevOpKind::Write, 4 * KIB, 0, cap10),
        );
        let mut raid5 = RaidModel::raid5_4p1_hdd();
        let cap5 = raid5.capacity_bytes();
        let (iops5, _) = run_closed(
            &mut raid5,
            20,
            4_000,
            random_ops(5, DevOpKind::Write, 4 * KIB, 0, cap5),
        );
        let busy: Vec<f64> = raid5
            .member_stats()
            .iter()
            .map(|s| s.busy_ns as f64 / 1e9)
            .collect();
        println!("random 4KiB writes, full array, QD20: raid10 {iops10:.1} IOPS, raid5 {iops5:.1} IOPS; raid5 member busy s {busy:.2?}");
        // RAID-10: two pairs, each write occupies both disks of a pair.
        assert!(iops10 > 1.5 * hdd_random_iops(10, 1.0, DevOpKind::Write) * 0.8);
        // RAID-5: 4 member ops per write over 5 disks.
        assert!(
            iops5 < iops10 && iops5 > 0.5 * iops10 * 5.0 / 8.0,
            "raid5 {iops5} raid10 {iops10}"
        );
    }

    fn check_flush_ordering(dev: &mut dyn DeviceModel, len: u64) {
        let cap = dev.capacity_bytes();
        let mut make = random_ops(11, DevOpKind::Write, len, 0, cap);
        for id in 0..8 {
            dev.submit(Nanos::ZERO, make(id));
        }
        dev.submit(
            Nanos(10),
            DevOp {
                id: 100,
                kind: DevOpKind::Flush,
                offset_bytes: 0,
                len_bytes: 0,
            },
        );
        for id in 8..12 {
            dev.submit(Nanos(20), make(id));
        }
        dev.submit(
            Nanos(30),
            DevOp {
                id: 101,
                kind: DevOpKind::Flush,
                offset_bytes: 0,
                len_bytes: 0,
            },
        );
        let mut done = Vec::new();
        while let Some(t) = dev.next_event_time() {
            dev.advance(t, &mut done);
        }
        assert_eq!(done.len(), 14, "{}", dev.name());
        let time_of = |id: u64| {
            done.iter()
                .find(|c| c.id == id)
                .map(|c| c.time)
                .expect("completed")
        };
        let last_before = (0..8).map(time_of).max().expect("writes");
        let last_all = (0..12).map(time_of).max().expect("writes");
        assert_eq!(time_of(100), last_before, "{}", dev.name());
        assert_eq!(time_of(101), last_all.max(time_of(100)), "{}", dev.name());
        let pos = |id: u64| done.iter().position(|c| c.id == id).expect("completed");
        assert!(pos(100) < pos(101));
        for w in 0..8 {
            assert!(pos(w) < pos(100), "{}: write {w} after flush", dev.name());
        }
        // Completions come in time order.
        assert!(done.windows(2).all(|p| p[0].time <= p[1].time));
        // A flush with nothing outstanding completes at once.
        dev.submit(
            Nanos(u64::MAX / 2),
            DevOp {
                id: 102,
                kind: DevOpKind::Flush,
                offset_bytes: 0,
                len_bytes: 0,
            },
        );
        assert_eq!(dev.next_event_time(), Some(Nanos(u64::MAX / 2)));
        done.clear();
        dev.advance(Nanos(u64::MAX / 2), &mut done);
        assert_eq!(
            done,
            vec![DevCompletion {
                id: 102,
                time: Nanos(u64::MAX / 2)
            }]
        );
    }

    #[test]
    fn flush_waits_for_earlier_writes_only() {
        check_flush_ordering(&mut hdd_with_qd(32), 4 * KIB);
        check_flush_ordering(&mut RaidModel::raid10_2x2_hdd(), 64 * KIB);
        check_flush_ordering(&mut RaidModel::raid5_4p1_hdd(), 4 * KIB);
        check_flush_ordering(&mut SsdModel::new(SsdParams::koller_pcie()), 4 * KIB);
        check_flush_ordering(&mut NvramModel::new(NvramParams::dram()), 4 * KIB);
    }

    fn mixed_run(dev: &mut dyn DeviceModel) -> Vec<DevCompletion> {
        let cap = dev.capacity_bytes();
        let mut rng = SmallRng::seed_from_u64(99);
        let (_, completions) = run_closed(dev, 12, 3_000, move |id| {
            let len = [4 * KIB, 8 * KIB, 64 * KIB, 256 * KIB][rng.gen_range(0..4)];
            let kind = if rng.gen_bool(0.3) {
                DevOpKind::Read
            } else {
                DevOpKind::Write
            };
            DevOp {
                id,
                kind,
                offset_bytes: rng.gen_range(0..(cap - len) / 4096) * 4096,
                len_bytes: len,
            }
        });
        completions
    }

    #[test]
    fn models_are_deterministic() {
        for name in DEVICE_NAMES {
            let a = mixed_run(build_device(name).expect("known").as_mut());
            let b = mixed_run(build_device(name).expect("known").as_mut());
            assert_eq!(a, b, "{name}");
        }
    }

    #[test]
    fn registry_builds_every_name() {
        for name in DEVICE_NAMES {
            let dev = build_device(name).expect("known name");
            assert!(dev.capacity_bytes() > 0);
            println!("{name}: {} {} bytes", dev.name(), dev.capacity_bytes());
        }
        assert_eq!(
            build_device("raid5").map(|d| d.name()),
            Ok("raid5-4+1".to_string())
        );
        assert_eq!(
            build_device("raid10").map(|d| d.name()),
            Ok("raid10-2+2".to_string())
        );
        assert_eq!(
            build_device("raid5-md").map(|d| d.name()),
            Ok("raid5-md-4+1".to_string())
        );
        let err = build_device("raid6").err().expect("unknown name");
        assert_eq!(
            err,
            DeviceSpecError::UnknownName {
                name: "raid6".to_string()
            }
        );
        let message = err.to_string();
        assert!(
            message.contains("raid6")
                && message.contains("hdd, raid10, raid5, raid5-md, ssd, nvram"),
            "{message}"
        );
    }

    #[test]
    fn raid_config_errors() {
        let members = |n: usize| -> Vec<Box<dyn DeviceModel>> {
            (0..n)
                .map(|_| Box::new(NvramModel::new(NvramParams::dram())) as Box<dyn DeviceModel>)
                .collect()
        };
        assert!(RaidModel::new(RaidLevel::Raid10, members(3), 64 * KIB).is_err());
        assert!(RaidModel::new(RaidLevel::Raid5, members(2), 64 * KIB).is_err());
        assert!(RaidModel::new(RaidLevel::Raid5, members(3), 1000).is_err());
        let raid = RaidModel::new(RaidLevel::Raid5, members(3), 64 * KIB).expect("valid");
        assert_eq!(raid.capacity_bytes(), 2 * (4 << 30));
        // Generic members: a RAID-5 small write over NVRAM is two dependent phases;
        // with 2+1 reconstruct-write reads less (the other data strip only).
        let mut raid = RaidModel::new(RaidLevel::Raid5, members(3), 64 * KIB).expect("valid");
        let t = one_op(&mut raid, DevOpKind::Write, 0, 4 * KIB);
        assert_eq!(t.0, 2 * (1_000 + 410));
        let s = member_totals(&raid);
        assert_eq!((s.reads, s.writes), (1, 2));
    }

    #[test]
    fn ssd_and_nvram_costs() {
        let mut ssd = SsdModel::new(SsdParams::koller_pcie());
        let t = one_op(&mut ssd, DevOpKind::Write, 1 << 20, 4 * KIB);
        assert!((66_000..72_000).contains(&t.0), "{t}");
        let mut ssd = SsdModel::new(SsdParams::koller_pcie());
        let t = one_op(&mut ssd, DevOpKind::Read, 1 << 20, 4 * KIB);
        assert!((177_000..183_000).contains(&t.0), "{t}");
        // Random 4 KiB reads: 8 channels at ~182 us each.
        let mut ssd = SsdModel::new(SsdParams::koller_pcie());
        let cap = ssd.capacity_bytes();
        let (read_iops, _) = run_closed(
            &mut ssd,
            32,
            20_000,
            random_ops(1, DevOpKind::Read, 4 * KIB, 0, cap),
        );
        // Sequential 256 KiB writes hit the bandwidth limit.
        let mut ssd = SsdModel::new(SsdParams::koller_pcie());
        let (seq_iops, _) = run_closed(&mut ssd, 8, 5_000, |id| DevOp {
            id,
            kind: DevOpKind::Write,
            offset_bytes: id * 256 * KIB,
            len_bytes: 256 * KIB,
        });
        let seq_mb_s = seq_iops * 256.0 * 1024.0 / 1e6;
        let mut nvram = NvramModel::new(NvramParams::dram());
        let t_nv = one_op(&mut nvram, DevOpKind::Write, 0, 4 * KIB);
        println!("ssd random 4KiB read QD32: {read_iops:.0} IOPS; sequential 256KiB write QD8: {seq_mb_s:.0} MB/s; nvram 4KiB write {t_nv}");
        assert!((40_000.0..45_000.0).contains(&read_iops), "{read_iops}");
        assert!((750.0..=800.0).contains(&seq_mb_s), "{seq_mb_s}");
        assert_eq!(t_nv.0, 1_000 + 410);
    }

    /// Cost of the models per operation (not a timing assertion; run with
    /// `--ignored --nocapture` to see it).
    #[test]
    #[ignore]
    fn model_cost_per_op() {
        for name in ["hdd", "raid10", "raid5", "ssd", "nvram"] {
            let mut dev = build_device(name).expect("known");
            let cap = dev.capacity_bytes();
            let ops = 1_000_000;
            let started = std::time::Instant::now();
            let (iops, _) = run_closed(
                dev.as_mut(),
                20,
                ops,
                random_ops(1, DevOpKind::Write, 4 * KIB, 0, cap),
            );
            let ns_per_op = started.elapsed().as_nanos() as f64 / ops as f64;
            println!("{name}: {ns_per_op:.0} ns of host CPU per simulated 4KiB random write at QD20 ({iops:.0} simulated IOPS)");
        }
    }
}
