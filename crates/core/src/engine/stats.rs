//! Counters the engine keeps. Each is named once, in `counters!`, which
//! makes the struct and the window arithmetic (`since`), so that a new
//! counter cannot be left out of either.

/// Declares `Stats` with these counters and `Stats::since`.
macro_rules! counters {
    ($($(#[doc = $doc:expr])* $name:ident: $ty:ty,)*) => {
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct Stats {
            $($(#[doc = $doc])* pub $name: $ty,)*
        }

        impl Stats {
            /// Counts since `earlier` (a snapshot of the same engine).
            pub fn since(&self, earlier: &Stats) -> Stats {
                Stats {
                    $($name: self.$name - earlier.$name,)*
                }
            }

            /// Report every counter, named as its field, its doc as help.
            pub fn visit(&self, v: &mut dyn MetricsVisitor) {
                $(v.metric(
                    MetricKind::Counter,
                    stringify!($name),
                    concat!("", $($doc),*).trim_start(),
                    u64::try_from(self.$name).unwrap_or(u64::MAX),
                );)*
            }
        }
    };
}

use crate::metrics::{MetricKind, MetricsVisitor};

counters! {
    /// Read requests.
    reads: u64,
    /// Reads whose every page was in the cache.
    read_hits: u64,
    /// Pages read (a request counts each page it touches).
    read_pages: u64,
    /// Of those, pages found in the cache.
    read_page_hits: u64,
    /// Pages of read misses inserted into the cache as clean copies.
    read_inserts: u64,
    /// Write and write-zeroes requests admitted (after any stall).
    writes: u64,
    /// Pages written (a request counts each page it touches).
    write_pages: u64,
    /// Written pages whose latest version was already dirty in the cache.
    write_page_hits: u64,
    /// Of those, pages whose dirty version was being destaged: the new
    /// version needs a destage of its own, so the hit saves none.
    write_page_hits_destaging: u64,
    /// (request, group) pairs of random (not sequential) writes that found
    /// a page of theirs dirty: they join a destage already due instead of
    /// adding one (an online drain's ETA counts them).
    random_write_page_hits: u64,
    /// (request, group) pairs that found the group already a destage candidate.
    write_group_hits: u64,
    /// Of those, pairs whose write was sequential (WOW lines 2-4 leave the bit alone).
    write_group_hits_sequential: u64,
    /// Write requests sent to the backing only (write-around, or not
    /// admitted), their cached clean copies dropped.
    write_bypasses: u64,
    /// Pages of those writes (what the cache was spared, in pages).
    write_bypassed_pages: u64,
    /// Pages of writes admitted to the cache whose issuer was critical by a
    /// hint, or that the front end marked critical (the paper's CP).
    admitted_pages_hinted: u64,
    /// Pages of writes admitted to the cache whose issuer was critical by
    /// inheritance only (what process criticality inheritance adds).
    admitted_pages_inherited: u64,
    /// Bypass writes in flight reissued to the cache (promoted) by I/O
    /// criticality inheritance, for a critical request that waited on them.
    reissued_writes: u64,
    /// Pages those reissues wrote to the cache.
    reissued_pages: u64,
    /// Backing writes of promoted bypasses that landed after their request
    /// was answered from the cache: their completions were discarded.
    discarded_completions: u64,
    /// Trim requests.
    trims: u64,
    /// Flush requests.
    flushes: u64,
    /// Write requests that found no room and waited for destages.
    stalls: u64,
    /// Time stalled writes waited for room, summed.
    stall_ns_total: u64,
    /// Destage requests issued (one contiguous run within a group each).
    destages: u64,
    /// Pages those destages wrote to the backing.
    destaged_pages: u64,
    /// Groups picked by the destage order.
    destage_picks: u64,
    /// Groups the destage pointer passed over, clearing their recency bit (WOW lines 20-23).
    destage_skips: u64,
    /// Groups destaged out of order because a page in them reached the
    /// maximum dirty age.
    expired_groups: u64,
    /// Sum over consecutive destage pairs of |start address difference|, in 512 B sectors.
    destage_distance_sectors_sum: u128,
    /// Consecutive destage pairs in that sum.
    destage_distance_pairs: u64,
    /// Destages that failed (their pages stay dirty and are retried).
    destage_errors: u64,
    /// Clean pages evicted to make room.
    evictions: u64,
    /// Requests and slot frees that failed with a device error.
    io_errors: u64,
    /// Log mode: batches sealed (each one write of the cache device).
    log_batches: u64,
    /// Log mode: moves of the log's tail made durable (`AdvanceLog`).
    log_advances: u64,
    /// Log mode: checkpoints of the log's replay made durable (`LogCheckpoint`).
    log_checkpoints: u64,
    /// Log mode: groups destaged because a dirty page was in the tail's way.
    log_forced_destages: u64,
    /// Log mode: live dirty pages reclaim copied from the tail to the head
    /// (instead of destaging their groups).
    log_copies: u64,
    /// Log mode: pages of the batches reclaim met (each batch once, at the
    /// tail or when destaging ahead of it, whichever came first).
    log_tail_pages: u64,
    /// Of those, pages still their page's current version when met (live:
    /// reclaim destages, copies or drops them).
    log_tail_live_pages: u64,
    /// Of those, dirty when met.
    log_tail_dirty_pages: u64,
    /// Log mode: old versions freed without a free in the log (a written
    /// newer version supersedes them).
    log_frees_superseded: u64,
}

impl Stats {
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
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// What one volume holds and how its pages hit, for operators (per export).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeCounts {
    /// Its pages newer in the cache than on the backing (a gauge).
    pub dirty_pages: u64,
    /// Pages read, and of those found in the cache.
    pub read_pages: u64,
    pub read_page_hits: u64,
    /// Pages written, and of those written over a dirty page.
    pub write_pages: u64,
    pub write_page_hits: u64,
    /// Pages destaged to its backing (as the engine's `destaged_pages`).
    pub destaged_pages: u64,
}
