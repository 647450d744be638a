//! The driver's errors, one type per operation: `StartError` from opening
//! or recovering a driver, `RequestError` from one request (what crosses
//! the volume API to front ends), `DrainError` from a drain. It exists so
//! that a caller matches only the failures its call can have; no type here
//! may grow into a union of the others.

use wcache_core::{ConfigError, EngineError, IoError, RecoveryError, RequestKind, SubmitError};

/// Why a driver did not start (`Driver::new`, `Driver::recover`,
/// `Driver::recover_log`): nothing was served.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("engine configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("engine: {0}")]
    Engine(#[from] EngineError),
    #[error("recovery: {0}")]
    Recovery(#[from] RecoveryError),
    #[error(
        "engine configuration {field} = {config} differs from the cache device's format ({format})"
    )]
    FormatMismatch {
        field: &'static str,
        config: u64,
        format: u64,
    },
    #[error("the engine's log mode goes with a format-3 cache device, and only it (Driver::recover_log)")]
    LogModeNotBuilt,
    #[error("cache device {device} holds {size_bytes} bytes, but {cache_slots} slots of {page_size_bytes} bytes need {need_bytes}")]
    CacheTooSmall {
        device: String,
        size_bytes: u64,
        cache_slots: u64,
        page_size_bytes: u64,
        need_bytes: u64,
    },
    #[error("device {device} needs {alignment_bytes}-byte alignment, which the page size {page_size_bytes} does not have")]
    PageNotAligned {
        device: String,
        alignment_bytes: usize,
        page_size_bytes: u64,
    },
    #[error("cannot start the driver's thread {thread}: {source}")]
    Spawn {
        thread: String,
        source: std::io::Error,
    },
}

/// Why one request (read, write, flush, trim, write-zeroes; `Driver::submit`
/// and the calls over it, `WriteDone`, `Volume`'s) was not done.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The engine refused it before any work.
    #[error("request refused: {0}")]
    Submit(#[from] SubmitError),
    /// A device command of it failed.
    #[error("request failed: {0}")]
    Io(#[from] IoError),
    #[error("{kind:?} request of {len_bytes} bytes came with a payload of {payload_bytes} bytes")]
    PayloadLength {
        kind: RequestKind,
        len_bytes: u64,
        payload_bytes: usize,
    },
    /// A stop is under way (`Driver::refuse_writes`, `fail_waiting`) or done.
    #[error("the driver is shut down")]
    ShutDown,
}

/// Why a drain (`Driver::drain`, `Driver::drain_timeout`) did not finish.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// The pages left stay dirty in the cache.
    #[error("drain did not finish within {waited_ms} ms; {dirty_pages} dirty pages left")]
    Timeout { waited_ms: u64, dirty_pages: u64 },
    /// The driver's threads are stopped: nothing would destage.
    #[error("the driver is shut down")]
    ShutDown,
}
