//! wcache-io: the real side of "the engine decides, the driver moves bytes".
//!
//! This crate exists so that the sans-IO engine of `wcache-core` can run on
//! real storage: `device` defines the one narrow `BlockDevice` trait (with
//! its durability contract) and its implementations (file or block device,
//! memory, remote NBD export, a device model emulated in real time, a
//! fault-injecting wrapper); `driver` runs one engine against a cache device
//! and one backing device per volume on a pool of threads; `format` and
//! `store` are the on-device format of a persistent cache (superblock, slot
//! records) that makes write-back survive crashes; `cache` is the lifecycle
//! every front end uses (open or format, recover, serve volumes, drain, close);
//! `lock` makes every device it uses its own while it does;
//! `ops` is how a running cache is operated (status, statistics, online
//! drain and policy changes, the control socket); `service` is the
//! lifecycle of a serving process every front end runs (signals, bounded
//! stop, control socket and metrics, banner and close report).
//! Nothing here makes a cache decision: that is the engine's job.

pub mod backings;
pub mod cache;
pub mod checksum;
pub mod device;
pub mod driver;
pub mod format;
pub mod lock;
pub mod ops;
pub mod replica;
pub mod service;
pub mod store;

pub use backings::open_backing;
pub use cache::{
    Cache, CacheConfig, CacheDeviceSpec, CacheError, CloseReport, EngineSource, FormatAsked, Io,
    Monitor, OfflineConfig, Volume, VolumeSpec, WriteBatch,
};
pub use device::emulated::EmulatedDevice;
pub use device::faulty::{FaultPlan, FaultyDevice};
pub use device::file::{FileDevice, FileOptions, SyncMode};
pub use device::mem::MemDevice;
pub use device::nbd::{NbdAddress, NbdDevice, NbdOptions, NbdState, NbdStatus};
pub use device::{BlockDevice, DeviceError};
pub use driver::{
    DataPath, DrainError, Driver, DriverBatch, DriverConfig, DriverStats, Payload, RequestError,
    StartError, WriteDone,
};
pub use store::{CacheStore, Scan, StoreError};

// The Rust samples in docs/io.md run as doctests, so that they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/io.md")]
pub struct IoMdDoctests;
