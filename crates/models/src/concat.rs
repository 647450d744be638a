//! Devices side by side in one address space (a linear concatenation, as
//! device-mapper's `linear` target or a JBOD): the simulator places each
//! volume on a device of its own this way (the admission paper keeps the
//! database and its log on separate disks). An operation must lie within
//! one member; a flush goes to every member and completes when all have.

use wcache_core::time::Nanos;

use super::{DevCompletion, DevOp, DevOpKind, DeviceModel, DeviceStats};

pub struct ConcatModel {
    /// Members and the first byte of each in the joint address space.
    members: Vec<(Box<dyn DeviceModel>, u64)>,
    capacity_bytes: u64,
    /// Flushes not yet completed by every member: (id, members left).
    flushes: Vec<(u64, usize)>,
    buf: Vec<DevCompletion>,
    stats: DeviceStats,
}

impl ConcatModel {
    /// Members with the bytes each contributes (at most its capacity), in order.
    pub fn new(members: Vec<(Box<dyn DeviceModel>, u64)>) -> ConcatModel {
        assert!(!members.is_empty(), "a concatenation of no device");
        let mut start = 0;
        let mut placed = Vec::with_capacity(members.len());
        for (device, len) in members {
            assert!(
                len > 0 && len <= device.capacity_bytes(),
                "member of {len} bytes"
            );
            assert!(len.is_multiple_of(super::SECTOR_BYTES));
            placed.push((device, start));
            start += len;
        }
        ConcatModel {
            members: placed,
            capacity_bytes: start,
            flushes: Vec::new(),
            buf: Vec::new(),
            stats: DeviceStats::default(),
        }
    }

    fn member_of(&self, offset_bytes: u64) -> usize {
        self.members
            .iter()
            .rposition(|&(_, start)| start <= offset_bytes)
            .expect("the first member starts at 0")
    }
}

impl DeviceModel for ConcatModel {
    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn submit(&mut self, now: Nanos, op: DevOp) {
        self.stats.count_submit(&op);
        if op.kind == DevOpKind::Flush {
            self.flushes.push((op.id, self.members.len()));
            for (device, _) in &mut self.members {
                device.submit(now, op);
            }
            return;
        }
        super::assert_op_in_range(&op, self.capacity_bytes);
        let m = self.member_of(op.offset_bytes);
        let start = self.members[m].1;
        let end = self
            .members
            .get(m + 1)
            .map_or(self.capacity_bytes, |&(_, s)| s);
        assert!(
            op.offset_bytes + op.len_bytes <= end,
            "op {op:?} crosses from member {m} into the next"
        );
        self.members[m].0.submit(
            now,
            DevOp {
                offset_bytes: op.offset_bytes - start,
                ..op
            },
        );
    }

    fn next_event_time(&self) -> Option<Nanos> {
        self.members
            .iter()
            .filter_map(|(d, _)| d.next_event_time())
            .min()
    }

    fn advance(&mut self, now: Nanos, done: &mut Vec<DevCompletion>) {
        self.buf.clear();
        for (device, _) in &mut self.members {
            device.advance(now, &mut self.buf);
        }
        for c in self.buf.drain(..) {
            match self.flushes.iter().position(|&(id, _)| id == c.id) {
                Some(i) => {
                    self.flushes[i].1 -= 1;
                    if self.flushes[i].1 == 0 {
                        self.flushes.remove(i);
                        done.push(c);
                    }
                }
                None => done.push(c),
            }
        }
    }

    fn outstanding(&self) -> usize {
        self.members
            .iter()
            .map(|(d, _)| d.outstanding())
            .sum::<usize>()
            - self.flushes.iter().map(|&(_, left)| left).sum::<usize>()
            + self.flushes.len()
    }

    fn name(&self) -> String {
        let names: Vec<String> = self.members.iter().map(|(d, _)| d.name()).collect();
        format!("concat({})", names.join(" + "))
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            busy_ns: self
                .members
                .iter()
                .map(|(d, _)| d.stats().busy_ns)
                .max()
                .unwrap_or(0),
            ..self.stats
        }
    }

    fn member_stats(&self) -> Vec<DeviceStats> {
        self.members
            .iter()
            .flat_map(|(d, _)| d.member_stats())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HddModel, HddParams};

    #[test]
    fn each_member_serves_its_range_and_a_flush_waits_for_all() {
        let disk = || Box::new(HddModel::new(HddParams::ultrastar_10k())) as Box<dyn DeviceModel>;
        let mut c = ConcatModel::new(vec![(disk(), 1 << 20), (disk(), 1 << 20)]);
        assert_eq!(c.capacity_bytes(), 2 << 20);
        let w = |id, offset_bytes| DevOp {
            id,
            kind: DevOpKind::Write,
            offset_bytes,
            len_bytes: 4096,
        };
        c.submit(Nanos(0), w(1, 0));
        c.submit(Nanos(0), w(2, 1 << 20));
        c.submit(
            Nanos(0),
            DevOp {
                id: 3,
                kind: DevOpKind::Flush,
                offset_bytes: 0,
                len_bytes: 0,
            },
        );
        let mut done = Vec::new();
        while let Some(t) = c.next_event_time() {
            c.advance(t, &mut done);
        }
        let ids: Vec<u64> = done.iter().map(|d| d.id).collect();
        assert_eq!(ids.len(), 3, "{ids:?}");
        assert_eq!(*ids.last().expect("three"), 3, "the flush completes last");
        let members = c.member_stats();
        assert_eq!((members[0].writes, members[1].writes), (1, 1));
        assert_eq!(c.outstanding(), 0);
    }
}
