//! The lifecycle's configuration from `wcache serve`'s options (and the
//! part every front end shares, `base_config`, from `wcache mount`'s): parsing
//! and checks that need no device (every error names the option), so that
//! a refused start touches no file. It must never open a device.

use std::time::Duration;

use wcache_core::config::{
    CheckpointMode, ConsistencyPoints, JournalConfig, StalenessConfig, CACHE_SLOTS_MAX,
};
use wcache_core::geometry::Geometry;
use wcache_core::policy::destage_rate::RateConfig;
use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_io::device::file::SyncMode;
use wcache_io::format::Layout;
use wcache_io::{CacheConfig, CacheDeviceSpec, DriverConfig, FormatAsked, VolumeSpec};

use super::{AnyError, ServeArgs, ServeError};
use crate::args::{
    duration_ns_arg, export_args, journal_args, pages_arg, size_arg, size_within_arg, sync_arg,
    ArgError,
};
use crate::cache_args::CacheArgs;

/// The size of a cache file created without --cache-size.
const CACHE_BYTES_DEFAULT: u64 = 1 << 30;

/// The volume number of export `name` among `volumes`, for `option`'s `value`.
fn export_id(
    volumes: &[VolumeSpec],
    option: &'static str,
    value: &str,
    name: &str,
) -> Result<u16, ServeError> {
    match volumes.iter().position(|v| v.name == name) {
        Some(i) => Ok(i as u16),
        None => Err(ServeError::UnknownExport {
            option,
            value: value.to_string(),
            name: name.to_string(),
            exports: volumes
                .iter()
                .map(|v| v.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Critical volumes, and volumes with their own admission policy.
type ExportPolicies = (Vec<u16>, Vec<(u16, String)>);

/// `--critical` and `--export-admission` as the engine's volume numbers.
fn export_policies(args: &ServeArgs, volumes: &[VolumeSpec]) -> Result<ExportPolicies, ServeError> {
    let critical = args
        .critical_exports
        .iter()
        .map(|name| export_id(volumes, "critical", name, name))
        .collect::<Result<_, _>>()?;
    let admissions = args
        .export_admissions
        .iter()
        .map(|spec| {
            let (name, policy) = spec
                .split_once('=')
                .filter(|(n, p)| !n.is_empty() && !p.is_empty())
                .ok_or_else(|| ServeError::ExportAdmission(spec.clone()))?;
            Ok((
                export_id(volumes, "export-admission", spec, name)?,
                policy.to_string(),
            ))
        })
        .collect::<Result<_, ServeError>>()?;
    Ok((critical, admissions))
}

/// `--cache-sync`: a sync mode, or `auto` (measured at open; whether to
/// measure is the second value). Under persist-on-flush a write need not
/// be durable until a flush, so `auto` is fdatasync there.
pub(crate) fn cache_sync_arg(
    text: &str,
    persist_on_flush: bool,
) -> Result<(SyncMode, bool), AnyError> {
    if text.eq_ignore_ascii_case("auto") {
        return Ok((SyncMode::Fdatasync, !persist_on_flush));
    }
    Ok((sync_arg("cache-sync", text)?, false))
}

/// The lifecycle's configuration from the arguments (parsing only: no file
/// is touched here).
pub(super) fn cache_config(args: &ServeArgs) -> Result<CacheConfig, AnyError> {
    let opts = &args.cache_opts;
    let cache_spec = opts
        .cache
        .clone()
        .unwrap_or_else(|| args.data_dir.join("cache.img").display().to_string());
    let write_policy = write_policy_arg(
        opts,
        cache_spec == "mem",
        args.volatile_write_back_for_benchmarks,
    )?;
    let backing_size_bytes = backing_size_arg(args)?;
    let volumes = volume_specs(args)?;
    let mut config = base_config(opts, &cache_spec, write_policy)?;
    let (critical_volumes, volume_admissions) = export_policies(args, &volumes)?;
    config.engine.critical_volumes = critical_volumes;
    config.engine.volume_admissions = volume_admissions;
    Ok(CacheConfig {
        volumes,
        backing_sync: sync_arg("backing-sync", &args.backing_sync)?,
        backing_create_size_bytes: Some(backing_size_bytes),
        block_size_bytes: args.block_size,
        volatile_write_back: args.volatile_write_back_for_benchmarks,
        backing_timeout: Some(Duration::from_nanos(duration_ns_arg(
            "backing-timeout",
            &args.backing_timeout,
        )?)),
        ..config
    })
}

/// What every front end's configuration shares, from its cache options:
/// the cache device `cache_spec`, the engine, the driver and the format.
/// No volume: the front end adds its own (and their backings' settings).
pub(crate) fn base_config(
    opts: &CacheArgs,
    cache_spec: &str,
    write_policy: WritePolicyKind,
) -> Result<CacheConfig, AnyError> {
    let cache_size_bytes = cache_size_arg(opts)?;
    let (cache_sync, measure) = cache_sync_arg(&opts.cache_sync, opts.persist_on_flush)?;
    let cache = CacheDeviceSpec::parse(
        cache_spec,
        (cache_size_bytes, CACHE_BYTES_DEFAULT),
        cache_sync,
        opts.direct,
    );
    Ok(CacheConfig {
        cache: if measure {
            cache.measuring_sync()
        } else {
            cache
        },
        volumes: Vec::new(),
        backing_sync: SyncMode::Fdatasync,
        backing_create_size_bytes: None,
        engine: engine_config(opts, write_policy)?,
        driver: DriverConfig {
            io_threads: opts.io_threads,
            persist_on_flush: opts.persist_on_flush,
            flush_interval: Some(Duration::from_secs_f64(opts.flush_interval))
                .filter(|d| !d.is_zero()),
            io_uring: !opts.no_io_uring,
        },
        block_size_bytes: opts.page_size.min(u64::from(u32::MAX)) as u32,
        force: opts.force,
        format: match opts.cache_format {
            Some(2) => FormatAsked::Records,
            _ => FormatAsked::FoundNewLog,
        },
        volatile_write_back: false,
        backing_timeout: None,
        replicate: None,
    })
}

/// `--cache-size`, if given: a cache of at least one write group and at
/// most the engine's slots (checked against a valid page and group only:
/// the engine reports a bad one).
fn cache_size_arg(opts: &CacheArgs) -> Result<Option<u64>, ArgError> {
    let Some(text) = opts.cache_size.as_deref() else {
        return Ok(None);
    };
    let bytes = size_arg("cache-size", text)?;
    let Ok(geometry) = Geometry::new(opts.page_size, opts.group_size) else {
        return Ok(Some(bytes));
    };
    let slots = Layout::for_device(bytes, opts.page_size).map_or(0, |l| l.slot_count);
    let group_pages = u64::from(geometry.group_pages());
    if !(group_pages..=CACHE_SLOTS_MAX).contains(&slots) {
        return Err(ArgError::CacheSize {
            text: text.to_string(),
            slots,
            group_pages,
            page_bytes: opts.page_size,
        });
    }
    Ok(Some(bytes))
}

/// `--backing-size`: at least one block and at most what the engine addresses.
fn backing_size_arg(args: &ServeArgs) -> Result<u64, ArgError> {
    let opts = &args.cache_opts;
    let Ok(geometry) = Geometry::new(opts.page_size, opts.group_size) else {
        return size_arg("backing-size", &args.backing_size);
    };
    let range = (u64::from(args.block_size), geometry.volume_size_bytes_max());
    size_within_arg("backing-size", &args.backing_size, range)
}

/// `--write-policy`, or the default: write-back on a persistent cache (or
/// with the volatile benchmark flag), write-through in memory.
pub(crate) fn write_policy_arg(
    opts: &CacheArgs,
    cache_in_memory: bool,
    volatile_write_back: bool,
) -> Result<WritePolicyKind, AnyError> {
    Ok(match (&opts.write_policy, volatile_write_back) {
        (None, false) if cache_in_memory => WritePolicyKind::WriteThrough,
        (None, _) => WritePolicyKind::WriteBack,
        (Some(name), flag) => {
            let p = WritePolicyKind::from_name(name)?;
            if flag && p != WritePolicyKind::WriteBack {
                return Err(ServeError::ConflictingPolicy(name.clone()).into());
            }
            p
        }
    })
}

/// Journaled write-back's settings; its backing journal holds the whole
/// host journal.
fn journal_config(opts: &CacheArgs) -> Result<JournalConfig, AnyError> {
    let page = opts.page_size;
    let journal_pages = pages_arg("journal-size", &opts.journal_size, page, "")?;
    let points = ConsistencyPoints::from_option(&opts.consistency_points)?;
    Ok(JournalConfig {
        journal_pages,
        commit_pages: pages_arg(
            "commit-size",
            &opts.commit_size,
            page,
            ", or 0 (an eighth of the journal)",
        )?,
        commit_age_ns: duration_ns_arg("commit-age", &opts.commit_age)?,
        points,
        checkpoint: CheckpointMode::BackingJournal {
            pages: journal_pages,
        },
    })
}

fn volume_spec(name: &str, backing: String) -> VolumeSpec {
    VolumeSpec {
        name: name.to_string(),
        backing,
        journal: None,
    }
}

/// The engine's settings from the cache options (no volume of its own policy).
fn engine_config(
    opts: &CacheArgs,
    write_policy: WritePolicyKind,
) -> Result<EngineConfig, AnyError> {
    Ok(EngineConfig {
        page_size_bytes: opts.page_size,
        group_size_bytes: opts.group_size,
        write_policy,
        destage_order: opts.order.clone(),
        destage_rate: opts.rate.clone(),
        admission: opts.admission.clone(),
        sequential_cutoff_bytes: size_arg("sequential-cutoff", &opts.sequential_cutoff)?,
        staleness: StalenessConfig {
            max_dirty_age_ns: duration_ns_arg("max-dirty-age", &opts.max_dirty_age)?,
            idle_after_ns: duration_ns_arg("idle-after", &opts.idle_after)?,
            idle_destages: opts.idle_destages,
        },
        journal: journal_config(opts)?,
        rate: RateConfig {
            low_threshold_pct: opts.low_threshold,
            high_threshold_pct: opts.high_threshold,
            destages_max: opts.destages_max,
            ..RateConfig::default()
        },
        // Format 3 asked for: the engine's log mode (`Cache` keeps an
        // existing cache's format otherwise).
        log: opts.cache_format == Some(3),
        ..EngineConfig::default()
    })
}

/// The exports: `--backing` as `disk` first, then `--export`s, or the demo
/// disk; each with its `--journal`.
fn volume_specs(args: &ServeArgs) -> Result<Vec<VolumeSpec>, AnyError> {
    let mut volumes = export_args(&args.exports)?;
    if let Some(backing) = &args.backing {
        volumes.insert(0, volume_spec("disk", backing.clone()));
    }
    if volumes.is_empty() {
        let file = args.data_dir.join("backing.img");
        volumes.push(volume_spec(
            "disk",
            format!("emulated-hdd:{}", file.display()),
        ));
    }
    journal_args(&args.journals, &mut volumes)?;
    Ok(volumes)
}
