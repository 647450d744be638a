//! `NbdVolume`: one cached volume served over NBD (its WRITEs in a row one
//! `wcache_io::WriteBatch`), and the one mapping of a request's failure
//! (`wcache_io::RequestError`) to an NBD error.
//!
//! It exists so that the mapping lives beside the adapter that needs it,
//! as one exhaustive match: a new variant of `RequestError` (or of the
//! engine's `SubmitError` or `IoError` inside it) does not compile until
//! it is given an NBD error here. It must never add a catch-all arm, and
//! never decide anything about the request (the cache did).

use wcache_core::{IoError, RequestFlags, RequestKind, SubmitError};
use wcache_io::{Io, RequestError, Volume, WriteBatch, WriteDone};
use wcache_nbd::{AsyncWrite, Export, ExportError};

/// One volume served over NBD: every call goes to the cache's volume handle.
pub(super) struct NbdVolume(pub(super) Volume);

/// The NBD error a client gets for a request that failed with `e`. Every
/// variant is named, nested ones too: no catch-all arm.
fn export_error(e: RequestError) -> ExportError {
    type E = RequestError;
    match e {
        E::Io(IoError::NoSpace) => ExportError::NoSpace,
        E::Io(IoError::Io) => ExportError::Io(std::io::Error::from_raw_os_error(libc::EIO)),
        E::Submit(SubmitError::OutOfRange { .. }) => ExportError::Invalid,
        E::Submit(SubmitError::LargerThanCache { .. }) => ExportError::NoSpace,
        E::Submit(SubmitError::LargerThanLog { .. }) => ExportError::NoSpace,
        // ENOSPC, as the two above: it must fit whole (in the journal); a smaller one would.
        E::Submit(SubmitError::LargerThanJournal { .. }) => ExportError::NoSpace,
        // EIO: every export is one of the cache's volumes, so this is the server's fault.
        e @ E::Submit(SubmitError::UnknownVolume(_)) => ExportError::Io(std::io::Error::other(e)),
        // EIO: the driver waits while the engine is busy, never returns it; if it did: not done.
        e @ E::Submit(SubmitError::Busy(_)) => ExportError::Io(std::io::Error::other(e)),
        // EINVAL: the server sends the request's length, so another is a malformed request.
        E::PayloadLength { .. } => ExportError::Invalid,
        E::ShutDown => ExportError::ShuttingDown,
    }
}

/// A WRITE as the volume's request (NBD knows no issuer: FUA is its only
/// flag).
fn write_io(write: &AsyncWrite) -> Io {
    Io {
        kind: RequestKind::Write,
        offset_bytes: write.offset,
        len_bytes: write.len as u64,
        flags: RequestFlags {
            fua: write.fua,
            ..RequestFlags::default()
        },
    }
}

/// The volume's answer to a write as the server's.
fn export_done(done: wcache_nbd::WriteDone) -> WriteDone {
    Box::new(move |result, buffer, more| done(result.map_err(export_error), buffer, more))
}

/// The WRITEs a connection's reader starts in a row, one batch of the
/// volume's: dropped, it sends their device writes.
struct NbdBatch<'a>(WriteBatch<'a>);

impl wcache_nbd::WriteBatch for NbdBatch<'_> {
    fn write_async(&self, write: AsyncWrite, done: wcache_nbd::WriteDone) {
        let io = write_io(&write);
        self.0
            .write_async(io, write.buffer, write.start, export_done(done));
    }
}

impl Export for NbdVolume {
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn block_size_min_bytes(&self) -> u32 {
        self.0.block_size_bytes()
    }
    fn multi_conn(&self) -> bool {
        // One cache serves every connection, and every acknowledged write is
        // already durable, so a flush on one connection covers all.
        true
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.0.read(offset, buf).map_err(export_error)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError> {
        self.0.write(offset, data, fua).map_err(export_error)
    }
    fn writes_async(&self) -> bool {
        self.0.writes_async()
    }
    fn writes_alone_inline(&self) -> bool {
        self.0.writes_alone_inline()
    }
    fn write_async_on_reader_max_bytes(&self) -> usize {
        self.0.write_async_on_reader_max_bytes()
    }
    fn write_async(&self, write: AsyncWrite, done: wcache_nbd::WriteDone) {
        let io = write_io(&write);
        self.0
            .write_async(io, write.buffer, write.start, export_done(done));
    }
    fn write_batch(&self) -> Box<dyn wcache_nbd::WriteBatch + '_> {
        Box::new(NbdBatch(self.0.batch()))
    }
    fn flush(&self) -> Result<(), ExportError> {
        self.0.flush().map_err(export_error)
    }
    fn trim(&self, offset: u64, length_bytes: u64, fua: bool) -> Result<(), ExportError> {
        self.0.trim(offset, length_bytes, fua).map_err(export_error)
    }
    fn write_zeroes(
        &self,
        offset: u64,
        length_bytes: u64,
        fua: bool,
        _no_hole: bool,
    ) -> Result<(), ExportError> {
        self.0
            .write_zeroes(offset, length_bytes, fua)
            .map_err(export_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wcache_core::RequestKind;
    use wcache_nbd::NbdErrno;

    #[test]
    fn every_request_error_has_its_nbd_error() {
        let cases = [
            (RequestError::Io(IoError::Io), NbdErrno::Io),
            (RequestError::Io(IoError::NoSpace), NbdErrno::NoSpc),
            (
                SubmitError::OutOfRange {
                    volume: 0,
                    offset_bytes: 4096,
                    len_bytes: 4096,
                    size_bytes: 4096,
                }
                .into(),
                NbdErrno::Inval,
            ),
            (
                SubmitError::LargerThanCache { pages: 9, slots: 8 }.into(),
                NbdErrno::NoSpc,
            ),
            (
                SubmitError::LargerThanLog {
                    pages: 9,
                    pages_max: 8,
                }
                .into(),
                NbdErrno::NoSpc,
            ),
            (
                SubmitError::LargerThanJournal {
                    pages: 9,
                    journal_pages: 8,
                }
                .into(),
                NbdErrno::NoSpc,
            ),
            (SubmitError::UnknownVolume(3).into(), NbdErrno::Io),
            (SubmitError::Busy(64).into(), NbdErrno::Io),
            (
                RequestError::PayloadLength {
                    kind: RequestKind::Write,
                    len_bytes: 4096,
                    payload_bytes: 4095,
                },
                NbdErrno::Inval,
            ),
            (RequestError::ShutDown, NbdErrno::Shutdown),
        ];
        for (error, errno) in cases {
            let shown = error.to_string();
            assert_eq!(export_error(error).errno(), errno, "{shown}");
        }
    }
}
