//! wcache-bench: benchmarks of the engine and the simulator, printed as
//! absolute figures and as ratios measured side by side in one run (the
//! machines are shared and noisy; see docs/benchmarks.md). Nothing here is
//! a test: figures are printed, never asserted against a time.
//!
//! `cargo run --release -p wcache-bench -- <engine|memory|sim|replay|all>`

mod alloc;
mod driver;
mod engine_ops;
mod memory;
mod replay;
mod sim_speed;

use std::time::Instant;

#[global_allocator]
static GLOBAL: alloc::CountingAllocator = alloc::CountingAllocator;

const USAGE: &str = "usage: wcache-bench <engine|memory|sim|replay|all>
  engine  engine ops/s at 1 M cached pages: write hit, write miss, destage pick (WOW, LRW, CSCAN)
  memory  DRAM bytes of engine metadata per cached page (metadata_bytes() and a counting allocator)
  sim     simulator requests/s (wall clock): random writes and SPC-1-like on RAID-5
  replay  trace replay requests/s beside libcachesim's LRU on the same trace
  all     all of the above, then one SUMMARY line";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = match args.as_slice() {
        [w] => w.as_str(),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if !matches!(which, "engine" | "memory" | "sim" | "replay" | "all") {
        eprintln!("unknown benchmark {which:?}\n{USAGE}");
        std::process::exit(2);
    }
    let all = which == "all";
    let t = Instant::now();
    let mut summary: Vec<String> = Vec::new();

    if all || which == "engine" {
        let t = Instant::now();
        let f = engine_ops::run();
        use engine_ops::Layout::{Clustered, Scattered};
        summary.push(format!(
            "write hit {:.0} ns ({:.2} M ops/s), miss {:.0} ns; pick WOW/LRW {:.2}x scattered {:.2}x clustered, CSCAN/LRW {:.2}x/{:.2}x",
            f.write_hit_ns,
            1e3 / f.write_hit_ns,
            f.write_miss_ns,
            f.pick_ns("wow", Scattered) / f.pick_ns("lrw", Scattered),
            f.pick_ns("wow", Clustered) / f.pick_ns("lrw", Clustered),
            f.pick_ns("cscan", Scattered) / f.pick_ns("lrw", Scattered),
            f.pick_ns("cscan", Clustered) / f.pick_ns("lrw", Clustered),
        ));
        println!("  (engine part took {:.1} s)\n", t.elapsed().as_secs_f64());
    }
    if all || which == "memory" {
        let t = Instant::now();
        let f = memory::run();
        let parts: Vec<String> = memory::State::ALL
            .iter()
            .map(|&s| format!("{} {:.1}", s.short(), f.live(s)))
            .collect();
        summary.push(format!(
            "memory B/page {} (goal 32; empty engine {:.1} B/slot)",
            parts.join(", "),
            f.empty_per_slot
        ));
        println!("  (memory part took {:.1} s)\n", t.elapsed().as_secs_f64());
    }
    if all || which == "sim" {
        let t = Instant::now();
        let f = sim_speed::run();
        let parts: Vec<String> = f
            .iter()
            .map(|s| format!("{:.0}k", s.requests_per_s() / 1e3))
            .collect();
        summary.push(format!("sim req/s random/spc1 {}", parts.join("/")));
        println!("  (sim part took {:.1} s)\n", t.elapsed().as_secs_f64());
    }
    if all || which == "replay" {
        let t = Instant::now();
        let f = replay::run();
        summary.push(match (&f.lcs, &f.lcs_plain) {
            (Some(lcs), Some(plain)) => format!(
                "replay ours/libcachesim {:.2}x vs C loop, {:.2}x vs Python loop ({:.0}k vs {:.0}k/{:.0}k req/s)",
                f.ours.requests_per_s() / lcs.requests_per_s(),
                f.ours.requests_per_s() / plain.requests_per_s(),
                f.ours.requests_per_s() / 1e3,
                lcs.requests_per_s() / 1e3,
                plain.requests_per_s() / 1e3
            ),
            _ => format!(
                "replay {:.0}k req/s, libcachesim SKIPPED",
                f.ours.requests_per_s() / 1e3
            ),
        });
        println!("  (replay part took {:.1} s)\n", t.elapsed().as_secs_f64());
    }
    println!("(total {:.1} s)", t.elapsed().as_secs_f64());
    if all {
        println!("SUMMARY: {}", summary.join(" | "));
    }
}
