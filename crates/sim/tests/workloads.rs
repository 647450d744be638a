//! Workload generators and trace readers: mix, bounds, pacing, parsing, errors.

/// Named `workload` so that `cargo test -p wcache-sim workload` selects these tests.
mod workload {
    use std::collections::VecDeque;
    use std::io::{BufReader, Cursor};
    use std::path::PathBuf;

    use wcache_core::time::Nanos;
    use wcache_sim::workload::spc1::Asu;
    use wcache_sim::workload::{
        BlkparseAction, FileServerConfig, FileServerRegion, FileServerWorkload, IoRequest, Loop,
        MalformedPolicy, RandomConfig, RandomWorkload, Replay, ReqKind, Spc1Config, Spc1Layout,
        Spc1Stream, Spc1Workload, Stop, TraceConfig, TraceError, TraceFormat, TraceWorkload,
        Workload, WorkloadError, WorkloadSpec, BLOCK_BYTES,
    };

    /// Serve every request after a fixed latency; call `on_request` for each one.
    /// Returns the time the last completion happened.
    fn drive(
        workload: &mut dyn Workload,
        latency: Nanos,
        requests_max: u64,
        mut on_request: impl FnMut(Nanos, &IoRequest),
    ) -> Nanos {
        let mut in_flight: VecDeque<(Nanos, u64)> = VecDeque::new();
        let mut now = Nanos::ZERO;
        let mut issued = 0u64;
        loop {
            while issued < requests_max {
                let Some(req) = workload.poll(now) else {
                    break;
                };
                on_request(now, &req);
                issued += 1;
                in_flight.push_back((now + latency, req.id));
            }
            let next_arrival = if issued < requests_max {
                workload.next_arrival()
            } else {
                None
            };
            let next_completion = in_flight.front().map(|(t, _)| *t);
            match (next_arrival, next_completion) {
                (None, None) => return now,
                (Some(a), Some(c)) if a < c => now = now.max(a),
                (Some(a), None) => now = now.max(a),
                (_, Some(c)) => {
                    now = c;
                    let Some((_, id)) = in_flight.pop_front() else {
                        unreachable!()
                    };
                    workload.complete(now, id);
                }
            }
        }
    }

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("wcache-wl-{}-{name}", std::process::id()))
    }

    fn write_temp(name: &str, contents: &str) -> PathBuf {
        let path = temp_path(name);
        std::fs::write(&path, contents).expect("write temp trace");
        path
    }

    // ---------------------------------------------------------------- random

    #[test]
    fn random_closed_loop_keeps_n_outstanding_with_zero_think_time() {
        let footprint = 1 << 30;
        let mut w = RandomWorkload::new(RandomConfig::writes_closed(footprint, 4), 7).unwrap();
        assert_eq!(w.next_arrival(), Some(Nanos::ZERO));
        let mut ids = Vec::new();
        while let Some(req) = w.poll(Nanos::ZERO) {
            assert_eq!(req.kind, ReqKind::Write);
            assert_eq!(req.len_bytes, BLOCK_BYTES);
            assert_eq!(req.offset_bytes % BLOCK_BYTES, 0);
            assert!(req.offset_bytes + req.len_bytes <= footprint);
            ids.push(req.id);
        }
        assert_eq!(ids.len(), 4);
        assert_eq!(w.next_arrival(), None);
        assert!(!w.finished());
        let t = Nanos::from_us(250);
        w.complete(t, ids[2]);
        assert_eq!(w.next_arrival(), Some(t));
        assert!(w.poll(t).is_some());
        assert!(w.poll(t).is_none());
        assert_eq!(w.volume_sizes_bytes(), vec![footprint]);
    }

    #[test]
    fn random_stops_after_requests_max_and_honours_read_fraction() {
        let mut config = RandomConfig::writes_closed(64 << 20, 8);
        config.read_fraction = 0.25;
        config.stop = Stop {
            requests_max: Some(100_000),
            end: None,
        };
        let mut w = RandomWorkload::new(config, 1).unwrap();
        let mut reads = 0u64;
        let mut total = 0u64;
        drive(&mut w, Nanos::from_us(100), u64::MAX, |_, r| {
            total += 1;
            if r.kind == ReqKind::Read {
                reads += 1;
            }
            assert!(r.offset_bytes + r.len_bytes <= 64 << 20);
        });
        assert_eq!(total, 100_000);
        assert!(w.finished());
        let fraction = reads as f64 / total as f64;
        assert!((fraction - 0.25).abs() < 0.01, "read fraction {fraction}");
        assert_eq!(w.stats().requests_issued, 100_000);
        assert_eq!(w.stats().requests_completed, 100_000);
    }

    #[test]
    fn random_is_deterministic_from_seed() {
        let collect = |seed| {
            let mut w =
                RandomWorkload::new(RandomConfig::writes_open(1 << 30, 1000.0), seed).unwrap();
            let mut v = Vec::new();
            drive(&mut w, Nanos::from_ms(1), 1000, |t, r| {
                v.push((t, r.offset_bytes))
            });
            v
        };
        assert_eq!(collect(5), collect(5));
        assert_ne!(collect(5), collect(6));
    }

    #[test]
    fn open_loop_poisson_rate_is_the_target() {
        let rate_iops = 2000.0;
        let mut w = RandomWorkload::new(RandomConfig::writes_open(1 << 30, rate_iops), 3).unwrap();
        let n = 200_000u64;
        let mut last = Nanos::ZERO;
        drive(&mut w, Nanos::from_us(100), n, |t, _| last = t);
        let achieved = n as f64 / last.as_secs_f64();
        assert!(
            (achieved / rate_iops - 1.0).abs() < 0.01,
            "achieved {achieved} IOPS"
        );
        assert_eq!(w.stats().arrivals_delayed, 0);
    }

    #[test]
    fn open_loop_holds_arrivals_back_at_the_outstanding_bound() {
        let mut config = RandomConfig::writes_open(1 << 30, 1_000_000.0);
        config.arrivals = Loop::Open {
            rate_iops: 1_000_000.0,
            outstanding_max: 3,
        };
        let mut w = RandomWorkload::new(config, 9).unwrap();
        // Nothing completes: only 3 requests go out however long we wait.
        let late = Nanos::from_ms(10);
        let mut ids = Vec::new();
        while let Some(req) = w.poll(late) {
            ids.push(req.id);
        }
        assert_eq!(ids.len(), 3);
        assert_eq!(w.next_arrival(), None);
        assert!(!w.finished());
        // A completion frees one slot; the held arrival goes out at once, late.
        let t = Nanos::from_ms(20);
        w.complete(t, ids[0]);
        assert_eq!(w.next_arrival(), Some(t));
        assert!(w.poll(t).is_some());
        assert!(w.poll(t).is_none());
        let stats = w.stats();
        assert_eq!(stats.arrivals_delayed, 1);
        assert!(stats.arrival_delay_total_ns > Nanos::from_ms(19).0);
    }

    #[test]
    fn saturated_open_loop_issues_at_service_rate() {
        // 10,000 IOPS offered, 8 in flight at 1 ms each = 8,000 IOPS served.
        let mut config = RandomConfig::writes_open(1 << 30, 10_000.0);
        config.arrivals = Loop::Open {
            rate_iops: 10_000.0,
            outstanding_max: 8,
        };
        let mut w = RandomWorkload::new(config, 2).unwrap();
        let n = 50_000;
        let mut last = Nanos::ZERO;
        drive(&mut w, Nanos::from_ms(1), n, |t, _| last = t);
        let achieved = n as f64 / last.as_secs_f64();
        assert!((achieved - 8000.0).abs() < 100.0, "achieved {achieved}");
        assert!(w.stats().arrivals_delayed > n / 2);
    }

    #[test]
    fn stop_end_time_ends_open_and_closed_loops() {
        let end = Nanos::from_ms(100);
        let mut open = RandomConfig::writes_open(1 << 30, 10_000.0);
        open.stop.end = Some(end);
        let mut w = RandomWorkload::new(open, 1).unwrap();
        let mut last = Nanos::ZERO;
        let mut n = 0u64;
        drive(&mut w, Nanos::from_us(50), u64::MAX, |t, _| {
            last = t;
            n += 1;
        });
        assert!(last < end);
        assert!(
            (900..1100).contains(&n),
            "{n} arrivals in 100 ms at 10,000 IOPS"
        );
        assert!(w.finished());

        let mut closed = RandomConfig::writes_closed(1 << 30, 2);
        closed.stop.end = Some(end);
        let mut w = RandomWorkload::new(closed, 1).unwrap();
        let mut n = 0u64;
        drive(&mut w, Nanos::from_ms(1), u64::MAX, |t, _| {
            assert!(t < end);
            n += 1;
        });
        // 2 in flight, 1 ms each: 2 per ms before the end.
        assert_eq!(n, 200);
        assert!(w.finished());
    }

    // ---------------------------------------------------------------- SPC-1

    #[test]
    fn spc1_layout_puts_asu3_first_then_asu1_then_asu2() {
        let footprint = 7_100_000 * 512 / BLOCK_BYTES * BLOCK_BYTES;
        let l = Spc1Layout::new(footprint).unwrap();
        assert_eq!(l.asu3_offset_bytes, 0);
        assert_eq!(l.asu1_offset_bytes, l.asu3_len_bytes);
        assert_eq!(l.asu2_offset_bytes, l.asu1_offset_bytes + l.asu1_len_bytes);
        assert_eq!(l.asu2_offset_bytes + l.asu2_len_bytes, footprint);
        let pct = |b: u64| b as f64 * 100.0 / footprint as f64;
        assert!((pct(l.asu3_len_bytes) - 10.0).abs() < 0.01);
        assert!((pct(l.asu1_len_bytes) - 45.0).abs() < 0.01);
        assert!((pct(l.asu2_len_bytes) - 45.0).abs() < 0.01);
    }

    #[derive(Default, Debug)]
    struct Mix {
        total: u64,
        random_read: u64,
        random_write: u64,
        seq_read: u64,
        seq_write: u64,
        per_stream: [u64; 8],
        per_stream_reads: [u64; 8],
    }

    impl Mix {
        fn add(&mut self, layout: &Spc1Layout, req: &IoRequest) {
            let stream = Spc1Stream::from_issuer(req.issuer).expect("issuer is a stream index");
            let (asu_offset, asu_len) = layout.asu_extent_bytes(stream.asu());
            assert!(
                req.offset_bytes >= asu_offset,
                "{stream:?} below its ASU: {req:?}"
            );
            assert!(
                req.offset_bytes + req.len_bytes <= asu_offset + asu_len,
                "{stream:?} beyond its ASU: {req:?}"
            );
            assert_eq!(req.offset_bytes % BLOCK_BYTES, 0);
            assert!(req.len_bytes >= BLOCK_BYTES && req.len_bytes <= 16 * BLOCK_BYTES);
            self.total += 1;
            self.per_stream[stream.index()] += 1;
            let read = req.kind == ReqKind::Read;
            if read {
                self.per_stream_reads[stream.index()] += 1;
            }
            match (stream.is_sequential(), read) {
                (false, true) => self.random_read += 1,
                (false, false) => self.random_write += 1,
                (true, true) => self.seq_read += 1,
                (true, false) => self.seq_write += 1,
            }
        }

        fn pct(&self, n: u64) -> f64 {
            n as f64 * 100.0 / self.total as f64
        }

        fn check_against_reference(&self) {
            let rr = self.pct(self.random_read);
            let rw = self.pct(self.random_write);
            let sr = self.pct(self.seq_read);
            let sw = self.pct(self.seq_write);
            let reads = rr + sr;
            println!(
                "SPC-1-like mix over {} requests: reads {reads:.2} %, random read {rr:.2}, \
                 random write {rw:.2}, seq read {sr:.2}, seq write {sw:.2}",
                self.total
            );
            assert!((reads - 40.0).abs() < 2.0, "reads {reads}");
            assert!((rr - 29.0).abs() < 2.0, "random read {rr}");
            assert!((rw - 32.0).abs() < 2.0, "random write {rw}");
            assert!((sr - 11.0).abs() < 2.0, "seq read {sr}");
            assert!((sw - 28.0).abs() < 2.0, "seq write {sw}");
            for stream in Spc1Stream::ALL {
                let i = stream.index();
                let share = self.per_stream[i] as f64 / self.total as f64;
                assert!(
                    (share - stream.intensity()).abs() < 0.005,
                    "{stream:?} share {share}"
                );
                let reads = self.per_stream_reads[i] as f64 / self.per_stream[i] as f64;
                assert!(
                    (reads - stream.read_fraction()).abs() < 0.02,
                    "{stream:?} read fraction {reads}"
                );
            }
        }
    }

    #[test]
    fn spc1_closed_loop_mix_matches_reference_and_stays_in_asus() {
        let footprint = 7_100_000 * 512 / BLOCK_BYTES * BLOCK_BYTES;
        let mut w = Spc1Workload::new(Spc1Config::closed(footprint, 20), 11).unwrap();
        let layout = w.layout();
        let mut mix = Mix::default();
        drive(&mut w, Nanos::from_us(500), 1_000_000, |_, r| {
            mix.add(&layout, r)
        });
        mix.check_against_reference();
    }

    #[test]
    fn spc1_open_loop_rate_and_mix() {
        let footprint = 1 << 30;
        let target_iops = 3000.0;
        let mut w = Spc1Workload::new(Spc1Config::open(footprint, target_iops), 4).unwrap();
        let layout = w.layout();
        let mut mix = Mix::default();
        let n = 300_000;
        let mut last = Nanos::ZERO;
        drive(&mut w, Nanos::from_ms(2), n, |t, r| {
            last = t;
            mix.add(&layout, r);
        });
        mix.check_against_reference();
        let achieved = n as f64 / last.as_secs_f64();
        assert!((achieved / target_iops - 1.0).abs() < 0.01, "{achieved}");
    }

    #[test]
    fn spc1_sequential_streams_run_contiguously() {
        let mut w = Spc1Workload::new(Spc1Config::closed(1 << 30, 1), 5).unwrap();
        let mut next_expected: [Option<u64>; 8] = [None; 8];
        let mut contiguous = 0u64;
        let mut seq_total = 0u64;
        drive(&mut w, Nanos::from_us(10), 200_000, |_, r| {
            let s = Spc1Stream::from_issuer(r.issuer).unwrap();
            if s.is_sequential() {
                seq_total += 1;
                if next_expected[s.index()] == Some(r.offset_bytes) {
                    contiguous += 1;
                }
                next_expected[s.index()] = Some(r.offset_bytes + r.len_bytes);
            }
        });
        // Runs are thousands of transfers long, so nearly all are contiguous.
        assert!(contiguous as f64 / seq_total as f64 > 0.99);
    }

    #[test]
    fn spc1_is_deterministic_and_rejects_tiny_footprints() {
        let collect = |seed| {
            let mut w = Spc1Workload::new(Spc1Config::open(1 << 30, 500.0), seed).unwrap();
            let mut v = Vec::new();
            drive(&mut w, Nanos::from_ms(1), 500, |t, r| v.push((t, *r)));
            v
        };
        assert_eq!(collect(1), collect(1));
        assert_ne!(collect(1), collect(2));
        assert!(matches!(
            Spc1Workload::new(Spc1Config::closed(64 * 1024, 1), 0),
            Err(WorkloadError::InvalidConfig(_))
        ));
        assert!(matches!(
            Spc1Workload::new(Spc1Config::closed((1 << 30) + 1, 1), 0),
            Err(WorkloadError::InvalidConfig(_))
        ));
    }

    #[test]
    fn hrrw_streams_show_reuse() {
        // The walk revisits blocks: far fewer distinct blocks than requests.
        let mut w = Spc1Workload::new(Spc1Config::closed(1 << 34, 1), 8).unwrap();
        let mut seen = std::collections::HashSet::new();
        let mut n = 0u64;
        drive(&mut w, Nanos::from_us(10), 200_000, |_, r| {
            if Spc1Stream::from_issuer(r.issuer) == Some(Spc1Stream::Asu1_2) {
                n += 1;
                seen.insert(r.offset_bytes);
            }
        });
        assert!(
            (seen.len() as f64) < 0.8 * n as f64,
            "{} of {n}",
            seen.len()
        );
        let _ = Asu::Asu1;
    }

    // ---------------------------------------------------------------- traces

    fn replay_all(w: &mut dyn Workload) -> Vec<(Nanos, IoRequest)> {
        let mut v = Vec::new();
        drive(w, Nanos::from_us(1), u64::MAX, |t, r| v.push((t, *r)));
        v
    }

    fn closed(format: TraceFormat) -> TraceConfig {
        let mut c = TraceConfig::new("test-trace", format);
        c.replay = Replay::Closed { outstanding: 4 };
        c
    }

    fn from_str(
        text: &str,
        config: TraceConfig,
    ) -> Result<TraceWorkload<Cursor<Vec<u8>>>, TraceError> {
        TraceWorkload::from_reader(Cursor::new(text.as_bytes().to_vec()), config)
    }

    #[test]
    fn msr_reader_maps_disks_and_sizes_volumes() {
        let text = "\
    128166372003061629,hm,1,Read,3623424,4096,12345
    128166372003071629,hm,0,Write,1000,512,100
    128166372003081629,hm,1,Write,0,0,100
    128166372003091629,hm,1,write,5242880,8192,100
    ";
        let path = write_temp("msr.csv", text);
        let mut w = TraceWorkload::open(TraceConfig::new(&path, TraceFormat::Msr)).unwrap();
        assert_eq!(w.volume_sizes_bytes(), vec![6 << 20, 1 << 20]);
        let reqs = replay_all(&mut w);
        assert_eq!(reqs.len(), 3);
        let (t0, r0) = reqs[0];
        assert_eq!(t0, Nanos::ZERO);
        assert_eq!(
            (r0.volume, r0.kind, r0.offset_bytes, r0.len_bytes),
            (0, ReqKind::Read, 3623424, 4096)
        );
        let (t1, r1) = reqs[1];
        assert_eq!(t1, Nanos::from_ms(1)); // 10,000 ticks of 100 ns
        assert_eq!(
            (r1.volume, r1.kind, r1.offset_bytes, r1.len_bytes),
            (1, ReqKind::Write, 1000, 512)
        );
        assert_eq!(reqs[2].0, Nanos::from_ms(3));
        assert_eq!(w.stats().requests_zero_length_skipped, 1);
        assert!(w.finished());
        std::fs::remove_file(path).ok();
    }

    #[test]
    fn blkparse_reader_takes_q_or_c_with_sync_and_pid() {
        let text = "\
      8,0    0        1     0.000000000  4162  Q  WS 1000 + 8 [postgres]
      8,0    0        2     0.000001000  4162  G  WS 1000 + 8 [postgres]
      8,0    0        3     0.000002000  4162  P   N [postgres]
      8,16   1        4     0.000500000   310  Q   R 2048 + 16 [kworker/1:1]
      8,0    1        5     0.001000000     0  C  WS 1000 + 8 [0]
      8,0    1        6     0.002000000   522  Q FWS [jbd2/sda1-8]
      8,0    1        7     0.003000000   522  Q  WFSM 4096 + 8 [jbd2/sda1-8]
      8,0    1        8     0.004000000   600  Q   D 0 + 2048 [fstrim]
    CPU0 (8,0):
     Reads Queued:           1,        8KiB\t Writes Queued:           2,       8KiB
    Total (8,0):
    ";
        let mut w = from_str(text, closed(TraceFormat::Blkparse)).unwrap();
        let reqs = replay_all(&mut w);
        assert_eq!(reqs.len(), 3, "{reqs:?}");
        let r = reqs[0].1;
        assert_eq!(
            (
                r.volume,
                r.kind,
                r.offset_bytes,
                r.len_bytes,
                r.sync,
                r.issuer
            ),
            (0, ReqKind::Write, 512_000, 4096, true, 4162)
        );
        let r = reqs[1].1;
        assert_eq!(
            (
                r.volume,
                r.kind,
                r.offset_bytes,
                r.len_bytes,
                r.sync,
                r.issuer
            ),
            (1, ReqKind::Read, 2048 * 512, 8192, false, 310)
        );
        let r = reqs[2].1;
        assert_eq!((r.kind, r.sync, r.issuer), (ReqKind::Write, true, 522));
        assert_eq!(w.stats().requests_zero_length_skipped, 1);
        assert_eq!(w.volume_sizes_bytes(), vec![3 << 20, 2 << 20]);

        let mut c = closed(TraceFormat::Blkparse);
        c.blkparse_action = BlkparseAction::Complete;
        let mut w = from_str(text, c).unwrap();
        let reqs = replay_all(&mut w);
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].1.issuer, 0);
    }

    #[test]
    fn libcachesim_reader_decodes_opcodes() {
        let text = "\
    version,time,op,size,lbn
    1,1000,28,4096,8
    1,1500,2a,8192,16
    1,1700,35,0,0
    1,2000,0x2A,512,3
    ";
        let mut w = from_str(text, TraceConfig::new("lcs", TraceFormat::LibCacheSim)).unwrap();
        let reqs = replay_all(&mut w);
        assert_eq!(reqs.len(), 3);
        assert_eq!(reqs[0].0, Nanos::ZERO);
        assert_eq!(
            (reqs[0].1.kind, reqs[0].1.offset_bytes, reqs[0].1.len_bytes),
            (ReqKind::Read, 4096, 4096)
        );
        assert_eq!(reqs[1].0, Nanos::from_us(500));
        assert_eq!(reqs[1].1.kind, ReqKind::Write);
        assert_eq!(reqs[2].0, Nanos::from_us(1000));
        assert_eq!((reqs[2].1.offset_bytes, reqs[2].1.len_bytes), (1536, 512));
        assert_eq!(w.stats().lines_ignored, 2); // header + SYNCHRONIZE CACHE
        assert_eq!(w.volume_sizes_bytes(), vec![1 << 20]);
    }

    #[test]
    fn tencent_reader_io_type_is_an_option() {
        let text = "\
    Timestamp,Offset,Size,IOType,VolumeID
    1538323200,100,8,1,1283
    1538323200,200,16,0,77
    1538323201,0,8,1,1283
    ";
        let mut w = from_str(text, closed(TraceFormat::TencentCbs)).unwrap();
        let reqs = replay_all(&mut w);
        let kinds: Vec<_> = reqs.iter().map(|(_, r)| (r.volume, r.kind)).collect();
        assert_eq!(
            kinds,
            vec![(0, ReqKind::Write), (1, ReqKind::Read), (0, ReqKind::Write)]
        );
        let mut c = closed(TraceFormat::TencentCbs);
        c.cbs_write_io_type = 0;
        let mut w = from_str(text, c).unwrap();
        let kinds: Vec<_> = replay_all(&mut w).iter().map(|(_, r)| r.kind).collect();
        assert_eq!(kinds, vec![ReqKind::Read, ReqKind::Write, ReqKind::Read]);
    }

    #[test]
    fn malformed_lines_name_line_and_field() {
        let cases: [(TraceFormat, &str, u64, &str); 8] = [
            (
                TraceFormat::Msr,
                "1,h,0,Read,0,4096,1\n2,h,0,Erase,0,4096,1\n",
                2,
                "Type",
            ),
            (
                TraceFormat::Msr,
                "1,h,0,Read,0,4096,1\n\n3,h,0,Read,-5,4096,1\n",
                3,
                "Offset",
            ),
            (TraceFormat::Msr, "1,h,0,Read\n", 1, "Offset"),
            (
                TraceFormat::Blkparse,
                "  8,0 0 1 0.1 10 Q W 8 - 8 [x]\n",
                1,
                "+",
            ),
            (
                TraceFormat::Blkparse,
                "  8,0 0 1 zero 10 Q W 8 + 8 [x]\n",
                1,
                "time",
            ),
            (
                TraceFormat::LibCacheSim,
                "version,time,op,size,lbn\n1,5,zz,4096,0\n",
                2,
                "op",
            ),
            (TraceFormat::TencentCbs, "1,0,8,2,1\n", 1, "IOType"),
            (TraceFormat::TencentCbs, "1,0,8,1\n", 1, "VolumeID"),
        ];
        for (format, text, line_expected, field_expected) in cases {
            let err = from_str(text, closed(format))
                .err()
                .expect("malformed must fail");
            match &err {
                TraceError::Malformed { line, field, .. } => {
                    assert_eq!(
                        (*line, *field),
                        (line_expected, field_expected),
                        "{format:?}: {err}"
                    );
                }
                other => panic!("{format:?}: unexpected {other}"),
            }
            let message = err.to_string();
            assert!(message.contains(&format!(":{line_expected}:")), "{message}");
        }
        // Invalid UTF-8 is an error too, not a panic.
        let bytes = b"1,h,0,Read,0,4096,1\n\xff\xfe,h\n".to_vec();
        let err = TraceWorkload::from_reader(Cursor::new(bytes), closed(TraceFormat::Msr)).err();
        assert!(matches!(
            err,
            Some(TraceError::Malformed {
                line: 2,
                field: "line",
                ..
            })
        ));
    }

    #[test]
    fn malformed_lines_can_be_skipped_and_counted() {
        let text =
            "1,h,0,Read,0,4096,1\n2,h,0,Bogus,0,4096,1\n3,h,0,Write,4096,4096,1\nnot,a,line\n";
        let mut c = closed(TraceFormat::Msr);
        c.on_malformed = MalformedPolicy::Skip;
        let mut w = from_str(text, c).unwrap();
        assert_eq!(replay_all(&mut w).len(), 2);
        assert_eq!(w.stats().lines_malformed_skipped, 2);
        // A trace with nothing to replay is an error.
        assert!(matches!(
            from_str("\n", closed(TraceFormat::Msr)),
            Err(TraceError::Empty { .. })
        ));
    }

    #[test]
    fn replay_as_recorded_follows_timestamps_scaled_by_speed() {
        // µs: 1000, 1500, 4000, 3000 (backwards: replayed at the previous time).
        let text = "1,1000,2a,4096,0\n1,1500,2a,4096,8\n1,4000,28,4096,0\n1,3000,2a,4096,16\n";
        let mut c = TraceConfig::new("lcs", TraceFormat::LibCacheSim);
        c.replay = Replay::AsRecorded {
            speed: 2.0,
            outstanding_max: 64,
        };
        let mut w = from_str(text, c).unwrap();
        assert_eq!(w.next_arrival(), Some(Nanos::ZERO));
        let times: Vec<Nanos> = replay_all(&mut w).iter().map(|(t, _)| *t).collect();
        assert_eq!(
            times,
            vec![
                Nanos::ZERO,
                Nanos::from_us(250),
                Nanos::from_us(1500),
                Nanos::from_us(1500)
            ]
        );
        assert_eq!(w.stats().timestamps_clamped, 1);

        // Nothing is handed out before its time.
        let mut c = TraceConfig::new("lcs", TraceFormat::LibCacheSim);
        c.replay = Replay::AsRecorded {
            speed: 1.0,
            outstanding_max: 64,
        };
        let mut w = from_str(text, c).unwrap();
        assert!(w.poll(Nanos::ZERO).is_some());
        assert_eq!(w.next_arrival(), Some(Nanos::from_us(500)));
        assert!(w.poll(Nanos::from_us(499)).is_none());
        assert!(w.poll(Nanos::from_us(500)).is_some());
    }

    #[test]
    fn replay_closed_loop_is_as_fast_as_possible() {
        let text = "1,1000,2a,4096,0\n1,900000,2a,4096,8\n1,1800000,28,4096,0\n";
        let mut c = TraceConfig::new("lcs", TraceFormat::LibCacheSim);
        c.replay = Replay::Closed { outstanding: 2 };
        let mut w = from_str(text, c).unwrap();
        assert!(w.poll(Nanos::ZERO).is_some());
        let second = w.poll(Nanos::ZERO).expect("second goes out at once");
        assert!(w.poll(Nanos::ZERO).is_none());
        w.complete(Nanos::from_us(10), second.id);
        assert!(w.poll(Nanos::from_us(10)).is_some());
        assert!(w.finished());
    }

    #[test]
    fn trace_stop_limits_requests() {
        let text = "1,1,2a,4096,0\n1,2,2a,4096,8\n1,3,28,4096,0\n";
        let mut c = closed(TraceFormat::LibCacheSim);
        c.stop.requests_max = Some(2);
        let mut w = from_str(text, c).unwrap();
        assert_eq!(replay_all(&mut w).len(), 2);
        assert!(w.finished());
    }

    /// Serves `first` until rewound, then `second`: a file changed between passes.
    struct ChangesOnRewind {
        first: Cursor<Vec<u8>>,
        second: Cursor<Vec<u8>>,
        rewound: bool,
    }

    impl ChangesOnRewind {
        fn current(&mut self) -> &mut Cursor<Vec<u8>> {
            if self.rewound {
                &mut self.second
            } else {
                &mut self.first
            }
        }
    }

    impl std::io::Read for ChangesOnRewind {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.current().read(buf)
        }
    }

    impl std::io::BufRead for ChangesOnRewind {
        fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
            self.current().fill_buf()
        }
        fn consume(&mut self, amt: usize) {
            self.current().consume(amt)
        }
    }

    impl std::io::Seek for ChangesOnRewind {
        fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
            self.rewound = true;
            self.second.seek(pos)
        }
    }

    #[test]
    fn trace_changed_mid_replay_ends_with_an_error() {
        let reader = ChangesOnRewind {
            first: Cursor::new(b"1,h,0,Read,0,4096,1\n2,h,0,Write,0,4096,1\n".to_vec()),
            second: Cursor::new(b"1,h,0,Read,0,4096,1\n2,h,0,Oops,0,4096,1\n".to_vec()),
            rewound: false,
        };
        let mut w = TraceWorkload::from_reader(reader, closed(TraceFormat::Msr)).unwrap();
        assert_eq!(replay_all(&mut w).len(), 1);
        assert!(w.finished());
        let err = w.take_error().expect("the changed line is reported");
        assert!(
            matches!(
                err,
                WorkloadError::Trace(TraceError::Malformed {
                    line: 2,
                    field: "Type",
                    ..
                })
            ),
            "{err}"
        );
        assert!(w.take_error().is_none());
    }

    // ---------------------------------------------------------------- fileserver

    fn fileserver_requests(config: FileServerConfig, seed: u64, n: u64) -> Vec<IoRequest> {
        let mut w = FileServerWorkload::new(config, seed).unwrap();
        let mut requests = Vec::new();
        drive(&mut w, Nanos(100_000), n, |_, r| requests.push(*r));
        requests
    }

    fn write_fraction(requests: &[IoRequest]) -> f64 {
        let writes = requests.iter().filter(|r| r.kind == ReqKind::Write).count();
        writes as f64 / requests.len() as f64
    }

    #[test]
    fn fileserver_mix_follows_the_biases_and_regions_have_their_roles() {
        let config = FileServerConfig::postmark_like(400, 8);
        let mut w = FileServerWorkload::new(config.clone(), 3).unwrap();
        let layout = w.layout();
        assert_eq!(w.volume_sizes_bytes(), vec![layout.total_bytes()]);
        let mut requests = Vec::new();
        drive(&mut w, Nanos(100_000), 200_000, |_, r| requests.push(*r));
        assert_eq!(requests.len(), 200_000);
        let c = w.counts();
        let read_share = c.reads as f64 / (c.reads + c.appends) as f64;
        let create_share = c.creates as f64 / (c.creates + c.deletes) as f64;
        assert!((read_share - 0.5).abs() < 0.03, "{c:?}");
        assert!((create_share - 0.5).abs() < 0.03, "{c:?}");
        // PostMark: a transaction is one of each pair.
        let first = c.reads + c.appends;
        let second = c.creates + c.deletes;
        assert!(first.abs_diff(second) <= 8, "{c:?}");
        let mut sync_writes = 0;
        for r in &requests {
            assert_eq!(r.offset_bytes % BLOCK_BYTES, 0);
            assert!((1..=8).contains(&r.issuer));
            match layout.region(r.offset_bytes) {
                FileServerRegion::Journal => {
                    assert_eq!(r.kind, ReqKind::Write, "{r:?}");
                    assert!(r.sync, "a journal write is a sync point: {r:?}");
                    assert!(r.offset_bytes + r.len_bytes <= layout.journal_blocks * BLOCK_BYTES);
                    sync_writes += 1;
                }
                FileServerRegion::Metadata => {
                    assert_eq!(r.kind, ReqKind::Write, "{r:?}");
                    assert!(!r.sync, "{r:?}");
                    assert_eq!(r.len_bytes, BLOCK_BYTES);
                }
                FileServerRegion::Data { slot } => {
                    assert!(!r.sync, "{r:?}");
                    assert_eq!(r.len_bytes, BLOCK_BYTES);
                    let end = layout.slot_offset_bytes(slot) + layout.slot_blocks * BLOCK_BYTES;
                    assert!(r.offset_bytes + r.len_bytes <= end, "{r:?}");
                }
                FileServerRegion::Outside => panic!("outside the volume: {r:?}"),
            }
        }
        // Requests in flight when the drive stopped may be commits not yet counted the other way.
        assert!(c.commits >= sync_writes && c.commits - sync_writes <= 8);
        // Write-heavy, as a file server is: data writes of creates and
        // appends plus metadata and journal, against whole-file reads.
        let writes = write_fraction(&requests);
        assert!((0.45..0.8).contains(&writes), "write fraction {writes}");
        // The read bias moves the mix.
        let mut reads_heavy = config.clone();
        reads_heavy.read_bias = 0.9;
        let mut appends_heavy = config;
        appends_heavy.read_bias = 0.1;
        let w_reads = write_fraction(&fileserver_requests(reads_heavy, 3, 50_000));
        let w_appends = write_fraction(&fileserver_requests(appends_heavy, 3, 50_000));
        assert!(
            w_reads + 0.1 < writes && writes + 0.1 < w_appends,
            "{w_reads} {writes} {w_appends}"
        );
    }

    #[test]
    fn fileserver_appends_are_sequential_and_commits_go_round_the_journal() {
        let mut config = FileServerConfig::postmark_like(64, 4);
        config.journal_bytes = 64 * BLOCK_BYTES; // wraps often
        let mut w = FileServerWorkload::new(config.clone(), 9).unwrap();
        let layout = w.layout();
        let mut requests = Vec::new();
        drive(&mut w, Nanos(50_000), 100_000, |_, r| requests.push(*r));
        // Per slot: the end of the file so far, once a write showed it.
        let mut file_end: Vec<Option<u64>> = vec![None; layout.slots as usize];
        let (mut creates_seen, mut appends_seen) = (0, 0);
        let mut journal_next = 0u64;
        let mut checkpoint_left = [0u64; 5]; // per issuer: home writes owed
        for r in &requests {
            let block = r.offset_bytes / BLOCK_BYTES;
            let owed = &mut checkpoint_left[r.issuer as usize];
            if *owed > 0 {
                assert_eq!(
                    layout.region(r.offset_bytes),
                    FileServerRegion::Metadata,
                    "{r:?}"
                );
                *owed -= 1;
                continue;
            }
            match layout.region(r.offset_bytes) {
                FileServerRegion::Journal => {
                    let blocks = r.len_bytes / BLOCK_BYTES;
                    assert!(blocks >= 3, "descriptor, a block, commit: {r:?}");
                    if block != journal_next {
                        assert_eq!(
                            block, 0,
                            "a commit starts where the last ended, or wraps: {r:?}"
                        );
                        assert!(journal_next + blocks > layout.journal_blocks, "{r:?}");
                    }
                    journal_next = block + blocks;
                    *owed = blocks - 2;
                }
                FileServerRegion::Data { slot } if r.kind == ReqKind::Write => {
                    let at = block - layout.slot_offset_bytes(slot) / BLOCK_BYTES;
                    let end = &mut file_end[slot as usize];
                    if at == 0 {
                        creates_seen += 1;
                    } else if let Some(e) = *end {
                        assert_eq!(at, e, "a write continues the file at its end: {r:?}");
                        appends_seen += 1;
                    }
                    *end = Some(at + 1);
                }
                FileServerRegion::Data { slot } => {
                    if let Some(e) = file_end[slot as usize] {
                        let at = block - layout.slot_offset_bytes(slot) / BLOCK_BYTES;
                        assert!(at < e, "a read inside the file: {r:?}");
                    }
                }
                FileServerRegion::Metadata => panic!("a home write outside a checkpoint: {r:?}"),
                FileServerRegion::Outside => panic!("outside the volume: {r:?}"),
            }
        }
        assert!(
            creates_seen > 100 && appends_seen > 100,
            "{creates_seen} {appends_seen}"
        );
        assert!(w.counts().commits > 100, "{:?}", w.counts());
        assert!(journal_next > 0);
    }

    #[test]
    fn fileserver_is_deterministic_from_its_seed() {
        let config = FileServerConfig::postmark_like(200, 6);
        let a = fileserver_requests(config.clone(), 17, 20_000);
        let b = fileserver_requests(config.clone(), 17, 20_000);
        let c = fileserver_requests(config, 18, 20_000);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let spec = WorkloadSpec::FileServer(FileServerConfig::postmark_like(200, 6));
        assert_eq!(spec.kind_name(), "fileserver");
        let mut w = spec.build(17).unwrap();
        assert_eq!(w.poll(Nanos::ZERO), Some(a[0]));
    }

    #[test]
    fn fileserver_refuses_bad_configurations() {
        let good = FileServerConfig::postmark_like(100, 4);
        type Change = fn(&mut FileServerConfig);
        let bad: [(&str, Change); 15] = [
            ("streams", |c| c.streams = 0),
            ("streams", |c| c.streams = 1 << 20),
            ("gives no slot", |c| c.files_max = 3),
            ("files_initial", |c| c.files_initial = 1000),
            ("file_size_min_bytes", |c| c.file_size_min_bytes = 1000),
            ("exceeds file_size_max_bytes", |c| {
                c.file_size_min_bytes = 1 << 20
            }),
            ("append_bytes_max", |c| c.append_bytes_max = 0),
            ("read_bias", |c| c.read_bias = 1.5),
            ("create_bias", |c| c.create_bias = f64::NAN),
            ("sync_fraction", |c| c.sync_fraction = -0.1),
            ("pending_metadata_max", |c| c.pending_metadata_max = 2),
            ("pending_metadata_max", |c| {
                c.pending_metadata_max = u64::MAX
            }),
            ("cannot hold one commit", |c| {
                c.journal_bytes = 8 * BLOCK_BYTES
            }),
            ("files_max", |c| c.files_max = u64::MAX),
            ("too large", |c| c.file_size_max_bytes = 1 << 60),
        ];
        for (needle, change) in bad {
            let mut config = good.clone();
            change(&mut config);
            match FileServerWorkload::new(config, 1) {
                Err(WorkloadError::InvalidConfig(message)) => {
                    assert!(message.contains(needle), "{needle}: {message}")
                }
                Err(other) => panic!("{needle}: {other}"),
                Ok(_) => panic!("{needle}: accepted"),
            }
        }
        assert!(FileServerWorkload::new(good, 1).is_ok());
    }

    // ---------------------------------------------------------------- registry

    #[test]
    fn format_names_and_registry() {
        assert_eq!(TraceFormat::from_name("MSR").unwrap(), TraceFormat::Msr);
        assert_eq!(
            TraceFormat::from_name("blkparse").unwrap(),
            TraceFormat::Blkparse
        );
        let err = TraceFormat::from_name("csv").unwrap_err().to_string();
        for format in TraceFormat::ALL {
            assert!(err.contains(format.name()), "{err}");
            assert_eq!(TraceFormat::from_name(format.name()).unwrap(), format);
        }

        let spec = WorkloadSpec::Spc1(Spc1Config::closed(1 << 30, 4));
        let mut w = spec.build(1).unwrap();
        assert!(w.poll(Nanos::ZERO).is_some());
        assert_eq!(spec.kind_name(), "spc1");
        let spec = WorkloadSpec::Random(RandomConfig::writes_closed(3, 4));
        assert!(matches!(
            spec.build(1),
            Err(WorkloadError::InvalidConfig(_))
        ));
        let spec =
            WorkloadSpec::Trace(TraceConfig::new(temp_path("missing.csv"), TraceFormat::Msr));
        assert!(matches!(
            spec.build(1),
            Err(WorkloadError::Trace(TraceError::Io { .. }))
        ));
        let _ = BufReader::new(Cursor::new(Vec::<u8>::new()));
    }
}
