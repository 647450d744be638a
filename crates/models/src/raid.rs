//! RAID-10 and RAID-5 over member device models, so that a destage pays what
//! it pays on a real array: two mirror writes on RAID-10, read-modify-write
//! (or reconstruct-write) on RAID-5, and nothing extra for a full stripe.
//!
//! The array is a thin event-driven layer: it splits each logical operation
//! into member operations, submits them to the members at the right virtual
//! time (RAID-5 writes only once their reads are back), and completes the
//! logical operation when its last member operation completes. By default it
//! has no cache and no stripe lock: concurrent writes to one stripe are not
//! serialized (documented simplification). With the stripe cache (`raid5-md`),
//! a RAID-5 write whose rows overlap a write in flight to the same stripe
//! joins it while it is still reading (one parity update for both, as Linux
//! md gathers the writes pending on a stripe) or else waits for it to finish.
//! It must never look at data, and never allocate per operation once its
//! tables are warm.

use thiserror::Error;
use wcache_core::time::Nanos;

use super::{
    assert_op_in_range, BusyClock, DevCompletion, DevOp, DevOpKind, DeviceModel, DeviceStats,
    FlushTracker, HddModel, HddParams, SECTOR_BYTES,
};

/// Most members an array may have (bounds the per-stripe write plan).
pub const RAID_MEMBERS_MAX: usize = 16;

/// Default strip (chunk) size: the WOW paper's 64 KiB.
pub const STRIP_BYTES_DEFAULT: u64 = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaidLevel {
    /// Mirrored pairs (members 2k and 2k+1), strips striped across the pairs.
    Raid10,
    /// Rotating parity, left-symmetric layout.
    Raid5,
}

/// Error of [`RaidModel::new`].
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RaidConfigError {
    #[error("RAID-10 needs an even number of members (at least 2), got {members}")]
    Raid10Members { members: usize },
    #[error("RAID-5 needs at least 3 members, got {members}")]
    Raid5Members { members: usize },
    #[error("at most {RAID_MEMBERS_MAX} members, got {members}")]
    TooManyMembers { members: usize },
    #[error("strip size {strip_bytes} B is not a positive multiple of 512 B")]
    StripSize { strip_bytes: u64 },
    #[error("the smallest member ({capacity_bytes} B) holds no whole strip")]
    MembersTooSmall { capacity_bytes: u64 },
}

#[derive(Clone, Copy, Debug, Default)]
struct MemberIo {
    member: u8,
    offset_bytes: u64,
    len_bytes: u64,
}

/// A logical operation in flight.
#[derive(Clone, Copy, Debug)]
struct Parent {
    id: u64,
    is_write: bool,
    write_seq: u64,
    parts_remaining: u32,
}

/// Writes one part may plan: one per data member and two parity ranges, and
/// with the stripe cache those of the writes that joined it.
const PLAN_MAX: usize = 4 * (RAID_MEMBERS_MAX + 2);
const NONE: u32 = u32::MAX;

/// A piece of a logical operation whose member operations run together
/// (RAID-5: one stripe; otherwise the whole operation).
#[derive(Clone, Copy, Debug)]
struct Part {
    parent: u32,
    ios_remaining: u32,
    /// Writes to submit once the reads of this part are back.
    writes: [MemberIo; PLAN_MAX],
    writes_len: u8,
    /// Stripe cache only (RAID-5 writes): the stripe, the parity rows
    /// (strip-relative), read-modify-write or not, and whether its writes
    /// are out.
    stripe: u64,
    rows: [(u64, u64); 2],
    rows_len: u8,
    rmw: bool,
    writing: bool,
    /// Parts that joined this one (complete with it), linked by `next`.
    joined: u32,
    /// Parts waiting for this one to finish, linked by `next`.
    waiting: u32,
    next: u32,
    /// A waiting part's stripe-relative range, planned when it starts.
    range: (u64, u64),
}

/// A RAID array of member models. See the module header.
pub struct RaidModel {
    level: RaidLevel,
    members: Vec<Box<dyn DeviceModel>>,
    strip_bytes: u64,
    strips_per_member: u64,
    capacity_bytes: u64,
    parents: Vec<Parent>,
    parents_free: Vec<u32>,
    parts: Vec<Part>,
    parts_free: Vec<u32>,
    ops_outstanding: usize,
    flush: FlushTracker,
    done_buf: Vec<DevCompletion>,
    member_done: Vec<DevCompletion>,
    stats: DeviceStats,
    busy: BusyClock,
    /// RAID-5 stripe cache: writes in flight per stripe (none when off).
    stripe_cache: bool,
    stripe_writes: std::collections::HashMap<u64, Vec<u32>>,
}

impl RaidModel {
    /// An array over `members` (RAID-10: pairs 0+1, 2+3, …; RAID-5: parity
    /// rotates left-symmetric). Capacity: whole stripes of the smallest member.
    pub fn new(
        level: RaidLevel,
        members: Vec<Box<dyn DeviceModel>>,
        strip_bytes: u64,
    ) -> Result<RaidModel, RaidConfigError> {
        let count = members.len();
        if count > RAID_MEMBERS_MAX {
            return Err(RaidConfigError::TooManyMembers { members: count });
        }
        match level {
            RaidLevel::Raid10 if count < 2 || !count.is_multiple_of(2) => {
                return Err(RaidConfigError::Raid10Members { members: count })
            }
            RaidLevel::Raid5 if count < 3 => {
                return Err(RaidConfigError::Raid5Members { members: count })
            }
            _ => {}
        }
        if strip_bytes == 0 || !strip_bytes.is_multiple_of(SECTOR_BYTES) {
            return Err(RaidConfigError::StripSize { strip_bytes });
        }
        let member_capacity_bytes = members
            .iter()
            .map(|m| m.capacity_bytes())
            .min()
            .unwrap_or(0);
        let strips_per_member = member_capacity_bytes / strip_bytes;
        if strips_per_member == 0 {
            return Err(RaidConfigError::MembersTooSmall {
                capacity_bytes: member_capacity_bytes,
            });
        }
        let data_members = match level {
            RaidLevel::Raid10 => count as u64 / 2,
            RaidLevel::Raid5 => count as u64 - 1,
        };
        Ok(RaidModel {
            level,
            members,
            strip_bytes,
            strips_per_member,
            capacity_bytes: strips_per_member * strip_bytes * data_members,
            parents: Vec::new(),
            parents_free: Vec::new(),
            parts: Vec::new(),
            parts_free: Vec::new(),
            ops_outstanding: 0,
            flush: FlushTracker::default(),
            done_buf: Vec::new(),
            member_done: Vec::new(),
            stats: DeviceStats::default(),
            busy: BusyClock::default(),
            stripe_cache: false,
            stripe_writes: std::collections::HashMap::new(),
        })
    }

    /// RAID-5 with a stripe cache (see the module header); no effect on RAID-10.
    pub fn with_stripe_cache(mut self) -> RaidModel {
        self.stripe_cache = self.level == RaidLevel::Raid5;
        self
    }

    /// `member_count` identical disks with `params`.
    pub fn hdd_array(
        level: RaidLevel,
        params: &HddParams,
        member_count: usize,
        strip_bytes: u64,
    ) -> Result<RaidModel, RaidConfigError> {
        let members = (0..member_count)
            .map(|_| Box::new(HddModel::new(params.clone())) as Box<dyn DeviceModel>)
            .collect();
        RaidModel::new(level, members, strip_bytes)
    }

    /// The WOW paper's RAID-10: 2+2 10K RPM disks, 64 KiB strips.
    pub fn raid10_2x2_hdd() -> RaidModel {
        RaidModel::raid10_2x2(&HddParams::ultrastar_10k())
    }

    /// The same array of disks with `params`.
    pub fn raid10_2x2(params: &HddParams) -> RaidModel {
        match RaidModel::hdd_array(RaidLevel::Raid10, params, 4, STRIP_BYTES_DEFAULT) {
            Ok(raid) => raid,
            Err(e) => panic!("a 2+2 RAID-10 with 64 KiB strips is valid: {e}"),
        }
    }

    /// The WOW paper's RAID-5: 4+1 10K RPM disks, 64 KiB strips (256 KiB stripe).
    pub fn raid5_4p1_hdd() -> RaidModel {
        RaidModel::raid5_4p1(&HddParams::ultrastar_10k())
    }

    /// The same array of disks with `params`.
    pub fn raid5_4p1(params: &HddParams) -> RaidModel {
        match RaidModel::hdd_array(RaidLevel::Raid5, params, 5, STRIP_BYTES_DEFAULT) {
            Ok(raid) => raid,
            Err(e) => panic!("a 4+1 RAID-5 with 64 KiB strips is valid: {e}"),
        }
    }

    pub fn level(&self) -> RaidLevel {
        self.level
    }

    pub fn strip_bytes(&self) -> u64 {
        self.strip_bytes
    }

    /// Logical bytes per stripe (RAID-5: data strips only).
    pub fn stripe_data_bytes(&self) -> u64 {
        self.strip_bytes * self.data_members() as u64
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    pub fn member(&self, index: usize) -> &dyn DeviceModel {
        self.members[index].as_ref()
    }

    fn data_members(&self) -> usize {
        match self.level {
            RaidLevel::Raid10 => self.members.len() / 2,
            RaidLevel::Raid5 => self.members.len() - 1,
        }
    }

    /// RAID-5: the parity member of `stripe` (left: starts at the last member
    /// and moves left one per stripe).
    fn parity_member(&self, stripe: u64) -> usize {
        let n = self.members.len() as u64;
        (n - 1 - stripe % n) as usize
    }

    /// RAID-5: the member holding data strip `index` of `stripe` (symmetric:
    /// data starts just right of the parity and wraps).
    fn data_member(&self, stripe: u64, index: usize) -> usize {
        (self.parity_member(stripe) + 1 + index) % self.members.len()
    }

    /// RAID-5: the member I/O for the strip-relative range `[x, y)` of data
    /// strip `index` of `stripe`.
    fn data_io(&self, stripe: u64, index: usize, (x, y): (u64, u64)) -> MemberIo {
        MemberIo {
            member: self.data_member(stripe, index) as u8,
            offset_bytes: stripe * self.strip_bytes + x,
            len_bytes: y - x,
        }
    }

    /// RAID-5: the member I/O for the parity rows `[a, b)` of `stripe`.
    fn parity_io(&self, stripe: u64, (a, b): (u64, u64)) -> MemberIo {
        MemberIo {
            member: self.parity_member(stripe) as u8,
            offset_bytes: stripe * self.strip_bytes + a,
            len_bytes: b - a,
        }
    }

    fn alloc_parent(&mut self, parent: Parent) -> u32 {
        if let Some(index) = self.parents_free.pop() {
            self.parents[index as usize] = parent;
            index
        } else {
            self.parents.push(parent);
            (self.parents.len() - 1) as u32
        }
    }

    fn alloc_part(&mut self, parent: u32) -> u32 {
        let part = Part {
            parent,
            ios_remaining: 0,
            writes: [MemberIo::default(); PLAN_MAX],
            writes_len: 0,
            stripe: u64::MAX,
            rows: [(0, 0); 2],
            rows_len: 0,
            rmw: false,
            writing: false,
            joined: NONE,
            waiting: NONE,
            next: NONE,
            range: (0, 0),
        };
        self.parents[parent as usize].parts_remaining += 1;
        if let Some(index) = self.parts_free.pop() {
            self.parts[index as usize] = part;
            index
        } else {
            self.parts.push(part);
            (self.parts.len() - 1) as u32
        }
    }

    fn issue(&mut self, now: Nanos, part: u32, kind: DevOpKind, io: MemberIo) {
        assert!(io.len_bytes > 0, "empty member io");
        assert!(io.offset_bytes + io.len_bytes <= self.strips_per_member * self.strip_bytes);
        self.parts[part as usize].ios_remaining += 1;
        self.members[io.member as usize].submit(
            now,
            DevOp {
                id: part as u64,
                kind,
                offset_bytes: io.offset_bytes,
                len_bytes: io.len_bytes,
            },
        );
    }

    fn push_write(&mut self, part: u32, io: MemberIo) {
        let p = &mut self.parts[part as usize];
        assert!((p.writes_len as usize) < PLAN_MAX, "write plan overflow");
        p.writes[p.writes_len as usize] = io;
        p.writes_len += 1;
    }

    fn issue_planned_writes(&mut self, now: Nanos, part: u32) {
        let p = &mut self.parts[part as usize];
        assert_eq!(p.ios_remaining, 0, "writes issued before reads completed");
        p.writing = true;
        let len = std::mem::take(&mut p.writes_len) as usize;
        for i in 0..len {
            let io = self.parts[part as usize].writes[i];
            self.issue(now, part, DevOpKind::Write, io);
        }
    }

    fn plan_raid10(&mut self, now: Nanos, parent: u32, op: &DevOp) {
        // Strips k and k+pairs are adjacent on their pair, so each pair gets
        // one contiguous run per operation.
        let pairs = self.members.len() / 2;
        let mut runs = [(0u64, 0u64); RAID_MEMBERS_MAX / 2];
        let end = op.offset_bytes + op.len_bytes;
        let mut offset = op.offset_bytes;
        while offset < end {
            let strip = offset / self.strip_bytes;
            let within = offset % self.strip_bytes;
            let piece = (self.strip_bytes - within).min(end - offset);
            let pair = (strip % pairs as u64) as usize;
            let member_offset = (strip / pairs as u64) * self.strip_bytes + within;
            let run = &mut runs[pair];
            if run.1 == 0 {
                *run = (member_offset, piece);
            } else {
                assert_eq!(run.0 + run.1, member_offset, "RAID-10 run not contiguous");
                run.1 += piece;
            }
            offset += piece;
        }
        let part = self.alloc_part(parent);
        for (pair, &(offset_bytes, len_bytes)) in runs[..pairs].iter().enumerate() {
            if len_bytes == 0 {
                continue;
            }
            let mirrors = [2 * pair, 2 * pair + 1];
            if op.kind == DevOpKind::Write {
                for member in mirrors {
                    let io = MemberIo {
                        member: member as u8,
                        offset_bytes,
                        len_bytes,
                    };
                    self.issue(now, part, DevOpKind::Write, io);
                }
            } else {
                let member = self.pick_mirror(mirrors, offset_bytes);
                let io = MemberIo {
                    member: member as u8,
                    offset_bytes,
                    len_bytes,
                };
                self.issue(now, part, DevOpKind::Read, io);
            }
        }
    }

    /// The mirror with fewer outstanding operations; then the nearer head;
    /// then the lower index.
    fn pick_mirror(&self, mirrors: [usize; 2], offset_bytes: u64) -> usize {
        let key = |m: usize| {
            let member = &self.members[m];
            (
                member.outstanding(),
                member.head_distance_hint(offset_bytes),
                m,
            )
        };
        if key(mirrors[1]) < key(mirrors[0]) {
            mirrors[1]
        } else {
            mirrors[0]
        }
    }

    fn plan_raid5(&mut self, now: Nanos, parent: u32, op: &DevOp) {
        let stripe_data_bytes = self.stripe_data_bytes();
        let end = op.offset_bytes + op.len_bytes;
        let mut offset = op.offset_bytes;
        while offset < end {
            let stripe = offset / stripe_data_bytes;
            let first = offset % stripe_data_bytes;
            let last = stripe_data_bytes.min(first + (end - offset));
            if op.kind == DevOpKind::Write {
                self.plan_raid5_stripe_write(now, parent, stripe, first, last);
            } else {
                self.plan_raid5_stripe_read(now, parent, stripe, first, last);
            }
            offset += last - first;
        }
    }

    /// Strip-relative range `[x, y)` of data strip `index` touched by the
    /// stripe-relative range `[first, last)`, if any.
    fn strip_range(&self, index: u64, first: u64, last: u64) -> Option<(u64, u64)> {
        let strip_first = index * self.strip_bytes;
        let strip_last = strip_first + self.strip_bytes;
        let x = first.max(strip_first);
        let y = last.min(strip_last);
        (x < y).then(|| (x - strip_first, y - strip_first))
    }

    fn plan_raid5_stripe_read(
        &mut self,
        now: Nanos,
        parent: u32,
        stripe: u64,
        first: u64,
        last: u64,
    ) {
        let part = self.alloc_part(parent);
        for index in 0..self.data_members() {
            if let Some(range) = self.strip_range(index as u64, first, last) {
                let io = self.data_io(stripe, index, range);
                self.issue(now, part, DevOpKind::Read, io);
            }
        }
    }

    /// Read-modify-write reads the old data and old parity of the rows written;
    /// reconstruct-write reads what of those rows is not being written. Like
    /// Linux md, take read-modify-write only when it reads strictly less.
    fn plan_raid5_stripe_write(
        &mut self,
        now: Nanos,
        parent: u32,
        stripe: u64,
        first: u64,
        last: u64,
    ) {
        let part = self.alloc_part(parent);
        self.start_stripe_write(now, part, stripe, first, last);
    }

    /// Plan part `part`, a write of the stripe-relative range `[first, last)`.
    fn start_stripe_write(&mut self, now: Nanos, part: u32, stripe: u64, first: u64, last: u64) {
        assert!(first < last);
        let data_members = self.data_members();
        let first_index = first / self.strip_bytes;
        let last_index = (last - 1) / self.strip_bytes;
        // Rows (strip-relative) written in any strip; they need new parity. The
        // written range is contiguous in the stripe, so the rows are one range,
        // or two when it spans exactly two strips without overlapping rows.
        let x_first = first % self.strip_bytes;
        let y_last = (last - 1) % self.strip_bytes + 1;
        let mut rows = [(0u64, 0u64); 2];
        let rows_len = if first_index == last_index {
            rows[0] = (x_first, y_last);
            1
        } else if last_index == first_index + 1 && y_last < x_first {
            rows[0] = (0, y_last);
            rows[1] = (x_first, self.strip_bytes);
            2
        } else {
            rows[0] = (0, self.strip_bytes);
            1
        };
        let rows = &rows[..rows_len];
        let rows_bytes: u64 = rows.iter().map(|r| r.1 - r.0).sum();
        let written_bytes = last - first;
        let rmw_read_bytes = written_bytes + rows_bytes;
        let rcw_read_bytes = rows_bytes * data_members as u64 - written_bytes;
        let read_modify_write = rmw_read_bytes < rcw_read_bytes;

        self.parts[part as usize].next = NONE;
        if self.stripe_cache {
            if self.join_or_wait(now, part, stripe, (first, last), rows, read_modify_write) {
                return;
            }
            let p = &mut self.parts[part as usize];
            p.stripe = stripe;
            p.rows[..rows.len()].copy_from_slice(rows);
            p.rows_len = rows.len() as u8;
            p.rmw = read_modify_write;
            p.writing = false;
            p.joined = NONE;
            p.waiting = NONE;
            self.stripe_writes.entry(stripe).or_default().push(part);
        }
        for index in 0..data_members {
            let range = self.strip_range(index as u64, first, last);
            let strip = self.data_io(stripe, index, (0, 0));
            let io = |x: u64, y: u64| MemberIo {
                offset_bytes: strip.offset_bytes + x,
                len_bytes: y - x,
                ..strip
            };
            match (range, read_modify_write) {
                (Some((x, y)), true) => self.issue(now, part, DevOpKind::Read, io(x, y)),
                (None, true) => {}
                (range, false) => {
                    // Whatever of the parity rows this strip does not write.
                    let (x, y) = range.unwrap_or((0, 0));
                    for &(r0, r1) in rows {
                        let pieces = if x < y {
                            [(r0, r1.min(x)), (r0.max(y), r1)]
                        } else {
                            [(r0, r1), (0, 0)]
                        };
                        for (p0, p1) in pieces {
                            if p0 < p1 {
                                self.issue(now, part, DevOpKind::Read, io(p0, p1));
                            }
                        }
                    }
                }
            }
            if let Some((x, y)) = range {
                self.push_write(part, io(x, y));
            }
        }
        for &row in rows {
            let parity = self.parity_io(stripe, row);
            if read_modify_write {
                self.issue(now, part, DevOpKind::Read, parity);
            }
            self.push_write(part, parity);
        }
        if self.parts[part as usize].ios_remaining == 0 {
            self.issue_planned_writes(now, part);
        }
    }

    /// Stripe cache: if the rows of this write overlap a write in flight to
    /// the same stripe, join that write while it is still reading (both
    /// read-modify-write and room in its plan: this write's old data and the
    /// parity rows it does not cover are read with it, and written with its
    /// writes), or else wait until it is done. Returns whether it did either.
    fn join_or_wait(
        &mut self,
        now: Nanos,
        part: u32,
        stripe: u64,
        (first, last): (u64, u64),
        rows: &[(u64, u64)],
        rmw: bool,
    ) -> bool {
        let overlaps = |q: &Part| {
            q.rows[..q.rows_len as usize]
                .iter()
                .any(|&(a, b)| rows.iter().any(|&(x, y)| a < y && x < b))
        };
        let Some(lead) = self.stripe_writes.get(&stripe).and_then(|v| {
            v.iter()
                .copied()
                .find(|&q| overlaps(&self.parts[q as usize]))
        }) else {
            return false;
        };
        let data_members = self.data_members();
        let l = &self.parts[lead as usize];
        let (lead_rows, lead_rows_len) = (l.rows, l.rows_len as usize);
        let room = l.writes_len as usize + data_members + 3 <= PLAN_MAX;
        if !l.writing && l.rmw && rmw && room {
            for index in 0..data_members {
                if let Some(range) = self.strip_range(index as u64, first, last) {
                    let io = self.data_io(stripe, index, range);
                    self.issue(now, lead, DevOpKind::Read, io);
                    self.push_write(lead, io);
                }
            }
            for &row in rows {
                for piece in uncovered(row, &lead_rows[..lead_rows_len]) {
                    let io = self.parity_io(stripe, piece);
                    self.issue(now, lead, DevOpKind::Read, io);
                    self.push_write(lead, io);
                }
            }
            self.parts[part as usize].next = self.parts[lead as usize].joined;
            self.parts[lead as usize].joined = part;
        } else {
            let before = self.parts[lead as usize].waiting;
            let p = &mut self.parts[part as usize];
            p.stripe = stripe;
            p.range = (first, last);
            p.next = before;
            self.parts[lead as usize].waiting = part;
        }
        true
    }

    /// Part `part` is done: with the stripe cache, so are the writes that
    /// joined it, and the writes that waited for it start.
    fn part_done(&mut self, part: u32, time: Nanos) {
        let p = &self.parts[part as usize];
        let (stripe, mut joined, mut waiting) = (p.stripe, p.joined, p.waiting);
        if stripe != u64::MAX {
            if let Some(v) = self.stripe_writes.get_mut(&stripe) {
                v.retain(|&q| q != part);
                if v.is_empty() {
                    self.stripe_writes.remove(&stripe);
                }
            }
        }
        while joined != NONE {
            let next = self.parts[joined as usize].next;
            self.finish_part(joined, time);
            joined = next;
        }
        self.finish_part(part, time);
        while waiting != NONE {
            let w = &self.parts[waiting as usize];
            let (stripe, (first, last), next) = (w.stripe, w.range, w.next);
            self.start_stripe_write(time, waiting, stripe, first, last);
            waiting = next;
        }
    }

    /// A member finished operation `part` at `time`.
    fn member_completed(&mut self, part: u32, time: Nanos) {
        let p = &mut self.parts[part as usize];
        assert!(p.ios_remaining > 0, "member completion for an idle part");
        p.ios_remaining -= 1;
        if p.ios_remaining > 0 {
            return;
        }
        if p.writes_len > 0 {
            self.issue_planned_writes(time, part);
            return;
        }
        self.part_done(part, time);
    }

    /// Account part `part` done to its parent, completing the parent with its last part.
    fn finish_part(&mut self, part: u32, time: Nanos) {
        let parent_index = self.parts[part as usize].parent;
        self.parts_free.push(part);
        let parent = &mut self.parents[parent_index as usize];
        assert!(parent.parts_remaining > 0);
        parent.parts_remaining -= 1;
        if parent.parts_remaining > 0 {
            return;
        }
        let parent = *parent;
        self.parents_free.push(parent_index);
        self.done_buf.push(DevCompletion {
            id: parent.id,
            time,
        });
        if parent.is_write {
            self.flush
                .write_completed(parent.write_seq, time, &mut self.done_buf);
        }
        assert!(self.ops_outstanding > 0);
        self.ops_outstanding -= 1;
        if self.ops_outstanding == 0 {
            self.busy.stop(time);
        }
    }

    /// Processes member events in time order up to `now`.
    fn run_until(&mut self, now: Nanos) {
        loop {
            let mut best: Option<(Nanos, usize)> = None;
            for (index, member) in self.members.iter().enumerate() {
                if let Some(t) = member.next_event_time() {
                    if t <= now && best.is_none_or(|(best_t, _)| t < best_t) {
                        best = Some((t, index));
                    }
                }
            }
            let Some((t, index)) = best else {
                break;
            };
            let mut member_done = std::mem::take(&mut self.member_done);
            self.members[index].advance(t, &mut member_done);
            for c in member_done.drain(..) {
                let part = u32::try_from(c.id).expect("member op ids are part indices");
                self.member_completed(part, c.time);
            }
            self.member_done = member_done;
        }
    }
}

/// The pieces of `[r0, r1)` outside every range of `cover` (at most two ranges).
fn uncovered((r0, r1): (u64, u64), cover: &[(u64, u64)]) -> impl Iterator<Item = (u64, u64)> {
    let mut sorted = [(0u64, 0u64); 2];
    let n = cover.len().min(2);
    sorted[..n].copy_from_slice(&cover[..n]);
    sorted[..n].sort_unstable();
    let mut pieces = [(0u64, 0u64); 3];
    let mut count = 0;
    let mut at = r0;
    for &(a, b) in &sorted[..n] {
        if b <= at || a >= r1 {
            continue;
        }
        if a > at {
            pieces[count] = (at, a);
            count += 1;
        }
        at = b;
        if at >= r1 {
            break;
        }
    }
    if at < r1 {
        pieces[count] = (at, r1);
        count += 1;
    }
    pieces.into_iter().take(count)
}

impl DeviceModel for RaidModel {
    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn submit(&mut self, now: Nanos, op: DevOp) {
        self.run_until(now);
        self.stats.count_submit(&op);
        if op.kind == DevOpKind::Flush {
            // Members hold no volatile state (no model has a write cache), so a
            // flush only waits for the earlier logical writes.
            self.flush.flush_submitted(op.id, now, &mut self.done_buf);
            return;
        }
        assert_op_in_range(&op, self.capacity_bytes);
        let is_write = op.kind == DevOpKind::Write;
        let write_seq = if is_write {
            self.flush.write_submitted()
        } else {
            u64::MAX
        };
        if self.ops_outstanding == 0 {
            self.busy.start(now);
        }
        self.ops_outstanding += 1;
        let parent = self.alloc_parent(Parent {
            id: op.id,
            is_write,
            write_seq,
            parts_remaining: 0,
        });
        match self.level {
            RaidLevel::Raid10 => self.plan_raid10(now, parent, &op),
            RaidLevel::Raid5 => self.plan_raid5(now, parent, &op),
        }
        assert!(self.parents[parent as usize].parts_remaining > 0);
    }

    fn next_event_time(&self) -> Option<Nanos> {
        if let Some(c) = self.done_buf.first() {
            return Some(c.time);
        }
        self.members
            .iter()
            .filter_map(|m| m.next_event_time())
            .min()
    }

    fn advance(&mut self, now: Nanos, done: &mut Vec<DevCompletion>) {
        self.run_until(now);
        done.append(&mut self.done_buf);
    }

    fn outstanding(&self) -> usize {
        self.ops_outstanding + self.flush.flushes_pending()
    }

    fn name(&self) -> String {
        let n = self.members.len();
        match self.level {
            RaidLevel::Raid10 => format!("raid10-{}+{}", n / 2, n / 2),
            RaidLevel::Raid5 if self.stripe_cache => format!("raid5-md-{}+1", n - 1),
            RaidLevel::Raid5 => format!("raid5-{}+1", n - 1),
        }
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            busy_ns: self.busy.total_ns(),
            ..self.stats
        }
    }

    fn member_stats(&self) -> Vec<DeviceStats> {
        self.members.iter().map(|m| m.stats()).collect()
    }
}
