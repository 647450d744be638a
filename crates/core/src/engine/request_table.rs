//! The request table: the requests the engine has admitted and not yet
//! answered, by index, with a free list; an answered request's entry keeps
//! its vectors for the next one (no allocation per request).

use super::Req;
use crate::command::Request;

/// `pending` of an answered request: its entry is free (a poison that the
/// checks and the scans recognise).
pub(super) const DEAD: u32 = u32::MAX;

#[derive(Default)]
pub(super) struct RequestTable {
    entries: Vec<Option<Req>>,
    free: Vec<u32>,
    live: u32,
}

impl RequestTable {
    pub(super) fn with_capacity(requests_max: usize) -> RequestTable {
        RequestTable {
            entries: Vec::with_capacity(requests_max),
            ..RequestTable::default()
        }
    }

    /// Takes an entry for request `r`, with the cleared vectors of the
    /// entry's previous request (or new ones).
    #[inline]
    pub(super) fn insert(&mut self, r: Request) -> u32 {
        let ri = match self.free.pop() {
            Some(ri) => ri,
            None => {
                self.entries.push(None);
                (self.entries.len() - 1) as u32
            }
        };
        let (mut reserved, mut finalize) = (Vec::new(), Vec::new());
        if let Some(old) = self.entries[ri as usize].take() {
            debug_assert_eq!(old.pending, DEAD, "request {ri} reused while live");
            (reserved, finalize) = (old.reserved, old.finalize);
            reserved.clear();
            finalize.clear();
        }
        self.entries[ri as usize] = Some(Req::admitted(r, reserved, finalize));
        self.live += 1;
        ri
    }

    #[inline]
    pub(super) fn get(&self, ri: u32) -> &Req {
        self.entries[ri as usize].as_ref().expect("live request")
    }

    #[inline]
    pub(super) fn get_mut(&mut self, ri: u32) -> &mut Req {
        self.entries[ri as usize].as_mut().expect("live request")
    }

    /// `ri` was answered: its entry is free (poisoned, vectors kept).
    #[inline]
    pub(super) fn release(&mut self, ri: u32) {
        let r = self.get_mut(ri);
        debug_assert_ne!(r.pending, DEAD, "request {ri} released twice");
        r.pending = DEAD;
        self.free.push(ri);
        self.live -= 1;
    }

    #[inline]
    pub(super) fn is_live(&self, ri: u32) -> bool {
        self.entries
            .get(ri as usize)
            .and_then(Option::as_ref)
            .is_some_and(|r| r.pending != DEAD)
    }

    /// Requests admitted and not answered.
    #[inline]
    pub(super) fn live_count(&self) -> u32 {
        self.live
    }

    /// Entries, live or free: request indices are below this.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The live requests with their indices.
    pub(super) fn iter_live(&self) -> impl Iterator<Item = (u32, &Req)> {
        (self.entries.iter().enumerate())
            .filter_map(|(i, r)| r.as_ref().map(|r| (i as u32, r)))
            .filter(|(_, r)| r.pending != DEAD)
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Option<Req>>()
    }

    /// The table's own invariants: the live count against the entries, at
    /// most `requests_max` live, and the free list and the live requests
    /// cover the table.
    pub(super) fn check(&self, requests_max: u32) {
        let live = self.iter_live().count();
        assert_eq!(live, self.live as usize, "the live count against the table");
        assert!(
            self.live <= requests_max,
            "more live requests than requests_max"
        );
        assert_eq!(
            live + self.free.len(),
            self.entries.len(),
            "the request free list and the live requests cover the table"
        );
        for &ri in &self.free {
            assert!(
                !self.is_live(ri),
                "request {ri} is live and on the free list"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{RequestFlags, RequestKind};
    use crate::types::{RequestId, VolumeId};

    fn req(id: u64) -> Request {
        Request {
            id: RequestId(id),
            volume: VolumeId(0),
            kind: RequestKind::Write,
            offset_bytes: 0,
            len_bytes: 4096,
            flags: RequestFlags::default(),
        }
    }

    #[test]
    fn an_answered_entry_is_reused_with_its_vectors_cleared() {
        let mut t = RequestTable::with_capacity(4);
        let a = t.insert(req(1));
        let b = t.insert(req(2));
        t.get_mut(a).reserved.push(crate::types::SlotIndex(7));
        t.check(2);
        assert_eq!(t.live_count(), 2);
        t.release(a);
        assert!(!t.is_live(a) && t.is_live(b));
        t.check(2);
        let c = t.insert(req(3));
        let kept = &t.get(c).reserved;
        assert!(
            kept.is_empty() && kept.capacity() > 0,
            "the vector comes back cleared"
        );
        assert_eq!(c, a, "the free entry is taken again");
        let live: Vec<u64> = t.iter_live().map(|(_, r)| r.id.0).collect();
        assert_eq!(live, vec![3, 2]);
        t.check(2);
    }
}
