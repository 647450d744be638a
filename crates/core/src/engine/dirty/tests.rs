//! Property tests of the dirty set against a `BTreeMap` model, and the
//! structural invariants they check after every operation.

use super::*;

impl DirtySet {
    /// The structure's invariants: leaves linked in key order, none empty,
    /// each indexed by its first key, entries strictly ascending.
    fn check(&self, keys: &[u64]) {
        let mut l = self.index.values().next().copied().unwrap_or(NIL);
        let (mut prev, mut last, mut seen, mut leaves) = (NIL, None, 0, 0);
        while l != NIL {
            let leaf = &self.leaves[l as usize];
            assert!(leaf.len > 0, "empty leaf");
            assert_eq!(leaf.prev, prev, "prev link");
            assert_eq!(self.index.get(&keys[slot_of(leaf.e[0])]), Some(&l), "index");
            for &e in leaf.entries() {
                let k = keys[slot_of(e)];
                assert!(last.is_none_or(|p| p < k), "keys ascend");
                last = Some(k);
                seen += 1;
            }
            leaves += 1;
            (prev, l) = (l, leaf.next);
        }
        assert_eq!(seen, self.pages);
        assert_eq!(self.runs, self.count_runs(keys), "runs");
        assert_eq!(leaves, self.index.len());
        // A live finger agrees with a fresh lookup.
        let f = self.finger.get();
        if f.version == self.version {
            let route = self.route(keys, self.first_key(f.gkey));
            let start = self
                .bound_of(route)
                .filter(|&p| self.group_of(keys[slot_of(self.entry(p))]) == f.gkey);
            assert_eq!(f.start, start, "finger start");
            if start.is_none() {
                assert_eq!(self.bound_of(f.route), self.bound_of(route), "finger route");
            }
            if f.len > 0 {
                let n = self.index.values().count(); // leaves, for a bound
                let mut count = 0;
                let mut pos = start;
                while let Some(p) =
                    pos.filter(|&p| self.group_of(keys[slot_of(self.entry(p))]) == f.gkey)
                {
                    count += 1;
                    pos = self.step(p);
                    assert!(count <= n * LEAF_CAP);
                }
                assert_eq!(f.len, count, "finger len");
            }
        }
        assert_eq!(leaves + self.free_leaves.len(), self.leaves.len());
    }
}

impl DirtySet {
    /// The runs of consecutive dirty pages within a group, counted afresh.
    fn count_runs(&self, keys: &[u64]) -> usize {
        let mut runs = 0;
        let mut last: Option<u64> = None;
        self.for_each_slot(|s| {
            let k = keys[s as usize];
            let joins = last.is_some_and(|p| p + 1 == k && self.group_of(p) == self.group_of(k));
            runs += usize::from(!joins);
            last = Some(k);
        });
        runs
    }
}

use proptest::prelude::*;
use std::collections::BTreeMap as Model;

/// Group sizes: a page per group, small groups, and groups longer than
/// a leaf (so runs span leaves).
const GROUP_PAGES: [u32; 4] = [1, 4, 64, 300];

/// Keys of slots: slot s holds key `keys[s]`.
#[derive(Clone, Debug)]
enum Op {
    Insert(u64),
    Remove(u64),
    Replace(u64),
    SetFlag(u64, bool),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let key = prop_oneof![0u64..400, (1u64 << 48)..(1u64 << 48) + 50];
    proptest::collection::vec(
        prop_oneof![
            4 => key.clone().prop_map(Op::Insert),
            2 => key.clone().prop_map(Op::Remove),
            1 => key.clone().prop_map(Op::Replace),
            1 => (key, any::<bool>()).prop_map(|(k, b)| Op::SetFlag(k, b)),
        ],
        1..600,
    )
}

/// The runs of the model's keys: consecutive keys of one group join.
fn model_runs(set: &DirtySet, model: &Model<u64, u32>) -> usize {
    let keys = || model.keys();
    let breaks = keys()
        .zip(keys().skip(1))
        .filter(|&(&a, &b)| a + 1 != b || set.group_of(a) != set.group_of(b))
        .count();
    breaks + usize::from(!model.is_empty())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn matches_a_sorted_map(ops in ops(), gp in proptest::sample::select(&GROUP_PAGES[..])) {
        let mut set = DirtySet::new(gp);
        let mut keys: Vec<u64> = Vec::new();
        // key -> (slot, recent flag of its group)
        let mut model: Model<u64, u32> = Model::new();
        let mut recent: Model<u64, bool> = Model::new();
        for op in ops {
            match op {
                Op::Insert(k) => {
                    if model.contains_key(&k) { continue; }
                    let s = keys.len() as u32;
                    keys.push(k);
                    set.insert(&keys, s);
                    model.insert(k, s);
                }
                Op::Remove(k) => {
                    if model.remove(&k).is_none() { continue; }
                    set.remove(&keys, k);
                }
                Op::Replace(k) => {
                    if !model.contains_key(&k) { continue; }
                    let s = keys.len() as u32;
                    keys.push(k);
                    set.replace(&keys, k, s);
                    model.insert(k, s);
                }
                Op::SetFlag(k, on) => {
                    let g = set.group_of(k);
                    set.set_group_flags(&keys, g, E_RECENT, on);
                }
            }
            // Groups without pages lose their flags.
            let live: std::collections::BTreeSet<u64> =
                model.keys().map(|&k| set.group_of(k)).collect();
            recent.retain(|g, _| live.contains(g));
            if let Op::SetFlag(k, on) = op {
                let g = set.group_of(k);
                if live.contains(&g) { recent.insert(g, on); }
            }
            set.check(&keys);
            let want = (model.len(), model_runs(&set, &model), live.len());
            prop_assert_eq!((set.pages(), set.runs(), set.groups()), want);
            // Every group: its slots in order, and its flag.
            let mut out = Vec::new();
            for &g in &live {
                set.group_slots(&keys, g, &mut out);
                let want: Vec<u32> = model
                    .iter()
                    .filter(|(&k, _)| set.group_of(k) == g)
                    .map(|(_, &s)| s)
                    .collect();
                prop_assert_eq!(&out, &want);
                let r = recent.get(&g).copied().unwrap_or(false);
                prop_assert_eq!(set.group_has(&keys, g, E_RECENT), r);
            }
            // next_group walks the groups in order; with a mask, only flagged ones.
            let mut walk = Vec::new();
            let mut at = None;
            while let Some(g) = set.next_group(&keys, at, 0) {
                walk.push(g);
                at = Some(g);
            }
            prop_assert_eq!(walk, live.iter().copied().collect::<Vec<_>>());
            let flagged: Vec<u64> = live
                .iter()
                .copied()
                .filter(|g| recent.get(g).copied().unwrap_or(false))
                .collect();
            prop_assert_eq!(set.next_group(&keys, None, E_RECENT), flagged.first().copied());
            // From any group key, present or not: the next flagged one above it.
            for after in live.iter().copied().chain([0, 3, 50, 99, (1 << 48) + 7]) {
                let want = flagged.iter().copied().find(|&g| g > after);
                prop_assert_eq!(set.next_group(&keys, Some(after), E_RECENT), want);
            }
        }
    }
}

/// Random inserts and removes at a steady size (a cache under load):
/// leaves stay well filled, so the bytes per dirty page stay bounded.
/// (At 200,000 entries and 1,000,000 pairs they settle at 74 %.)
#[test]
fn churn_keeps_leaves_filled() {
    let mut set = DirtySet::new(16);
    let mut keys: Vec<u64> = Vec::new();
    let mut live: Vec<u64> = Vec::new();
    let mut present = std::collections::HashSet::new();
    let mut x: u64 = 12345;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut add = |set: &mut DirtySet, keys: &mut Vec<u64>, live: &mut Vec<u64>, k: u64| {
        if present.insert(k) {
            keys.push(k);
            set.insert(keys, keys.len() as u32 - 1);
            live.push(k);
        }
    };
    while live.len() < 20_000 {
        add(&mut set, &mut keys, &mut live, rnd() % (1 << 30));
    }
    for _ in 0..100_000 {
        let k = live.swap_remove((rnd() % live.len() as u64) as usize);
        set.remove(&keys, k);
        let n = live.len();
        while live.len() == n {
            add(&mut set, &mut keys, &mut live, rnd() % (1 << 30));
        }
    }
    set.check(&keys);
    let fill = set.pages() as f64 / (set.index.len() * LEAF_CAP) as f64;
    assert!(fill > 0.65, "leaves {fill:.2} full after churn");
}

#[test]
fn ascending_fill_leaves_full_leaves() {
    let mut set = DirtySet::new(16);
    let keys: Vec<u64> = (0..10_000u64).map(|i| i * 16).collect();
    for s in 0..keys.len() as u32 {
        set.insert(&keys, s);
    }
    assert_eq!(set.pages(), 10_000);
    assert_eq!(set.groups(), 10_000);
    assert_eq!(set.index.len(), 10_000usize.div_ceil(LEAF_CAP));
    assert_eq!(set.leaves.len(), set.index.len());
}
