//! Counters the engine keeps, read through one visitor so that stats,
//! metrics and experiments see the same numbers.

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub reads: u64,
    /// Reads whose every page was in the cache.
    pub read_hits: u64,
    pub read_pages: u64,
    pub read_page_hits: u64,
    pub read_inserts: u64,
    pub writes: u64,
    pub write_pages: u64,
    /// Written pages whose latest version was already dirty in the cache.
    pub write_page_hits: u64,
    /// Of those, pages whose dirty version was being destaged: the new
    /// version needs a destage of its own, so the hit saves none.
    pub write_page_hits_destaging: u64,
    /// (request, group) pairs that found the group already a destage candidate.
    pub write_group_hits: u64,
    /// Of those, pairs whose write was sequential (WOW lines 2-4 leave the bit alone).
    pub write_group_hits_sequential: u64,
    pub trims: u64,
    pub flushes: u64,
    /// Write requests that found no room and waited for destages.
    pub stalls: u64,
    pub stall_ns_total: u64,
    /// Destage requests issued (one contiguous run within a group each).
    pub destages: u64,
    pub destaged_pages: u64,
    /// Groups picked by the destage order.
    pub destage_picks: u64,
    /// Groups the destage pointer passed over, clearing their recency bit (WOW lines 20-23).
    pub destage_skips: u64,
    /// Sum over consecutive destage pairs of |start address difference|, in 512 B sectors.
    pub destage_distance_sectors_sum: u128,
    pub destage_distance_pairs: u64,
    pub destage_errors: u64,
    pub evictions: u64,
    pub io_errors: u64,
}

impl Stats {
    /// Counts since `earlier` (a snapshot of the same engine).
    pub fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            reads: self.reads - earlier.reads,
            read_hits: self.read_hits - earlier.read_hits,
            read_pages: self.read_pages - earlier.read_pages,
            read_page_hits: self.read_page_hits - earlier.read_page_hits,
            read_inserts: self.read_inserts - earlier.read_inserts,
            writes: self.writes - earlier.writes,
            write_pages: self.write_pages - earlier.write_pages,
            write_page_hits: self.write_page_hits - earlier.write_page_hits,
            write_page_hits_destaging: self.write_page_hits_destaging
                - earlier.write_page_hits_destaging,
            write_group_hits: self.write_group_hits - earlier.write_group_hits,
            write_group_hits_sequential: self.write_group_hits_sequential
                - earlier.write_group_hits_sequential,
            trims: self.trims - earlier.trims,
            flushes: self.flushes - earlier.flushes,
            stalls: self.stalls - earlier.stalls,
            stall_ns_total: self.stall_ns_total - earlier.stall_ns_total,
            destages: self.destages - earlier.destages,
            destaged_pages: self.destaged_pages - earlier.destaged_pages,
            destage_picks: self.destage_picks - earlier.destage_picks,
            destage_skips: self.destage_skips - earlier.destage_skips,
            destage_distance_sectors_sum: self.destage_distance_sectors_sum
                - earlier.destage_distance_sectors_sum,
            destage_distance_pairs: self.destage_distance_pairs - earlier.destage_distance_pairs,
            destage_errors: self.destage_errors - earlier.destage_errors,
            evictions: self.evictions - earlier.evictions,
            io_errors: self.io_errors - earlier.io_errors,
        }
    }

    pub fn write_hit_ratio(&self) -> f64 {
        ratio(self.write_page_hits, self.write_pages)
    }
    pub fn read_hit_ratio(&self) -> f64 {
        ratio(self.read_hits, self.reads)
    }
    pub fn destage_distance_sectors_mean(&self) -> f64 {
        if self.destage_distance_pairs == 0 {
            0.0
        } else {
            self.destage_distance_sectors_sum as f64 / self.destage_distance_pairs as f64
        }
    }

    /// Visit every counter by name (units in the name).
    pub fn visit(&self, f: &mut dyn FnMut(&'static str, f64)) {
        f("reads", self.reads as f64);
        f("read_hits", self.read_hits as f64);
        f("read_pages", self.read_pages as f64);
        f("read_page_hits", self.read_page_hits as f64);
        f("read_inserts", self.read_inserts as f64);
        f("writes", self.writes as f64);
        f("write_pages", self.write_pages as f64);
        f("write_page_hits", self.write_page_hits as f64);
        f(
            "write_page_hits_destaging",
            self.write_page_hits_destaging as f64,
        );
        f("write_group_hits", self.write_group_hits as f64);
        f(
            "write_group_hits_sequential",
            self.write_group_hits_sequential as f64,
        );
        f("trims", self.trims as f64);
        f("flushes", self.flushes as f64);
        f("stalls", self.stalls as f64);
        f("stall_ns_total", self.stall_ns_total as f64);
        f("destages", self.destages as f64);
        f("destaged_pages", self.destaged_pages as f64);
        f("destage_picks", self.destage_picks as f64);
        f("destage_skips", self.destage_skips as f64);
        f(
            "destage_distance_sectors_mean",
            self.destage_distance_sectors_mean(),
        );
        f("destage_errors", self.destage_errors as f64);
        f("evictions", self.evictions as f64);
        f("io_errors", self.io_errors as f64);
        f("write_hit_ratio", self.write_hit_ratio());
        f("read_hit_ratio", self.read_hit_ratio());
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
