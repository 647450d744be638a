//! Deliberately simple twins of LRW, CSCAN and WOW, written straight from the
//! paper's Fig. 4 (a sorted Vec and an index as the destage pointer), and a
//! property test that the optimized policies pick the same sequence.

use super::*;
use proptest::prelude::*;

/// Literal Fig. 4 over a sorted vector; `use_bits` false makes it CSCAN.
struct RefSweep {
    groups: Vec<(GroupKey, u32, bool)>, // (key, id, recency bit), sorted by key
    pointer: usize,
    use_bits: bool,
}

impl RefSweep {
    fn new(use_bits: bool) -> Self {
        RefSweep {
            groups: Vec::new(),
            pointer: 0,
            use_bits,
        }
    }
    fn advance(&mut self) {
        if self.pointer + 1 >= self.groups.len() {
            self.pointer = 0;
        } else {
            self.pointer += 1;
        }
    }
    fn insert(&mut self, id: u32, key: GroupKey) {
        let pos = self
            .groups
            .iter()
            .position(|g| g.0 > key)
            .unwrap_or(self.groups.len());
        self.groups.insert(pos, (key, id, false));
        if self.groups.len() == 1 {
            self.pointer = 0;
        } else if pos <= self.pointer {
            self.pointer += 1;
        }
    }
    fn hit(&mut self, id: u32, hit: GroupHit) {
        let g = self.groups.iter_mut().find(|g| g.1 == id).unwrap();
        if !hit.sequential || hit.page_hit {
            g.2 = true;
        }
    }
    fn remove(&mut self, id: u32) {
        let pos = self.groups.iter().position(|g| g.1 == id).unwrap();
        self.groups.remove(pos);
        if pos < self.pointer {
            self.pointer -= 1;
        } else if pos == self.pointer && self.pointer >= self.groups.len() {
            self.pointer = 0;
        }
    }
    fn pick(&mut self) -> Option<u32> {
        if self.groups.is_empty() {
            return None;
        }
        while self.use_bits && self.groups[self.pointer].2 {
            self.groups[self.pointer].2 = false;
            self.advance();
        }
        let (_, id, _) = self.groups.remove(self.pointer);
        // Advance from the removed group: the next higher one now sits at `pointer`.
        if self.pointer >= self.groups.len() {
            self.pointer = 0;
        }
        Some(id)
    }
}

/// LRW as a plain vector in write order.
#[derive(Default)]
struct RefLrw {
    order: Vec<u32>,
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u32, GroupKey),
    Hit(u32, bool, bool),
    Remove(u32),
    Pick,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            3 => (0u32..40, 0u64..200).prop_map(|(i, k)| Op::Insert(i, GroupKey(k))),
            3 => (0u32..40, any::<bool>(), any::<bool>()).prop_map(|(i, p, s)| Op::Hit(i, p, s)),
            1 => (0u32..40).prop_map(Op::Remove),
            3 => Just(Op::Pick),
        ],
        1..300,
    )
}

/// The candidate set as a plain sorted map with recency bits.
#[derive(Default)]
struct Set(std::collections::BTreeMap<GroupKey, bool>);

impl Candidates for Set {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn next(&self, after: Option<GroupKey>) -> Option<GroupKey> {
        match after {
            Some(a) => self.0.range(GroupKey(a.0 + 1)..).next().map(|(&k, _)| k),
            None => self.0.keys().next().copied(),
        }
    }
    fn recent(&self, key: GroupKey) -> bool {
        self.0[&key]
    }
    fn set_recent(&mut self, key: GroupKey, on: bool) {
        *self.0.get_mut(&key).expect("candidate") = on;
    }
}

fn run(name: &str, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut fast = build_destage_order(name).unwrap();
    let mut set = Set::default();
    let mut sweep = RefSweep::new(name == "wow");
    let mut lrw = RefLrw::default();
    // Which ids are candidates, with their keys; keys unique among candidates.
    let mut present: std::collections::HashMap<u32, GroupKey> = Default::default();
    let id_of = |present: &std::collections::HashMap<u32, GroupKey>, key: GroupKey| {
        present.iter().find(|(_, &k)| k == key).map(|(&id, _)| id)
    };
    for op in ops {
        match *op {
            Op::Insert(id, key) => {
                if present.contains_key(&id) || present.values().any(|&k| k == key) {
                    continue;
                }
                present.insert(id, key);
                set.0.insert(key, false);
                fast.insert(&mut set, key);
                sweep.insert(id, key);
                lrw.order.push(id);
            }
            Op::Hit(id, page_hit, sequential) => {
                let Some(&key) = present.get(&id) else {
                    continue;
                };
                let hit = GroupHit {
                    page_hit,
                    sequential,
                };
                fast.hit(&mut set, key, hit);
                sweep.hit(id, hit);
                lrw.order.retain(|&g| g != id);
                lrw.order.push(id);
            }
            Op::Remove(id) => {
                let Some(key) = present.remove(&id) else {
                    continue;
                };
                set.0.remove(&key);
                fast.remove(&mut set, key);
                sweep.remove(id);
                lrw.order.retain(|&g| g != id);
            }
            Op::Pick => {
                let want = if name == "lrw" {
                    (!lrw.order.is_empty()).then(|| lrw.order.remove(0))
                } else {
                    sweep.pick()
                };
                if name == "lrw" {
                    if let Some(id) = want {
                        sweep.remove(id);
                    }
                } else if let Some(id) = want {
                    lrw.order.retain(|&g| g != id);
                }
                let peeked = fast.peek(&set);
                let got = fast.pick(&mut set);
                if name != "wow" {
                    prop_assert_eq!(peeked, got);
                }
                prop_assert_eq!(got.and_then(|k| id_of(&present, k)), want);
                if let Some(key) = got {
                    set.0.remove(&key);
                    present.retain(|_, k| *k != key);
                }
            }
        }
        // The candidate the order rests on: LRW's least recently written,
        // CSCAN's and WOW's pointer.
        let want_peek = if name == "lrw" {
            lrw.order.first().copied()
        } else {
            sweep.groups.get(sweep.pointer).map(|g| g.1)
        };
        let peek = fast.peek(&set);
        prop_assert_eq!(peek.and_then(|k| id_of(&present, k)), want_peek);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn lrw_matches_reference(ops in ops()) { run("lrw", &ops)?; }
    #[test]
    fn cscan_matches_reference(ops in ops()) { run("cscan", &ops)?; }
    #[test]
    fn wow_matches_reference(ops in ops()) { run("wow", &ops)?; }
}

fn inserted(w: &mut dyn DestageOrder, set: &mut Set, key: u64) {
    set.0.insert(GroupKey(key), false);
    w.insert(set, GroupKey(key));
}

fn picked(w: &mut dyn DestageOrder, set: &mut Set) -> Option<u64> {
    let k = w.pick(set)?;
    set.0.remove(&k);
    Some(k.0)
}

#[test]
fn wow_skips_recently_written_groups_once() {
    let mut w = build_destage_order("wow").unwrap();
    let mut set = Set::default();
    for key in [10, 20, 30] {
        inserted(&mut *w, &mut set, key);
    }
    w.hit(
        &mut set,
        GroupKey(10),
        GroupHit {
            page_hit: true,
            sequential: false,
        },
    );
    // Pointer on 10 (bit set): skip it, destage 20, then 30, then 10.
    assert_eq!(picked(&mut *w, &mut set), Some(20));
    assert_eq!(picked(&mut *w, &mut set), Some(30));
    assert_eq!(picked(&mut *w, &mut set), Some(10));
    assert_eq!(picked(&mut *w, &mut set), None);
}

#[test]
fn wow_sequential_group_hit_does_not_set_bit() {
    let mut w = build_destage_order("wow").unwrap();
    let mut set = Set::default();
    inserted(&mut *w, &mut set, 10);
    inserted(&mut *w, &mut set, 20);
    w.hit(
        &mut set,
        GroupKey(10),
        GroupHit {
            page_hit: false,
            sequential: true,
        },
    );
    assert_eq!(picked(&mut *w, &mut set), Some(10));
}

#[test]
fn unknown_name_is_an_error() {
    let e = build_destage_order("fifo").err().unwrap();
    assert!(e.to_string().contains("fifo"));
}
