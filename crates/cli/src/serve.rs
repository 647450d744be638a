//! `wcache serve`: cached volumes over NBD on real devices.
//!
//! This module exists to wire the pieces together — devices from their specs,
//! one `Driver` (one engine, one cache device) with a volume per `--export`,
//! and the NBD server with an `Export` per volume that forwards to the driver
//! — and to refuse configurations that would break the durability promise.
//! A cache file or block device is persistent (`wcache_io::store`): it is
//! formatted, or opened and recovered (every acknowledged dirty page comes
//! back after a kill or power loss), and a cache holding another
//! configuration's dirty pages is refused without `--force`. Write-back is
//! the default there. A cache in process memory (`--cache mem`) keeps nothing,
//! so write-back on it needs the loud benchmark-only flag. It must never make
//! cache decisions (the engine does) or move bytes itself (the driver does).

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use wcache_core::types::VolumeId;
use wcache_core::{EngineConfig, IoError, RequestFlags, RequestKind, SubmitError, WritePolicy};
use wcache_io::device::file::{is_on_volatile_memory, FileDevice, FileOptions, SyncMode};
use wcache_io::device::parse_size_bytes;
use wcache_io::format::VolumeEntry;
use wcache_io::{
    BlockDevice, CacheStore, Driver, DriverConfig, DriverError, EmulatedDevice, MemDevice,
    NbdDevice, Payload,
};
use wcache_nbd::{Export, ExportError, Server, ServerConfig};

type AnyError = Box<dyn std::error::Error>;

/// Serve cached volumes over NBD (with no arguments: a demo in ./wcache-data
/// with a 1 GiB cache file in front of an 8 GiB emulated 10K RPM disk).
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Unix socket to listen on (default, when no --listen: DATA_DIR/wcache.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// TCP address to listen on, e.g. 127.0.0.1:10809.
    #[arg(long)]
    listen: Option<String>,
    /// Directory for the default cache, backing and socket.
    #[arg(long, default_value = "wcache-data")]
    data_dir: PathBuf,
    /// Cache device: a file or block device (created sparse with --cache-size
    /// if missing), or `mem` (process memory). Default: DATA_DIR/cache.img.
    #[arg(long)]
    cache: Option<String>,
    #[arg(long, default_value = "1G")]
    cache_size: String,
    /// How cache writes become durable: fdatasync, dsync (RWF_DSYNC per
    /// write), nvram (no syncs; for pmem or tmpfs standing in for NV-DRAM).
    #[arg(long, default_value = "fdatasync")]
    cache_sync: String,
    /// Open the cache device with O_DIRECT.
    #[arg(long)]
    direct: bool,
    /// Persist-on-flush (the NBD minimum): a write without FUA is
    /// acknowledged once written to the cache device, before the device
    /// flush; FLUSH and FUA make it durable. A crash of this process loses
    /// nothing acknowledged; a power loss may lose writes not yet flushed.
    /// Default: persist-on-write (every acknowledged write is durable).
    #[arg(long)]
    persist_on_flush: bool,
    /// Backing of the single export `disk`: FILE, nbd://HOST[:PORT]/NAME,
    /// nbd+unix:///NAME?socket=PATH, emulated-MODEL:FILE (MODEL: hdd, raid10,
    /// raid5, raid5-md, ssd, nvram; the simulator's model run in real time), mem:SIZE.
    /// Default: emulated-hdd:DATA_DIR/backing.img.
    #[arg(long)]
    backing: Option<String>,
    /// An export NAME=BACKING (repeat for several volumes sharing one cache).
    #[arg(long = "export", value_name = "NAME=BACKING")]
    exports: Vec<String>,
    /// Size of backing files created because they do not exist.
    #[arg(long, default_value = "8G")]
    backing_size: String,
    /// How backing file writes become durable: fdatasync, dsync, nvram.
    #[arg(long, default_value = "fdatasync")]
    backing_sync: String,
    /// write-back (default with a cache file or device: acknowledged once
    /// data and record are durable on the cache; recovered after a crash),
    /// write-through (default with --cache mem), or write-around.
    #[arg(long)]
    write_policy: Option<String>,
    /// Start even over a cache device holding dirty pages of another
    /// configuration (other exports, sizes, backings or page size) or an
    /// unreadable superblock: those pages are DISCARDED (the message says which).
    #[arg(long)]
    force: bool,
    /// Destage order: lrw, cscan, wow.
    #[arg(long, default_value = "wow")]
    order: String,
    /// Destage rate: linear, adaptive.
    #[arg(long, default_value = "adaptive")]
    rate: String,
    #[arg(long, default_value_t = 4096)]
    page_size: u64,
    /// Write group (destage unit) in bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    group_size: u64,
    /// Smallest block the NBD clients may address (a power of two up to 64 KiB).
    #[arg(long, default_value_t = 512, value_parser = parse_block_size)]
    block_size: u32,
    /// NBD worker threads (requests in service at once over all connections).
    #[arg(long, default_value_t = 32)]
    workers: usize,
    /// Microseconds a connection polls its socket before sleeping while its
    /// client sends requests back to back (saves a thread wake-up per
    /// request at low queue depth, at the cost of up to this much CPU per
    /// request); 0 turns polling off.
    #[arg(long, default_value_t = 50)]
    poll_us: u64,
    /// Driver I/O threads (destages, extra commands of large requests).
    #[arg(long, default_value_t = 4)]
    io_threads: usize,
    /// BENCHMARKS ONLY: allow write-back with a cache in process memory
    /// (`--cache mem`). Acknowledged writes are lost when the process exits
    /// before they are destaged, and on any crash.
    #[arg(long)]
    volatile_write_back_for_benchmarks: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "write-back is refused with --cache mem: it acknowledges writes that only the cache \
         holds, and process memory loses them on any exit or crash. Use a cache file or device \
         (persistent, recovered after a crash), --write-policy write-through, or for benchmarks \
         only --volatile-write-back-for-benchmarks."
    )]
    WriteBackNeedsRecovery,
    #[error(
        "--volatile-write-back-for-benchmarks needs the cache in process memory (--cache mem), so \
         nobody mistakes it for a durable cache; {cache} is a file (persistent: write-back \
         needs no flag there)"
    )]
    WriteBackCacheNotVolatile { cache: String },
    #[error("--volatile-write-back-for-benchmarks means write-back, but --write-policy is {0}")]
    ConflictingPolicy(String),
    #[error("--{option}: cannot parse size {text:?} (examples: 4096, 64K, 1G)")]
    BadSize { option: &'static str, text: String },
    #[error("--{option}: unknown sync mode {text:?}; valid: fdatasync, dsync, nvram")]
    BadSyncMode { option: &'static str, text: String },
    #[error("--export {0:?}: expected NAME=BACKING")]
    BadExport(String),
    #[error("export name {0:?} given twice")]
    DuplicateExport(String),
    #[error("backing {spec:?}: unknown emulated model {model:?} (valid: {})", wcache_sim::device::DEVICE_NAMES.join(", "))]
    BadModel { spec: String, model: String },
    #[error(
        "cache of {cache_bytes} bytes holds fewer than one write group of {group_bytes} bytes"
    )]
    CacheTooSmall { cache_bytes: u64, group_bytes: u64 },
    #[error("backing {backing} of export {export:?} is {bytes} bytes: smaller than one block of {block} bytes (--block-size)")]
    BackingTooSmall {
        export: String,
        backing: String,
        bytes: u64,
        block: u32,
    },
    #[error("cannot create {path}: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot listen on {what}: {source}")]
    Listen {
        what: String,
        source: std::io::Error,
    },
}

/// One volume served over NBD, forwarding every call to the shared driver.
struct VolumeExport {
    driver: Arc<Driver>,
    volume: VolumeId,
    size_bytes: u64,
    block_size_min_bytes: u32,
}

fn export_error(e: DriverError) -> ExportError {
    match e {
        DriverError::Io(IoError::NoSpace) => ExportError::NoSpace,
        DriverError::Io(IoError::Io) => {
            ExportError::Io(std::io::Error::from_raw_os_error(libc::EIO))
        }
        DriverError::Submit(SubmitError::OutOfRange { .. }) => ExportError::Invalid,
        DriverError::Submit(SubmitError::LargerThanCache { .. }) => ExportError::NoSpace,
        DriverError::ShutDown => ExportError::ShuttingDown,
        other => ExportError::Io(std::io::Error::other(other.to_string())),
    }
}

impl Export for VolumeExport {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn block_size_min_bytes(&self) -> u32 {
        self.block_size_min_bytes
    }
    fn multi_conn(&self) -> bool {
        // One cache serves every connection, and every acknowledged write is
        // already durable, so a flush on one connection covers all.
        true
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.driver
            .read(self.volume, offset, buf)
            .map_err(export_error)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError> {
        self.driver
            .write(self.volume, offset, data, fua)
            .map_err(export_error)
    }
    fn flush(&self) -> Result<(), ExportError> {
        self.driver.flush(self.volume).map_err(export_error)
    }
    fn trim(&self, offset: u64, length_bytes: u64, fua: bool) -> Result<(), ExportError> {
        self.no_payload(RequestKind::Trim, offset, length_bytes, fua)
    }
    fn write_zeroes(
        &self,
        offset: u64,
        length_bytes: u64,
        fua: bool,
        _no_hole: bool,
    ) -> Result<(), ExportError> {
        self.no_payload(RequestKind::WriteZeroes, offset, length_bytes, fua)
    }
}

impl VolumeExport {
    fn no_payload(
        &self,
        kind: RequestKind,
        offset: u64,
        length_bytes: u64,
        fua: bool,
    ) -> Result<(), ExportError> {
        let flags = RequestFlags {
            fua,
            ..RequestFlags::default()
        };
        self.driver
            .submit(
                self.volume,
                kind,
                offset,
                length_bytes,
                flags,
                Payload::None,
            )
            .map_err(export_error)
    }
}

/// `--block-size`: checked with the other arguments, before any file is touched.
fn parse_block_size(text: &str) -> Result<u32, String> {
    let max = wcache_nbd::proto::BLOCK_SIZE_MIN_MAX_BYTES;
    match text.parse::<u32>() {
        Ok(n) if n.is_power_of_two() && n <= max => Ok(n),
        _ => Err(format!(
            "{text:?} is not a power of two of at most {max} bytes"
        )),
    }
}

fn size_arg(option: &'static str, text: &str) -> Result<u64, ServeError> {
    parse_size_bytes(text).ok_or_else(|| ServeError::BadSize {
        option,
        text: text.to_string(),
    })
}

fn sync_arg(option: &'static str, text: &str) -> Result<SyncMode, ServeError> {
    SyncMode::from_name(text).ok_or_else(|| ServeError::BadSyncMode {
        option,
        text: text.to_string(),
    })
}

/// Opens a backing from its spec (see `--backing`); a missing file is
/// created sparse when `create_size_bytes` is given.
pub(crate) fn open_backing(
    spec: &str,
    sync: SyncMode,
    create_size_bytes: Option<u64>,
) -> Result<Arc<dyn BlockDevice>, AnyError> {
    if spec.starts_with("nbd://") || spec.starts_with("nbd+unix://") {
        return Ok(Arc::new(NbdDevice::connect(spec, 4)?));
    }
    if let Some(size) = spec.strip_prefix("mem:") {
        return Ok(Arc::new(MemDevice::new(size_arg("backing", size)?)));
    }
    if let Some(rest) = spec.strip_prefix("emulated-") {
        let (model, inner) = rest.split_once(':').ok_or_else(|| ServeError::BadModel {
            spec: spec.to_string(),
            model: rest.to_string(),
        })?;
        if !wcache_sim::device::DEVICE_NAMES.contains(&model) {
            return Err(ServeError::BadModel {
                spec: spec.to_string(),
                model: model.to_string(),
            }
            .into());
        }
        let store = open_backing(inner, sync, create_size_bytes)?;
        return Ok(Arc::new(EmulatedDevice::with_model_name(model, store)?));
    }
    let options = FileOptions {
        sync,
        direct: false,
        create_size_bytes: create_size_bytes.filter(|_| !Path::new(spec).exists()),
        map: false,
    };
    Ok(Arc::new(FileDevice::open(Path::new(spec), options)?))
}

fn ensure_dir(dir: &Path) -> Result<(), ServeError> {
    std::fs::create_dir_all(dir).map_err(|source| ServeError::CreateDir {
        path: dir.display().to_string(),
        source,
    })
}

/// Blocks SIGINT and SIGTERM in this thread and every thread it starts
/// afterwards, so that `wait_for_stop_signal` receives them synchronously.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: plain libc calls on a sigset we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_stop_signal(set: &libc::sigset_t) -> i32 {
    let mut signal: libc::c_int = 0;
    // SAFETY: `set` was initialised by block_stop_signals.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}

pub fn serve(args: ServeArgs) -> Result<(), AnyError> {
    let signals = block_stop_signals();

    // Policy first: refuse before touching any file.
    let cache_spec = args
        .cache
        .clone()
        .unwrap_or_else(|| args.data_dir.join("cache.img").display().to_string());
    let cache_in_memory = cache_spec == "mem";
    let policy = match (&args.write_policy, args.volatile_write_back_for_benchmarks) {
        (None, false) if cache_in_memory => WritePolicy::WriteThrough,
        (None, _) => WritePolicy::WriteBack,
        (Some(name), flag) => {
            let p = WritePolicy::from_name(name)?;
            if flag && p != WritePolicy::WriteBack {
                return Err(ServeError::ConflictingPolicy(name.clone()).into());
            }
            p
        }
    };
    let cache_size_bytes = size_arg("cache-size", &args.cache_size)?;
    // The cache's size is known once it is open; everything else is checked
    // now, so that a bad setting never creates or formats a cache device.
    let mut config = EngineConfig {
        page_size_bytes: args.page_size,
        group_size_bytes: args.group_size,
        write_policy: policy,
        destage_order: args.order.clone(),
        destage_rate: args.rate.clone(),
        ..EngineConfig::default()
    };
    config.validate_settings()?;
    if args.volatile_write_back_for_benchmarks && !cache_in_memory {
        return Err(ServeError::WriteBackCacheNotVolatile { cache: cache_spec }.into());
    }
    if policy == WritePolicy::WriteBack && cache_in_memory {
        if !args.volatile_write_back_for_benchmarks {
            return Err(ServeError::WriteBackNeedsRecovery.into());
        }
        eprintln!("{}", "!".repeat(78));
        eprintln!("!! WARNING: volatile write-back FOR BENCHMARKS ONLY.");
        eprintln!("!! Writes are acknowledged from a cache in volatile memory with no crash");
        eprintln!("!! recovery: a crash, kill or power loss LOSES acknowledged writes, and");
        eprintln!("!! dirty pages not destaged at exit are lost. Never put real data here.");
        eprintln!("{}", "!".repeat(78));
    }

    let defaults_used = args.cache.is_none() || (args.backing.is_none() && args.exports.is_empty());
    if defaults_used || (args.socket.is_none() && args.listen.is_none()) {
        ensure_dir(&args.data_dir)?;
    }
    let cache_sync = sync_arg("cache-sync", &args.cache_sync)?;
    let mut named: Vec<(String, String)> = Vec::new();
    for e in &args.exports {
        let (name, spec) = e
            .split_once('=')
            .ok_or_else(|| ServeError::BadExport(e.clone()))?;
        if named.iter().any(|(n, _)| n == name) {
            return Err(ServeError::DuplicateExport(name.to_string()).into());
        }
        named.push((name.to_string(), spec.to_string()));
    }
    if let Some(b) = &args.backing {
        named.insert(0, ("disk".to_string(), b.clone()));
    }
    if named.is_empty() {
        let file = args.data_dir.join("backing.img");
        named.push((
            "disk".to_string(),
            format!("emulated-hdd:{}", file.display()),
        ));
    }
    let backing_sync = sync_arg("backing-sync", &args.backing_sync)?;
    let backing_size_bytes = size_arg("backing-size", &args.backing_size)?;
    let mut backings = Vec::new();
    for (name, spec) in &named {
        let backing = open_backing(spec, backing_sync, Some(backing_size_bytes))?;
        if backing.len_bytes() < args.block_size as u64 {
            return Err(ServeError::BackingTooSmall {
                export: name.clone(),
                backing: backing.name(),
                bytes: backing.len_bytes(),
                block: args.block_size,
            }
            .into());
        }
        backings.push(backing);
    }
    // NBD clients address whole blocks: an export ends at the last whole
    // block of its backing (a tail under one block is kept, not exported).
    let export_bytes = |i: usize| {
        let len = backings[i].len_bytes();
        len - len % args.block_size.max(1) as u64
    };

    let mut cache_mapped = false;
    let cache: Arc<dyn BlockDevice> = if cache_in_memory {
        Arc::new(MemDevice::new(cache_size_bytes))
    } else {
        let path = Path::new(&cache_spec);
        let options = FileOptions {
            sync: cache_sync,
            direct: args.direct,
            create_size_bytes: Some(cache_size_bytes).filter(|_| !path.exists()),
            map: true,
        };
        let device = FileDevice::open(path, options)?;
        cache_mapped = device.is_mapped();
        Arc::new(device)
    };

    let page = args.page_size;
    let cache_bytes = cache.len_bytes();
    if cache_bytes < args.group_size {
        return Err(ServeError::CacheTooSmall {
            cache_bytes,
            group_bytes: args.group_size,
        }
        .into());
    }
    config.cache_slots = cache.len_bytes() / page.max(1);
    let cache_name = cache.name();
    let driver_config = DriverConfig {
        io_threads: args.io_threads.max(1),
    };
    let driver = if cache_in_memory {
        Arc::new(Driver::new(
            config,
            cache.clone(),
            backings.clone(),
            driver_config,
        )?)
    } else {
        let mut entries = Vec::new();
        for (i, (name, spec)) in named.iter().enumerate() {
            entries.push(VolumeEntry::new(
                name,
                backings[i].len_bytes(),
                &backing_identity(spec),
            )?);
        }
        let (store, found, report) =
            CacheStore::open_or_format(cache.clone(), page, entries, args.force)?;
        if report.formatted {
            println!("wcache: formatted a new cache device {cache_name}");
        }
        if let Some(what) = &report.reformatted {
            eprintln!("wcache: --force: formatted {cache_name} anew, DISCARDING {what}");
        } else if !report.formatted {
            println!(
                "wcache: opened cache device {cache_name} (last shutdown {}); recovering {} dirty pages",
                if report.was_clean { "clean" } else { "NOT clean: crash or power loss" },
                report.dirty_pages
            );
        }
        for bad in &report.discarded {
            eprintln!("wcache: discarded a damaged record: {bad}");
        }
        if is_on_volatile_memory(Path::new(&cache_spec)) {
            eprintln!(
                "wcache: note: the cache file is on tmpfs: it survives a crash of this process, \
                 not a reboot or power loss (a stand-in for NV-DRAM)"
            );
        }
        store.set_clean(false, true)?;
        config.cache_slots = store.layout().slot_count;
        Arc::new(Driver::recover(
            config,
            Arc::new(store),
            found,
            backings.clone(),
            driver_config,
        )?)
    };
    driver.set_persist_on_flush(args.persist_on_flush);
    if args.persist_on_flush {
        println!(
            "wcache: persist-on-flush: writes are durable after FLUSH or FUA (a power loss may \
             lose acknowledged writes not yet flushed; a process crash loses none)"
        );
    }
    let reporter_stop = Arc::new(AtomicBool::new(false));
    let reporter = {
        let (driver, stop) = (driver.clone(), reporter_stop.clone());
        std::thread::Builder::new()
            .name("wcache-errors".into())
            .spawn(move || report_errors(&driver, &stop))?
    };

    let mut builder = Server::builder();
    for (i, (name, _)) in named.iter().enumerate() {
        let volume = VolumeId(i as u16);
        let export = VolumeExport {
            driver: driver.clone(),
            volume,
            size_bytes: export_bytes(i),
            block_size_min_bytes: args.block_size,
        };
        builder = builder.export(name, Arc::new(export));
    }
    let server_config = ServerConfig {
        workers_count: args.workers.max(1),
        receive_poll: Duration::from_micros(args.poll_us),
        ..ServerConfig::default()
    };
    let mut server = builder.config(server_config).start()?;

    let socket = match (&args.socket, &args.listen) {
        (Some(s), _) => Some(s.clone()),
        (None, None) => Some(args.data_dir.join("wcache.sock")),
        (None, Some(_)) => None,
    };
    let mut uris = Vec::new();
    if let Some(path) = &socket {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(|source| ServeError::Listen {
            what: path.display().to_string(),
            source,
        })?;
        server.listen_unix(listener)?;
        let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        for (name, _) in &named {
            uris.push(format!("nbd+unix:///{name}?socket={}", abs.display()));
        }
    }
    if let Some(addr) = &args.listen {
        let listener = TcpListener::bind(addr).map_err(|source| ServeError::Listen {
            what: addr.clone(),
            source,
        })?;
        let local = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| addr.clone());
        server.listen_tcp(listener)?;
        for (name, _) in &named {
            uris.push(format!("nbd://{local}/{name}"));
        }
    }

    println!(
        "wcache: serving {} export(s), write policy {}, destage order {}",
        named.len(),
        policy_name(policy),
        args.order
    );
    println!(
        "  cache: {cache_name} ({} MiB, {} slots of {page} bytes{})",
        cache.len_bytes() >> 20,
        cache.len_bytes() / page.max(1),
        if cache_mapped {
            "; mapped: written by memory copies"
        } else {
            ""
        }
    );
    for (i, (name, _)) in named.iter().enumerate() {
        println!(
            "  export {name}: {} ({} MiB)",
            backings[i].name(),
            backings[i].len_bytes() >> 20
        );
        let tail = backings[i].len_bytes() - export_bytes(i);
        if tail > 0 {
            println!(
                "    note: its last {tail} bytes are less than one {}-byte block and are not exported",
                args.block_size
            );
        }
    }
    for uri in &uris {
        println!("  NBD URI: {uri}");
    }
    if let Some(uri) = uris.first() {
        println!("Attach it (as root where noted):");
        println!("  nbdinfo '{uri}'");
        println!("  mkdir -p /mnt/wcache /mnt/disk && nbdfuse /mnt/wcache '{uri}' &");
        println!("    then: dev=$(losetup -f --show /mnt/wcache/nbd); mkfs.ext4 $dev; mount $dev /mnt/disk");
        if let Some(path) = &socket {
            let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            println!(
                "  nbd-client -unix {} /dev/nbd0 -N {}   (needs the nbd kernel module)",
                abs.display(),
                named[0].0
            );
        }
        println!("  qemu-system-x86_64 -drive file={uri},format=raw,if=virtio ...");
        println!("Stop with Ctrl-C or SIGTERM (in-flight requests finish first).");
    }

    let signal = wait_for_stop_signal(&signals);
    eprintln!("wcache: signal {signal}: stopping (no new connections; in-flight requests finish)");
    let served = server.stats();
    server.stop();
    reporter_stop.store(true, Ordering::Relaxed);
    let _ = reporter.join();
    let stats = driver.stats();
    let engine = driver.engine_stats();
    driver.shutdown();
    let dirty = driver.dirty_pages();
    match driver.store() {
        None if dirty > 0 => eprintln!(
            "wcache: {dirty} dirty pages were never destaged (volatile write-back): they are lost"
        ),
        None => {}
        Some(store) => {
            if driver.is_clean() {
                // Everything acknowledged is on the backings: no record is needed.
                store.free_all_records()?;
            }
            store.set_clean(true, false)?;
            eprintln!(
                "wcache: clean shutdown recorded; {dirty} dirty pages stay in the cache and are \
                 destaged after the next start (or by wcache flush)"
            );
        }
    }
    if let Some(path) = &socket {
        let _ = std::fs::remove_file(path);
    }
    eprintln!(
        "wcache: stopped after {} requests ({} cache errors, {} backing errors{})",
        stats.requests,
        stats.cache_errors,
        stats.backing_errors,
        stats
            .last_error
            .map(|e| format!("; last: {e}"))
            .unwrap_or_default()
    );
    eprintln!(
        "wcache: NBD: {} requests served, {} run on their connection's reader thread",
        served.requests_served, served.requests_inline
    );
    eprintln!(
        "wcache: {} writes ({} stalled for room, {} ms in all), {} reads ({} hits), {} destages \
         of {} pages, {} cache flushes, {} backing flushes",
        engine.writes,
        engine.stalls,
        engine.stall_ns_total / 1_000_000,
        engine.reads,
        engine.read_hits,
        engine.destages,
        engine.destaged_pages,
        stats.cache_flushes,
        stats.backing_flushes
    );
    Ok(())
}

/// What a backing is, for the superblock: the same name must mean the same
/// backing at the next start (paths are made absolute).
pub fn backing_identity(spec: &str) -> String {
    if spec.starts_with("nbd://") || spec.starts_with("nbd+unix://") || spec.starts_with("mem:") {
        return spec.to_string();
    }
    if let Some(rest) = spec.strip_prefix("emulated-") {
        if let Some((model, inner)) = rest.split_once(':') {
            return format!("emulated-{model}:{}", backing_identity(inner));
        }
    }
    std::fs::canonicalize(spec)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| spec.to_string())
}

/// Logs backing and cache errors as they happen (the driver counts them;
/// the engine keeps failed destages dirty and retries them).
fn report_errors(driver: &Driver, stop: &AtomicBool) {
    let mut seen = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let s = driver.stats();
        if (s.backing_errors, s.cache_errors) != seen {
            eprintln!(
                "wcache: I/O errors so far: {} backing, {} cache (last: {}); failed destages are \
                 retried, their pages stay dirty and readable; {} dirty pages",
                s.backing_errors,
                s.cache_errors,
                s.last_error.as_deref().unwrap_or("?"),
                driver.dirty_pages()
            );
            seen = (s.backing_errors, s.cache_errors);
        }
    }
}

fn policy_name(p: WritePolicy) -> &'static str {
    match p {
        WritePolicy::WriteBack => "write-back",
        WritePolicy::WriteThrough => "write-through",
        WritePolicy::WriteAround => "write-around",
    }
}
