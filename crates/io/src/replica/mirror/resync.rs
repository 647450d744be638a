//! What the peer lacks, and making it whole: the regions it may lack (a
//! bit each), the comparison of its copy with the cache before a
//! connection's first write (page checksums, so that only what differs is
//! sent, after a primary's restart too), and the resync that copies the rest.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{lock, LinkState, Mirror, REGION_BYTES};
use crate::device::AlignedBuf;
use crate::replica::link::Stream;
use crate::replica::peer::SUMS_RANGE_MAX;
use crate::replica::wire::{self, Header, Kind};

/// Regions the peer may lack, one bit each.
pub(super) struct Lacking {
    pub(super) bits: Vec<u64>,
    pub(super) count: u64,
}

impl Lacking {
    pub(super) fn mark(&mut self, region: u32) {
        let (w, b) = (region as usize / 64, region % 64);
        if self.bits[w] & (1 << b) == 0 {
            self.bits[w] |= 1 << b;
            self.count += 1;
        }
    }

    pub(super) fn is_marked(&self, region: u32) -> bool {
        self.bits[region as usize / 64] & (1 << (region % 64)) != 0
    }

    /// Clears a region's bit; false if it was not set.
    pub(super) fn clear(&mut self, region: u32) -> bool {
        let was = self.is_marked(region);
        if was {
            self.bits[region as usize / 64] &= !(1 << (region % 64));
            self.count -= 1;
        }
        was
    }

    pub(super) fn take_first(&mut self) -> Option<u32> {
        let w = self.bits.iter().position(|&w| w != 0)?;
        let b = self.bits[w].trailing_zeros();
        self.bits[w] &= !(1 << b);
        self.count -= 1;
        Some((w * 64) as u32 + b)
    }
}

impl Mirror {
    /// Before a connection's first write: asks the peer for the checksums
    /// of every region it may lack and clears those it holds already, page
    /// for page, so that a resync (after a primary's restart too) sends only
    /// what differs. A region's bit is cleared before it is read here: a
    /// write to it meanwhile marks it again. Returns the regions skipped.
    pub(super) fn skip_what_the_peer_holds(&self, stream: &mut Stream) -> io::Result<u64> {
        let started = Instant::now();
        stream.tcp.set_read_timeout(Some(self.options.timeout))?;
        let (size, chunk) = (self.hello.size_bytes, SUMS_RANGE_MAX);
        let mut bounce = AlignedBuf::new();
        let (mut skipped, mut theirs, mut ours) = (0u64, Vec::new(), Vec::new());
        for start in (0..size).step_by(chunk as usize) {
            let len = chunk.min(size - start);
            let regions = self.regions_of(start, len);
            if !regions.clone().any(|r| lock(&self.lacking).is_marked(r)) {
                continue;
            }
            ask_sums(stream, start, len, &mut theirs)?;
            for region in regions {
                // No write sent before it reached this device is under way
                // while the region is read (`Mirror::write_both`).
                let _order = self.order.write().unwrap_or_else(|p| p.into_inner());
                if !lock(&self.lacking).clear(region) {
                    continue;
                }
                let at = region as u64 * REGION_BYTES;
                let buf = bounce.get(REGION_BYTES.min(size - at) as usize);
                if let Err(e) = self.local.read_at(buf, at) {
                    lock(&self.lacking).mark(region);
                    return Err(io::Error::other(e.to_string()));
                }
                ours.clear();
                wire::page_sums(buf, &mut ours);
                let from = ((at - start) / wire::SUM_PAGE_BYTES) as usize * 4;
                if ours[..] == theirs[from..from + ours.len()] {
                    skipped += 1;
                } else {
                    lock(&self.lacking).mark(region);
                }
            }
        }
        stream.tcp.set_read_timeout(None)?;
        tracing::info!(
            peer = %self.options.peer,
            regions_held = skipped,
            seconds = started.elapsed().as_secs_f64(),
            "replication: compared the peer's copy with this cache"
        );
        Ok(skipped)
    }

    /// Copies every region the peer lacks, then ends the resync with a
    /// flush; the link is connected (consistent) once the peer answers it.
    pub(super) fn resync(&self) -> io::Result<()> {
        let started = Instant::now();
        let generation = lock(&self.tx).generation;
        {
            let mut tx = lock(&self.tx);
            if !self.send(&mut tx, Header::new(Kind::ResyncBegin, 0, 0, 0), &[]) {
                return Err(io::Error::other("the link failed at the resync's start"));
            }
        }
        let mut bounce = AlignedBuf::new();
        let mut copied = 0u64;
        loop {
            let _order = self.order.write().unwrap_or_else(|p| p.into_inner());
            let mut tx = lock(&self.tx);
            if tx.generation != generation
                || tx.writer.is_none()
                || self.stop.load(Ordering::Acquire)
            {
                return Err(io::Error::other("the link failed during the resync"));
            }
            let Some(region) = lock(&self.lacking).take_first() else {
                break;
            };
            let offset = region as u64 * REGION_BYTES;
            let len = REGION_BYTES.min(self.hello.size_bytes - offset) as usize;
            let buf = bounce.get(len);
            if let Err(e) = self.local.read_at(buf, offset) {
                lock(&self.lacking).mark(region);
                return Err(io::Error::other(e.to_string()));
            }
            tx.current.push(region);
            let sent = if buf.iter().all(|&b| b == 0) {
                self.send(&mut tx, Header::new(Kind::Zero, len as u32, offset, 0), &[])
            } else {
                copied += len as u64;
                self.send(
                    &mut tx,
                    Header::new(Kind::Write, len as u32, offset, 0),
                    &[&buf[..]],
                )
            };
            if !sent {
                return Err(io::Error::other("the link failed during the resync"));
            }
        }
        self.flush_peer(Kind::ResyncEnd);
        let tx = lock(&self.tx);
        if tx.generation != generation || tx.writer.is_none() {
            return Err(io::Error::other("the link failed at the resync's end"));
        }
        self.state
            .store(LinkState::Connected as u8, Ordering::Release);
        *lock(&self.since) = None;
        drop(tx);
        self.resynced_bytes.fetch_add(copied, Ordering::Relaxed);
        tracing::info!(
            peer = %self.options.peer,
            copied_mib = copied >> 20,
            seconds = started.elapsed().as_secs_f64(),
            "replication: the peer is in sync"
        );
        Ok(())
    }
}

/// The peer's page checksums of `len` bytes at `start`, into `theirs`.
fn ask_sums(stream: &mut Stream, start: u64, len: u64, theirs: &mut Vec<u8>) -> io::Result<()> {
    let ask = Header::new(Kind::SumsAsk, 8, start, 0).encode();
    stream.writer.write_all(&ask)?;
    stream.writer.write_all(&len.to_le_bytes())?;
    stream.writer.flush()?;
    let answer = Header::read(&mut stream.reader)?;
    let want = len.div_ceil(wire::SUM_PAGE_BYTES) as usize * 4;
    if answer.kind != Kind::Sums || answer.offset != start || answer.len as usize != want {
        return Err(io::Error::other(format!(
            "the peer answered sums with {answer:?}"
        )));
    }
    theirs.resize(want, 0);
    stream.reader.read_exact(theirs)
}
