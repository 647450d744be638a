//! The point-in-time consistency check (PiT-C) of ordered write-back: with
//! the cache device gone, the backing alone must hold a state the writes'
//! completion-issue dependencies allow. A write W depends on every write
//! answered before W was issued; so if any sector of the backing shows W's
//! data, every write W depends on must show on the backing too, each of its
//! sectors holding its data or that of a write not older than it there.
//! Writes that nothing shown depends on may show partly or not at all (they
//! were in flight, as far as the backing's state is concerned).

use rustc_hash::FxHashMap as HashMap;

/// One write request as the clients saw it.
struct Write {
    volume: u16,
    first_sector: u64,
    sectors: u64,
    /// Writes answered before its issue.
    issued_after: u64,
    /// Its answer's number among all answers (0: not answered).
    completion: u64,
    ok: bool,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "backing not point-in-time consistent: write {write} (answer #{completion}) is needed by \
     write {needed_by} on the backing, but its volume {volume} sector {sector} holds stamp {got:#x}"
)]
pub struct OrderError {
    pub write: u64,
    pub completion: u64,
    pub needed_by: u64,
    pub volume: u16,
    pub sector: u64,
    pub got: u64,
}

#[derive(Default)]
pub struct OrderCheck {
    writes: HashMap<u64, Write>,
    answers: u64,
    pub checks: u64,
}

impl OrderCheck {
    /// Write `id` of `sectors` sectors from `first_sector` is issued.
    pub fn issue(&mut self, id: u64, volume: u16, first_sector: u64, sectors: u64) {
        let w = Write {
            volume,
            first_sector,
            sectors,
            issued_after: self.answers,
            completion: 0,
            ok: false,
        };
        self.writes.insert(id, w);
    }

    /// Request `id` was answered (any request: only writes are tracked).
    pub fn answer(&mut self, id: u64, ok: bool) {
        if let Some(w) = self.writes.get_mut(&id) {
            self.answers += 1;
            w.completion = self.answers;
            w.ok = ok;
        }
    }

    /// A crash (after its check). Writes in flight stay unanswered: what
    /// recovery finds of them may still reach the backing, after what they
    /// depend on. If the cache was lost, the backing's state is where a
    /// new history starts: later writes depend on nothing before it, and
    /// its old data counts as older than any of them.
    pub fn crash(&mut self, lose_cache: bool) {
        if lose_cache {
            self.writes.clear();
        }
    }

    /// Check the backing, read through `backing(volume, sector)`; `stamp`
    /// and `writer` map a (write, sector index) to the data written and back.
    pub fn check(
        &mut self,
        backing: impl Fn(u16, u64) -> u64,
        stamp: impl Fn(u64, u64) -> u64,
        writer: impl Fn(u64) -> u64,
    ) -> Result<(), OrderError> {
        self.checks += 1;
        // The writes shown on the backing, and the latest answer the most
        // demanding of them depends on.
        let mut needed = 0;
        let mut needed_by = 0;
        for (&id, w) in &self.writes {
            let shown =
                (0..w.sectors).any(|i| backing(w.volume, w.first_sector + i) == stamp(id, i));
            if shown && w.issued_after > needed {
                (needed, needed_by) = (w.issued_after, id);
            }
        }
        for (&id, a) in &self.writes {
            if !a.ok || a.completion == 0 || a.completion > needed {
                continue;
            }
            for i in 0..a.sectors {
                let sector = a.first_sector + i;
                let got = backing(a.volume, sector);
                if got == stamp(id, i) {
                    continue;
                }
                // Another write's data is fine unless that write is older
                // than `a` by the order (answered before `a` was issued).
                let older = self
                    .writes
                    .get(&writer(got))
                    .is_none_or(|c| c.completion > 0 && c.completion <= a.issued_after);
                if got == 0 || older {
                    return Err(OrderError {
                        write: id,
                        completion: a.completion,
                        needed_by,
                        volume: a.volume,
                        sector,
                        got,
                    });
                }
            }
        }
        Ok(())
    }
}
