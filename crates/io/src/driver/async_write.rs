//! Writes that return before the device write (`DriverBatch::write_async`):
//! which writes take that path (io_uring, format 3's batches), where their
//! commands go, and their batches (`DriverBatch`: device writes held until
//! the batch is dropped, never left unsent).

use super::*;
use std::cell::Cell;

impl Driver {
    /// `write_async` returns before the device write (the event-driven
    /// data path, or format 3's batches: `Shared::takes_async`).
    pub fn writes_async(&self) -> bool {
        self.shared.data_path == DataPath::IoUring || self.shared.log.is_some()
    }

    /// A lone write (queue depth 1) is faster through `write` on its caller
    /// than through `write_async`: in format 3, where the caller writes the
    /// batch itself and no driver thread is woken (4 KiB persist-on-flush:
    /// p50 14 against 28-38 µs, server CPU 12 against 48-54 µs per write,
    /// 2026-11-27). Not over io_uring: there a lone 4 KiB persist-on-write
    /// write took 142-159 µs (p50) through `write_async`, 3.9 ms through
    /// `write` (the threads' `fdatasync`), the same day.
    pub fn writes_alone_inline(&self) -> bool {
        self.shared.log.is_some()
    }

    /// The largest `write_async` worth starting on the caller's thread when
    /// the caller has other work (an NBD connection's reader): any size in
    /// format 3, whose start only joins the open batch (the batch's writer
    /// computes the checksum); 64 KiB over io_uring, whose start computes
    /// the pages' checksums and records.
    pub fn write_async_on_reader_max_bytes(&self) -> usize {
        if self.shared.log.is_some() {
            usize::MAX
        } else {
            64 * 1024
        }
    }

    /// The data path `write_async` uses, chosen at start.
    pub fn data_path(&self) -> &DataPath {
        &self.shared.data_path
    }

    /// A batch of writes started with `DriverBatch::write_async`, whose
    /// device writes may wait (io_uring: in the submission queue) until the
    /// batch is dropped, so that a burst of requests costs one
    /// `io_uring_enter` and one device notification. A write alone is a
    /// batch of one: `driver.write_batch().write_async(..)` sends it at the
    /// end of the statement.
    pub fn write_batch(&self) -> DriverBatch<'_> {
        DriverBatch {
            driver: self,
            held: Cell::new(false),
        }
    }
}

/// Writes started together (`Driver::write_batch`): their device writes
/// may be held back until the batch is dropped, which sends them, so none
/// is left unsent. Drop it before waiting for any of its writes' answers,
/// or for anything they may hold up.
#[must_use = "a batch sends its writes when dropped"]
pub struct DriverBatch<'a> {
    driver: &'a Driver,
    /// Format 3: the engine's open batch is held for this batch's writes
    /// until its end (`Shared::admit_held`), so that they share it.
    held: Cell<bool>,
}

impl DriverBatch<'_> {
    /// Starts a write (`io`, of kind `Write`: where, how long, its flags)
    /// of `buffer[start..start + io.len_bytes]` and returns without waiting
    /// for the device when the event-driven data path is in use, or the
    /// cache is format 3 (`Shared::takes_async`): `done` is then called
    /// later, from another thread, once the write is acknowledged under the
    /// durability contract in force (as `submit` would return). Otherwise
    /// (the threads, or FUA under persist-on-flush) the write runs here and
    /// `done` is called before this returns. `done` always gets `buffer`
    /// back. Its device writes may wait for the batch's end.
    pub fn write_async(
        &self,
        volume: VolumeId,
        io: Io,
        buffer: Vec<u8>,
        start: usize,
        done: WriteDone,
    ) {
        assert_eq!(io.kind, RequestKind::Write, "write_async starts writes");
        let len = usize::try_from(io.len_bytes).unwrap_or(usize::MAX);
        let s = &self.driver.shared;
        if start.checked_add(len).is_none_or(|end| end > buffer.len()) {
            let payload_bytes = buffer.len().saturating_sub(start);
            return done(
                Err(RequestError::PayloadLength {
                    kind: RequestKind::Write,
                    len_bytes: io.len_bytes,
                    payload_bytes,
                }),
                buffer,
                false,
            );
        }
        if !s.takes_async(len, io.flags.fua) {
            let data = Payload::Write(&buffer[start..start + len]);
            let result = self.driver.submit(
                volume,
                io.kind,
                io.offset_bytes,
                io.len_bytes,
                io.flags,
                data,
            );
            return done(result, buffer, false);
        }
        let buf = BufPtr {
            // Only ever read through (Source::Request); never written.
            ptr: buffer[start..].as_ptr() as *mut u8,
            len,
        };
        let request = Request {
            id: RequestId(s.next_request.fetch_add(1, Ordering::Relaxed)),
            volume,
            kind: RequestKind::Write,
            offset_bytes: io.offset_bytes,
            len_bytes: io.len_bytes,
            flags: io.flags,
        };
        s.counters.requests.fetch_add(1, Ordering::Relaxed);
        let entry = InFlight {
            buf,
            responder: Responder::Async(AsyncWrite { buffer, done }),
        };
        self.admit(request, entry);
    }

    /// Hands a started write to the engine: in format 3 with the open
    /// batch held (no room: what this batch holds goes out before the
    /// wait); its commands started; refused, its `done` told.
    fn admit(&self, request: Request, entry: InFlight) {
        let s = &self.driver.shared;
        let refused = |e: RequestError, entry: InFlight| {
            if let Responder::Async(a) = entry.responder {
                (a.done)(Err(e), a.buffer, false);
            }
        };
        let entry = match s.log.is_some() {
            true => match s.admit_held(request, entry, !self.held.replace(true)) {
                Ok(jobs) => {
                    s.dispatch_async(jobs);
                    return s.run_answered();
                }
                Err(Admit::Refused(e, entry)) => return refused(e, entry),
                Err(Admit::Busy(entry)) => {
                    self.send_held();
                    entry
                }
            },
            false => entry,
        };
        match s.admit(request, entry) {
            Ok(jobs) => s.dispatch_async(jobs),
            Err(r) => refused(r.0, r.1),
        }
        s.run_answered();
    }

    /// Lets the engine's open batch go, if this batch holds it, and starts
    /// the commands that follow.
    fn send_held(&self) {
        if self.held.replace(false) {
            self.driver.shared.pump_held();
        }
    }
}

impl Drop for DriverBatch<'_> {
    /// Sends the device writes held: format 3's writes admitted and held
    /// (one log batch for them where none is in flight); io_uring's
    /// entries in the submission queue (one `io_uring_enter`, whichever
    /// batch left them there).
    fn drop(&mut self) {
        self.send_held();
        if let Some(u) = &self.driver.shared.uring {
            u.submit_held();
        }
    }
}

impl Shared {
    /// A write of `len` bytes started with `write_async` returns before its
    /// device write: on io_uring (`Uring::takes`), and in format 3, where
    /// the batch it joins is written by a pool thread, which answers it;
    /// except FUA under persist-on-flush, whose flush runs on the caller,
    /// and a write larger than the engine takes at once.
    pub(super) fn takes_async(&self, len: usize, fua: bool) -> bool {
        let persist_on_flush = self.persist_on_flush.load(Ordering::Relaxed);
        if self.log.is_some() {
            // A write larger than the engine takes at once runs in pieces
            // on the caller (`Driver::submit`).
            let too_large = self.write_bytes_max().is_some_and(|m| len as u64 > m);
            return !(too_large || persist_on_flush && fua);
        }
        uring::takes(self.uring.as_ref(), len, fua, persist_on_flush)
    }

    /// The commands of a `write_async` request: whole pages from the
    /// request to io_uring (batches of up to `WRITE_BATCH_MAX`, held for
    /// the end of the `DriverBatch`), the rest to the pool; this thread
    /// does not wait for any of them.
    pub(super) fn dispatch_async(&self, jobs: VecDeque<Job>) {
        let Some(uring) = &self.uring else {
            return self.to_pool(jobs.into_iter());
        };
        let (pages, rest): (Vec<Job>, Vec<Job>) = jobs
            .into_iter()
            .partition(|j| is_whole_request_page(j, self.page_size_bytes));
        let mut pages = pages.into_iter().peekable();
        while pages.peek().is_some() {
            let batch: Vec<Job> = pages.by_ref().take(WRITE_BATCH_MAX).collect();
            uring.submit(self, batch);
        }
        self.to_pool(rest.into_iter());
    }
}
