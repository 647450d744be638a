//! SPC-1-like workload: the eight streams of the public SPC-1 description
//! (uniform random, hierarchical reuse random walk, sequential) over three ASUs,
//! laid out as in the WOW paper (ASU-3 at the lowest addresses, then ASU-1,
//! then ASU-2). This is the workload of the WOW paper's Figs. 7, 9 and 10.
//!
//! Every choice where the description is silent is listed in
//! `docs/workloads.md`. Per request the generator does O(1) work with no
//! allocation; it never looks at the cache.
//!
//! The HRRW comes in models ([`HrrwModel`]): the public SPC-1 generator's
//! walk (the default, behind the named experiments), the reference doc's
//! written description (which leaves out four of the generator's rules;
//! `docs/experiments/wow.md`, "HRRW model"), and a shared-grid variant.

use rand::distributions::WeightedIndex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::Distribution;
use wcache_core::time::Nanos;

use super::gate::Gate;
use super::random::{loop_pacing, PoissonClock};
use super::{IoRequest, Loop, ReqKind, Stop, Workload, WorkloadError, WorkloadStats, BLOCK_BYTES};

/// IOPS of one Business Scaling Unit.
pub const BSU_IOPS: f64 = 50.0;
/// HRRW leaf: 8 blocks of 4 KiB.
pub const HRRW_LEAF_BLOCKS: u64 = 8;
/// HRRW level at which every subtree choice starts.
pub const HRRW_LEVEL_START: u32 = 7;
/// Probability of climbing one more level, tried repeatedly.
pub const HRRW_CLIMB_PROBABILITY: f64 = 0.44;
/// Probability that an HRRW write targets a random block of the leaf (else the last-read block).
pub const HRRW_WRITE_RANDOM_PROBABILITY: f64 = 0.5;
/// Fraction of HRRW writes rewritten to the same block by the stream's next request.
pub const HRRW_REWRITE_PROBABILITY: f64 = 0.15;
/// Generator models: a fresh write's leaf is rounded down to a multiple of
/// this many leaves (relative to the walker's base), so writes touch only
/// every 8th leaf of the tree.
pub const HRRW_WRITE_LEAF_ALIGN: u64 = 8;
/// Closed loop: 60 BSUs = the WOW paper's 3,000 IOPS RAID-5 target.
pub const CLOSED_LOOP_BSUS_DEFAULT: u64 = 60;
/// Walkers are allocated per BSU at construction; this bounds that memory.
pub const BSUS_MAX: u64 = 100_000;
/// Sequential transfer sizes in blocks (4/8/16/32/64 KiB) and their weights in percent.
pub const SEQ_TRANSFER_BLOCKS: [u64; 5] = [1, 2, 4, 8, 16];
pub const SEQ_TRANSFER_WEIGHTS_PCT: [u32; 5] = [40, 24, 20, 8, 8];

const _: () = {
    let w = SEQ_TRANSFER_WEIGHTS_PCT;
    assert!(w[0] + w[1] + w[2] + w[3] + w[4] == 100);
};
// Leaf read cursors are stored as u8.
const _: () = assert!(HRRW_LEAF_BLOCKS <= 256);
const _: () = assert!(HRRW_WRITE_LEAF_ALIGN > 0);

/// Which hierarchical reuse random walk the HRRW streams follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HrrwModel {
    /// The reference doc's description: one walker per stream that reads a
    /// leaf's 8 blocks in order before moving; rewrites are extra requests.
    /// Ignores `Spc1Config::bsus`.
    Reference,
    /// The public generator's walk (the default: the generator is what the
    /// description paraphrases): one walker per BSU, each with its own base
    /// offset into the region's slack; the walker moves on every request;
    /// writes only on every 8th leaf; rewrites replace writes.
    #[default]
    Generator,
    /// As `Generator`, but every walker's base is the region start, so all
    /// walkers share one leaf grid.
    GeneratorSharedGrid,
}

impl HrrwModel {
    pub const ALL: [HrrwModel; 3] = [
        HrrwModel::Reference,
        HrrwModel::Generator,
        HrrwModel::GeneratorSharedGrid,
    ];

    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            HrrwModel::Reference => "reference",
            HrrwModel::Generator => "generator",
            HrrwModel::GeneratorSharedGrid => "shared-grid",
        }
    }

    pub fn from_name(name: &str) -> Option<HrrwModel> {
        HrrwModel::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Open loop: BSUs of a target rate, round(target / 50), at least 1.
pub fn bsus_for_iops(target_iops: f64) -> u64 {
    // `as` saturates (NaN and negatives give 0).
    ((target_iops / BSU_IOPS).round() as u64).max(1)
}

/// Application storage unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Asu {
    /// Data store, 45 % of the footprint.
    Asu1,
    /// User store, 45 %.
    Asu2,
    /// Log, 10 %, at the lowest addresses.
    Asu3,
}

/// The eight streams; `issuer` of a request is the stream's index (0..8) in this order.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Spc1Stream {
    Asu1_1,
    Asu1_2,
    Asu1_3,
    Asu1_4,
    Asu2_1,
    Asu2_2,
    Asu2_3,
    Asu3_1,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum PatternSpec {
    Uniform,
    /// Region start and length in per-mille of the ASU.
    Hrrw {
        start_pm: u64,
        len_pm: u64,
    },
    /// Run start uniform in [lo, hi) and run length, per-mille of the ASU.
    Seq {
        start_lo_pm: u64,
        start_hi_pm: u64,
        run_pm: u64,
    },
}

#[derive(Clone, Copy, Debug)]
struct StreamSpec {
    asu: Asu,
    intensity: f64,
    read_fraction: f64,
    pattern: PatternSpec,
}

const STREAM_SPECS: [StreamSpec; 8] = [
    StreamSpec {
        asu: Asu::Asu1,
        intensity: 0.035,
        read_fraction: 0.5,
        pattern: PatternSpec::Uniform,
    },
    StreamSpec {
        asu: Asu::Asu1,
        intensity: 0.281,
        read_fraction: 0.5,
        pattern: PatternSpec::Hrrw {
            start_pm: 150,
            len_pm: 50,
        },
    },
    StreamSpec {
        asu: Asu::Asu1,
        intensity: 0.070,
        read_fraction: 1.0,
        pattern: PatternSpec::Seq {
            start_lo_pm: 200,
            start_hi_pm: 600,
            run_pm: 100,
        },
    },
    StreamSpec {
        asu: Asu::Asu1,
        intensity: 0.210,
        read_fraction: 0.5,
        pattern: PatternSpec::Hrrw {
            start_pm: 700,
            len_pm: 50,
        },
    },
    StreamSpec {
        asu: Asu::Asu2,
        intensity: 0.018,
        read_fraction: 0.3,
        pattern: PatternSpec::Uniform,
    },
    StreamSpec {
        asu: Asu::Asu2,
        intensity: 0.070,
        read_fraction: 0.3,
        // The description gives only the position; 5 % long like ASU1's walks.
        pattern: PatternSpec::Hrrw {
            start_pm: 470,
            len_pm: 50,
        },
    },
    StreamSpec {
        asu: Asu::Asu2,
        intensity: 0.035,
        read_fraction: 1.0,
        pattern: PatternSpec::Seq {
            start_lo_pm: 200,
            start_hi_pm: 600,
            run_pm: 100,
        },
    },
    StreamSpec {
        asu: Asu::Asu3,
        intensity: 0.281,
        read_fraction: 0.0,
        pattern: PatternSpec::Seq {
            start_lo_pm: 0,
            start_hi_pm: 700,
            run_pm: 300,
        },
    },
];

impl Spc1Stream {
    pub const ALL: [Spc1Stream; 8] = [
        Spc1Stream::Asu1_1,
        Spc1Stream::Asu1_2,
        Spc1Stream::Asu1_3,
        Spc1Stream::Asu1_4,
        Spc1Stream::Asu2_1,
        Spc1Stream::Asu2_2,
        Spc1Stream::Asu2_3,
        Spc1Stream::Asu3_1,
    ];

    pub fn index(self) -> usize {
        self as usize
    }
    /// The stream that issued a request of this workload (`IoRequest::issuer`).
    pub fn from_issuer(issuer: u32) -> Option<Spc1Stream> {
        Spc1Stream::ALL.get(issuer as usize).copied()
    }
    fn spec(self) -> &'static StreamSpec {
        &STREAM_SPECS[self.index()]
    }
    pub fn asu(self) -> Asu {
        self.spec().asu
    }
    /// Share of all requests.
    pub fn intensity(self) -> f64 {
        self.spec().intensity
    }
    pub fn read_fraction(self) -> f64 {
        self.spec().read_fraction
    }
    pub fn is_sequential(self) -> bool {
        matches!(self.spec().pattern, PatternSpec::Seq { .. })
    }
}

/// Where the ASUs sit in volume 0, in bytes (block aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spc1Layout {
    pub footprint_bytes: u64,
    pub asu3_offset_bytes: u64,
    pub asu3_len_bytes: u64,
    pub asu1_offset_bytes: u64,
    pub asu1_len_bytes: u64,
    pub asu2_offset_bytes: u64,
    pub asu2_len_bytes: u64,
}

impl Spc1Layout {
    /// ASU-3 takes 10 % of the blocks (rounded down), ASU-1 45 % (rounded
    /// down), ASU-2 the rest, in that address order.
    pub fn new(footprint_bytes: u64) -> Result<Spc1Layout, WorkloadError> {
        if footprint_bytes == 0 || footprint_bytes & (BLOCK_BYTES - 1) != 0 {
            return Err(WorkloadError::InvalidConfig(format!(
                "footprint_bytes {footprint_bytes} must be a positive multiple of {BLOCK_BYTES}"
            )));
        }
        let blocks = footprint_bytes / BLOCK_BYTES;
        let asu3_blocks = blocks * 10 / 100;
        let asu1_blocks = blocks * 45 / 100;
        let asu2_blocks = blocks - asu3_blocks - asu1_blocks;
        Ok(Spc1Layout {
            footprint_bytes,
            asu3_offset_bytes: 0,
            asu3_len_bytes: asu3_blocks * BLOCK_BYTES,
            asu1_offset_bytes: asu3_blocks * BLOCK_BYTES,
            asu1_len_bytes: asu1_blocks * BLOCK_BYTES,
            asu2_offset_bytes: (asu3_blocks + asu1_blocks) * BLOCK_BYTES,
            asu2_len_bytes: asu2_blocks * BLOCK_BYTES,
        })
    }

    /// (offset_bytes, len_bytes) of one ASU.
    pub fn asu_extent_bytes(&self, asu: Asu) -> (u64, u64) {
        match asu {
            Asu::Asu1 => (self.asu1_offset_bytes, self.asu1_len_bytes),
            Asu::Asu2 => (self.asu2_offset_bytes, self.asu2_len_bytes),
            Asu::Asu3 => (self.asu3_offset_bytes, self.asu3_len_bytes),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Spc1Config {
    /// Addressed bytes of volume 0 (WOW "Partial Backend": 7.1 M sectors).
    pub footprint_bytes: u64,
    /// Open: `rate_iops` is the target IOPS; BSUs = target / 50 and each stream
    /// runs at intensity x 50 x BSUs. Closed: stream picked by intensity weight.
    pub arrivals: Loop,
    pub stop: Stop,
    /// Mark writes `sync` (the generator itself carries no criticality).
    pub sync_writes: bool,
    /// HRRW model (default `Generator`).
    pub hrrw: HrrwModel,
    /// Business Scaling Units: one HRRW walker per BSU in the generator models
    /// (arrival rates come from `arrivals`, not from this). Must be positive.
    pub bsus: u64,
}

impl Spc1Config {
    pub fn open(footprint_bytes: u64, target_iops: f64) -> Spc1Config {
        Spc1Config {
            footprint_bytes,
            arrivals: Loop::Open {
                rate_iops: target_iops,
                outstanding_max: super::OUTSTANDING_MAX_DEFAULT,
            },
            stop: Stop::default(),
            sync_writes: false,
            hrrw: HrrwModel::Generator,
            bsus: bsus_for_iops(target_iops),
        }
    }
    pub fn closed(footprint_bytes: u64, outstanding: u64) -> Spc1Config {
        Spc1Config {
            footprint_bytes,
            arrivals: Loop::Closed { outstanding },
            stop: Stop::default(),
            sync_writes: false,
            hrrw: HrrwModel::Generator,
            bsus: CLOSED_LOOP_BSUS_DEFAULT,
        }
    }
}

/// Hierarchical reuse random walk over a region of whole leaves.
#[derive(Clone, Debug)]
struct Hrrw {
    base_block: u64,
    leaves: u64,
    /// Highest level whose subtree can still lie inside the region.
    level_max: u32,
    leaf: u64,
    /// Next block of `leaf` to read; `HRRW_LEAF_BLOCKS` means the walk of the
    /// leaf is done and the next read moves to a new leaf.
    read_pos: u64,
    /// Absolute block last read (the leaf's first block before any read).
    last_read_block: u64,
}

impl Hrrw {
    fn new(base_block: u64, leaves: u64, rng: &mut SmallRng) -> Hrrw {
        assert!(leaves > 0);
        let level_max = leaves.next_power_of_two().trailing_zeros();
        let leaf = rng.gen_range(0..leaves);
        Hrrw {
            base_block,
            leaves,
            level_max,
            leaf,
            read_pos: 0,
            last_read_block: base_block + leaf * HRRW_LEAF_BLOCKS,
        }
    }

    fn move_leaf(&mut self, rng: &mut SmallRng) {
        let mut level = HRRW_LEVEL_START.min(self.level_max);
        while level < self.level_max && rng.gen::<f64>() < HRRW_CLIMB_PROBABILITY {
            level += 1;
        }
        let span = 1u64 << level;
        let first = self.leaf & !(span - 1);
        let end = (first + span).min(self.leaves);
        debug_assert!(first <= self.leaf && self.leaf < end);
        self.leaf = rng.gen_range(first..end);
        self.read_pos = 0;
    }

    fn read(&mut self, rng: &mut SmallRng) -> u64 {
        if self.read_pos == HRRW_LEAF_BLOCKS {
            self.move_leaf(rng);
        }
        let block = self.base_block + self.leaf * HRRW_LEAF_BLOCKS + self.read_pos;
        self.read_pos += 1;
        self.last_read_block = block;
        block
    }

    fn write(&mut self, rng: &mut SmallRng) -> u64 {
        if rng.gen::<f64>() < HRRW_WRITE_RANDOM_PROBABILITY {
            self.base_block + self.leaf * HRRW_LEAF_BLOCKS + rng.gen_range(0..HRRW_LEAF_BLOCKS)
        } else {
            self.last_read_block
        }
    }
}

/// The public generator's walk over one region: one walker per BSU, read
/// cursors per tree leaf shared by all walkers.
#[derive(Clone, Debug)]
struct HrrwWalkers {
    /// log2 of the tree's leaves: the largest power of two <= the region's leaves.
    level_max: u32,
    walkers: Vec<Walker>,
    /// Next block to read of each tree leaf (indexed relative to the walker's
    /// base), each < `HRRW_LEAF_BLOCKS`.
    read_cursors: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
struct Walker {
    /// Absolute block of the walker's tree leaf 0.
    base_block: u64,
    /// Absolute block of the walker's last request.
    position_block: u64,
    /// Block the walker's next write repeats.
    rewrite_block: Option<u64>,
}

impl HrrwWalkers {
    /// `shared_grid`: every walker's base is `region_block`; else each draws
    /// a whole number of leaves in [0, slack] once.
    fn new(
        region_block: u64,
        leaves: u64,
        bsus: u64,
        shared_grid: bool,
        rng: &mut SmallRng,
    ) -> HrrwWalkers {
        assert!(leaves > 0);
        assert!(bsus > 0);
        assert!(bsus <= BSUS_MAX);
        let level_max = leaves.ilog2();
        let tree_leaves = 1u64 << level_max;
        let slack_leaves = leaves - tree_leaves;
        let mut walkers = Vec::with_capacity(bsus as usize);
        for _ in 0..bsus {
            let base_leaves = if shared_grid {
                0
            } else {
                rng.gen_range(0..=slack_leaves)
            };
            let base_block = region_block + base_leaves * HRRW_LEAF_BLOCKS;
            let position_block = base_block + rng.gen_range(0..tree_leaves * HRRW_LEAF_BLOCKS);
            walkers.push(Walker {
                base_block,
                position_block,
                rewrite_block: None,
            });
        }
        HrrwWalkers {
            level_max,
            walkers,
            read_cursors: vec![0; tree_leaves as usize],
        }
    }

    /// (walker index, absolute block) of the next request.
    fn next(&mut self, is_read: bool, rng: &mut SmallRng) -> (usize, u64) {
        let index = rng.gen_range(0..self.walkers.len());
        let walker = &mut self.walkers[index];
        if !is_read {
            if let Some(block) = walker.rewrite_block.take() {
                walker.position_block = block;
                return (index, block);
            }
        }
        let mut level = HRRW_LEVEL_START.min(self.level_max);
        while level < self.level_max && rng.gen::<f64>() < HRRW_CLIMB_PROBABILITY {
            level += 1;
        }
        debug_assert!(walker.position_block >= walker.base_block);
        let leaf_now = (walker.position_block - walker.base_block) / HRRW_LEAF_BLOCKS;
        debug_assert!(leaf_now < self.read_cursors.len() as u64);
        let span = 1u64 << level;
        let mut leaf = (leaf_now & !(span - 1)) + rng.gen_range(0..span);
        if !is_read {
            leaf -= leaf % HRRW_WRITE_LEAF_ALIGN;
        }
        let cursor = &mut self.read_cursors[leaf as usize];
        let in_leaf = if is_read {
            let pos = u64::from(*cursor);
            *cursor = ((pos + 1) % HRRW_LEAF_BLOCKS) as u8;
            pos
        } else if rng.gen::<f64>() < HRRW_WRITE_RANDOM_PROBABILITY {
            rng.gen_range(0..HRRW_LEAF_BLOCKS)
        } else {
            u64::from(*cursor)
        };
        debug_assert!(in_leaf < HRRW_LEAF_BLOCKS);
        let block = walker.base_block + leaf * HRRW_LEAF_BLOCKS + in_leaf;
        if !is_read && rng.gen::<f64>() < HRRW_REWRITE_PROBABILITY {
            walker.rewrite_block = Some(block);
        }
        walker.position_block = block;
        (index, block)
    }
}

/// Sequential runs of variable-size transfers.
#[derive(Clone, Debug)]
struct Seq {
    start_lo_block: u64,
    start_span_blocks: u64,
    run_blocks: u64,
    pos_block: u64,
    run_end_block: u64,
}

impl Seq {
    fn next(&mut self, rng: &mut SmallRng) -> (u64, u64) {
        if self.pos_block >= self.run_end_block {
            self.pos_block = self.start_lo_block + rng.gen_range(0..self.start_span_blocks);
            self.run_end_block = self.pos_block + self.run_blocks;
        }
        let pick = rng.gen_range(0..100u32);
        let mut acc = 0;
        let mut transfer_blocks = SEQ_TRANSFER_BLOCKS[SEQ_TRANSFER_BLOCKS.len() - 1];
        for (blocks, weight) in SEQ_TRANSFER_BLOCKS.iter().zip(SEQ_TRANSFER_WEIGHTS_PCT) {
            acc += weight;
            if pick < acc {
                transfer_blocks = *blocks;
                break;
            }
        }
        let len_blocks = transfer_blocks.min(self.run_end_block - self.pos_block);
        let block = self.pos_block;
        self.pos_block += len_blocks;
        (block, len_blocks)
    }
}

#[derive(Clone, Debug)]
enum Pattern {
    Uniform { base_block: u64, blocks: u64 },
    Hrrw(Hrrw),
    HrrwWalkers(HrrwWalkers),
    Seq(Seq),
}

#[derive(Clone, Debug)]
struct StreamState {
    pattern: Pattern,
    /// Read probability of a fresh (non-rewrite) request; for the reference
    /// HRRW raised above the stated read fraction so that rewrites leave the
    /// stream's mix as stated (the generator models use it as stated).
    read_fraction_fresh: f64,
    /// Reference HRRW only (the generator models keep one per walker).
    pending_rewrite_block: Option<u64>,
}

impl StreamState {
    /// (kind, block, len_blocks) of the stream's next request.
    fn next(&mut self, rng: &mut SmallRng) -> (ReqKind, u64, u64) {
        if let Some(block) = self.pending_rewrite_block.take() {
            return (ReqKind::Write, block, 1);
        }
        let is_read = match self.read_fraction_fresh {
            r if r >= 1.0 => true,
            r if r <= 0.0 => false,
            r => rng.gen::<f64>() < r,
        };
        let kind = if is_read {
            ReqKind::Read
        } else {
            ReqKind::Write
        };
        match &mut self.pattern {
            Pattern::Uniform { base_block, blocks } => {
                (kind, *base_block + rng.gen_range(0..*blocks), 1)
            }
            Pattern::Hrrw(walk) => {
                if is_read {
                    (kind, walk.read(rng), 1)
                } else {
                    let block = walk.write(rng);
                    if rng.gen::<f64>() < HRRW_REWRITE_PROBABILITY {
                        self.pending_rewrite_block = Some(block);
                    }
                    (kind, block, 1)
                }
            }
            Pattern::HrrwWalkers(walkers) => (kind, walkers.next(is_read, rng).1, 1),
            Pattern::Seq(seq) => {
                let (block, len_blocks) = seq.next(rng);
                (kind, block, len_blocks)
            }
        }
    }
}

/// Read probability for fresh HRRW requests such that, with a rewrite after
/// a fraction q of fresh writes, reads are still `r` of all the stream's
/// requests: r' / (1 + q (1 - r')) = r.
fn hrrw_fresh_read_fraction(r: f64) -> f64 {
    let q = HRRW_REWRITE_PROBABILITY;
    (1.0 + q) * r / (1.0 + q * r)
}

/// (first block, whole leaves) of an HRRW stream's region; (0, 0) for other streams.
fn hrrw_region(layout: &Spc1Layout, stream: Spc1Stream) -> (u64, u64) {
    let spec = stream.spec();
    let PatternSpec::Hrrw { start_pm, len_pm } = spec.pattern else {
        return (0, 0);
    };
    let (asu_offset_bytes, asu_len_bytes) = layout.asu_extent_bytes(spec.asu);
    let asu_blocks = asu_len_bytes / BLOCK_BYTES;
    let start_block = asu_offset_bytes / BLOCK_BYTES + asu_blocks * start_pm / 1000;
    (start_block, asu_blocks * len_pm / 1000 / HRRW_LEAF_BLOCKS)
}

pub struct Spc1Workload {
    config: Spc1Config,
    layout: Spc1Layout,
    rng: SmallRng,
    gate: Gate,
    clock: Option<PoissonClock>,
    pick: WeightedIndex<f64>,
    streams: Vec<StreamState>,
    next_id: u64,
}

fn too_small(what: &str, footprint_bytes: u64) -> WorkloadError {
    WorkloadError::InvalidConfig(format!(
        "footprint of {footprint_bytes} B is too small for SPC-1-like: {what} would be empty"
    ))
}

impl Spc1Workload {
    pub fn new(config: Spc1Config, seed: u64) -> Result<Spc1Workload, WorkloadError> {
        let layout = Spc1Layout::new(config.footprint_bytes)?;
        let (pacing, exp) = loop_pacing(config.arrivals)?;
        if config.bsus == 0 {
            return Err(WorkloadError::InvalidConfig(
                "SPC-1-like: bsus is 0; it must be at least 1".to_string(),
            ));
        }
        if config.bsus > BSUS_MAX {
            return Err(WorkloadError::InvalidConfig(format!(
                "SPC-1-like: bsus {} exceeds the maximum of {BSUS_MAX}",
                config.bsus
            )));
        }
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut streams = Vec::with_capacity(STREAM_SPECS.len());
        for stream in Spc1Stream::ALL {
            let spec = stream.spec();
            let (asu_offset_bytes, asu_len_bytes) = layout.asu_extent_bytes(spec.asu);
            let asu_base_block = asu_offset_bytes / BLOCK_BYTES;
            let asu_blocks = asu_len_bytes / BLOCK_BYTES;
            let name = format!("{stream:?}");
            let (pattern, read_fraction_fresh) = match spec.pattern {
                PatternSpec::Uniform => {
                    if asu_blocks == 0 {
                        return Err(too_small(&name, config.footprint_bytes));
                    }
                    let pattern = Pattern::Uniform {
                        base_block: asu_base_block,
                        blocks: asu_blocks,
                    };
                    (pattern, spec.read_fraction)
                }
                PatternSpec::Hrrw { .. } => {
                    let (start_block, leaves) = hrrw_region(&layout, stream);
                    if leaves == 0 {
                        return Err(too_small(&name, config.footprint_bytes));
                    }
                    match config.hrrw {
                        HrrwModel::Reference => {
                            let walk = Hrrw::new(start_block, leaves, &mut rng);
                            (
                                Pattern::Hrrw(walk),
                                hrrw_fresh_read_fraction(spec.read_fraction),
                            )
                        }
                        HrrwModel::Generator | HrrwModel::GeneratorSharedGrid => {
                            let shared_grid = config.hrrw == HrrwModel::GeneratorSharedGrid;
                            let walkers = HrrwWalkers::new(
                                start_block,
                                leaves,
                                config.bsus,
                                shared_grid,
                                &mut rng,
                            );
                            (Pattern::HrrwWalkers(walkers), spec.read_fraction)
                        }
                    }
                }
                PatternSpec::Seq {
                    start_lo_pm,
                    start_hi_pm,
                    run_pm,
                } => {
                    let start_lo_block = asu_base_block + asu_blocks * start_lo_pm / 1000;
                    let start_hi_block = asu_base_block + asu_blocks * start_hi_pm / 1000;
                    let run_blocks = asu_blocks * run_pm / 1000;
                    if run_blocks == 0 || start_hi_block <= start_lo_block {
                        return Err(too_small(&name, config.footprint_bytes));
                    }
                    let seq = Seq {
                        start_lo_block,
                        start_span_blocks: start_hi_block - start_lo_block,
                        run_blocks,
                        pos_block: 0,
                        run_end_block: 0,
                    };
                    (Pattern::Seq(seq), spec.read_fraction)
                }
            };
            streams.push(StreamState {
                pattern,
                read_fraction_fresh,
                pending_rewrite_block: None,
            });
        }
        let pick = WeightedIndex::new(STREAM_SPECS.iter().map(|s| s.intensity))
            .map_err(|e| WorkloadError::InvalidConfig(format!("stream weights: {e}")))?;
        let clock = exp.map(|exp| PoissonClock::start(exp, &mut rng));
        Ok(Spc1Workload {
            gate: Gate::new(pacing, config.stop),
            config,
            layout,
            rng,
            clock,
            pick,
            streams,
            next_id: 0,
        })
    }

    pub fn layout(&self) -> Spc1Layout {
        self.layout
    }

    fn scheduled(&self) -> Option<Nanos> {
        PoissonClock::gate_time(&self.clock)
    }
}

impl Workload for Spc1Workload {
    fn next_arrival(&self) -> Option<Nanos> {
        self.gate.next_time(self.scheduled())
    }

    /// Open loop: the eight independent Poisson streams are generated as their
    /// superposition (one Poisson process at the summed rate, each arrival
    /// assigned to a stream with probability proportional to its rate), which
    /// has exactly the same distribution.
    fn poll(&mut self, now: Nanos) -> Option<IoRequest> {
        let scheduled = self.scheduled();
        if !self.gate.ready(now, scheduled) {
            return None;
        }
        self.gate.on_issue(scheduled);
        let stream_index = self.pick.sample(&mut self.rng);
        let (kind, block, len_blocks) = self.streams[stream_index].next(&mut self.rng);
        if let Some(clock) = &mut self.clock {
            clock.advance(&mut self.rng);
        }
        let id = self.next_id;
        self.next_id += 1;
        Some(IoRequest {
            id,
            volume: 0,
            kind,
            offset_bytes: block * BLOCK_BYTES,
            len_bytes: len_blocks * BLOCK_BYTES,
            sync: self.config.sync_writes && kind == ReqKind::Write,
            issuer: stream_index as u32,
        })
    }

    fn complete(&mut self, now: Nanos, id: u64) {
        debug_assert!(
            id < self.next_id,
            "completion of a request never handed out"
        );
        self.gate.on_complete(now);
    }

    fn finished(&self) -> bool {
        self.gate.finished(self.scheduled())
    }

    fn volume_sizes_bytes(&self) -> Vec<u64> {
        vec![self.config.footprint_bytes]
    }

    fn name(&self) -> String {
        let arrivals = match self.config.arrivals {
            Loop::Open { rate_iops, .. } => {
                format!("open {rate_iops} IOPS = {} BSUs", rate_iops / BSU_IOPS)
            }
            Loop::Closed { outstanding } => format!("closed {outstanding} outstanding"),
        };
        let hrrw = match self.config.hrrw {
            HrrwModel::Reference => String::new(),
            model => format!(", hrrw {} with {} BSUs", model.name(), self.config.bsus),
        };
        format!(
            "spc1-like(footprint={} B, {arrivals}{hrrw})",
            self.config.footprint_bytes
        )
    }

    fn stats(&self) -> WorkloadStats {
        self.gate.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intensities_sum_to_one() {
        let sum: f64 = STREAM_SPECS.iter().map(|s| s.intensity).sum();
        assert!((sum - 1.0).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn fresh_read_fraction_keeps_stream_mix() {
        for r in [0.3, 0.5] {
            let fresh = hrrw_fresh_read_fraction(r);
            let q = HRRW_REWRITE_PROBABILITY;
            let overall = fresh / (1.0 + q * (1.0 - fresh));
            assert!((overall - r).abs() < 1e-12);
        }
    }

    #[test]
    fn hrrw_stays_in_region_and_walks_leaf_in_order() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut walk = Hrrw::new(1000, 300, &mut rng);
        let mut prev: Option<u64> = None;
        for _ in 0..100_000 {
            let block = walk.read(&mut rng);
            assert!((1000..1000 + 300 * HRRW_LEAF_BLOCKS).contains(&block));
            let in_leaf = (block - 1000) % HRRW_LEAF_BLOCKS;
            if in_leaf != 0 {
                assert_eq!(prev, Some(block - 1));
            }
            prev = Some(block);
            let w = walk.write(&mut rng);
            assert!((1000..1000 + 300 * HRRW_LEAF_BLOCKS).contains(&w));
        }
    }

    const GENERATOR_MODELS: [HrrwModel; 2] = [HrrwModel::Generator, HrrwModel::GeneratorSharedGrid];

    fn spc1_with(model: HrrwModel, bsus: u64) -> Spc1Config {
        let mut config = Spc1Config::closed(1 << 30, 1);
        config.hrrw = model;
        config.bsus = bsus;
        config
    }

    /// Runs `requests` requests one at a time; `on` sees each with the workload.
    fn drive(w: &mut Spc1Workload, requests: u64, mut on: impl FnMut(&Spc1Workload, &IoRequest)) {
        for i in 0..requests {
            let now = Nanos::from_us(i);
            let r = w
                .poll(now)
                .expect("closed loop of one issues after each completion");
            on(w, &r);
            w.complete(now, r.id);
        }
    }

    fn walkers_of(w: &Spc1Workload, stream: Spc1Stream) -> &HrrwWalkers {
        match &w.streams[stream.index()].pattern {
            Pattern::HrrwWalkers(walkers) => walkers,
            other => panic!("{stream:?} is not a generator walk: {other:?}"),
        }
    }

    #[test]
    fn bsus_defaults_and_limits() {
        assert_eq!(
            Spc1Config::closed(1 << 30, 1).bsus,
            CLOSED_LOOP_BSUS_DEFAULT
        );
        assert_eq!(Spc1Config::open(1 << 30, 3000.0).bsus, 60);
        assert_eq!(Spc1Config::open(1 << 30, 74.0).bsus, 1);
        assert_eq!(Spc1Config::open(1 << 30, 76.0).bsus, 2);
        assert_eq!(Spc1Config::open(1 << 30, 10.0).bsus, 1);
        assert_eq!(Spc1Config::open(1 << 30, 3000.0).hrrw, HrrwModel::Generator);
        for model in HrrwModel::ALL {
            assert_eq!(HrrwModel::from_name(model.name()), Some(model));
            for bsus in [0, BSUS_MAX + 1] {
                let result = Spc1Workload::new(spc1_with(model, bsus), 1);
                assert!(
                    matches!(&result, Err(WorkloadError::InvalidConfig(m)) if m.contains("bsus")),
                    "{model:?} with {bsus} BSUs"
                );
            }
        }
        assert_eq!(HrrwModel::from_name("walk"), None);
        let w = Spc1Workload::new(spc1_with(HrrwModel::Generator, 7), 1).unwrap();
        assert_eq!(walkers_of(&w, Spc1Stream::Asu1_2).walkers.len(), 7);
    }

    #[test]
    fn generator_walks_stay_in_region_and_write_every_8th_leaf() {
        for model in GENERATOR_MODELS {
            let mut w = Spc1Workload::new(spc1_with(model, 60), 21).unwrap();
            let layout = w.layout();
            let mut hrrw_writes = 0u64;
            drive(&mut w, 200_000, |w, r| {
                let stream = Spc1Stream::from_issuer(r.issuer).unwrap();
                if !matches!(stream.spec().pattern, PatternSpec::Hrrw { .. }) {
                    return;
                }
                let (start_block, leaves) = hrrw_region(&layout, stream);
                let block = r.offset_bytes / BLOCK_BYTES;
                assert_eq!(r.len_bytes, BLOCK_BYTES);
                assert!(block >= start_block, "{model:?} {stream:?} {block}");
                assert!(
                    block < start_block + leaves * HRRW_LEAF_BLOCKS,
                    "{model:?} {stream:?} {block}"
                );
                if r.kind == ReqKind::Write {
                    hrrw_writes += 1;
                    let aligned = walkers_of(w, stream).walkers.iter().any(|walker| {
                        block >= walker.base_block
                            && ((block - walker.base_block) / HRRW_LEAF_BLOCKS)
                                .is_multiple_of(HRRW_WRITE_LEAF_ALIGN)
                    });
                    assert!(
                        aligned,
                        "{model:?} {stream:?} write to {block} is off every walker's grid"
                    );
                }
            });
            assert!(hrrw_writes > 10_000, "{hrrw_writes}");
            if model == HrrwModel::GeneratorSharedGrid {
                let walkers = walkers_of(&w, Spc1Stream::Asu1_2);
                assert!(walkers
                    .walkers
                    .iter()
                    .all(|walker| walker.base_block == hrrw_region(&layout, Spc1Stream::Asu1_2).0));
            }
        }
    }

    #[test]
    fn generator_walkers_draw_distinct_bases_in_the_slack() {
        let w = Spc1Workload::new(spc1_with(HrrwModel::Generator, 60), 5).unwrap();
        let (start_block, leaves) = hrrw_region(&w.layout(), Spc1Stream::Asu1_2);
        let walkers = walkers_of(&w, Spc1Stream::Asu1_2);
        let tree_leaves = 1u64 << walkers.level_max;
        assert!(tree_leaves <= leaves && leaves < 2 * tree_leaves);
        let slack_leaves = leaves - tree_leaves;
        assert!(slack_leaves > 0, "the test needs a region with slack");
        let mut bases = std::collections::HashSet::new();
        for walker in &walkers.walkers {
            let offset = walker.base_block - start_block;
            assert_eq!(offset % HRRW_LEAF_BLOCKS, 0);
            assert!(offset / HRRW_LEAF_BLOCKS <= slack_leaves);
            bases.insert(walker.base_block);
        }
        assert!(bases.len() > 1);
    }

    #[test]
    fn shared_grid_writes_touch_at_most_an_eighth_of_the_region() {
        let mut w = Spc1Workload::new(spc1_with(HrrwModel::GeneratorSharedGrid, 60), 9).unwrap();
        let layout = w.layout();
        let mut written: [std::collections::HashSet<u64>; 8] = Default::default();
        drive(&mut w, 100_000, |_, r| {
            if r.kind == ReqKind::Write {
                written[r.issuer as usize].insert(r.offset_bytes / BLOCK_BYTES);
            }
        });
        for stream in Spc1Stream::ALL {
            if !matches!(stream.spec().pattern, PatternSpec::Hrrw { .. }) {
                continue;
            }
            let (_, leaves) = hrrw_region(&layout, stream);
            let region_blocks = leaves * HRRW_LEAF_BLOCKS;
            let distinct = written[stream.index()].len() as u64;
            assert!(distinct > 0);
            assert!(
                distinct <= region_blocks / 8,
                "{stream:?}: {distinct} of {region_blocks}"
            );
        }
    }

    #[test]
    fn generator_rewrites_are_about_15_percent_of_writes() {
        for shared_grid in [false, true] {
            let mut rng = SmallRng::seed_from_u64(17);
            let mut walk = HrrwWalkers::new(1000, 737, 60, shared_grid, &mut rng);
            let (mut writes, mut rewrites) = (0u64, 0u64);
            for _ in 0..200_000 {
                let is_read = rng.gen::<f64>() < 0.5;
                let pending: Vec<Option<u64>> =
                    walk.walkers.iter().map(|w| w.rewrite_block).collect();
                let (index, block) = walk.next(is_read, &mut rng);
                assert_eq!(walk.walkers[index].position_block, block);
                if is_read {
                    // A read leaves the pending rewrite in place.
                    assert_eq!(walk.walkers[index].rewrite_block, pending[index]);
                    continue;
                }
                writes += 1;
                if let Some(pending_block) = pending[index] {
                    rewrites += 1;
                    assert_eq!(block, pending_block);
                    assert_eq!(walk.walkers[index].rewrite_block, None);
                }
            }
            // Each fresh write sets a rewrite with p = 0.15 and each is
            // consumed by one later write: 0.15 / 1.15 = 13 % of writes.
            let share = rewrites as f64 / writes as f64;
            assert!(
                (0.10..0.20).contains(&share),
                "shared_grid {shared_grid}: {share}"
            );
        }
    }

    #[test]
    fn generator_reads_cycle_through_each_leaf_in_order() {
        for shared_grid in [false, true] {
            let mut rng = SmallRng::seed_from_u64(23);
            let mut walk = HrrwWalkers::new(1000, 300, 60, shared_grid, &mut rng);
            let tree_leaves = walk.read_cursors.len() as u64;
            let mut next_in_leaf = vec![0u64; tree_leaves as usize];
            let mut reads_of_leaf = vec![0u64; tree_leaves as usize];
            for _ in 0..200_000 {
                let is_read = rng.gen::<f64>() < 0.5;
                let (index, block) = walk.next(is_read, &mut rng);
                let base_block = walk.walkers[index].base_block;
                let leaf = (block - base_block) / HRRW_LEAF_BLOCKS;
                assert!(leaf < tree_leaves);
                if is_read {
                    let in_leaf = (block - base_block) % HRRW_LEAF_BLOCKS;
                    assert_eq!(in_leaf, next_in_leaf[leaf as usize], "leaf {leaf}");
                    next_in_leaf[leaf as usize] = (in_leaf + 1) % HRRW_LEAF_BLOCKS;
                    reads_of_leaf[leaf as usize] += 1;
                }
            }
            // Many leaves went round their 8 blocks more than once.
            let wrapped = reads_of_leaf
                .iter()
                .filter(|&&n| n > HRRW_LEAF_BLOCKS)
                .count();
            assert!(wrapped > 100, "{wrapped}");
        }
    }
}
