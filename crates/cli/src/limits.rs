//! The ranges of the command line's numbers. Each parser refuses a value
//! that makes no sense (zero where something must happen, negative, more
//! than the engine or the machine holds, below a minimum, not finite) with
//! a message that says what is allowed; clap puts the option before it,
//! `serve --config` the file, line and key. A number whose range depends on
//! another option (a cache of at least one write group, thresholds in
//! order, a write group a multiple of the page) is checked where both are
//! known, most by `EngineConfig::validate`. Parsing only: it must never
//! touch a device.

use std::fmt::Display;
use std::str::FromStr;

use wcache_core::config::CACHE_SLOTS_MAX;
use wcache_core::engine::ISSUERS_MAX;
use wcache_sim::workload::fileserver::FILESERVER_FILES_MAX;
use wcache_sim::workload::OUTSTANDING_MAX_DEFAULT;

/// Threads of any pool the command line sizes (sweeps, NBD workers, I/O).
pub const THREADS_MAX: usize = 1024;
/// Seeds per point of a named experiment.
pub const SEEDS_MAX: u64 = 1000;
/// Destages outstanding at once (the engine's own limit).
pub const DESTAGES_MAX: u32 = wcache_core::policy::destage_rate::DESTAGES_MAX_LIMIT;
/// Microseconds a connection polls its socket before sleeping.
pub const POLL_US_MAX: u64 = 10_000;
/// The longest duration an option takes: a day.
pub const SECONDS_MAX: u64 = 86_400;
pub const DURATION_NS_MAX: u64 = wcache_core::config::DURATION_NS_MAX;

/// A whole number from `min` to `max`.
fn whole<T: FromStr + PartialOrd + Display>(text: &str, min: T, max: T) -> Result<T, String> {
    match text.trim().parse::<T>() {
        Ok(n) if min <= n && n <= max => Ok(n),
        _ => Err(format!(
            "{text:?} is not a whole number from {min} to {max}"
        )),
    }
}

/// A finite number from `min` to `max` (`unit` follows it in the message).
fn real(text: &str, min: f64, max: f64, unit: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (min..=max).contains(&x) => Ok(x),
        _ => Err(format!(
            "{text:?} is not a number{unit} from {min} to {max}"
        )),
    }
}

/// Worker threads (`sim --threads`, `serve --workers`, `--io-threads`).
pub fn threads(text: &str) -> Result<usize, String> {
    whole(text, 1, THREADS_MAX)
}

/// `sim --seeds`.
pub fn seeds(text: &str) -> Result<u64, String> {
    whole(text, 1, SEEDS_MAX)
}

/// Destages outstanding (`sim --max-queue`, `serve --destages-max`).
pub fn destages(text: &str) -> Result<u32, String> {
    whole(text, 1, DESTAGES_MAX)
}

/// `serve --poll-us` (0: no polling).
pub fn poll_us(text: &str) -> Result<u64, String> {
    whole(text, 0, POLL_US_MAX)
}

/// Whole seconds of a timeout (`--stall-timeout-s`).
pub fn timeout_s(text: &str) -> Result<u64, String> {
    whole(text, 1, SECONDS_MAX)
}

/// `sim --cache-pages`: the engine's slot limit.
pub fn cache_pages(text: &str) -> Result<u64, String> {
    whole(text, 1, CACHE_SLOTS_MAX)
}

/// `sim --journal-pages`, `--commit-pages` (0: the default).
pub fn journal_pages(text: &str) -> Result<u64, String> {
    whole(text, 0, CACHE_SLOTS_MAX)
}

/// `sim --outstanding`: the engine's request table is sized for this many.
pub fn outstanding(text: &str) -> Result<u64, String> {
    whole(text, 1, OUTSTANDING_MAX_DEFAULT)
}

/// `sim --files`: the fileserver's table holds twice as many.
pub fn files(text: &str) -> Result<u64, String> {
    whole(text, 1, FILESERVER_FILES_MAX / 2)
}

/// `sim --critical-issuers`: the engine's table of critical issuers.
pub fn critical_issuers(text: &str) -> Result<u32, String> {
    whole(text, 0, ISSUERS_MAX as u32)
}

/// `sim --timeline-ms`: virtual milliseconds, at most a day.
pub fn timeline_ms(text: &str) -> Result<u64, String> {
    whole(text, 1, SECONDS_MAX * 1000)
}

/// `sim --target-iops`.
pub fn iops(text: &str) -> Result<f64, String> {
    real(text, 1.0, 1e8, " of I/Os per second")
}

/// `sim --trace-speed`: a factor on the trace's times.
pub fn speed(text: &str) -> Result<f64, String> {
    real(text, 0.001, 1e6, "")
}

/// `stats --watch`: seconds between lines.
pub fn watch_s(text: &str) -> Result<f64, String> {
    real(text, 0.1, 3600.0, " of seconds")
}

/// `top --interval`: seconds between refreshes.
pub fn refresh_s(text: &str) -> Result<f64, String> {
    real(text, 0.1, 60.0, " of seconds")
}

/// `serve --stop-timeout`: the grace period of a stop, in seconds.
pub fn stop_timeout(text: &str) -> Result<f64, String> {
    real(text, 0.0, SECONDS_MAX as f64, " of seconds")
}

/// `mount --dirty-max`: a size (suffixes K, M, G) up to half the machine's
/// memory, or 0 (nothing held).
pub fn dirty_max(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a size up to 64G (e.g. 256M), or 0");
    match wcache_io::device::parse_size_bytes(text.trim()) {
        Some(bytes) if bytes <= 64 << 30 => Ok(bytes),
        _ => Err(bad()),
    }
}

/// `mount --dirty-expire`: seconds, from 0.1 to a day.
pub fn dirty_expire(text: &str) -> Result<f64, String> {
    real(text, 0.1, SECONDS_MAX as f64, "of seconds")
}

/// `serve --flush-interval`: 0 (only at FLUSH and FUA), or from a
/// millisecond to an hour.
pub fn flush_interval(text: &str) -> Result<f64, String> {
    match real(text, 0.0, 3600.0, "") {
        Ok(s) if s == 0.0 || s >= 0.001 => Ok(s),
        _ => Err(format!(
            "{text:?} is not a number of seconds from 0.001 to 3600, or 0"
        )),
    }
}

/// `serve --block-size`: a power of two up to what NBD allows.
pub fn block_size(text: &str) -> Result<u32, String> {
    let max = wcache_nbd::proto::BLOCK_SIZE_MIN_MAX_BYTES;
    match text.parse::<u32>() {
        Ok(n) if n.is_power_of_two() && n <= max => Ok(n),
        _ => Err(format!(
            "{text:?} is not a power of two of at most {max} bytes"
        )),
    }
}

/// Every option's value may be a negative number (`--seeds -1`), so that
/// the option's parser refuses it, naming the option, rather than clap
/// taking it for an unknown flag.
pub fn negative_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_subcommands(|c| {
        c.mut_args(|a| {
            if a.get_action().takes_values() {
                a.allow_negative_numbers(true)
            } else {
                a
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_the_rest_refused() {
        assert_eq!(threads("1"), Ok(1));
        assert_eq!(threads("1024"), Ok(1024));
        for bad in ["0", "1025", "-1", "", "1.5", "99999999999999999999999"] {
            let e = threads(bad).unwrap_err();
            assert!(e.contains("from 1 to 1024"), "{bad}: {e}");
        }
        assert_eq!(dirty_max("256M"), Ok(256 << 20));
        assert_eq!(dirty_max("0"), Ok(0));
        for bad in ["-1", "65G", "lots", ""] {
            assert!(dirty_max(bad).is_err(), "{bad}");
        }
        assert!(dirty_expire("0").is_err() && dirty_expire("30").is_ok());
        assert_eq!(flush_interval("0"), Ok(0.0));
        assert_eq!(flush_interval("0.001"), Ok(0.001));
        for bad in ["0.0001", "-1", "NaN", "inf", "3601"] {
            assert!(flush_interval(bad).is_err(), "{bad}");
        }
        for bad in ["NaN", "inf", "-inf", "0", "1e9"] {
            assert!(iops(bad).is_err(), "{bad}");
        }
    }
}
