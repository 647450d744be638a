//! wcache-sim: a deterministic discrete-event simulator that drives the real
//! engine in virtual time against device models and workloads.

pub mod device;
pub mod workload;
