//! A request run to its response on the caller's thread (`Driver::submit`);
//! a write larger than the engine takes at once (format 3: a quarter of
//! the log's ring, `wcache_core::log_write_pages_max`) as pieces of that
//! size, one after another, each ending at a page boundary. NBD promises
//! no atomicity for a write, and a batch holds at most 4 MiB anyway.

use super::*;

/// One request of a front end to a volume: what, where, and the flags the
/// engine's admission reads (`RequestFlags`: issuer, sync, critical, FUA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Io {
    pub kind: RequestKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub flags: RequestFlags,
}

impl Shared {
    /// The largest write, in bytes, the engine takes at once; None where
    /// the cache's size is the only bound.
    pub(super) fn write_bytes_max(&self) -> Option<u64> {
        let log = self.log.as_ref()?;
        let pages = wcache_core::log_write_pages_max(log.store().layout().slot_count);
        Some(pages * self.page_size_bytes)
    }
}

impl Driver {
    /// Runs one request to its response; blocks. Safe to call from many
    /// threads. A write larger than the engine takes at once runs in
    /// pieces (`submit_in_pieces`).
    pub fn submit(
        &self,
        volume: VolumeId,
        kind: RequestKind,
        offset_bytes: u64,
        len_bytes: u64,
        flags: RequestFlags,
        payload: Payload<'_>,
    ) -> Result<(), RequestError> {
        if let Some(result) =
            self.submit_in_pieces(volume, kind, (offset_bytes, len_bytes), flags, &payload)
        {
            return result;
        }
        let buf = match (kind, payload) {
            (RequestKind::Read, Payload::Read(b)) if b.len() as u64 == len_bytes => BufPtr {
                ptr: b.as_mut_ptr(),
                len: b.len(),
            },
            (RequestKind::Write, Payload::Write(b)) if b.len() as u64 == len_bytes => BufPtr {
                // Only ever read through (Source::Request); never written.
                ptr: b.as_ptr() as *mut u8,
                len: b.len(),
            },
            (RequestKind::Flush | RequestKind::Trim | RequestKind::WriteZeroes, Payload::None) => {
                BufPtr::NONE
            }
            (kind, payload) => {
                let payload_bytes = match payload {
                    Payload::None => 0,
                    Payload::Write(b) => b.len(),
                    Payload::Read(b) => b.len(),
                };
                return Err(RequestError::PayloadLength {
                    kind,
                    len_bytes,
                    payload_bytes,
                });
            }
        };
        let id = RequestId(self.shared.next_request.fetch_add(1, Ordering::Relaxed));
        let request = Request {
            id,
            volume,
            kind,
            offset_bytes,
            len_bytes,
            flags,
        };
        self.shared
            .counters
            .requests
            .fetch_add(1, Ordering::Relaxed);
        WAITER.with(|waiter| self.shared.run_request(request, buf, waiter))
    }

    /// `submit` of a write (or a write of zeroes) over `(offset, len)`
    /// larger than `write_bytes_max`, piece by piece: its result, or None
    /// when it needs no pieces (or its payload does not match: `submit`
    /// then refuses it as usual).
    pub(super) fn submit_in_pieces(
        &self,
        volume: VolumeId,
        kind: RequestKind,
        (offset_bytes, len_bytes): (u64, u64),
        flags: RequestFlags,
        payload: &Payload<'_>,
    ) -> Option<Result<(), RequestError>> {
        let whole_payload = match payload {
            Payload::Write(b) => kind == RequestKind::Write && b.len() as u64 == len_bytes,
            Payload::None => kind == RequestKind::WriteZeroes,
            Payload::Read(_) => false,
        };
        let max = self.shared.write_bytes_max()?;
        if !whole_payload || len_bytes <= max {
            return None;
        }
        let page = self.shared.page_size_bytes;
        let mut done = 0;
        while done < len_bytes {
            let at = offset_bytes + done;
            let end = ((at + max) / page * page).min(offset_bytes + len_bytes);
            let piece = match payload {
                Payload::Write(b) => {
                    Payload::Write(&b[done as usize..(end - offset_bytes) as usize])
                }
                _ => Payload::None,
            };
            if let Err(e) = self.submit(volume, kind, at, end - at, flags, piece) {
                return Some(Err(e));
            }
            done = end - offset_bytes;
        }
        Some(Ok(()))
    }
}
