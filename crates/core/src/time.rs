//! Time as the engine sees it: a number handed in by the driver, never read from a clock.

use std::fmt;
use std::ops::{Add, Sub};

/// Nanoseconds since an origin chosen by the driver (virtual time in the
/// simulator, a monotonic clock in the real driver).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(pub u64);

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);
    pub const MAX: Nanos = Nanos(u64::MAX);

    pub const fn from_us(us: u64) -> Nanos {
        Nanos(us * 1_000)
    }
    pub const fn from_ms(ms: u64) -> Nanos {
        Nanos(ms * 1_000_000)
    }
    pub fn from_ms_f64(ms: f64) -> Nanos {
        debug_assert!(ms >= 0.0);
        Nanos((ms * 1e6).round() as u64)
    }
    pub fn from_secs_f64(s: f64) -> Nanos {
        debug_assert!(s >= 0.0);
        Nanos((s * 1e9).round() as u64)
    }
    pub fn as_ms_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    pub fn saturating_sub(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(other.0))
    }
}

impl Add for Nanos {
    type Output = Nanos;
    fn add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0 + rhs.0)
    }
}

impl Sub for Nanos {
    type Output = Nanos;
    fn sub(self, rhs: Nanos) -> Nanos {
        debug_assert!(self.0 >= rhs.0, "time went backwards");
        Nanos(self.0 - rhs.0)
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}ms", self.as_ms_f64())
    }
}
