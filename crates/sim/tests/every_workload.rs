//! Every entry of the workload registry (`WORKLOADS`), iterated from the
//! registry itself, so a workload is tested the day it is registered: a
//! short simulation of each with the data checker on, and the options each
//! says it refuses refused, the others taken.

use std::path::PathBuf;

use wcache_core::EngineConfig;
use wcache_models::{build_device, HddParams};
use wcache_sim::experiment::backing_per_volume;
use wcache_sim::run::{RunLimits, Simulation};
use wcache_sim::workload::{
    HrrwModel, IssuerMix, WorkloadOptionError, WorkloadOptions, WorkloadRun, WORKLOADS,
};

const MIB: u64 = 1024 * 1024;

/// A directory of its own holding a small MSR trace of reads and writes
/// (removed when dropped).
struct TraceDir(PathBuf);

impl TraceDir {
    /// `test` names the directory, apart from the other tests' running beside it.
    fn new(test: &str) -> TraceDir {
        let dir = std::env::temp_dir().join(format!("wcache-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("trace directory");
        let mut trace =
            String::from("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n");
        for i in 0..4000u64 {
            let kind = if i % 3 == 0 { "Read" } else { "Write" };
            let offset = (i * 7919 % 4096) * 4096;
            trace.push_str(&format!("{},h,0,{kind},{offset},8192,10\n", 1000 * i));
        }
        std::fs::write(dir.join("trace.csv"), trace).expect("trace");
        TraceDir(dir)
    }

    fn trace(&self) -> PathBuf {
        self.0.join("trace.csv")
    }
}

impl Drop for TraceDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Options every workload takes: nothing given that any refuses, a 256 MiB
/// backing for those that do not lay out their own volumes, a trace.
fn options(trace: PathBuf) -> WorkloadOptions {
    WorkloadOptions {
        footprint_bytes: None,
        backing_bytes: Some(256 * MIB),
        outstanding: None,
        target_iops: None,
        read_fraction: 0.0,
        issuers: IssuerMix::default(),
        hrrw: HrrwModel::default(),
        bsus: None,
        trace: Some(trace),
        trace_format: "msr".into(),
        trace_speed: None,
        files: 200,
        cpu_us: None,
    }
}

/// Each workload, built from its registry entry, runs 3000 requests through
/// the engine on a disk per volume with every read checked against the data
/// model and the backing checked after the final drain.
#[test]
fn every_registered_workload_runs_with_the_checker_on() {
    let dir = TraceDir::new("every-workload-runs");
    for entry in WORKLOADS.entries {
        let name = entry.name;
        let kind = (entry.build)(());
        let mut o = options(dir.trace());
        if kind.takes_issuers() {
            // Reads too, where the workload has none of its own.
            o.read_fraction = 0.3;
        }
        let run = WorkloadRun::new(name, &o).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(run.spec.kind_name(), name, "the spec names its entry");
        assert!(run.label.starts_with(name), "{name}: {}", run.label);
        let workload = run.spec.build(7).unwrap_or_else(|e| panic!("{name}: {e}"));
        let sizes = workload.volume_sizes_bytes();
        assert!(run.footprint_bytes(&sizes) > 0, "{name}");
        let backing = backing_per_volume(&HddParams::ultrastar_10k(), &sizes);
        let config = EngineConfig {
            page_size_bytes: 4096,
            group_size_bytes: 64 * 1024,
            cache_slots: 1024,
            ..EngineConfig::default()
        };
        let cache = build_device("nvram").expect("nvram");
        let mut sim = Simulation::new(config, cache, backing, workload, true)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let limits = RunLimits {
            warmup_requests: 100,
            measure_requests: 3000,
            check_data: true,
            ..RunLimits::default()
        };
        let r = sim.run(limits).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.requests, 3000, "{name}: requests measured");
        assert_eq!(r.rejected_requests, 0, "{name}: {:?}", r.first_rejection);
        assert!(r.stats.writes > 0, "{name}: no write");
        // The applications keep their data in memory and only write it.
        assert!(
            r.stats.reads == 0 || r.sectors_checked > 0,
            "{name}: reads not checked"
        );
        assert!(r.backing_sectors_checked > 0, "{name}: backing not checked");
        assert_eq!(r.app.is_some(), kind.application(), "{name}: app report");
    }
}

/// What each workload says it does not take is refused, by the option's
/// name, and what it takes is accepted: a target rate (closed loop only), a
/// CPU time and a footprint (applications), an issuer mix.
#[test]
fn every_registered_workload_refuses_exactly_the_options_it_does_not_take() {
    let dir = TraceDir::new("every-workload-refuses");
    for entry in WORKLOADS.entries {
        let name = entry.name;
        let kind = (entry.build)(());
        let refused = |change: fn(&mut WorkloadOptions)| -> Option<String> {
            let mut o = options(dir.trace());
            change(&mut o);
            match WorkloadRun::new(name, &o) {
                Ok(_) => None,
                Err(WorkloadOptionError::Option(message)) => Some(message),
                Err(other) => panic!("{name}: {other}"),
            }
        };
        type Change = fn(&mut WorkloadOptions);
        // (the option, refused by this workload, the options with it given)
        let cases: [(&str, bool, Change); 4] = [
            ("--target-iops", kind.closed_loop_only().is_some(), |o| {
                o.target_iops = Some(500.0)
            }),
            ("--cpu-us", !kind.application(), |o| o.cpu_us = Some(5.0)),
            ("--footprint", kind.application(), |o| {
                o.footprint_bytes = Some(64 * MIB)
            }),
            ("--issuers", !kind.takes_issuers(), |o| {
                o.issuers = IssuerMix {
                    issuers: 4,
                    critical_issuers: 1,
                    sync_fraction: 0.5,
                }
            }),
        ];
        for (option, refuses, change) in cases {
            match refused(change) {
                Some(message) => {
                    assert!(refuses, "{name} refused {option}: {message}");
                    assert!(message.contains(option), "{name}: {message}");
                    assert!(message.contains(name), "{name}: {message}");
                }
                None => assert!(!refuses, "{name} took {option}"),
            }
        }
    }
    let unknown = WorkloadRun::new("tape", &options(dir.trace())).expect_err("no such workload");
    let listed = WORKLOADS.names().join(", ");
    assert_eq!(
        unknown.to_string(),
        format!("unknown workload \"tape\"; valid: {listed}")
    );
}
