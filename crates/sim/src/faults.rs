//! The fault plan of a simulation: which device operations fail with EIO,
//! which are delayed by a latency spike, and what a crash leaves behind
//! (torn writes, a lost cache device, a cache device that lied about
//! durability). Parsed from the `--faults SPEC` syntax of `wcache sim`
//! (`docs/sim-faults.md`). Every draw comes from one seeded generator, in
//! the order device operations are submitted, so a run replays bit for bit.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use thiserror::Error;

/// When a fault strikes the operations of one kind.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trigger {
    Never,
    /// Each operation with this probability.
    Probability(f64),
    /// The k-th operation (1-based) of this kind, once.
    Nth(u64),
}

/// Which operations: device (cache or backing) and direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpClass {
    pub cache: bool,
    pub write: bool,
}

impl OpClass {
    fn index(self) -> usize {
        (self.cache as usize) * 2 + self.write as usize
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct FaultPlan {
    /// Seed of the fault draws (default: the run's seed).
    pub seed: Option<u64>,
    /// EIO per class: backing read, backing write, cache read, cache write.
    pub eio: [Trigger; 4],
    /// At a crash, writes in flight land torn: a prefix of their sectors,
    /// and a page write's record or not. Without it they leave nothing.
    pub torn: bool,
    /// At the crash the cache device is lost (a blank one replaces it).
    pub lose_cache: bool,
    /// At a crash that loses the cache, check that the backing alone is
    /// point-in-time consistent (always on under write-back-ordered).
    pub pit: bool,
    /// Promise every acknowledged write even when the cache device is lost
    /// (write-back does not; this shows which policies lose them).
    pub strict: bool,
    /// A failed write lands whole before its error is reported (the error
    /// came from the flush after it). Without it a failed operation changes
    /// nothing.
    pub eio_lands: bool,
    /// With `--crash-at K`: power fails at device writes K, 2K, … this many
    /// times (crashes during recovery and right after it included).
    pub crashes: u64,
    /// A lying cache device: its last this-many completed writes are lost
    /// at a crash although it reported them durable.
    pub lie_writes: usize,
    /// Latency spikes: with this probability an operation's completion is
    /// delayed by `spike_ns`.
    pub spike_probability: f64,
    pub spike_ns: u64,
}

impl Default for FaultPlan {
    fn default() -> FaultPlan {
        FaultPlan {
            seed: None,
            eio: [Trigger::Never; 4],
            torn: false,
            lose_cache: false,
            pit: false,
            strict: false,
            eio_lands: false,
            crashes: 1,
            lie_writes: 0,
            spike_probability: 0.0,
            spike_ns: 0,
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum FaultSpecError {
    #[error("fault {item:?}: unknown; valid: {valid}", valid = FaultPlan::SYNTAX)]
    Unknown { item: String },
    #[error("fault {item:?}: {why}")]
    BadValue { item: String, why: String },
}

impl FaultPlan {
    /// The syntax, for error messages and `--help`.
    pub const SYNTAX: &'static str = "comma-separated items: \
        {cache|backing}-{read|write}-eio=P (probability 0..1) or =@K (the K-th such operation); \
        eio-lands (a failed write lands before its error); torn; lose-cache; pit (check the backing alone is point-in-time consistent at a crash that loses the cache); strict (promise every acknowledged write even when the cache is lost); lie=N (the cache device loses its last N acknowledged writes at a crash); \
        spike=P:MS (with probability P an operation completes MS milliseconds late); \
        crashes=M (with --crash-at K: crash at writes K, 2K, ... M times); seed=N";

    pub fn parse(spec: &str) -> Result<FaultPlan, FaultSpecError> {
        let mut plan = FaultPlan::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim())),
                None => (item, None),
            };
            let bad = |why: &str| FaultSpecError::BadValue {
                item: item.to_string(),
                why: why.to_string(),
            };
            let need = || value.ok_or_else(|| bad("needs a value (NAME=VALUE)"));
            let no_value = |v: Option<&str>| match v {
                Some(_) => Err(bad("takes no value")),
                None => Ok(()),
            };
            match name {
                "torn" => {
                    no_value(value)?;
                    plan.torn = true;
                }
                "lose-cache" => {
                    no_value(value)?;
                    plan.lose_cache = true;
                }
                "eio-lands" => {
                    no_value(value)?;
                    plan.eio_lands = true;
                }
                "pit" => {
                    no_value(value)?;
                    plan.pit = true;
                }
                "strict" => {
                    no_value(value)?;
                    plan.strict = true;
                }
                "lie" => plan.lie_writes = lie_writes(need()?).map_err(|w| bad(&w))?,
                "crashes" => {
                    plan.crashes = match need()?.parse::<u64>() {
                        Ok(m) if m >= 1 => m,
                        _ => return Err(bad("M must be a whole number of crashes, at least 1")),
                    };
                }
                "seed" => {
                    plan.seed = Some(
                        need()?
                            .parse()
                            .map_err(|_| bad("the seed must be a whole number"))?,
                    );
                }
                "spike" => {
                    let v = need()?;
                    let (p, ms) = v
                        .split_once(':')
                        .ok_or_else(|| bad("expected spike=P:MS"))?;
                    plan.spike_probability = probability(p).map_err(|w| bad(&w))?;
                    let ms: f64 = ms
                        .parse()
                        .map_err(|_| bad("MS must be a number of milliseconds"))?;
                    if !(ms.is_finite() && ms >= 0.0) {
                        return Err(bad("MS must be a number of milliseconds, at least 0"));
                    }
                    plan.spike_ns = (ms * 1e6) as u64;
                }
                _ => {
                    let class = match name {
                        "backing-read-eio" => OpClass {
                            cache: false,
                            write: false,
                        },
                        "backing-write-eio" => OpClass {
                            cache: false,
                            write: true,
                        },
                        "cache-read-eio" => OpClass {
                            cache: true,
                            write: false,
                        },
                        "cache-write-eio" => OpClass {
                            cache: true,
                            write: true,
                        },
                        _ => {
                            return Err(FaultSpecError::Unknown {
                                item: item.to_string(),
                            })
                        }
                    };
                    let v = need()?;
                    plan.eio[class.index()] = match v.strip_prefix('@') {
                        Some(k) => match k.parse::<u64>() {
                            Ok(k) if k >= 1 => Trigger::Nth(k),
                            _ => return Err(bad("@K needs a whole number K of at least 1")),
                        },
                        None => Trigger::Probability(probability(v).map_err(|w| bad(&w))?),
                    };
                }
            }
        }
        Ok(plan)
    }

    /// Whether this plan changes anything at all.
    pub fn is_empty(&self) -> bool {
        *self == FaultPlan::default()
    }
}

fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a probability between 0 and 1")),
    }
}

/// What the plan decided for one device operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpFate {
    pub eio: bool,
    pub delay_ns: u64,
}

/// Faults injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub eio: u64,
    pub spikes: u64,
    pub crashes: u64,
    /// Writes in flight at a crash that landed in part.
    pub torn_writes: u64,
    /// Acknowledged cache writes a lying device lost.
    pub lost_writes: u64,
}

/// Most acknowledged writes a lying cache device may lose (`lie=N`): the
/// model keeps a slot's state per write it may lose.
const LIE_WRITES_MAX: usize = 1 << 20;

fn lie_writes(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n <= LIE_WRITES_MAX => Ok(n),
        _ => Err(format!(
            "N must be a whole number of writes, at most {LIE_WRITES_MAX}"
        )),
    }
}

/// A plan being applied: its generator and counters.
pub struct Faults {
    pub plan: FaultPlan,
    rng: SmallRng,
    ops: [u64; 4],
    pub counts: FaultCounts,
}

impl Faults {
    pub fn new(plan: FaultPlan, run_seed: u64) -> Faults {
        let seed = plan.seed.unwrap_or(run_seed);
        Faults {
            rng: SmallRng::seed_from_u64(seed ^ 0x6661_756c_7473),
            plan,
            ops: [0; 4],
            counts: FaultCounts::default(),
        }
    }

    /// Draw the fate of the next operation of `class`.
    pub fn next_op(&mut self, class: OpClass) -> OpFate {
        let i = class.index();
        self.ops[i] += 1;
        let eio = match self.plan.eio[i] {
            Trigger::Never => false,
            Trigger::Probability(p) => self.rng.gen_bool(p),
            Trigger::Nth(k) => self.ops[i] == k,
        };
        let spike =
            self.plan.spike_probability > 0.0 && self.rng.gen_bool(self.plan.spike_probability);
        self.counts.eio += eio as u64;
        self.counts.spikes += spike as u64;
        OpFate {
            eio,
            delay_ns: if spike { self.plan.spike_ns } else { 0 },
        }
    }

    /// How much of a write in flight at a crash lands: `None` for nothing,
    /// else (units landed out of `units`, whether its record landed).
    pub fn torn(&mut self, units: usize) -> Option<(usize, bool)> {
        if !self.plan.torn {
            return None;
        }
        let landed = self.rng.gen_range(0..=units);
        let record = self.rng.gen_bool(0.5);
        self.counts.torn_writes += 1;
        Some((landed, record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_spec_parses() {
        let p = FaultPlan::parse(
            "cache-write-eio=0.01, backing-read-eio=@3,torn,lose-cache,lie=4,spike=0.1:2.5,seed=9",
        )
        .unwrap();
        assert_eq!(p.eio[3], Trigger::Probability(0.01));
        assert_eq!(p.eio[0], Trigger::Nth(3));
        assert!(p.torn && p.lose_cache);
        assert_eq!(p.lie_writes, 4);
        assert_eq!(p.spike_ns, 2_500_000);
        assert_eq!(p.seed, Some(9));
        assert!(FaultPlan::parse("").unwrap().is_empty());
        assert_eq!(FaultPlan::parse("crashes=3").unwrap().crashes, 3);
        let e = FaultPlan::parse("crashes=0").unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        assert_eq!(FaultPlan::parse("lie=1048576").unwrap().lie_writes, 1 << 20);
        let e = FaultPlan::parse("lie=1048577").unwrap_err().to_string();
        assert!(e.contains("at most 1048576"), "{e}");
    }

    #[test]
    fn a_bad_spec_names_what_is_wrong() {
        let e = FaultPlan::parse("torn,cache-write-eio=1.5").unwrap_err();
        assert_eq!(
            e.to_string(),
            "fault \"cache-write-eio=1.5\": \"1.5\" is not a probability between 0 and 1"
        );
        let e = FaultPlan::parse("tron").unwrap_err().to_string();
        assert!(e.starts_with("fault \"tron\": unknown; valid:"), "{e}");
        let e = FaultPlan::parse("backing-write-eio=@0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 1"), "{e}");
        let e = FaultPlan::parse("spike=0.1").unwrap_err().to_string();
        assert!(e.contains("spike=P:MS"), "{e}");
        let e = FaultPlan::parse("torn=1").unwrap_err().to_string();
        assert!(e.contains("takes no value"), "{e}");
    }
}
