//! A trivial in-process driver: it completes every command the moment the
//! engine issues it, moves no data, and answers nothing but the engine. What
//! it times is therefore the engine's own metadata work per operation.
//!
//! It must not allocate per operation (the memory benchmark counts the heap).

use wcache_core::time::Nanos;
use wcache_core::types::{RequestId, VolumeId};
use wcache_core::{Engine, EngineConfig, IoCommand, Request, RequestFlags, RequestKind};

pub const PAGE_BYTES: u64 = 4096;
pub const GROUP_BYTES: u64 = 64 * 1024;
pub const GROUP_PAGES: u64 = GROUP_BYTES / PAGE_BYTES;
/// 1 M cached pages.
pub const CACHE_SLOTS: u64 = 1 << 20;
/// The volume every benchmark writes: 2^24 pages (64 GiB) = 2^20 groups.
pub const VOLUME_PAGES_BITS: u32 = 24;
pub const VOLUME_GROUPS_BITS: u32 = VOLUME_PAGES_BITS - GROUP_PAGES.trailing_zeros();
const _: () = assert!(GROUP_PAGES.is_power_of_two());
const _: () = assert!(1u64 << VOLUME_GROUPS_BITS >= CACHE_SLOTS);

/// The engine configuration every engine benchmark starts from.
pub fn config(destage_order: &str) -> EngineConfig {
    EngineConfig {
        page_size_bytes: PAGE_BYTES,
        group_size_bytes: GROUP_BYTES,
        cache_slots: CACHE_SLOTS,
        destage_order: destage_order.into(),
        ..EngineConfig::default()
    }
}

/// A bijection of `[0, 2^bits)` (xorshift-multiply rounds), to scatter
/// distinct indices over an address space without a set of used addresses.
pub fn permute(i: u64, bits: u32) -> u64 {
    debug_assert!((1..=62).contains(&bits));
    debug_assert!(i < 1 << bits);
    let mask = (1u64 << bits) - 1;
    let half = bits.div_ceil(2);
    let mut x = i;
    for k in [0x9e37_79b9_7f4a_7c15u64, 0xbf58_476d_1ce4_e5b9] {
        x ^= x >> half;
        x = x.wrapping_mul(k) & mask;
    }
    x ^ (x >> half)
}

pub struct Driver {
    pub engine: Engine,
    volume: VolumeId,
    now_ns: u64,
    next_id: u64,
    /// Journaled write-back's checkpoints never finish: their `Stage`
    /// commands are held, not completed (to measure kept versions).
    pub hold_checkpoints: bool,
}

impl Driver {
    pub fn new(config: EngineConfig) -> Driver {
        let mut engine = Engine::new(config).expect("benchmark engine configuration is valid");
        let volume = engine
            .add_volume((1u64 << VOLUME_PAGES_BITS) * PAGE_BYTES)
            .expect("benchmark volume fits");
        Driver {
            engine,
            volume,
            now_ns: 0,
            next_id: 0,
            hold_checkpoints: false,
        }
    }

    /// One 4 KiB write of `page`, run to its response.
    pub fn write_page(&mut self, page: u64) {
        self.page_request(RequestKind::Write, page);
    }

    /// One write of `pages` pages from `first`, run to its response.
    pub fn write_pages(&mut self, first: u64, pages: u64) {
        self.request(RequestKind::Write, first, pages);
    }

    /// Trim one 4 KiB page, run to its response (drops a dirty page).
    pub fn trim_page(&mut self, page: u64) {
        self.page_request(RequestKind::Trim, page);
    }

    fn page_request(&mut self, kind: RequestKind, page: u64) {
        self.request(kind, page, 1);
    }

    fn request(&mut self, kind: RequestKind, page: u64, pages: u64) {
        self.now_ns += 1_000;
        self.next_id += 1;
        let req = Request {
            id: RequestId(self.next_id),
            volume: self.volume,
            kind,
            offset_bytes: page * PAGE_BYTES,
            len_bytes: pages * PAGE_BYTES,
            flags: RequestFlags::default(),
        };
        self.engine
            .handle_request(Nanos(self.now_ns), req)
            .expect("the engine accepts the request");
        self.settle();
    }

    /// Destage every dirty page and complete it.
    pub fn drain(&mut self) {
        self.engine.start_drain();
        self.settle();
        self.engine.stop_drain();
        assert_eq!(self.engine.dirty_pages(), 0, "drain left dirty pages");
    }

    /// Complete every command at once, in issue order, until the engine is idle.
    pub fn settle(&mut self) {
        let now = Nanos(self.now_ns);
        loop {
            let mut moved = false;
            while let Some(cmd) = self.engine.poll_command() {
                moved = true;
                if self.hold_checkpoints && matches!(cmd, IoCommand::Stage { .. }) {
                    continue;
                }
                self.engine
                    .handle_completion(now, cmd.io(), Ok(()))
                    .expect("completion of an issued command");
            }
            while let Some(r) = self.engine.poll_response() {
                moved = true;
                assert!(r.result.is_ok(), "request {:?} failed", r.id);
            }
            if !moved {
                break;
            }
        }
        assert!(
            self.engine.is_idle() || self.hold_checkpoints,
            "engine not idle after settle"
        );
    }
}

/// Median of a non-empty list.
pub fn median(mut xs: Vec<f64>) -> f64 {
    assert!(!xs.is_empty());
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::permute;

    #[test]
    fn permute_is_a_bijection() {
        let bits = 12;
        let mut seen = vec![false; 1 << bits];
        for i in 0..1u64 << bits {
            let p = permute(i, bits) as usize;
            assert!(!seen[p], "{i} maps onto a taken value");
            seen[p] = true;
        }
    }
}
