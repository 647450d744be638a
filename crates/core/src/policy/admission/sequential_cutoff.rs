//! Sequential cutoff: a write that continues a sequential stream which has
//! already written `cutoff_bytes` bypasses the cache, whatever the inner
//! policy says (bcache's `sequential_cutoff`; large sequential writes gain
//! little from a cache and would push out the random writes that do). The
//! inner policy still sees every write, so its own state stays current.
//!
//! Streams are found by address: a write starting where a recent write of
//! the same volume ended continues that stream. The most recent
//! `STREAMS_MAX` streams are tracked; the least recently continued one is
//! forgotten first.

use super::{Admission, Admit, WriteInfo};
use crate::metrics::{MetricKind, MetricsVisitor};
use crate::types::VolumeId;

/// Streams tracked at once (bcache tracks 128 per cache set; a handful of
/// concurrent sequential writers is the common case for one volume).
pub const STREAMS_MAX: usize = 32;

#[derive(Clone, Copy)]
struct Stream {
    volume: VolumeId,
    end_bytes: u64,
    run_bytes: u64,
    /// The admission tick of its last write (for replacement).
    used: u64,
}

pub struct SequentialCutoff {
    inner: Box<dyn Admission>,
    cutoff_bytes: u64,
    streams: Vec<Stream>,
    tick: u64,
}

impl SequentialCutoff {
    pub fn new(inner: Box<dyn Admission>, cutoff_bytes: u64) -> SequentialCutoff {
        assert!(cutoff_bytes > 0, "a cutoff of 0 bytes is no cutoff");
        SequentialCutoff {
            inner,
            cutoff_bytes,
            streams: Vec::with_capacity(STREAMS_MAX),
            tick: 0,
        }
    }

    /// The bytes of the stream this write continues, itself included.
    fn run_bytes(&mut self, w: &WriteInfo) -> u64 {
        self.tick += 1;
        let end_bytes = w.offset_bytes.saturating_add(w.len_bytes);
        let found = self
            .streams
            .iter_mut()
            .find(|s| s.volume == w.volume && s.end_bytes == w.offset_bytes);
        if let Some(s) = found {
            s.end_bytes = end_bytes;
            s.run_bytes = s.run_bytes.saturating_add(w.len_bytes);
            s.used = self.tick;
            return s.run_bytes;
        }
        let fresh = Stream {
            volume: w.volume,
            end_bytes,
            run_bytes: w.len_bytes,
            used: self.tick,
        };
        if self.streams.len() < STREAMS_MAX {
            self.streams.push(fresh);
        } else {
            let oldest = self
                .streams
                .iter_mut()
                .min_by_key(|s| s.used)
                .expect("STREAMS_MAX > 0");
            *oldest = fresh;
        }
        debug_assert!(self.streams.len() <= STREAMS_MAX);
        w.len_bytes
    }
}

impl Admission for SequentialCutoff {
    fn name(&self) -> &'static str {
        "sequential-cutoff"
    }
    fn admit_write(&mut self, w: &WriteInfo) -> Admit {
        let inner = self.inner.admit_write(w);
        // The write that reaches the cutoff is the first to bypass.
        if self.run_bytes(w) >= self.cutoff_bytes {
            Admit::Bypass
        } else {
            inner
        }
    }
    fn inherits_io(&self, waiter: &WriteInfo) -> bool {
        self.inner.inherits_io(waiter)
    }
    fn metadata_bytes(&self) -> usize {
        self.streams.capacity() * std::mem::size_of::<Stream>() + self.inner.metadata_bytes()
    }
    fn report(&self, v: &mut dyn MetricsVisitor) {
        v.metric(
            MetricKind::Gauge,
            "admission_sequential_streams",
            "Sequential streams the cutoff tracks now.",
            self.streams.len() as u64,
        );
        self.inner.report(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::RequestFlags;
    use crate::policy::admission::All;

    fn write(volume: u16, offset_bytes: u64, len_bytes: u64) -> WriteInfo {
        WriteInfo {
            volume: VolumeId(volume),
            offset_bytes,
            len_bytes,
            flags: RequestFlags::default(),
            volume_critical: false,
            issuer_hinted: false,
            issuer_inherited: false,
        }
    }

    #[test]
    fn a_stream_bypasses_from_the_write_that_reaches_the_cutoff() {
        let mut a = SequentialCutoff::new(Box::new(All), 16384);
        let got: Vec<Admit> = (0..6)
            .map(|i| a.admit_write(&write(0, i * 4096, 4096)))
            .collect();
        use Admit::*;
        assert_eq!(got, [Cache, Cache, Cache, Bypass, Bypass, Bypass]);
        // A random write elsewhere, and the same offsets on another volume, start afresh.
        assert_eq!(a.admit_write(&write(0, 1 << 30, 4096)), Cache);
        assert_eq!(a.admit_write(&write(1, 6 * 4096, 4096)), Cache);
        // The first stream goes on where it stopped.
        assert_eq!(a.admit_write(&write(0, 6 * 4096, 4096)), Bypass);
    }

    #[test]
    fn tracks_a_bounded_number_of_streams_and_forgets_the_oldest() {
        let mut a = SequentialCutoff::new(Box::new(All), 8192);
        for s in 0..STREAMS_MAX as u64 + 1 {
            assert_eq!(a.admit_write(&write(0, s << 30, 4096)), Admit::Cache);
        }
        assert_eq!(a.streams.len(), STREAMS_MAX);
        // Stream 0 was forgotten: its continuation starts a new stream.
        assert_eq!(a.admit_write(&write(0, 4096, 4096)), Admit::Cache);
        // Stream STREAMS_MAX is remembered: its continuation reaches the cutoff.
        let last = (STREAMS_MAX as u64) << 30;
        assert_eq!(a.admit_write(&write(0, last + 4096, 4096)), Admit::Bypass);
    }

    #[test]
    fn a_large_write_alone_can_reach_the_cutoff() {
        let mut a = SequentialCutoff::new(Box::new(All), 1 << 20);
        assert_eq!(a.admit_write(&write(0, 0, 1 << 20)), Admit::Bypass);
        assert_eq!(
            a.admit_write(&write(0, 8 << 20, (1 << 20) - 1)),
            Admit::Cache
        );
    }
}
