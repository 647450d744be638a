//! The engine against a byte-exact model: a driver that executes every
//! command on real bytes (in an order chosen by the test, with injected
//! errors), and a shadow of what each byte may hold. Every read must return,
//! byte by byte, the last acknowledged write or a write that was in flight
//! during the read; after a drain the backing must equal the shadow.

#![allow(clippy::needless_range_loop)]

use proptest::prelude::*;
use std::collections::HashMap;
use wcache_core::config::{CheckpointMode, JournalConfig, StalenessConfig};
use wcache_core::reference::{Partial, Reference};
use wcache_core::time::Nanos;
use wcache_core::types::{RequestId, VolumeId};
use wcache_core::*;

/// Expected content of one byte. Writes that overlap in time may land in
/// either order, so after they are acknowledged the byte may hold any of them.
#[derive(Clone, Debug)]
struct ByteModel {
    /// Values the byte may hold now; None = unspecified (trimmed, failed write).
    acked: Option<Vec<u8>>,
    /// Writes in flight over this byte: (write seq, value, issue tick, trimmed
    /// while in flight: the trim and the write may land in either order).
    inflight: Vec<(u64, u8, u64, bool)>,
    /// Acknowledged writes that may still race with one in flight: (ack tick, value).
    recent_acks: Vec<(u64, u8)>,
    /// Bumped whenever `acked` changes.
    epoch: u64,
}

struct PendingRead {
    vol: usize,
    off: usize,
    len: usize,
    /// Byte epochs at issue: a read over a quiet byte pins down its value.
    epochs: Vec<u64>,
    /// Allowed values per byte, captured at issue, extended by writes issued during the read.
    allowed: Vec<Option<Vec<u8>>>,
}

struct Harness {
    engine: Engine,
    /// The cache device (slots and their records) and the backing volumes,
    /// byte by byte: every command is executed by the reference interpreter.
    devices: Reference<u8>,
    model: Vec<Vec<ByteModel>>,
    bufs: HashMap<u64, Vec<u8>>,
    writes: HashMap<u64, (usize, usize, usize, u64)>, // id -> (vol, off, len, seq)
    reads: HashMap<u64, PendingRead>,
    trims: HashMap<u64, ()>,
    pending: Vec<IoCommand>,
    next_id: u64,
    now: Nanos,
    fail_every: u64,
    completions: u64,
    checked_bytes: u64,
    ticks: u64,
    config: EngineConfig,
    vol_sizes: Vec<usize>,
    crashes: u64,
    /// (reissued writes, discarded completions) of engines lost in crashes.
    promoted_before: (u64, u64),
    /// Requests answered, successfully or not.
    answered: u64,
    /// `Harness::counted` of engines lost in crashes.
    counted_before: Counted,
}

/// Counters of the engine's policies at work, summed over crashes.
#[derive(Clone, Copy, Debug, Default)]
struct Counted {
    write_bypasses: u64,
    destages: u64,
    evictions: u64,
    /// Log mode: pages reclaim copied forward, and groups it destaged.
    log_copies: u64,
    log_forced_destages: u64,
}

/// A failed write over unspecified bytes leaves them unspecified.
fn trimmed_or_unknown(may: &mut Vec<u8>) {
    may.clear();
}

fn value(seq: u64, vol: usize, byte: usize) -> u8 {
    let x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ ((vol as u64) << 40)
        ^ (byte as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x >> 56) as u8
}

impl Harness {
    fn new(config: EngineConfig, vol_sizes: &[usize], fail_every: u64) -> Harness {
        let mut engine = Engine::new(config.clone()).unwrap();
        let sizes: Vec<u64> = vol_sizes.iter().map(|&s| s as u64).collect();
        let devices = Reference::new(config.page_size_bytes, 1, config.cache_slots, &sizes);
        let mut model = Vec::new();
        for (v, &size) in vol_sizes.iter().enumerate() {
            assert_eq!(engine.add_volume(size as u64).unwrap(), VolumeId(v as u16));
            model.push(vec![
                ByteModel {
                    acked: Some(vec![0]),
                    inflight: Vec::new(),
                    recent_acks: Vec::new(),
                    epoch: 0,
                };
                size
            ]);
        }
        Harness {
            engine,
            devices,
            model,
            bufs: HashMap::new(),
            writes: HashMap::new(),
            reads: HashMap::new(),
            trims: HashMap::new(),
            pending: Vec::new(),
            next_id: 1,
            now: Nanos(0),
            fail_every,
            completions: 0,
            checked_bytes: 0,
            ticks: 0,
            config,
            vol_sizes: vol_sizes.to_vec(),
            crashes: 0,
            promoted_before: (0, 0),
            answered: 0,
            counted_before: Counted::default(),
        }
    }

    fn tick(&mut self) {
        self.now = Nanos(self.now.0 + 1_000_000);
        self.engine.handle_timeout(self.now);
        self.pump();
    }

    fn pump(&mut self) {
        while let Some(c) = self.engine.poll_command() {
            self.pending.push(c);
        }
        while let Some(r) = self.engine.poll_response() {
            self.respond(r);
        }
    }

    fn submit(&mut self, vol: usize, kind: RequestKind, off: usize, len: usize, tags: u8) {
        let id = self.next_id;
        self.next_id += 1;
        self.ticks += 1;
        let tick = self.ticks;
        let req = Request {
            id: RequestId(id),
            volume: VolumeId(vol as u16),
            kind,
            offset_bytes: off as u64,
            len_bytes: len as u64,
            flags: flags_of(tags),
        };
        match kind {
            RequestKind::Write | RequestKind::WriteZeroes => {
                let seq = id;
                let data: Vec<u8> = (0..len)
                    .map(|i| {
                        if kind == RequestKind::Write {
                            value(seq, vol, off + i)
                        } else {
                            0
                        }
                    })
                    .collect();
                for i in 0..len {
                    self.model[vol][off + i]
                        .inflight
                        .push((seq, data[i], tick, false));
                }
                // Reads in flight may now also see this write.
                for r in self.reads.values_mut() {
                    if r.vol != vol {
                        continue;
                    }
                    for i in 0..len {
                        let b = off + i;
                        if b >= r.off && b < r.off + r.len {
                            if let Some(a) = &mut r.allowed[b - r.off] {
                                a.push(data[i]);
                            }
                        }
                    }
                }
                self.bufs.insert(id, data);
                self.writes.insert(id, (vol, off, len, seq));
            }
            RequestKind::Read => {
                let allowed = (off..off + len)
                    .map(|b| {
                        let m = &self.model[vol][b];
                        m.acked.as_ref().map(|a| {
                            let mut v = a.clone();
                            v.extend(m.inflight.iter().map(|&(_, x, _, _)| x));
                            v
                        })
                    })
                    .collect();
                let epochs = (off..off + len).map(|b| self.model[vol][b].epoch).collect();
                self.bufs.insert(id, vec![0xAB; len]);
                self.reads.insert(
                    id,
                    PendingRead {
                        vol,
                        off,
                        len,
                        epochs,
                        allowed,
                    },
                );
            }
            RequestKind::Trim => {
                self.trims.insert(id, ());
            }
            RequestKind::Flush => {}
        }
        match self.engine.handle_request(self.now, req) {
            Ok(()) => {}
            Err(e) => panic!("unexpected refusal {e}"),
        }
        if kind == RequestKind::Trim {
            // Trimmed bytes are unspecified until written again, and so are the
            // bytes of writes in flight over them.
            for b in off..off + len {
                let m = &mut self.model[vol][b];
                m.acked = None;
                m.epoch += 1;
                for w in &mut m.inflight {
                    w.3 = true;
                }
            }
        }
        self.pump();
    }

    fn respond(&mut self, r: Response) {
        let id = r.id.0;
        self.answered += 1;
        if let Some((vol, off, len, seq)) = self.writes.remove(&id) {
            // A promoted bypass may be answered before its backing write
            // lands (`buffers_outlive_answers`): its buffer stays until then.
            let data = self.bufs.get(&id).cloned().unwrap();
            self.release_buffer(id);
            self.ticks += 1;
            let now = self.ticks;
            for i in 0..len {
                let m = &mut self.model[vol][off + i];
                let at = m
                    .inflight
                    .iter()
                    .position(|&(s, _, _, _)| s == seq)
                    .unwrap();
                let (_, _, issued, trimmed) = m.inflight.remove(at);
                // Writes acknowledged while this one was in flight may have landed
                // before or after it; a failed write may have landed or not.
                let raced = m
                    .recent_acks
                    .iter()
                    .filter(|&&(t, _)| t > issued)
                    .map(|&(_, v)| v);
                let mut may = vec![data[i]];
                may.extend(raced);
                if r.result.is_err() {
                    match &m.acked {
                        Some(old) => may.extend(old.iter().copied()),
                        None => trimmed_or_unknown(&mut may),
                    }
                }
                m.acked = if trimmed || may.is_empty() {
                    None
                } else {
                    Some(may)
                };
                m.epoch += 1;
                m.recent_acks.push((now, data[i]));
                let oldest = m.inflight.iter().map(|&(_, _, t, _)| t).min();
                match oldest {
                    Some(t) => m.recent_acks.retain(|&(a, _)| a > t),
                    None => m.recent_acks.clear(),
                }
            }
        } else if let Some(pr) = self.reads.remove(&id) {
            let data = self.bufs.remove(&id).unwrap();
            if r.result.is_ok() {
                for (i, allowed) in pr.allowed.iter().enumerate() {
                    if let Some(allowed) = allowed {
                        assert!(
                            allowed.contains(&data[i]),
                            "read {id} of vol {} byte {} returned {:#x}, allowed {:x?}",
                            pr.vol,
                            pr.off + i,
                            data[i],
                            allowed
                        );
                        self.checked_bytes += 1;
                        // A read of a byte nothing wrote meanwhile fixes its value:
                        // later reads must agree (no flip-flopping after a race or a crash).
                        let m = &mut self.model[pr.vol][pr.off + i];
                        if m.epoch == pr.epochs[i] && m.inflight.is_empty() {
                            m.acked = Some(vec![data[i]]);
                        }
                    }
                }
            }
        } else {
            assert!(
                self.trims.remove(&id).is_some() || r.result.is_ok(),
                "unknown response {id}"
            );
        }
    }

    /// I/O criticality inheritance over the whole run: (reissued writes,
    /// discarded completions of their originals).
    fn promotions(&self) -> (u64, u64) {
        let s = self.engine.stats();
        let (r, d) = self.promoted_before;
        (r + s.reissued_writes, d + s.discarded_completions)
    }

    /// The policies' counters over the whole run.
    fn counted(&self) -> Counted {
        let s = self.engine.stats();
        let b = self.counted_before;
        Counted {
            write_bypasses: b.write_bypasses + s.write_bypasses,
            destages: b.destages + s.destages,
            evictions: b.evictions + s.evictions,
            log_copies: b.log_copies + s.log_copies,
            log_forced_destages: b.log_forced_destages + s.log_forced_destages,
        }
    }

    /// Drop the buffer of answered request `id` once no command in flight names it.
    fn release_buffer(&mut self, id: u64) {
        let named = |c: &IoCommand| names(c) == Some(id);
        if !self.writes.contains_key(&id) && !self.pending.iter().any(named) {
            self.bufs.remove(&id);
        }
    }

    /// Execute one pending command (the `k`-th, modulo) and complete it.
    fn complete(&mut self, k: usize) {
        if self.pending.is_empty() {
            return;
        }
        let cmd = self.pending.remove(k % self.pending.len());
        self.completions += 1;
        let fail = self.fail_every > 0 && self.completions.is_multiple_of(self.fail_every);
        if !fail {
            self.devices.execute(&cmd, &mut self.bufs);
        }
        let result = if fail { Err(IoError::Io) } else { Ok(()) };
        self.engine
            .handle_completion(self.now, cmd.io(), result)
            .unwrap();
        self.pump();
        if let Some(id) = names(&cmd) {
            if !self.reads.contains_key(&id) {
                self.release_buffer(id);
            }
        }
    }

    /// Lose power: every command in flight is lost, each of its writes
    /// landing torn (a prefix of its bytes, chosen by the crash count; a page
    /// write's record or not, which the data checksum then judges), the
    /// engine restarts from the slot records recovery trusts, and bytes of
    /// requests in flight may hold the old or the new value — but must then
    /// stay put.
    /// Change an issuer's criticality: set or clear its hint, or start
    /// (even issuers) or end (odd ones, when one is in force) an inheritance.
    fn critical(&mut self, issuer: u32, on: Option<bool>) {
        let e = &mut self.engine;
        match on {
            Some(on) => {
                e.set_critical_issuer(issuer, on).unwrap();
            }
            None if e.issuer_criticality(issuer).1 && issuer % 2 == 1 => {
                e.end_inherited_criticality(issuer).unwrap();
            }
            None => {
                e.inherit_criticality(issuer).unwrap();
            }
        }
    }

    fn crash(&mut self) {
        if !self.config.persistent {
            return;
        }
        self.crashes += 1;
        let pending = std::mem::take(&mut self.pending);
        for (i, cmd) in pending.iter().enumerate() {
            let h = (self.crashes * 1_000 + i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let units = self.devices.written_units(cmd);
            let partial = Partial {
                units: (h >> 33) as usize % (units + 1),
                record: (h >> 17) & 1 == 1,
            };
            self.devices.apply_partial(cmd, partial, &mut self.bufs);
        }
        // Whoever opens the backing replays its committed journal transaction.
        self.devices.replay_journals();
        self.promoted_before = self.promotions();
        self.counted_before = self.counted();
        let sizes: Vec<u64> = self.vol_sizes.iter().map(|&s| s as u64).collect();
        // Log mode: the log read back from the tail, as the real store
        // reads it (a batch after a torn one is not found).
        self.engine = if self.config.log {
            let ordered = self.config.write_policy == WritePolicyKind::OrderedWriteBack;
            let (found, at) = self.devices.recoverable_log(ordered);
            Engine::recover_log_mode(self.config.clone(), &sizes, found, at).unwrap()
        } else {
            let found = self.devices.recoverable();
            Engine::recover(self.config.clone(), &sizes, found).unwrap()
        };
        self.pending.clear();
        for vol in &mut self.model {
            for m in vol.iter_mut() {
                if !m.inflight.is_empty() {
                    if let Some(a) = &mut m.acked {
                        a.extend(m.inflight.iter().map(|w| w.1));
                    }
                    m.inflight.clear();
                    m.epoch += 1;
                }
                m.recent_acks.clear();
            }
        }
        self.reads.clear();
        self.writes.clear();
        self.trims.clear();
        self.bufs.clear();
        self.pump();
    }

    fn settle(&mut self) {
        let mut rounds = 0;
        while !self.pending.is_empty() || !self.engine.is_idle() {
            if self.pending.is_empty() {
                self.tick(); // destage retry timers
            } else {
                self.complete(0);
            }
            rounds += 1;
            assert!(rounds < 1_000_000, "engine does not settle");
        }
    }

    /// Destage everything and compare the backing with the model.
    fn drain_and_check(&mut self) {
        self.settle();
        self.fail_every = 0;
        self.engine.start_drain();
        self.pump();
        self.settle();
        assert_eq!(self.engine.dirty_pages(), 0);
        for (v, vol) in self.model.iter().enumerate() {
            for (b, m) in vol.iter().enumerate() {
                if let Some(a) = &m.acked {
                    let got = self.devices.backing_unit(VolumeId(v as u16), b as u64);
                    assert!(
                        a.contains(&got),
                        "backing of vol {v} byte {b} after drain: {got:#x} not in {a:x?}",
                    );
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Volume, offset, length, tags (`flags_of`).
    Write(usize, usize, usize, u8),
    Zero(usize, usize, usize),
    Read(usize, usize, usize),
    Trim(usize, usize, usize),
    Complete(usize),
    CompleteMany(usize),
    Tick,
    Crash,
    /// Set (true) or clear an issuer's criticality hint, or (None) start
    /// or end one inheritance of it.
    Critical(u32, Option<bool>),
    /// A FLUSH of a volume with these tags (under CP+PI+IOI a critical
    /// issuer's promotes the bypasses in flight).
    Flush(usize, u8),
}

/// The request whose buffer `cmd` reads or fills, if any.
fn names(cmd: &IoCommand) -> Option<u64> {
    match cmd {
        IoCommand::WritePage {
            patch:
                Patch {
                    src: Source::Request { req, .. },
                    ..
                },
            ..
        }
        | IoCommand::WritePages {
            src: Source::Request { req, .. },
            ..
        }
        | IoCommand::WriteBacking {
            src: Source::Request { req, .. },
            ..
        }
        | IoCommand::ReadPage { req, .. }
        | IoCommand::ReadBacking { req, .. } => Some(req.0),
        _ => None,
    }
}

/// Request tags from one random byte: FUA, sync, critical, and an issuer
/// of 0..4 (0: untagged), for the request-oriented admission policies.
fn flags_of(tags: u8) -> RequestFlags {
    RequestFlags {
        fua: tags & 1 != 0,
        sync: tags & 2 != 0,
        critical: tags & 0x30 == 0x30,
        issuer: ((tags >> 2) & 3) as u32,
    }
}

fn op(vol_size: usize) -> impl Strategy<Value = Op> {
    let range = (0..2usize, 0..vol_size, 1..9000usize)
        .prop_map(move |(v, o, l)| (v, o, l.min(vol_size - o)));
    prop_oneof![
        6 => (range.clone(), any::<u8>()).prop_map(|((v, o, l), f)| Op::Write(v, o, l, f)),
        1 => range.clone().prop_map(|(v, o, l)| Op::Zero(v, o, l)),
        4 => range.clone().prop_map(|(v, o, l)| Op::Read(v, o, l)),
        1 => range.prop_map(|(v, o, l)| Op::Trim(v, o, l)),
        6 => any::<usize>().prop_map(Op::Complete),
        2 => (1..20usize).prop_map(Op::CompleteMany),
        1 => Just(Op::Tick),
        1 => Just(Op::Crash),
        1 => (1..4u32, prop_oneof![Just(Some(true)), Just(Some(false)), Just(None)])
            .prop_map(|(i, on)| Op::Critical(i, on)),
        1 => (0..2usize, any::<u8>()).prop_map(|(v, f)| Op::Flush(v, f)),
    ]
}

fn config_strategy() -> impl Strategy<Value = EngineConfig> {
    (
        prop_oneof![Just(512u64), Just(4096u64)],
        1..5u64,
        prop_oneof![Just(8u64), Just(24u64), Just(64u64)],
        prop_oneof![
            Just(WritePolicyKind::WriteBack),
            Just(WritePolicyKind::WriteThrough),
            Just(WritePolicyKind::WriteAround),
            Just(WritePolicyKind::OrderedWriteBack),
            Just(WritePolicyKind::JournaledWriteBack)
        ],
        prop_oneof![Just("lrw"), Just("cscan"), Just("wow")],
        prop_oneof![Just("lru"), Just("clock"), Just("arc")],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just("linear"), Just("adaptive")],
        any::<bool>(),
        // Sequential cutoff in pages (0: none): bypassed writes must never
        // let an older cached version come back over them.
        // Admission (request-oriented policies bypass by tags, issuers and
        // volumes) and whether volume 1 is critical, with the cutoff.
        (
            prop_oneof![3 => Just(0u64), 1 => Just(1u64), 1 => Just(3u64), 1 => Just(8u64)],
            prop_oneof![
                3 => Just("all"),
                1 => Just("sync"),
                1 => Just("volume"),
                1 => Just("cp"),
                1 => Just("cp-pi"),
                2 => Just("cp-pi-ioi")
            ],
            any::<bool>(),
        ),
        // Staleness bounds (maximum dirty age, idle destages): groups
        // destaged out of the order's turn must keep every rule above.
        // And log mode (format 3) where it applies: persistent, not ordered
        // or journaled, at least 64 slots.
        (
            prop_oneof![
                2 => Just((0u64, 0u32)),
                1 => Just((10_000_000u64, 0u32)),
                1 => Just((0u64, 2u32)),
                1 => Just((30_000_000u64, 1u32)),
            ],
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                page,
                group_pages,
                slots_groups,
                wp,
                order,
                repl,
                keep_clean,
                read_insert,
                rate,
                persistent,
                (cutoff_pages, admission, volume_1_critical),
                ((max_dirty_age_ns, idle_destages), log),
            )| {
                // Ordered and journaled write-back admit every write (their
                // config says why).
                let ordered = wp.keeps_backing_consistent();
                let cutoff_pages = if ordered { 0 } else { cutoff_pages };
                let admission = if ordered { "all" } else { admission };
                let cache_slots = (slots_groups * group_pages).max(24);
                let log = log && persistent && !ordered && cache_slots >= 64;
                EngineConfig {
                    staleness: StalenessConfig {
                        max_dirty_age_ns,
                        idle_after_ns: 2_000_000,
                        idle_destages,
                    },
                    sequential_cutoff_bytes: cutoff_pages * page,
                    admission: admission.into(),
                    critical_volumes: if volume_1_critical { vec![1] } else { vec![] },
                    persistent,
                    // Early answers of promoted bypasses (the harness keeps
                    // buffers until no command names them) in half the runs.
                    buffers_outlive_answers: read_insert != keep_clean,
                    page_size_bytes: page,
                    group_size_bytes: page * group_pages,
                    cache_slots,
                    log,
                    write_policy: wp,
                    destage_order: order.into(),
                    destage_rate: rate.into(),
                    replacement: repl.into(),
                    keep_clean,
                    read_insert,
                    // Small transactions, through a backing journal or NVRAM.
                    journal: JournalConfig {
                        commit_pages: group_pages,
                        checkpoint: if persistent {
                            CheckpointMode::BackingJournal { pages: 512 }
                        } else {
                            CheckpointMode::Nvram
                        },
                        ..JournalConfig::default()
                    },
                    ..EngineConfig::default()
                }
            },
        )
}

fn run(config: EngineConfig, ops: Vec<Op>, fail_every: u64) -> u64 {
    run_counting(config, ops, fail_every).0
}

/// Run `ops`; returns (bytes checked, crashes).
fn run_counting(config: EngineConfig, ops: Vec<Op>, fail_every: u64) -> (u64, u64) {
    let (checked, crashes, _) = run_promoting(config, ops, fail_every);
    (checked, crashes)
}

/// Run `ops`; returns (bytes checked, crashes, `Harness::promotions`).
fn run_promoting(config: EngineConfig, ops: Vec<Op>, fail_every: u64) -> (u64, u64, (u64, u64)) {
    let h = run_harness(config, ops, fail_every);
    (h.checked_bytes, h.crashes, h.promotions())
}

/// Run `ops` over two volumes, then drain and check the backing (with no
/// device errors) or settle; returns the harness as the run left it.
fn run_harness(config: EngineConfig, ops: Vec<Op>, fail_every: u64) -> Harness {
    let vol_size = 40_000;
    let mut h = Harness::new(config.clone(), &[vol_size, vol_size - 333], fail_every);
    let sizes = [vol_size, vol_size - 333];
    let slot_bytes = (config.cache_slots * config.page_size_bytes) as usize;
    // Log mode takes requests of up to a quarter of the slots (two pages
    // spare for the ends of an unaligned one).
    let slot_bytes = if config.log {
        ((config.cache_slots / 4 - 2) * config.page_size_bytes * 2) as usize
    } else {
        slot_bytes
    };
    for op in ops {
        match op {
            Op::Write(v, o, l, tags) => {
                let o = o.min(sizes[v] - 1);
                let l = l.min(sizes[v] - o).min(slot_bytes / 2);
                h.submit(v, RequestKind::Write, o, l, tags)
            }
            Op::Zero(v, o, l) => {
                let o = o.min(sizes[v] - 1);
                let l = l.min(sizes[v] - o).min(slot_bytes / 2);
                h.submit(v, RequestKind::WriteZeroes, o, l, 0)
            }
            Op::Read(v, o, l) => {
                let o = o.min(sizes[v] - 1);
                h.submit(v, RequestKind::Read, o, l.min(sizes[v] - o), 0)
            }
            Op::Trim(v, o, l) => {
                let o = o.min(sizes[v] - 1);
                h.submit(v, RequestKind::Trim, o, l.min(sizes[v] - o), 0)
            }
            Op::Complete(k) => h.complete(k),
            Op::CompleteMany(n) => (0..n).for_each(|k| h.complete(k * 7919)),
            Op::Tick => h.tick(),
            Op::Crash => h.crash(),
            Op::Critical(issuer, on) => h.critical(issuer, on),
            Op::Flush(v, tags) => h.submit(v, RequestKind::Flush, 0, 0, tags),
        }
    }
    if fail_every == 0 {
        h.drain_and_check();
    } else {
        h.settle();
    }
    h
}

/// Cases per property: 300, or `ENGINE_MODEL_CASES` for a longer soak (a
/// rare write-through error case took about 20,000 to show up).
fn cases() -> u32 {
    std::env::var("ENGINE_MODEL_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn reads_return_acknowledged_data(config in config_strategy(), ops in proptest::collection::vec(op(40_000), 1..120)) {
        run(config, ops, 0);
    }

    #[test]
    fn reads_stay_correct_with_device_errors(config in config_strategy(), ops in proptest::collection::vec(op(40_000), 1..120), fail_every in 3..12u64) {
        run(config, ops, fail_every);
    }

    /// Log mode (format 3) on every case: the same checks, crashes and
    /// device errors included.
    #[test]
    fn log_mode_keeps_acknowledged_data(config in log_config_strategy(), ops in proptest::collection::vec(op(40_000), 1..160), fail_every in prop_oneof![Just(0u64), 3..12u64]) {
        run(config, ops, fail_every);
    }
}

/// `config_strategy`'s configurations in log mode: persistent, at least
/// 64 slots.
fn log_config_strategy() -> impl Strategy<Value = EngineConfig> {
    config_strategy().prop_map(|mut c| {
        c.persistent = true;
        c.cache_slots = c.cache_slots.max(64);
        c.log = true;
        c
    })
}

/// A fixed pseudo-random script of `count` ops over both volumes: for each,
/// a volume, offset and length, then `pick(r, range, next)` with `r` uniform
/// in `0..modulo` chooses the op.
fn scripted_ops(
    seed: u64,
    count: usize,
    modulo: u64,
    pick: impl Fn(u64, (usize, usize, usize), &mut dyn FnMut() -> u64) -> Op,
) -> Vec<Op> {
    let mut rng = seed;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    (0..count)
        .map(|_| {
            let v = (next() % 2) as usize;
            let o = (next() % 39_000) as usize;
            let l = 1 + (next() % 9000) as usize;
            let r = next() % modulo;
            pick(r, (v, o, l), &mut next)
        })
        .collect()
}

#[test]
fn a_long_mixed_run_checks_many_bytes() {
    // A fixed, long sequence so that a run that checks nothing cannot pass.
    let ops = scripted_ops(0x1234_5678, 3000, 10, |r, (v, o, l), next| match r {
        0..=3 => Op::Write(v, o, l, 0),
        4..=6 => Op::Read(v, o, l),
        7 => Op::Trim(v, o, l),
        _ => Op::CompleteMany(1 + (next() % 8) as usize),
    });
    let config = EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 16384,
        cache_slots: 32,
        ..EngineConfig::default()
    };
    let checked = run(config, ops, 0);
    assert!(checked > 100_000, "only {checked} bytes were checked");
}

#[test]
fn a_long_run_with_crashes_loses_no_acknowledged_write() {
    let ops = scripted_ops(0x0bad_cafe, 4000, 40, |r, (v, o, l), next| match r {
        0..=14 => Op::Write(v, o, l, 0),
        15..=24 => Op::Read(v, o, l),
        25 => Op::Trim(v, o, l),
        26 => Op::Crash,
        _ => Op::CompleteMany(1 + (next() % 8) as usize),
    });
    for policy in [
        WritePolicyKind::WriteBack,
        WritePolicyKind::WriteThrough,
        WritePolicyKind::WriteAround,
        WritePolicyKind::OrderedWriteBack,
        WritePolicyKind::JournaledWriteBack,
    ] {
        let config = EngineConfig {
            page_size_bytes: 4096,
            group_size_bytes: 16384,
            cache_slots: 32,
            write_policy: policy,
            persistent: true,
            ..EngineConfig::default()
        };
        let (checked, crashes) = run_counting(config, ops.clone(), 0);
        assert!(crashes > 50, "{policy:?}: only {crashes} crashes");
        assert!(
            checked > 100_000,
            "{policy:?}: only {checked} bytes were checked"
        );
    }
}

/// Log mode's reclaim under crashes: a small ring overwritten at random,
/// so the tail meets live dirty pages (copied forward) while the destage
/// rate destages others; every acknowledged write survives.
#[test]
fn log_reclaim_copies_forward_losing_nothing() {
    let ops = scripted_ops(0x10_9c_0b, 24_000, 100, |r, (v, o, l), next| match r {
        0..=39 => Op::Write(v, o, l, 0),
        40..=49 => Op::Read(v, o, l),
        50 => Op::Trim(v, o, l),
        51 => Op::Crash,
        _ => Op::CompleteMany(1 + (next() % 8) as usize),
    });
    let config = EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 16384,
        cache_slots: 128,
        destage_rate: "linear".into(),
        persistent: true,
        log: true,
        ..EngineConfig::default()
    };
    let h = run_harness(config, ops, 0);
    let c = h.counted();
    assert!(h.crashes > 40, "only {} crashes", h.crashes);
    assert!(
        h.checked_bytes > 100_000,
        "only {} bytes checked",
        h.checked_bytes
    );
    assert!(c.log_copies > 300, "{c:?}");
    let from_checkpoint = h.devices.log_checkpoint_recoveries();
    assert!(
        from_checkpoint > 20,
        "only {from_checkpoint} of {} recoveries from a checkpoint",
        h.crashes
    );
}

/// CP+PI+IOI with crashes: non-critical writes bypass, critical writes,
/// FLUSHes and issuers that become critical promote the bypasses in flight
/// they wait on; no read sees an old version come back and the backing
/// ends as the last acknowledged writes, answered early from the cache or
/// not.
#[test]
fn promoted_bypasses_lose_nothing_and_never_land_over_newer_data() {
    let ops = scripted_ops(0x10_1a_0d, 4000, 48, |r, (v, o, l), next| match r {
        // Issuers 1-3, sync or not: tags carry the issuer in bits 2-3.
        0..=15 => Op::Write(
            v,
            o,
            l,
            ((next() % 3 + 1) << 2) as u8 | ((next() % 2) << 1) as u8,
        ),
        16..=23 => Op::Read(v, o, l),
        24 => Op::Trim(v, o, l),
        25 => Op::Crash,
        26..=27 => Op::Flush(v, ((next() % 3 + 1) << 2) as u8),
        28..=30 => Op::Critical(
            1 + (next() % 3) as u32,
            [Some(true), Some(false), None][(next() % 3) as usize],
        ),
        _ => Op::CompleteMany(1 + (next() % 8) as usize),
    });
    for early in [false, true] {
        let config = EngineConfig {
            page_size_bytes: 4096,
            group_size_bytes: 16384,
            cache_slots: 48,
            admission: "cp-pi-ioi".into(),
            persistent: true,
            buffers_outlive_answers: early,
            ..EngineConfig::default()
        };
        let (checked, crashes, (reissued, discarded)) = run_promoting(config, ops.clone(), 0);
        assert!(crashes > 50, "early {early}: only {crashes} crashes");
        assert!(
            checked > 100_000,
            "early {early}: only {checked} bytes checked"
        );
        assert!(reissued > 100, "early {early}: only {reissued} promotions");
        if early {
            assert!(discarded > 50, "only {discarded} discarded completions");
        } else {
            assert_eq!(
                discarded, 0,
                "answered after the original: nothing discarded"
            );
        }
    }
}

/// Write-around, persistent: a write through the cache (the page was being
/// filled by a read insert) leaves a version whose dirty record waits in the
/// free batch; a later write that bypasses the cache must not let a crash
/// bring that older version back over it.
#[test]
fn write_around_bypass_is_not_undone_by_an_unfreed_older_record() {
    let config = EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 4096,
        cache_slots: 64,
        write_policy: WritePolicyKind::WriteAround,
        read_insert: true,
        persistent: true,
        ..EngineConfig::default()
    };
    let mut h = Harness::new(config, &[1 << 20], 0);
    h.submit(0, RequestKind::Read, 0, 4096, 0);
    h.complete(0); // the backing read: the insert into the cache starts
    h.submit(0, RequestKind::Write, 0, 4096, 0); // through the cache
    while !h.pending.is_empty() {
        h.complete(0);
    }
    h.submit(0, RequestKind::Write, 0, 4096, 0); // bypasses the cache
    while !h.pending.is_empty() {
        h.complete(0);
    }
    assert!(
        h.devices.record_count() > 0,
        "the through-the-cache version's record is still on the device"
    );
    h.crash();
    h.submit(0, RequestKind::Read, 0, 4096, 0);
    h.settle();
    assert!(h.checked_bytes >= 4096, "the read was checked");
}

/// Found by the soak: a write sent through the cache (a `cp` bypass over a
/// page whose dirty version was being destaged) fails in the cache while its
/// backing write lands; the older version comes back, and its destage must
/// not race that backing write, or a clean copy older than the backing
/// answers reads (one read saw the old bytes, a later one the new).
#[test]
fn a_through_write_failing_in_the_cache_does_not_race_the_older_destage() {
    use Op::*;
    let config = EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 4096,
        cache_slots: 24,
        admission: "cp".into(),
        destage_order: "lrw".into(),
        destage_rate: "linear".into(),
        read_insert: false,
        keep_clean: true,
        buffers_outlive_answers: true,
        journal: JournalConfig {
            commit_pages: 1,
            checkpoint: CheckpointMode::Nvram,
            ..JournalConfig::default()
        },
        ..EngineConfig::default()
    };
    let ops = vec![
        Write(0, 0, 1, 0),
        Write(0, 0, 1, 0),
        Zero(0, 0, 1),
        Write(0, 0, 1, 0),
        Write(1, 10567, 1722, 49),
        Write(0, 0, 1, 0),
        Write(0, 0, 1, 64),
        CompleteMany(8),
        Write(0, 0, 1, 64),
        Complete(0),
        Write(0, 32768, 1, 49),
        Write(1, 12288, 4097, 128),
        Write(1, 16384, 1, 64),
        Read(1, 4984, 7305),
        Complete(10455527279289488971),
        Read(0, 0, 1),
        CompleteMany(9),
        Write(0, 0, 1, 0),
        Complete(0),
        Complete(0),
        Write(0, 0, 1, 0),
        Complete(0),
        Complete(0),
        Write(0, 0, 1, 0),
        Write(0, 14694, 5787, 0),
        Read(1, 11542, 1382),
        Complete(0),
        Write(0, 0, 1, 0),
        Zero(0, 0, 1),
        Write(0, 0, 1, 0),
        Write(0, 0, 1, 64),
        Complete(0),
        Complete(14809265782137761410),
        Write(1, 8855, 3434, 64),
        Write(0, 0, 1, 0),
        Complete(0),
        Complete(0),
        Write(0, 0, 1, 0),
        Write(0, 0, 1, 0),
        Write(0, 0, 1, 0),
        Read(1, 4677, 7613),
    ];
    run(config, ops, 10);
}

/// Every entry of every policy family's registry through the model, so a
/// policy is tested the day it is registered: each admission policy,
/// destage order, destage rate and replacement (the other families at their
/// defaults) under each write policy, on a fixed script of tagged writes,
/// reads, trims, FLUSHes, criticality changes and crashes, persistent, with
/// clean pages kept in a cache smaller than the volumes. Every read must
/// return acknowledged data, every request must be answered, and after a
/// drain the backing must equal the acknowledged writes; each policy must
/// have been at work (`Family::at_work`). The one combination refused by
/// design, a write policy that keeps the writes' order (ordered or
/// journaled write-back) with an admission that lets writes go around the
/// cache, must be refused at `Engine::new`, by that rule, and nothing else
/// may be.
#[test]
fn every_registered_policy_keeps_acknowledged_data() {
    use wcache_core::policy::admission::ADMISSIONS;
    use wcache_core::policy::destage_order::DESTAGE_ORDERS;
    use wcache_core::policy::destage_rate::DESTAGE_RATES;
    use wcache_core::policy::replacement::REPLACEMENTS;
    use wcache_core::policy::write_policy::WRITE_POLICIES;

    let ops = scripted_ops(0x0e7e_21e5, 800, 40, |r, (v, o, l), next| match r {
        0..=13 => Op::Write(v, o, l, next() as u8),
        14..=21 => Op::Read(v, o, l),
        22 => Op::Trim(v, o, l),
        23 => Op::Crash,
        24..=25 => Op::Flush(v, next() as u8),
        26..=27 => Op::Critical(
            1 + (next() % 3) as u32,
            [Some(true), Some(false), None][(next() % 3) as usize],
        ),
        28 => Op::Tick,
        _ => Op::CompleteMany(1 + (next() % 8) as usize),
    });
    // 512-byte pages: the two volumes hold about 156 pages, three times the cache.
    let base = EngineConfig {
        page_size_bytes: 512,
        group_size_bytes: 2048,
        cache_slots: 48,
        persistent: true,
        keep_clean: true,
        read_insert: true,
        critical_volumes: vec![1],
        journal: JournalConfig {
            commit_pages: 4,
            checkpoint: CheckpointMode::BackingJournal { pages: 512 },
            ..JournalConfig::default()
        },
        ..EngineConfig::default()
    };
    // (what, its entry, the family it varies, the configuration)
    let mut cases: Vec<(String, String, Family, EngineConfig)> = Vec::new();
    for wp in WRITE_POLICIES.entries {
        let with_policy = EngineConfig {
            write_policy: WritePolicyKind::from_name(wp.name).expect("a kind per write policy"),
            ..base.clone()
        };
        let mut case = |family: Family, name: &str, set: fn(&mut EngineConfig, &str)| {
            let mut c = with_policy.clone();
            set(&mut c, name);
            let entry = format!("{family:?} {name}");
            cases.push((format!("{} with {entry}", wp.name), entry, family, c));
        };
        for e in ADMISSIONS.entries {
            case(Family::Admission, e.name, |c, n| c.admission = n.into());
        }
        for e in DESTAGE_ORDERS.entries {
            case(Family::Order, e.name, |c, n| c.destage_order = n.into());
        }
        for e in DESTAGE_RATES.entries {
            case(Family::Rate, e.name, |c, n| c.destage_rate = n.into());
        }
        for e in REPLACEMENTS.entries {
            case(Family::Replacement, e.name, |c, n| c.replacement = n.into());
        }
    }
    // A configuration named by several families (all defaults) runs once.
    let mut ran: Vec<(EngineConfig, Ran)> = Vec::new();
    let mut entries_run = Vec::new();
    for (what, entry, family, config) in &cases {
        if refused_by_design(what, config) {
            continue;
        }
        let done = ran.iter().find(|(c, _)| c == config).map(|r| r.1);
        let r = done.unwrap_or_else(|| {
            let h = run_harness(config.clone(), ops.clone(), 0);
            let unanswered = h.writes.len() + h.reads.len() + h.trims.len();
            assert_eq!(unanswered, 0, "{what}: requests left unanswered");
            let r = Ran {
                answered: h.answered,
                checked_bytes: h.checked_bytes,
                crashes: h.crashes,
                counted: h.counted(),
            };
            ran.push((config.clone(), r));
            r
        });
        assert!(r.crashes >= 10, "{what}: {r:?}");
        assert!(r.answered > 100, "{what}: {r:?}");
        assert!(r.checked_bytes > 100_000, "{what}: {r:?}");
        family.at_work(what, config, &r.counted);
        entries_run.push(entry);
    }
    // Every entry ran under some write policy (each write policy under all).
    let families = ADMISSIONS.entries.len()
        + DESTAGE_ORDERS.entries.len()
        + DESTAGE_RATES.entries.len()
        + REPLACEMENTS.entries.len();
    entries_run.sort();
    entries_run.dedup();
    assert_eq!(entries_run.len(), families, "{entries_run:?}");
}

/// What one configuration's run showed.
#[derive(Clone, Copy, Debug)]
struct Ran {
    answered: u64,
    checked_bytes: u64,
    crashes: u64,
    counted: Counted,
}

/// The policy family a case varies.
#[derive(Clone, Copy, Debug)]
enum Family {
    Admission,
    Order,
    Rate,
    Replacement,
}

impl Family {
    /// The varied policy was at work: an admission other than the default
    /// (`all`) turned writes away, and the default turned none away unless
    /// the write policy sends writes around the cache; a destage order and
    /// rate destaged what a write policy that keeps dirty data left; a
    /// replacement chose clean pages to evict.
    fn at_work(self, what: &str, config: &EngineConfig, counted: &Counted) {
        let default = EngineConfig::default();
        match self {
            Family::Admission if config.admission != default.admission => {
                assert!(counted.write_bypasses > 0, "{what}: {counted:?}")
            }
            Family::Admission if !config.write_policy.goes_around() => {
                assert_eq!(counted.write_bypasses, 0, "{what}: {counted:?}")
            }
            Family::Admission => {}
            Family::Order | Family::Rate if config.write_policy.keeps_dirty() => {
                assert!(counted.destages > 0, "{what}: {counted:?}")
            }
            Family::Order | Family::Rate => {}
            Family::Replacement => assert!(counted.evictions > 0, "{what}: {counted:?}"),
        }
    }
}

/// Whether `config` is a combination refused by design, which `Engine::new`
/// must then refuse with its rule: a write policy that keeps the writes'
/// order (`keeps_backing_consistent`: ordered, journaled) admits every
/// write, and only the admission `all` (the default) does.
fn refused_by_design(what: &str, config: &EngineConfig) -> bool {
    let admits_every_write = config.admission == EngineConfig::default().admission;
    let refused = config.write_policy.keeps_backing_consistent() && !admits_every_write;
    match Engine::new(config.clone()) {
        Ok(_) => assert!(!refused, "{what}: accepted"),
        Err(e @ (ConfigError::Ordered(_) | ConfigError::Journaled(_))) => {
            assert!(refused, "{what}: refused: {e}");
            let journaled = matches!(e, ConfigError::Journaled(_));
            assert_eq!(journaled, config.write_policy.journaled(), "{what}: {e}");
            let why = e.to_string();
            assert!(
                why.contains("every write must enter the cache"),
                "{what}: {why}"
            );
        }
        Err(other) => panic!("{what}: refused: {other}"),
    }
    refused
}
