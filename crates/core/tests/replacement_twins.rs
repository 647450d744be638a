//! Reference twins for the replacement policies: each optimized policy is run
//! side by side with a deliberately simple model (queues of `Vec`/`VecDeque`,
//! linear searches) on random operation sequences, and must choose the same
//! victims, report the same length, and never grow its metadata.
//!
//! Exists so the link arithmetic, bit sets and ARC's ghost hash index are
//! checked against code short enough to check by eye. The models restate the
//! semantics documented in each policy's module header; they share no code
//! with the policies.

use std::collections::VecDeque;

use proptest::prelude::*;
use wcache_core::policy::replacement::{Arc, Clock, Lru, Replacement};
use wcache_core::types::{PageKey, SlotIndex};

/// Same calls as `Replacement`, on a simple model.
trait Model {
    fn insert(&mut self, slot: u32, key: u64);
    fn hit(&mut self, slot: u32);
    fn remove(&mut self, slot: u32);
    fn evict(&mut self) -> Option<u32>;
    fn evict_for(&mut self, key: u64) -> Option<u32>;
    fn len(&self) -> usize;
}

/// LRU: front is least recent.
#[derive(Default)]
struct ModelLru {
    queue: VecDeque<u32>,
}

impl Model for ModelLru {
    fn insert(&mut self, slot: u32, _key: u64) {
        self.queue.push_back(slot);
    }
    fn hit(&mut self, slot: u32) {
        self.remove(slot);
        self.queue.push_back(slot);
    }
    fn remove(&mut self, slot: u32) {
        let at = self.queue.iter().position(|&s| s == slot).expect("present");
        self.queue.remove(at);
    }
    fn evict(&mut self) -> Option<u32> {
        self.queue.pop_front()
    }
    fn evict_for(&mut self, _key: u64) -> Option<u32> {
        self.evict()
    }
    fn len(&self) -> usize {
        self.queue.len()
    }
}

/// CLOCK as FIFO with second chance: front is the hand.
#[derive(Default)]
struct ModelClock {
    ring: VecDeque<(u32, bool)>,
}

impl Model for ModelClock {
    fn insert(&mut self, slot: u32, _key: u64) {
        self.ring.push_back((slot, false));
    }
    fn hit(&mut self, slot: u32) {
        let entry = self
            .ring
            .iter_mut()
            .find(|(s, _)| *s == slot)
            .expect("present");
        entry.1 = true;
    }
    fn remove(&mut self, slot: u32) {
        let at = self
            .ring
            .iter()
            .position(|(s, _)| *s == slot)
            .expect("present");
        self.ring.remove(at);
    }
    fn evict(&mut self) -> Option<u32> {
        loop {
            let (slot, referenced) = self.ring.pop_front()?;
            if !referenced {
                return Some(slot);
            }
            self.ring.push_back((slot, false));
        }
    }
    fn evict_for(&mut self, _key: u64) -> Option<u32> {
        self.evict()
    }
    fn len(&self) -> usize {
        self.ring.len()
    }
}

/// ARC over plain vectors of keys; index 0 is the LRU end of each list.
struct ModelArc {
    c: usize,
    p: f64,
    t1: Vec<u64>,
    t2: Vec<u64>,
    b1: Vec<u64>,
    b2: Vec<u64>,
    /// (slot, key) of resident pages.
    resident: Vec<(u32, u64)>,
    promote_next: Option<u64>,
}

impl ModelArc {
    fn new(c: usize) -> ModelArc {
        ModelArc {
            c,
            p: 0.0,
            t1: Vec::new(),
            t2: Vec::new(),
            b1: Vec::new(),
            b2: Vec::new(),
            resident: Vec::new(),
            promote_next: None,
        }
    }

    fn take(list: &mut Vec<u64>, key: u64) -> bool {
        match list.iter().position(|&k| k == key) {
            Some(at) => {
                list.remove(at);
                true
            }
            None => false,
        }
    }

    fn key_of(&self, slot: u32) -> u64 {
        self.resident
            .iter()
            .find(|(s, _)| *s == slot)
            .expect("present")
            .1
    }

    fn slot_of(&mut self, key: u64) -> u32 {
        let at = self
            .resident
            .iter()
            .position(|(_, k)| *k == key)
            .expect("resident");
        self.resident.remove(at).0
    }

    fn adapt(&mut self, in_b2: bool) {
        let b1 = self.b1.len() as f64;
        let b2 = self.b2.len() as f64;
        if in_b2 {
            self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
        } else {
            self.p = (self.p + (b2 / b1).max(1.0)).min(self.c as f64);
        }
    }

    /// Takes `key` out of B1 or B2 if there, adapting p. Returns whether it was there.
    fn ghost_hit(&mut self, key: u64) -> Option<bool> {
        if self.b1.contains(&key) {
            self.adapt(false);
            Self::take(&mut self.b1, key);
            Some(false)
        } else if self.b2.contains(&key) {
            self.adapt(true);
            Self::take(&mut self.b2, key);
            Some(true)
        } else {
            None
        }
    }

    fn add_ghost(&mut self, key: u64, to_b2: bool) {
        if self.b1.len() + self.b2.len() == self.c {
            let own_empty = if to_b2 {
                self.b2.is_empty()
            } else {
                self.b1.is_empty()
            };
            let drop_b2 = to_b2 != own_empty;
            let list = if drop_b2 { &mut self.b2 } else { &mut self.b1 };
            list.remove(0);
        }
        if to_b2 {
            self.b2.push(key);
        } else {
            self.b1.push(key);
        }
    }

    fn replace(&mut self, incoming_in_b2: bool) -> Option<u32> {
        let t1 = self.t1.len() as f64;
        let from_t1 = (!self.t1.is_empty() && (t1 > self.p || (t1 == self.p && incoming_in_b2)))
            || self.t2.is_empty();
        let list = if from_t1 { &mut self.t1 } else { &mut self.t2 };
        if list.is_empty() {
            return None;
        }
        let key = list.remove(0);
        self.add_ghost(key, !from_t1);
        Some(self.slot_of(key))
    }

    fn total(&self) -> usize {
        self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len()
    }
}

impl Model for ModelArc {
    fn insert(&mut self, slot: u32, key: u64) {
        // Short-circuit: a key `evict_for` already promoted is no longer a ghost.
        let to_t2 = if self.promote_next.take() == Some(key) || self.ghost_hit(key).is_some() {
            true
        } else {
            if self.t1.len() + self.b1.len() >= self.c && !self.b1.is_empty() {
                self.b1.remove(0);
            }
            if self.total() >= 2 * self.c {
                if self.b2.is_empty() {
                    self.b1.remove(0);
                } else {
                    self.b2.remove(0);
                }
            }
            false
        };
        if to_t2 {
            self.t2.push(key);
        } else {
            self.t1.push(key);
        }
        self.resident.push((slot, key));
    }
    fn hit(&mut self, slot: u32) {
        let key = self.key_of(slot);
        if !Self::take(&mut self.t2, key) {
            assert!(Self::take(&mut self.t1, key));
        }
        self.t2.push(key);
    }
    fn remove(&mut self, slot: u32) {
        let key = self.key_of(slot);
        if !Self::take(&mut self.t1, key) {
            assert!(Self::take(&mut self.t2, key));
        }
        self.slot_of(key);
    }
    fn evict(&mut self) -> Option<u32> {
        self.promote_next = None;
        self.replace(false)
    }
    fn evict_for(&mut self, key: u64) -> Option<u32> {
        self.promote_next = None;
        if let Some(in_b2) = self.ghost_hit(key) {
            self.promote_next = Some(key);
            return self.replace(in_b2);
        }
        if self.t1.len() + self.b1.len() >= self.c {
            if !self.b1.is_empty() {
                self.b1.remove(0);
                self.replace(false)
            } else {
                if self.t1.is_empty() {
                    return None;
                }
                let key = self.t1.remove(0);
                Some(self.slot_of(key))
            }
        } else {
            if self.total() >= 2 * self.c && !self.b2.is_empty() {
                self.b2.remove(0);
            }
            self.replace(false)
        }
    }
    fn len(&self) -> usize {
        self.t1.len() + self.t2.len()
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Access to key `k`: hit if resident, else a miss (evict_for when full, then insert).
    Access(u64),
    /// Insert `k` into a free slot chosen by `pick`, if any and `k` not resident.
    InsertFree(u64, usize),
    /// Remove the resident page chosen by `pick`.
    Remove(usize),
    /// Evict without inserting (the engine makes room for a dirty page).
    Evict,
    /// Ask for a victim for `k` but insert nothing (an abandoned miss).
    EvictForOnly(u64),
}

fn ops(keys: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        10 => (0..keys).prop_map(Op::Access),
        3 => (0..keys, any::<usize>()).prop_map(|(k, p)| Op::InsertFree(k, p)),
        2 => any::<usize>().prop_map(Op::Remove),
        2 => Just(Op::Evict),
        1 => (0..keys).prop_map(Op::EvictForOnly),
    ];
    prop::collection::vec(op, 1..400)
}

/// Drives policy and model with the same calls; the slots and keys in use are
/// tracked here, so both only ever see valid calls.
fn run_twins(policy: &mut dyn Replacement, model: &mut dyn Model, slots: usize, ops: &[Op]) {
    let metadata_bytes = policy.metadata_bytes();
    let mut resident: Vec<(u32, u64)> = Vec::new();
    let mut free: Vec<u32> = (0..slots as u32).collect();
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Access(key) => {
                if let Some(&(slot, _)) = resident.iter().find(|(_, k)| *k == key) {
                    policy.hit(SlotIndex(slot));
                    model.hit(slot);
                } else {
                    let slot = if let Some(slot) = free.pop() {
                        slot
                    } else {
                        let victim = policy.evict_for(PageKey(key)).map(|s| s.0);
                        assert_eq!(victim, model.evict_for(key), "step {step}: {op:?}");
                        let victim = victim.expect("full cache has a victim");
                        resident.retain(|(s, _)| *s != victim);
                        victim
                    };
                    policy.insert(SlotIndex(slot), PageKey(key));
                    model.insert(slot, key);
                    resident.push((slot, key));
                }
            }
            Op::InsertFree(key, pick) => {
                if free.is_empty() || resident.iter().any(|(_, k)| *k == key) {
                    continue;
                }
                let slot = free.swap_remove(pick % free.len());
                policy.insert(SlotIndex(slot), PageKey(key));
                model.insert(slot, key);
                resident.push((slot, key));
            }
            Op::Remove(pick) => {
                if resident.is_empty() {
                    continue;
                }
                let (slot, _) = resident.swap_remove(pick % resident.len());
                policy.remove(SlotIndex(slot));
                model.remove(slot);
                free.push(slot);
            }
            Op::Evict => {
                let victim = policy.evict().map(|s| s.0);
                assert_eq!(victim, model.evict(), "step {step}: {op:?}");
                if let Some(victim) = victim {
                    resident.retain(|(s, _)| *s != victim);
                    free.push(victim);
                }
            }
            Op::EvictForOnly(key) => {
                if resident.iter().any(|(_, k)| *k == key) {
                    continue;
                }
                let victim = policy.evict_for(PageKey(key)).map(|s| s.0);
                assert_eq!(victim, model.evict_for(key), "step {step}: {op:?}");
                if let Some(victim) = victim {
                    resident.retain(|(s, _)| *s != victim);
                    free.push(victim);
                }
            }
        }
        assert_eq!(policy.len(), model.len(), "step {step}: {op:?}");
        assert_eq!(policy.len(), resident.len(), "step {step}: {op:?}");
        assert_eq!(policy.metadata_bytes(), metadata_bytes, "metadata grew");
    }
    // Drain: the remaining victims come out in the same order.
    while let Some(victim) = model.evict() {
        assert_eq!(policy.evict(), Some(SlotIndex(victim)), "drain");
    }
    assert_eq!(policy.evict(), None);
    assert!(policy.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn replacement_lru_twin(slots in 1usize..12, ops in ops(30)) {
        run_twins(&mut Lru::new(slots), &mut ModelLru::default(), slots, &ops);
    }

    #[test]
    fn replacement_clock_twin(slots in 1usize..12, ops in ops(30)) {
        run_twins(&mut Clock::new(slots), &mut ModelClock::default(), slots, &ops);
    }

    #[test]
    fn replacement_arc_twin(slots in 1usize..12, ops in ops(36)) {
        let mut arc = Arc::new(slots);
        let mut model = ModelArc::new(slots);
        run_twins(&mut arc, &mut model, slots, &ops);
        prop_assert_eq!(arc.target_t1_pages(), model.p);
        prop_assert_eq!(
            arc.list_lens(),
            (model.t1.len(), model.t2.len(), model.b1.len(), model.b2.len())
        );
    }
}

/// ARC's bounds hold under every kind of call, not only on a full cache.
#[test]
fn replacement_arc_directory_bounds_under_removes() {
    let slots = 16;
    let mut arc = Arc::new(slots);
    let mut model = ModelArc::new(slots);
    let mut state = 7u64;
    let mut ops = Vec::new();
    for _ in 0..20_000 {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
        let r = state >> 33;
        ops.push(match r % 10 {
            0 => Op::Remove(r as usize),
            1 => Op::Evict,
            2 => Op::InsertFree(r % 64, r as usize),
            _ => Op::Access(r % 48),
        });
    }
    run_twins(&mut arc, &mut model, slots, &ops);
    let (t1, t2, b1, b2) = arc.list_lens();
    assert!(t1 + b1 <= slots);
    assert!(b1 + b2 <= slots);
    assert!(t1 + t2 + b1 + b2 <= 2 * slots);
}
