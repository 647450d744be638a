//! Staleness: how long dirty data has waited for the backing, and the two
//! bounds on it. Each dirty page carries the period it became dirty in (a
//! 2-bit tag per slot, four periods in a ring); a maximum dirty age expires
//! the groups of the oldest period, and an idle cache drains at a set rate.
//! The age reported is an upper bound, one period coarse.

use super::*;

/// Tags in the ring: three live periods and the one being recycled.
const TAGS: usize = 4;
/// Periods per maximum dirty age: a page is expired when its period is the
/// third before the current one, so at an age of at most three periods.
const PERIODS_PER_AGE: u64 = 3;
/// The period when no maximum age is set (then the reported age is this coarse).
const PERIOD_NS_UNBOUNDED: u64 = 10_000_000_000;

pub(super) struct Ages {
    period_ns: u64,
    /// The current period: the latest `now` seen, over `period_ns`.
    period: u64,
    /// Two bits per slot: the tag of the period in which the slot's page
    /// became dirty (meaningful while the slot is a page's dirty-set entry).
    tags: Vec<u64>,
    /// Dirty pages per tag.
    counts: [u64; TAGS],
    /// Per tag with pages: the start of the oldest period they became dirty in.
    since: [u64; TAGS],
    /// Groups holding a page past the maximum age, not yet destaged, in key order.
    expired: VecDeque<u64>,
}

impl Ages {
    pub fn new(slots: usize, max_dirty_age_ns: u64) -> Ages {
        let period_ns = if max_dirty_age_ns == 0 {
            PERIOD_NS_UNBOUNDED
        } else {
            (max_dirty_age_ns / PERIODS_PER_AGE).max(1)
        };
        Ages {
            period_ns,
            period: 0,
            tags: vec![0; slots.div_ceil(32)],
            counts: [0; TAGS],
            since: [0; TAGS],
            expired: VecDeque::new(),
        }
    }

    fn tag(&self, slot: u32) -> usize {
        let (word, shift) = (slot as usize / 32, (slot % 32) * 2);
        ((self.tags[word] >> shift) & 3) as usize
    }
    fn set_tag(&mut self, slot: u32, tag: usize) {
        let (word, shift) = (slot as usize / 32, (slot % 32) * 2);
        self.tags[word] = (self.tags[word] & !(3 << shift)) | ((tag as u64) << shift);
    }

    /// `slot` is a page that became dirty now.
    pub fn dirtied(&mut self, slot: u32) {
        let t = (self.period % TAGS as u64) as usize;
        if self.counts[t] == 0 {
            self.since[t] = self.period * self.period_ns;
        }
        self.counts[t] += 1;
        self.set_tag(slot, t);
    }
    /// A dirty page's entry moved from slot `from` to `to` (a new version of
    /// the page): it has been dirty as long as before.
    pub fn moved(&mut self, from: u32, to: u32) {
        let t = self.tag(from);
        self.set_tag(to, t);
    }
    /// The dirty page of `slot` is dirty no more.
    pub fn cleaned(&mut self, slot: u32) {
        let t = self.tag(slot);
        debug_assert!(self.counts[t] > 0, "dirty page count of tag {t} underflows");
        self.counts[t] -= 1;
    }

    /// The start of the oldest period a dirty page became dirty in.
    pub fn oldest_since(&self) -> Option<u64> {
        (0..TAGS)
            .filter(|&t| self.counts[t] > 0)
            .map(|t| self.since[t])
            .min()
    }

    pub fn has_expired(&self) -> bool {
        !self.expired.is_empty()
    }
    pub fn clear_expired(&mut self) {
        self.expired.clear();
    }

    pub fn heap_bytes(&self) -> usize {
        self.tags.capacity() * 8 + self.expired.capacity() * 8
    }
}

impl Engine {
    /// Bring the age periods up to `now`: each period that starts recycles
    /// the oldest tag (its pages join the next oldest), and with a maximum
    /// age set, the groups of the period three back expire.
    pub(super) fn advance_ages(&mut self, now: Nanos) {
        // Every request and completion comes here: a compare, no division,
        // until the period has turned.
        if now.0 < (self.ages.period + 1).saturating_mul(self.ages.period_ns) {
            return;
        }
        let period = now.0 / self.ages.period_ns;
        if self.dirty.pages() == 0 {
            self.ages.period = period;
            return;
        }
        // After a long quiet time, the ring folds in at most one lap.
        let from = self.ages.period.max(period.saturating_sub(TAGS as u64));
        for p in from + 1..=period {
            self.ages.period = p;
            self.turn_period(p);
        }
    }

    /// Period `p` starts: it takes tag `p % 4`, whose pages (of period
    /// `p - 4`, or expired ones not yet destaged) join tag `(p + 1) % 4`,
    /// the oldest live period; with a maximum age, that period expires.
    fn turn_period(&mut self, p: u64) {
        let (new, oldest) = ((p % 4) as usize, ((p + 1) % 4) as usize);
        let expiring = self.config.staleness.max_dirty_age_ns > 0;
        let ages = &mut self.ages;
        if expiring {
            // Re-collected below: every group still holding an expired page.
            ages.expired.clear();
        }
        if ages.counts[new] > 0 || (expiring && ages.counts[oldest] > 0) {
            let (dirty, keys) = (&self.dirty, self.slots.keys());
            let mut last_group = None;
            dirty.for_each_slot(|slot| {
                let t = ages.tag(slot);
                if t == new {
                    ages.set_tag(slot, oldest);
                }
                if expiring && (t == new || t == oldest) {
                    let gkey = dirty.group_of(keys[slot as usize]);
                    if last_group != Some(gkey) {
                        last_group = Some(gkey);
                        ages.expired.push_back(gkey);
                    }
                }
            });
            if ages.counts[new] > 0 {
                ages.since[oldest] = if ages.counts[oldest] > 0 {
                    ages.since[oldest].min(ages.since[new])
                } else {
                    ages.since[new]
                };
                ages.counts[oldest] += std::mem::take(&mut ages.counts[new]);
            }
        }
        ages.since[new] = p * ages.period_ns;
    }

    /// When the next period starts, if that matters: a maximum age is set
    /// and some page is dirty.
    pub(super) fn age_deadline(&self) -> Option<Nanos> {
        (self.config.staleness.max_dirty_age_ns > 0 && self.dirty.pages() > 0)
            .then(|| Nanos((self.ages.period + 1) * self.ages.period_ns))
    }

    /// When the cache counts as idle, if an idle drain is configured, has
    /// not started, and has something to drain.
    pub(super) fn idle_deadline(&self) -> Option<Nanos> {
        let s = &self.config.staleness;
        (s.idle_destages > 0 && !self.idle_draining && self.dirty.pages() > 0)
            .then(|| Nanos(self.last_request_at.0.saturating_add(s.idle_after_ns)))
    }

    /// The maximum dirty age changed: the periods start anew at `now`, and
    /// every page dirty now counts as dirtied now.
    pub(super) fn restart_ages(&mut self, now: Nanos) {
        let mut ages = Ages::new(
            self.slots.len() as usize,
            self.config.staleness.max_dirty_age_ns,
        );
        ages.period = now.0 / ages.period_ns;
        self.dirty.for_each_slot(|slot| ages.dirtied(slot));
        self.ages = ages;
    }

    /// A request arrived: the cache is not idle.
    pub(super) fn note_request(&mut self, now: Nanos) {
        self.last_request_at = now;
        self.idle_draining = false;
    }

    /// Destage expired groups, oldest period first, as far as the most
    /// outstanding destages allow.
    pub(super) fn destage_expired(&mut self) {
        while self.destager.in_flight() < self.config.rate.destages_max {
            let Some(gkey) = self.ages.expired.pop_front() else {
                return;
            };
            let keys = self.slots.keys();
            let Some(flags) = self.dirty.group_flags(keys, gkey) else {
                continue; // destaged (or overwritten and destaged) meanwhile
            };
            if flags & E_CANDIDATE != 0 {
                self.dirty.set_group_flags(keys, gkey, E_CANDIDATE, false);
                self.candidates -= 1;
                self.order.remove(view!(self), GroupKey(gkey));
            }
            self.stats.expired_groups += 1;
            self.issue_group_destages(gkey);
            self.group_changed(gkey);
        }
    }

    /// An upper bound on how long the backing has lagged the acknowledged
    /// writes: the age of the oldest dirty page, one period coarse (0 when
    /// nothing is dirty), at `now`.
    pub fn dirty_age_ns(&self, now: Nanos) -> u64 {
        self.ages
            .oldest_since()
            .map_or(0, |since| now.0.saturating_sub(since))
    }
}
