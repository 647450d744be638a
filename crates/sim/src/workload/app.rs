//! What simulated applications share: their measures (requests per second
//! and request latency, not I/O), and the record of who blocks on what
//! (Kim et al., ATC'15 §4.2.3) that turns a critical process's wait into
//! criticality inheritance hints for the engine. Nothing here allocates
//! after construction, and nothing looks at the cache.

use std::collections::VecDeque;

use hdrhistogram::Histogram;
use wcache_core::time::Nanos;

/// The `Workload` methods every application writes the same way, from
/// its fields `stopped`, `in_flight`, `ready_at`, `issued`, `completed`,
/// `critical`, `blocking` and `meter`.
macro_rules! app_workload_methods {
    () => {
        fn finished(&self) -> bool {
            self.stopped && self.in_flight == 0 && self.ready_at.iter().all(Option::is_none)
        }

        fn stats(&self) -> WorkloadStats {
            WorkloadStats {
                requests_issued: self.issued,
                requests_completed: self.completed,
                ..WorkloadStats::default()
            }
        }

        fn critical_issuers(&self) -> &[u32] {
            &self.critical
        }

        fn take_hint(&mut self) -> Option<CriticalityHint> {
            self.blocking.hints.take()
        }

        fn measure_start(&mut self, now: Nanos) {
            self.meter.start(now, self.blocking.hints.inherits);
        }

        fn measure_stop(&mut self, now: Nanos) {
            self.meter.stop(now, self.blocking.hints.inherits);
        }
    };
}
pub(crate) use app_workload_methods;

/// A criticality hint from an application to the engine. Issuers are
/// numbered from 1 (0 is the untagged issuer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CriticalityHint {
    /// The issuer inherits criticality from one more cause
    /// (`Engine::inherit_criticality`).
    Inherit(u32),
    /// One cause of the issuer's inherited criticality ended
    /// (`Engine::end_inherited_criticality`). Each `Inherit` is ended by one.
    EndInherit(u32),
}

/// What an application measured over its window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AppReport {
    /// What a request is: "transactions", "commands".
    pub unit: &'static str,
    /// Requests completed inside the window.
    pub requests: u64,
    pub window_ns: u64,
    pub per_s: f64,
    pub latency_ms_mean: f64,
    pub latency_ms_p50: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_p999: f64,
    pub latency_ms_p9999: f64,
    /// `Inherit` hints given inside the window, and over the whole run.
    pub inherits: u64,
    pub inherits_total: u64,
    /// `Inherit` hints not yet ended when the report was made.
    pub inherits_open: u64,
    /// Write requests per process role over the whole run, in a fixed order.
    pub writes_by_role: Vec<(&'static str, u64)>,
    /// What the critical processes waited for, by kind, over the whole run
    /// (the paper's Table 2 for this application).
    pub waits: Vec<(&'static str, WaitStat)>,
}

impl AppReport {
    /// Fraction of all writes that role `name` issued (0 without writes).
    pub fn write_share(&self, name: &str) -> f64 {
        let total: u64 = self.writes_by_role.iter().map(|r| r.1).sum();
        let mine = self
            .writes_by_role
            .iter()
            .find(|r| r.0 == name)
            .map_or(0, |r| r.1);
        if total == 0 {
            0.0
        } else {
            mine as f64 / total as f64
        }
    }
}

/// Waits of one kind: how many, their total and the longest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitStat {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

impl WaitStat {
    pub(crate) fn add(&mut self, ns: u64) {
        self.count += 1;
        self.total_ns += ns;
        self.max_ns = self.max_ns.max(ns);
    }
}

impl WaitStat {
    pub fn mean_ms(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_ns as f64 / self.count as f64 / 1e6
        }
    }
    pub fn max_ms(&self) -> f64 {
        self.max_ns as f64 / 1e6
    }
}

/// Largest request latency recorded exactly (longer ones count as this): 1000 s.
const LATENCY_US_MAX: u64 = 1_000_000_000;

/// Request latencies and counts over the measured window.
pub(crate) struct AppMeter {
    unit: &'static str,
    latency: Histogram<u64>,
    start: Option<Nanos>,
    stop: Option<Nanos>,
    requests: u64,
    inherits_at_start: u64,
    inherits_at_stop: Option<u64>,
}

impl AppMeter {
    pub(crate) fn new(unit: &'static str) -> AppMeter {
        AppMeter {
            unit,
            latency: Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid bounds"),
            start: None,
            stop: None,
            requests: 0,
            inherits_at_start: 0,
            inherits_at_stop: None,
        }
    }

    pub(crate) fn start(&mut self, now: Nanos, inherits: u64) {
        if self.start.is_none() {
            self.start = Some(now);
            self.inherits_at_start = inherits;
            self.latency.reset();
            self.requests = 0;
        }
    }

    pub(crate) fn stop(&mut self, now: Nanos, inherits: u64) {
        if self.start.is_some() && self.stop.is_none() {
            self.stop = Some(now);
            self.inherits_at_stop = Some(inherits);
        }
    }

    /// A request that began at `began` completed at `now`.
    pub(crate) fn completed(&mut self, began: Nanos, now: Nanos) {
        if self.start.is_none() || self.stop.is_some() {
            return;
        }
        let us = (now.saturating_sub(began).0 / 1000).clamp(1, LATENCY_US_MAX);
        self.latency.saturating_record(us);
        self.requests += 1;
    }

    pub(crate) fn report(
        &self,
        hints: &Hints,
        writes_by_role: Vec<(&'static str, u64)>,
        waits: Vec<(&'static str, WaitStat)>,
    ) -> AppReport {
        let window_ns = match (self.start, self.stop) {
            (Some(a), Some(b)) => b.0.saturating_sub(a.0),
            _ => 0,
        };
        let q = |f: f64| {
            if self.latency.is_empty() {
                0.0
            } else {
                self.latency.value_at_quantile(f) as f64 / 1000.0
            }
        };
        let inherits_end = self.inherits_at_stop.unwrap_or(hints.inherits);
        AppReport {
            unit: self.unit,
            requests: self.requests,
            window_ns,
            per_s: if window_ns == 0 {
                0.0
            } else {
                self.requests as f64 / (window_ns as f64 / 1e9)
            },
            latency_ms_mean: if self.latency.is_empty() {
                0.0
            } else {
                self.latency.mean() / 1000.0
            },
            latency_ms_p50: q(0.5),
            latency_ms_p99: q(0.99),
            latency_ms_p999: q(0.999),
            latency_ms_p9999: q(0.9999),
            inherits: inherits_end.saturating_sub(self.inherits_at_start),
            inherits_total: hints.inherits,
            inherits_open: hints.inherits - hints.ends,
            writes_by_role,
            waits,
        }
    }
}

/// The queue of hints for the simulation to take, with their counts.
pub(crate) struct Hints {
    queue: VecDeque<CriticalityHint>,
    pub(crate) inherits: u64,
    pub(crate) ends: u64,
}

impl Hints {
    fn new(capacity: usize) -> Hints {
        Hints {
            queue: VecDeque::with_capacity(capacity),
            inherits: 0,
            ends: 0,
        }
    }
    fn push(&mut self, h: CriticalityHint) {
        match h {
            CriticalityHint::Inherit(_) => self.inherits += 1,
            CriticalityHint::EndInherit(_) => self.ends += 1,
        }
        debug_assert!(self.queue.len() < self.queue.capacity() || self.queue.capacity() == 0);
        self.queue.push_back(h);
    }
    pub(crate) fn take(&mut self) -> Option<CriticalityHint> {
        self.queue.pop_front()
    }
}

/// What a blocked process waits for (its blocking object).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocker {
    /// An application lock (index into the lock table).
    Lock(usize),
    /// An event that process `p` will signal (a commit, the end of a job).
    Event(usize),
}

/// Processes (index 0.. = issuer 1..), their blocking objects, and the
/// locks' holders. When a process that is critical (hinted, or inheriting)
/// blocks, every process on the chain of blocking objects from it inherits
/// criticality (lock -> holder, event -> the process that signals it, and on
/// through whatever that one is blocked on: Fig. 3c); each of those
/// inheritances ends when the wait that caused it ends.
pub(crate) struct Blocking {
    hinted: Vec<bool>,
    /// Inheritance causes in force per process (from our own hints).
    inherited: Vec<u32>,
    blocked_on: Vec<Option<Blocker>>,
    /// Processes that inherited because of this process's current wait.
    caused: Vec<Vec<usize>>,
    holders: Vec<Option<usize>>,
    pub(crate) hints: Hints,
}

impl Blocking {
    pub(crate) fn new(processes: usize, locks: usize, hinted: &[usize]) -> Blocking {
        let mut h = vec![false; processes];
        for &p in hinted {
            h[p] = true;
        }
        Blocking {
            hinted: h,
            inherited: vec![0; processes],
            blocked_on: vec![None; processes],
            caused: (0..processes)
                .map(|_| Vec::with_capacity(processes))
                .collect(),
            holders: vec![None; locks],
            // Each wait causes at most one inherit per other process, and
            // each cause one end: bounded by 2 p^2 between two takes.
            hints: Hints::new(2 * processes * processes + 8),
        }
    }

    fn issuer(p: usize) -> u32 {
        p as u32 + 1
    }

    pub(crate) fn critical(&self, p: usize) -> bool {
        self.hinted[p] || self.inherited[p] > 0
    }

    pub(crate) fn holder(&self, lock: usize) -> Option<usize> {
        self.holders[lock]
    }

    /// `p` takes `lock` if it is free (true), else blocks on it (false).
    pub(crate) fn acquire(&mut self, p: usize, lock: usize) -> bool {
        match self.holders[lock] {
            None => {
                self.holders[lock] = Some(p);
                true
            }
            Some(h) => {
                debug_assert_ne!(h, p, "process {p} takes lock {lock} twice");
                self.block(p, Blocker::Lock(lock));
                false
            }
        }
    }

    /// `p` releases `lock`; the lock is free (the caller hands it on).
    pub(crate) fn release(&mut self, p: usize, lock: usize) {
        assert_eq!(self.holders[lock], Some(p), "release of a lock not held");
        self.holders[lock] = None;
    }

    /// `p`, blocked on `lock`, now holds it: its wait ends.
    pub(crate) fn grant(&mut self, p: usize, lock: usize) {
        assert_eq!(self.holders[lock], None, "grant of a held lock");
        assert_eq!(self.blocked_on[p], Some(Blocker::Lock(lock)));
        self.holders[lock] = Some(p);
        self.unblock(p);
    }

    /// `p` is about to sleep on `b`: record it, and if `p` is critical, make
    /// every process on the chain of blocking objects inherit.
    pub(crate) fn block(&mut self, p: usize, b: Blocker) {
        assert!(self.blocked_on[p].is_none(), "process {p} blocks twice");
        self.blocked_on[p] = Some(b);
        if self.critical(p) {
            self.propagate(p, b);
        }
    }

    fn propagate(&mut self, p: usize, first: Blocker) {
        let mut next = Some(first);
        let mut steps = 0;
        while let Some(b) = next {
            let q = match b {
                Blocker::Lock(l) => match self.holders[l] {
                    Some(h) => h,
                    None => break,
                },
                Blocker::Event(q) => q,
            };
            steps += 1;
            // A chain through every process once at most (no cycles here,
            // but a bound keeps a modelling error from looping).
            if q == p || steps > self.hinted.len() {
                break;
            }
            if !self.hinted[q] {
                self.inherited[q] += 1;
                self.caused[p].push(q);
                self.hints.push(CriticalityHint::Inherit(Self::issuer(q)));
            }
            next = self.blocked_on[q];
        }
    }

    /// `p`'s wait is over: the inheritances it caused end.
    pub(crate) fn unblock(&mut self, p: usize) {
        assert!(self.blocked_on[p].is_some(), "process {p} was not blocked");
        self.blocked_on[p] = None;
        while let Some(q) = self.caused[p].pop() {
            self.inherited[q] -= 1;
            self.hints
                .push(CriticalityHint::EndInherit(Self::issuer(q)));
        }
    }
}

/// A filesystem journal thread (jbd2): it commits when a process asks
/// and waits for the commit (an fsync that changed metadata), or on its own
/// when its owner says so (the periodic commit). Waiters that arrive while a
/// commit is in flight wait for the next one. One commit is one sync write
/// of `commit_bytes` at the head of a journal region, going round it.
pub(crate) struct Journal {
    /// The jbd2 process (index; issuer = index + 1).
    pub(crate) process: usize,
    pub(crate) volume: u32,
    base_bytes: u64,
    len_bytes: u64,
    head_bytes: u64,
    commit_bytes: u64,
    /// The commit in flight.
    pub(crate) committing: Option<u64>,
    current: Vec<usize>,
    next: Vec<usize>,
    /// A commit is wanted with nobody waiting (periodic).
    wanted: bool,
}

impl Journal {
    pub(crate) fn new(
        process: usize,
        processes: usize,
        volume: u32,
        base_bytes: u64,
        len_bytes: u64,
        commit_bytes: u64,
    ) -> Journal {
        assert!(commit_bytes > 0 && commit_bytes <= len_bytes);
        Journal {
            process,
            volume,
            base_bytes,
            len_bytes,
            head_bytes: 0,
            commit_bytes,
            committing: None,
            current: Vec::with_capacity(processes),
            next: Vec::with_capacity(processes),
            wanted: false,
        }
    }

    /// `p` blocks until a commit that starts from now on is done.
    pub(crate) fn wait(&mut self, p: usize, blocking: &mut Blocking) {
        debug_assert!(self.next.len() < self.next.capacity());
        self.next.push(p);
        blocking.block(p, Blocker::Event(self.process));
    }

    /// Ask for a commit with nobody waiting.
    pub(crate) fn want(&mut self) {
        self.wanted = true;
    }

    /// Whether a commit should start now.
    pub(crate) fn should_start(&self) -> bool {
        self.committing.is_none() && (self.wanted || !self.next.is_empty())
    }

    /// Start a commit as request `id`: (offset, length) of its write.
    pub(crate) fn start(&mut self, id: u64) -> (u64, u64) {
        debug_assert!(self.committing.is_none() && self.current.is_empty());
        std::mem::swap(&mut self.current, &mut self.next);
        self.wanted = false;
        self.committing = Some(id);
        if self.head_bytes + self.commit_bytes > self.len_bytes {
            self.head_bytes = 0;
        }
        let offset = self.base_bytes + self.head_bytes;
        self.head_bytes += self.commit_bytes;
        (offset, self.commit_bytes)
    }

    /// The commit is on disk: its waiters wake (`woken` for each).
    pub(crate) fn done(&mut self, blocking: &mut Blocking, mut woken: impl FnMut(usize)) {
        self.committing = None;
        while let Some(p) = self.current.pop() {
            blocking.unblock(p);
            woken(p);
        }
    }
}

/// An exponential draw with mean `mean_ns` (0: always 0).
pub(crate) fn exp_ns(rng: &mut rand::rngs::SmallRng, mean_ns: f64) -> u64 {
    use rand::Rng;
    if mean_ns <= 0.0 {
        return 0;
    }
    let u: f64 = rng.gen::<f64>();
    (-(1.0 - u).ln() * mean_ns) as u64
}

/// Longest mean CPU time of a transaction or command: 10 s (a longer one
/// would overflow the virtual clock's arithmetic long before a run ends).
pub(crate) const CPU_US_MAX: f64 = 1e7;

/// A mean CPU time in µs: finite, 0 to `CPU_US_MAX`.
pub(crate) fn check_cpu_us(cpu_us_mean: f64) -> Result<(), super::WorkloadError> {
    if (0.0..=CPU_US_MAX).contains(&cpu_us_mean) {
        Ok(())
    } else {
        Err(invalid(
            "cpu_us_mean",
            format!("{cpu_us_mean} (must be 0 to {CPU_US_MAX} µs)"),
        ))
    }
}

/// Every named value is positive, and those in `blocks` whole 4 KiB blocks.
pub(crate) fn check_sizes(
    positive: &[(&str, u64)],
    blocks: &[(&str, u64)],
) -> Result<(), super::WorkloadError> {
    if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
        return Err(invalid(name, "must be positive"));
    }
    if let Some((name, v)) = blocks
        .iter()
        .find(|(_, v)| *v == 0 || !v.is_multiple_of(super::BLOCK_BYTES))
    {
        return Err(invalid(
            name,
            format!("{v} is not a positive whole number of 4 KiB blocks"),
        ));
    }
    Ok(())
}

/// A bad parameter, named.
pub(crate) fn invalid(field: &str, problem: impl std::fmt::Display) -> super::WorkloadError {
    super::WorkloadError::InvalidConfig(format!("{field}: {problem}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(b: &mut Blocking) -> Vec<CriticalityHint> {
        std::iter::from_fn(|| b.hints.take()).collect()
    }

    #[test]
    fn a_critical_waiter_makes_the_lock_holder_inherit_until_it_gets_the_lock() {
        let mut b = Blocking::new(3, 1, &[0]);
        assert!(b.acquire(1, 0));
        assert!(!b.acquire(0, 0));
        assert_eq!(drain(&mut b), [CriticalityHint::Inherit(2)]);
        assert!(b.critical(1));
        b.release(1, 0);
        b.grant(0, 0);
        assert_eq!(drain(&mut b), [CriticalityHint::EndInherit(2)]);
        assert!(!b.critical(1));
        // A non-critical waiter makes nobody inherit.
        assert!(!b.acquire(2, 0));
        assert_eq!(drain(&mut b), []);
    }

    #[test]
    fn a_cascade_through_a_lock_and_an_event_makes_both_inherit() {
        // P1 (0) waits on a lock held by P2 (1), who waits on an event of P3 (2).
        let mut b = Blocking::new(3, 1, &[0]);
        assert!(b.acquire(1, 0));
        b.block(1, Blocker::Event(2));
        assert_eq!(drain(&mut b), [], "P2 is not critical yet");
        assert!(!b.acquire(0, 0));
        assert_eq!(
            drain(&mut b),
            [CriticalityHint::Inherit(2), CriticalityHint::Inherit(3)]
        );
        b.unblock(1); // P3 signals
        assert_eq!(drain(&mut b), [], "P3 inherits until P1's wait ends");
        b.release(1, 0);
        b.grant(0, 0);
        let mut ends = drain(&mut b);
        ends.sort_by_key(|h| format!("{h:?}"));
        assert_eq!(
            ends,
            [
                CriticalityHint::EndInherit(2),
                CriticalityHint::EndInherit(3)
            ]
        );
        assert_eq!(b.hints.inherits, b.hints.ends);
    }
}
