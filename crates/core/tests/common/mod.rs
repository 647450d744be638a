//! The engine on the reference devices, driven one command at a time:
//! the bench the integration tests of bypasses, promotion and read
//! inserts share. Every check it makes is on bytes.
#![allow(dead_code)] // each test file uses a part of it

use std::collections::HashMap;
use wcache_core::reference::Reference;
use wcache_core::time::Nanos;
use wcache_core::types::{RequestId, VolumeId};
use wcache_core::{Engine, EngineConfig, IoCommand, Request, RequestFlags, RequestKind};

pub const PAGE: u64 = 4096;

pub struct Bench {
    pub e: Engine,
    pub dev: Reference<u8>,
    pub bufs: HashMap<u64, Vec<u8>>,
    pub cmds: Vec<IoCommand>,
    pub answered: Vec<u64>,
    /// Answered while a backing write still reads their buffer.
    pub kept: Vec<u64>,
    pub next_id: u64,
}

pub fn is_original(c: &IoCommand) -> bool {
    matches!(c, IoCommand::WriteBacking { .. })
}

impl Bench {
    pub fn new(admission: &str, early: bool, slots: u64) -> Bench {
        Bench::with(EngineConfig {
            cache_slots: slots,
            group_size_bytes: 4 * PAGE,
            admission: admission.into(),
            buffers_outlive_answers: early,
            ..EngineConfig::default()
        })
    }

    pub fn with(config: EngineConfig) -> Bench {
        let slots = config.cache_slots;
        let mut e = Engine::new(config).unwrap();
        e.add_volume(1 << 20).unwrap();
        e.add_volume(1 << 20).unwrap();
        e.set_critical_issuer(1, true).unwrap();
        Bench {
            e,
            dev: Reference::new(PAGE, 1, slots, &[1 << 20, 1 << 20]),
            bufs: HashMap::new(),
            cmds: Vec::new(),
            answered: Vec::new(),
            kept: Vec::new(),
            next_id: 1,
        }
    }

    pub fn pump(&mut self) {
        while let Some(c) = self.e.poll_command() {
            self.cmds.push(c);
        }
        while let Some(r) = self.e.poll_response() {
            assert!(r.result.is_ok(), "{r:?}");
            self.answered.push(r.id.0);
            if r.buffer_in_use {
                self.kept.push(r.id.0);
            }
        }
    }

    pub fn submit(
        &mut self,
        volume: u16,
        kind: RequestKind,
        page: u64,
        byte: u8,
        issuer: u32,
    ) -> u64 {
        let len = match kind {
            RequestKind::Write | RequestKind::Read => PAGE,
            _ => 0,
        };
        self.submit_range(volume, kind, (page * PAGE, len), byte, issuer)
    }

    /// A request of `len` bytes at `offset` (a write's bytes, or the stale
    /// contents of a read's buffer, all `byte`).
    pub fn submit_range(
        &mut self,
        volume: u16,
        kind: RequestKind,
        (offset_bytes, len_bytes): (u64, u64),
        byte: u8,
        issuer: u32,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        if matches!(kind, RequestKind::Write | RequestKind::Read) {
            self.bufs.insert(id, vec![byte; len_bytes as usize]);
        }
        let req = Request {
            id: RequestId(id),
            volume: VolumeId(volume),
            kind,
            offset_bytes,
            len_bytes,
            flags: RequestFlags {
                sync: true,
                issuer,
                ..RequestFlags::default()
            },
        };
        self.e.handle_request(Nanos(0), req).unwrap();
        self.pump();
        id
    }

    pub fn write(&mut self, page: u64, byte: u8, issuer: u32) -> u64 {
        self.submit(0, RequestKind::Write, page, byte, issuer)
    }

    /// Complete commands `pick` selects, and those they lead to, until none is left.
    pub fn complete_while(&mut self, pick: impl Fn(&IoCommand) -> bool) -> usize {
        let mut n = 0;
        while let Some(k) = self.cmds.iter().position(&pick) {
            let c = self.cmds.remove(k);
            self.dev.execute(&c, &mut self.bufs);
            self.e.handle_completion(Nanos(0), c.io(), Ok(())).unwrap();
            self.pump();
            n += 1;
        }
        n
    }

    pub fn answered(&self, id: u64) -> bool {
        self.answered.contains(&id)
    }

    pub fn backing_byte(&self, page: u64) -> u8 {
        self.dev.backing_unit(VolumeId(0), page * PAGE)
    }

    pub fn destages(&self) -> usize {
        self.cmds
            .iter()
            .filter(|c| matches!(c, IoCommand::Destage { .. }))
            .count()
    }

    /// Do the one command `pick` selects on the device, without telling
    /// the engine yet (`report` does).
    pub fn execute(&mut self, pick: impl Fn(&IoCommand) -> bool) -> IoCommand {
        let picked: Vec<usize> = (0..self.cmds.len())
            .filter(|&k| pick(&self.cmds[k]))
            .collect();
        assert_eq!(picked.len(), 1, "one such command: {:?}", self.cmds);
        let c = self.cmds.remove(picked[0]);
        self.dev.execute(&c, &mut self.bufs);
        c
    }

    /// Tell the engine that command `c`, done on the device, completed.
    pub fn report(&mut self, c: IoCommand) {
        self.e.handle_completion(Nanos(0), c.io(), Ok(())).unwrap();
        self.pump();
    }

    /// Read `page` of volume 0 to the end; its first byte.
    pub fn read(&mut self, page: u64) -> u8 {
        let id = self.submit(0, RequestKind::Read, page, 0xEE, 0);
        self.complete_while(|_| true);
        assert!(self.answered(id));
        self.bufs[&id][0]
    }

    /// Drain: every command completes, originals last.
    pub fn drain(&mut self) {
        self.e.start_drain();
        self.pump();
        self.complete_while(|c| !is_original(c));
        self.complete_while(|_| true);
        assert!(self.e.is_idle() && self.e.dirty_pages() == 0);
    }
}
