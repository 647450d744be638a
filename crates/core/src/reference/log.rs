//! Log mode (format 3) in the reference: what a `WriteBatch` leaves on the
//! cache device, and the log read back after a crash as the real store's
//! replay reads it (`crates/io/src/store/log.rs`): from the durable tail,
//! batch by batch in sequence order, until one is torn, unwritten or
//! written over — so a batch that landed after a torn one is never found.

use super::*;
use crate::command::PageWrite;
use crate::engine::LogPosition;

/// A batch header that landed with its whole payload: what its checksum
/// vouches for, as long as no later write changes one of its slots.
#[derive(Clone, Debug)]
pub(super) struct LoggedBatch {
    seq: u64,
    next_header: u32,
    /// Its payload slots and the data sum each held when it landed.
    payload: Vec<(u32, u64)>,
    /// The page versions it carries: (slot, record).
    versions: Vec<(u32, SlotRecord)>,
    /// The slots whose versions it frees.
    frees: Vec<u32>,
}

impl<T: Unit> Reference<T> {
    /// Slots of a batch's payload: from after its header to its next header
    /// (its pages, then holes: a failed batch written again carries none).
    pub(super) fn payload_slots(&self, header: SlotIndex, next_header: SlotIndex) -> usize {
        let ring = self.slots.len() as u64;
        crate::command::batch_header::payload_slots(header.0, next_header.0, ring)
    }

    /// What lands of a log batch, in order: its header, its pages, zeros
    /// in its holes, as far as `partial` says; the header counts for the
    /// log only if all of it landed (the checksum covers header and payload).
    pub(super) fn apply_batch(
        &mut self,
        cmd: &IoCommand,
        partial: Partial,
        bufs: &mut impl RequestBuffers<T>,
    ) {
        let IoCommand::WriteBatch {
            header,
            seq,
            next_header,
            pages,
            frees,
            ..
        } = cmd
        else {
            unreachable!("a batch");
        };
        let upp = self.units_per_page;
        let n = self.payload_slots(*header, *next_header);
        let pages: Vec<PageWrite> = pages
            .iter()
            .flat_map(|p| {
                assert!(p.page_count() > 0, "a batch's pages are page writes");
                p.page_writes(self.page_bytes())
            })
            .collect();
        assert!(pages.len() <= n, "a batch's pages fit between its headers");
        let whole = partial.units >= (1 + n) * upp;
        if partial.units > 0 {
            self.cache_write(header.0);
            let h = &mut self.slots[header.0 as usize];
            h.record = None;
            h.header = None;
        }
        let landed = partial.units.saturating_sub(upp);
        let payload = self.land_payload((header.0, &pages), n, landed, whole, bufs);
        if !whole {
            return;
        }
        for free in frees {
            self.apply_partial(free, Partial::ALL, bufs);
        }
        let versions = pages.iter().map(|p| (p.slot.0, p.record)).collect();
        let frees = frees
            .iter()
            .flat_map(|f| match f {
                IoCommand::FreeSlots { slots, .. } => slots.iter().map(|s| s.0),
                _ => unreachable!("a batch's frees are FreeSlots"),
            })
            .collect();
        self.slots[header.0 as usize].header = Some(Box::new(LoggedBatch {
            seq: *seq,
            next_header: next_header.0,
            payload,
            versions,
            frees,
        }));
    }

    /// A batch's `n` payload slots as far as `units` units of them landed:
    /// its pages (with their records if `whole`), then zeros; returns each
    /// slot with the data sum it then holds.
    fn land_payload(
        &mut self,
        (header, pages): (u32, &[PageWrite]),
        n: usize,
        mut units: usize,
        whole: bool,
        bufs: &mut impl RequestBuffers<T>,
    ) -> Vec<(u32, u64)> {
        let (upp, ring) = (self.units_per_page, self.slots.len() as u32);
        let zeros = vec![T::ZERO; upp];
        let mut payload = Vec::with_capacity(n);
        for i in 0..n {
            let landed = units.min(upp);
            units -= landed;
            let slot = (header + 1 + i as u32) % ring;
            match pages.get(i) {
                Some(page) => {
                    let s = page.slot;
                    assert_eq!(s.0, slot, "a batch's pages follow its header in order");
                    let part = Partial {
                        units: landed,
                        record: whole,
                    };
                    self.apply_partial(&page.command(), part, bufs);
                }
                None if landed > 0 => {
                    self.land(slot, &zeros, landed);
                    self.slots[slot as usize].record = None;
                }
                None => {}
            }
            let page = self.slots[slot as usize].page.as_deref();
            payload.push((slot, page.map_or(0, sum_of)));
        }
        payload
    }

    /// After a crash, log mode: the page versions the log holds and where
    /// it stands, read as the real store reads it: from the checkpoint in
    /// force if the durable tail has not passed its last batch (its versions
    /// in batches the tail has passed since dropped), else from the durable
    /// tail; then each batch whose header is the next in sequence and whose
    /// payload is as it landed, replayed in order (a free drops the version
    /// its slot held; a newer version of a page replaces the older).
    /// `keep_older`: a page's older versions stay found beside the newer
    /// (ordered write-back destages every version, in order), until freed.
    pub fn recoverable_log(&mut self, keep_older: bool) -> (Vec<RecoveredSlot>, LogPosition) {
        self.volatile.clear();
        let ring = self.slots.len() as u64;
        let mut r = self.replay_start(keep_older);
        self.log_checkpoint_recoveries += r.from_checkpoint as u64;
        while r.used < ring {
            let Some(b) = self.slots[r.at as usize].header.as_deref() else {
                break;
            };
            let n = b.payload.len() as u64;
            let intact = b
                .payload
                .iter()
                .all(|&(s, sum)| self.slots[s as usize].page.as_deref().map(sum_of) == Some(sum));
            if b.seq != r.expected || r.used + 1 + n > ring || !intact {
                break;
            }
            for f in &b.frees {
                r.free(*f);
            }
            for &(slot, record) in &b.versions {
                r.found(RecoveredSlot {
                    slot: SlotIndex(slot),
                    record,
                });
            }
            r.batches.push(1 + n as u32);
            (r.at, r.expected, r.used) = (b.next_header, r.expected + 1, r.used + 1 + n);
        }
        // In log order, as the real store's replay gives them.
        let mut found: Vec<(u64, RecoveredSlot)> = r.by_slot.into_values().collect();
        found.sort_by_key(|&(order, _)| order);
        let found: Vec<RecoveredSlot> = found.into_iter().map(|(_, f)| f).collect();
        let position = LogPosition {
            tail: SlotIndex(self.log_tail.0),
            log_slots: r.used as u32,
            batches: r.batches,
            next_seq: r.expected,
            next_page_seq: r.page_seq_max + 1,
        };
        (found, position)
    }

    /// Log recoveries that started from a checkpoint (`recoverable_log`).
    pub fn log_checkpoint_recoveries(&self) -> u64 {
        self.log_checkpoint_recoveries
    }

    /// Where the replay starts: the checkpoint in force, with the batches
    /// the tail has passed since dropped, where the tail is one of its
    /// batch boundaries short of its end; else the tail, with nothing found.
    fn replay_start(&self, keep_older: bool) -> Replay {
        let (tail, tail_seq) = self.log_tail;
        let mut r = Replay {
            at: tail,
            expected: tail_seq,
            keep_older,
            ..Replay::default()
        };
        let Some((cp, entries)) = &self.log_checkpoint else {
            return r;
        };
        let ring = self.slots.len() as u64;
        let first_seq = cp.next_seq - cp.batches.len() as u64;
        let skipped = tail_seq.checked_sub(first_seq).map(|k| k as usize);
        let Some(skipped) = skipped.filter(|&k| k < cp.batches.len()) else {
            return r;
        };
        let passed: u64 = cp.batches[..skipped].iter().map(|&n| n as u64).sum();
        if (cp.tail.0 as u64 + passed) % ring != tail as u64 {
            return r;
        }
        for e in entries {
            let from_tail = (e.slot.0 as u64 + ring - cp.tail.0 as u64) % ring;
            if from_tail >= passed {
                r.found(*e);
            }
        }
        r.batches = cp.batches[skipped..].to_vec();
        r.used = cp.log_slots as u64 - passed;
        r.at = ((cp.tail.0 as u64 + cp.log_slots as u64) % ring) as u32;
        r.expected = cp.next_seq;
        r.page_seq_max = cp.next_page_seq - 1;
        r.from_checkpoint = true;
        r
    }
}

/// A replay of the log in progress: the versions found, by slot and page.
#[derive(Default)]
struct Replay {
    at: u32,
    expected: u64,
    used: u64,
    /// Each version found, with its place in the replay (log order).
    by_slot: HashMap<u32, (u64, RecoveredSlot)>,
    placed: u64,
    by_key: HashMap<u64, u32>,
    page_seq_max: u64,
    batches: Vec<u32>,
    from_checkpoint: bool,
    keep_older: bool,
}

impl Replay {
    fn free(&mut self, slot: u32) {
        if let Some((_, v)) = self.by_slot.remove(&slot) {
            if self.by_key.get(&v.record.key.0) == Some(&slot) {
                self.by_key.remove(&v.record.key.0);
            }
        }
    }

    /// A version found, newer than every one found before.
    fn found(&mut self, v: RecoveredSlot) {
        if let Some(old) = self.by_key.insert(v.record.key.0, v.slot.0) {
            if !self.keep_older {
                self.by_slot.remove(&old);
            }
        }
        self.by_slot.insert(v.slot.0, (self.placed, v));
        self.placed += 1;
        self.page_seq_max = self.page_seq_max.max(v.record.seq);
    }
}
