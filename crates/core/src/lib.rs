//! wcache-core: the cache engine. Sans-IO and deterministic: it never reads a
//! clock, sleeps, spawns or touches a file or socket; time and I/O completions
//! come in as arguments and I/O goes out as commands (see `engine`).

pub mod command;
pub mod config;
pub mod engine;
pub mod geometry;
pub mod index;
pub mod metrics;
pub mod policy;
pub mod reference;
pub mod time;
pub mod types;

pub use command::*;
pub use config::{ConfigError, EngineConfig, WritePolicyKind};
pub use engine::{
    log_write_pages_max, ChangeError, CriticalityError, Engine, EngineError, LogPosition,
    RecoveredSlot, RecoveryError, Retuned, Stats, VolumeCounts,
};
