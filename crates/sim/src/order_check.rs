//! The point-in-time consistency check (PiT-C) of ordered write-back: with
//! the cache device gone, the backing alone must hold a state the writes'
//! completion-issue dependencies allow. A write W depends on every write
//! answered before W was issued; so if any sector of the backing shows W's
//! data, every write W depends on must show on the backing too, each of its
//! sectors holding its data or that of a write not older than it there.
//! Writes that nothing shown depends on may show partly or not at all (they
//! were in flight, as far as the backing's state is concerned).
//!
//! With declared consistency points (App-C, journaled write-back with
//! hints) the backing must hold the state of one point: no write issued
//! after the last point shows, and every write answered before the first
//! point after the latest write shown is there.

use rustc_hash::FxHashMap as HashMap;

/// One write request as the clients saw it.
struct Write {
    volume: u16,
    first_sector: u64,
    sectors: u64,
    /// Its place among all writes issued (1, 2, ...).
    issue_seq: u64,
    /// Writes answered before its issue.
    issued_after: u64,
    /// Its answer's number among all answers (0: not answered).
    completion: u64,
    ok: bool,
}

/// Why the backing alone is not a state the writes allow.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error(transparent)]
    Missing(#[from] MissingWrite),
    #[error(transparent)]
    Point(#[from] PointError),
}

#[derive(Debug, thiserror::Error)]
#[error(
    "backing not point-in-time consistent: write {write} (answer #{completion}) is needed by \
     write {needed_by} on the backing, but its volume {volume} sector {sector} holds stamp {got:#x}"
)]
pub struct MissingWrite {
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
    issued: u64,
    /// Application consistency points, when checked (App-C): the answers
    /// and the writes issued when each was declared; the first is where
    /// the history starts.
    points: Option<Vec<(u64, u64)>>,
    pub checks: u64,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "backing not at a declared consistency point: write {write} shows on it, issued after the last point"
)]
pub struct PointError {
    pub write: u64,
}

impl OrderCheck {
    /// Write `id` of `sectors` sectors from `first_sector` is issued.
    pub fn issue(&mut self, id: u64, volume: u16, first_sector: u64, sectors: u64) {
        self.issued += 1;
        let w = Write {
            volume,
            first_sector,
            sectors,
            issue_seq: self.issued,
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
            if let Some(p) = &mut self.points {
                *p = vec![(self.answers, self.issued)];
            }
        }
    }

    /// Check App-C from now on: the backing must hold the state of a
    /// declared point (`point`), not just any point-in-time state.
    pub fn track_points(&mut self) {
        self.points.get_or_insert_with(|| vec![(0, 0)]);
    }

    /// An application consistency point is declared now.
    pub fn point(&mut self) {
        if let Some(p) = &mut self.points {
            p.push((self.answers, self.issued));
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
        // demanding of them depends on; with declared points, every answer
        // before the first point after the latest write shown.
        let mut needed = 0;
        let mut needed_by = 0;
        let mut latest = (0, 0);
        for (&id, w) in &self.writes {
            let shown =
                (0..w.sectors).any(|i| backing(w.volume, w.first_sector + i) == stamp(id, i));
            if shown && w.issued_after > needed {
                (needed, needed_by) = (w.issued_after, id);
            }
            if shown && w.issue_seq > latest.0 {
                latest = (w.issue_seq, id);
            }
        }
        if let Some(points) = &self.points {
            let Some(&(answers, _)) = points.iter().find(|&&(_, issued)| issued >= latest.0) else {
                return Err(OrderError::Point(PointError { write: latest.1 }));
            };
            if answers > needed {
                (needed, needed_by) = (answers, latest.1);
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
                    return Err(OrderError::Missing(MissingWrite {
                        write: id,
                        completion: a.completion,
                        needed_by,
                        volume: a.volume,
                        sector,
                        got,
                    }));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stamps: write id in the high bits, sector index in the low ones.
    fn stamp(id: u64, i: u64) -> u64 {
        id << 20 | i
    }

    /// Two one-sector writes, w1 to sector 0 then w2 to sector 1, each
    /// answered before the next is issued; with `point_between`, an
    /// application point is declared between them.
    fn history(point_between: bool) -> OrderCheck {
        let mut o = OrderCheck::default();
        o.track_points();
        o.issue(1, 0, 0, 1);
        o.answer(1, true);
        if point_between {
            o.point();
        }
        o.issue(2, 0, 1, 1);
        o.answer(2, true);
        o
    }

    fn check(o: &mut OrderCheck, sectors: [u64; 2]) -> Result<(), OrderError> {
        o.check(|_, s| sectors[s as usize], stamp, |got| got >> 20)
    }

    #[test]
    fn the_backing_must_hold_a_declared_point() {
        let mut o = history(true);
        // Nothing, or w1 (the point): allowed.
        check(&mut o, [0, 0]).expect("the start");
        check(&mut o, [stamp(1, 0), 0]).expect("the declared point");
        // w1 and w2: past the last point.
        let e = check(&mut o, [stamp(1, 0), stamp(2, 0)]).expect_err("after the last point");
        assert!(
            matches!(e, OrderError::Point(PointError { write: 2 })),
            "{e}"
        );
        o.point();
        check(&mut o, [stamp(1, 0), stamp(2, 0)]).expect("the second point");
        // w2 without w1: not even point-in-time consistent.
        let e = check(&mut o, [0, stamp(2, 0)]).expect_err("w2 depends on w1");
        assert!(
            matches!(e, OrderError::Missing(MissingWrite { write: 1, .. })),
            "{e}"
        );
    }

    #[test]
    fn without_a_point_between_only_the_start_is_allowed() {
        let mut o = history(false);
        check(&mut o, [0, 0]).expect("the start");
        // w1 alone is point-in-time consistent, but no point was declared there.
        let e = check(&mut o, [stamp(1, 0), 0]).expect_err("not a declared point");
        assert!(matches!(e, OrderError::Point(_)), "{e}");
        // A lost cache starts a new history at the backing as it is.
        o.crash(true);
        o.issue(3, 0, 0, 1);
        o.answer(3, true);
        o.point();
        check(&mut o, [stamp(3, 0), 0]).expect("the new history's point");
    }
}
