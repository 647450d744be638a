//! Request-oriented admission in whole simulations: with requests tagged by
//! issuer and sync, `cp` caches only the sync writes of critical issuers and
//! sends the rest around the cache, every read and the drained backing
//! still check against the data model, and `all` caches every write of the
//! same request stream.

use wcache_core::EngineConfig;
use wcache_models::build_device;
use wcache_sim::run::{RunLimits, SimReport, Simulation};
use wcache_sim::workload::{IssuerMix, Loop, RandomConfig, WorkloadSpec};

fn run(admission: &str, seed: u64) -> SimReport {
    run_over(admission, seed, 16 << 20)
}

fn run_over(admission: &str, seed: u64, footprint_bytes: u64) -> SimReport {
    let config = EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 64 * 1024,
        cache_slots: 512,
        admission: admission.into(),
        ..EngineConfig::default()
    };
    let mut c = RandomConfig::writes_closed(footprint_bytes, 16);
    c.read_fraction = 0.3;
    c.arrivals = Loop::Closed { outstanding: 16 };
    c.issuers = IssuerMix {
        issuers: 8,
        critical_issuers: 2,
        sync_fraction: 0.5,
    };
    let mix = c.issuers;
    let workload = WorkloadSpec::Random(c).build(seed).expect("workload");
    let mut sim = Simulation::new(
        config,
        build_device("nvram").expect("cache model"),
        build_device("hdd").expect("backing model"),
        workload,
        true,
    )
    .expect("simulation");
    for issuer in mix.critical() {
        sim.set_critical_issuer(issuer).expect("issuer");
    }
    sim.run(RunLimits {
        warmup_requests: 0,
        measure_requests: 4000,
        check_data: true,
        ..RunLimits::default()
    })
    .expect("run")
}

#[test]
fn cp_caches_only_critical_sync_writes_and_keeps_data_exact() {
    for seed in [1, 2, 3] {
        let all = run("all", seed);
        let cp = run("cp", seed);
        for r in [&all, &cp] {
            assert!(r.sectors_checked > 1000, "seed {seed}: reads checked");
            assert!(
                r.backing_sectors_checked > 0,
                "seed {seed}: backing checked"
            );
        }
        assert_eq!(all.stats.write_bypasses, 0, "seed {seed}");
        let cached = cp.stats.writes - cp.stats.write_bypasses;
        // One write in eight is a critical issuer's sync write (2 of 8
        // issuers, half of the writes sync); a bypass over a page the cache
        // holds dirty goes through the cache, so a few more are cached.
        let critical = cp.critical_writes.writes;
        assert!(critical > 0, "seed {seed}");
        assert!(cached >= critical, "seed {seed}: {cached} < {critical}");
        assert!(
            cached * 4 < cp.stats.writes,
            "seed {seed}: cp cached {cached} of {} writes",
            cp.stats.writes
        );
        assert!(
            cp.critical_writes.mean_ms < cp.other_writes.mean_ms,
            "seed {seed}: {:?} vs {:?}",
            cp.critical_writes,
            cp.other_writes
        );
    }
}

/// CP+PI+IOI over a small footprint, so that critical writes often find a
/// bypass in flight over their page: those are reissued to the cache and
/// answered early (the simulator keeps buffers past answers), their late
/// originals discarded, and every read and the drained backing still check
/// against the data model.
#[test]
fn cp_pi_ioi_reissues_bypasses_and_keeps_data_exact() {
    for seed in [1, 2] {
        let r = run_over("cp-pi-ioi", seed, 1 << 20);
        assert!(r.sectors_checked > 1000, "seed {seed}: reads checked");
        assert!(
            r.backing_sectors_checked > 0,
            "seed {seed}: backing checked"
        );
        assert!(
            r.stats.reissued_writes > 5,
            "seed {seed}: {} reissued",
            r.stats.reissued_writes
        );
        assert!(
            r.stats.discarded_completions > 0,
            "seed {seed}: answered early, originals discarded"
        );
        let cp_pi = run_over("cp-pi", seed, 1 << 20);
        assert_eq!(cp_pi.stats.reissued_writes, 0);
    }
}
