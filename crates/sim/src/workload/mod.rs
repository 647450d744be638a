//! Workloads: who sends requests to the cache, and when.
//!
//! A workload is event driven like everything in the simulator: it says when its
//! next request arrives, hands requests out once their time has come, and hears
//! about completions (closed-loop workloads issue the next request then).
//! Workloads are deterministic from their seed and never look at the cache.

use wcache_core::time::Nanos;

pub mod app;
pub mod fileserver;
mod gate;
pub mod issuers;
pub mod pglike;
pub mod random;
pub mod redislike;
pub mod registry;
pub mod spc1;
pub mod spec;
pub mod trace;

pub use app::{AppReport, CriticalityHint, WaitStat};
pub use fileserver::{
    FileServerConfig, FileServerCounts, FileServerLayout, FileServerRegion, FileServerWorkload,
};
pub use gate::OUTSTANDING_MAX_DEFAULT;
pub use issuers::IssuerMix;
pub use pglike::{PgLikeConfig, PgLikeCounts, PgLikeWorkload, PgWriteMix};
pub use random::{RandomConfig, RandomWorkload};
pub use redislike::{RedisLikeConfig, RedisLikeCounts, RedisLikeWorkload};
pub use registry::{
    WorkloadKind, WorkloadOptionError, WorkloadOptions, WorkloadRun, OUTSTANDING_DEFAULT, WORKLOADS,
};
pub use spc1::{HrrwModel, Spc1Config, Spc1Layout, Spc1Stream, Spc1Workload};
pub use spec::WorkloadSpec;
pub use trace::{
    BlkparseAction, MalformedPolicy, Replay, TraceConfig, TraceError, TraceFormat, TraceWorkload,
};

/// Page-sized block used by the synthetic generators.
pub const BLOCK_BYTES: u64 = 4096;
// Alignment checks mask with BLOCK_BYTES - 1.
const _: () = assert!(BLOCK_BYTES.is_power_of_two());

/// Read or write, as the application asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqKind {
    Read,
    Write,
}

/// One application request, in bytes of a volume's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRequest {
    /// Unique within one workload run; returned on completion.
    pub id: u64,
    pub volume: u32,
    pub kind: ReqKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// The application waits for this write (sync/FUA); traces that know say so.
    pub sync: bool,
    /// Process or stream that issued it (stream number, trace pid, ...).
    pub issuer: u32,
}

/// A source of requests.
pub trait Workload: Send {
    /// When the next request becomes available; `None` if nothing is pending
    /// until a completion arrives (closed loop) or the workload is finished.
    fn next_arrival(&self) -> Option<Nanos>;
    /// Hand out one request whose arrival time is `<= now`, if any.
    fn poll(&mut self, now: Nanos) -> Option<IoRequest>;
    /// A request handed out earlier has completed at `now`.
    fn complete(&mut self, now: Nanos, id: u64);
    /// True when no request will ever be handed out again.
    fn finished(&self) -> bool;
    /// Bytes of address space per volume the workload touches (volume sizes).
    fn volume_sizes_bytes(&self) -> Vec<u64>;
    fn name(&self) -> String;
    /// Counters so far (requests, held-back arrivals, skipped trace lines).
    fn stats(&self) -> WorkloadStats {
        WorkloadStats::default()
    }
    /// An error that ended the workload early (a trace that became unreadable
    /// mid-replay); `finished` is true once one is reported. Taken once.
    fn take_error(&mut self) -> Option<WorkloadError> {
        None
    }
    /// Issuers the application hints critical for the whole run (its
    /// request-serving processes; the paper's `setpriority` hint). The
    /// simulation hints them at the start and again after a crash.
    fn critical_issuers(&self) -> &[u32] {
        &[]
    }
    /// The next criticality inheritance the application asks for (a critical
    /// process blocked on something a non-critical one must finish), in the
    /// order they arose. The simulation drains these after every `poll` and
    /// `complete` and applies them to the engine. Taken once each.
    fn take_hint(&mut self) -> Option<CriticalityHint> {
        None
    }
    /// Application-level measures (transactions or commands) start at `now`
    /// (the end of the simulation's warm-up)...
    fn measure_start(&mut self, _now: Nanos) {}
    /// ...and stop at `now`.
    fn measure_stop(&mut self, _now: Nanos) {}
    /// What the application measured over its window; `None` for workloads
    /// that are not applications (every request is its own unit there).
    fn app_report(&self) -> Option<AppReport> {
        None
    }
}

/// Synthetic arrival process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Loop {
    /// Poisson arrivals at `rate_iops`; at most `outstanding_max` requests in
    /// flight, beyond which arrivals are held back and arrive late (counted in
    /// [`WorkloadStats::arrivals_delayed`]).
    Open {
        rate_iops: f64,
        outstanding_max: u64,
    },
    /// `outstanding` requests always in flight, zero think time: a completion at
    /// `now` makes the next request available at `now`.
    Closed { outstanding: u64 },
}

/// When a workload stops issuing; `None` fields mean no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stop {
    pub requests_max: Option<u64>,
    /// Open loop: no arrival scheduled at or after this time. Closed loop: a
    /// completion at or after it issues nothing more.
    pub end: Option<Nanos>,
}

impl Stop {
    /// A workload that has issued `issued` requests stops at `now`.
    pub fn reached(&self, now: Nanos, issued: u64) -> bool {
        self.end.is_some_and(|e| now >= e) || self.requests_max.is_some_and(|m| issued >= m)
    }
}

/// Counters every workload reports; zero where a workload has no such notion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkloadStats {
    pub requests_issued: u64,
    pub requests_completed: u64,
    /// Open loop: arrivals that went out after their scheduled time because
    /// `outstanding_max` requests were in flight.
    pub arrivals_delayed: u64,
    /// Sum over delayed arrivals of (issue time - scheduled time).
    pub arrival_delay_total_ns: u64,
    /// Trace: malformed lines skipped under [`MalformedPolicy::Skip`].
    pub lines_malformed_skipped: u64,
    /// Trace: well-formed lines that are not a read or write of data (headers,
    /// other blkparse actions, discards, other SCSI opcodes).
    pub lines_ignored: u64,
    /// Trace: requests of zero bytes, skipped.
    pub requests_zero_length_skipped: u64,
    /// Trace: records whose timestamp went backwards, replayed at the previous time.
    pub timestamps_clamped: u64,
}

/// Building or running a workload failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("invalid workload configuration: {0}")]
    InvalidConfig(String),
    #[error(transparent)]
    Trace(#[from] TraceError),
}
