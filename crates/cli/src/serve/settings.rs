//! The lifecycle's configuration from `wcache serve`'s options: parsing
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
    let cache_spec = args
        .cache
        .clone()
        .unwrap_or_else(|| args.data_dir.join("cache.img").display().to_string());
    let write_policy = write_policy_arg(args, cache_spec == "mem")?;
    let (cache_size_bytes, backing_size_bytes) = size_args(args)?;
    let (cache_sync, measure) = cache_sync_arg(&args.cache_sync, args.persist_on_flush)?;
    let volumes = volume_specs(args)?;
    let engine = engine_config(args, write_policy, &volumes)?;
    let cache = CacheDeviceSpec::parse(
        &cache_spec,
        (cache_size_bytes, CACHE_BYTES_DEFAULT),
        cache_sync,
        args.direct,
    );
    Ok(CacheConfig {
        cache: if measure {
            cache.measuring_sync()
        } else {
            cache
        },
        volumes,
        backing_sync: sync_arg("backing-sync", &args.backing_sync)?,
        backing_create_size_bytes: Some(backing_size_bytes),
        engine,
        driver: DriverConfig {
            io_threads: args.io_threads,
            persist_on_flush: args.persist_on_flush,
            flush_interval: Some(Duration::from_secs_f64(args.flush_interval))
                .filter(|d| !d.is_zero()),
            io_uring: !args.no_io_uring,
        },
        block_size_bytes: args.block_size,
        force: args.force,
        format: match args.cache_format {
            Some(2) => FormatAsked::Records,
            _ => FormatAsked::FoundNewLog,
        },
        volatile_write_back: args.volatile_write_back_for_benchmarks,
        backing_timeout: Some(Duration::from_nanos(duration_ns_arg(
            "backing-timeout",
            &args.backing_timeout,
        )?)),
    })
}

/// `--cache-size` (if given) and `--backing-size`: a cache of at least one
/// write group and at most the engine's slots, a backing of at least one
/// block and at most what the engine addresses. Sizes are checked against
/// a valid page and group only (the engine reports a bad one).
fn size_args(args: &ServeArgs) -> Result<(Option<u64>, u64), ArgError> {
    let cache = args
        .cache_size
        .as_deref()
        .map(|text| size_arg("cache-size", text).map(|bytes| (text, bytes)))
        .transpose()?;
    let Ok(geometry) = Geometry::new(args.page_size, args.group_size) else {
        let backing = size_arg("backing-size", &args.backing_size)?;
        return Ok((cache.map(|(_, bytes)| bytes), backing));
    };
    if let Some((text, bytes)) = cache {
        let slots = Layout::for_device(bytes, args.page_size).map_or(0, |l| l.slot_count);
        let group_pages = u64::from(geometry.group_pages());
        if !(group_pages..=CACHE_SLOTS_MAX).contains(&slots) {
            return Err(ArgError::CacheSize {
                text: text.to_string(),
                slots,
                group_pages,
                page_bytes: args.page_size,
            });
        }
    }
    let range = (u64::from(args.block_size), geometry.volume_size_bytes_max());
    let backing = size_within_arg("backing-size", &args.backing_size, range)?;
    Ok((cache.map(|(_, bytes)| bytes), backing))
}

/// `--write-policy`, or the default: write-back on a persistent cache (or
/// with the volatile benchmark flag), write-through in memory.
fn write_policy_arg(args: &ServeArgs, cache_in_memory: bool) -> Result<WritePolicyKind, AnyError> {
    Ok(
        match (&args.write_policy, args.volatile_write_back_for_benchmarks) {
            (None, false) if cache_in_memory => WritePolicyKind::WriteThrough,
            (None, _) => WritePolicyKind::WriteBack,
            (Some(name), flag) => {
                let p = WritePolicyKind::from_name(name)?;
                if flag && p != WritePolicyKind::WriteBack {
                    return Err(ServeError::ConflictingPolicy(name.clone()).into());
                }
                p
            }
        },
    )
}

/// Journaled write-back's settings; its backing journal holds the whole
/// host journal.
fn journal_config(args: &ServeArgs) -> Result<JournalConfig, AnyError> {
    let page = args.page_size;
    let journal_pages = pages_arg("journal-size", &args.journal_size, page, "")?;
    let points = ConsistencyPoints::from_option(&args.consistency_points)?;
    Ok(JournalConfig {
        journal_pages,
        commit_pages: pages_arg(
            "commit-size",
            &args.commit_size,
            page,
            ", or 0 (an eighth of the journal)",
        )?,
        commit_age_ns: duration_ns_arg("commit-age", &args.commit_age)?,
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

/// The engine's settings from the arguments.
fn engine_config(
    args: &ServeArgs,
    write_policy: WritePolicyKind,
    volumes: &[VolumeSpec],
) -> Result<EngineConfig, AnyError> {
    let (critical_volumes, volume_admissions) = export_policies(args, volumes)?;
    Ok(EngineConfig {
        page_size_bytes: args.page_size,
        group_size_bytes: args.group_size,
        write_policy,
        destage_order: args.order.clone(),
        destage_rate: args.rate.clone(),
        admission: args.admission.clone(),
        critical_volumes,
        volume_admissions,
        sequential_cutoff_bytes: size_arg("sequential-cutoff", &args.sequential_cutoff)?,
        staleness: StalenessConfig {
            max_dirty_age_ns: duration_ns_arg("max-dirty-age", &args.max_dirty_age)?,
            idle_after_ns: duration_ns_arg("idle-after", &args.idle_after)?,
            idle_destages: args.idle_destages,
        },
        journal: journal_config(args)?,
        rate: RateConfig {
            low_threshold_pct: args.low_threshold,
            high_threshold_pct: args.high_threshold,
            destages_max: args.destages_max,
            ..RateConfig::default()
        },
        // Format 3 asked for: the engine's log mode (`Cache` keeps an
        // existing cache's format otherwise).
        log: args.cache_format == Some(3),
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
