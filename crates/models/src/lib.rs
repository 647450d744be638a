//! wcache-models: device models (HDD, RAID, SSD, NVRAM), what a backing store
//! or cache device costs in virtual time.
//!
//! A crate of its own because two users need the models and neither should
//! pull in the other: the simulator (`wcache-sim`) runs them in virtual time,
//! and the real-I/O crate (`wcache-io`) runs them in real time behind an
//! emulated block device. So nothing here may do I/O, read a clock, sleep or
//! spawn: time is always an argument, as in the engine.
//!
//! Every model is itself sans-IO and event driven, like the engine: the caller
//! `submit`s operations at a virtual time, asks `next_event_time`, and calls
//! `advance` to collect the operations that have completed by then. Models
//! never look at data; the caller keeps it (the simulator's data model, an
//! emulated device's store).
//! Models must be deterministic: the same calls give the same completions.

use std::collections::VecDeque;

use wcache_core::time::Nanos;

pub mod concat;
pub mod hdd;
pub mod raid;
pub mod ssd;

pub use concat::ConcatModel;
pub use hdd::{HddModel, HddParams, HddZone};
pub use raid::{RaidConfigError, RaidLevel, RaidModel};
pub use ssd::{NvramModel, NvramParams, SsdModel, SsdParams};

/// Bytes per sector in every model's address space.
pub const SECTOR_BYTES: u64 = 512;

/// Direction of a device operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevOpKind {
    Read,
    Write,
    /// Drain the device's volatile state; completes when all earlier writes have.
    Flush,
}

/// One operation on a device model. `offset_bytes` and `len_bytes` are byte
/// addresses in the device's logical address space (512-byte aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevOp {
    /// Chosen by the submitter; returned unchanged on completion.
    pub id: u64,
    pub kind: DevOpKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// Completion of a [`DevOp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevCompletion {
    pub id: u64,
    pub time: Nanos,
}

/// A simulated device. Calls must come with non-decreasing `now`.
pub trait DeviceModel: Send {
    /// Logical capacity in bytes.
    fn capacity_bytes(&self) -> u64;
    /// Accept an operation at `now`. The model may queue it internally without limit
    /// (the caller bounds what it submits).
    fn submit(&mut self, now: Nanos, op: DevOp);
    /// The earliest virtual time at which something inside the model happens
    /// (a completion or an internal step), if anything is pending.
    fn next_event_time(&self) -> Option<Nanos>;
    /// Process everything up to and including `now`; push completed operations
    /// (with their completion time, which is `<= now`) into `done`.
    fn advance(&mut self, now: Nanos, done: &mut Vec<DevCompletion>);
    /// Operations accepted but not yet completed.
    fn outstanding(&self) -> usize;
    /// A short name for reports, e.g. "raid5-4+1".
    fn name(&self) -> String;

    /// Operation counters of this device as its submitter sees it (for a RAID:
    /// logical operations). Models that keep no counters return zeros.
    fn stats(&self) -> DeviceStats {
        DeviceStats::default()
    }
    /// Counters per physical member (for a single device: itself). For reports
    /// and tests; allocates, so keep it off the hot path.
    fn member_stats(&self) -> Vec<DeviceStats> {
        vec![self.stats()]
    }
    /// How far (in cylinders) the head would move to reach `offset_bytes`;
    /// 0 for devices without heads. Used by RAID-10 to break read ties.
    fn head_distance_hint(&self, offset_bytes: u64) -> u64 {
        let _ = offset_bytes;
        0
    }
}

/// Operation counters of one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Virtual time during which the device was working on at least one
    /// operation (for an HDD: the mechanism was committed to one).
    pub busy_ns: u64,
    /// HDD only (zero for other models and for a RAID's own counters; see
    /// its `member_stats`): mechanism time on reads and on writes, from the
    /// start of positioning to the end of the transfer, and of it the time
    /// before the first sector (seek or head switch, settle, rotational wait,
    /// and any controller overhead not yet elapsed).
    pub read_service_ns: u64,
    pub write_service_ns: u64,
    pub read_position_ns: u64,
    pub write_position_ns: u64,
}

impl DeviceStats {
    /// Counts since `earlier` (a snapshot of the same device).
    pub fn since(&self, earlier: &DeviceStats) -> DeviceStats {
        DeviceStats {
            reads: self.reads - earlier.reads,
            writes: self.writes - earlier.writes,
            flushes: self.flushes - earlier.flushes,
            read_bytes: self.read_bytes - earlier.read_bytes,
            write_bytes: self.write_bytes - earlier.write_bytes,
            busy_ns: self.busy_ns - earlier.busy_ns,
            read_service_ns: self.read_service_ns - earlier.read_service_ns,
            write_service_ns: self.write_service_ns - earlier.write_service_ns,
            read_position_ns: self.read_position_ns - earlier.read_position_ns,
            write_position_ns: self.write_position_ns - earlier.write_position_ns,
        }
    }

    /// Mean milliseconds per operation: read service, read positioning,
    /// write service, write positioning (0 where there was no operation).
    pub fn mechanism_ms_each(&self) -> [f64; 4] {
        let each = |ns: u64, ops: u64| ns as f64 / 1e6 / ops.max(1) as f64;
        [
            each(self.read_service_ns, self.reads),
            each(self.read_position_ns, self.reads),
            each(self.write_service_ns, self.writes),
            each(self.write_position_ns, self.writes),
        ]
    }

    /// Field-wise sum, e.g. over the members of an array.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a DeviceStats>) -> DeviceStats {
        all.into_iter()
            .fold(DeviceStats::default(), |a, b| DeviceStats {
                reads: a.reads + b.reads,
                writes: a.writes + b.writes,
                flushes: a.flushes + b.flushes,
                read_bytes: a.read_bytes + b.read_bytes,
                write_bytes: a.write_bytes + b.write_bytes,
                busy_ns: a.busy_ns + b.busy_ns,
                read_service_ns: a.read_service_ns + b.read_service_ns,
                write_service_ns: a.write_service_ns + b.write_service_ns,
                read_position_ns: a.read_position_ns + b.read_position_ns,
                write_position_ns: a.write_position_ns + b.write_position_ns,
            })
    }

    pub(crate) fn count_submit(&mut self, op: &DevOp) {
        match op.kind {
            DevOpKind::Read => {
                self.reads += 1;
                self.read_bytes += op.len_bytes;
            }
            DevOpKind::Write => {
                self.writes += 1;
                self.write_bytes += op.len_bytes;
            }
            DevOpKind::Flush => self.flushes += 1,
        }
    }
}

/// Checks the addressing contract of [`DevOp`] against a capacity. Violations
/// are programmer errors of the submitter, hence assertions.
pub(crate) fn assert_op_in_range(op: &DevOp, capacity_bytes: u64) {
    if op.kind == DevOpKind::Flush {
        return;
    }
    assert!(op.len_bytes > 0, "zero-length device op {op:?}");
    assert!(
        op.offset_bytes.is_multiple_of(SECTOR_BYTES),
        "unaligned offset {op:?}"
    );
    assert!(
        op.len_bytes.is_multiple_of(SECTOR_BYTES),
        "unaligned length {op:?}"
    );
    assert!(
        op.offset_bytes
            .checked_add(op.len_bytes)
            .is_some_and(|end| end <= capacity_bytes),
        "op {op:?} beyond capacity {capacity_bytes}"
    );
}

/// Accumulates the time during which a device had work outstanding.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BusyClock {
    since: Option<Nanos>,
    total_ns: u64,
}

impl BusyClock {
    /// Call when outstanding work goes from none to some.
    pub(crate) fn start(&mut self, now: Nanos) {
        if self.since.is_none() {
            self.since = Some(now);
        }
    }
    /// Call when outstanding work goes back to none.
    pub(crate) fn stop(&mut self, now: Nanos) {
        if let Some(since) = self.since.take() {
            self.total_ns += now.saturating_sub(since).0;
        }
    }
    pub(crate) fn total_ns(&self) -> u64 {
        self.total_ns
    }
}

/// Completes flushes once every write submitted before them has completed.
/// Each write gets a sequence number at submission; each pending flush counts
/// the earlier writes still outstanding. O(pending flushes) per completed write.
#[derive(Debug, Default)]
pub(crate) struct FlushTracker {
    writes_submitted: u64,
    writes_outstanding: u64,
    flushes: VecDeque<PendingFlush>,
}

#[derive(Clone, Copy, Debug)]
struct PendingFlush {
    id: u64,
    /// Writes with a sequence number below this were submitted before the flush.
    write_seq_barrier: u64,
    writes_pending: u64,
}

impl FlushTracker {
    /// Registers a write; returns its sequence number, to hand back on completion.
    pub(crate) fn write_submitted(&mut self) -> u64 {
        let seq = self.writes_submitted;
        self.writes_submitted += 1;
        self.writes_outstanding += 1;
        seq
    }

    pub(crate) fn write_completed(
        &mut self,
        write_seq: u64,
        time: Nanos,
        done: &mut Vec<DevCompletion>,
    ) {
        assert!(self.writes_outstanding > 0, "write completed twice");
        assert!(write_seq < self.writes_submitted, "unknown write sequence");
        self.writes_outstanding -= 1;
        for flush in self.flushes.iter_mut().rev() {
            if flush.write_seq_barrier <= write_seq {
                break;
            }
            assert!(flush.writes_pending > 0, "flush counted a write twice");
            flush.writes_pending -= 1;
        }
        while let Some(front) = self.flushes.front() {
            if front.writes_pending > 0 {
                break;
            }
            done.push(DevCompletion { id: front.id, time });
            self.flushes.pop_front();
        }
    }

    /// Registers a flush at `now`; completes it at once if no write is outstanding.
    pub(crate) fn flush_submitted(&mut self, id: u64, now: Nanos, done: &mut Vec<DevCompletion>) {
        if self.writes_outstanding == 0 {
            assert!(
                self.flushes.is_empty(),
                "pending flush with no pending write"
            );
            done.push(DevCompletion { id, time: now });
            return;
        }
        self.flushes.push_back(PendingFlush {
            id,
            write_seq_barrier: self.writes_submitted,
            writes_pending: self.writes_outstanding,
        });
    }

    pub(crate) fn flushes_pending(&self) -> usize {
        self.flushes.len()
    }
}

/// Names accepted by [`build_device`].
pub const DEVICE_NAMES: &[&str] = &["hdd", "raid10", "raid5", "raid5-md", "ssd", "nvram"];

/// Error of [`build_device`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceSpecError {
    #[error("unknown device model {name:?}; valid names: {}", DEVICE_NAMES.join(", "))]
    UnknownName { name: String },
}

/// Builds a device model with its default parameters from its registry name:
/// `hdd` (one 10K RPM disk), `raid10` (2+2 of those, 64 KiB strips), `raid5`
/// (4+1, 64 KiB strips), `ssd`, `nvram`.
pub fn build_device(spec: &str) -> Result<Box<dyn DeviceModel>, DeviceSpecError> {
    build_device_with(spec, &HddParams::ultrastar_10k())
}

/// [`build_device`] with other disk parameters for `hdd` and the arrays' members.
pub fn build_device_with(
    spec: &str,
    hdd: &HddParams,
) -> Result<Box<dyn DeviceModel>, DeviceSpecError> {
    let name = spec.trim();
    let device: Box<dyn DeviceModel> = match name {
        "hdd" => Box::new(HddModel::new(hdd.clone())),
        "raid10" => Box::new(RaidModel::raid10_2x2(hdd)),
        "raid5" => Box::new(RaidModel::raid5_4p1(hdd)),
        "raid5-md" => Box::new(RaidModel::raid5_4p1(hdd).with_stripe_cache()),
        "ssd" => Box::new(SsdModel::new(SsdParams::koller_pcie())),
        "nvram" => Box::new(NvramModel::new(NvramParams::dram())),
        _ => {
            return Err(DeviceSpecError::UnknownName {
                name: name.to_string(),
            })
        }
    };
    Ok(device)
}

// The registry sample in docs/sim-models.md runs as a doctest, so that the
// names and capacities it shows cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/sim-models.md")]
pub struct SimModelsMdDoctests;
