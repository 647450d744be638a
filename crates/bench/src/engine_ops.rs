//! Engine operations per second at 1 M cached pages, driven by the trivial
//! driver: write hit, write miss, and destage pick (pick + issue + completion)
//! for WOW, LRW and CSCAN. Each figure is the median of `ROUNDS` rounds on
//! fresh engines; the ratios between them come from the same run.

use crate::driver::{
    config, median, permute, Driver, CACHE_SLOTS, GROUP_PAGES, VOLUME_GROUPS_BITS,
    VOLUME_PAGES_BITS,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;

const ROUNDS: usize = 3;
/// Dirty pages written before the write-miss phase (50 % of the cache).
const PREFILL_PAGES: u64 = CACHE_SLOTS / 2;
/// Write misses measured: the cache goes from 50 % to 75 % dirty, below the
/// 80 % low threshold, so no destage runs while writes are timed.
const MISS_PAGES: u64 = CACHE_SLOTS / 4;
const HIT_OPS: u64 = 1_000_000;
/// Dirty pages before a destage-pick measurement (50 % of the cache).
const PICK_FILL_PAGES: u64 = CACHE_SLOTS / 2;
pub const ORDERS: [&str; 3] = ["wow", "lrw", "cscan"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One dirty page per 64 KiB group: one destage of one page per pick.
    Scattered,
    /// 16 dirty pages per group: one destage of 16 pages per pick.
    Clustered,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Scattered => "scattered (1 page/group)",
            Layout::Clustered => "clustered (16 pages/group)",
        }
    }
    /// The page written `i`-th when filling in this layout; distinct for distinct `i`.
    pub fn page(self, i: u64) -> u64 {
        match self {
            Layout::Scattered => permute(i, VOLUME_GROUPS_BITS) * GROUP_PAGES + (i % GROUP_PAGES),
            Layout::Clustered => {
                permute(i / GROUP_PAGES, VOLUME_GROUPS_BITS) * GROUP_PAGES + i % GROUP_PAGES
            }
        }
    }
}

pub struct PickFigure {
    pub order: &'static str,
    pub layout: Layout,
    pub picks: u64,
    pub pages: u64,
    pub ns_per_pick: f64,
}

pub struct EngineFigures {
    pub write_hit_ns: f64,
    pub write_miss_ns: f64,
    pub picks: Vec<PickFigure>,
}

impl EngineFigures {
    pub fn pick_ns(&self, order: &str, layout: Layout) -> f64 {
        self.picks
            .iter()
            .find(|p| p.order == order && p.layout == layout)
            .map_or(f64::NAN, |p| p.ns_per_pick)
    }
}

fn ops_line(name: &str, ns: f64, note: &str) {
    println!(
        "  {name:<34} {ns:>8.1} ns/op {:>12.0} ops/s   {note}",
        1e9 / ns
    );
}

/// One round of write misses then write hits on a fresh WOW engine.
fn write_round(seed: u64) -> (f64, f64) {
    // Uniform random pages over the 64 GiB volume (mostly one per group).
    let page = |i: u64| permute(i, VOLUME_PAGES_BITS);
    let mut d = Driver::new(config("wow"));
    for i in 0..PREFILL_PAGES {
        d.write_page(page(i));
    }
    let before = d.engine.stats().clone();
    let t = Instant::now();
    for i in PREFILL_PAGES..PREFILL_PAGES + MISS_PAGES {
        d.write_page(page(i));
    }
    let miss_ns = t.elapsed().as_nanos() as f64 / MISS_PAGES as f64;
    let s = d.engine.stats().since(&before);
    assert_eq!(s.write_pages, MISS_PAGES);
    assert_eq!(s.write_page_hits, 0, "a write-miss op hit");
    assert_eq!(s.destages, 0, "a destage ran while write misses were timed");

    let mut rng = SmallRng::seed_from_u64(seed);
    let written = PREFILL_PAGES + MISS_PAGES;
    let hits: Vec<u64> = (0..HIT_OPS)
        .map(|_| page(rng.gen_range(0..written)))
        .collect();
    let before = d.engine.stats().clone();
    let t = Instant::now();
    for &p in &hits {
        d.write_page(p);
    }
    let hit_ns = t.elapsed().as_nanos() as f64 / HIT_OPS as f64;
    let s = d.engine.stats().since(&before);
    assert_eq!(s.write_page_hits, HIT_OPS, "a write-hit op missed");
    assert_eq!(s.destages, 0, "a destage ran while write hits were timed");
    assert_eq!(d.engine.dirty_pages(), written);
    (miss_ns, hit_ns)
}

/// Fill with dirty pages, then time draining them all: every pick, its
/// destage commands and their completions.
fn pick_round(order: &'static str, layout: Layout) -> (u64, u64, f64) {
    let mut d = Driver::new(config(order));
    for i in 0..PICK_FILL_PAGES {
        d.write_page(layout.page(i));
    }
    assert_eq!(d.engine.stats().destages, 0, "destaged during the fill");
    let before = d.engine.stats().clone();
    let t = Instant::now();
    d.drain();
    let elapsed_ns = t.elapsed().as_nanos() as f64;
    let s = d.engine.stats().since(&before);
    assert_eq!(s.destaged_pages, PICK_FILL_PAGES);
    let per_pick = match layout {
        Layout::Scattered => 1,
        Layout::Clustered => GROUP_PAGES,
    };
    assert_eq!(s.destage_picks, PICK_FILL_PAGES / per_pick);
    assert_eq!(s.destages, s.destage_picks, "one destage per group");
    (
        s.destage_picks,
        s.destaged_pages,
        elapsed_ns / s.destage_picks as f64,
    )
}

/// Destage pick cost per order and layout, the median of `ROUNDS` each.
fn pick_figures() -> Vec<PickFigure> {
    let mut picks = Vec::new();
    for layout in [Layout::Scattered, Layout::Clustered] {
        for order in ORDERS {
            let mut ns = Vec::new();
            let mut counts = (0, 0);
            for _ in 0..ROUNDS {
                let (p, pages, n) = pick_round(order, layout);
                counts = (p, pages);
                ns.push(n);
            }
            picks.push(PickFigure {
                order,
                layout,
                picks: counts.0,
                pages: counts.1,
                ns_per_pick: median(ns),
            });
        }
    }
    picks
}

pub fn run() -> EngineFigures {
    println!("== engine: ops/s at 1 M cached pages (4 KiB pages, 64 KiB groups, write-back)");
    println!(
        "   driver completes every command at once, no data; median of {ROUNDS} rounds, fresh engine each"
    );
    let mut misses = Vec::new();
    let mut hits = Vec::new();
    for round in 0..ROUNDS {
        let (m, h) = write_round(round as u64 + 1);
        misses.push(m);
        hits.push(h);
    }
    let write_miss_ns = median(misses);
    let write_hit_ns = median(hits);
    ops_line(
        "write hit (overwrite dirty page)",
        write_hit_ns,
        "WOW, 75 % dirty, uniform random page",
    );
    ops_line(
        "write miss (new page, free slot)",
        write_miss_ns,
        "WOW, 50 -> 75 % dirty",
    );

    let picks = pick_figures();
    println!(
        "  destage pick + issue + completion (drain of {PICK_FILL_PAGES} dirty pages, keep_clean):"
    );
    for p in &picks {
        let per_page = p.ns_per_pick * p.picks as f64 / p.pages as f64;
        ops_line(
            &format!("{:<5} {}", p.order, p.layout.name()),
            p.ns_per_pick,
            &format!("{per_page:.1} ns/destaged page, {} picks", p.picks),
        );
    }
    let f = EngineFigures {
        write_hit_ns,
        write_miss_ns,
        picks,
    };
    for layout in [Layout::Scattered, Layout::Clustered] {
        let lrw = f.pick_ns("lrw", layout);
        println!(
            "  ratio pick cost vs LRW, {}: WOW {:.2}x, CSCAN {:.2}x",
            layout.name(),
            f.pick_ns("wow", layout) / lrw,
            f.pick_ns("cscan", layout) / lrw
        );
    }
    f
}
