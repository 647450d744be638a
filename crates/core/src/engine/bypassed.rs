//! The writes admission bypassed whose backing write is in flight and not
//! promoted, counted by path (around the cache, or through it), so that
//! the lookups for them (a waiter's overlap, a promotion) cost nothing
//! while there are none.

#[derive(Default)]
pub(super) struct BypassedWrites {
    /// Bypasses: nothing of them in the cache (`BackingKind::Around`).
    around: u32,
    /// Bypassed writes that went through the cache (`BackingKind::BypassThrough`).
    through: u32,
}

impl BypassedWrites {
    /// Bypasses in flight.
    #[inline]
    pub(super) fn around(&self) -> u32 {
        self.around
    }

    /// Bypassed writes through the cache in flight.
    #[inline]
    pub(super) fn through(&self) -> u32 {
        self.through
    }

    /// Either kind is in flight.
    #[inline]
    pub(super) fn any(&self) -> bool {
        self.around > 0 || self.through > 0
    }

    /// A bypass's backing write went out.
    #[inline]
    pub(super) fn around_issued(&mut self) {
        self.around += 1;
    }

    /// A bypass landed or was promoted.
    #[inline]
    pub(super) fn around_ended(&mut self) {
        debug_assert!(self.around > 0, "a bypass ended with none in flight");
        self.around -= 1;
    }

    /// A bypassed write through the cache sent its backing write.
    #[inline]
    pub(super) fn through_issued(&mut self) {
        self.through += 1;
    }

    /// A bypassed write through the cache landed or was promoted.
    #[inline]
    pub(super) fn through_ended(&mut self) {
        debug_assert!(
            self.through > 0,
            "a write through ended with none in flight"
        );
        self.through -= 1;
    }

    /// Against the request table: `around` requests with a bypass in
    /// flight and `through` with a write through the cache in flight, none
    /// of them promoted.
    pub(super) fn check(&self, around: u32, through: u32) {
        assert_eq!(
            self.around, around,
            "bypass writes in flight against the requests with a bypass in flight, not promoted"
        );
        assert_eq!(
            self.through, through,
            "bypassed writes through the cache in flight against the requests"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_is_counted_until_it_ends() {
        let mut b = BypassedWrites::default();
        assert!(!b.any());
        b.around_issued();
        b.through_issued();
        b.through_issued();
        b.check(1, 2);
        b.around_ended();
        assert!(b.any() && b.around() == 0 && b.through() == 2);
        b.through_ended();
        b.through_ended();
        assert!(!b.any());
        b.check(0, 0);
    }
}
