//! The fault plan's parts, one at a time: an empty plan changes nothing,
//! EIO at the k-th operation strikes once and reaches the engine, latency
//! spikes slow responses, and a crash needs a persistent engine.

use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_models::build_device;
use wcache_sim::faults::FaultPlan;
use wcache_sim::run::{RunLimits, SimError, SimReport, Simulation};
use wcache_sim::workload::{RandomConfig, WorkloadSpec};

fn simulation(persistent: bool) -> Simulation {
    let config = EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 16384,
        cache_slots: 64,
        write_policy: WritePolicyKind::WriteBack,
        persistent,
        ..EngineConfig::default()
    };
    let mut c = RandomConfig::writes_closed(1024 * 1024, 4);
    c.read_fraction = 0.3;
    let workload = WorkloadSpec::Random(c).build(5).expect("workload");
    Simulation::new(
        config,
        build_device("nvram").unwrap(),
        build_device("ssd").unwrap(),
        workload,
        true,
    )
    .expect("simulation")
}

fn limits() -> RunLimits {
    RunLimits {
        measure_requests: 2_000,
        check_data: true,
        ..RunLimits::default()
    }
}

fn run_with(spec: &str, crash_at: Option<u64>) -> SimReport {
    let plan = FaultPlan::parse(spec).expect("spec");
    simulation(crash_at.is_some())
        .with_faults(plan, 5, crash_at)
        .expect("faults")
        .run(limits())
        .expect("run")
}

#[test]
fn an_empty_plan_changes_nothing() {
    let plain = simulation(false).run(limits()).expect("run");
    let faulted = run_with("", None);
    assert_eq!(plain.window_ns, faulted.window_ns);
    assert_eq!(plain.stats.destages, faulted.stats.destages);
    assert_eq!(plain.sectors_checked, faulted.sectors_checked);
    assert_eq!(faulted.faults, Default::default());
}

#[test]
fn eio_at_the_kth_operation_strikes_once_and_reaches_the_engine() {
    let r = run_with("cache-write-eio=@10", None);
    assert_eq!(r.faults.eio, 1);
    assert_eq!(r.stats.destage_errors, 0);
    let r = run_with("backing-write-eio=@3", None);
    assert_eq!(r.faults.eio, 1);
    assert_eq!(
        r.stats.destage_errors, 1,
        "a destage is write-back's only backing write"
    );
    let r = run_with("cache-read-eio=0.05,backing-write-eio=0.05", None);
    assert!(r.faults.eio > 50, "{:?}", r.faults);
    assert!(r.stats.destage_errors > 10, "{}", r.stats.destage_errors);
}

#[test]
fn latency_spikes_slow_responses() {
    let plain = run_with("", None);
    let spiky = run_with("spike=0.1:2", None);
    assert!(spiky.faults.spikes > 100, "{:?}", spiky.faults);
    assert!(
        spiky.response_ms_mean > plain.response_ms_mean * 2.0,
        "{} vs {}",
        spiky.response_ms_mean,
        plain.response_ms_mean
    );
}

#[test]
fn a_crash_needs_a_persistent_engine_and_recovers_once() {
    let e = simulation(false)
        .with_faults(FaultPlan::default(), 5, Some(10))
        .err()
        .expect("refused");
    assert!(matches!(e, SimError::CrashNeedsPersistent), "{e}");
    let r = run_with("torn", Some(500));
    assert_eq!(r.faults.crashes, 1);
    assert!(r.backing_sectors_checked > 0);
    // A crash point past the run's last write never fires.
    let r = run_with("torn", Some(1 << 40));
    assert_eq!(r.faults.crashes, 0);
}
