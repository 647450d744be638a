//! Simulator speed: requests per second of wall clock for the WOW paper's
//! random-write workload on RAID-5 and for SPC-1-like on RAID-5, built
//! directly on `wcache_sim::Simulation` with the experiment set-up (256 KiB
//! stripe groups, adaptive rate, no read cache, NVRAM cache device).

use std::time::Instant;
use wcache_core::EngineConfig;
use wcache_models::build_device;
use wcache_sim::workload::{RandomConfig, Spc1Config, WorkloadSpec, OUTSTANDING_MAX_DEFAULT};
use wcache_sim::{RunLimits, Simulation};

const NVS_PAGES: u64 = 16_384;
const REQUESTS: u64 = 1_000_000;
const SEED: u64 = 1;
/// WOW's Partial Backend: 7.1 M sectors.
const PARTIAL_BACKEND_BYTES: u64 = 7_100_000 * 512;

pub struct SimFigure {
    pub name: &'static str,
    pub requests: u64,
    pub wall_s: f64,
    pub virtual_iops: f64,
}

impl SimFigure {
    pub fn requests_per_s(&self) -> f64 {
        self.requests as f64 / self.wall_s
    }
}

fn engine(order: &str) -> EngineConfig {
    EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 256 * 1024,
        cache_slots: NVS_PAGES,
        destage_order: order.into(),
        destage_rate: "adaptive".into(),
        keep_clean: false,
        read_insert: false,
        requests_max: OUTSTANDING_MAX_DEFAULT as u32 + 64,
        ..EngineConfig::default()
    }
}

fn run_one(name: &'static str, workload: WorkloadSpec) -> SimFigure {
    let t = Instant::now();
    let backing = build_device("raid5").expect("raid5 is a registered device");
    let cache = build_device("nvram").expect("nvram is a registered device");
    let w = workload.build(SEED).expect("valid workload");
    let mut sim =
        Simulation::new(engine("wow"), cache, backing, w, false).expect("valid simulation");
    let report = sim
        .run(RunLimits {
            warmup_requests: 0,
            measure_requests: REQUESTS,
            ..RunLimits::default()
        })
        .expect("simulation runs");
    let wall_s = t.elapsed().as_secs_f64();
    assert!(report.requests >= REQUESTS, "simulation stopped early");
    SimFigure {
        name,
        requests: report.requests,
        wall_s,
        virtual_iops: report.iops,
    }
}

pub fn run() -> Vec<SimFigure> {
    println!(
        "== sim: simulator requests per second of wall clock (RAID-5 4+1 HDD model, NVRAM cache, WOW, {NVS_PAGES} NVS pages, {REQUESTS} requests, seed {SEED})"
    );
    let raid5_bytes = build_device("raid5")
        .map(|d| d.capacity_bytes() / 4096 * 4096)
        .expect("raid5 is a registered device");
    let figures = vec![
        run_one(
            "random writes, RAID-5 full backend, closed 16",
            WorkloadSpec::Random(RandomConfig::writes_closed(raid5_bytes, 16)),
        ),
        run_one(
            "SPC-1-like, RAID-5 partial backend, open 3000 IOPS",
            WorkloadSpec::Spc1(Spc1Config::open(PARTIAL_BACKEND_BYTES, 3000.0)),
        ),
    ];
    for f in &figures {
        println!(
            "  {:<52} {:>10.0} req/s wall   ({} requests in {:.2} s; {:.0} IOPS simulated)",
            f.name,
            f.requests_per_s(),
            f.requests,
            f.wall_s,
            f.virtual_iops
        );
    }
    figures
}
