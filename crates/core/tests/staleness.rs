//! Staleness bounds in virtual time: with a maximum dirty age, every page's
//! destage starts within that age of its write even far below the destage
//! thresholds; an idle cache drains; a write-through cache reopened with
//! dirty pages drains them at once. Each bound is also run without its knob,
//! to show that the same load leaves pages dirty there (the test can fail).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use wcache_core::config::StalenessConfig;
use wcache_core::time::Nanos;
use wcache_core::types::{IoId, PageIndex, PageKey, RequestId, SlotIndex, VolumeId};
use wcache_core::{
    Engine, EngineConfig, IoCommand, RecoveredSlot, Request, RequestFlags, RequestKind, SlotRecord,
    WritePolicyKind,
};

const PAGE: u64 = 4096;
const MS: u64 = 1_000_000;
/// Cache writes take this long, destages this long.
const WRITE_NS: u64 = 50_000;
const DESTAGE_NS: u64 = 5 * MS;

/// An engine with devices of fixed latency, in virtual time.
struct Bench {
    e: Engine,
    vol: VolumeId,
    now: u64,
    done: BinaryHeap<Reverse<(u64, u64, IoId)>>,
    seq: u64,
    /// Page → when its first destage was issued.
    destaged_at: HashMap<u64, u64>,
    /// The latest time a page was dirty (dirty count > 0 after an event).
    last_dirty_at: u64,
    /// Journaled write-back: pages staged per checkpoint (named by its
    /// newest transaction).
    staged: HashMap<u64, u64>,
}

impl Bench {
    fn new(e: Engine) -> Bench {
        Bench::with_volume(e, None)
    }
    fn with_volume(mut e: Engine, vol: Option<VolumeId>) -> Bench {
        let vol = vol.unwrap_or_else(|| e.add_volume(1 << 30).unwrap());
        Bench {
            e,
            vol,
            now: 0,
            done: BinaryHeap::new(),
            seq: 0,
            destaged_at: HashMap::new(),
            last_dirty_at: 0,
            staged: HashMap::new(),
        }
    }

    fn take_commands(&mut self) {
        while let Some(cmd) = self.e.poll_command() {
            if let IoCommand::Stage { txn, slots, .. } = &cmd {
                *self.staged.entry(*txn).or_insert(0) += slots.len() as u64;
            }
            let latency = match &cmd {
                // A journaled checkpoint's stage is that policy's destage.
                IoCommand::Destage {
                    first_page, slots, ..
                }
                | IoCommand::Stage {
                    first_page, slots, ..
                } => {
                    for p in first_page.0..first_page.0 + slots.len() as u64 {
                        self.destaged_at.entry(p).or_insert(self.now);
                    }
                    DESTAGE_NS
                }
                _ => WRITE_NS,
            };
            self.seq += 1;
            self.done
                .push(Reverse((self.now + latency, self.seq, cmd.io())));
        }
        while self.e.poll_response().is_some() {}
        if self.e.dirty_pages() > 0 {
            self.last_dirty_at = self.now;
        }
    }

    fn write(&mut self, page: u64) {
        self.run_until(self.now);
        let req = Request {
            id: RequestId(page),
            volume: self.vol,
            kind: RequestKind::Write,
            offset_bytes: page * PAGE,
            len_bytes: PAGE,
            flags: RequestFlags::default(),
        };
        self.e.handle_request(Nanos(self.now), req).unwrap();
        self.take_commands();
    }

    /// Deliver completions and timeouts up to `until` (inclusive).
    fn run_until(&mut self, until: u64) {
        loop {
            let io_at = self.done.peek().map(|Reverse((t, _, _))| *t);
            let timeout_at = self.e.poll_timeout().map(|t| t.0.max(self.now));
            let Some(next) = [io_at, timeout_at].into_iter().flatten().min() else {
                break;
            };
            if next > until {
                break;
            }
            self.now = next;
            if io_at == Some(next) {
                let Reverse((_, _, io)) = self.done.pop().unwrap();
                self.e.handle_completion(Nanos(next), io, Ok(())).unwrap();
            } else {
                self.e.handle_timeout(Nanos(next));
            }
            self.take_commands();
        }
        self.now = self.now.max(until);
    }
}

fn config(staleness: StalenessConfig) -> EngineConfig {
    EngineConfig {
        page_size_bytes: PAGE,
        group_size_bytes: 16 * PAGE,
        cache_slots: 4096,
        staleness,
        ..EngineConfig::default()
    }
}

/// 40 scattered pages written over 2 s, a few percent of the cache: far
/// below the low threshold, so the rate alone never destages them.
fn scattered_writes(b: &mut Bench) -> Vec<(u64, u64)> {
    let mut written = Vec::new();
    for i in 0..40u64 {
        let page = (i * 7919) % 100_000;
        b.run_until(i * 50 * MS);
        b.write(page);
        written.push((page, b.now));
    }
    written
}

#[test]
fn a_maximum_dirty_age_bounds_every_page() {
    let max_age = 600 * MS;
    let mut b = Bench::new(
        Engine::new(config(StalenessConfig {
            max_dirty_age_ns: max_age,
            ..StalenessConfig::default()
        }))
        .unwrap(),
    );
    let written = scattered_writes(&mut b);
    let last_write = written.last().unwrap().1;
    let mut worst_age_seen = 0;
    for step in 1..=100 {
        b.run_until(last_write + step * 20 * MS);
        worst_age_seen = worst_age_seen.max(b.e.dirty_age_ns(Nanos(b.now)));
    }
    for (page, at) in &written {
        let issued = b.destaged_at.get(page).copied();
        let issued = issued.unwrap_or_else(|| panic!("page {page} never destaged"));
        assert!(
            issued - at <= max_age,
            "page {page} written at {at} ns destaged at {issued} ns: older than {max_age} ns"
        );
    }
    assert_eq!(b.e.dirty_pages(), 0);
    assert_eq!(b.e.dirty_age_ns(Nanos(b.now)), 0);
    assert!(b.last_dirty_at <= last_write + max_age + DESTAGE_NS);
    // The age shown is an upper bound one period (max_age / 3) coarse.
    assert!(worst_age_seen <= max_age + max_age / 3, "{worst_age_seen}");
    assert!(b.e.stats().expired_groups > 0);
}

fn journaled(staleness: StalenessConfig) -> EngineConfig {
    let mut c = config(staleness);
    c.write_policy = WritePolicyKind::JournaledWriteBack;
    c.journal.commit_age_ns = 300 * MS;
    c
}

/// Journaled write-back: checkpoints are lazy, but the maximum dirty age
/// bounds how long a page waits for its transaction's checkpoint, whatever
/// the thresholds, and once writes stop every page reaches the backing.
#[test]
fn a_maximum_dirty_age_bounds_journaled_staleness() {
    let max_age = 600 * MS;
    let mut b = Bench::new(
        Engine::new(journaled(StalenessConfig {
            max_dirty_age_ns: max_age,
            ..StalenessConfig::default()
        }))
        .unwrap(),
    );
    let written = scattered_writes(&mut b);
    let last_write = written.last().unwrap().1;
    b.run_until(last_write + 5_000 * MS);
    // An expired page commits its transaction, which then waits for at
    // most the checkpoint before it (one stage and commit).
    let bound = max_age + 2 * (DESTAGE_NS + WRITE_NS);
    for (page, at) in &written {
        let issued = b.destaged_at.get(page).copied();
        let issued = issued.unwrap_or_else(|| panic!("page {page} never checkpointed"));
        assert!(
            issued - at <= bound,
            "page {page} written at {at} ns checkpointed at {issued} ns: later than {bound} ns"
        );
    }
    assert_eq!(b.e.dirty_pages(), 0);
    assert_eq!(b.e.dirty_age_ns(Nanos(b.now)), 0);
    assert!(b.last_dirty_at <= last_write + bound + DESTAGE_NS + WRITE_NS);
}

/// Without a maximum age or an idle drain, committed transactions wait
/// while the host journal is below the rate's low threshold (as write-back's
/// dirty pages do), and are checkpointed once it is above.
#[test]
fn journaled_checkpoints_wait_for_the_rate() {
    let mut b = Bench::new(Engine::new(journaled(StalenessConfig::default())).unwrap());
    let written = scattered_writes(&mut b);
    b.run_until(written.last().unwrap().1 + 5_000 * MS);
    assert!(
        b.destaged_at.is_empty(),
        "checkpointed below the thresholds"
    );
    assert_eq!(b.e.dirty_pages(), written.len() as u64);
    // A journal of 48 pages: 40 dirty pages are over its low threshold (80 %).
    let mut c = journaled(StalenessConfig::default());
    c.journal.journal_pages = 48;
    let mut b = Bench::new(Engine::new(c).unwrap());
    let written = scattered_writes(&mut b);
    b.run_until(written.last().unwrap().1 + 5_000 * MS);
    assert!(
        !b.destaged_at.is_empty(),
        "nothing checkpointed above the threshold"
    );
    assert!(b.e.dirty_pages() < written.len() as u64);
    // The transactions committed by then (every 300 ms or 6 pages) went
    // as one checkpoint, each page once.
    assert_eq!(b.staged.len(), 1, "{:?}", b.staged);
    let staged: u64 = b.staged.values().sum();
    assert!(staged > 6, "one transaction's worth: {staged}");
    assert_eq!(b.e.dirty_pages(), written.len() as u64 - staged);
}

#[test]
fn without_a_maximum_age_the_same_pages_stay_dirty() {
    let mut b = Bench::new(Engine::new(config(StalenessConfig::default())).unwrap());
    let written = scattered_writes(&mut b);
    b.run_until(written.last().unwrap().1 + 10_000 * MS);
    assert_eq!(b.e.dirty_pages(), written.len() as u64);
    assert!(b.destaged_at.is_empty());
    // Ten seconds on, the oldest page is at least that old.
    assert!(
        b.e.dirty_age_ns(Nanos(b.now)) >= 10_000 * MS,
        "{}",
        b.e.dirty_age_ns(Nanos(b.now))
    );
}

#[test]
fn an_idle_cache_drains() {
    let idle = StalenessConfig {
        idle_after_ns: 200 * MS,
        idle_destages: 2,
        ..StalenessConfig::default()
    };
    let mut b = Bench::new(Engine::new(config(idle)).unwrap());
    let written = scattered_writes(&mut b);
    let last_write = written.last().unwrap().1;
    // Writes 50 ms apart: never idle while they come.
    assert!(b.destaged_at.is_empty());
    b.run_until(last_write + 2_000 * MS);
    assert_eq!(b.e.dirty_pages(), 0);
    let first = b.destaged_at.values().min().copied().unwrap();
    assert!(
        first >= last_write + 200 * MS,
        "destaged before idle: {first}"
    );
    // 40 groups at two outstanding 5 ms destages: about 100 ms.
    assert!(b.last_dirty_at <= last_write + 200 * MS + 40 * DESTAGE_NS);
    // A new write ends the idle drain: it is not destaged within the idle time.
    b.write(200_000);
    let at = b.now;
    b.run_until(at + 150 * MS);
    assert_eq!(b.e.dirty_pages(), 1);
}

#[test]
fn recovered_dirty_pages_drain_at_once_under_write_through() {
    for (policy, drains) in [
        (WritePolicyKind::WriteThrough, true),
        (WritePolicyKind::WriteAround, true),
        (WritePolicyKind::WriteBack, false),
    ] {
        let config = EngineConfig {
            write_policy: policy,
            persistent: true,
            ..config(StalenessConfig::default())
        };
        let found: Vec<RecoveredSlot> = (0..50u32)
            .map(|i| RecoveredSlot {
                slot: SlotIndex(i),
                record: SlotRecord {
                    key: PageKey::new(VolumeId(0), PageIndex(u64::from(i) * 100)),
                    seq: u64::from(i) + 1,
                    dirty: true,
                },
            })
            .collect();
        let e = Engine::recover(config, &[1 << 30], found).unwrap();
        let mut b = Bench::with_volume(e, Some(VolumeId(0)));
        b.take_commands();
        b.run_until(100 * MS);
        if drains {
            assert_eq!(b.e.dirty_pages(), 0, "{policy:?}");
            assert!(b.last_dirty_at <= 3 * DESTAGE_NS, "{policy:?}");
        } else {
            assert_eq!(b.e.dirty_pages(), 50, "{policy:?}");
        }
    }
}
