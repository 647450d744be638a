//! The I/O table: what each command in flight means when it completes
//! (`IoCtx`), under an id that a completion of an earlier command in the
//! same entry can never match (a generation per entry).

use super::IoCtx;
use crate::types::IoId;

/// Commands in flight, by `IoId`: the low 32 bits index an entry, the high
/// 32 bits its generation, which moves on each time the entry is freed.
#[derive(Default)]
pub(super) struct IoTable {
    entries: Vec<Option<IoCtx>>,
    gens: Vec<u32>,
    free: Vec<u32>,
}

impl IoTable {
    /// A new command's id, its meaning `ctx` until `take`.
    #[inline]
    pub(super) fn insert(&mut self, ctx: IoCtx) -> IoId {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.entries.push(None);
                self.gens.push(0);
                (self.entries.len() - 1) as u32
            }
        };
        let entry = &mut self.entries[idx as usize];
        debug_assert!(entry.is_none(), "I/O {idx} on the free list in flight");
        *entry = Some(ctx);
        IoId(((self.gens[idx as usize] as u64) << 32) | idx as u64)
    }

    /// The entry of `io` if it is the command in flight there.
    #[inline]
    fn index(&self, io: IoId) -> Option<usize> {
        let idx = (io.0 & 0xffff_ffff) as usize;
        (self.gens.get(idx) == Some(&((io.0 >> 32) as u32))).then_some(idx)
    }

    /// Completes `io`: its meaning, once (None for an id not in flight).
    #[inline]
    pub(super) fn take(&mut self, io: IoId) -> Option<IoCtx> {
        let idx = self.index(io)?;
        let ctx = self.entries[idx].take()?;
        self.gens[idx] = self.gens[idx].wrapping_add(1);
        self.free.push(idx as u32);
        Some(ctx)
    }

    #[inline]
    pub(super) fn get(&self, io: IoId) -> Option<&IoCtx> {
        self.entries[self.index(io)?].as_ref()
    }

    #[inline]
    pub(super) fn get_mut(&mut self, io: IoId) -> Option<&mut IoCtx> {
        let idx = self.index(io)?;
        self.entries[idx].as_mut()
    }

    /// The commands in flight.
    pub(super) fn iter(&self) -> impl Iterator<Item = &IoCtx> {
        self.entries.iter().flatten()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut IoCtx> {
        self.entries.iter_mut().flatten()
    }

    /// Entries, in flight or free (for the engine's memory figure).
    pub(super) fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// The table's own invariants: a generation per entry; the free list
    /// and the commands in flight (`live` of them) cover the entries, and
    /// no free entry holds a command.
    pub(super) fn check(&self, live: usize) {
        assert_eq!(
            self.entries.len(),
            self.gens.len(),
            "one generation per I/O"
        );
        assert_eq!(
            live + self.free.len(),
            self.entries.len(),
            "the I/O free list and the I/Os in flight cover the table"
        );
        for &i in &self.free {
            assert!(
                self.entries[i as usize].is_none(),
                "I/O {i} in flight and free"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_completes_once_and_a_reused_entry_gets_a_new_generation() {
        let mut t = IoTable::default();
        let a = t.insert(IoCtx::AdvanceLog { slots: 1 });
        assert!(t.get(a).is_some());
        assert!(matches!(t.take(a), Some(IoCtx::AdvanceLog { slots: 1 })));
        assert!(t.take(a).is_none(), "completed once");
        let b = t.insert(IoCtx::AdvanceLog { slots: 2 });
        assert_eq!(a.0 & 0xffff_ffff, b.0 & 0xffff_ffff, "the entry is reused");
        assert_ne!(a, b, "under a new generation");
        assert!(
            t.get(a).is_none() && t.take(a).is_none(),
            "the old id is stale"
        );
        t.check(1);
        assert!(t.take(b).is_some());
        t.check(0);
    }
}
