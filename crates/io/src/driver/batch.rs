//! Format 2's page writes run in batches: each page's data (whole pages of
//! requests in runs of consecutive slots, partial pages built in a scratch
//! page), then their records, then one barrier for the batch.

use super::*;

impl Shared {
    /// Page writes and record frees as one batch, results in
    /// `scratch.batch.results`:
    /// 1. each page's data: partial pages built one at a time in the scratch
    ///    page; whole pages from requests sorted by slot, each run of
    ///    consecutive slots written by one vectored write;
    /// 2. the records of the pages written, one device write per record
    ///    block touched (group-committed with other threads' writes of the
    ///    block), and the records freed (zeroed);
    /// 3. one durability barrier (group-committed flush) for every dirty
    ///    page and free of the batch. Clean copies (read misses) need none.
    ///
    /// On a device whose writes wait for the medium (`dsync`), 1 and 2 run
    /// at once: the records are handed to the record writer threads before
    /// the whole pages are written (`write_batch_overlapped`). Otherwise data
    /// before records. Either way a crash finds a page's record absent, old,
    /// or naming data that matches its checksum only if that data is whole
    /// on the device; a job completes only when both are durable.
    pub(super) fn execute_write_batch(&self, batch: &[Job], scratch: &mut Scratch) {
        let Scratch {
            page,
            bounce,
            batch: b,
        } = scratch;
        b.results.clear();
        b.results.resize(batch.len(), Ok(()));
        b.crcs.clear();
        b.crcs.resize(batch.len(), 0);
        self.write_partial_pages(batch, b, page, bounce);
        self.sort_whole_pages(batch, b);
        let overlapped = self.store.is_some() && self.cache.dev.writes_wait_for_medium();
        if overlapped {
            self.write_batch_overlapped(batch, b, bounce);
        } else {
            self.write_whole_pages(batch, b, bounce);
            self.write_batch_records(batch, b);
        }
        // Counted once written (the flusher flushes after it sees this).
        self.counters
            .cache_page_writes
            .fetch_add(1, Ordering::Relaxed);
        let needs = |i: usize| self.batch_needs(&batch[i].cmd).1;
        let needs_barrier = (0..batch.len()).any(|i| b.results[i].is_ok() && needs(i));
        if needs_barrier {
            if let Err(e) = self.make_durable(&self.cache, true) {
                let err = self.io_fail(&e, true);
                for i in 0..batch.len() {
                    if b.results[i].is_ok() && needs(i) {
                        b.results[i] = Err(err);
                    }
                }
            }
        }
    }

    /// What a batched job needs: its record written (page writes: slot and
    /// record), and the barrier (dirty page writes unless persist-on-flush,
    /// and record frees: an old version is overwritten only once its newer
    /// one is durable).
    pub(super) fn batch_needs(&self, cmd: &IoCommand) -> (Option<(SlotIndex, SlotRecord)>, bool) {
        let persist_on_flush = self.persist_on_flush.load(Ordering::Relaxed);
        match cmd {
            IoCommand::WritePage { slot, record, .. } => {
                (Some((*slot, *record)), record.dirty && !persist_on_flush)
            }
            IoCommand::FreeSlots { .. } => (None, true),
            _ => unreachable!("write batches hold page writes and record frees only"),
        }
    }

    /// Builds and writes every page of the batch that is not one whole page
    /// of a request; whole pages go to `b.whole`, unsorted.
    fn write_partial_pages(
        &self,
        batch: &[Job],
        b: &mut BatchScratch,
        page: &mut AlignedBuf,
        bounce: &mut AlignedBuf,
    ) {
        let p = self.page_size_bytes as usize;
        b.whole.clear();
        for (i, job) in batch.iter().enumerate() {
            let IoCommand::WritePage {
                slot, base, patch, ..
            } = &job.cmd
            else {
                continue; // a record free: with the records
            };
            let whole = patch.page_offset_bytes == 0 && patch.len_bytes as usize == p;
            if whole && matches!(patch.src, Source::Request { .. }) {
                b.whole.push(i as u32);
                continue;
            }
            match self.write_partial_page(job.buf, *slot, base, patch, page, bounce) {
                Ok(crc) => b.crcs[i] = crc,
                Err((e, side)) => b.results[i] = Err(self.io_fail(&e, side.unwrap_or(true))),
            }
        }
    }

    /// Sorts the whole pages by slot and computes their checksums (with a
    /// store), before any of them is written.
    fn sort_whole_pages(&self, batch: &[Job], b: &mut BatchScratch) {
        b.whole.sort_unstable_by_key(|&i| batch_slot(batch, i));
        if self.store.is_none() {
            return;
        }
        for &i in &b.whole {
            // SAFETY: the request is in flight (module header).
            let data = unsafe { whole_page(&batch[i as usize], self.page_size_bytes) };
            b.crcs[i as usize] = crate::checksum::crc32c(data);
        }
    }

    /// Writes the whole pages of `b.whole` (sorted), one write per run of
    /// consecutive slots.
    fn write_whole_pages(&self, batch: &[Job], b: &mut BatchScratch, bounce: &mut AlignedBuf) {
        let p = self.page_size_bytes as usize;
        let cache = &self.cache;
        let mut bufs: Vec<&[u8]> = Vec::with_capacity(b.whole.len());
        let mut k = 0;
        while k < b.whole.len() {
            let mut end = k + 1;
            while end < b.whole.len()
                && batch_slot(batch, b.whole[end]) == batch_slot(batch, b.whole[end - 1]) + 1
            {
                end += 1;
            }
            bufs.clear();
            for &i in &b.whole[k..end] {
                // SAFETY: the request is in flight (module header).
                bufs.push(unsafe { whole_page(&batch[i as usize], p as u64) });
            }
            let offset = self.slot_offset_bytes(SlotIndex(batch_slot(batch, b.whole[k])));
            let a = cache.dev.alignment_bytes();
            let result = if a > 1
                && bufs
                    .iter()
                    .any(|d| !is_aligned(d.as_ptr() as usize, 0, d.len(), a))
            {
                // O_DIRECT and request buffers that are not aligned: the
                // run is copied into one aligned buffer and written at once.
                let run = bounce.get(bufs.len() * p);
                for (m, d) in bufs.iter().enumerate() {
                    run[m * p..(m + 1) * p].copy_from_slice(d);
                }
                cache.dev.write_at(run, offset)
            } else {
                cache.dev.write_vectored_at(&bufs, offset)
            };
            if let Err(e) = result {
                let err = self.io_fail(&e, true);
                for &i in &b.whole[k..end] {
                    b.results[i as usize] = Err(err);
                }
            }
            k = end;
        }
    }

    /// Data before records: the records of the pages written, then the
    /// frees (persist-on-flush: after a flush that makes the newer versions
    /// of the freed pages durable, since they completed without one).
    fn write_batch_records(&self, batch: &[Job], b: &mut BatchScratch) {
        let Some(store) = &self.store else {
            return;
        };
        self.collect_records(batch, b);
        let (results, record_jobs) = (&mut b.results, &b.record_jobs);
        store.write_records(&b.records, &mut b.order, &mut |k, e| {
            results[record_jobs[k] as usize] = Err(self.io_fail(e, true));
        });
        let frees = batch
            .iter()
            .any(|j| matches!(j.cmd, IoCommand::FreeSlots { .. }));
        let before = if frees && self.persist_on_flush.load(Ordering::Relaxed) {
            self.make_durable(&self.cache, true)
                .map_err(|e| self.io_fail(&e, true))
        } else {
            Ok(())
        };
        for (i, job) in batch.iter().enumerate() {
            if let IoCommand::FreeSlots { slots, .. } = &job.cmd {
                if let Err(e) = before {
                    b.results[i] = Err(e);
                } else if let Err(e) = store.free_records(slots) {
                    b.results[i] = Err(self.io_fail(&e, true));
                }
            }
        }
    }

    /// The records of the page writes that have not failed, into
    /// `b.records` with their jobs in `b.record_jobs`.
    fn collect_records(&self, batch: &[Job], b: &mut BatchScratch) {
        b.records.clear();
        b.record_jobs.clear();
        for (i, job) in batch.iter().enumerate() {
            if let (true, (Some((slot, record)), _)) =
                (b.results[i].is_ok(), self.batch_needs(&job.cmd))
            {
                b.records.push((slot, record, b.crcs[i]));
                b.record_jobs.push(i as u32);
            }
        }
    }

    /// Records and frees staged and handed to the record writer threads,
    /// then the whole pages written while they write, then a wait for
    /// both. Every write here is durable on return (`dsync`), so the newer
    /// versions of freed pages are durable already and no order is needed:
    /// a record that reaches the device before its data names a checksum
    /// the slot does not have yet, and recovery ignores it. A page whose
    /// data write failed has its record zeroed again before it completes,
    /// so no record is left naming a version that was refused.
    fn write_batch_overlapped(&self, batch: &[Job], b: &mut BatchScratch, bounce: &mut AlignedBuf) {
        let store = self.store.as_ref().expect("overlapped writes need a store");
        self.collect_records(batch, b);
        b.staged.clear();
        store.stage_records(&b.records, &mut b.order, &mut b.staged);
        let record_blocks = b.staged.len();
        for job in batch {
            if let IoCommand::FreeSlots { slots, .. } = &job.cmd {
                store.stage_frees(slots, &mut b.order, &mut b.staged);
            }
        }
        self.write_together(batch, b, bounce, store);
        let mut failed_blocks: Vec<usize> = Vec::new();
        store.await_writes(&b.staged, &mut |k, e| {
            self.note_error(true, e);
            failed_blocks.push(k);
        });
        for k in failed_blocks {
            let block = b.staged[k].block;
            let in_block = |slot: SlotIndex| CacheStore::block_of_slot(slot) == block;
            for (i, job) in batch.iter().enumerate() {
                let hit = match &job.cmd {
                    IoCommand::WritePage { slot, .. } => k < record_blocks && in_block(*slot),
                    IoCommand::FreeSlots { slots, .. } => {
                        k >= record_blocks && slots.iter().any(|&s| in_block(s))
                    }
                    _ => false,
                };
                if hit && b.results[i].is_ok() {
                    b.results[i] = Err(IoError::Io);
                }
            }
        }
        self.unstage_failed_pages(batch, b, store);
    }

    /// Sends the batch's page data (one write per run of consecutive
    /// slots) and the staged record blocks no thread is writing now in one
    /// go (`write_many`: native AIO, all in flight at once up to
    /// `aio::AIO_WRITES_MAX`, no thread handoff); the other blocks go to the
    /// record writer threads. Pages are copied into one aligned buffer
    /// unless each run is a single page already aligned (O_DIRECT).
    fn write_together(
        &self,
        batch: &[Job],
        b: &mut BatchScratch,
        bounce: &mut AlignedBuf,
        store: &CacheStore,
    ) {
        let p = self.page_size_bytes as usize;
        store.take_writes(&b.staged, usize::MAX, &mut b.own);
        store.request_writes_except(&b.staged, &b.own);
        // Runs of consecutive slots: (first index in b.whole, page count).
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (k, &i) in b.whole.iter().enumerate() {
            match runs.last_mut() {
                Some((first, n))
                    if batch_slot(batch, b.whole[*first + *n - 1]) + 1 == batch_slot(batch, i) =>
                {
                    *n += 1
                }
                _ => runs.push((k, 1)),
            }
        }
        // SAFETY: the requests are in flight (module header).
        let page_of = |k: usize| unsafe { whole_page(&batch[b.whole[k] as usize], p as u64) };
        let a = self.cache.dev.alignment_bytes();
        let direct = runs.iter().all(|&(first, n)| {
            n == 1 && (a <= 1 || is_aligned(page_of(first).as_ptr() as usize, 0, p, a))
        });
        let mut writes: Vec<(&[u8], u64)> = Vec::with_capacity(runs.len() + b.staged.len());
        let copied: &[u8] = if direct || b.whole.is_empty() {
            &[]
        } else {
            let all = bounce.get(b.whole.len() * p);
            for k in 0..b.whole.len() {
                all[k * p..(k + 1) * p].copy_from_slice(page_of(k));
            }
            all
        };
        for &(first, n) in &runs {
            let data = if direct {
                page_of(first)
            } else {
                &copied[first * p..(first + n) * p]
            };
            let slot = SlotIndex(batch_slot(batch, b.whole[first]));
            writes.push((data, self.slot_offset_bytes(slot)));
        }
        let data_writes = writes.len();
        let mut own = std::mem::take(&mut b.own);
        store.own_writes(&mut own, &mut writes);
        let mut errors: Vec<Option<DeviceError>> = (0..writes.len()).map(|_| None).collect();
        self.cache
            .dev
            .write_many(&writes, &mut |i, e| errors[i] = Some(e));
        drop(writes);
        store.end_writes(&mut own, &mut |k| errors[data_writes + k].take());
        b.own = own;
        for (&(first, n), error) in runs.iter().zip(errors.iter_mut()) {
            if let Some(e) = error.take() {
                let err = self.io_fail(&e, true);
                for &i in &b.whole[first..first + n] {
                    b.results[i as usize] = Err(err);
                }
            }
        }
    }

    /// Zeroes (durably, as every write here is) the records staged for
    /// pages whose data write failed. If that fails too, the record names
    /// data the slot most likely does not hold: recovery drops it by its
    /// checksum.
    fn unstage_failed_pages(&self, batch: &[Job], b: &mut BatchScratch, store: &CacheStore) {
        let failed: Vec<SlotIndex> = b
            .record_jobs
            .iter()
            .filter(|&&i| b.results[i as usize].is_err())
            .filter_map(|&i| match &batch[i as usize].cmd {
                IoCommand::WritePage { slot, .. } => Some(*slot),
                _ => None,
            })
            .collect();
        if failed.is_empty() {
            return;
        }
        if let Err(e) = store.free_records(&failed) {
            self.note_error(true, &e);
        }
    }

    /// Builds a page that is not one whole page of a request (base, then
    /// the patch) in `page` and writes it to `slot`; returns its crc32c
    /// (0 without a store). Errors carry the side that failed.
    fn write_partial_page(
        &self,
        buf: BufPtr,
        slot: SlotIndex,
        base: &PageBase,
        patch: &wcache_core::Patch,
        page: &mut AlignedBuf,
        bounce: &mut AlignedBuf,
    ) -> Result<u32, (DeviceError, Option<bool>)> {
        let page = page.get(self.page_size_bytes as usize);
        self.build_page(buf, base, patch, page, bounce)?;
        let crc = self
            .store
            .as_ref()
            .map_or(0, |_| crate::checksum::crc32c(page));
        self.cache
            .dev
            .write_at(page, self.slot_offset_bytes(slot))
            .map_err(|e| (e, Some(true)))?;
        Ok(crc)
    }

    /// Builds a page version in `page` (one page): its base (nothing, an
    /// old slot, or the backing's page), then the patch. Errors carry the
    /// side that failed (Some(true): the cache).
    pub(super) fn build_page(
        &self,
        buf: BufPtr,
        base: &PageBase,
        patch: &wcache_core::Patch,
        page: &mut [u8],
        bounce: &mut AlignedBuf,
    ) -> Result<(), (DeviceError, Option<bool>)> {
        let p = self.page_size_bytes;
        let cache = &self.cache;
        let on_cache = |e| (e, Some(true));
        let on_backing = |e| (e, Some(false));
        match *base {
            PageBase::None => page.fill(0),
            PageBase::Slot(old) => {
                cache
                    .dev
                    .read_at(page, self.slot_offset_bytes(old))
                    .map_err(on_cache)?;
            }
            PageBase::Backing {
                volume,
                page: index,
            } => {
                let b = self.backing(volume);
                let start = index.0 * p;
                let len = b.dev.len_bytes().saturating_sub(start).min(p) as usize;
                read_aligned(b.dev.as_ref(), &mut page[..len], start, bounce)
                    .map_err(on_backing)?;
                page[len..].fill(0);
            }
        }
        let o = patch.page_offset_bytes as usize;
        let n = patch.len_bytes as usize;
        match patch.src {
            Source::Zero => page[o..o + n].fill(0),
            Source::Request { offset_bytes, .. } => {
                // SAFETY: the request is in flight (module header).
                let data = unsafe { buf.slice(offset_bytes, n) };
                page[o..o + n].copy_from_slice(data);
            }
        }
        Ok(())
    }
}

/// The slot of a batched page write (`batch[i]`).
pub(super) fn batch_slot(batch: &[Job], i: u32) -> u32 {
    match &batch[i as usize].cmd {
        IoCommand::WritePage { slot, .. } => slot.0,
        _ => unreachable!("only page writes have data"),
    }
}

/// The request bytes of a whole-page write.
///
/// # Safety
/// The request owning the job's buffer must be in flight.
pub(super) unsafe fn whole_page(job: &Job, page_size_bytes: u64) -> &[u8] {
    let IoCommand::WritePage {
        patch:
            wcache_core::Patch {
                src: Source::Request { offset_bytes, .. },
                ..
            },
        ..
    } = &job.cmd
    else {
        unreachable!("whole pages come from a request");
    };
    job.buf.slice(*offset_bytes, page_size_bytes as usize)
}
