//! The workload registry: each workload's name, help, the options of one run
//! it takes and refuses, and how they become its `WorkloadSpec`, declared
//! once in `WORKLOADS` (the policies' `Registry`), so that the CLI is wiring
//! only and a new workload is one entry here. It never builds or runs a
//! workload (`WorkloadSpec::build` does).

use std::path::PathBuf;

use wcache_core::policy::registry::{Entry, Registry, UnknownPolicy};

use super::{
    FileServerConfig, HrrwModel, IssuerMix, Loop, PgLikeConfig, RandomConfig, RedisLikeConfig,
    Replay, Spc1Config, TraceConfig, TraceError, TraceFormat, WorkloadSpec, BLOCK_BYTES,
    OUTSTANDING_MAX_DEFAULT,
};
use crate::experiment::rdc::{PG_BACKENDS, REDIS_CLIENTS};

/// Requests a closed loop keeps outstanding when a run names no number.
pub const OUTSTANDING_DEFAULT: u64 = 16;

/// What one run says about its workload, a field per option of `wcache sim`
/// (named as the option); each workload takes the fields it uses and
/// refuses, by name, the ones that cannot apply to it.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadOptions {
    /// `--footprint` (None: the whole backing).
    pub footprint_bytes: Option<u64>,
    /// The backing's bytes when one device holds every volume (None: a
    /// device per volume, sized to the workload's volumes).
    pub backing_bytes: Option<u64>,
    /// Closed loop: requests outstanding, or an application's clients.
    pub outstanding: Option<u64>,
    /// Open loop at this rate instead.
    pub target_iops: Option<f64>,
    pub read_fraction: f64,
    pub issuers: IssuerMix,
    pub hrrw: HrrwModel,
    pub bsus: Option<u64>,
    pub trace: Option<PathBuf>,
    pub trace_format: String,
    /// Replay a trace at its recorded times, scaled by this speed.
    pub trace_speed: Option<f64>,
    /// Files at the start of the file server.
    pub files: u64,
    /// An application's mean CPU time per transaction or command.
    pub cpu_us: Option<f64>,
}

impl WorkloadOptions {
    /// The footprint of a workload that does not lay out its own volumes:
    /// `footprint_bytes` or the whole backing, in whole blocks.
    pub fn footprint_bytes(&self) -> u64 {
        let bytes = self.footprint_bytes.or(self.backing_bytes).unwrap_or(0);
        bytes / BLOCK_BYTES * BLOCK_BYTES
    }

    /// Requests a closed loop keeps outstanding.
    pub fn outstanding(&self) -> u64 {
        self.outstanding.unwrap_or(OUTSTANDING_DEFAULT)
    }

    /// Open loop at `target_iops`, or a closed loop.
    fn arrivals(&self) -> Loop {
        match self.target_iops {
            Some(rate_iops) => Loop::Open {
                rate_iops,
                outstanding_max: OUTSTANDING_MAX_DEFAULT,
            },
            None => Loop::Closed {
                outstanding: self.outstanding(),
            },
        }
    }

    /// Clients of an application: `outstanding` or its own number.
    fn clients(&self, default: u32) -> (u64, u32) {
        let n = self.outstanding.unwrap_or(u64::from(default));
        (n, u32::try_from(n).unwrap_or(u32::MAX))
    }
}

/// Options that do not make a run of the workload named.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadOptionError {
    #[error(transparent)]
    Unknown(#[from] UnknownPolicy),
    /// An option the workload does not take, or one it needs and lacks
    /// (the message names the option).
    #[error("{0}")]
    Option(String),
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// A workload's spec, and what the report adds to its name (`"24 backends"`).
pub type SpecResult = Result<(WorkloadSpec, Option<String>), WorkloadOptionError>;

/// One workload of the registry: its spec from a run's options, and what
/// callers ask of it instead of its name.
pub trait WorkloadKind {
    /// The spec for the run (the options it does not take are refused
    /// before it is asked).
    fn spec(&self, o: &WorkloadOptions) -> SpecResult;
    /// Lays out its own volumes (a file system, an application's data and
    /// logs): the footprint is theirs, whatever `footprint_bytes` says.
    /// Every application does.
    fn lays_out_own_volumes(&self) -> bool {
        self.application()
    }
    /// An application: sizes its data and logs itself (refuses a
    /// footprint) and takes a CPU time per unit of work (`cpu_us`).
    fn application(&self) -> bool {
        false
    }
    /// Closed loop only (refuses `target_iops`): what its loop is, for the
    /// message. An application is a closed loop of clients.
    fn closed_loop_only(&self) -> Option<&'static str> {
        self.application().then_some(CLIENTS_LOOP)
    }
    /// Tags requests with issuers and sync from an `IssuerMix`.
    fn takes_issuers(&self) -> bool {
        false
    }
}

/// One run's workload, from the registry.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadRun {
    pub spec: WorkloadSpec,
    /// The report's name for it: the workload's, and its own parameters.
    pub label: String,
    lays_out_own_volumes: bool,
    footprint_bytes: u64,
}

impl WorkloadRun {
    /// The workload called `name` (or an alias, ASCII case ignored) for a
    /// run with options `o`; options it does not take are refused by name.
    pub fn new(name: &str, o: &WorkloadOptions) -> Result<WorkloadRun, WorkloadOptionError> {
        let entry = WORKLOADS.find(name)?;
        let kind = (entry.build)(());
        refuse_what_does_not_apply(entry.name, kind.as_ref(), o)?;
        let (spec, detail) = kind.spec(o)?;
        let label = match detail {
            Some(detail) => format!("{} ({detail})", entry.name),
            None => entry.name.to_string(),
        };
        Ok(WorkloadRun {
            spec,
            label,
            lays_out_own_volumes: kind.lays_out_own_volumes(),
            footprint_bytes: o.footprint_bytes(),
        })
    }

    /// The bytes the run touches, given the volumes of its built workload.
    pub fn footprint_bytes(&self, volume_sizes_bytes: &[u64]) -> u64 {
        if self.lays_out_own_volumes {
            volume_sizes_bytes.iter().sum()
        } else {
            self.footprint_bytes
        }
    }
}

/// The options of `o` that workload `name` cannot take, named, in the order
/// `wcache sim` has always checked them.
fn refuse_what_does_not_apply(
    name: &str,
    kind: &dyn WorkloadKind,
    o: &WorkloadOptions,
) -> Result<(), WorkloadOptionError> {
    let refuse = |message: String| Err(WorkloadOptionError::Option(message));
    if o.cpu_us.is_some() && !kind.application() {
        let apps = names_where(|k| k.application());
        return refuse(format!(
            "--cpu-us applies to --workload {apps} only, not {name}"
        ));
    }
    if o.footprint_bytes.is_some() && kind.application() {
        return refuse(format!(
            "--footprint does not apply to --workload {name}: the application's data and logs have their sizes (docs/workloads.md)"
        ));
    }
    if o.issuers != IssuerMix::default() && !kind.takes_issuers() {
        let takers = names_where(|k| k.takes_issuers());
        return refuse(format!(
            "--issuers, --critical-issuers, --sync-fraction apply to --workload {takers} only, not {name}"
        ));
    }
    if let (Some(_), Some(what)) = (o.target_iops, kind.closed_loop_only()) {
        return refuse(format!(
            "--workload {name} is a closed loop {what}; --target-iops does not apply"
        ));
    }
    Ok(())
}

/// The names of the workloads that `has`, as a list in prose ("a, b and c").
fn names_where(has: fn(&dyn WorkloadKind) -> bool) -> String {
    let names: Vec<&str> = WORKLOADS
        .entries
        .iter()
        .filter(|e| has((e.build)(()).as_ref()))
        .map(|e| e.name)
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

struct Random;

impl WorkloadKind for Random {
    fn spec(&self, o: &WorkloadOptions) -> SpecResult {
        let mut c = RandomConfig::writes_closed(o.footprint_bytes(), o.outstanding());
        c.arrivals = o.arrivals();
        c.read_fraction = o.read_fraction;
        c.issuers = o.issuers;
        Ok((WorkloadSpec::Random(c), None))
    }
    fn takes_issuers(&self) -> bool {
        true
    }
}

struct Spc1;

impl WorkloadKind for Spc1 {
    fn spec(&self, o: &WorkloadOptions) -> SpecResult {
        let footprint = o.footprint_bytes();
        let mut c = match o.target_iops {
            Some(rate_iops) => Spc1Config::open(footprint, rate_iops),
            None => Spc1Config::closed(footprint, o.outstanding()),
        };
        c.arrivals = o.arrivals();
        c.hrrw = o.hrrw;
        if let Some(bsus) = o.bsus {
            c.bsus = bsus;
        }
        let detail = (o.hrrw != HrrwModel::Reference)
            .then(|| format!("hrrw {}, {} BSUs", o.hrrw.name(), c.bsus));
        Ok((WorkloadSpec::Spc1(c), detail))
    }
}

struct Trace;

impl WorkloadKind for Trace {
    fn spec(&self, o: &WorkloadOptions) -> SpecResult {
        let path = o.trace.clone().ok_or_else(|| {
            WorkloadOptionError::Option("--workload trace needs --trace FILE".into())
        })?;
        let mut c = TraceConfig::new(path, TraceFormat::from_name(&o.trace_format)?);
        c.replay = match o.trace_speed {
            Some(speed) => Replay::AsRecorded {
                speed,
                outstanding_max: OUTSTANDING_MAX_DEFAULT,
            },
            None => Replay::Closed {
                outstanding: o.outstanding(),
            },
        };
        Ok((WorkloadSpec::Trace(c), None))
    }
}

struct FileServer;

impl WorkloadKind for FileServer {
    fn spec(&self, o: &WorkloadOptions) -> SpecResult {
        let streams = o.outstanding();
        let c = FileServerConfig::postmark_like(o.files, streams);
        let detail = format!("{} files, {streams} streams", o.files);
        Ok((WorkloadSpec::FileServer(c), Some(detail)))
    }
    fn lays_out_own_volumes(&self) -> bool {
        true
    }
    fn closed_loop_only(&self) -> Option<&'static str> {
        Some("(one request per stream, --outstanding streams)")
    }
}

/// An application's loop: each client waits for its last unit of work.
const CLIENTS_LOOP: &str = "of clients (--outstanding)";

struct PgLike;

impl WorkloadKind for PgLike {
    fn spec(&self, o: &WorkloadOptions) -> SpecResult {
        let (n, backends) = o.clients(PG_BACKENDS);
        let mut c = PgLikeConfig::tpcc_like(backends);
        if let Some(us) = o.cpu_us {
            c.cpu_us_mean = us;
        }
        Ok((WorkloadSpec::PgLike(c), Some(format!("{n} backends"))))
    }
    fn application(&self) -> bool {
        true
    }
}

struct RedisLike;

impl WorkloadKind for RedisLike {
    fn spec(&self, o: &WorkloadOptions) -> SpecResult {
        let (n, clients) = o.clients(REDIS_CLIENTS);
        let mut c = RedisLikeConfig::ycsb_a(clients);
        if let Some(us) = o.cpu_us {
            c.cpu_us_mean = us;
        }
        Ok((WorkloadSpec::RedisLike(c), Some(format!("{n} clients"))))
    }
    fn application(&self) -> bool {
        true
    }
}

// The names are constants as well, so that `WorkloadSpec::kind_name`
// names a spec by its entry's name.
pub(super) const RANDOM: &str = "random";
pub(super) const SPC1: &str = "spc1";
pub(super) const TRACE: &str = "trace";
pub(super) const FILESERVER: &str = "fileserver";
pub(super) const PGLIKE: &str = "pglike";
pub(super) const REDISLIKE: &str = "redislike";

/// The workloads; a new one adds its kind above and its line here.
pub static WORKLOADS: Registry<dyn WorkloadKind, ()> = Registry {
    family: "workload",
    entries: &[
        Entry {
            name: RANDOM,
            aliases: &[],
            help: "4 KiB requests uniform over the footprint, the WOW paper's (reads: --read-fraction; issuers: --issuers)",
            build: |()| Box::new(Random),
        },
        Entry {
            name: SPC1,
            aliases: &[],
            help: "SPC-1-like: three ASUs, eight streams, hierarchical reuse random walks (--hrrw, --bsus)",
            build: |()| Box::new(Spc1),
        },
        Entry {
            name: TRACE,
            aliases: &[],
            help: "replay of a block trace (--trace, --trace-format, --trace-speed)",
            build: |()| Box::new(Trace),
        },
        Entry {
            name: FILESERVER,
            aliases: &[],
            help: "PostMark-like: small files, appends, creates, deletes, journal commits (--files)",
            build: |()| Box::new(FileServer),
        },
        Entry {
            name: PGLIKE,
            aliases: &[],
            help: "PostgreSQL-like: backends, WAL lock, checkpointer (use --backend hdd-per-volume)",
            build: |()| Box::new(PgLike),
        },
        Entry {
            name: REDISLIKE,
            aliases: &[],
            help: "Redis-like: AOF, snapshots",
            build: |()| Box::new(RedisLike),
        },
    ],
};
