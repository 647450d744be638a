//! Operating a running cache: what an operator reads (status, statistics
//! with latency histograms) and does (online drain, policy changes), and
//! the control socket that offers it. It exists so that every front end
//! (the NBD server now, a filesystem later) is operated the same way, and
//! every reader of statistics reads the same `Snapshot`.

pub mod client;
pub mod control;
mod eta;
pub mod latency;
pub mod operator;
pub mod prometheus;
pub mod protocol;
mod reporter;
pub mod snapshot;

pub use latency::{RequestClass, VolumeLatency};
pub use operator::{
    ClientStatus, ClientsHook, ConsistencyPointDone, CriticalCallersHook, ExportStatus,
    FlushProgress, OpError, Operator, SetDone, Status, StopDone, StopHook, SET_KEYS,
};
pub use reporter::ErrorReporter;
pub use snapshot::{Metric, RequestStats, Snapshot};
