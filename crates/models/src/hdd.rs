//! A 10K RPM disk drive in virtual time, so that destage orders (LRW, CSCAN,
//! WOW) meet the mechanics they are meant to exploit: seek distance, the angle
//! of the platter at the moment the head arrives, and the disk's own SATF queue.
//!
//! The model is mechanical, not statistical: zoned geometry maps an LBA to
//! (cylinder, head, sector); the platter angle is a pure function of virtual
//! time; a request's service is controller overhead, seek (or head switch),
//! rotational wait, and transfer across track and cylinder boundaries with
//! track/cylinder skew. There is no write cache in the drive: a write completes
//! when its last sector is on the media. Reads may be served by a one-stream
//! read-ahead (the platter keeps streaming after a read while the drive idles).
//! It must never look at data, and never allocate per operation once warm.
//! Parameters, their sources and our choices are in `docs/sim-models.md`.

use std::collections::VecDeque;

use wcache_core::time::Nanos;

use super::{
    assert_op_in_range, DevCompletion, DevOp, DevOpKind, DeviceModel, DeviceStats, FlushTracker,
    SECTOR_BYTES,
};

/// One recording zone: consecutive cylinders with the same sectors per track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HddZone {
    pub cylinder_count: u32,
    pub sectors_per_track: u32,
}

/// Zone table of the default disk, outer rim (LBA 0) first: 16 zones from 470
/// to 270 sectors/track in equal steps; outer zones are wider (geometric ratio
/// 0.923) so that 15,110 cylinders x 12 heads hold 36.4 GB (see docs/sim-models.md).
const ULTRASTAR_ZONES: [(u32, u32); 16] = [
    (1615, 470),
    (1484, 457),
    (1370, 443),
    (1265, 430),
    (1168, 417),
    (1078, 403),
    (995, 390),
    (919, 377),
    (848, 363),
    (783, 350),
    (723, 337),
    (667, 323),
    (616, 310),
    (569, 297),
    (525, 283),
    (485, 270),
];

const ULTRASTAR_CYLINDERS: u32 = 15_110;

const fn zone_cylinders_sum(zones: &[(u32, u32)]) -> u32 {
    let mut sum = 0;
    let mut i = 0;
    while i < zones.len() {
        sum += zones[i].0;
        i += 1;
    }
    sum
}
const _: () = assert!(zone_cylinders_sum(&ULTRASTAR_ZONES) == ULTRASTAR_CYLINDERS);

/// Parameters of the disk model. Times in milliseconds as in data sheets;
/// converted to nanoseconds once, at construction.
#[derive(Clone, Debug, PartialEq)]
pub struct HddParams {
    pub heads: u32,
    /// Outer rim (LBA 0) first.
    pub zones: Vec<HddZone>,
    pub revolution_ns: u64,
    /// Read seek over one cylinder.
    pub seek_ms_min: f64,
    /// Mean read seek over random cylinder pairs (distance >= 1).
    pub seek_ms_avg: f64,
    /// Read seek over the full stroke.
    pub seek_ms_max: f64,
    /// Where the seek curve turns from `a + b*sqrt(d)` to linear (Ruemmler & Wilkes).
    pub seek_break_cylinders: u32,
    /// Added to every write seek (distance >= 1): writes need finer settling.
    pub write_settle_ms: f64,
    pub head_switch_ms: f64,
    /// Command processing per request; overlaps the mechanism when the command
    /// was already queued at the drive (tagged queueing).
    pub controller_overhead_ms: f64,
    /// Commands the drive holds (in service plus SATF-reorderable); more wait FIFO outside.
    pub queue_depth: usize,
    /// Read-ahead segment: after a read, while idle, the drive keeps reading
    /// the following sectors into its buffer up to this many bytes ahead of the
    /// host. 0 disables it. (A read cache only; there is no write cache.)
    pub read_ahead_bytes: u64,
}

impl HddParams {
    /// The WOW testbed's disk: IBM 36.4 GB 10K RPM Ultrastar class.
    pub fn ultrastar_10k() -> HddParams {
        HddParams {
            heads: 12,
            zones: ULTRASTAR_ZONES
                .iter()
                .map(|&(cylinder_count, sectors_per_track)| HddZone {
                    cylinder_count,
                    sectors_per_track,
                })
                .collect(),
            revolution_ns: 6_000_000,
            seek_ms_min: 1.0,
            seek_ms_avg: 4.7,
            seek_ms_max: 10.5,
            seek_break_cylinders: 1_000,
            write_settle_ms: 0.5,
            head_switch_ms: 0.18,
            controller_overhead_ms: 0.3,
            queue_depth: 32,
            read_ahead_bytes: 512 * 1024,
        }
    }

    pub fn with_queue_depth(mut self, queue_depth: usize) -> HddParams {
        self.queue_depth = queue_depth;
        self
    }

    pub fn with_read_ahead_bytes(mut self, read_ahead_bytes: u64) -> HddParams {
        self.read_ahead_bytes = read_ahead_bytes;
        self
    }
}

#[derive(Clone, Copy, Debug)]
struct Zone {
    cylinder_first: u32,
    cylinder_count: u32,
    sectors_per_track: u32,
    lba_first: u64,
    sectors_per_cylinder: u64,
}

/// A physical address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chs {
    pub cylinder: u32,
    pub head: u32,
    pub sector: u32,
    zone: u16,
}

#[derive(Clone, Copy, Debug)]
struct Queued {
    id: u64,
    is_write: bool,
    lba: u64,
    sectors: u64,
    at: Chs,
    /// When the drive has parsed the command and may start moving for it.
    ready: Nanos,
    /// Arrival order: ties in SATF go to the older command.
    seq: u64,
    write_seq: u64,
}

#[derive(Clone, Copy, Debug)]
struct InService {
    id: u64,
    is_write: bool,
    write_seq: u64,
    end: Nanos,
    end_cylinder: u32,
    end_head: u32,
}

/// The drive's read-ahead stream after a read: the platter keeps passing
/// `lba_next`, … under the head as if the transfer had gone on.
#[derive(Clone, Copy, Debug)]
struct ReadAhead {
    lba_next: u64,
    /// When the last sector before `lba_next` passed under the head.
    t_end_ns: u64,
    /// Reading stops when the buffer holds the sectors up to here.
    window_end_lba: u64,
    /// The host fell behind and the buffer filled: nothing beyond the window.
    stopped: bool,
}

/// One disk drive. See the module header.
pub struct HddModel {
    params: HddParams,
    zones: Vec<Zone>,
    cylinders: u32,
    capacity_sectors: u64,
    /// Read seek time per cylinder distance; index 0 is 0.
    seek_ns_table: Vec<u64>,
    write_settle_ns: u64,
    head_switch_ns: u64,
    overhead_ns: u64,
    /// Angular offset added per cylinder so that a sequential transfer crossing
    /// tracks and cylinders finds its next sector just after the switch.
    skew_ns_per_cylinder: u64,
    head_cylinder: u32,
    head_head: u32,
    in_service: Option<InService>,
    /// SATF set; with `in_service` at most `queue_depth` commands.
    active: Vec<Queued>,
    /// Beyond the queue depth, FIFO.
    waiting: VecDeque<Queued>,
    /// Valid while the mechanism has done nothing since the last read.
    read_ahead: Option<ReadAhead>,
    read_ahead_sectors: u64,
    seq_next: u64,
    flush: FlushTracker,
    done_buf: Vec<DevCompletion>,
    stats: DeviceStats,
}

impl HddModel {
    pub fn new(params: HddParams) -> HddModel {
        assert!(params.heads > 0, "disk without heads");
        assert!(!params.zones.is_empty(), "disk without zones");
        assert!(params.queue_depth >= 1, "queue depth must be at least 1");
        assert!(params.revolution_ns > 0);
        assert!(params.seek_ms_min > 0.0);
        assert!(params.seek_ms_min < params.seek_ms_avg);
        assert!(params.seek_ms_avg < params.seek_ms_max);
        let mut zones = Vec::with_capacity(params.zones.len());
        let mut cylinder_first = 0u32;
        let mut lba_first = 0u64;
        for zone in &params.zones {
            assert!(zone.cylinder_count > 0 && zone.sectors_per_track > 0);
            let sectors_per_cylinder = zone.sectors_per_track as u64 * params.heads as u64;
            zones.push(Zone {
                cylinder_first,
                cylinder_count: zone.cylinder_count,
                sectors_per_track: zone.sectors_per_track,
                lba_first,
                sectors_per_cylinder,
            });
            cylinder_first += zone.cylinder_count;
            lba_first += sectors_per_cylinder * zone.cylinder_count as u64;
        }
        let cylinders = cylinder_first;
        assert!(
            cylinders > params.seek_break_cylinders,
            "seek break beyond the disk"
        );
        let seek_ns_table = fit_seek_table(&params, cylinders);
        let write_settle_ns = ms_to_ns(params.write_settle_ms);
        let head_switch_ns = ms_to_ns(params.head_switch_ms);
        let overhead_ns = ms_to_ns(params.controller_overhead_ms);
        let cylinder_skew_ns = seek_ns_table[1] + write_settle_ns;
        let skew_ns_per_cylinder =
            ((params.heads as u64 - 1) * head_switch_ns + cylinder_skew_ns) % params.revolution_ns;
        let queue_depth = params.queue_depth;
        let read_ahead_sectors = params.read_ahead_bytes / SECTOR_BYTES;
        HddModel {
            params,
            zones,
            cylinders,
            capacity_sectors: lba_first,
            seek_ns_table,
            write_settle_ns,
            head_switch_ns,
            overhead_ns,
            skew_ns_per_cylinder,
            head_cylinder: 0,
            head_head: 0,
            in_service: None,
            active: Vec::with_capacity(queue_depth),
            waiting: VecDeque::new(),
            read_ahead: None,
            read_ahead_sectors,
            seq_next: 0,
            flush: FlushTracker::default(),
            done_buf: Vec::new(),
            stats: DeviceStats::default(),
        }
    }

    pub fn params(&self) -> &HddParams {
        &self.params
    }

    pub fn cylinders(&self) -> u32 {
        self.cylinders
    }

    pub fn capacity_sectors(&self) -> u64 {
        self.capacity_sectors
    }

    /// Seek time over `distance_cylinders` (0 for none), writes including settle.
    pub fn seek_ns(&self, distance_cylinders: u32, kind: DevOpKind) -> u64 {
        if distance_cylinders == 0 {
            return 0;
        }
        assert!(distance_cylinders < self.cylinders, "seek beyond the disk");
        let settle_ns = if kind == DevOpKind::Write {
            self.write_settle_ns
        } else {
            0
        };
        self.seek_ns_table[distance_cylinders as usize] + settle_ns
    }

    /// Physical address of a sector. Panics beyond the capacity.
    pub fn chs(&self, lba: u64) -> Chs {
        assert!(lba < self.capacity_sectors, "lba {lba} beyond the disk");
        let zone_index = self.zones.partition_point(|z| z.lba_first <= lba) - 1;
        let zone = &self.zones[zone_index];
        let rel = lba - zone.lba_first;
        let within_cylinder = rel % zone.sectors_per_cylinder;
        Chs {
            cylinder: zone.cylinder_first + (rel / zone.sectors_per_cylinder) as u32,
            head: (within_cylinder / zone.sectors_per_track as u64) as u32,
            sector: (within_cylinder % zone.sectors_per_track as u64) as u32,
            zone: zone_index as u16,
        }
    }

    /// Sectors per track at `lba` (media rate = this x 512 B per revolution).
    pub fn sectors_per_track(&self, lba: u64) -> u32 {
        self.zones[self.chs(lba).zone as usize].sectors_per_track
    }

    /// Cylinder under the head now (after the last processed event).
    pub fn head_cylinder(&self) -> u32 {
        self.head_cylinder
    }

    fn skew_ns(&self, cylinder: u32, head: u32) -> u64 {
        let rev = self.params.revolution_ns;
        (cylinder as u64 * self.skew_ns_per_cylinder + head as u64 * self.head_switch_ns) % rev
    }

    /// Angle (as time into the revolution) at which `sector` of a track begins.
    fn sector_phase_ns(&self, at: Chs, sector: u32) -> u64 {
        let rev = self.params.revolution_ns;
        let spt = self.zones[at.zone as usize].sectors_per_track as u64;
        (self.skew_ns(at.cylinder, at.head) + sector as u64 * rev / spt) % rev
    }

    /// Time from `t_ns` until the platter brings `phase_ns` under the head.
    fn rotational_wait_ns(&self, t_ns: u64, phase_ns: u64) -> u64 {
        let rev = self.params.revolution_ns;
        (phase_ns + rev - t_ns % rev) % rev
    }

    fn position_ns(&self, cylinder: u32, head: u32, to: Chs, is_write: bool) -> u64 {
        if cylinder != to.cylinder {
            let kind = if is_write {
                DevOpKind::Write
            } else {
                DevOpKind::Read
            };
            self.seek_ns(cylinder.abs_diff(to.cylinder), kind)
        } else if head != to.head {
            self.head_switch_ns
        } else {
            0
        }
    }

    /// When the first sector of `q` would pass under the head, if the
    /// mechanism started moving for it at `t_ns` from the current head.
    fn access_start_ns(&self, t_ns: u64, q: &Queued) -> u64 {
        let t = t_ns + self.position_ns(self.head_cylinder, self.head_head, q.at, q.is_write);
        t + self.rotational_wait_ns(t, self.sector_phase_ns(q.at, q.at.sector))
    }

    /// Transfers `q` from `start_ns` (its first sector under the head);
    /// returns the end time and the final cylinder and head.
    fn transfer(&self, start_ns: u64, q: &Queued) -> (u64, u32, u32) {
        let rev = self.params.revolution_ns;
        let mut t = start_ns;
        let mut at = q.at;
        let mut remaining = q.sectors;
        loop {
            let spt = self.zones[at.zone as usize].sectors_per_track as u64;
            let first = at.sector as u64;
            let chunk = remaining.min(spt - first);
            t += (first + chunk) * rev / spt - first * rev / spt;
            remaining -= chunk;
            if remaining == 0 {
                return (t, at.cylinder, at.head);
            }
            if at.head + 1 < self.params.heads {
                at.head += 1;
                t += self.head_switch_ns;
            } else {
                at.head = 0;
                at.cylinder += 1;
                assert!(at.cylinder < self.cylinders, "transfer ran off the disk");
                let zone = &self.zones[at.zone as usize];
                if at.cylinder >= zone.cylinder_first + zone.cylinder_count {
                    at.zone += 1;
                }
                let kind = if q.is_write {
                    DevOpKind::Write
                } else {
                    DevOpKind::Read
                };
                t += self.seek_ns(1, kind);
            }
            at.sector = 0;
            t += self.rotational_wait_ns(t, self.sector_phase_ns(at, 0));
        }
    }

    fn in_drive(&self) -> usize {
        self.active.len() + usize::from(self.in_service.is_some())
    }

    /// Moves commands from the outside FIFO into the drive while it has room.
    fn refill(&mut self, now: Nanos) {
        while self.in_drive() < self.params.queue_depth {
            let Some(mut q) = self.waiting.pop_front() else {
                break;
            };
            q.ready = now + Nanos(self.overhead_ns);
            self.active.push(q);
        }
    }

    /// Starts the best command (SATF) if the mechanism is free.
    fn dispatch(&mut self, now: Nanos) {
        if self.in_service.is_some() || self.active.is_empty() {
            return;
        }
        let mut best_index = 0;
        let mut best_key = (u64::MAX, u64::MAX);
        for (index, q) in self.active.iter().enumerate() {
            let ready_ns = now.0.max(q.ready.0);
            let start_ns = if self.read_ahead_hit(q) {
                ready_ns
            } else {
                self.access_start_ns(ready_ns, q)
            };
            let key = (start_ns, q.seq);
            if key < best_key {
                best_key = key;
                best_index = index;
            }
        }
        let q = self.active.swap_remove(best_index);
        let from_read_ahead = self.read_ahead_hit(&q);
        let (end_ns, end_cylinder, end_head) = match self.read_ahead {
            Some(ra) if from_read_ahead => self.serve_from_read_ahead(ra, &q, now.0.max(q.ready.0)),
            _ => {
                let (end_ns, end_cylinder, end_head) = self.transfer(best_key.0, &q);
                self.read_ahead = (!q.is_write && self.read_ahead_sectors > 0).then(|| ReadAhead {
                    lba_next: q.lba + q.sectors,
                    t_end_ns: end_ns,
                    window_end_lba: (q.lba + q.sectors + self.read_ahead_sectors)
                        .min(self.capacity_sectors),
                    stopped: false,
                });
                (end_ns, end_cylinder, end_head)
            }
        };
        assert!(end_ns > now.0, "service took no time");
        self.stats.busy_ns += end_ns - now.0;
        // From read-ahead the command is served as the stream passes: no positioning.
        let position_ns = if from_read_ahead {
            0
        } else {
            best_key.0 - now.0
        };
        if q.is_write {
            self.stats.write_service_ns += end_ns - now.0;
            self.stats.write_position_ns += position_ns;
        } else {
            self.stats.read_service_ns += end_ns - now.0;
            self.stats.read_position_ns += position_ns;
        }
        self.in_service = Some(InService {
            id: q.id,
            is_write: q.is_write,
            write_seq: q.write_seq,
            end: Nanos(end_ns),
            end_cylinder,
            end_head,
        });
    }

    fn read_ahead_hit(&self, q: &Queued) -> bool {
        self.read_ahead.is_some_and(|ra| {
            !q.is_write && q.lba == ra.lba_next && q.lba + q.sectors <= ra.window_end_lba
        })
    }

    /// Serves a read the read-ahead stream covers: done when the stream has
    /// passed its last sector or when the command is ready, whichever is later.
    fn serve_from_read_ahead(
        &mut self,
        ra: ReadAhead,
        q: &Queued,
        ready_ns: u64,
    ) -> (u64, u32, u32) {
        let stream_start_ns = self.access_start_ns(ra.t_end_ns, q);
        let (stream_end_ns, end_cylinder, end_head) = self.transfer(stream_start_ns, q);
        let window = Queued {
            sectors: ra.window_end_lba - q.lba,
            ..*q
        };
        let (stream_stop_ns, _, _) = self.transfer(stream_start_ns, &window);
        let stopped = ra.stopped || ready_ns > stream_stop_ns;
        self.read_ahead = Some(ReadAhead {
            lba_next: q.lba + q.sectors,
            t_end_ns: stream_end_ns,
            window_end_lba: if stopped {
                ra.window_end_lba
            } else {
                (q.lba + q.sectors + self.read_ahead_sectors).min(self.capacity_sectors)
            },
            stopped,
        });
        // A stopped stream's head position is not tracked further: it stays put.
        let end_ns = ready_ns.max(stream_end_ns).max(ready_ns + 1);
        (end_ns, end_cylinder, end_head)
    }

    fn run_until(&mut self, now: Nanos) {
        while let Some(s) = self.in_service {
            if s.end > now {
                break;
            }
            self.in_service = None;
            self.head_cylinder = s.end_cylinder;
            self.head_head = s.end_head;
            self.done_buf.push(DevCompletion {
                id: s.id,
                time: s.end,
            });
            if s.is_write {
                self.flush
                    .write_completed(s.write_seq, s.end, &mut self.done_buf);
            }
            self.refill(s.end);
            self.dispatch(s.end);
        }
    }
}

impl DeviceModel for HddModel {
    fn capacity_bytes(&self) -> u64 {
        self.capacity_sectors * SECTOR_BYTES
    }

    fn submit(&mut self, now: Nanos, op: DevOp) {
        self.run_until(now);
        self.stats.count_submit(&op);
        let is_write = match op.kind {
            DevOpKind::Flush => {
                self.flush.flush_submitted(op.id, now, &mut self.done_buf);
                return;
            }
            DevOpKind::Read => false,
            DevOpKind::Write => true,
        };
        assert_op_in_range(&op, self.capacity_bytes());
        let write_seq = if is_write {
            self.flush.write_submitted()
        } else {
            u64::MAX
        };
        let q = Queued {
            id: op.id,
            is_write,
            sectors: op.len_bytes / SECTOR_BYTES,
            lba: op.offset_bytes / SECTOR_BYTES,
            at: self.chs(op.offset_bytes / SECTOR_BYTES),
            ready: now + Nanos(self.overhead_ns),
            seq: self.seq_next,
            write_seq,
        };
        self.seq_next += 1;
        if self.in_drive() < self.params.queue_depth {
            self.active.push(q);
        } else {
            self.waiting.push_back(q);
        }
        self.dispatch(now);
    }

    fn next_event_time(&self) -> Option<Nanos> {
        match (self.done_buf.first(), self.in_service) {
            (Some(c), _) => Some(c.time),
            (None, Some(s)) => Some(s.end),
            (None, None) => None,
        }
    }

    fn advance(&mut self, now: Nanos, done: &mut Vec<DevCompletion>) {
        self.run_until(now);
        done.append(&mut self.done_buf);
    }

    fn outstanding(&self) -> usize {
        self.in_drive() + self.waiting.len() + self.flush.flushes_pending()
    }

    fn name(&self) -> String {
        let rpm = 60_000_000_000 / self.params.revolution_ns;
        format!("hdd-{rpm}rpm")
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }

    fn head_distance_hint(&self, offset_bytes: u64) -> u64 {
        let lba = offset_bytes / SECTOR_BYTES;
        if lba >= self.capacity_sectors {
            return u64::MAX;
        }
        self.chs(lba).cylinder.abs_diff(self.head_cylinder) as u64
    }
}

fn ms_to_ns(ms: f64) -> u64 {
    assert!(ms >= 0.0 && ms.is_finite(), "bad time {ms} ms");
    (ms * 1e6).round() as u64
}

/// Read seek time in ms for distance `d >= 1`: `min - b + b*sqrt(d)` below the
/// break, then a straight line from there to `max` at the full stroke
/// (Ruemmler & Wilkes' two-piece shape, continuous at the break).
fn seek_curve_ms(params: &HddParams, cylinders: u32, b: f64, d: u32) -> f64 {
    let break_d = params.seek_break_cylinders as f64;
    let a = params.seek_ms_min - b;
    if (d as f64) < break_d {
        return a + b * (d as f64).sqrt();
    }
    let at_break_ms = a + b * break_d.sqrt();
    let full_d = (cylinders - 1) as f64;
    at_break_ms + (params.seek_ms_max - at_break_ms) * (d as f64 - break_d) / (full_d - break_d)
}

/// Mean seek over two independent uniform cylinders at distance >= 1
/// (P(d) proportional to N - d).
fn seek_mean_ms(params: &HddParams, cylinders: u32, b: f64) -> f64 {
    let n = cylinders as f64;
    let mut sum = 0.0;
    let mut weight = 0.0;
    for d in 1..cylinders {
        let w = n - d as f64;
        sum += w * seek_curve_ms(params, cylinders, b, d);
        weight += w;
    }
    sum / weight
}

/// Fits the square-root coefficient so that the mean seek equals the spec's
/// average (bisection: the mean grows with it), and tabulates the curve.
fn fit_seek_table(params: &HddParams, cylinders: u32) -> Vec<u64> {
    let break_d = params.seek_break_cylinders as f64;
    // Largest b keeping the curve rising to the full stroke at the break.
    let mut hi = (params.seek_ms_max - params.seek_ms_min) / (break_d.sqrt() - 1.0);
    let mut lo = 0.0;
    assert!(
        seek_mean_ms(params, cylinders, lo) <= params.seek_ms_avg
            && seek_mean_ms(params, cylinders, hi) >= params.seek_ms_avg,
        "seek average {} ms cannot be fitted",
        params.seek_ms_avg
    );
    for _ in 0..50 {
        let mid = (lo + hi) / 2.0;
        if seek_mean_ms(params, cylinders, mid) < params.seek_ms_avg {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let b = (lo + hi) / 2.0;
    let mut table = Vec::with_capacity(cylinders as usize);
    table.push(0);
    for d in 1..cylinders {
        table.push(ms_to_ns(seek_curve_ms(params, cylinders, b, d)));
    }
    table
}
