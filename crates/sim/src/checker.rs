//! The data model of a simulation: what every cache slot, backing sector and
//! request buffer holds, as 64-bit stamps per 512-byte sector, and the check
//! that every read returns the last acknowledged write (or one that raced
//! with it). It executes each engine command's data effect when the command
//! completes, exactly as a driver moving real bytes would.

use crate::order_check::{OrderCheck, OrderError};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use wcache_core::reference::{Partial, Reference};
use wcache_core::types::VolumeId;
use wcache_core::{IoCommand, LogPosition, RecoveredSlot, Source};

pub const SECTOR_BYTES: u64 = 512;

/// What one sector may hold: stamps allowed after the writes acknowledged so
/// far, plus writes in flight. `None` = unspecified (trimmed, failed write).
#[derive(Default)]
struct SectorModel {
    acked: Option<Vec<u64>>,
    inflight: Vec<(u64, u64)>,    // (stamp, issue tick)
    recent_acks: Vec<(u64, u64)>, // (ack tick, stamp)
}

struct PendingRead {
    volume: u16,
    first_sector: u64,
    allowed: Vec<Option<Vec<u64>>>,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "read {req} of volume {volume} sector {sector} returned stamp {got:#x}, allowed {allowed:x?}"
)]
pub struct IntegrityError {
    pub req: u64,
    pub volume: u16,
    pub sector: u64,
    pub got: u64,
    pub allowed: Vec<u64>,
}

pub struct DataModel {
    /// The cache slots and backing volumes, one stamp per sector; absent
    /// backing sectors are 0 (never written).
    devices: Reference<u64>,
    /// Request buffers, by request id, one stamp per sector.
    bufs: HashMap<u64, Vec<u64>>,
    /// Answered writes whose buffer a backing write still reads.
    late: HashSet<u64>,
    model: HashMap<(u16, u64), SectorModel>,
    reads: HashMap<u64, PendingRead>,
    writes: HashMap<u64, (u16, u64, u64)>, // id -> (volume, first sector, sectors)
    ticks: u64,
    pub sectors_checked: u64,
    /// Point-in-time consistency of the backing (ordered write-back).
    order: Option<OrderCheck>,
}

fn stamp(req: u64, i: u64) -> u64 {
    (req << 20) | (i + 1)
}

impl DataModel {
    pub fn new(page_size_bytes: u64, cache_slots: u64, volume_sizes_bytes: &[u64]) -> DataModel {
        DataModel {
            devices: Reference::new(
                page_size_bytes,
                SECTOR_BYTES,
                cache_slots,
                volume_sizes_bytes,
            ),
            bufs: HashMap::default(),
            late: HashSet::default(),
            model: HashMap::default(),
            reads: HashMap::default(),
            writes: HashMap::default(),
            ticks: 0,
            sectors_checked: 0,
            order: None,
        }
    }

    /// Also check, at every crash, that the backing alone is point-in-time
    /// consistent (`OrderCheck`).
    pub fn track_order(&mut self) {
        self.order.get_or_insert_with(OrderCheck::default);
    }

    /// Check App-C at every crash: the backing alone holds the state of a
    /// declared consistency point (`point`).
    pub fn track_points(&mut self) {
        self.track_order();
        if let Some(o) = &mut self.order {
            o.track_points();
        }
    }

    /// An application consistency point is declared now.
    pub fn point(&mut self) {
        if let Some(o) = &mut self.order {
            o.point();
        }
    }

    /// Crashes whose backing passed the point-in-time check.
    pub fn order_checks(&self) -> u64 {
        self.order.as_ref().map_or(0, |o| o.checks)
    }

    /// The point-in-time check of the backing as it is now (before the
    /// crash forgets the history it needs).
    pub fn check_order(&mut self) -> Result<(), OrderError> {
        let Some(order) = &mut self.order else {
            return Ok(());
        };
        let devices = &self.devices;
        order.check(
            |volume, sector| devices.backing_unit(VolumeId(volume), sector),
            stamp,
            |got| got >> 20,
        )
    }

    /// A request is handed to the engine; ranges are whole sectors.
    pub fn submit(
        &mut self,
        id: u64,
        volume: u16,
        is_write: bool,
        offset_bytes: u64,
        len_bytes: u64,
    ) {
        debug_assert_eq!(offset_bytes % SECTOR_BYTES, 0);
        debug_assert_eq!(len_bytes % SECTOR_BYTES, 0);
        self.ticks += 1;
        let first = offset_bytes / SECTOR_BYTES;
        let n = len_bytes / SECTOR_BYTES;
        if is_write {
            let data: Vec<u64> = (0..n).map(|i| stamp(id, i)).collect();
            for i in 0..n {
                let m = self
                    .model
                    .entry((volume, first + i))
                    .or_insert_with(|| SectorModel {
                        acked: Some(vec![0]),
                        ..Default::default()
                    });
                m.inflight.push((data[i as usize], self.ticks));
            }
            for r in self.reads.values_mut() {
                if r.volume != volume {
                    continue;
                }
                for i in 0..n {
                    let s = first + i;
                    if s >= r.first_sector && s < r.first_sector + r.allowed.len() as u64 {
                        if let Some(a) = &mut r.allowed[(s - r.first_sector) as usize] {
                            a.push(data[i as usize]);
                        }
                    }
                }
            }
            self.bufs.insert(id, data);
            self.writes.insert(id, (volume, first, n));
            if let Some(o) = &mut self.order {
                o.issue(id, volume, first, n);
            }
        } else {
            let allowed = (first..first + n)
                .map(|s| match self.model.get(&(volume, s)) {
                    None => Some(vec![0]),
                    Some(m) => m.acked.as_ref().map(|a| {
                        let mut v = a.clone();
                        v.extend(m.inflight.iter().map(|&(x, _)| x));
                        v
                    }),
                })
                .collect();
            self.bufs.insert(id, vec![u64::MAX; n as usize]);
            self.reads.insert(
                id,
                PendingRead {
                    volume,
                    first_sector: first,
                    allowed,
                },
            );
        }
    }

    /// The engine answered request `id`; with `buffer_in_use` (a promoted
    /// bypass answered early: `Response::buffer_in_use`) its buffer stays
    /// until the backing write naming it is done.
    pub fn respond(
        &mut self,
        id: u64,
        ok: bool,
        buffer_in_use: bool,
    ) -> Result<(), IntegrityError> {
        if let Some(o) = &mut self.order {
            o.answer(id, ok);
        }
        if let Some((volume, first, n)) = self.writes.remove(&id) {
            let data = if buffer_in_use {
                self.late.insert(id);
                self.bufs.get(&id).cloned().unwrap_or_default()
            } else {
                self.bufs.remove(&id).unwrap_or_default()
            };
            self.ticks += 1;
            for i in 0..n {
                let Some(m) = self.model.get_mut(&(volume, first + i)) else {
                    continue;
                };
                let value = data[i as usize];
                let Some(at) = m.inflight.iter().position(|&(v, _)| v == value) else {
                    continue;
                };
                let (_, issued) = m.inflight.remove(at);
                let mut may = vec![value];
                may.extend(
                    m.recent_acks
                        .iter()
                        .filter(|&&(t, _)| t > issued)
                        .map(|&(_, v)| v),
                );
                if !ok {
                    match &m.acked {
                        Some(old) => may.extend(old.iter().copied()),
                        None => may.clear(),
                    }
                }
                m.acked = if may.is_empty() { None } else { Some(may) };
                m.recent_acks.push((self.ticks, value));
                match m.inflight.iter().map(|&(_, t)| t).min() {
                    Some(t) => m.recent_acks.retain(|&(a, _)| a > t),
                    None => m.recent_acks.clear(),
                }
            }
        } else if let Some(r) = self.reads.remove(&id) {
            let data = self.bufs.remove(&id).unwrap_or_default();
            if !ok {
                return Ok(());
            }
            for (i, allowed) in r.allowed.iter().enumerate() {
                let Some(allowed) = allowed else { continue };
                self.sectors_checked += 1;
                if !allowed.contains(&data[i]) {
                    return Err(IntegrityError {
                        req: id,
                        volume: r.volume,
                        sector: r.first_sector + i as u64,
                        got: data[i],
                        allowed: allowed.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The backing is opened after a crash: committed journal transactions
    /// are replayed (journaled write-back).
    pub fn replay_journals(&mut self) -> usize {
        self.devices.replay_journals()
    }

    /// Apply the data effect of a command that completed successfully.
    pub fn execute(&mut self, cmd: &IoCommand) {
        self.devices.execute(cmd, &mut self.bufs);
        self.done(cmd);
    }

    /// A command is done (landed or failed): the buffer of an answered
    /// request it was the last to read goes.
    pub fn done(&mut self, cmd: &IoCommand) {
        if let IoCommand::WriteBacking {
            src: Source::Request { req, .. },
            ..
        } = cmd
        {
            if self.late.remove(&req.0) {
                self.bufs.remove(&req.0);
            }
        }
    }

    /// Sectors `cmd` writes (records for `FreeSlots`).
    pub fn written_sectors(&self, cmd: &IoCommand) -> usize {
        self.devices.written_units(cmd)
    }

    /// The cache device lies about durability: it may lose its last
    /// `writes` completed writes at a crash.
    pub fn set_volatile_writes(&mut self, writes: usize) {
        self.devices.set_volatile_writes(writes);
    }

    /// What landed of a command in flight at a crash.
    pub fn apply_partial(&mut self, cmd: &IoCommand, partial: Partial) {
        self.devices.apply_partial(cmd, partial, &mut self.bufs);
    }

    /// Power fails (after `apply_partial` of the commands in flight): requests
    /// in flight are never answered, so each sector a write in flight covered
    /// may hold the old or the new data; then, once a read sees it, only
    /// that. With `lose_cache` the cache device is gone, and when it held the
    /// only copy of acknowledged data (`cache_only_copy`, write-back) nothing
    /// is promised any more. Returns the records recovery trusts and how many
    /// acknowledged cache writes a lying device lost.
    pub fn crash(
        &mut self,
        lose_cache: bool,
        cache_only_copy: bool,
        log: Option<bool>,
    ) -> (Vec<RecoveredSlot>, Option<LogPosition>, usize) {
        let lost = self.devices.lose_volatile();
        if lose_cache {
            self.devices.lose_cache();
        }
        for m in self.model.values_mut() {
            if let Some(a) = &mut m.acked {
                a.extend(m.inflight.iter().map(|&(x, _)| x));
            }
            m.inflight.clear();
            m.recent_acks.clear();
            if lose_cache && cache_only_copy {
                m.acked = None;
            }
        }
        self.reads.clear();
        self.writes.clear();
        self.bufs.clear();
        self.late.clear();
        if let Some(o) = &mut self.order {
            o.crash(lose_cache);
        }
        if let Some(keep_older) = log {
            // Log mode: the log read back from its tail, as the real store does.
            let (found, at) = self.devices.recoverable_log(keep_older);
            return (found, Some(at), lost);
        }
        (self.devices.recoverable(), None, lost)
    }

    /// After a full drain: every sector's backing stamp must be allowed.
    /// Returns the sectors checked.
    pub fn check_backing(&self) -> Result<u64, IntegrityError> {
        let mut checked = 0;
        for (&(volume, sector), m) in &self.model {
            let Some(allowed) = &m.acked else { continue };
            let got = self.devices.backing_unit(VolumeId(volume), sector);
            if !allowed.contains(&got) {
                return Err(IntegrityError {
                    req: 0,
                    volume,
                    sector,
                    got,
                    allowed: allowed.clone(),
                });
            }
            checked += 1;
        }
        Ok(checked)
    }
}
