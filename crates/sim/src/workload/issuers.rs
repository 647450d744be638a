//! Issuers and sync tags for synthetic workloads, so that request-oriented
//! admission (`cp`, `sync`) has something to decide on: each request comes
//! from one of `issuers` issuers, the first `critical_issuers` of which the
//! simulation marks critical, and a write is sync with `sync_fraction`.
//! With no issuers (the default) a generator draws nothing more, so the
//! request streams of existing experiments stay exactly as they were.

use rand::rngs::SmallRng;
use rand::Rng;

use super::WorkloadError;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IssuerMix {
    /// Issuers 1..=issuers send the requests, chosen uniformly (0: all
    /// requests are untagged, issuer 0).
    pub issuers: u32,
    /// Issuers 1..=critical_issuers are critical (the simulation hints them).
    pub critical_issuers: u32,
    /// Fraction of writes tagged sync, in [0, 1].
    pub sync_fraction: f64,
}

impl IssuerMix {
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.critical_issuers > self.issuers {
            return Err(WorkloadError::InvalidConfig(format!(
                "critical issuers ({}) exceed the issuers ({})",
                self.critical_issuers, self.issuers
            )));
        }
        if !(0.0..=1.0).contains(&self.sync_fraction) {
            return Err(WorkloadError::InvalidConfig(format!(
                "sync fraction {} must be within [0, 1]",
                self.sync_fraction
            )));
        }
        if self.issuers == 0 && self.sync_fraction > 0.0 {
            return Err(WorkloadError::InvalidConfig(
                "a sync fraction needs issuers (at least 1)".into(),
            ));
        }
        Ok(())
    }

    /// The issuers the simulation marks critical.
    pub fn critical(&self) -> std::ops::RangeInclusive<u32> {
        1..=self.critical_issuers
    }

    /// (issuer, sync) of the next request; draws only when there are issuers.
    pub fn draw(&self, rng: &mut SmallRng, is_write: bool) -> Option<(u32, bool)> {
        if self.issuers == 0 {
            return None;
        }
        let issuer = rng.gen_range(1..=self.issuers);
        let sync = is_write && rng.gen::<f64>() < self.sync_fraction;
        Some((issuer, sync))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn draws_issuers_in_range_and_sync_at_the_fraction() {
        let mix = IssuerMix {
            issuers: 4,
            critical_issuers: 1,
            sync_fraction: 0.25,
        };
        mix.validate().expect("valid");
        let mut rng = SmallRng::seed_from_u64(1);
        let draws: Vec<(u32, bool)> = (0..10_000)
            .map(|_| mix.draw(&mut rng, true).expect("tagged"))
            .collect();
        assert!(draws.iter().all(|&(i, _)| (1..=4).contains(&i)));
        let sync = draws.iter().filter(|d| d.1).count();
        assert!((2300..2700).contains(&sync), "{sync} of 10000 sync");
        assert_eq!(mix.draw(&mut rng, false).map(|d| d.1), Some(false));
        assert_eq!(mix.critical().collect::<Vec<_>>(), [1]);
        assert_eq!(IssuerMix::default().draw(&mut rng, true), None);
    }

    #[test]
    fn bad_mixes_name_the_problem() {
        let mut mix = IssuerMix {
            issuers: 2,
            critical_issuers: 3,
            sync_fraction: 0.5,
        };
        let e = mix.validate().unwrap_err().to_string();
        assert!(
            e.contains("critical issuers (3) exceed the issuers (2)"),
            "{e}"
        );
        mix.critical_issuers = 1;
        mix.sync_fraction = 1.5;
        assert!(mix.validate().unwrap_err().to_string().contains("1.5"));
        let e = IssuerMix {
            sync_fraction: 0.5,
            ..IssuerMix::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("needs issuers"), "{e}");
    }
}
