//! A count per page of backing writes in flight over it, for the pages
//! that have one: the held pages (whose destages wait for such a write)
//! and the pages of bypass writes (which a write through the cache waits
//! for). Exact, not hashed into buckets: a false match would make a
//! write or a destage wait on someone else's page.

use rustc_hash::FxHashMap as HashMap;

use crate::types::PageKey;

#[derive(Default)]
pub(super) struct PageCounts(HashMap<u64, u32>);

impl PageCounts {
    /// One more backing write in flight over `key`'s page.
    pub(super) fn add(&mut self, key: PageKey) {
        *self.0.entry(key.0).or_default() += 1;
    }

    /// One backing write over `key`'s page landed (it was counted).
    pub(super) fn remove(&mut self, key: PageKey) {
        let n = self.0.get_mut(&key.0).expect("a page counted in flight");
        *n -= 1;
        if *n == 0 {
            self.0.remove(&key.0);
        }
    }

    #[inline]
    pub(super) fn contains(&self, key: PageKey) -> bool {
        !self.0.is_empty() && self.0.contains_key(&key.0)
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Backing writes counted, summed over the pages (for the checks).
    pub(super) fn total(&self) -> u64 {
        self.0.values().map(|&n| u64::from(n)).sum()
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.0.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
    }

    /// No page is left at zero (`what` names the counts in the message).
    pub(super) fn check(&self, what: &str) {
        assert!(
            self.0.values().all(|&n| n > 0),
            "a page left in {what} at zero"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{PageIndex, VolumeId};

    #[test]
    fn a_page_is_counted_until_its_last_write_lands() {
        let mut c = PageCounts::default();
        let k = PageKey::new(VolumeId(1), PageIndex(9));
        assert!(!c.contains(k) && c.is_empty());
        c.add(k);
        c.add(k);
        c.remove(k);
        assert!(c.contains(k) && c.total() == 1);
        c.remove(k);
        assert!(!c.contains(k) && c.is_empty());
        c.check("test");
    }
}
