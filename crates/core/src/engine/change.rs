//! Online policy changes: the destage order and rate, the admission policy
//! and the write policy of a running engine, swapped between two calls
//! without losing a dirty page or a candidate group. It exists so that an
//! operator can retune a cache without a restart; it must never change a
//! promise already made: leaving write-back is refused while any page is
//! dirty or being destaged (drain first), since the new policy's promise
//! would then not hold for those pages.

use super::{Engine, GroupView, Ordered};

use crate::config::ORDERED_ADMITS_ALL;
use crate::config::{EngineConfig, WritePolicyKind};
use crate::policy::admission::{admits_every_write, build_admission};
use crate::policy::destage_order::{Candidates, DESTAGE_ORDERS};
use crate::policy::destage_rate::DESTAGE_RATES;
use crate::policy::registry::UnknownPolicy;
use crate::time::Nanos;

/// The configuration before and after `Engine::retune`.
pub type Retuned = (EngineConfig, EngineConfig);

/// Why an online change was refused (the engine is unchanged).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ChangeError {
    #[error(transparent)]
    Unknown(#[from] UnknownPolicy),
    #[error(
        "{from} -> {to} needs a drained cache first: {dirty_pages} dirty pages, \
         {destages_in_flight} destages in flight"
    )]
    NotDrained {
        from: &'static str,
        to: &'static str,
        dirty_pages: u64,
        destages_in_flight: u32,
    },
    #[error(
        "{from} -> {to} needs a drained, idle cache (ordered write-back keeps its order \
         from each write's arrival): {requests_in_flight} requests in flight"
    )]
    NotIdle {
        from: &'static str,
        to: &'static str,
        requests_in_flight: u32,
    },
    #[error("write policy write-back-ordered: {0}")]
    Ordered(&'static str),
    /// A tunable refused as it would be at start (the message names it).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(
        "{from} -> {to}: write-back-journaled is chosen when the cache starts (its backing \
         journal is reserved then), not changed online"
    )]
    Journaled {
        from: &'static str,
        to: &'static str,
    },
    #[error(
        "{from} -> {to}: on a format-3 cache write-back-ordered is chosen when the cache \
         starts (its log's replay keeps every version of a page, as the configuration \
         recorded at start says), not changed online"
    )]
    OrderedOnLog {
        from: &'static str,
        to: &'static str,
    },
}

impl Engine {
    /// Destage by `name` from now on. The candidate groups are handed to the
    /// new order in address order starting at the old order's pointer, so
    /// CSCAN and WOW go on from where the old pointer rested (LRW starts its
    /// recency list in that order). Returns the previous order's name.
    pub fn set_destage_order(&mut self, name: &str) -> Result<&'static str, ChangeError> {
        let mut order = DESTAGE_ORDERS.build(name, ())?;
        let start = self.order.peek(&*view!(self));
        let keys = self.slots.keys();
        let mut skips = 0; // recency bits cleared by the hand-over are not skips
        let mut view = GroupView {
            dirty: &mut self.dirty,
            keys,
            candidates: 0,
            skips: &mut skips,
            draining: false,
        };
        let mut inserted = 0usize;
        let mut next = start;
        let first = start;
        while let Some(key) = next {
            inserted += 1;
            view.candidates = inserted;
            order.insert(&mut view, key);
            next = view
                .next(Some(key))
                .or_else(|| view.next(None))
                .filter(|k| Some(*k) != first);
        }
        assert_eq!(inserted, self.candidates, "every candidate handed over");
        let old = std::mem::replace(&mut self.order, order).name();
        self.config.destage_order = self.order.name().to_string();
        let in_readiness_order = self.order.in_readiness_order();
        if let Some(o) = &mut self.ordered {
            o.set_readiness_order(in_readiness_order);
        }
        self.start_destages();
        Ok(old)
    }

    /// Change tunables online (destage thresholds and concurrency, the
    /// sequential cutoff, the maximum dirty age, the idle drain): `change`
    /// edits a copy of the configuration, which must pass the checks a
    /// start makes, else nothing changes. What depends on a changed value is
    /// rebuilt: the destage rate (with its policy), the admission policies
    /// (their per-stream state starts anew), the age periods (every page
    /// dirty now counts its age from `now`: never destaged later than `now`
    /// plus the new bound). Then destaging goes on at the new pace.
    /// Returns the configuration before and after.
    pub fn retune(
        &mut self,
        now: Nanos,
        change: impl FnOnce(&mut EngineConfig),
    ) -> Result<Retuned, ChangeError> {
        let mut candidate = self.config.clone();
        change(&mut candidate);
        candidate.validate_settings()?;
        let old = std::mem::replace(&mut self.config, candidate);
        if old.rate != self.config.rate {
            self.rate = DESTAGE_RATES.build(self.rate.name(), self.config.rate)?;
        }
        if old.sequential_cutoff_bytes != self.config.sequential_cutoff_bytes {
            let cutoff = self.config.sequential_cutoff_bytes;
            self.admission = build_admission(self.admission.name(), cutoff)?;
            for v in &mut self.volumes {
                if let Some(a) = &mut v.admission {
                    *a = build_admission(a.name(), cutoff)?;
                }
            }
        }
        if old.staleness.max_dirty_age_ns != self.config.staleness.max_dirty_age_ns {
            self.restart_ages(now);
        }
        self.start_destages();
        self.emit_frees(now);
        Ok((old, self.config.clone()))
    }

    /// Pace destages by `name` from now on (with the configured thresholds).
    pub fn set_destage_rate(&mut self, name: &str) -> Result<&'static str, ChangeError> {
        let rate = DESTAGE_RATES.build(name, self.config.rate)?;
        let old = std::mem::replace(&mut self.rate, rate).name();
        self.config.destage_rate = self.rate.name().to_string();
        self.start_destages();
        self.emit_frees(Nanos::MAX);
        Ok(old)
    }

    /// Admit writes by `name` from now on (the sequential cutoff stays).
    pub fn set_admission(&mut self, name: &str) -> Result<&'static str, ChangeError> {
        let keeps_order = self.ordered.is_some() || self.journal.is_some();
        if keeps_order && !admits_every_write(name)? {
            return Err(ChangeError::Ordered(ORDERED_ADMITS_ALL));
        }
        let admission = build_admission(name, self.config.sequential_cutoff_bytes)?;
        let old = std::mem::replace(&mut self.admission, admission).name();
        self.config.admission = crate::policy::admission::ADMISSIONS
            .find(name)
            .map(|e| e.name.to_string())?;
        Ok(old)
    }

    /// Route writes admitted from now on by `kind`. Leaving write-back is
    /// refused while a page is dirty or a destage is in flight (drain first:
    /// `start_drain`, then call this once `dirty_pages()` is 0).
    pub fn set_write_policy(
        &mut self,
        kind: WritePolicyKind,
    ) -> Result<WritePolicyKind, ChangeError> {
        let old = self.config.write_policy;
        let new = kind.build();
        if kind != old && (new.journaled() || self.write_policy.journaled()) {
            return Err(ChangeError::Journaled {
                from: old.name(),
                to: kind.name(),
            });
        }
        let ordered_changes = new.ordered() != self.write_policy.ordered();
        if ordered_changes && self.log.is_some() {
            return Err(ChangeError::OrderedOnLog {
                from: old.name(),
                to: kind.name(),
            });
        }
        let leaves_dirty = self.write_policy.keeps_dirty() && kind != old;
        let drained = self.dirty_pages() == 0 && self.destager.in_flight() == 0;
        if (leaves_dirty || ordered_changes) && !drained {
            return Err(ChangeError::NotDrained {
                from: old.name(),
                to: kind.name(),
                dirty_pages: self.dirty_pages(),
                destages_in_flight: self.destager.in_flight(),
            });
        }
        if ordered_changes && self.reqs.live_count() > 0 {
            return Err(ChangeError::NotIdle {
                from: old.name(),
                to: kind.name(),
                requests_in_flight: self.reqs.live_count(),
            });
        }
        if new.ordered() && !self.config.admits_all() {
            return Err(ChangeError::Ordered(ORDERED_ADMITS_ALL));
        }
        if ordered_changes {
            self.ordered = new
                .ordered()
                .then(|| Ordered::new(self.slots.len() as usize, self.order.in_readiness_order()));
        }
        self.write_policy = new;
        self.config.write_policy = kind;
        Ok(old)
    }

    /// The names of the policies in force: (write policy, admission,
    /// destage order, destage rate).
    pub fn policy_names(&self) -> [&'static str; 4] {
        [
            self.write_policy.name(),
            self.admission.name(),
            self.order.name(),
            self.rate.name(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::*;
    use crate::config::EngineConfig;
    use crate::types::*;

    fn engine(order: &str) -> Engine {
        let config = EngineConfig {
            cache_slots: 256,
            destage_order: order.into(),
            ..EngineConfig::default()
        };
        let mut e = Engine::new(config).expect("config");
        e.add_volume(64 << 20).expect("volume");
        e
    }

    fn goes_to_backing(cmd: &IoCommand) -> bool {
        matches!(
            cmd,
            IoCommand::Destage { .. } | IoCommand::WriteBacking { .. }
        )
    }

    /// Writes one page at each of `pages` (page numbers), completing every
    /// cache write; destages stay outstanding.
    fn write_pages(e: &mut Engine, pages: &[u64]) -> Vec<IoCommand> {
        let mut held = Vec::new();
        for (i, &p) in pages.iter().enumerate() {
            let req = Request {
                id: RequestId(i as u64),
                volume: VolumeId(0),
                kind: RequestKind::Write,
                offset_bytes: p * 4096,
                len_bytes: 4096,
                flags: RequestFlags::default(),
            };
            e.handle_request(Nanos(0), req).expect("submit");
            while let Some(cmd) = e.poll_command() {
                if goes_to_backing(&cmd) {
                    held.push(cmd);
                } else {
                    e.handle_completion(Nanos(0), cmd.io(), Ok(()))
                        .expect("known io");
                }
            }
            while e.poll_response().is_some() {}
        }
        held
    }

    #[test]
    fn order_change_hands_over_every_candidate_and_destages_them_all() {
        for (from, to) in [("wow", "lrw"), ("lrw", "cscan"), ("cscan", "wow")] {
            let mut e = engine(from);
            let pages: Vec<u64> = (0..40).map(|i| (i * 37) % 4000).collect();
            let held = write_pages(&mut e, &pages);
            for cmd in held {
                e.handle_completion(Nanos(0), cmd.io(), Ok(()))
                    .expect("known io");
            }
            assert!(e.candidates > 20, "{from}: candidates to hand over");
            assert_eq!(e.set_destage_order(to), Ok(from));
            assert_eq!(e.policy_names()[2], to);
            e.start_drain();
            let mut rounds = 0;
            while e.dirty_pages() > 0 {
                let cmds: Vec<_> = std::iter::from_fn(|| e.poll_command()).collect();
                assert!(
                    !cmds.is_empty(),
                    "{from}->{to}: a dirty page with nothing to do"
                );
                for cmd in cmds {
                    e.handle_completion(Nanos(0), cmd.io(), Ok(()))
                        .expect("known io");
                }
                rounds += 1;
                assert!(rounds < 10_000);
            }
            assert_eq!(e.stats().destaged_pages, pages.len() as u64, "{from}->{to}");
        }
    }

    #[test]
    fn unknown_names_are_refused_and_change_nothing() {
        let mut e = engine("wow");
        assert!(matches!(
            e.set_destage_order("fifo"),
            Err(ChangeError::Unknown(_))
        ));
        assert!(matches!(
            e.set_destage_rate("fast"),
            Err(ChangeError::Unknown(_))
        ));
        assert!(matches!(
            e.set_admission("some"),
            Err(ChangeError::Unknown(_))
        ));
        assert_eq!(e.policy_names(), ["write-back", "all", "wow", "adaptive"]);
        assert_eq!(e.set_destage_rate("linear"), Ok("adaptive"));
        assert_eq!(e.set_admission("all"), Ok("all"));
        assert_eq!(e.config().destage_rate, "linear");
    }

    #[test]
    fn leaving_write_back_needs_a_drained_cache() {
        let mut e = engine("wow");
        let held = write_pages(&mut e, &[1, 2, 3]);
        let refused = e.set_write_policy(WritePolicyKind::WriteThrough);
        assert!(
            matches!(refused, Err(ChangeError::NotDrained { dirty_pages: 3, .. })),
            "{refused:?}"
        );
        assert_eq!(e.policy_names()[0], "write-back");
        for cmd in held {
            e.handle_completion(Nanos(0), cmd.io(), Ok(()))
                .expect("known io");
        }
        e.start_drain();
        while let Some(cmd) = e.poll_command() {
            e.handle_completion(Nanos(0), cmd.io(), Ok(()))
                .expect("known io");
        }
        assert_eq!(e.dirty_pages(), 0);
        assert_eq!(
            e.set_write_policy(WritePolicyKind::WriteThrough),
            Ok(WritePolicyKind::WriteBack)
        );
        // Writes now reach the backing before they are answered; nothing stays dirty.
        let held = write_pages(&mut e, &[5]);
        assert!(held
            .iter()
            .any(|c| matches!(c, IoCommand::WriteBacking { .. })));
        assert_eq!(e.dirty_pages(), 0);
        // Entering write-back needs no drain.
        assert_eq!(
            e.set_write_policy(WritePolicyKind::WriteBack),
            Ok(WritePolicyKind::WriteThrough)
        );
    }
}

#[cfg(test)]
mod ordered_tests {
    use super::*;
    use crate::command::*;
    use crate::config::EngineConfig;
    use crate::types::*;

    fn write(e: &mut Engine, id: u64, page: u64) {
        let req = Request {
            id: RequestId(id),
            volume: VolumeId(0),
            kind: RequestKind::Write,
            offset_bytes: page * 4096,
            len_bytes: 4096,
            flags: RequestFlags::default(),
        };
        e.handle_request(Nanos(0), req).expect("submit");
    }

    fn complete_all(e: &mut Engine) {
        while let Some(cmd) = e.poll_command() {
            e.handle_completion(Nanos(0), cmd.io(), Ok(()))
                .expect("known io");
        }
        while e.poll_response().is_some() {}
    }

    /// Into and out of ordered write-back only drained and idle (its order
    /// starts at each write's arrival), and only admitting every write.
    #[test]
    fn ordered_write_back_is_entered_and_left_drained_and_idle() {
        let config = EngineConfig {
            cache_slots: 256,
            ..EngineConfig::default()
        };
        let mut e = Engine::new(config).expect("config");
        e.add_volume(64 << 20).expect("volume");
        write(&mut e, 1, 7);
        let refused = e.set_write_policy(WritePolicyKind::OrderedWriteBack);
        assert!(
            matches!(refused, Err(ChangeError::NotDrained { .. })),
            "{refused:?}"
        );
        complete_all(&mut e);
        e.start_drain();
        complete_all(&mut e);
        e.stop_drain();
        write(&mut e, 2, 8); // in flight: not idle
        e.start_drain();
        let refused = e.set_write_policy(WritePolicyKind::OrderedWriteBack);
        assert!(
            matches!(
                refused,
                Err(ChangeError::NotDrained { .. } | ChangeError::NotIdle { .. })
            ),
            "{refused:?}"
        );
        complete_all(&mut e);
        complete_all(&mut e);
        e.stop_drain();
        assert_eq!(e.dirty_pages(), 0);
        assert_eq!(
            e.set_write_policy(WritePolicyKind::OrderedWriteBack),
            Ok(WritePolicyKind::WriteBack)
        );
        assert!(matches!(e.set_admission("all"), Ok("all")));
        // Two writes of one page: both versions are kept and destaged in order.
        write(&mut e, 3, 9);
        complete_all(&mut e);
        write(&mut e, 4, 9);
        complete_all(&mut e);
        assert_eq!((e.dirty_pages(), e.dirty_versions()), (1, 2));
        let destaged = e.stats().destaged_pages;
        e.start_drain();
        complete_all(&mut e);
        complete_all(&mut e);
        complete_all(&mut e);
        assert_eq!(e.dirty_versions(), 0);
        assert_eq!(
            e.stats().destaged_pages - destaged,
            2,
            "both versions destaged"
        );
    }
}

#[cfg(test)]
mod ordered_on_log_tests {
    use super::*;
    use crate::config::EngineConfig;

    /// On a format-3 cache ordered write-back is neither entered nor left
    /// online, even drained and idle: its log's replay follows the policy
    /// recorded at start.
    #[test]
    fn ordered_write_back_is_not_switched_online_on_the_log() {
        for (from, to) in [
            (
                WritePolicyKind::WriteBack,
                WritePolicyKind::OrderedWriteBack,
            ),
            (
                WritePolicyKind::OrderedWriteBack,
                WritePolicyKind::WriteBack,
            ),
        ] {
            let config = EngineConfig {
                cache_slots: 256,
                persistent: true,
                log: true,
                write_policy: from,
                ..EngineConfig::default()
            };
            let mut e = Engine::new(config).expect("config");
            e.add_volume(64 << 20).expect("volume");
            let refused = e.set_write_policy(to);
            assert!(
                matches!(refused, Err(ChangeError::OrderedOnLog { .. })),
                "{from:?} -> {to:?}: {refused:?}"
            );
            assert_eq!(e.config().write_policy, from);
            // Changes that keep ordered write-back out stay open.
            let other = e.set_write_policy(WritePolicyKind::WriteThrough);
            if from == WritePolicyKind::WriteBack {
                assert_eq!(other, Ok(WritePolicyKind::WriteBack));
            } else {
                assert!(matches!(other, Err(ChangeError::OrderedOnLog { .. })));
            }
        }
    }
}
