//! Format 3's data path (the engine's log mode): a batch is its header
//! slot and its pages, each from its request's buffer where the request
//! covers it whole, else built in one aligned buffer (a base read and the
//! patch over it), written with one vectored write (two where it passes
//! the ring's end); the tail's moves. Batches come one at
//! a time, in sequence order, to the thread that pumped them (group commit:
//! the writes admitted while one is written join the next).

use super::*;
use crate::device::DIRECT_MIN_BYTES;
use crate::format::log::{BatchHeader, Extent};
use crate::store::{LogFound, LogWriter};
use wcache_core::types::IoId;

impl Driver {
    /// Starts the engine in log mode over a format-3 cache: `found` and
    /// `log` are what the store read back (`CacheStore::read_log`).
    pub fn recover_log(
        mut engine_config: EngineConfig,
        store: Arc<CacheStore>,
        found: Vec<RecoveredSlot>,
        log: &LogFound,
        backings: Vec<Arc<dyn BlockDevice>>,
        config: DriverConfig,
    ) -> Result<Driver, StartError> {
        let layout = store.layout();
        assert!(layout.log, "a format-3 store");
        engine_config.persistent = true;
        engine_config.log = true;
        engine_config.cache_slots = layout.slot_count;
        let cache = store.device().clone();
        let writer = LogWriter::new(store, log);
        let start = (writer, log.position.clone());
        Driver::start(
            engine_config,
            cache,
            None,
            found,
            backings,
            (config, Some(start)),
        )
    }
}

impl Driver {
    /// Format 3, with nothing in flight and nothing dirty (a clean close):
    /// the log is emptied (its tail moved to its head), so the next start
    /// reads no batch. Nothing to do in format 2.
    pub fn empty_log(&self) -> Result<(), DeviceError> {
        let Some(log) = &self.shared.log else {
            return Ok(());
        };
        let at = self.shared.lock_core().engine.log_position();
        let at = at.expect("log mode has a position");
        let slots = log.store().layout().slot_count;
        let head = ((at.tail.0 as u64 + at.log_slots as u64) % slots) as u32;
        log.advance(head, at.next_seq)
    }
}

impl Shared {
    /// Runs a `WriteBatch` and completes it (and first, on their own, the
    /// pages whose base could not be read: they are left out of the header).
    /// The batch is built in the driver's one batch buffer: a buffer per
    /// thread kept a batch's worth of memory (up to 4 MiB) on every thread
    /// that ever wrote one, and the memory soak's RSS grew with the
    /// server's threads (33 to 51 MiB over 1,200 connections).
    pub(super) fn execute_and_complete_log_batch(&self, job: Job, jobs: &mut VecDeque<Job>) {
        let (result, failed) = {
            let mut buf = self.batch_buf.lock().unwrap_or_else(|p| p.into_inner());
            SCRATCH.with(|s| self.execute_log_batch(&job, &mut buf, &mut s.borrow_mut()))
        };
        let mut core = self.lock_core();
        let now = self.now();
        for (io, e) in failed {
            core.engine
                .handle_completion(now, io, Err(e))
                .expect("completion of a page the engine issued");
        }
        core.engine
            .handle_completion(now, job.cmd.io(), result)
            .expect("completion of a batch the engine issued");
        self.pump(&mut core, jobs);
        drop(core);
        self.run_answered();
    }

    /// Builds and writes the batch, then its barrier: every batch unless
    /// persist-on-flush, and there too a batch that carries frees (a page
    /// may leave the cache only once the versions that superseded it are
    /// durable). Returns the batch's result and the pages that failed apart.
    fn execute_log_batch(
        &self,
        job: &Job,
        buf: &mut AlignedBuf,
        scratch: &mut Scratch,
    ) -> (Result<(), IoError>, Vec<(IoId, IoError)>) {
        let IoCommand::WriteBatch {
            header,
            seq,
            next_header,
            pages,
            frees,
            ..
        } = &job.cmd
        else {
            unreachable!("a batch");
        };
        let log = self.log.as_ref().expect("log mode has a log writer");
        let p = self.page_size_bytes as usize;
        let n = log.payload_slots(*header, *next_header);
        let built: usize = pages.iter().map(|c| c.page_count() as usize).sum();
        let holes = n - built;
        let buf = buf.get((1 + n) * p);
        buf[(1 + built) * p..].fill(0);
        let persist_on_flush = self.persist_on_flush.load(Ordering::Relaxed);
        let large = self.batch_goes_direct(buf.len(), persist_on_flush);
        let (extents, failed) = self.build_batch_pages(job, pages, &mut buf[p..], scratch);
        let frees: Vec<u32> = frees
            .iter()
            .flat_map(|f| match f {
                IoCommand::FreeSlots { slots, .. } => slots.iter().map(|s| s.0),
                _ => unreachable!("a batch's frees are FreeSlots"),
            })
            .collect();
        let needs_barrier =
            !frees.is_empty() || (!persist_on_flush && extents.iter().any(|e| e.dirty));
        let head_of = BatchHeader {
            seq: *seq,
            epoch: log.epoch(),
            payload_slots: n as u32,
            next_header: next_header.0,
            extents,
            frees,
        };
        let (head, payload) = buf.split_at_mut(p);
        let mut slices = self.batch_slices(job, pages, payload);
        if holes > 0 {
            slices.push(&payload[built * p..]);
        }
        let mut result = log.write_batch(header.0, &head_of, head, &slices, large);
        self.counters
            .cache_page_writes
            .fetch_add(1, Ordering::Relaxed);
        if result.is_ok() && needs_barrier {
            result = self.make_durable(&self.cache, true);
        }
        (result.map_err(|e| self.io_fail(&e, true)), failed)
    }

    /// A batch of `bytes` goes around the page cache (O_DIRECT) where that
    /// measured faster: from 64 KiB when each batch waits for its barrier
    /// anyway (persist-on-write), from 1 MiB under persist-on-flush, where
    /// a buffered write returns at memory speed (2026-11-27, quick harness:
    /// 4 KiB QD32 batches of about 128 KiB ran at 56 K IOPS direct, 92–107
    /// K buffered; 1 MiB writes at 2.1–2.2 GB/s direct, 1.4–1.7 buffered).
    fn batch_goes_direct(&self, bytes: usize, persist_on_flush: bool) -> bool {
        let min = if persist_on_flush {
            1 << 20
        } else {
            DIRECT_MIN_BYTES
        };
        bytes >= min
    }

    /// Builds each page of the batch in `out` (one page each, in order) and
    /// returns the extents they make; a page whose base cannot be read is
    /// zeros in a hole (recovery skips it: it must not pass for a newer
    /// version of its page) and is returned with its error. A run of whole
    /// pages from its request's buffer (`WritePages`) is not copied.
    fn build_batch_pages(
        &self,
        job: &Job,
        pages: &[IoCommand],
        out: &mut [u8],
        scratch: &mut Scratch,
    ) -> (Vec<Extent>, Vec<(IoId, IoError)>) {
        let p = self.page_size_bytes as usize;
        let mut extents: Vec<Extent> = Vec::new();
        let mut failed = Vec::new();
        let mut i = 0;
        for (c, cmd) in pages.iter().enumerate() {
            debug_assert!(cmd.page_count() > 0, "a batch's pages are page writes");
            let from_request = self.request_run(job, c, cmd).is_some();
            for w in cmd.page_writes(p as u32) {
                let page = &mut out[i * p..(i + 1) * p];
                i += 1;
                let built = if from_request {
                    Ok(()) // written from the request's buffer (`batch_slices`)
                } else {
                    self.build_page(job.bufs[c], &w.base, &w.patch, page, &mut scratch.bounce)
                };
                let hole = match built {
                    Ok(()) => false,
                    Err((e, side)) => {
                        page.fill(0);
                        failed.push((w.io, self.io_fail(&e, side.unwrap_or(true))));
                        true
                    }
                };
                add_to_extents(&mut extents, &w.record, hole);
            }
        }
        (extents, failed)
    }

    /// The pages of the batch's `c`-th command as they are in its
    /// request's buffer, when it covers them whole and the buffer suits the
    /// device (aligned where it takes direct I/O).
    fn request_run<'a>(&self, job: &'a Job, c: usize, cmd: &IoCommand) -> Option<&'a [u8]> {
        let p = self.page_size_bytes as usize;
        let (offset_bytes, len) = match *cmd {
            IoCommand::WritePage { patch, .. } => match patch.src {
                Source::Request { offset_bytes, .. }
                    if patch.page_offset_bytes == 0 && patch.len_bytes as usize == p =>
                {
                    (offset_bytes, p)
                }
                _ => return None,
            },
            IoCommand::WritePages {
                src: Source::Request { offset_bytes, .. },
                count,
                ..
            } => (offset_bytes, count as usize * p),
            _ => return None,
        };
        // SAFETY: the request is in flight (module header of driver.rs).
        let data = unsafe { job.bufs[c].slice(offset_bytes, len) };
        let a = self.cache.dev.alignment_bytes();
        (a <= 1 || is_aligned(data.as_ptr() as usize, 0, len, a)).then_some(data)
    }

    /// The batch's pages as written: from the request's buffer where it
    /// holds them whole (a run in one slice), else as built in `built`.
    fn batch_slices<'a>(
        &self,
        job: &'a Job,
        pages: &[IoCommand],
        built: &'a [u8],
    ) -> Vec<&'a [u8]> {
        let p = self.page_size_bytes as usize;
        let mut i = 0;
        let mut slices = Vec::with_capacity(pages.len());
        for (c, cmd) in pages.iter().enumerate() {
            let n = cmd.page_count() as usize;
            slices.push(
                self.request_run(job, c, cmd)
                    .unwrap_or(&built[i * p..(i + n) * p]),
            );
            i += n;
        }
        slices
    }

    /// `AdvanceLog` (every earlier write durable, then the log-start
    /// block) and `LogCheckpoint` (the checkpoint copy, durable with every
    /// earlier write, then named in the log-start block).
    pub(super) fn execute_log_start(&self, cmd: &IoCommand) -> Result<(), DeviceError> {
        let log = self.log.as_ref().expect("log mode has a log writer");
        match cmd {
            IoCommand::AdvanceLog { tail, tail_seq, .. } => log.advance(tail.0, *tail_seq),
            IoCommand::LogCheckpoint {
                position, entries, ..
            } => log.checkpoint(position, entries),
            _ => unreachable!("a command that writes the log-start block"),
        }
    }
}

/// Page `record` (a hole if its base could not be read) joins the last of
/// `extents` when it continues it, else starts the next.
fn add_to_extents(extents: &mut Vec<Extent>, record: &wcache_core::SlotRecord, hole: bool) {
    let (volume, first_page) = (record.key.volume(), record.key.page());
    match extents.last_mut() {
        Some(e) if e.hole && hole => e.pages += 1,
        Some(e)
            if !e.hole
                && !hole
                && e.dirty == record.dirty
                && e.volume == volume
                && e.first_page.0 + e.pages as u64 == first_page.0
                && e.first_seq + e.pages as u64 == record.seq =>
        {
            e.pages += 1
        }
        _ => extents.push(Extent {
            volume,
            first_page,
            pages: 1,
            first_seq: record.seq,
            dirty: record.dirty && !hole,
            hole,
        }),
    }
}
