//! wcache-sim: a deterministic discrete-event simulator that drives the real
//! engine in virtual time against device models and workloads.

pub mod checker;
pub mod consistency_grid;
pub mod crash_case;
pub mod experiment;
pub mod faults;
pub mod latency;
pub mod order_check;
pub mod run;
pub mod workload;

pub use run::{RunLimits, SimError, SimReport, Simulation, TimelineSample};
