//! DRAM bytes of engine metadata per cached page at 1 M slots, two ways:
//! `Engine::metadata_bytes()` (the engine's own account) and the counting
//! global allocator (live heap growth from before `Engine::new` to the end of
//! the fill, everything the engine holds). Three states: all clean, all dirty
//! clustered, all dirty scattered. Anchors: flashcache 24 B, dm-cache smq
//! ~25 B, Mercury 22 B; our goal <= 32 B per cached 4 KiB page.

use crate::alloc;
use crate::driver::{config, permute, Driver, CACHE_SLOTS, GROUP_PAGES, VOLUME_GROUPS_BITS};
use crate::engine_ops::{Layout, ORDERS};
use wcache_core::config::ConsistencyPoints;
use wcache_core::policy::replacement::build_replacement;
use wcache_core::time::Nanos;
use wcache_core::types::{PageKey, SlotIndex};
use wcache_core::{EngineConfig, WritePolicyKind};

pub const GOAL_BYTES_PER_PAGE: f64 = 32.0;
pub const ANCHORS: &str = "flashcache 24 B, dm-cache smq ~25 B, Mercury 22 B";

/// Pages filled: as many whole groups as stay below the 99.99 % low threshold
/// of the linear rate, so the fill never starts a destage (1,048,464 = 99.99 %).
pub const FILL_PAGES: u64 = CACHE_SLOTS * 9999 / 10000 / GROUP_PAGES * GROUP_PAGES;

/// Trim + write pairs of the churned state (half the cache).
pub const CHURN_PAIRS: u64 = CACHE_SLOTS / 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Clean,
    DirtyClustered,
    DirtyScattered,
    /// Scattered, then half the cache trimmed and rewritten elsewhere.
    DirtyChurned,
}

impl State {
    pub const ALL: [State; 4] = [
        State::Clean,
        State::DirtyClustered,
        State::DirtyScattered,
        State::DirtyChurned,
    ];
    pub fn name(self) -> &'static str {
        match self {
            State::Clean => "all clean (after destage, keep_clean)",
            State::DirtyClustered => "all dirty clustered (16 pages/group)",
            State::DirtyScattered => "all dirty scattered (1 page/group)",
            State::DirtyChurned => "all dirty scattered, after churn",
        }
    }
    pub fn short(self) -> &'static str {
        match self {
            State::Clean => "clean",
            State::DirtyClustered => "clustered",
            State::DirtyScattered => "scattered",
            State::DirtyChurned => "churned",
        }
    }
}

pub struct StateFigure {
    pub state: State,
    /// Allocator: live heap growth per cached page with the engine built and filled.
    pub live_per_page: f64,
    /// Allocator: highest heap growth per cached page during build and fill.
    pub peak_per_page: f64,
    pub metadata_per_page: f64,
}

pub struct MemoryFigures {
    pub empty_per_slot: f64,
    pub states: Vec<StateFigure>,
}

impl MemoryFigures {
    pub fn live(&self, state: State) -> f64 {
        self.states
            .iter()
            .find(|s| s.state == state)
            .map_or(f64::NAN, |s| s.live_per_page)
    }
}

fn state_config(order: &str) -> EngineConfig {
    let mut c = config(order);
    c.destage_rate = "linear".into();
    c.rate.low_threshold_pct = 99.99;
    c.rate.high_threshold_pct = 100.0;
    c
}

fn measure_state(state: State, order: &str) -> StateFigure {
    let base = alloc::live_bytes();
    alloc::reset_peak();
    let mut d = Driver::new(state_config(order));
    let layout = match state {
        State::Clean | State::DirtyClustered => Layout::Clustered,
        State::DirtyScattered | State::DirtyChurned => Layout::Scattered,
    };
    for i in 0..FILL_PAGES {
        d.write_page(layout.page(i));
    }
    assert_eq!(d.engine.stats().destages, 0, "the fill started a destage");
    assert_eq!(d.engine.dirty_pages(), FILL_PAGES);
    if state == State::DirtyChurned {
        // Steady churn: trim a filled page and write a new one elsewhere,
        // CHURN_PAIRS times; as many pages stay dirty.
        let mask = (1u64 << VOLUME_GROUPS_BITS) - 1;
        for i in 0..CHURN_PAIRS {
            d.trim_page(layout.page(i));
            // Another group's page, at an offset no filled page has there.
            let j = (i.wrapping_mul(7919) + 12345) & mask;
            d.write_page(permute(j, VOLUME_GROUPS_BITS) * GROUP_PAGES + (j + 8) % GROUP_PAGES);
        }
        assert_eq!(d.engine.dirty_pages(), FILL_PAGES);
    }
    if state == State::Clean {
        d.drain();
        assert_eq!(d.engine.dirty_groups(), 0);
    }
    let live = alloc::live_bytes() - base;
    let peak = alloc::peak_bytes() - base;
    let metadata = d.engine.metadata_bytes();
    drop(d);
    let pages = FILL_PAGES as f64;
    StateFigure {
        state,
        live_per_page: live as f64 / pages,
        peak_per_page: peak as f64 / pages,
        metadata_per_page: metadata as f64 / pages,
    }
}

/// Ordered write-back: half as many scattered pages as the fill, each
/// written twice, one page per write (so one node of the dependency graph
/// per version, the worst case): bytes per dirty version, allocator and
/// `metadata_bytes()`. Its dependencies are two integers per write: no
/// edges to count.
fn ordered_per_version() -> (f64, f64) {
    let base = alloc::live_bytes();
    let mut c = state_config("wow");
    c.write_policy = WritePolicyKind::OrderedWriteBack;
    let mut d = Driver::new(c);
    let pages = FILL_PAGES / 2;
    for round in 0..2 {
        for i in 0..pages {
            d.write_page(Layout::Scattered.page(i));
        }
        assert_eq!(d.engine.dirty_pages(), pages, "round {round}");
    }
    assert_eq!(d.engine.stats().destages, 0, "the fill started a destage");
    let live = alloc::live_bytes() - base;
    let metadata = d.engine.metadata_bytes();
    drop(d);
    let versions = (2 * pages) as f64;
    (live as f64 / versions, metadata as f64 / versions)
}

/// Journaled write-back, scattered pages: bytes per slot of the empty
/// engine, per page with every page in one open transaction (beyond the
/// empty engine), and per extra version when two more rounds overwrite
/// every page while the first transaction's checkpoint never finishes
/// (the second round's versions wait retired behind it, the third's are
/// kept for the committed second transaction).
fn journaled_bytes() -> (f64, f64, f64) {
    let mut c = state_config("wow");
    c.write_policy = WritePolicyKind::JournaledWriteBack;
    c.journal.points = ConsistencyPoints::Hint;
    let base = alloc::live_bytes();
    let mut d = Driver::new(c);
    d.hold_checkpoints = true;
    let empty = alloc::live_bytes() - base;
    // Three rounds' versions stay in the cache (none is checkpointed).
    let pages = FILL_PAGES / 4;
    let round = |d: &mut Driver| {
        for i in 0..pages {
            d.write_page(Layout::Scattered.page(i));
        }
    };
    round(&mut d);
    let one = alloc::live_bytes() - base;
    for _ in 0..2 {
        d.engine.consistency_point(Nanos(0)).expect("journaled");
        d.settle();
        round(&mut d);
    }
    let three = alloc::live_bytes() - base;
    drop(d);
    (
        empty as f64 / CACHE_SLOTS as f64,
        (one - empty) as f64 / pages as f64,
        (three - one) as f64 / (2 * pages) as f64,
    )
}

/// Log mode (format 3), scattered pages written `per_write` at a time
/// (one batch per write: the driver completes each at once), filling
/// three quarters of the ring (reclaim keeps the last eighth free): bytes
/// per cached page with the engine built and filled, allocator and
/// `metadata_bytes()`. A batch costs the log a span (and its header slot),
/// so the figure depends on how many pages a batch carries.
fn log_mode_per_page(per_write: u64) -> (f64, f64, f64) {
    let base = alloc::live_bytes();
    let mut c = state_config("wow");
    c.persistent = true;
    c.log = true;
    let mut d = Driver::new(c);
    let writes = CACHE_SLOTS * 3 / 4 / (per_write + 1);
    for i in 0..writes {
        // Whole groups' worth of consecutive pages, the groups scattered.
        let first = Layout::Scattered.page(i) / GROUP_PAGES * GROUP_PAGES;
        d.write_pages(first, per_write);
    }
    let pages = writes * per_write;
    assert_eq!(d.engine.stats().destages, 0, "the fill started a destage");
    assert_eq!(d.engine.dirty_pages(), pages);
    let live = alloc::live_bytes() - base;
    let metadata = d.engine.metadata_bytes();
    drop(d);
    let per_page = |bytes: usize| bytes as f64 / pages as f64;
    (
        per_page(live),
        per_page(metadata),
        live as f64 / CACHE_SLOTS as f64,
    )
}

/// LRU alone, sized for 1 M slots and holding all of them.
fn lru_alone() -> (usize, usize) {
    let base = alloc::live_bytes();
    let mut lru = build_replacement("lru", CACHE_SLOTS as usize).expect("lru is registered");
    for s in 0..CACHE_SLOTS as u32 {
        lru.insert(SlotIndex(s), PageKey(s as u64));
    }
    let live = alloc::live_bytes() - base;
    (live, lru.metadata_bytes())
}

pub fn run() -> MemoryFigures {
    println!("== memory: DRAM bytes of engine metadata per cached 4 KiB page, 1 M slots");
    println!(
        "   {FILL_PAGES} cached pages in 1,048,576 slots (WOW, LRU clean replacement, linear rate 99.99/100 % so the fill never destages)"
    );
    println!("   anchors: {ANCHORS}; goal <= {GOAL_BYTES_PER_PAGE} B");
    let base = alloc::live_bytes();
    let d = Driver::new(state_config("wow"));
    let empty = alloc::live_bytes() - base;
    let empty_md = d.engine.metadata_bytes();
    drop(d);
    let empty_per_slot = empty as f64 / CACHE_SLOTS as f64;
    println!(
        "  {:<40} allocator {:>6.2} B/slot   metadata_bytes() {:>6.2} B/slot",
        "empty engine (sized at start)",
        empty_per_slot,
        empty_md as f64 / CACHE_SLOTS as f64
    );
    let mut states = Vec::new();
    for state in State::ALL {
        let f = measure_state(state, "wow");
        let verdict = if f.live_per_page <= GOAL_BYTES_PER_PAGE {
            "within goal"
        } else {
            "OVER the 32 B goal"
        };
        println!(
            "  {:<40} allocator {:>6.2} B/page (peak {:>6.2})   metadata_bytes() {:>6.2} B/page   {verdict}",
            state.name(),
            f.live_per_page,
            f.peak_per_page,
            f.metadata_per_page
        );
        states.push(f);
    }

    print_structures();
    MemoryFigures {
        empty_per_slot,
        states,
    }
}

/// Where the bytes go: each structure, policy and mode alone.
fn print_structures() {
    println!("  where the bytes go (each structure alone, allocator vs its metadata_bytes()):");
    let (lru, lru_md) = lru_alone();
    println!(
        "    {:<44} {:>6.2} B/slot   (metadata_bytes {:>6.2})",
        "LRU clean replacement, 1 M slots",
        lru as f64 / CACHE_SLOTS as f64,
        lru_md as f64 / CACHE_SLOTS as f64
    );
    for order in ORDERS.iter().filter(|&&o| o != "wow") {
        let f = measure_state(State::DirtyScattered, order);
        println!(
            "    {:<44} {:>6.2} B/page   (metadata_bytes {:>6.2})",
            format!("{} with the {order} order", State::DirtyScattered.name()),
            f.live_per_page,
            f.metadata_per_page
        );
    }
    let (live, md) = ordered_per_version();
    println!(
        "    {:<44} {:>6.2} B/version (metadata_bytes {:>6.2}; 0 B per edge: none are kept)",
        "write-back-ordered, 2 versions per page", live, md
    );
    let (slot, page, version) = journaled_bytes();
    println!(
        "    {:<44} {:>6.2} B/slot empty, {:>6.2} B/page in the open transaction, {:>6.2} B per extra version",
        "write-back-journaled, scattered", slot, page, version
    );
    for per_write in [1, 16] {
        let (live, md, per_slot) = log_mode_per_page(per_write);
        println!(
            "    {:<44} {:>6.2} B/page   (metadata_bytes {:>6.2}; {:>6.2} B/slot: 3/4 of the ring filled, a header slot per batch)",
            format!("log mode (format 3), {per_write} page(s) per batch"),
            live,
            md,
            per_slot
        );
    }
}
