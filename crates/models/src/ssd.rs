//! Flash SSD and RAM/NVRAM models: the fast devices wcache keeps its copy on
//! (or that stand in for a fast backing), simple on purpose. Their job in the
//! simulator is to cost something sensible and to saturate at a plausible
//! rate, not to model flash internals (no garbage collection, no write cache).
//! They must never look at data. Parameters and sources: `docs/sim-models.md`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use wcache_core::time::Nanos;

use super::{
    assert_op_in_range, BusyClock, DevCompletion, DevOp, DevOpKind, DeviceModel, DeviceStats,
    FlushTracker,
};

/// Size of the access the latency figures were measured with.
pub const SSD_LATENCY_UNIT_BYTES: u64 = 4096;

#[derive(Clone, Debug, PartialEq)]
pub struct SsdParams {
    pub capacity_bytes: u64,
    /// Operations served at once (flash channels/dies); more wait FIFO.
    pub channels: usize,
    /// Access time of a 4 KiB operation, by kind and by whether it continues
    /// the previous operation of the same kind.
    pub read_us_random: f64,
    pub read_us_sequential: f64,
    pub write_us_random: f64,
    pub write_us_sequential: f64,
    /// Device-wide transfer limit shared by all channels.
    pub bandwidth_bytes_per_s: f64,
}

impl SsdParams {
    /// Koller et al. (FAST'13) PCIe SSD access times; channels, bandwidth and
    /// capacity are our choices (docs/sim-models.md).
    pub fn koller_pcie() -> SsdParams {
        SsdParams {
            capacity_bytes: 128 << 30,
            channels: 8,
            read_us_random: 177.0,
            read_us_sequential: 93.0,
            write_us_random: 66.0,
            write_us_sequential: 82.0,
            bandwidth_bytes_per_s: 800e6,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct SsdInFlight {
    id: u64,
    end: Nanos,
    write_seq: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct SsdQueued {
    id: u64,
    len_bytes: u64,
    latency_ns: u64,
    write_seq: Option<u64>,
}

/// An SSD: `channels` operations at a time, each costing its access time and
/// then its bytes over the shared bus. Service order is FIFO.
pub struct SsdModel {
    params: SsdParams,
    latency_ns: [[u64; 2]; 2],
    ps_per_byte: u64,
    channels: Vec<Option<SsdInFlight>>,
    waiting: VecDeque<SsdQueued>,
    /// When the shared transfer path is next free.
    bus_free: Nanos,
    /// End offset of the last read and the last write, for sequential detection.
    last_end_bytes: [u64; 2],
    flush: FlushTracker,
    done_buf: Vec<DevCompletion>,
    ops_outstanding: usize,
    stats: DeviceStats,
    busy: BusyClock,
}

fn us_to_ns(us: f64) -> u64 {
    assert!(us >= 0.0 && us.is_finite(), "bad time {us} us");
    (us * 1e3).round() as u64
}

fn ps_per_byte(bandwidth_bytes_per_s: f64) -> u64 {
    assert!(bandwidth_bytes_per_s > 0.0, "bandwidth must be positive");
    (1e12 / bandwidth_bytes_per_s).round() as u64
}

impl SsdModel {
    pub fn new(params: SsdParams) -> SsdModel {
        assert!(params.channels >= 1, "SSD without channels");
        assert!(params.capacity_bytes > 0);
        // Indexed [is_write][is_sequential].
        let latency_ns = [
            [
                us_to_ns(params.read_us_random),
                us_to_ns(params.read_us_sequential),
            ],
            [
                us_to_ns(params.write_us_random),
                us_to_ns(params.write_us_sequential),
            ],
        ];
        SsdModel {
            ps_per_byte: ps_per_byte(params.bandwidth_bytes_per_s),
            latency_ns,
            channels: vec![None; params.channels],
            waiting: VecDeque::new(),
            bus_free: Nanos::ZERO,
            last_end_bytes: [u64::MAX; 2],
            flush: FlushTracker::default(),
            done_buf: Vec::new(),
            ops_outstanding: 0,
            stats: DeviceStats::default(),
            busy: BusyClock::default(),
            params,
        }
    }

    fn start(&mut self, channel: usize, now: Nanos, q: SsdQueued) {
        assert!(self.channels[channel].is_none(), "channel busy");
        let transfer_ns = (q.len_bytes * self.ps_per_byte).div_ceil(1000);
        let bus_start = (now + Nanos(q.latency_ns)).max(self.bus_free);
        let end = bus_start + Nanos(transfer_ns);
        self.bus_free = end;
        self.channels[channel] = Some(SsdInFlight {
            id: q.id,
            end,
            write_seq: q.write_seq,
        });
    }

    fn run_until(&mut self, now: Nanos) {
        loop {
            let mut best: Option<(Nanos, usize)> = None;
            for (channel, slot) in self.channels.iter().enumerate() {
                if let Some(f) = slot {
                    if f.end <= now && best.is_none_or(|(t, _)| f.end < t) {
                        best = Some((f.end, channel));
                    }
                }
            }
            let Some((end, channel)) = best else {
                break;
            };
            let Some(f) = self.channels[channel].take() else {
                unreachable!("chosen channel is busy")
            };
            self.done_buf.push(DevCompletion {
                id: f.id,
                time: end,
            });
            if let Some(write_seq) = f.write_seq {
                self.flush
                    .write_completed(write_seq, end, &mut self.done_buf);
            }
            assert!(self.ops_outstanding > 0);
            self.ops_outstanding -= 1;
            if self.ops_outstanding == 0 {
                self.busy.stop(end);
            }
            if let Some(q) = self.waiting.pop_front() {
                self.start(channel, end, q);
            }
        }
    }
}

impl DeviceModel for SsdModel {
    fn capacity_bytes(&self) -> u64 {
        self.params.capacity_bytes
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
        assert_op_in_range(&op, self.params.capacity_bytes);
        let kind_index = usize::from(is_write);
        let sequential = self.last_end_bytes[kind_index] == op.offset_bytes;
        self.last_end_bytes[kind_index] = op.offset_bytes + op.len_bytes;
        let q = SsdQueued {
            id: op.id,
            len_bytes: op.len_bytes,
            latency_ns: self.latency_ns[kind_index][usize::from(sequential)],
            write_seq: is_write.then(|| self.flush.write_submitted()),
        };
        if self.ops_outstanding == 0 {
            self.busy.start(now);
        }
        self.ops_outstanding += 1;
        match self.channels.iter().position(Option::is_none) {
            Some(channel) => self.start(channel, now, q),
            None => self.waiting.push_back(q),
        }
    }

    fn next_event_time(&self) -> Option<Nanos> {
        if let Some(c) = self.done_buf.first() {
            return Some(c.time);
        }
        self.channels.iter().flatten().map(|f| f.end).min()
    }

    fn advance(&mut self, now: Nanos, done: &mut Vec<DevCompletion>) {
        self.run_until(now);
        done.append(&mut self.done_buf);
    }

    fn outstanding(&self) -> usize {
        self.ops_outstanding + self.flush.flushes_pending()
    }

    fn name(&self) -> String {
        format!("ssd-{}ch", self.params.channels)
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            busy_ns: self.busy.total_ns(),
            ..self.stats
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct NvramParams {
    pub capacity_bytes: u64,
    /// Fixed cost of every operation.
    pub latency_ns: u64,
    /// Per-operation transfer rate; operations do not share it.
    pub bandwidth_bytes_per_s: f64,
}

impl NvramParams {
    /// Battery-backed DRAM / pmem class: 1 us plus 10 GB/s (our choice).
    pub fn dram() -> NvramParams {
        NvramParams {
            capacity_bytes: 4 << 30,
            latency_ns: 1_000,
            bandwidth_bytes_per_s: 10e9,
        }
    }
}

/// RAM/NVRAM: every operation completes `latency + len / bandwidth` after
/// submission, independently of the others (unlimited parallelism).
pub struct NvramModel {
    params: NvramParams,
    ps_per_byte: u64,
    /// (end, arrival seq, id, write seq or u64::MAX); the seq keeps equal ends in arrival order.
    in_flight: BinaryHeap<Reverse<(Nanos, u64, u64, u64)>>,
    seq_next: u64,
    flush: FlushTracker,
    done_buf: Vec<DevCompletion>,
    stats: DeviceStats,
    busy: BusyClock,
}

impl NvramModel {
    pub fn new(params: NvramParams) -> NvramModel {
        assert!(params.capacity_bytes > 0);
        NvramModel {
            ps_per_byte: ps_per_byte(params.bandwidth_bytes_per_s),
            params,
            in_flight: BinaryHeap::new(),
            seq_next: 0,
            flush: FlushTracker::default(),
            done_buf: Vec::new(),
            stats: DeviceStats::default(),
            busy: BusyClock::default(),
        }
    }

    fn run_until(&mut self, now: Nanos) {
        while let Some(&Reverse((end, _, id, write_seq))) = self.in_flight.peek() {
            if end > now {
                break;
            }
            self.in_flight.pop();
            self.done_buf.push(DevCompletion { id, time: end });
            if write_seq != u64::MAX {
                self.flush
                    .write_completed(write_seq, end, &mut self.done_buf);
            }
            if self.in_flight.is_empty() {
                self.busy.stop(end);
            }
        }
    }
}

impl DeviceModel for NvramModel {
    fn capacity_bytes(&self) -> u64 {
        self.params.capacity_bytes
    }

    fn submit(&mut self, now: Nanos, op: DevOp) {
        self.run_until(now);
        self.stats.count_submit(&op);
        let write_seq = match op.kind {
            DevOpKind::Flush => {
                self.flush.flush_submitted(op.id, now, &mut self.done_buf);
                return;
            }
            DevOpKind::Read => u64::MAX,
            DevOpKind::Write => self.flush.write_submitted(),
        };
        assert_op_in_range(&op, self.params.capacity_bytes);
        let transfer_ns = (op.len_bytes * self.ps_per_byte).div_ceil(1000);
        let end = now + Nanos(self.params.latency_ns + transfer_ns);
        if self.in_flight.is_empty() {
            self.busy.start(now);
        }
        self.in_flight
            .push(Reverse((end, self.seq_next, op.id, write_seq)));
        self.seq_next += 1;
    }

    fn next_event_time(&self) -> Option<Nanos> {
        if let Some(c) = self.done_buf.first() {
            return Some(c.time);
        }
        self.in_flight.peek().map(|Reverse((end, ..))| *end)
    }

    fn advance(&mut self, now: Nanos, done: &mut Vec<DevCompletion>) {
        self.run_until(now);
        done.append(&mut self.done_buf);
    }

    fn outstanding(&self) -> usize {
        self.in_flight.len() + self.flush.flushes_pending()
    }

    fn name(&self) -> String {
        "nvram".to_string()
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            busy_ns: self.busy.total_ns(),
            ..self.stats
        }
    }
}
