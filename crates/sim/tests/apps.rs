//! The simulated applications (PostgreSQL-like, Redis-like): their request
//! streams follow the seed, their write mix the configuration, and their
//! criticality hints say what the paper's protocols say (Fig. 3a, 3c),
//! each inheritance ended by the end of a run, in the driver as in whole
//! simulations.

use wcache_core::time::Nanos;
use wcache_core::EngineConfig;
use wcache_models::build_device;
use wcache_models::HddParams;
use wcache_sim::experiment::backing_per_volume;
use wcache_sim::faults::FaultPlan;
use wcache_sim::run::{RunLimits, SimReport, Simulation};
use wcache_sim::workload::{
    CriticalityHint, IoRequest, PgLikeConfig, PgLikeWorkload, PgWriteMix, RedisLikeConfig,
    RedisLikeWorkload, Stop, Workload, WorkloadSpec,
};

/// Drive a workload against a device that answers every request after
/// `service_ns` (all in parallel): the requests in order, and the hints in
/// order with the time and the request count at which each came.
fn drive(
    w: &mut dyn Workload,
    service_ns: u64,
    requests: u64,
) -> (Vec<IoRequest>, Vec<(u64, CriticalityHint)>) {
    let mut now = Nanos::ZERO;
    let mut in_flight: Vec<(Nanos, u64)> = Vec::new();
    let mut issued = Vec::new();
    let mut hints = Vec::new();
    while (issued.len() as u64) < requests {
        while w.next_arrival().is_some_and(|t| t <= now) {
            let Some(r) = w.poll(now) else { break };
            issued.push(r);
            in_flight.push((Nanos(now.0 + service_ns), r.id));
            while let Some(h) = w.take_hint() {
                hints.push((issued.len() as u64, h));
            }
        }
        while let Some(h) = w.take_hint() {
            hints.push((issued.len() as u64, h));
        }
        let next_done = in_flight.iter().map(|c| c.0).min();
        let next = [w.next_arrival(), next_done].into_iter().flatten().min();
        let Some(t) = next else { break };
        now = now.max(t);
        in_flight.sort_by_key(|c| (c.0, c.1));
        while in_flight.first().is_some_and(|c| c.0 <= now) {
            let (_, id) = in_flight.remove(0);
            w.complete(now, id);
            while let Some(h) = w.take_hint() {
                hints.push((issued.len() as u64, h));
            }
        }
    }
    (issued, hints)
}

/// The engine-side balance of a hint sequence: causes in force per issuer
/// never below zero; returns the causes left at the end.
fn balance(hints: &[(u64, CriticalityHint)]) -> std::collections::BTreeMap<u32, i64> {
    let mut open = std::collections::BTreeMap::new();
    for (_, h) in hints {
        match *h {
            CriticalityHint::Inherit(i) => *open.entry(i).or_insert(0) += 1,
            CriticalityHint::EndInherit(i) => {
                let n = open.entry(i).or_insert(0);
                *n -= 1;
                assert!(*n >= 0, "issuer {i} ended an inheritance it did not have");
            }
        }
    }
    open.retain(|_, n| *n != 0);
    open
}

#[test]
fn the_same_seed_gives_the_same_requests_and_hints_and_another_seed_others() {
    let pg = |seed| {
        let mut w = PgLikeWorkload::new(PgLikeConfig::tpcc_like(24), seed).expect("valid");
        drive(&mut w, 2_000_000, 20_000)
    };
    let (a, ha) = pg(3);
    let (b, hb) = pg(3);
    assert_eq!(a, b);
    assert_eq!(ha, hb);
    let (c, _) = pg(4);
    assert_ne!(a, c);
    // The log's writes are the same whichever commands update; the
    // commands served in the same number of writes are not.
    let redis = |seed| {
        let mut w = RedisLikeWorkload::new(RedisLikeConfig::ycsb_a(40), seed).expect("valid");
        let (reqs, hints) = drive(&mut w, 200_000, 20_000);
        (reqs, hints, w.counts())
    };
    assert_eq!(redis(5), redis(5));
    assert_ne!(redis(5).2, redis(6).2);
}

#[test]
fn pglike_writes_follow_the_configured_mix_when_the_background_keeps_up() {
    let mut w = PgLikeWorkload::new(PgLikeConfig::tpcc_like(24), 1).expect("valid");
    let (reqs, _) = drive(&mut w, 100_000, 200_000);
    let report = w.app_report().expect("an application");
    let mix = PgWriteMix::paper();
    for (role, want) in [
        ("backends", mix.backends),
        ("checkpointer", mix.checkpointer),
        ("kworker", mix.kworker),
        ("log_writer", mix.log_writer),
    ] {
        let got = report.write_share(role);
        assert!(
            (got - want).abs() < 0.03,
            "{role}: {got:.4} of the writes, configured {want:.4}"
        );
    }
    assert!(report.write_share("jbd2") < 0.01);
    // Backends' and the checkpointer's writes are sync, the kworker's not;
    // WAL writes go to the WAL volume.
    let c = w.counts();
    assert!(c.checkpoints > 0 && c.journal_commits > 0 && c.wal_writes_log_writer > 0);
    assert_eq!(c.evictions, 0, "the background writers kept up");
    let n = 24;
    for r in &reqs {
        let kworker = r.issuer == n + 3;
        assert_eq!(r.sync, !kworker, "{r:?}");
        if r.issuer <= n && r.volume == 0 {
            // A backend's data write: only overwrites of pages under writeback here.
            assert_eq!(r.len_bytes, 4096);
        }
    }
    assert!(c.writeback_overwrites > 0);
}

#[test]
fn redislike_updates_go_to_the_log_and_wait_for_the_journal() {
    let mut w = RedisLikeWorkload::new(RedisLikeConfig::ycsb_a(40), 2).expect("valid");
    let (reqs, hints) = drive(&mut w, 200_000, 150_000);
    let c = w.counts();
    let update_share = c.updates as f64 / c.commands as f64;
    assert!(
        (update_share - 0.5).abs() < 0.02,
        "{update_share} of commands updated"
    );
    // Each update's fsync waits for a journal commit: jbd2 (issuer 4) inherits.
    let jbd2_inherits = hints
        .iter()
        .filter(|(_, h)| *h == CriticalityHint::Inherit(4))
        .count() as u64;
    assert!(
        jbd2_inherits >= c.updates - 1,
        "{jbd2_inherits} of {}",
        c.updates
    );
    let main_writes = reqs.iter().filter(|r| r.issuer == 1).count() as u64;
    assert_eq!(main_writes, c.updates);
    assert!(reqs.iter().filter(|r| r.issuer == 1).all(|r| r.sync));
    assert!(c.snapshots + c.rewrites > 0, "{c:?}");
}

/// A configuration where the log writer runs often and WAL segments are
/// short, so that it often holds the lock while waiting for the journal.
fn cascade_config() -> PgLikeConfig {
    let mut c = PgLikeConfig::tpcc_like(8);
    c.mix = PgWriteMix {
        backends: 0.5,
        checkpointer: 0.2,
        log_writer: 0.2,
        jbd2: 0.0,
        kworker: 0.1,
    };
    c.wal_segment_bytes = 64 * 1024;
    c
}

#[test]
fn a_backend_blocked_by_the_log_writer_makes_it_inherit_until_the_lock_is_released() {
    // Fig. 3a at the application level: the log writer (issuer 9 with 8
    // backends) holds the WAL lock; a backend that waits for it makes the
    // log writer inherit, and the inheritance ends when the backend gets
    // the lock.
    let mut w = PgLikeWorkload::new(cascade_config(), 7).expect("valid");
    let (reqs, hints) = drive(&mut w, 3_000_000, 30_000);
    let log_writer = 9;
    let inherits: Vec<u64> = hints
        .iter()
        .filter(|(_, h)| *h == CriticalityHint::Inherit(log_writer))
        .map(|&(at, _)| at)
        .collect();
    assert!(inherits.len() > 10, "{} inheritances", inherits.len());
    // Between an inherit and its end, the log writer's writes come as
    // those of a critical process: at least one log-writer write lands there.
    let mut open = 0i64;
    let mut writes_while_inheriting = 0;
    let mut hint_iter = hints.iter().peekable();
    for (k, r) in reqs.iter().enumerate() {
        while let Some((at, h)) = hint_iter.peek() {
            if *at > k as u64 {
                break;
            }
            match h {
                CriticalityHint::Inherit(i) if *i == log_writer => open += 1,
                CriticalityHint::EndInherit(i) if *i == log_writer => open -= 1,
                _ => {}
            }
            hint_iter.next();
        }
        if open > 0 && r.issuer == log_writer {
            writes_while_inheriting += 1;
        }
    }
    assert!(writes_while_inheriting > 0);
    assert!(w.counts().lock_waits > 0);
}

#[test]
fn a_cascade_through_the_lock_and_the_journal_makes_both_inherit() {
    // Fig. 3c: a backend waits for the WAL lock held by the log writer (P2,
    // issuer 9), who waits for a journal commit of jbd2 (P3, issuer 12):
    // both inherit from the one wait, in chain order.
    let mut w = PgLikeWorkload::new(cascade_config(), 11).expect("valid");
    let (_, hints) = drive(&mut w, 3_000_000, 60_000);
    let cascades = hints
        .windows(2)
        .filter(|p| {
            p[0].1 == CriticalityHint::Inherit(9)
                && p[1].1 == CriticalityHint::Inherit(12)
                && p[0].0 == p[1].0
        })
        .count();
    assert!(cascades > 0, "no cascade in {} hints", hints.len());
    // No end before its inherit; what is open at the cut is at most one
    // cause per waiting backend (8) for each of the two.
    let open = balance(&hints);
    assert!(open.values().all(|&n| n <= 8), "{open:?}");
}

fn pg_sim(admission: &str, stop_s: u64) -> (SimReport, Simulation) {
    pg_sim_crashing(admission, stop_s, None)
}

fn pg_sim_crashing(admission: &str, stop_s: u64, crash_at: Option<u64>) -> (SimReport, Simulation) {
    // 24 backends, an NV-DRAM cache of 32 MiB, data and WAL on their own disks.
    let mut c = PgLikeConfig::tpcc_like(24);
    c.stop = Stop {
        requests_max: None,
        end: Some(Nanos::from_ms(stop_s * 1000)),
    };
    let workload = WorkloadSpec::PgLike(c).build(1).expect("valid");
    let backing = backing_per_volume(&HddParams::ultrastar_10k(), &workload.volume_sizes_bytes());
    let config = EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 64 * 1024,
        cache_slots: 8192,
        admission: admission.into(),
        persistent: crash_at.is_some(),
        ..EngineConfig::default()
    };
    let sim = Simulation::new(
        config,
        build_device("nvram").expect("model"),
        backing,
        workload,
        true,
    )
    .expect("simulation");
    let mut sim = match crash_at {
        Some(k) => sim
            .with_faults(FaultPlan::default(), 1, Some(k))
            .expect("a persistent engine"),
        None => sim,
    };
    let r = sim
        .run(RunLimits {
            warmup_ns: 1_000_000_000,
            check_data: true,
            ..RunLimits::default()
        })
        .expect("run");
    (r, sim)
}

#[test]
fn every_inheritance_is_ended_by_the_end_of_a_simulation_and_data_checks() {
    let (r, sim) = pg_sim("cp-pi", 15);
    let app = r.app.expect("an application");
    assert!(app.inherits_total > 0, "{app:?}");
    assert_eq!(app.inherits_open, 0, "{app:?}");
    assert!(app.requests > 0 && app.per_s > 0.0);
    assert!(app.latency_ms_p50 <= app.latency_ms_p99);
    assert!(app.latency_ms_p99 <= app.latency_ms_p9999);
    for issuer in 1..=28 {
        assert!(
            !sim.engine().issuer_criticality(issuer).1,
            "issuer {issuer}"
        );
    }
    // Backends are hinted critical by the application itself.
    assert!(sim.engine().issuer_criticality(1).0);
    assert!(
        !sim.engine().issuer_criticality(25).0,
        "the log writer is not"
    );
    assert!(
        r.backing_sectors_checked > 0,
        "the drained backing was checked"
    );
}

#[test]
fn inheritances_in_force_at_a_crash_are_given_to_the_recovered_engine() {
    // Without them, the first end after the crash would be refused by the
    // new engine (SimError::Hint) and the run would fail. (cp-pi: a crash
    // under cp-pi-ioi panics in the data model today, with any workload:
    // docs/experiments/rdc.md.)
    let (r, sim) = pg_sim_crashing("cp-pi", 10, Some(20_000));
    assert_eq!(r.faults.crashes, 1);
    let app = r.app.expect("an application");
    assert!(app.inherits_total > 0);
    assert_eq!(app.inherits_open, 0, "{app:?}");
    for issuer in 1..=28 {
        assert!(
            !sim.engine().issuer_criticality(issuer).1,
            "issuer {issuer}"
        );
    }
    assert!(
        sim.engine().issuer_criticality(1).0,
        "hinted again after the crash"
    );
    assert!(r.backing_sectors_checked > 0);
}

#[test]
fn bad_parameters_are_errors_that_name_them() {
    let mut c = PgLikeConfig::tpcc_like(24);
    c.backends = 0;
    let e = PgLikeWorkload::new(c, 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("backends"), "{e}");
    let mut c = PgLikeConfig::tpcc_like(24);
    c.data_bytes = 1000;
    let e = PgLikeWorkload::new(c, 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("data_bytes"), "{e}");
    let mut c = PgLikeConfig::tpcc_like(24);
    c.mix.kworker = 0.5;
    let e = PgLikeWorkload::new(c, 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("mix"), "{e}");
    let mut c = RedisLikeConfig::ycsb_a(40);
    c.update_fraction = 1.5;
    let e = RedisLikeWorkload::new(c, 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("update_fraction"), "{e}");
    let mut c = RedisLikeConfig::ycsb_a(40);
    c.child_write_bytes = 100;
    let e = RedisLikeWorkload::new(c, 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("child_write_bytes"), "{e}");
}

/// rdc-redis's set-up (NV-DRAM cache), the first 8 s of virtual time.
fn redis_point(policy: &str) -> SimReport {
    use wcache_sim::experiment::{rdc, run_point};
    let opts = rdc::Options {
        quick: true,
        seeds: 1,
        check_data: true,
        disk_queue_depth: HddParams::ultrastar_10k().queue_depth,
    };
    let mut p = rdc::points("rdc-redis", &opts)
        .expect("an experiment")
        .into_iter()
        .find(|p| p.policy == policy && p.cache_device == "nvram")
        .expect("the point");
    p.limits = RunLimits {
        measure_ns: 8_000_000_000,
        time_limit: Nanos::from_ms(8_000),
        check_data: true,
        ..RunLimits::default()
    };
    run_point(&p).expect("run")
}

/// The longest wait of the Redis-like main process for a journal commit, ms.
fn journal_wait_max_ms(r: &SimReport) -> f64 {
    let app = r.app.as_ref().expect("an app report");
    let (_, w) = (app.waits.iter())
        .find(|(what, _)| *what == "journal commit")
        .expect("journal waits");
    w.max_ms()
}

/// jbd2's periodic commit (at 5 s, with nobody waiting) is not critical,
/// but its journal pages are dirty in the cache, so it goes through the
/// cache to the disk, where it waits behind the log rewrite's 256 KiB
/// writes; the main process's next fsync then waits for it, and jbd2
/// inherits. Under `cp-pi` that wait lasted over a second. Under
/// `cp-pi-ioi` the inheritance promotes the commit's backing write like a
/// bypass (answered from the cache), and the data still check.
#[test]
fn redislike_main_never_waits_for_a_periodic_commit_on_the_disk_under_cp_pi_ioi() {
    let cp_pi = redis_point("cp-pi");
    assert!(
        journal_wait_max_ms(&cp_pi) > 500.0,
        "the set-up has the long wait: {} ms",
        journal_wait_max_ms(&cp_pi)
    );
    let ioi = redis_point("cp-pi-ioi");
    assert!(ioi.stats.reissued_writes >= 1);
    assert!(
        journal_wait_max_ms(&ioi) < 10.0,
        "{} ms",
        journal_wait_max_ms(&ioi)
    );
    assert!(ioi.sectors_checked + ioi.backing_sectors_checked > 0);
}
