//! `wcache serve`: cached volumes over NBD on real devices.
//!
//! This module exists to wire the pieces together: it turns the arguments
//! into a `CacheConfig`, starts the cache with the lifecycle every front end
//! uses (`wcache_io::cache`: devices from their specs, format or recovery,
//! refusal of another configuration's dirty cache without `--force`, one
//! `Driver` with a volume per `--export`), serves each volume over NBD
//! through a thin `Export` adapter, and closes the cache cleanly on SIGTERM
//! or SIGINT. A cache file or block device is persistent and write-back by
//! default; a cache in process memory (`--cache mem`) keeps nothing, so
//! write-back on it needs the loud benchmark-only flag. It must never make
//! cache decisions (the engine does), move bytes itself (the driver does),
//! or open, format or recover a cache other than through the lifecycle.
//! Its parts: `args` (the options), `config` (the same from a TOML file),
//! `settings` (options to a `CacheConfig`), `listeners` (the sockets and
//! the service manager's readiness).

mod args;
mod config;
mod listeners;
mod nbd_volume;
mod settings;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wcache_core::config::StalenessConfig;
use wcache_io::device::journaled::JournalOpen;
use wcache_io::format::FORMAT_VERSION;
use wcache_io::lock::{DeviceLock, LockMode};
use wcache_io::ops::{ClientStatus, ErrorReporter, Snapshot};
use wcache_io::{Cache, CacheConfig, CloseReport};
use wcache_nbd::{Server, ServerConfig, ServerStats};

pub use args::ServeArgs;
use listeners::{notify, Listeners};
use nbd_volume::NbdVolume;
use sd_notify::NotifyState;
use settings::cache_config;

type AnyError = Box<dyn std::error::Error>;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--volatile-write-back-for-benchmarks means write-back, but --write-policy is {0}")]
    ConflictingPolicy(String),
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
    #[error("--{option} {value}: no export is called {name:?} (the exports: {exports})")]
    UnknownExport {
        option: &'static str,
        value: String,
        name: String,
        exports: String,
    },
    #[error("--export-admission {0:?}: expected EXPORT=POLICY, e.g. db=cp-pi-ioi")]
    ExportAdmission(String),
}

/// The banner's lines on the cache device: size, data path, format.
fn print_cache_device(cache: &Cache, page: u64) {
    let device = cache.device();
    say!(
        "  cache: {} ({} MiB, {} slots of {page} bytes{})",
        device.name,
        device.size_bytes >> 20,
        cache.engine_config().cache_slots,
        if device.mapped {
            "; mapped: written by memory copies"
        } else {
            ""
        }
    );
    if let Some(choice) = &device.durability {
        say!("  durability (--cache-sync auto): {choice}");
    }
    say!("  data path: {}", cache.data_path());
    if let Some(log) = cache.open_report().and_then(|r| r.log.as_ref()) {
        say!(
            "  format 3: a log of batches, one device write each (checkpoint: {}, read in {:.3} s; then {} batches ({} MiB) read back in {:.3} s; the log ended: {})",
            log.checkpoint,
            log.times.0.as_secs_f64(),
            log.batches,
            (log.slots_read * cache.page_size_bytes()) >> 20,
            log.times.1.as_secs_f64(),
            log.end,
        );
    }
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

/// A stop signal received within `timeout`, if any.
fn stop_signal_within(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let wait = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `set` was initialised by block_stop_signals; a null siginfo is allowed.
    let signal = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &wait) };
    (signal > 0).then_some(signal)
}

/// Time allowed, after the grace period, for requests just answered with
/// an error to reach their clients, and for the driver's threads to stop.
const STOP_AFTER_GRACE: Duration = Duration::from_millis(500);

/// How a wait within the grace period ended.
#[derive(PartialEq)]
enum Grace {
    Done,
    Over,
    Signal,
}

/// Waits until `done`, the deadline, or a second stop signal.
fn wait_in_grace(
    deadline: Instant,
    signals: &libc::sigset_t,
    mut done: impl FnMut() -> bool,
) -> Grace {
    let step = Duration::from_millis(20);
    loop {
        if done() {
            return Grace::Done;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Grace::Over;
        }
        if let Some(signal) = stop_signal_within(signals, left.min(step)) {
            tracing::warn!("signal {signal} again: ending the grace period");
            return Grace::Signal;
        }
    }
}

/// Stops the NBD server within the grace period: it stops accepting, and
/// in-flight requests (then destages in flight) finish, their replies going
/// out. At the end of the grace period, or at a second signal, what still
/// waits is answered with an error; a worker blocked in a backing call that
/// does not answer is left behind (the process exits without it).
fn stop_server(server: Server, cache: &Cache, grace: Duration, signals: &libc::sigset_t) {
    notify(&[NotifyState::Stopping]);
    let deadline = Instant::now() + grace;
    // Dirty pages stay (documented): destaging them now would hold the
    // stop for as long as they take.
    cache.stop_destaging();
    let stopper = match std::thread::Builder::new()
        .name("wcache-stop".into())
        .spawn(move || server.stop())
    {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("cannot start the stop thread ({e}); not waiting for requests");
            cache.fail_waiting();
            return;
        }
    };
    let mut ended = wait_in_grace(deadline, signals, || stopper.is_finished());
    if ended == Grace::Done {
        // Destages in flight may finish too; one stuck in a backing call does not hold the stop.
        ended = wait_in_grace(deadline, signals, || cache.is_idle());
        if ended == Grace::Done {
            return;
        }
    }
    if ended == Grace::Over {
        tracing::warn!("grace period of {:.1} s over", grace.as_secs_f64());
    }
    let failed_count = cache.fail_waiting();
    tracing::warn!(
        "answered {failed_count} writes still waiting for room with an error \
         (none was acknowledged); refusing new requests"
    );
    let after = Instant::now() + STOP_AFTER_GRACE;
    while !stopper.is_finished() && Instant::now() < after {
        std::thread::sleep(Duration::from_millis(5));
    }
    if !stopper.is_finished() {
        tracing::warn!(
            "requests still wait on a backing that does not answer: not waiting for them"
        );
    }
}

/// `given`: the ids of the options given on the command line (they win over `--config`).
pub fn serve(args: ServeArgs, given: &[String]) -> Result<(), AnyError> {
    let args = match args.config.clone() {
        Some(path) => config::apply(args, &path, given)?,
        None => args,
    };
    // A server lives on when its standard output goes away (EPIPE, not
    // SIGPIPE; its prints ignore the error); so do its sockets' writes.
    // SAFETY: signal(2) with SIG_IGN, before the server starts any thread.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let signals = block_stop_signals();
    return_large_buffers_to_the_system();
    // Every setting is checked before any file is touched.
    let config = cache_config(&args)?;
    config.check()?;
    if config.is_volatile_write_back() {
        warn_volatile_write_back();
    }
    let defaults_used = args.cache.is_none() || (args.backing.is_none() && args.exports.is_empty());
    let default_socket = args.socket.is_none() && args.listen.is_none();
    // The data directory holds this server's sockets (and the default
    // files): one server at a time.
    let mut _dir_lock = None;
    if defaults_used || default_socket || (args.socket.is_none() && args.control.is_none()) {
        ensure_dir(&args.data_dir)?;
        _dir_lock = Some(DeviceLock::acquire(
            &args.data_dir,
            LockMode::Exclusive,
            "data directory",
        )?);
    }
    let mut listeners = Listeners::bind(&args)?;
    let socket = listeners.socket();
    let cache = match Cache::open(&config) {
        Ok(cache) => cache,
        Err(e) => {
            listeners.discard();
            return Err(e.into());
        }
    };
    print_open_report(&cache, &config);
    let reporter = ErrorReporter::start(cache.monitor())?;
    let mut server = start_nbd_server(&args, &cache)?;
    operate_server(&cache, &server);
    let ops = listeners.start_ops(cache.operator())?;
    listeners.serve(&mut server, cache.volumes(), |uris| {
        print_banner(&args, &config, &cache, socket.as_deref(), uris);
        ops.print();
    })?;

    let signal = wait_for_stop_signal(&signals);
    let grace = Duration::from_secs_f64(args.stop_timeout);
    tracing::info!(
        "signal {signal}: stopping (no new connections; in-flight requests have {:.1} s \
         to finish, or until a second signal)",
        grace.as_secs_f64()
    );
    let served = server.stats();
    ops.stop();
    stop_server(server, &cache, grace, &signals);
    reporter.stop();
    let closed = cache.close_within(STOP_AFTER_GRACE)?;
    if let Some(path) = &socket {
        let _ = std::fs::remove_file(path);
    }
    print_close_report(&closed, &served);
    Ok(())
}

/// The NBD server over the cache's volumes (not yet listening).
fn start_nbd_server(args: &ServeArgs, cache: &Cache) -> Result<Server, AnyError> {
    let mut builder = Server::builder();
    for volume in cache.volumes() {
        builder = builder.export(volume.name(), Arc::new(NbdVolume(volume.clone())));
    }
    let server_config = ServerConfig {
        workers_count: args.workers,
        receive_poll: Duration::from_micros(args.poll_us),
        ..ServerConfig::default()
    };
    Ok(builder.config(server_config).start()?)
}

/// What the stop left behind, then the statistics of the whole run.
fn print_close_report(closed: &CloseReport, served: &ServerStats) {
    if closed.threads_left {
        tracing::warn!(
            "driver threads still in device calls (a backing that does not answer); \
             exiting without them (their pages stay dirty in the cache)"
        );
    }
    if closed.recorded_clean {
        tracing::info!(
            "clean shutdown recorded; {} dirty pages stay in the cache and are \
             destaged after the next start (or by wcache flush)",
            closed.dirty_pages
        );
    } else if closed.dirty_pages > 0 {
        tracing::warn!(
            "{} dirty pages were never destaged (volatile write-back): they are lost",
            closed.dirty_pages
        );
    }
    print_stop_stats(closed, served);
}

fn warn_volatile_write_back() {
    say_err!("{}", "!".repeat(78));
    say_err!("!! WARNING: volatile write-back FOR BENCHMARKS ONLY.");
    say_err!("!! Writes are acknowledged from a cache in volatile memory with no crash");
    say_err!("!! recovery: a crash, kill or power loss LOSES acknowledged writes, and");
    say_err!("!! dirty pages not destaged at exit are lost. Never put real data here.");
    say_err!("{}", "!".repeat(78));
}

/// How the cache device was found: formatted, reformatted, or recovered.
fn print_open_report(cache: &Cache, config: &CacheConfig) {
    let journals = cache.volumes().iter().zip(cache.backing_journals());
    for ((volume, found), spec) in journals.zip(&config.volumes) {
        let place = spec.journal.as_deref().unwrap_or_default();
        let what = match found {
            JournalOpen::Formatted => format!("formatted ({place})"),
            JournalOpen::Empty => format!("empty ({place})"),
            JournalOpen::Replayed { txn, pages } => {
                format!("replayed transaction {txn} ({pages} pages) in place ({place})")
            }
        };
        say!(
            "wcache: export {:?}: backing journal {what}; the export has {} bytes",
            volume.name(),
            volume.size_bytes()
        );
    }
    let Some(report) = cache.open_report() else {
        return;
    };
    let cache_name = &cache.device().name;
    if report.formatted {
        say!("wcache: formatted a new cache device {cache_name}");
    }
    if report.filled_bytes > 0 {
        say!(
            "  wrote {} MiB of zeros where the cache file had no storage of its own (so that a flush writes data, not allocations)",
            report.filled_bytes.div_ceil(1 << 20)
        );
    }
    if let Some(what) = &report.reformatted {
        tracing::warn!("--force: formatted {cache_name} anew, DISCARDING {what}");
    } else if !report.formatted {
        say!(
            "wcache: opened cache device {cache_name} (last shutdown {}); recovering {} dirty pages",
            if report.was_clean { "clean" } else { "NOT clean: crash or power loss" },
            report.dirty_pages
        );
    }
    for bad in &report.discarded {
        tracing::warn!("discarded a damaged record: {bad}");
    }
    if report.reformatted.is_none() && report.format_version_found < FORMAT_VERSION {
        say!(
            "wcache: superblock format version {} upgraded to {FORMAT_VERSION}: it now records \
             the engine configuration",
            report.format_version_found
        );
    }
    if cache.device().on_volatile_memory {
        tracing::info!(
            "note: the cache file is on tmpfs: it survives a crash of this process, \
             not a reboot or power loss (a stand-in for NV-DRAM)"
        );
    }
}

/// Request buffers of 256 KiB and more are mapped and unmapped by the
/// allocator rather than kept in its per-thread arenas. Each NBD connection
/// has its own reader thread; with glibc's default (a threshold that rises
/// to 32 MiB after the first large free) every arena kept the largest
/// buffers it ever held: RSS rose from 11 to 272 MiB over 2,000 connections
/// of 20 I/Os of 4 KiB–4 MiB, and stays at about 25 MiB with this
/// (`scripts/rss-soak.sh`, `docs/benchmarks.md`).
fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a tuning parameter of the allocator.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

/// The staleness bounds in force, as the banner states them.
fn staleness_text(s: &StalenessConfig) -> String {
    let age = |ns: u64| humantime::format_duration(Duration::from_nanos(ns)).to_string();
    let bound = match s.max_dirty_age_ns {
        0 => "no maximum dirty age".to_string(),
        ns => format!("dirty pages destaged once {} old", age(ns)),
    };
    let idle = match s.idle_destages {
        0 => "no idle drain".to_string(),
        n => format!(
            "idle after {}: {n} destages outstanding",
            age(s.idle_after_ns)
        ),
    };
    format!("{bound}; {idle}")
}

/// What is served where, and how to attach it.
fn print_banner(
    args: &ServeArgs,
    config: &CacheConfig,
    cache: &Cache,
    socket: Option<&Path>,
    uris: &[String],
) {
    let volumes = cache.volumes();
    say!(
        "wcache: serving {} export(s), write policy {}, destage order {}, admission {}{}",
        volumes.len(),
        config.engine.write_policy.name(),
        args.order,
        args.admission,
        match config.engine.sequential_cutoff_bytes {
            0 => String::new(),
            n => format!(" (sequential cutoff {n} bytes)"),
        }
    );
    say!("  staleness: {}", staleness_text(&config.engine.staleness));
    if args.persist_on_flush {
        let within = if args.flush_interval > 0.0 {
            format!(", or within about {} s", args.flush_interval)
        } else {
            String::new()
        };
        say!(
            "wcache: persist-on-flush: writes are durable after FLUSH or FUA{within} (a power \
             loss may lose acknowledged writes not yet flushed; a process crash loses none)"
        );
    }
    print_cache_device(cache, args.page_size);
    for (i, v) in volumes.iter().enumerate() {
        let id = i as u16;
        let own = config
            .engine
            .volume_admissions
            .iter()
            .rev()
            .find(|(n, _)| *n == id);
        say!(
            "  export {}: {} ({} MiB){}{}",
            v.name(),
            v.backing_name(),
            v.backing_size_bytes() >> 20,
            own.map(|(_, p)| format!(", admission {p}"))
                .unwrap_or_default(),
            if config.engine.critical_volumes.contains(&id) {
                ", critical"
            } else {
                ""
            }
        );
        let tail = v.backing_size_bytes() - v.size_bytes();
        if tail > 0 {
            say!(
                "    note: its last {tail} bytes are less than one {}-byte block and are not exported",
                args.block_size
            );
        }
    }
    for uri in uris {
        say!("  NBD URI: {uri}");
    }
    if let Some(uri) = uris.first() {
        say!("Attach it (as root where noted):");
        say!("  nbdinfo '{uri}'");
        say!("  mkdir -p /mnt/wcache /mnt/disk && nbdfuse /mnt/wcache '{uri}' &");
        say!("    then: dev=$(losetup -f --show /mnt/wcache/nbd); mkfs.ext4 $dev; mount $dev /mnt/disk");
        if let Some(path) = socket {
            let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            say!(
                "  nbd-client -unix {} /dev/nbd0 -N {}   (needs the nbd kernel module)",
                abs.display(),
                volumes[0].name()
            );
        }
        say!("  qemu-system-x86_64 -drive file={uri},format=raw,if=virtio ...");
        say!(
            "Stop with Ctrl-C or SIGTERM (in-flight requests finish first, within --stop-timeout)."
        );
    }
}

fn print_stop_stats(closed: &CloseReport, served: &ServerStats) {
    let stats = &closed.snapshot.driver;
    let snap: &Snapshot = &closed.snapshot;
    let v = |name: &str| snap.engine_value(name).unwrap_or(0);
    tracing::info!(
        "stopped after {} requests ({} cache errors, {} backing errors{})",
        stats.requests,
        stats.cache_errors,
        stats.backing_errors,
        stats
            .last_error
            .as_ref()
            .map(|e| format!("; last: {e}"))
            .unwrap_or_default()
    );
    tracing::info!(
        "NBD: {} requests served, {} run on their connection's reader thread",
        served.requests_served,
        served.requests_inline
    );
    tracing::info!(
        "{} writes ({} stalled for room, {} ms in all), {} reads ({} hits), {} destages \
         of {} pages, {} cache flushes, {} backing flushes",
        v("writes"),
        v("stalls"),
        v("stall_ns_total") / 1_000_000,
        v("reads"),
        v("read_hits"),
        v("destages"),
        v("destaged_pages"),
        stats.cache_flushes,
        stats.backing_flushes
    );
    tracing::info!(
        "admission: {} writes admitted to the cache, {} bypassed it, {} reissued to it \
         while bypassing (I/O criticality inheritance; {} late completions discarded)",
        v("writes") - v("write_bypasses"),
        v("write_bypasses"),
        v("reissued_writes"),
        v("discarded_completions")
    );
    for r in snap.requests.iter().filter(|r| r.count > 0) {
        tracing::info!(
            "export {} {}: {} requests, response time p50 {} us, p99 {} us, max {} us",
            r.export,
            r.kind,
            r.count,
            r.p50_us,
            r.p99_us,
            r.max_us
        );
    }
}

/// What the control socket asks of the front end: `wcache stop` ends the
/// server as SIGTERM does (the main thread waits for it), and `status`
/// lists the NBD clients.
fn operate_server(cache: &Cache, server: &Server) {
    let operator = cache.operator();
    operator.on_stop(Box::new(|| {
        // SAFETY: kill(2) of this very process.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    }));
    let clients = server.clients();
    operator.on_clients(Box::new(move || {
        let list = clients.list().into_iter();
        list.map(|c| ClientStatus {
            peer: c.peer,
            export: c.export,
            connected_s: c.connected.as_secs_f64(),
        })
        .collect()
    }));
}

fn ensure_dir(dir: &Path) -> Result<(), ServeError> {
    std::fs::create_dir_all(dir).map_err(|source| ServeError::CreateDir {
        path: dir.display().to_string(),
        source,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::Parser;

    /// `wcache serve`'s arguments alone, for parsing in tests.
    #[derive(Parser)]
    pub(crate) struct Serve {
        #[command(flatten)]
        pub(crate) args: ServeArgs,
    }

    #[test]
    fn critical_exports_and_export_admissions_become_volume_numbers() {
        let args = Serve::parse_from([
            "serve",
            "--export",
            "db=/tmp/db.img",
            "--export",
            "wal=/tmp/wal.img",
            "--admission",
            "volume",
            "--critical",
            "wal",
            "--export-admission",
            "db=cp-pi-ioi",
        ])
        .args;
        let config = cache_config(&args).expect("valid");
        assert_eq!(config.engine.admission, "volume");
        assert_eq!(config.engine.critical_volumes, vec![1]);
        assert_eq!(
            config.engine.volume_admissions,
            vec![(0, "cp-pi-ioi".to_string())]
        );
    }
}
