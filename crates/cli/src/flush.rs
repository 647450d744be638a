//! `wcache flush`: when a server holds the cache (its control socket
//! answers), an online drain while it serves (`ops::flush_online`).
//! Otherwise `wcache flush --cache FILE --export NAME=BACKING ...`, the
//! offline drain: it opens
//! a cache device that no server is using, recovers it exactly as `serve`
//! would, destages every dirty page to its backing with a progress bar and
//! ETA, then frees every record and records a clean state. The exports must
//! be the ones the superblock names (same order, sizes and backings): a
//! drain to the wrong backing would corrupt it, so this must never guess.
//! The engine runs with the configuration the superblock records (a
//! version-1 device records none: the drain then guesses the write group
//! and policies, which is safe, and prints a note saying so).
//! The lifecycle is `wcache_io::cache`; this file is wiring and output.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use wcache_core::config::CACHE_SLOTS_MAX;
use wcache_core::geometry::{PAGE_SIZE_BYTES_MAX, PAGE_SIZE_BYTES_MIN};
use wcache_io::{Cache, DriverConfig, OfflineConfig};

use wcache_io::ops::client::{ClientError, ControlClient};

use crate::args::{export_args, journal_args, size_within_arg, sync_arg};
use crate::limits;
use crate::ops::{flush_online, ControlArgs};
use crate::tools::{describe_offline_engine, AnyError};

/// `--journal-size` (offline): one page of the smallest size at least, as
/// many pages of the largest as the cache has slots at most (the served
/// size is checked against the backings' journals).
const JOURNAL_BYTES: (u64, u64) = (
    PAGE_SIZE_BYTES_MIN as u64,
    CACHE_SLOTS_MAX * PAGE_SIZE_BYTES_MAX as u64,
);

/// Destage every dirty page: online through a running server's control
/// socket, or offline from a cache device to its backings, then mark it clean.
#[derive(Args, Debug)]
pub struct FlushArgs {
    /// Offline: the cache file or block device (no server may be using it).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Offline: an export NAME=BACKING, as given to `wcache serve`, for
    /// every volume of the cache. Online: at most one export NAME (the
    /// drain covers the whole cache, which every export shares).
    #[arg(long = "export", value_name = "NAME=BACKING")]
    exports: Vec<String>,
    #[command(flatten)]
    control: ControlArgs,
    /// How backing file writes become durable: fdatasync, dsync, nvram.
    #[arg(long, default_value = "fdatasync")]
    backing_sync: String,
    /// Give up when the drain makes no progress for this many seconds
    /// (a failing backing); the dirty pages stay in the cache.
    #[arg(long, default_value_t = 60, value_parser = limits::timeout_s)]
    stall_timeout_s: u64,
    /// Offline, for a cache served write-back-journaled: its --journal-size...
    #[arg(long)]
    journal_size: Option<String>,
    /// ...and each export's --journal EXPORT=PATH|backing-end, as served.
    #[arg(long = "journal", value_name = "EXPORT=PATH|backing-end")]
    journals: Vec<String>,
}

pub fn flush(args: FlushArgs) -> Result<(), AnyError> {
    let control = args.control.path(args.cache.as_deref());
    match ControlClient::connect(&control) {
        Ok(mut client) => {
            if args.exports.len() > 1 {
                return Err(
                    "online flush drains the whole cache: give at most one --export".into(),
                );
            }
            let export = args.exports.first().map(|e| match e.split_once('=') {
                Some((name, _)) => name.to_string(),
                None => e.clone(),
            });
            println!(
                "wcache flush: draining online through {}",
                control.display()
            );
            flush_online(&mut client, export, args.stall_timeout_s)
        }
        Err(ClientError::NoServer { .. }) => flush_offline(args),
        Err(e) => Err(e.into()),
    }
}

/// A replica's copy destaged while its primary lives would write an old
/// state over the backing: only a takeover (`wcache serve --takeover`) serves it.
fn refuse_a_replicas_copy(cache: &std::path::Path) -> Result<(), AnyError> {
    use wcache_io::replica::{state, MirrorError, ReplicaState, Role};
    let path = state::default_path(cache);
    match ReplicaState::load(&path)? {
        Some(s) if s.role == Role::Replica => Err(MirrorError::IsReplica {
            state: path.display().to_string(),
        }
        .into()),
        _ => Ok(()),
    }
}

fn flush_offline(args: FlushArgs) -> Result<(), AnyError> {
    let Some(cache_path) = args.cache.clone() else {
        return Err(
            "no server is running (no control socket answers) and no --cache was given: \
                    an offline flush needs --cache FILE and --export NAME=BACKING for every volume"
                .into(),
        );
    };
    if args.exports.is_empty() {
        return Err(
            "offline flush: give --export NAME=BACKING for every volume of the cache".into(),
        );
    }
    refuse_a_replicas_copy(&cache_path)?;
    let mut volumes = export_args(&args.exports)?;
    journal_args(&args.journals, &mut volumes)?;
    let config = OfflineConfig {
        backing_sync: sync_arg("backing-sync", &args.backing_sync)?,
        volumes,
        cache_path,
        driver: DriverConfig::default(),
        journal_bytes: args
            .journal_size
            .as_deref()
            .map(|t| size_within_arg("journal-size", t, JOURNAL_BYTES))
            .transpose()?,
    };
    let cache = Cache::open_offline(&config)?;
    println!(
        "wcache flush: {}",
        describe_offline_engine(cache.engine_config(), cache.engine_source())
    );
    if let Some(report) = cache.open_report() {
        for bad in &report.discarded {
            eprintln!("wcache flush: discarded a damaged record: {bad}");
        }
    }
    let total = cache.dirty_pages();
    println!(
        "wcache flush: {} dirty pages ({} MiB) to destage",
        total,
        (total * cache.page_size_bytes()) >> 20
    );
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} pages  {per_sec}  elapsed {elapsed_precise}  ETA {eta_precise}",
        )?
        .progress_chars("=> "),
    );
    let stall = Duration::from_secs(args.stall_timeout_s);
    let drained = cache.drain(stall, |dirty| bar.set_position(total.saturating_sub(dirty)));
    if let Err(e) = drained {
        bar.abandon();
        // The pages stay in the cache, which is left in a clean state.
        cache.close()?;
        return Err(e.into());
    }
    bar.set_position(total);
    bar.finish();
    let closed = cache.close()?;
    println!(
        "wcache flush: done: {total} pages destaged, {} backing errors retried; the cache is clean and empty",
        closed.stats.backing_errors
    );
    Ok(())
}
