//! Trace-replay speed beside libcachesim's LRU, in one run: a synthetic
//! libCacheSim block CSV trace (4 KiB reads, Zipf popularity) is replayed by
//! our simulator (the real engine, LRU clean replacement, read_insert on, one
//! request in flight, as fast as possible) and by the libcachesim Python
//! package's LRU over the same requests. With one request in flight our
//! engine is exactly LRU over pages, so both sides must count the same
//! misses: the comparison checks that before it reports a speed ratio.

use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use wcache_core::time::Nanos;
use wcache_core::EngineConfig;
use wcache_models::build_device;
use wcache_sim::workload::{Replay, TraceConfig, TraceFormat, TraceWorkload};
use wcache_sim::{RunLimits, Simulation};

use crate::driver::permute;

pub const TRACE_REQUESTS: u64 = 2_000_000;
/// Footprint: 2^20 pages (4 GiB).
const FOOTPRINT_BITS: u32 = 20;
pub const CACHE_SLOTS: u64 = 65_536;
const ZIPF_S: f64 = 0.9;
const SEED: u64 = 7;
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/replay_libcachesim.py");

pub struct Side {
    pub requests: u64,
    /// Seconds of the whole replay spent before the first request (trace
    /// validation pass, set-up); 0 where not measured apart.
    pub setup_seconds: f64,
    pub misses: u64,
    pub seconds: f64,
}

impl Side {
    pub fn requests_per_s(&self) -> f64 {
        self.requests as f64 / self.seconds
    }
}

pub struct ReplayFigures {
    pub ours: Side,
    /// libcachesim's own reader and C loop; `None` when skipped.
    pub lcs: Option<Side>,
    pub lcs_plain: Option<Side>,
}

fn write_trace(path: &Path) -> std::io::Result<()> {
    let mut w = BufWriter::new(File::create(path)?);
    writeln!(w, "version,time,op,size,lbn")?;
    let zipf = Zipf::new(1u64 << FOOTPRINT_BITS, ZIPF_S).expect("valid Zipf parameters");
    let mut rng = SmallRng::seed_from_u64(SEED);
    for i in 0..TRACE_REQUESTS {
        let rank = zipf.sample(&mut rng) as u64 - 1;
        // Scatter popular pages over the footprint; lbn in 512-byte sectors.
        let lbn = permute(rank, FOOTPRINT_BITS) * 8;
        // READ(10), 4 KiB, 10 us apart (time is ignored by closed-loop replay).
        writeln!(w, "1,{},0x28,4096,{lbn}", i * 10)?;
    }
    w.flush()
}

fn replay_ours(path: &Path) -> Side {
    let t = Instant::now();
    let mut tc = TraceConfig::new(path, TraceFormat::LibCacheSim);
    tc.replay = Replay::Closed { outstanding: 1 };
    let workload = TraceWorkload::open(tc).expect("trace opens and validates");
    let setup_seconds = t.elapsed().as_secs_f64();
    let config = EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 64 * 1024,
        cache_slots: CACHE_SLOTS,
        replacement: "lru".into(),
        read_insert: true,
        keep_clean: true,
        ..EngineConfig::default()
    };
    let mut sim = Simulation::new(
        config,
        build_device("nvram").expect("nvram is a registered device"),
        build_device("ssd").expect("ssd is a registered device"),
        Box::new(workload),
        false,
    )
    .expect("valid simulation");
    sim.run(RunLimits {
        time_limit: Nanos::MAX,
        ..RunLimits::default()
    })
    .expect("replay runs");
    let seconds = t.elapsed().as_secs_f64();
    // The engine's own totals: the report's window starts after the first pump.
    let s = sim.engine().stats();
    assert_eq!(s.reads, TRACE_REQUESTS, "every trace request replayed");
    Side {
        requests: s.reads,
        setup_seconds,
        misses: s.read_pages - s.read_page_hits,
        seconds,
    }
}

enum Lcs {
    Done {
        version: String,
        lcs: Side,
        plain: Side,
    },
    Skipped(String),
}

fn replay_libcachesim(path: &Path) -> Lcs {
    let python = std::env::var("WCACHE_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = match Command::new(&python)
        .arg(SCRIPT)
        .arg(path)
        .arg(CACHE_SLOTS.to_string())
        .output()
    {
        Ok(out) => out,
        Err(e) => return Lcs::Skipped(format!("cannot run {python}: {e}")),
    };
    if out.status.code() == Some(2) {
        return Lcs::Skipped(
            "the libcachesim Python package is not installed (pip install libcachesim==0.3.5)"
                .into(),
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        panic!(
            "{SCRIPT} failed ({}): {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut version = String::from("unknown");
    let (mut lcs, mut plain) = (None, None);
    for line in stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let side = |f: &[&str]| Side {
            requests: f[1].parse().expect("request count"),
            setup_seconds: 0.0,
            misses: f[2].parse().expect("miss count"),
            seconds: f[3].parse().expect("seconds"),
        };
        match f.as_slice() {
            ["version", v] => version = v.to_string(),
            ["lcs_reader", ..] if f.len() == 4 => lcs = Some(side(&f)),
            ["plain_reader", ..] if f.len() == 4 => plain = Some(side(&f)),
            _ => panic!("{SCRIPT}: unexpected line {line:?}"),
        }
    }
    Lcs::Done {
        version,
        lcs: lcs.expect("lcs_reader line"),
        plain: plain.expect("plain_reader line"),
    }
}

fn trace_path() -> PathBuf {
    std::env::temp_dir().join(format!("wcache-bench-trace-{}.csv", std::process::id()))
}

pub fn run() -> ReplayFigures {
    println!(
        "== replay: our simulator vs libcachesim LRU on the same trace ({TRACE_REQUESTS} 4 KiB reads, Zipf s={ZIPF_S} over 2^{FOOTPRINT_BITS} pages, LRU of {CACHE_SLOTS} pages)"
    );
    let path = trace_path();
    let t = Instant::now();
    write_trace(&path).expect("write the synthetic trace");
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    println!(
        "  trace {} ({:.1} MB, generated in {:.2} s)",
        path.display(),
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let ours = replay_ours(&path);
    let lcs = replay_libcachesim(&path);
    let _ = std::fs::remove_file(&path);
    println!(
        "  {:<52} {:>10.0} req/s   ({} requests, {} misses, {:.2} s incl. {:.2} s trace validation pass)",
        "wcache-sim (engine LRU, read_insert, 1 in flight)",
        ours.requests_per_s(),
        ours.requests,
        ours.misses,
        ours.seconds,
        ours.setup_seconds
    );
    match lcs {
        Lcs::Skipped(why) => {
            println!("  SKIPPED libcachesim comparison: {why}");
            ReplayFigures {
                ours,
                lcs: None,
                lcs_plain: None,
            }
        }
        Lcs::Done {
            version,
            lcs,
            plain,
        } => {
            for (name, s) in [
                ("libcachesim LRU, own CSV reader + process_trace", &lcs),
                ("libcachesim LRU, plain Python reader + get()", &plain),
            ] {
                println!(
                    "  {:<52} {:>10.0} req/s   ({} requests, {} misses, {:.2} s)",
                    name,
                    s.requests_per_s(),
                    s.requests,
                    s.misses,
                    s.seconds
                );
            }
            println!("  libcachesim version {version}");
            let agree = ours.misses == lcs.misses && ours.misses == plain.misses;
            println!(
                "  misses agree: {} (ours {}, libcachesim {} / {})",
                if agree { "yes" } else { "NO" },
                ours.misses,
                lcs.misses,
                plain.misses
            );
            assert_eq!(
                ours.requests, lcs.requests,
                "both sides replayed the same requests"
            );
            println!(
                "  ratio ours / libcachesim: {:.3}x vs its C loop, {:.3}x vs its Python-driven loop",
                ours.requests_per_s() / lcs.requests_per_s(),
                ours.requests_per_s() / plain.requests_per_s()
            );
            ReplayFigures {
                ours,
                lcs: Some(lcs),
                lcs_plain: Some(plain),
            }
        }
    }
}
