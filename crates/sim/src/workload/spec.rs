//! A workload as a value: which one and its parameters, built into a
//! `Box<dyn Workload>` from a seed. The CLI (through the registry,
//! `registry.rs`) and the experiments construct workloads only through here,
//! so a name means the same thing everywhere.

use super::registry;
use super::{
    FileServerConfig, FileServerWorkload, PgLikeConfig, PgLikeWorkload, RandomConfig,
    RandomWorkload, RedisLikeConfig, RedisLikeWorkload, Spc1Config, Spc1Workload, TraceConfig,
    TraceWorkload, Workload, WorkloadError,
};

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
    /// The name of its entry in the registry (`WORKLOADS`).
    pub fn kind_name(&self) -> &'static str {
        match self {
            WorkloadSpec::Random(_) => registry::RANDOM,
            WorkloadSpec::Spc1(_) => registry::SPC1,
            WorkloadSpec::Trace(_) => registry::TRACE,
            WorkloadSpec::FileServer(_) => registry::FILESERVER,
            WorkloadSpec::PgLike(_) => registry::PGLIKE,
            WorkloadSpec::RedisLike(_) => registry::REDISLIKE,
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
