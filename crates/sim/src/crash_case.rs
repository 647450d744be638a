//! One small crash run, named by (write policy, seed, fault plan, crash
//! point), built exactly as `wcache sim` builds it from the command line that
//! [`CrashCase::command_line`] prints, so that a failing seed of the crash
//! tests replays with one command. The configuration mirrors the CLI's
//! defaults for the flags it names; a change to either must keep them equal.

use crate::faults::FaultPlan;
use crate::run::{RunLimits, SimError, SimReport, Simulation};
use crate::workload::{RandomConfig, WorkloadSpec, OUTSTANDING_MAX_DEFAULT};
use wcache_core::config::{CheckpointMode, ConsistencyPoints, JournalConfig, StalenessConfig};
use wcache_core::policy::destage_rate::RateConfig;
use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_models::{build_device, build_device_with, HddParams};

const BACKEND: &str = "ssd";
const CACHE_DEVICE: &str = "nvram";
const CACHE_PAGES: u64 = 32;
/// Format 3's smallest cache (`wcache_core::config`'s log minimum).
const LOG_CACHE_PAGES: u64 = 64;
const PAGE_BYTES: u64 = 4096;
const GROUP_BYTES: u64 = 16384;
const FOOTPRINT_KIB: u64 = 256;
const READ_FRACTION: f64 = 0.3;
const OUTSTANDING: u64 = 4;

#[derive(Clone, Debug, PartialEq)]
pub struct CrashCase {
    pub policy: WritePolicyKind,
    pub seed: u64,
    /// The `--faults` SPEC.
    pub faults: String,
    /// Device write at which power fails.
    pub crash_at: u64,
    pub requests: u64,
    /// Admission's sequential cutoff (`--sequential-cutoff`; 0: none).
    pub sequential_cutoff_bytes: u64,
    /// Maximum dirty age in milliseconds (`--max-dirty-age`; 0: none) and
    /// idle destages (`--idle-destages`, idle after `IDLE_AFTER_MS`).
    pub max_dirty_age_ms: u64,
    pub idle_destages: u32,
    /// Journaled write-back: the commit size in pages (`--commit-pages`),
    /// the commit age in milliseconds (`--commit-age`), and whether
    /// checkpoints go through a backing journal or the NVRAM model
    /// (`--checkpoint`).
    pub commit_pages: u64,
    pub commit_age_ms: u64,
    pub nvram: bool,
    /// Consistency points by hint every this many answered writes
    /// (`--consistency-points hint --consistency-point-every N`; 0: none).
    pub point_every: u64,
    /// The cache device as format 3, a log of batches (`--cache-format 3`).
    pub log: bool,
}

/// When a case with idle destages counts as idle.
const IDLE_AFTER_MS: u64 = 5;

fn mix(mut x: u64) -> u64 {
    // splitmix64's finalizer: independent-looking choices from a seed.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn write_share(policy: WritePolicyKind) -> u64 {
    if policy.goes_around() {
        2
    } else {
        4
    }
}

impl CrashCase {
    /// Seed `seed`'s case: a crash point among the run's device writes and
    /// a fault plan (EIO on either device, latency spikes, torn writes; the
    /// cache device is lost at every fourth seed's crash, failed writes
    /// land at every third seed, and every fourth crashes several times),
    /// plus `extra` fault items. Every fifth seed runs with a sequential
    /// cutoff of two pages, so that some writes (those continuing one of the
    /// streams the cutoff tracks) go around the cache and others do not.
    /// Every third seed bounds staleness (a maximum dirty age of 50 ms and
    /// an idle drain), so groups are also destaged out of the order's turn.
    pub fn for_seed(policy: WritePolicyKind, seed: u64, requests: u64, extra: &str) -> CrashCase {
        let h = mix(seed);
        let eio = ["0", "0.005", "0.02"][(h % 3) as usize];
        let mut faults = format!(
            "torn,cache-read-eio={eio},cache-write-eio={eio},backing-read-eio={eio},backing-write-eio={eio},spike=0.02:5"
        );
        if (h >> 8).is_multiple_of(4) {
            faults.push_str(",lose-cache");
        }
        if (h >> 12).is_multiple_of(3) {
            faults.push_str(",eio-lands");
        }
        let mut crash_at = 1 + (h >> 16) % (requests * write_share(policy) / 3);
        if (h >> 20).is_multiple_of(4) {
            // Crash again and again, a few dozen writes apart: crashes
            // while a recovered engine frees its old versions.
            crash_at = 1 + (h >> 16) % 60;
            faults.push_str(&format!(",crashes={}", 2 + (h >> 24) % 4));
        }
        if !extra.is_empty() {
            faults.push(',');
            faults.push_str(extra);
        }
        // Ordered and journaled write-back admit every write (a bypass would
        // reach the backing out of order).
        let ordered = policy.keeps_backing_consistent();
        let sequential_cutoff_bytes = if (h >> 28).is_multiple_of(5) && !ordered {
            2 * PAGE_BYTES
        } else {
            0
        };
        let (max_dirty_age_ms, idle_destages) = if (h >> 32).is_multiple_of(3) {
            (50, 2)
        } else {
            (0, 0)
        };
        CrashCase {
            policy,
            seed,
            faults,
            sequential_cutoff_bytes,
            max_dirty_age_ms,
            idle_destages,
            // Transactions of 1 to 8 pages, committed by size or after
            // 20 ms; every other seed checkpoints through the NVRAM model.
            commit_pages: 1 + (h >> 36) % 8,
            commit_age_ms: 20,
            nvram: (h >> 40).is_multiple_of(2),
            // Every third seed commits at hinted consistency points only
            // (each crash then checks App-C).
            point_every: if policy.journaled() && (h >> 44).is_multiple_of(3) {
                1 + (h >> 48) % 12
            } else {
                0
            },
            // Within the run's device writes: about two per write under
            // write-back and write-through, one under write-around.
            crash_at,
            requests,
            log: false,
        }
    }

    /// Seed `seed`'s crash point with exactly the fault plan `faults` (no
    /// random faults of its own): the consistency grid's cases.
    pub fn with_faults(
        policy: WritePolicyKind,
        seed: u64,
        requests: u64,
        faults: &str,
    ) -> CrashCase {
        let h = mix(seed);
        CrashCase {
            policy,
            seed,
            faults: faults.to_string(),
            crash_at: 1 + (h >> 16) % (requests * write_share(policy) / 3),
            requests,
            sequential_cutoff_bytes: 0,
            max_dirty_age_ms: 0,
            idle_destages: 0,
            commit_pages: 4,
            commit_age_ms: 20,
            nvram: false,
            point_every: 0,
            log: false,
        }
    }

    /// The `wcache sim` command that runs this case.
    pub fn command_line(&self) -> String {
        format!(
            "wcache sim --backend {BACKEND} --cache-device {CACHE_DEVICE} --cache-pages {} \
             --page-size {PAGE_BYTES} --group-size {GROUP_BYTES} --write-policy {} --workload random \
             --footprint {FOOTPRINT_KIB}K --read-fraction {READ_FRACTION} --outstanding {OUTSTANDING} \
             --warmup 0 --requests {} --sequential-cutoff {} --max-dirty-age {}ms --idle-destages {} --idle-after {IDLE_AFTER_MS}ms \
             --commit-pages {} --commit-age {}ms --checkpoint {} --consistency-points {} --consistency-point-every {} \
             --seed {} --faults {} --crash-at {}{} --check",
            self.cache_pages(),
            self.policy.name(),
            self.requests,
            self.sequential_cutoff_bytes,
            self.max_dirty_age_ms,
            self.idle_destages,
            self.commit_pages,
            self.commit_age_ms,
            if self.nvram { "nvram" } else { "backing-journal" },
            if self.point_every > 0 { "hint" } else { "size" },
            self.point_every,
            self.seed,
            self.faults,
            self.crash_at,
            if self.log { " --cache-format 3" } else { "" },
        )
    }

    fn cache_pages(&self) -> u64 {
        if self.log {
            LOG_CACHE_PAGES
        } else {
            CACHE_PAGES
        }
    }

    /// Run the case: Err when the run fails, data integrity included.
    pub fn run(&self) -> Result<SimReport, SimError> {
        // As `wcache sim` builds it from `command_line()`.
        let backing =
            build_device_with(BACKEND, &HddParams::ultrastar_10k()).expect("a known backing model");
        let cache = build_device(CACHE_DEVICE).expect("a known cache model");
        let engine = EngineConfig {
            page_size_bytes: PAGE_BYTES,
            group_size_bytes: GROUP_BYTES,
            cache_slots: self.cache_pages(),
            write_policy: self.policy,
            destage_order: "wow".into(),
            destage_rate: "adaptive".into(),
            rate: RateConfig::default(),
            replacement: "lru".into(),
            admission: "all".into(),
            critical_volumes: Vec::new(),
            volume_admissions: Vec::new(),
            log: self.log,
            sequential_cutoff_bytes: self.sequential_cutoff_bytes,
            staleness: StalenessConfig {
                max_dirty_age_ns: self.max_dirty_age_ms * 1_000_000,
                idle_after_ns: IDLE_AFTER_MS * 1_000_000,
                idle_destages: self.idle_destages,
            },
            journal: JournalConfig {
                commit_pages: self.commit_pages,
                commit_age_ns: self.commit_age_ms * 1_000_000,
                points: if self.point_every > 0 {
                    ConsistencyPoints::Hint
                } else {
                    ConsistencyPoints::Size
                },
                checkpoint: if self.nvram {
                    CheckpointMode::Nvram
                } else {
                    CheckpointMode::BackingJournal {
                        pages: self.cache_pages(),
                    }
                },
                ..JournalConfig::default()
            },
            read_insert: false,
            keep_clean: false,
            requests_max: OUTSTANDING_MAX_DEFAULT as u32 + 64,
            persistent: true,
            buffers_outlive_answers: true,
        };
        let mut c = RandomConfig::writes_closed(FOOTPRINT_KIB * 1024, OUTSTANDING);
        c.read_fraction = READ_FRACTION;
        let workload = WorkloadSpec::Random(c).build(self.seed)?;
        let plan = FaultPlan::parse(&self.faults).expect("the case's fault spec parses");
        let mut sim = Simulation::new(engine, cache, backing, workload, true)?.with_faults(
            plan,
            self.seed,
            Some(self.crash_at),
        )?;
        if self.point_every > 0 {
            sim = sim.with_points(self.point_every);
        }
        sim.run(RunLimits {
            warmup_requests: 0,
            measure_requests: self.requests,
            check_data: true,
            ..RunLimits::default()
        })
    }
}
