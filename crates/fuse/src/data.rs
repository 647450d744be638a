//! File data through the cache: a file's bytes are its window's pages in
//! the mount's volume (`files.rs`). Writes are made of whole pages (a
//! partial page is read, patched and written under the file's lock) and
//! held in memory (`dirty.rs`) until an fsync or writeback sends them to
//! the engine; O_SYNC/O_DSYNC writes are sent at once, FUA, with the
//! caller's flags (its process as issuer, critical by the caller's rules).
//! With nothing held (`DirtyLimits::max_bytes` 0) every write goes to the
//! engine at once as a sync write of its caller.
//! It must never let a byte beyond a file's size reappear: bytes of a page
//! past the size are zeros, and pages a truncation may have left in the
//! cache are zeroed through the cache before the file grows over them.

use std::ops::RangeInclusive;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use fuser::Errno;
use wcache_core::{IoError, RequestFlags, RequestKind, SubmitError};
use wcache_io::{Io, Payload, RequestError, Volume, WriteDone};

use crate::callers::Caller;
use crate::dirty::DirtyPages;
use crate::files::{BackingFile, Files, SizeRecord, FILE_BYTES_MAX};
use crate::volumes::Volumes;

/// The errno a caller gets for a request that failed with `e`. Every
/// variant is named, nested ones too: no catch-all arm.
pub fn errno(e: &RequestError) -> Errno {
    type E = RequestError;
    match e {
        E::Io(IoError::NoSpace) => Errno::ENOSPC,
        E::Io(IoError::Io) => Errno::EIO,
        // The window is checked before: a range beyond it is the mount's fault.
        E::Submit(SubmitError::OutOfRange { .. }) => Errno::EIO,
        E::Submit(SubmitError::LargerThanCache { .. }) => Errno::ENOSPC,
        E::Submit(SubmitError::LargerThanLog { .. }) => Errno::ENOSPC,
        E::Submit(SubmitError::LargerThanJournal { .. }) => Errno::ENOSPC,
        E::Submit(SubmitError::UnknownVolume(_)) => Errno::EIO,
        E::Submit(SubmitError::Busy(_)) => Errno::EIO,
        E::PayloadLength { .. } => Errno::EIO,
        E::ShutDown => Errno::EIO,
    }
}

fn io_errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

/// One request to the engine; a failure is logged and becomes an errno.
pub(crate) fn submit(
    volume: &Volume,
    kind: RequestKind,
    at: u64,
    len: u64,
    flags: RequestFlags,
    payload: Payload<'_>,
) -> Result<(), Errno> {
    let io = Io {
        kind,
        offset_bytes: at,
        len_bytes: len,
        flags,
    };
    volume.submit(io, payload).map_err(|e| {
        tracing::warn!("{kind:?} of {len} bytes at volume offset {at}: {e}");
        errno(&e)
    })
}

/// The engine's FLUSH for the file at `window`, with `flags` (not FUA): a
/// critical caller's promotes the bypass writes in flight over the file's
/// window, which it waits for, and no other file's.
pub(crate) fn flush_file(volume: &Volume, window: u64, flags: RequestFlags) -> Result<(), Errno> {
    let flags = RequestFlags {
        fua: false,
        ..flags
    };
    let len = crate::files::WINDOW_BYTES;
    submit(
        volume,
        RequestKind::Flush,
        window,
        len,
        flags,
        Payload::None,
    )
}

/// Writes `(volume offset, bytes)` with `flags`, started together in one
/// `Volume::batch` so that they share the cache's log batch and its
/// barrier, in this order; waits for all and returns each one's result.
pub(crate) fn write_together(
    volume: &Volume,
    writes: Vec<(u64, Vec<u8>)>,
    flags: RequestFlags,
) -> Vec<Result<(), Errno>> {
    type Results = (Mutex<(usize, Vec<Result<(), Errno>>)>, Condvar);
    let n = writes.len();
    let done: Arc<Results> = Arc::new((Mutex::new((n, vec![Ok(()); n])), Condvar::new()));
    {
        let batch = volume.batch();
        for (i, (at, bytes)) in writes.into_iter().enumerate() {
            let len = bytes.len() as u64;
            let io = Io {
                kind: RequestKind::Write,
                offset_bytes: at,
                len_bytes: len,
                flags,
            };
            let done = Arc::clone(&done);
            let answer: WriteDone = Box::new(move |result, _, _| {
                let result = result.map_err(|e| {
                    tracing::warn!("Write of {len} bytes at volume offset {at}: {e}");
                    errno(&e)
                });
                let mut st = done.0.lock().unwrap_or_else(|e| e.into_inner());
                st.1[i] = result;
                st.0 -= 1;
                done.1.notify_all();
            });
            batch.write_async(io, bytes, 0, answer);
        }
    }
    let mut st = done.0.lock().unwrap_or_else(|e| e.into_inner());
    while st.0 > 0 {
        st = done.1.wait(st).unwrap_or_else(|e| e.into_inner());
    }
    std::mem::take(&mut st.1)
}

/// The mount's data path.
pub struct Data {
    pub volumes: Arc<Volumes>,
    pub files: Arc<Files>,
    pub dirty: Arc<DirtyPages>,
    page: u64,
}

fn round_down(x: u64, page: u64) -> u64 {
    x - x % page
}

fn round_up(x: u64, page: u64) -> u64 {
    x.div_ceil(page) * page
}

impl Data {
    pub fn new(
        volumes: Arc<Volumes>,
        files: Arc<Files>,
        dirty: Arc<DirtyPages>,
        page_size_bytes: u64,
    ) -> Data {
        Data {
            volumes,
            files,
            dirty,
            page: page_size_bytes,
        }
    }

    /// A request's flags: sync when a caller waits for it (every request
    /// of a known caller the mount sends at once: a write with nothing
    /// held, an O_SYNC/O_DSYNC write, an fsync's writeback); FUA when it
    /// must be durable when answered (O_SYNC, O_DSYNC).
    fn flags(caller: Caller, durable: bool) -> RequestFlags {
        RequestFlags {
            fua: durable,
            sync: caller.issuer != 0 || durable,
            critical: caller.critical,
            issuer: caller.issuer,
        }
    }

    /// Up to `size` bytes from `offset`, short at the end of the file.
    pub fn read(&self, file: &BackingFile, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let end = file.size().min(offset.saturating_add(size as u64));
        if offset >= end {
            return Ok(Vec::new());
        }
        let Some(slot) = file.slot.get() else {
            // Never written through the cache: the backing file has it all.
            let mut buf = vec![0; (end - offset) as usize];
            let n = file.pread(&mut buf, offset).map_err(io_errno)?;
            buf.truncate(n);
            return Ok(buf);
        };
        let window = (*slot as u64) << crate::files::WINDOW_BITS;
        let (a, b) = (
            round_down(offset, self.page),
            round_up(end, self.page).min(FILE_BYTES_MAX),
        );
        if offset >= FILE_BYTES_MAX {
            return Err(Errno::EFBIG);
        }
        let mut buf = vec![0; (b - a) as usize];
        // The held pages first: a page not held then is in the engine.
        let held = self
            .dirty
            .snapshot(window, a / self.page..=b / self.page - 1);
        if held.len() as u64 != (b - a) / self.page {
            let flags = RequestFlags::default();
            submit(
                self.volumes.of(window),
                RequestKind::Read,
                window + a,
                b - a,
                flags,
                Payload::Read(&mut buf),
            )?;
        }
        for (p, bytes) in held {
            let at = (p * self.page - a) as usize;
            buf[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        let from = (offset - a) as usize;
        let to = (end.min(b) - a) as usize;
        buf.truncate(to);
        buf.drain(..from);
        Ok(buf)
    }

    /// Writes `data` at `offset`: held (`dirty.rs`), or with `durable`
    /// (O_SYNC, O_DSYNC) durable at once with the file's size; with nothing
    /// held, durable under the write policy when this returns.
    pub fn write(
        &self,
        file: &Arc<BackingFile>,
        offset: u64,
        data: &[u8],
        caller: Caller,
        durable: bool,
    ) -> Result<u32, Errno> {
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > FILE_BYTES_MAX {
            return Err(Errno::EFBIG);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let window = self.files.window_of(file).map_err(|e| {
            tracing::error!("{e}");
            Errno::ENOSPC
        })?;
        let hold = self.dirty.holds();
        if hold {
            // Before the file's lock: a writer waiting for room holds nothing.
            self.dirty.throttle()?;
        }
        let _io = file.io.lock(caller, self.volumes.engine());
        let old_size = file.size();
        let flags = Data::flags(caller, durable);
        if end > old_size {
            self.grow(file, window, end, flags)?;
        }
        let (a, b) = (round_down(offset, self.page), round_up(end, self.page));
        let held = self.write_pages(file, window, offset, data, old_size, flags, hold)?;
        if !held {
            file.cached_end.fetch_max(b, Ordering::AcqRel);
        }
        // O_SYNC/O_DSYNC: the new size is durable with the data.
        let grew = end > old_size;
        match (durable, held) {
            (true, true) => {
                let pages = a / self.page..=b / self.page - 1;
                self.write_back_recording(file, window, Some(pages), flags, grew)?;
            }
            (true, false) if grew => self.record_size(file, window, flags)?,
            _ => {}
        }
        Ok(data.len() as u32)
    }

    /// The pages under `[offset, offset + data.len())`, whole: a partial
    /// first or last page is read (`page_base`) and patched. Held with
    /// `hold` (true is returned), else written to the engine with `flags`.
    #[allow(clippy::too_many_arguments)]
    fn write_pages(
        &self,
        file: &Arc<BackingFile>,
        window: u64,
        offset: u64,
        data: &[u8],
        old_size: u64,
        flags: RequestFlags,
        hold: bool,
    ) -> Result<bool, Errno> {
        let end = offset + data.len() as u64;
        let (a, b) = (round_down(offset, self.page), round_up(end, self.page));
        let patched;
        let pages: &[u8] = if a == offset && b == end {
            data
        } else {
            let mut buf = vec![0u8; (b - a) as usize];
            let last = b - self.page;
            let mut partial = Vec::with_capacity(2);
            if a < offset || (end < b && last == a) {
                partial.push(a);
            }
            if end < b && last != a {
                partial.push(last);
            }
            for page in partial {
                let at = (page - a) as usize;
                let part = &mut buf[at..at + self.page as usize];
                self.page_base(window, page, old_size, part)?;
            }
            let from = (offset - a) as usize;
            buf[from..from + data.len()].copy_from_slice(data);
            patched = buf;
            &patched
        };
        if hold && self.dirty.put(file, window, a / self.page, pages) {
            return Ok(true);
        }
        submit(
            self.volumes.of(window),
            RequestKind::Write,
            window + a,
            b - a,
            flags,
            Payload::Write(pages),
        )?;
        Ok(false)
    }

    /// The bytes of the page at `page` before a write patches it: held, or
    /// read from the engine below `old_size` (zeros from there on).
    fn page_base(
        &self,
        window: u64,
        page: u64,
        old_size: u64,
        out: &mut [u8],
    ) -> Result<(), Errno> {
        if let Some(held) = self.dirty.page(window, page / self.page) {
            out.copy_from_slice(&held);
            return Ok(());
        }
        if page < old_size {
            submit(
                self.volumes.of(window),
                RequestKind::Read,
                window + page,
                self.page,
                RequestFlags::default(),
                Payload::Read(out),
            )?;
            let valid = old_size.saturating_sub(page).min(self.page) as usize;
            out[valid..].fill(0);
        }
        Ok(())
    }

    /// The file grows to `to` (a write past its end, a truncation up, an
    /// allocation): pages a truncation may have left in the cache over the
    /// new range are zeroed through the cache first. Caller holds `file.io`.
    fn grow(
        &self,
        file: &BackingFile,
        window: u64,
        to: u64,
        flags: RequestFlags,
    ) -> Result<(), Errno> {
        let from = round_up(file.size(), self.page);
        let stale = *file.stale.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s0, s1)) = stale {
            let (z0, z1) = (from.max(s0), round_up(to, self.page).min(s1));
            if z0 < z1 {
                let zero = RequestFlags {
                    fua: false,
                    sync: false,
                    ..flags
                };
                submit(
                    self.volumes.of(window),
                    RequestKind::WriteZeroes,
                    window + z0,
                    z1 - z0,
                    zero,
                    Payload::None,
                )?;
            }
        }
        let mut size = file.size.write().unwrap_or_else(|e| e.into_inner());
        file.set_len(&mut size, to).map_err(io_errno)
    }

    /// The file's size through the cache (`SizeRecord`) with `flags` (its
    /// caller's: as durable as its writes under the write policy), if it
    /// differs from the last one recorded. One at a time per file, so the
    /// newest record holds the newest size.
    fn record_size(
        &self,
        file: &BackingFile,
        window: u64,
        flags: RequestFlags,
    ) -> Result<(), Errno> {
        self.recording(file, window, flags, Ok)
    }

    /// The file's held pages in `pages` written back with `flags`, and with
    /// them, where `record` and the size changed, its size record: in one
    /// batch of the cache's (`DirtyPages::write_back`), so that an fsync of
    /// an appended file costs one barrier, not two. The record goes last.
    fn write_back_recording(
        &self,
        file: &BackingFile,
        window: u64,
        pages: Option<RangeInclusive<u64>>,
        flags: RequestFlags,
        record: bool,
    ) -> Result<(), Errno> {
        if !record {
            self.dirty.write_back(window, pages, flags, None)?;
            return Ok(());
        }
        self.recording(file, window, flags, |rider| {
            self.dirty.write_back(window, pages, flags, rider)
        })
    }

    /// The file's size record, if the size changed since the last one: given
    /// to `send` to carry, else (what `send` gives back) written alone.
    fn recording(
        &self,
        file: &BackingFile,
        window: u64,
        flags: RequestFlags,
        send: impl FnOnce(Option<(u64, Vec<u8>)>) -> Result<Option<(u64, Vec<u8>)>, Errno>,
    ) -> Result<(), Errno> {
        let mut recorded = file.recorded.lock().unwrap_or_else(|e| e.into_inner());
        let size = file.size();
        let rider = (size != *recorded)
            .then(|| (window + FILE_BYTES_MAX, SizeRecord::encode(size, self.page)));
        let changed = rider.is_some();
        if let Some((at, bytes)) = send(rider)? {
            let len = bytes.len() as u64;
            let payload = Payload::Write(&bytes);
            submit(
                self.volumes.of(window),
                RequestKind::Write,
                at,
                len,
                flags,
                payload,
            )?;
        }
        if changed {
            *recorded = size;
        }
        Ok(())
    }

    /// A cut since the last fsync is made durable on the backing file (a
    /// record after a crash only grows a file: `Files::apply_size_records`).
    fn sync_cut(&self, file: &BackingFile) -> Result<(), Errno> {
        if file.shrunk.swap(false, Ordering::AcqRel) {
            if let Err(e) = file.sync_data() {
                file.shrunk.store(true, Ordering::Release);
                return Err(io_errno(e));
            }
        }
        Ok(())
    }

    /// Sets the file's size (truncate, or grow with zeros).
    pub fn set_size(&self, file: &Arc<BackingFile>, to: u64, caller: Caller) -> Result<(), Errno> {
        if to > FILE_BYTES_MAX && file.slot.get().is_some() {
            return Err(Errno::EFBIG);
        }
        let _io = file.io.lock(caller, self.volumes.engine());
        let size = file.size();
        let Some(slot) = file.slot.get() else {
            let mut size = file.size.write().unwrap_or_else(|e| e.into_inner());
            return file.set_len(&mut size, to).map_err(io_errno);
        };
        let window = (*slot as u64) << crate::files::WINDOW_BITS;
        let flags = Data::flags(caller, false);
        if to >= size {
            return self.grow(file, window, to, flags);
        }
        // Writebacks in flight over the cut land first; held pages past it go.
        let (tail, cut) = (round_down(to, self.page), round_up(to, self.page));
        self.dirty
            .truncate(window, tail / self.page, cut / self.page);
        let cached_end = file.cached_end.load(Ordering::Acquire);
        if !to.is_multiple_of(self.page) {
            self.zero_tail(file, window, to, cached_end, flags)?;
        }
        if cut < cached_end {
            // Advisory: dirty pages under ordered or journaled write-back stay (and `stale` covers them).
            submit(
                self.volumes.of(window),
                RequestKind::Trim,
                window + cut,
                cached_end - cut,
                RequestFlags::default(),
                Payload::None,
            )?;
            let mut stale = file.stale.lock().unwrap_or_else(|e| e.into_inner());
            *stale = Some(match *stale {
                Some((s0, s1)) => (s0.min(cut), s1.max(cached_end)),
                None => (cut, cached_end),
            });
        }
        let cut = file.cut.write().unwrap_or_else(|e| e.into_inner());
        let mut size = file.size.write().unwrap_or_else(|e| e.into_inner());
        file.set_len(&mut size, to).map_err(io_errno)?;
        drop((size, cut));
        // The newest record is never above the size (it would regrow the file after a crash).
        self.record_size(file, window, flags)
    }

    /// The bytes past `to` of the page holding it become zeros: held, or
    /// in the engine (where it may hold them: below `cached_end`).
    fn zero_tail(
        &self,
        file: &Arc<BackingFile>,
        window: u64,
        to: u64,
        cached_end: u64,
        flags: RequestFlags,
    ) -> Result<(), Errno> {
        let page = round_down(to, self.page);
        let mut buf = match self.dirty.page(window, page / self.page) {
            Some(held) => held,
            None if to < cached_end => {
                let mut buf = vec![0u8; self.page as usize];
                let read = Payload::Read(&mut buf);
                let (at, len) = (window + page, self.page);
                submit(
                    self.volumes.of(window),
                    RequestKind::Read,
                    at,
                    len,
                    RequestFlags::default(),
                    read,
                )?;
                buf
            }
            None => return Ok(()),
        };
        buf[(to - page) as usize..].fill(0);
        if self.dirty.put(file, window, page / self.page, &buf) {
            return Ok(());
        }
        submit(
            self.volumes.of(window),
            RequestKind::Write,
            window + page,
            self.page,
            flags,
            Payload::Write(&buf),
        )
    }

    /// fsync/fdatasync: the file's held pages written back with the
    /// caller's flags, and its size recorded if it changed (`record_size`),
    /// then its acknowledged writes durable (the engine's
    /// FLUSH over the file's window, with the caller's flags: a critical
    /// caller's flush promotes the file's writebacks in flight, which it
    /// waits for, not other files'), then a cut of the file on the backing
    /// file. A file never written through the cache (nothing of it in the
    /// engine: no FLUSH) has its size synced on the backing file.
    pub fn fsync(&self, file: Option<&BackingFile>, caller: Caller) -> Result<(), Errno> {
        let flags = RequestFlags {
            fua: false,
            ..Data::flags(caller, true)
        };
        let slot = file.and_then(|f| f.slot.get());
        if let (Some(file), Some(slot)) = (file, slot) {
            let window = (*slot as u64) << crate::files::WINDOW_BITS;
            self.write_back_recording(file, window, None, flags, true)?;
            flush_file(self.volumes.of(window), window, flags)?;
        }
        match file {
            Some(file) if slot.is_none() => self.sync_unwritten(file),
            Some(file) => self.sync_cut(file),
            None => Ok(()),
        }
    }

    /// A file with no window: its size, if it changed, synced on the
    /// backing file.
    fn sync_unwritten(&self, file: &BackingFile) -> Result<(), Errno> {
        let mut recorded = file.recorded.lock().unwrap_or_else(|e| e.into_inner());
        let size = file.size();
        if size != *recorded || file.shrunk.load(Ordering::Acquire) {
            file.shrunk.store(false, Ordering::Release);
            if let Err(e) = file.sync_data() {
                file.shrunk.store(true, Ordering::Release);
                return Err(io_errno(e));
            }
            *recorded = size;
        }
        Ok(())
    }
}
