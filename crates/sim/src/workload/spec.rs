//! The workload registry: one value that names a workload and its parameters,
//! built into a `Box<dyn Workload>` from a seed. The CLI and the experiments
//! construct workloads only through here, so a name means the same thing everywhere.

use super::{
    FileServerConfig, FileServerWorkload, PgLikeConfig, PgLikeWorkload, RandomConfig,
    RandomWorkload, RedisLikeConfig, RedisLikeWorkload, Spc1Config, Spc1Workload, TraceConfig,
    TraceWorkload, Workload, WorkloadError,
};

/// The workload kinds, as [`WorkloadSpec::kind_name`] spells them (for CLI help).
pub const WORKLOAD_NAMES: [&str; 6] = [
    "random",
    "spc1",
    "trace",
    "fileserver",
    "pglike",
    "redislike",
];

#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadSpec {
    Random(RandomConfig),
    Spc1(Spc1Config),
    /// Traces ignore the seed: replay is determined by the file.
    Trace(TraceConfig),
    FileServer(FileServerConfig),
    /// A PostgreSQL-like application (TPC-C-like transactions).
    PgLike(PgLikeConfig),
    /// A Redis-like application (YCSB-A-like commands).
    RedisLike(RedisLikeConfig),
}

impl WorkloadSpec {
    pub fn kind_name(&self) -> &'static str {
        match self {
            WorkloadSpec::Random(_) => WORKLOAD_NAMES[0],
            WorkloadSpec::Spc1(_) => WORKLOAD_NAMES[1],
            WorkloadSpec::Trace(_) => WORKLOAD_NAMES[2],
            WorkloadSpec::FileServer(_) => WORKLOAD_NAMES[3],
            WorkloadSpec::PgLike(_) => WORKLOAD_NAMES[4],
            WorkloadSpec::RedisLike(_) => WORKLOAD_NAMES[5],
        }
    }

    pub fn build(&self, seed: u64) -> Result<Box<dyn Workload>, WorkloadError> {
        Ok(match self {
            WorkloadSpec::Random(config) => Box::new(RandomWorkload::new(config.clone(), seed)?),
            WorkloadSpec::Spc1(config) => Box::new(Spc1Workload::new(config.clone(), seed)?),
            WorkloadSpec::Trace(config) => Box::new(TraceWorkload::open(config.clone())?),
            WorkloadSpec::FileServer(config) => {
                Box::new(FileServerWorkload::new(config.clone(), seed)?)
            }
            WorkloadSpec::PgLike(config) => Box::new(PgLikeWorkload::new(config.clone(), seed)?),
            WorkloadSpec::RedisLike(config) => {
                Box::new(RedisLikeWorkload::new(config.clone(), seed)?)
            }
        })
    }
}
