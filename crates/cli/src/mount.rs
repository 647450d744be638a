//! `wcache mount BACKING_DIR MOUNTPOINT --cache FILE`: the filesystem front
//! end (`wcache_fuse`, `docs/mount.md`) on the service lifecycle every front
//! end uses (`wcache_io::service`). Wiring and output only: the options to
//! a `MountConfig`, the banner, the stop.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use wcache_fuse::{CriticalRules, MountConfig};
use wcache_io::service::{self, OpsListeners, Service};

use crate::cache_args::CacheArgs;
use crate::limits;
use crate::serve::settings::{base_config, write_policy_arg};
use crate::tools::AnyError;

/// Serve a directory's files through the cache over FUSE: metadata passes
/// through, file data is cached, each request with its caller's process.
#[derive(Args, Debug)]
pub struct MountArgs {
    /// The directory whose files are served (its files' data is cached).
    backing_dir: PathBuf,
    /// An empty directory to mount on.
    mountpoint: PathBuf,
    /// FUSE request threads (requests in service at once; 1 to 1024).
    #[arg(long, default_value_t = 8, value_parser = limits::threads)]
    threads: usize,
    /// Time the backing files' data I/O on this device model in real time
    /// (hdd, raid10, raid5, raid5-md, ssd, nvram): an emulated slow disk
    /// under the directory, for experiments on one machine.
    #[arg(long, value_name = "MODEL")]
    emulate: Option<String>,
    /// With --emulate: files under this directory (relative to
    /// BACKING_DIR; it may not exist yet) lie on an emulated disk of their
    /// own, as a database's log on a disk apart from its tables (repeat).
    #[arg(long, value_name = "DIR", requires = "emulate")]
    emulate_own_disk: Vec<PathBuf>,
    /// Files under this directory (relative to BACKING_DIR; it may not
    /// exist yet) go to a second volume of the cache, `files-critical`,
    /// marked critical: with `--admission volume` only their writes are
    /// cached, as the paper's WAL policy (repeat; not under
    /// write-back-journaled).
    #[arg(long = "critical-dir", value_name = "DIR")]
    critical_dirs: Vec<PathBuf>,
    /// Processes with this command name are critical (`*` at the end
    /// matches a prefix; repeat). Also at run time: `wcache critical`.
    #[arg(long = "critical-command", value_name = "NAME")]
    critical_commands: Vec<String>,
    /// Processes in this cgroup (a v2 path, its subtree too) are critical (repeat).
    #[arg(long = "critical-cgroup", value_name = "PATH")]
    critical_cgroups: Vec<String>,
    /// Processes in the real-time I/O class (`ionice -c1`) are critical.
    #[arg(long)]
    realtime_io_critical: bool,
    /// Automatic identification: a process that serves clients (holds a
    /// connected socket) and waited on an fsync of the mount in the last
    /// 10 s is critical (docs/mount.md).
    #[arg(long)]
    auto_critical: bool,
    /// write-back-journaled (required there): the files' backing journal,
    /// a file of its own (created if missing; keep it on the backing's storage).
    #[arg(long, value_name = "PATH")]
    journal: Option<String>,
    /// Writes held in memory until an fsync or writeback, at most this much
    /// (a writer waits above it; half of it starts writeback), as a
    /// kernel's page cache holds them: lost if the mount's process dies
    /// first, as a page cache is with its kernel. 0: none held, every
    /// write(2) goes to the cache at once, sync, as its caller's.
    #[arg(long, default_value = "256M", value_parser = limits::dirty_max)]
    dirty_max: u64,
    /// Held writes this many seconds old are written back.
    #[arg(long, default_value_t = 30.0, value_parser = limits::dirty_expire)]
    dirty_expire: f64,
    #[command(flatten)]
    cache_opts: CacheArgs,
}

/// The mount's write group (destage unit) unless `--group-size` is given:
/// a file's writeback comes in extents of up to 1 MiB, and a sequential
/// file (a log) destaged 1 MiB at a time costs a disk far fewer seeks than
/// 64 KiB at a time (Redis at a 32 MiB cache: 2.04× the SETs/s under
/// `cp-pi-ioi`, `docs/experiments/rdc-real.md`).
pub const GROUP_BYTES_DEFAULT: u64 = 1 << 20;

/// `given`: the options given on the command line (clap ids).
pub fn mount(mut args: MountArgs, given: &[String]) -> Result<(), AnyError> {
    let prepared = Service::prepare();
    if !given.iter().any(|g| g == "group_size") {
        args.cache_opts.group_size = GROUP_BYTES_DEFAULT;
    }
    let opts = &args.cache_opts;
    let Some(cache_spec) = opts.cache.clone() else {
        return Err(
            "wcache mount needs --cache FILE (the cache device: a file or block device)".into(),
        );
    };
    let write_policy = write_policy_arg(opts, cache_spec == "mem", false)?;
    let mut config = base_config(opts, &cache_spec, write_policy)?;
    // As the mount will set it (wcache_fuse::start), so that every setting
    // is checked before any file is touched.
    let (dir, journal) = (&args.backing_dir, args.journal.clone());
    let critical = !args.critical_dirs.is_empty();
    wcache_fuse::volumes::configure(&mut config, dir, journal, critical)?;
    config.check()?;
    let control = opts.control.clone().unwrap_or_else(|| {
        let cache = PathBuf::from(&cache_spec);
        cache.with_extension("ctl")
    });
    let ops = OpsListeners::bind(&control, opts.metrics.as_deref())?;
    let rules = CriticalRules {
        commands: args.critical_commands.clone(),
        cgroups: args.critical_cgroups.clone(),
        realtime_io: args.realtime_io_critical,
        auto: args.auto_critical,
    };
    let started = wcache_fuse::start(MountConfig {
        backing_dir: args.backing_dir.clone(),
        mountpoint: args.mountpoint.clone(),
        cache: config.clone(),
        journal: args.journal.clone(),
        rules,
        threads: args.threads,
        emulate: args.emulate.clone(),
        emulate_own_disk: args.emulate_own_disk.clone(),
        critical_dirs: args.critical_dirs.clone(),
        dirty: wcache_fuse::DirtyLimits {
            max_bytes: args.dirty_max,
            expire: Duration::from_secs_f64(args.dirty_expire),
        },
    });
    let (cache, front) = match started {
        Ok(started) => started,
        Err(e) => {
            ops.discard();
            return Err(e.into());
        }
    };
    for line in service::open_report(&cache, &config) {
        say!("{line}");
    }
    let mut service = prepared.start(cache, &front, ops)?;
    print_banner(&args, service.cache());
    for line in service.endpoint_lines() {
        say!("{line}");
    }
    service::notify_ready("mounted");
    service.wait_for_stop();
    let grace = Duration::from_secs_f64(opts.stop_timeout);
    service.stop(Box::new(front), grace)?;
    Ok(())
}

fn print_banner(args: &MountArgs, cache: &wcache_io::Cache) {
    let engine = cache.engine_config();
    say!(
        "wcache: mounted {} on {}, write policy {}, destage order {}, admission {}",
        args.backing_dir.display(),
        args.mountpoint.display(),
        engine.write_policy.name(),
        engine.destage_order,
        engine.admission,
    );
    say!(
        "  staleness: {}",
        service::staleness_text(&engine.staleness)
    );
    for line in service::cache_device_lines(cache) {
        say!("{line}");
    }
    if let Some(model) = &args.emulate {
        say!("  backing files' data I/O timed on an emulated {model}");
        for dir in &args.emulate_own_disk {
            say!("  {}: on an emulated {model} of its own", dir.display());
        }
    }
    for dir in &args.critical_dirs {
        say!(
            "  {}: files under it in the critical volume ({})",
            dir.display(),
            wcache_fuse::volumes::CRITICAL_VOLUME_NAME
        );
    }
    if args.dirty_max > 0 {
        say!(
            "  writes held in memory until fsync or writeback: up to {} MiB, {} s",
            args.dirty_max >> 20,
            args.dirty_expire
        );
    } else {
        say!("  no write held: every write goes to the cache at once");
    }
    say!("Unmount with Ctrl-C or SIGTERM (or `wcache stop --control ...`).");
}
