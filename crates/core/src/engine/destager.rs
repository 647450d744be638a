//! The destager's own bookkeeping, apart from what it picks: the destage
//! commands in flight, where the last run started (the seek statistics and
//! the trickle rate's sequential test), and the pause after a backing error.

/// Destage pause after a backing error, doubling up to the max.
pub(super) const DESTAGE_RETRY_NS_MIN: u64 = 10_000_000;
pub(super) const DESTAGE_RETRY_NS_MAX: u64 = 5_000_000_000;

pub(super) struct Destager {
    /// Destage commands in flight: runs (`IoCtx::Destage`) and journaled
    /// write-back's checkpoint commands (`IoCtx::Checkpoint`).
    in_flight: u32,
    /// The last group picked was sequential (the trickle rate's test).
    last_sequential: bool,
    /// The first sector of the last run issued (none before the first).
    last_sector: Option<u64>,
    /// The pause after the next backing error: the minimum, doubled on
    /// each error up to the maximum, back to the minimum on a success.
    retry_ns: u64,
}

impl Default for Destager {
    fn default() -> Destager {
        Destager {
            in_flight: 0,
            last_sequential: false,
            last_sector: None,
            retry_ns: DESTAGE_RETRY_NS_MIN,
        }
    }
}

impl Destager {
    /// Destage commands in flight (runs and checkpoint commands).
    #[inline]
    pub(super) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    #[inline]
    pub(super) fn last_sequential(&self) -> bool {
        self.last_sequential
    }

    /// A group was picked to destage (`sequential`: it was written
    /// sequentially).
    #[inline]
    pub(super) fn picked(&mut self, sequential: bool) {
        self.last_sequential = sequential;
    }

    /// A run starting at `sector` goes out: the seek from the last run's
    /// start, if there was one.
    #[inline]
    pub(super) fn run_issued(&mut self, sector: u64) -> Option<u64> {
        let seek = self.last_sector.map(|last| last.abs_diff(sector));
        self.last_sector = Some(sector);
        self.in_flight += 1;
        seek
    }

    /// A checkpoint command goes out (no place of its own to seek from).
    #[inline]
    pub(super) fn checkpoint_issued(&mut self) {
        self.in_flight += 1;
    }

    /// A destage command (run or checkpoint command) completed.
    #[inline]
    pub(super) fn done(&mut self) {
        debug_assert!(
            self.in_flight > 0,
            "a destage completed with none in flight"
        );
        self.in_flight -= 1;
    }

    /// A destage reached the backing: the next error pauses the least.
    #[inline]
    pub(super) fn succeeded(&mut self) {
        self.retry_ns = DESTAGE_RETRY_NS_MIN;
    }

    /// A destage failed: the pause before trying again (the next failure
    /// pauses twice as long, up to the maximum).
    pub(super) fn failed(&mut self) -> u64 {
        let pause = self.retry_ns;
        self.retry_ns = (self.retry_ns * 2).min(DESTAGE_RETRY_NS_MAX);
        pause
    }

    /// Against the I/O table's destage commands (`runs` and `checkpoints`
    /// in flight): the count in flight is theirs; a run in flight has a
    /// place; the pause is the minimum doubled, or the maximum.
    pub(super) fn check(&self, runs: u32, checkpoints: u32) {
        assert_eq!(
            self.in_flight,
            runs + checkpoints,
            "destages in flight against the destages and checkpoint commands in flight"
        );
        assert!(
            runs == 0 || self.last_sector.is_some(),
            "a destage run in flight and no last destage sector"
        );
        let r = self.retry_ns;
        let doubled =
            r.is_multiple_of(DESTAGE_RETRY_NS_MIN) && (r / DESTAGE_RETRY_NS_MIN).is_power_of_two();
        assert!(
            (DESTAGE_RETRY_NS_MIN..=DESTAGE_RETRY_NS_MAX).contains(&r)
                && (doubled || r == DESTAGE_RETRY_NS_MAX),
            "destage retry pause {r} ns is not the minimum doubled or the maximum"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_count_in_flight_measure_seeks_and_errors_double_the_pause() {
        let mut d = Destager::default();
        d.check(0, 0);
        assert_eq!(d.run_issued(100), None, "no seek before the first run");
        assert_eq!(d.run_issued(40), Some(60));
        d.checkpoint_issued();
        assert_eq!(d.in_flight(), 3);
        d.check(2, 1);
        d.done();
        d.done();
        d.done();
        d.check(0, 0);
        assert_eq!(d.failed(), DESTAGE_RETRY_NS_MIN);
        assert_eq!(d.failed(), 2 * DESTAGE_RETRY_NS_MIN);
        for _ in 0..20 {
            d.failed();
            d.check(0, 0);
        }
        assert_eq!(d.failed(), DESTAGE_RETRY_NS_MAX, "capped");
        d.succeeded();
        assert_eq!(d.failed(), DESTAGE_RETRY_NS_MIN);
        d.picked(true);
        assert!(d.last_sequential());
    }
}
