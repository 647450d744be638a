//! What the crate's unit tests share: a write-through cache in memory over
//! a backing of the test's choosing, and a bounded wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wcache_core::EngineConfig;
use wcache_io::{
    BlockDevice, Cache, CacheConfig, CacheDeviceSpec, DriverConfig, FormatAsked, SyncMode,
    VolumeSpec,
};

/// A 4 MiB write-through cache in memory with one volume under
/// `admission`: over `backing` when given, else over 4 MiB of memory.
pub fn memory_cache(admission: &str, backing: Option<Arc<dyn BlockDevice>>) -> Cache {
    memory_cache_with(
        admission,
        backing,
        wcache_core::WritePolicyKind::WriteThrough,
    )
}

/// The same under `write_policy` (write-back in memory: volatile, as a
/// test may have it).
pub fn memory_cache_with(
    admission: &str,
    backing: Option<Arc<dyn BlockDevice>>,
    write_policy: wcache_core::WritePolicyKind,
) -> Cache {
    let name = if backing.is_some() {
        "provided"
    } else {
        "mem:4M"
    };
    let config = CacheConfig {
        cache: CacheDeviceSpec::Memory {
            size_bytes: 4 << 20,
        },
        volumes: vec![VolumeSpec {
            name: "v".into(),
            backing: name.into(),
            journal: None,
        }],
        backing_sync: SyncMode::Fdatasync,
        backing_create_size_bytes: None,
        engine: EngineConfig {
            admission: admission.into(),
            write_policy,
            ..EngineConfig::default()
        },
        driver: DriverConfig::default(),
        block_size_bytes: 4096,
        force: false,
        format: FormatAsked::Found,
        volatile_write_back: write_policy == wcache_core::WritePolicyKind::WriteBack,
        backing_timeout: None,
        replicate: None,
    };
    Cache::open_with(&config, vec![backing]).expect("memory cache")
}

/// Waits until `done`, failing the test after 10 s.
pub fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}
