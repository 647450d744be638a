//! The `wcache` binary: one command line for every part of wcache.
//! `wcache sim` runs the simulator: one configuration, or a named experiment.

#[macro_use]
mod output;
mod args;
mod backing_recover;
mod cache_args;
mod check;
mod flush;
mod inspect;
mod limits;
mod logging;
mod mount;
mod ops;
mod replica;
mod serve;
mod sim_checks;
mod sim_config;
mod sim_print;
mod stop;
mod tools;
mod top;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use sim_config::{issuer_mix, journal_config, workload_options};
use std::path::PathBuf;
use std::process::ExitCode;
use wcache_core::config::StalenessConfig;
use wcache_core::policy::admission::ADMISSIONS;
use wcache_core::policy::destage_order::DESTAGE_ORDERS;
use wcache_core::policy::destage_rate::{RateConfig, DESTAGE_RATES};
use wcache_core::policy::replacement::REPLACEMENTS;
use wcache_core::policy::write_policy::WRITE_POLICIES;
use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_models::{build_device, build_device_with, HddParams};
use wcache_sim::experiment::{self, rdc, wow};
use wcache_sim::faults::FaultPlan;
use wcache_sim::workload::{HrrwModel, WorkloadRun, OUTSTANDING_MAX_DEFAULT, WORKLOADS};
use wcache_sim::{RunLimits, Simulation};

#[derive(Parser)]
#[command(
    name = "wcache",
    version,
    about = "A host-side durable write cache for block storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate: a named experiment (wow-random, wow-spc1, wow-latency,
    /// rdc-capacity, rdc-ssd, rdc-redis) or, with no name, one configuration.
    Sim(Box<SimArgs>),
    /// Serve cached volumes over NBD (no arguments: a demo in ./wcache-data).
    Serve(Box<serve::ServeArgs>),
    /// Keep a copy of a primary's cache device on this host, for a
    /// takeover when the primary is lost (docs/replication.md).
    Replica(Box<replica::ReplicaArgs>),
    /// Serve a directory's files through the cache over FUSE, each request
    /// with its caller's process (docs/mount.md).
    Mount(Box<mount::MountArgs>),
    /// Show a cache device: superblock, state, dirty/clean pages per volume.
    Inspect(inspect::InspectArgs),
    /// Verify every checksum of a cache device (non-zero exit if corrupt).
    Check(check::CheckArgs),
    /// Destage every dirty page: online through a running server, or
    /// offline from a cache device no server holds (then mark it clean).
    Flush(flush::FlushArgs),
    /// A running server's state (policies, occupancy, dirty pages); with
    /// no server, what the cache device holds.
    Status(ops::StatusArgs),
    /// A running server's statistics (`--watch SECS` for live rates, `--json`).
    Stats(ops::StatsArgs),
    /// Change a policy of a running server: write-policy, admission,
    /// destage-order, destage-rate (leaving write-back drains first).
    Set(ops::SetArgs),
    /// A live view of a running server: throughput, latency, occupancy,
    /// dirty pages, destage rate, with sparklines (q quits).
    Top(top::TopArgs),
    /// Declare an application consistency point to a running
    /// write-back-journaled server (its open transaction commits).
    ConsistencyPoint(ops::ConsistencyPointArgs),
    /// Make processes critical for a running `wcache mount` (by pid,
    /// command name, cgroup, or the real-time I/O class), or clear that.
    Critical(ops::CriticalArgs),
    /// Stop a running server (as SIGTERM); --flush drains it first,
    /// refusing writes meanwhile.
    Stop(stop::StopArgs),
    /// Replay the journal at the end of a backing left by write-back-journaled
    /// (for a backing whose cache is gone; `wcache serve` does it itself).
    BackingRecover(backing_recover::BackingRecoverArgs),
}

#[derive(Args)]
struct SimArgs {
    /// Experiment to run; omit to run the one configuration given by the flags.
    experiment: Option<String>,
    /// A smaller run of the same shape (for CI).
    #[arg(long)]
    quick: bool,
    /// Directory for the CSV and SVG files.
    #[arg(long, default_value = "out")]
    out: PathBuf,
    /// Seeds per experiment point (1 to 1000).
    #[arg(long, default_value_t = 1, value_parser = limits::seeds)]
    seeds: u64,
    /// Worker threads for sweeps (default: all cores; 1 to 1024).
    #[arg(long, value_parser = limits::threads)]
    threads: Option<usize>,
    /// Check every read against the data model (slow).
    #[arg(long)]
    check: bool,
    /// Inject faults into one run: comma-separated items,
    /// {cache|backing}-{read|write}-eio=P or =@K, eio-lands, torn, lose-cache, lie=N,
    /// spike=P:MS, crashes=M, seed=N (docs/sim-faults.md).
    #[arg(long, value_name = "SPEC")]
    faults: Option<String>,
    /// Crash when the K-th device write is submitted, then recover from the
    /// cache device's records and go on (a persistent engine; implies --check).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    crash_at: Option<u64>,
    /// The cache device's format: 3 runs the engine's log mode (a log of
    /// batches, docs/format-v3.md; a persistent engine), 2 the slot records.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..=3))]
    cache_format: u32,
    #[command(flatten)]
    one: OneRun,
}

/// One configuration (used when no experiment is named).
#[derive(Args)]
struct OneRun {
    /// Backing device model: hdd, raid10, raid5, raid5-md (RAID-5 with a stripe cache), ssd, nvram,
    /// hdd-per-volume (one disk per volume: pglike's data and WAL).
    /// With a named experiment, raid5-md replaces its RAID-5 array.
    #[arg(long, default_value = "raid5")]
    backend: String,
    /// Cache device model.
    #[arg(long, default_value = "nvram")]
    cache_device: String,
    #[arg(long, default_value_t = 4096, value_parser = limits::cache_pages)]
    cache_pages: u64,
    #[arg(long, default_value_t = 4096)]
    page_size: u64,
    /// Write group size in bytes (default: 256 KiB stripe for raid5 and raid5-md, 64 KiB otherwise).
    #[arg(long)]
    group_size: Option<u64>,
    /// Destage order: lrw, cscan, wow.
    #[arg(long, default_value = "wow")]
    order: String,
    /// Destage rate: linear, adaptive (a named experiment uses it for every point).
    #[arg(long, default_value = "adaptive")]
    rate: String,
    #[arg(long, default_value_t = 20, value_parser = limits::destages)]
    max_queue: u32,
    #[arg(long, default_value_t = 80.0)]
    low_threshold_pct: f64,
    #[arg(long, default_value_t = 90.0)]
    high_threshold_pct: f64,
    /// write-back, write-through, write-back-ordered, write-back-journaled, write-around.
    #[arg(long, default_value = "write-back")]
    write_policy: String,
    /// Journaled write-back: page versions the host journal holds before
    /// writes wait (0: the whole cache).
    #[arg(long, default_value_t = 0, value_parser = limits::journal_pages)]
    journal_pages: u64,
    /// Journaled write-back: the open transaction commits at this many
    /// pages (0: an eighth of the journal)...
    #[arg(long, default_value_t = 0, value_parser = limits::journal_pages)]
    commit_pages: u64,
    /// ...or this long after its first write (virtual time; 0: no age).
    #[arg(long, default_value = "1s", value_parser = args::parse_duration_ns)]
    commit_age: u64,
    /// Journaled write-back commits by size (and age), or only at
    /// consistency points: flush (every FLUSH) or hint.
    #[arg(long, default_value = "size")]
    consistency_points: String,
    /// Declare an application consistency point every N answered writes
    /// (write-back-journaled; 0: never). With --crash-at, every crash
    /// checks that the backing alone holds one declared point's state.
    #[arg(long, default_value_t = 0)]
    consistency_point_every: u64,
    /// How a transaction reaches the backing atomically: backing-journal
    /// (a journal region as large as the host journal, after the volumes)
    /// or nvram (the paper's storage-side NVRAM journal: no extra I/O).
    #[arg(long, default_value = "backing-journal")]
    checkpoint: String,
    /// Clean-page replacement: lru, clock, arc.
    #[arg(long, default_value = "lru")]
    replacement: String,
    /// Admission: all (every write), sync (sync writes), volume/wal (writes
    /// to critical volumes), cp (sync writes of critical issuers), cp-pi.
    #[arg(long, default_value = "all")]
    admission: String,
    /// Writes continuing a sequential stream of this many bytes bypass the
    /// cache (e.g. 4M; 0: no cutoff).
    #[arg(long, default_value = "0", value_parser = args::parse_cutoff)]
    sequential_cutoff: u64,
    /// Maximum dirty age in virtual time: a page dirty this long is
    /// destaged whatever the thresholds say (e.g. 30s; 0: no bound).
    #[arg(long, default_value = "0", value_parser = args::parse_duration_ns)]
    max_dirty_age: u64,
    /// With no request for this long (virtual time) the cache is idle...
    #[arg(long, default_value = "1s", value_parser = args::parse_duration_ns)]
    idle_after: u64,
    /// ...and keeps this many destages outstanding until a request comes (0: none).
    #[arg(long, default_value_t = 0)]
    idle_destages: u32,
    /// Keep destaged pages and read misses as clean cached pages.
    #[arg(long)]
    read_cache: bool,
    /// Workload: random, spc1, trace, fileserver, pglike, redislike
    /// (docs/workloads.md).
    #[arg(long, default_value = "random")]
    workload: String,
    /// Files at the start of the fileserver workload (its table holds twice
    /// as many; 48-152 KiB each, so the volume is about 300 KiB per file).
    #[arg(long, default_value_t = 2000, value_parser = limits::files)]
    files: u64,
    /// pglike, redislike: mean CPU time per transaction or command, in
    /// microseconds (default: the workload's, docs/workloads.md).
    #[arg(long)]
    cpu_us: Option<f64>,
    /// Footprint in bytes, with an optional binary unit (K, M, G, T; e.g.
    /// 3635200K), rounded down to whole 4 KiB pages (default: the whole
    /// backing device).
    #[arg(long, value_parser = args::parse_footprint)]
    footprint: Option<u64>,
    /// Command queue depth of each modelled disk, reordered SATF (hdd and the
    /// arrays' members) [default: 32]. 1 serves in arrival order.
    #[arg(long)]
    disk_queue_depth: Option<usize>,
    /// Closed loop with this many requests outstanding (random, spc1, trace
    /// replay; default 16); pglike backends (24), redislike clients (40).
    /// With wow-spc1 it replaces the sweep's 64.
    #[arg(long, value_parser = limits::outstanding)]
    outstanding: Option<u64>,
    /// Open loop at this target IOPS instead of closed loop (random, spc1).
    #[arg(long, value_parser = limits::iops)]
    target_iops: Option<f64>,
    /// Fraction of reads (random).
    #[arg(long, default_value_t = 0.0)]
    read_fraction: f64,
    /// Requests come from this many issuers, 1..=N, uniformly (random; 0:
    /// untagged). For request-oriented admission (cp, sync).
    #[arg(long, default_value_t = 0)]
    issuers: u32,
    /// Volumes (by number) whose writes the volume admission policy admits,
    /// comma-separated (e.g. 0).
    #[arg(long, value_delimiter = ',')]
    critical_volumes: Vec<u16>,
    /// Issuers 1..=K are hinted critical (random, with --issuers).
    #[arg(long, default_value_t = 0, value_parser = limits::critical_issuers)]
    critical_issuers: u32,
    /// Fraction of writes tagged sync (random, with --issuers).
    #[arg(long, default_value_t = 0.0)]
    sync_fraction: f64,
    /// HRRW model of the spc1 workload: generator (the public SPC-1
    /// generator's walk), reference (the reference doc's description),
    /// shared-grid.
    #[arg(long, default_value = "generator")]
    hrrw: String,
    /// BSUs of the spc1 workload, one HRRW walker each in the generator models
    /// (default: target IOPS / 50 open loop, 60 closed loop).
    #[arg(long)]
    bsus: Option<u64>,
    /// Trace file (workload trace).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Trace format: msr, blkparse, libcachesim, tencent.
    #[arg(long, default_value = "msr")]
    trace_format: String,
    /// Replay the trace at its recorded times (scaled by this speed) instead of as fast as possible.
    #[arg(long, value_parser = limits::speed)]
    trace_speed: Option<f64>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Requests to complete before measuring.
    #[arg(long, default_value_t = 20_000)]
    warmup: u64,
    /// Requests to measure (at least 1).
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// Write the cache's state over the run (dirty pages, destages in
    /// flight, stalls, thresholds), one CSV row per --timeline-ms of virtual time.
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// Virtual milliseconds between --timeline rows.
    #[arg(long, default_value_t = 100, value_parser = limits::timeline_ms)]
    timeline_ms: u64,
}

/// The policy options' long help (`--help`) lists each family's policies
/// (and the workloads) from its registry, the same table that parses the names.
fn with_policy_help(cmd: clap::Command) -> clap::Command {
    fn listed(c: clap::Command, ids: &[&'static str]) -> clap::Command {
        ids.iter().fold(c, |c, &id| {
            let table = match id {
                "order" => DESTAGE_ORDERS.help(),
                "rate" => DESTAGE_RATES.help(),
                "write_policy" => WRITE_POLICIES.help(),
                "replacement" => REPLACEMENTS.help(),
                "workload" => WORKLOADS.help(),
                _ => ADMISSIONS.help(),
            };
            c.mut_arg(id, |a| {
                let short = a.get_help().map(|h| h.to_string()).unwrap_or_default();
                a.long_help(format!("{short}\n\n{}", table.trim_end()))
            })
        })
    }
    cmd.mut_subcommand("sim", |c| {
        listed(
            c,
            &[
                "order",
                "rate",
                "write_policy",
                "replacement",
                "admission",
                "workload",
            ],
        )
    })
    .mut_subcommand("serve", |c| {
        listed(c, &["order", "rate", "write_policy", "admission"])
    })
}

/// The ids of the options of `subcommand` given on the command line (not defaults).
fn given_on_command_line(matches: &clap::ArgMatches, subcommand: &str) -> Vec<String> {
    let Some(m) = matches.subcommand_matches(subcommand) else {
        return Vec::new();
    };
    m.ids()
        .filter(|id| m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| id.to_string())
        .collect()
}

fn main() -> ExitCode {
    // A tool whose reader left (`wcache status | head -1`) ends quietly at
    // its next write, as other Unix tools do, rather than panic on EPIPE;
    // `serve` ignores SIGPIPE again and never panics on output.
    // SAFETY: signal(2) restoring a default disposition, before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let matches = limits::negative_values(with_policy_help(Cli::command())).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    logging::init();
    let result = match cli.command {
        Command::Sim(args) => sim(*args),
        Command::Serve(args) => serve::serve(*args, &given_on_command_line(&matches, "serve")),
        Command::Mount(args) => mount::mount(*args, &given_on_command_line(&matches, "mount")),
        Command::Replica(args) => replica::replica(*args),
        Command::Inspect(args) => inspect::inspect(args),
        Command::Critical(args) => ops::critical(args),
        Command::Check(args) => check::check(args),
        Command::Flush(args) => flush::flush(args),
        Command::Status(args) => ops::status(args),
        Command::Stats(args) => ops::stats(args),
        Command::Set(args) => ops::set(args),
        Command::Top(args) => top::top(args),
        Command::ConsistencyPoint(args) => ops::consistency_point(args),
        Command::BackingRecover(args) => backing_recover::backing_recover(args),
        Command::Stop(args) => stop::stop(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "wcache: error: {e}");
            ExitCode::FAILURE
        }
    }
}

type AnyError = Box<dyn std::error::Error>;

fn sim(args: SimArgs) -> Result<(), AnyError> {
    if let Some(depth) = args.one.disk_queue_depth {
        if !(1..=256).contains(&depth) {
            return Err(format!("--disk-queue-depth {depth}: must be 1 to 256").into());
        }
    }
    match &args.experiment {
        Some(_) if args.faults.is_some() || args.crash_at.is_some() => {
            Err("--faults and --crash-at apply to one run, not to a named experiment".into())
        }
        Some(_) if args.one.timeline.is_some() => {
            Err("--timeline records one run; it does not apply to a named experiment".into())
        }
        Some(name) if name != "wow-spc1" && args.one.outstanding.is_some() => {
            Err(format!("--outstanding applies to one run or to wow-spc1, not to {name}").into())
        }
        Some(name) if !["raid5", "raid5-md"].contains(&args.one.backend.as_str()) => {
            Err(format!(
                "--backend {:?} with {name}: a named experiment runs its own arrays; only raid5-md may replace its RAID-5",
                args.one.backend
            )
            .into())
        }
        Some(name) => sim_experiment(name, &args),
        None => sim_one(&args),
    }
}

fn sim_experiment(name: &str, args: &SimArgs) -> Result<(), AnyError> {
    if name.starts_with("rdc-") {
        return sim_rdc(name, args);
    }
    let rate = DESTAGE_RATES.find(&args.one.rate)?.name;
    let opts = wow::Options {
        quick: args.quick,
        seeds: args.seeds,
        check_data: args.check,
        rate,
        spc1_outstanding: args.one.outstanding.unwrap_or(wow::SPC1_OUTSTANDING),
        raid5: if args.one.backend == "raid5-md" {
            "raid5-md"
        } else {
            "raid5"
        },
        disk_queue_depth: args
            .one
            .disk_queue_depth
            .unwrap_or(HddParams::ultrastar_10k().queue_depth),
    };
    let points = wow::points(name, &opts)?;
    let (rows, threads, seconds) = run_with_progress(name, points, args)?;
    let csv_path = args.out.join(format!("{name}.csv"));
    std::fs::write(&csv_path, experiment::to_csv(&rows))
        .map_err(|e| format!("cannot write {}: {e}", csv_path.display()))?;
    for (file, svg) in wow::charts(name, &rows) {
        let path = args.out.join(file);
        std::fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    println!(
        "{}",
        experiment::CSV_HEADER
            .split(',')
            .take(12)
            .collect::<Vec<_>>()
            .join(",")
    );
    for r in &rows {
        println!(
            "{}",
            experiment::csv_row(r)
                .split(',')
                .take(12)
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    println!(
        "wrote {} ({} runs, {seconds:.1} s on {threads} threads)",
        csv_path.display(),
        rows.len(),
    );
    Ok(())
}

/// The admission paper's experiments: their own CSV columns and charts.
fn sim_rdc(name: &str, args: &SimArgs) -> Result<(), AnyError> {
    let opts = rdc::Options {
        quick: args.quick,
        seeds: args.seeds,
        check_data: args.check,
        disk_queue_depth: args
            .one
            .disk_queue_depth
            .unwrap_or(HddParams::ultrastar_10k().queue_depth),
    };
    let points = rdc::points(name, &opts)?;
    if !rdc::policies_available().contains(&"cp-pi-ioi") {
        eprintln!("note: this engine has no cp-pi-ioi admission policy; {name} runs without it");
    }
    let (rows, threads, seconds) = run_with_progress(name, points, args)?;
    let csv_path = args.out.join(format!("{name}.csv"));
    let csv = rdc::to_csv(&rows);
    std::fs::write(&csv_path, &csv)
        .map_err(|e| format!("cannot write {}: {e}", csv_path.display()))?;
    for (file, svg) in rdc::charts(name, &rows) {
        let path = args.out.join(file);
        std::fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    for line in csv.lines() {
        println!("{}", line.split(',').take(20).collect::<Vec<_>>().join(","));
    }
    println!(
        "wrote {} ({} runs, {seconds:.1} s on {threads} threads)",
        csv_path.display(),
        rows.len(),
    );
    Ok(())
}

/// Run an experiment's points with a progress bar; (rows, threads, seconds).
fn run_with_progress(
    name: &str,
    points: Vec<experiment::Point>,
    args: &SimArgs,
) -> Result<(Vec<experiment::Row>, usize, f64), AnyError> {
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let bar = ProgressBar::new(points.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {pos}/{len} points, {elapsed_precise} (eta {eta})",
        )?
        .progress_chars("=> "),
    );
    bar.set_message(name.to_string());
    let started = std::time::Instant::now();
    let rows = experiment::run_points(points, threads, &|done, _| bar.set_position(done as u64))?;
    bar.finish();
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    Ok((rows, threads, started.elapsed().as_secs_f64()))
}

fn sim_one(args: &SimArgs) -> Result<(), AnyError> {
    let o = &args.one;
    let hrrw = HrrwModel::from_name(&o.hrrw).ok_or_else(|| {
        let valid: Vec<&str> = HrrwModel::ALL.iter().map(|m| m.name()).collect();
        format!(
            "unknown --hrrw value {:?}; valid: {}",
            o.hrrw,
            valid.join(", ")
        )
    })?;
    let mut disk = HddParams::ultrastar_10k();
    if let Some(depth) = o.disk_queue_depth {
        disk = disk.with_queue_depth(depth);
    }
    let per_volume = o.backend == experiment::BACKING_PER_VOLUME;
    let backing = if per_volume {
        None
    } else {
        Some(build_device_with(&o.backend, &disk)?)
    };
    let cache = build_device(&o.cache_device)?;
    let group = o.group_size.unwrap_or(if o.backend.starts_with("raid5") {
        256 * 1024
    } else {
        64 * 1024
    });
    sim_checks::cache_pages(o, group)?;
    let write_policy = WritePolicyKind::from_name(&o.write_policy)?;
    let engine = EngineConfig {
        page_size_bytes: o.page_size,
        group_size_bytes: group,
        cache_slots: o.cache_pages,
        write_policy,
        destage_order: o.order.clone(),
        destage_rate: o.rate.clone(),
        rate: RateConfig {
            destages_max: o.max_queue,
            low_threshold_pct: o.low_threshold_pct,
            high_threshold_pct: o.high_threshold_pct,
            ..RateConfig::default()
        },
        replacement: o.replacement.clone(),
        admission: o.admission.clone(),
        critical_volumes: o.critical_volumes.clone(),
        sequential_cutoff_bytes: o.sequential_cutoff,
        staleness: StalenessConfig {
            max_dirty_age_ns: o.max_dirty_age,
            idle_after_ns: o.idle_after,
            idle_destages: o.idle_destages,
        },
        journal: journal_config(o)?,
        read_insert: o.read_cache,
        keep_clean: o.read_cache,
        requests_max: OUTSTANDING_MAX_DEFAULT as u32 + 64,
        persistent: args.crash_at.is_some() || args.cache_format == 3,
        log: args.cache_format == 3,
        // The simulator keeps buffers past answers (`Simulation::new`).
        buffers_outlive_answers: true,
        ..EngineConfig::default()
    };
    let faults = match &args.faults {
        Some(spec) => FaultPlan::parse(spec).map_err(|e| format!("--faults: {e}"))?,
        None => FaultPlan::default(),
    };
    let capacity_bytes = backing.as_ref().map(|b| b.capacity_bytes());
    let run = WorkloadRun::new(&o.workload, &workload_options(o, hrrw, capacity_bytes))?;
    sim_checks::footprint_fits(o, capacity_bytes)?;
    let workload = run.spec.build(o.seed)?;
    sim_checks::critical_volumes(o, workload.volume_sizes_bytes().len())?;
    let backing = match backing {
        Some(b) => b,
        None => experiment::backing_per_volume(&disk, &workload.volume_sizes_bytes()),
    };
    let footprint = run.footprint_bytes(&workload.volume_sizes_bytes());
    let mut sim = Simulation::new(engine, cache, backing, workload, args.check)?;
    for issuer in issuer_mix(o).critical() {
        sim.set_critical_issuer(issuer)?;
    }
    if args.faults.is_some() || args.crash_at.is_some() {
        sim = sim.with_faults(faults, o.seed, args.crash_at)?;
    }
    if o.consistency_point_every > 0 {
        if o.consistency_points == "size" {
            return Err("--consistency-point-every needs --consistency-points hint or flush (size and age would commit between the points)".into());
        }
        sim = sim.with_points(o.consistency_point_every);
    }
    let limits = RunLimits {
        warmup_requests: o.warmup,
        measure_requests: o.requests,
        check_data: args.check,
        timeline_ns: if o.timeline.is_some() {
            o.timeline_ms * 1_000_000
        } else {
            0
        },
        ..RunLimits::default()
    };
    let r = sim.run(limits)?;
    if let Some(path) = &o.timeline {
        sim_print::write_timeline(path, &r.timeline)
            .map_err(|e| format!("--timeline {}: {e}", path.display()))?;
    }
    println!(
        "workload            {} on {} ({} KiB footprint)",
        run.label,
        o.backend,
        footprint / 1024
    );
    println!(
        "cache               {} pages of {} B, group {} B, order {}, rate {}",
        o.cache_pages, o.page_size, group, o.order, o.rate
    );
    println!(
        "measured            {} requests over {:.2} s virtual (after {:.2} s warm-up)",
        r.requests,
        r.window_ns as f64 / 1e9,
        r.warmup_ns as f64 / 1e9
    );
    println!("iops                {:.1}", r.iops);
    println!(
        "response_ms_mean    {:.3} (reads {:.3}, writes {:.3})",
        r.response_ms_mean, r.read_response_ms_mean, r.write_response_ms_mean
    );
    println!(
        "write_hit_ratio     {:.4} ({} of the {} hit pages were being destaged; {} write-group hits, {} of them sequential, in {} writes)",
        r.stats.write_hit_ratio(),
        r.stats.write_page_hits_destaging,
        r.stats.write_page_hits,
        r.stats.write_group_hits,
        r.stats.write_group_hits_sequential,
        r.stats.writes
    );
    println!(
        "destages            {} ({} pages, {} groups picked, {} skipped), mean distance {:.0} sectors",
        r.stats.destages,
        r.stats.destaged_pages,
        r.stats.destage_picks,
        r.stats.destage_skips,
        r.stats.destage_distance_sectors_mean()
    );
    println!("stalls              {}", r.stats.stalls);
    println!("bypasses            {}", r.stats.write_bypasses);
    sim_print::print_admission(o, &r);
    sim_print::print_app(o, &r);
    if r.order_checks > 0 {
        println!(
            "point-in-time       the backing alone was consistent at all {} crashes checked (every crash under write-back-ordered; with pit, those that lost the cache)",
            r.order_checks
        );
    }
    println!(
        "staleness           oldest dirty page at most {:.0} ms old over the window ({} groups destaged at the maximum dirty age)",
        r.dirty_age_ms_max, r.stats.expired_groups
    );
    let m = &r.backing_members;
    if m.read_service_ns + m.write_service_ns > 0 {
        let [read, read_position, write, write_position] = m.mechanism_ms_each();
        println!(
            "disk mechanism      reads {} at {read:.2} ms each ({read_position:.2} positioning), writes {} at {write:.2} ms each ({write_position:.2} positioning), summed over members",
            m.reads, m.writes,
        );
    }
    if r.requests == 0 {
        println!(
            "note                no request was measured: the workload ended within the warm-up of {} requests (see --warmup)",
            o.warmup
        );
    }
    if r.rejected_requests > 0 {
        println!(
            "rejected            {} requests, not run (first: {})",
            r.rejected_requests,
            r.first_rejection.as_deref().unwrap_or("?")
        );
    }
    println!(
        "occupancy mean      {:.0} pages, thresholds {:?}",
        r.occupancy_pages_mean, r.thresholds_pages
    );
    if args.faults.is_some() || args.crash_at.is_some() {
        let f = &r.faults;
        println!(
            "faults              {} EIO, {} latency spikes, {} crashes ({} torn writes, {} acknowledged cache writes lost by the device)",
            f.eio, f.spikes, f.crashes, f.torn_writes, f.lost_writes
        );
    }
    if args.check || args.crash_at.is_some() {
        println!(
            "data checked        {} sectors, all correct",
            r.sectors_checked
        );
        println!(
            "backing checked     {} sectors after the final drain, all correct",
            r.backing_sectors_checked
        );
    }
    Ok(())
}
