//! The recent-write filter that guards read-miss insertion: a read miss
//! copies the backing's bytes into the cache only if no write to those
//! pages was admitted, and no backing write of them was in flight, since
//! the read was issued (its bytes could be older than the write's).
//! Hashed buckets, so a false match only skips a copy, never keeps a stale one.

use crate::types::PageKey;

/// Buckets of the filter.
pub(super) const BUCKETS: usize = 4096;

pub(super) struct WriteFilter {
    /// Moves on at every write admitted and every backing write landed.
    seq: u64,
    /// Per bucket, the `seq` of its last write.
    last: Vec<u64>,
    /// Per bucket, backing writes in flight.
    in_flight: Vec<u32>,
}

impl Default for WriteFilter {
    fn default() -> WriteFilter {
        WriteFilter {
            seq: 0,
            last: vec![0; BUCKETS],
            in_flight: vec![0; BUCKETS],
        }
    }
}

#[inline]
fn bucket(key: PageKey) -> usize {
    (key.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize % BUCKETS
}

impl WriteFilter {
    /// Where the filter stands: a read miss issued now keeps this.
    pub(super) fn now(&self) -> u64 {
        self.seq
    }

    /// A write of `key`'s page was admitted (to the cache or around it).
    #[inline]
    pub(super) fn written(&mut self, key: PageKey) {
        self.seq += 1;
        self.last[bucket(key)] = self.seq;
    }

    /// A backing write of `key`'s page was issued.
    #[inline]
    pub(super) fn backing_write_issued(&mut self, key: PageKey) {
        self.in_flight[bucket(key)] += 1;
    }

    /// A backing write of `key`'s page landed: a read miss issued while it
    /// was in flight may have read the old bytes.
    #[inline]
    pub(super) fn backing_write_landed(&mut self, key: PageKey) {
        let b = bucket(key);
        debug_assert!(
            self.in_flight[b] > 0,
            "a backing write landed that was not issued"
        );
        self.in_flight[b] -= 1;
        self.written(key);
    }

    /// A read miss issued at `since` may insert `key`'s page: no write of
    /// it (or of a page sharing its bucket) was admitted since, and no
    /// backing write of it is in flight.
    #[inline]
    pub(super) fn unwritten_since(&self, key: PageKey, since: u64) -> bool {
        let b = bucket(key);
        self.last[b] <= since && self.in_flight[b] == 0
    }

    /// Backing writes in flight, summed over the buckets (for the checks).
    pub(super) fn backing_writes_in_flight(&self) -> u64 {
        self.in_flight.iter().map(|&n| u64::from(n)).sum()
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.last.capacity() * 8 + self.in_flight.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{PageIndex, VolumeId};

    #[test]
    fn a_read_may_insert_only_what_no_write_touched_since_it_was_issued() {
        let mut f = WriteFilter::default();
        let (a, b) = (
            PageKey::new(VolumeId(0), PageIndex(1)),
            PageKey::new(VolumeId(0), PageIndex(2)),
        );
        let read_at = f.now();
        assert!(f.unwritten_since(a, read_at));
        f.written(a);
        assert!(
            !f.unwritten_since(a, read_at),
            "written after the read was issued"
        );
        let read_at = f.now();
        assert!(
            f.unwritten_since(a, read_at),
            "a read issued after the write"
        );
        f.backing_write_issued(b);
        assert!(!f.unwritten_since(b, read_at), "a backing write in flight");
        f.backing_write_landed(b);
        assert!(
            !f.unwritten_since(b, read_at),
            "landed after the read was issued"
        );
        assert!(f.unwritten_since(b, f.now()));
        assert_eq!(f.backing_writes_in_flight(), 0);
    }
}
