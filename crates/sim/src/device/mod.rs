//! Device models: what a backing store or cache device costs in virtual time.
//!
//! Every model is itself sans-IO and event driven, like the engine: the
//! simulator `submit`s operations at a virtual time, asks `next_event_time`,
//! and calls `advance` to collect the operations that have completed by then.
//! Models never look at data; the simulator's data model does that separately.
//! Models must be deterministic: the same calls give the same completions.

use wcache_core::time::Nanos;

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
}
