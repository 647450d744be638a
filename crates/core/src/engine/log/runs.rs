//! Extents end to end: the whole pages of one write that follow each other
//! in the open batch are one `WritePages` command with one completion
//! (`IoCtx::FillRun`), not a command and a completion per page.

use super::*;

/// The run a batch's page command writes: its first slot, page count,
/// first record and source.
type Run = (SlotIndex, u32, SlotRecord, Source);

impl Engine {
    /// Log mode: whole page `fill` of write `ri` joins the open batch's last
    /// page write when it continues it (the same request and route, the
    /// next slot, page and version number, the next bytes of the buffer).
    /// False, and nothing done, otherwise.
    pub(in crate::engine) fn log_extend_run(
        &mut self,
        ri: u32,
        through: bool,
        fill: FillPage,
        src: Source,
        record: SlotRecord,
    ) -> bool {
        let ps = self.geometry.page_size_bytes();
        let Some(open) = self.log.as_mut().and_then(|l| l.open.as_mut()) else {
            return false;
        };
        let Some(last) = open.pages.last_mut() else {
            return false;
        };
        let io = last.io();
        let same_write = match self.ios.get(io) {
            Some(
                IoCtx::Fill {
                    req, through: t, ..
                }
                | IoCtx::FillRun {
                    req, through: t, ..
                },
            ) => *req == ri && *t == through,
            _ => false,
        };
        let Some((first_slot, count, first, src0)) = run_of(last, ps) else {
            return false;
        };
        if !same_write || !follows((first_slot, count, first, src0), fill.slot, src, record, ps) {
            return false;
        }
        debug_assert_eq!(
            open.last,
            Some((record.key.0 - 1, record.seq - 1, record.dirty))
        );
        open.last = Some((record.key.0, record.seq, record.dirty));
        open.built += 1;
        *last = IoCommand::WritePages {
            io,
            first_slot,
            count: count + 1,
            first,
            src: src0,
        };
        let log = self.log.as_mut().expect("log mode");
        log.logged.set(fill.slot, record.dirty);
        let ctx = self.ios.get_mut(io).expect("checked above");
        if let IoCtx::FillRun { fills, .. } = ctx {
            fills.push(fill);
            return true;
        }
        let IoCtx::Fill { fill: head, .. } = *ctx else {
            unreachable!("a run's completion is a fill's");
        };
        // The run's second page: a `FillRun` with room for the write's pages.
        let r = self.req(ri);
        let mut fills = Vec::with_capacity(self.pages_of(r.offset_bytes, r.len_bytes) as usize);
        fills.extend([head, fill]);
        let run = IoCtx::FillRun {
            req: ri,
            through,
            fills,
        };
        *self.ios.get_mut(io).expect("checked above") = run;
        true
    }
}

/// The run of page command `cmd`, if it writes whole pages with no base.
fn run_of(cmd: &IoCommand, page_size_bytes: u32) -> Option<Run> {
    match *cmd {
        IoCommand::WritePage {
            slot,
            base: PageBase::None,
            patch,
            record,
            ..
        } if patch.page_offset_bytes == 0 && patch.len_bytes == page_size_bytes => {
            Some((slot, 1, record, patch.src))
        }
        IoCommand::WritePages {
            first_slot,
            count,
            first,
            src,
            ..
        } => Some((first_slot, count, first, src)),
        _ => None,
    }
}

/// A page in `slot` recorded as `record`, from `src`, comes right after
/// `run`: in the log, on the volume, in version numbers and in its buffer.
fn follows(run: Run, slot: SlotIndex, src: Source, record: SlotRecord, ps: u32) -> bool {
    let (first_slot, count, first, src0) = run;
    let n = count as u64;
    let bytes_follow = match (src0, src) {
        (
            Source::Request {
                req: a,
                offset_bytes: o,
            },
            Source::Request {
                req: b,
                offset_bytes: p,
            },
        ) => a == b && o + n * ps as u64 == p,
        (Source::Zero, Source::Zero) => true,
        _ => false,
    };
    bytes_follow
        && first_slot.0 as u64 + n == slot.0 as u64
        && first.key.volume() == record.key.volume()
        && first.key.page().0 + n == record.key.page().0
        && first.seq + n == record.seq
        && first.dirty == record.dirty
}
