//! Log mode (format 3) in the reference: what a `WriteBatch` leaves on the
//! cache device, and the log read back after a crash as the real store's
//! replay reads it (`crates/io/src/store/log.rs`): from the durable tail,
//! batch by batch in sequence order, until one is torn, unwritten or
//! written over — so a batch that landed after a torn one is never found.

use super::*;
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
        assert!(pages.len() <= n, "a batch's pages fit between its headers");
        let whole = partial.units >= (1 + n) * upp;
        if partial.units > 0 {
            self.cache_write(header.0);
            let h = &mut self.slots[header.0 as usize];
            h.record = None;
            h.header = None;
        }
        let payload = self.land_payload(cmd, n, partial.units.saturating_sub(upp), whole, bufs);
        if !whole {
            return;
        }
        for free in frees {
            self.apply_partial(free, Partial::ALL, bufs);
        }
        let versions = pages
            .iter()
            .map(|p| match p {
                IoCommand::WritePage { slot, record, .. } => (slot.0, *record),
                _ => unreachable!("a batch's pages are page writes"),
            })
            .collect();
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
        cmd: &IoCommand,
        n: usize,
        mut units: usize,
        whole: bool,
        bufs: &mut impl RequestBuffers<T>,
    ) -> Vec<(u32, u64)> {
        let IoCommand::WriteBatch { header, pages, .. } = cmd else {
            unreachable!("a batch");
        };
        let (upp, ring) = (self.units_per_page, self.slots.len() as u32);
        let zeros = vec![T::ZERO; upp];
        let mut payload = Vec::with_capacity(n);
        for i in 0..n {
            let landed = units.min(upp);
            units -= landed;
            let slot = (header.0 + 1 + i as u32) % ring;
            match pages.get(i) {
                Some(page) => {
                    let IoCommand::WritePage { slot: s, .. } = page else {
                        unreachable!("a batch's pages are page writes");
                    };
                    assert_eq!(s.0, slot, "a batch's pages follow its header in order");
                    let part = Partial {
                        units: landed,
                        record: whole,
                    };
                    self.apply_partial(page, part, bufs);
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
    /// it stands, read as the real store reads it: from the durable tail,
    /// each batch whose header is the next in sequence and whose payload is
    /// as it landed; replayed in order (a free drops the version its slot
    /// held; a newer version of a page replaces the older).
    pub fn recoverable_log(&mut self) -> (Vec<RecoveredSlot>, LogPosition) {
        self.volatile.clear();
        let ring = self.slots.len() as u64;
        let (tail, mut expected) = self.log_tail;
        let (mut at, mut used) = (tail, 0u64);
        let mut by_slot: HashMap<u32, RecoveredSlot> = HashMap::new();
        let mut by_key: HashMap<u64, u32> = HashMap::new();
        let mut page_seq_max = 0;
        let mut batches = Vec::new();
        while used < ring {
            let Some(b) = self.slots[at as usize].header.as_deref() else {
                break;
            };
            let n = b.payload.len() as u64;
            let intact = b
                .payload
                .iter()
                .all(|&(s, sum)| self.slots[s as usize].page.as_deref().map(sum_of) == Some(sum));
            if b.seq != expected || used + 1 + n > ring || !intact {
                break;
            }
            for f in &b.frees {
                if let Some(v) = by_slot.remove(f) {
                    by_key.remove(&v.record.key.0);
                }
            }
            for &(slot, record) in &b.versions {
                if let Some(old) = by_key.insert(record.key.0, slot) {
                    by_slot.remove(&old);
                }
                let slot = SlotIndex(slot);
                by_slot.insert(slot.0, RecoveredSlot { slot, record });
                page_seq_max = page_seq_max.max(record.seq);
            }
            batches.push(1 + n as u32);
            (at, expected, used) = (b.next_header, expected + 1, used + 1 + n);
        }
        let mut found: Vec<RecoveredSlot> = by_slot.into_values().collect();
        found.sort_by_key(|f| f.slot.0);
        let position = LogPosition {
            tail: SlotIndex(tail),
            log_slots: used as u32,
            batches,
            next_seq: expected,
            next_page_seq: page_seq_max + 1,
        };
        (found, position)
    }
}
