//! `JournaledDevice`: a backing with a journal, so that journaled
//! write-back's transactions reach it atomically on any block device (pages
//! staged in the journal, a commit record, then in place, then retired),
//! and whoever opens it next replays a committed one.
//!
//! Where the journal lives is the operator's choice, never ours
//! (`JournalPlace`): a file or device of its own (the backing is exported
//! whole), or the backing's last bytes, named in so many words
//! (`backing-end`; the export then ends before them). Either region is
//! formatted only when it holds nothing (all zeros) and is used as found
//! when it holds a wcache journal; any other byte in it is the operator's
//! data, and opening is refused before anything is written.
//!
//! Layout (`docs/on-disk-format.md`, "Backing journal"): at the end of a
//! backing the region starts at the first 4096-byte boundary at or below
//! `len - region_bytes`; on its own device, at offset 0. In the region: a
//! 4096-byte header, the entry table (16 bytes per journal page, rounded up
//! to whole 4096-byte blocks), then the journal pages. Commit writes the
//! entries, flushes, writes the header naming the transaction, flushes;
//! retire flushes the pages put in place, rewrites the header as empty and
//! flushes, before the next transaction stages over the pages. A committed
//! header is therefore always backed by durable entries and pages: a
//! checksum that fails is damage, never a torn commit, and is an error that
//! names what failed.

use std::sync::{Arc, Mutex};

use super::{check_range, AlignedBuf, BlockDevice, DeviceError};

const MAGIC: &[u8; 8] = b"WCJRNL01";
const VERSION: u32 = 1;
const BLOCK: u64 = 4096;
const ENTRY_BYTES: u64 = 16;
const STATE_EMPTY: u32 = 0;
const STATE_COMMITTED: u32 = 1;
/// Header bytes covered by its checksum (the checksum follows them).
const HEADER_SUMMED: usize = 56;

/// Why a backing journal cannot be used as found.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{0}")]
    Device(#[from] DeviceError),
    #[error("{device} ({len_bytes} bytes) is too small for a journal of {pages} pages ({region_bytes} bytes; at a backing's end, with data before it)")]
    TooSmall {
        device: String,
        len_bytes: u64,
        pages: u64,
        region_bytes: u64,
    },
    #[error("{device}: the {region_bytes} bytes from offset {start} named for the journal hold data (a non-zero byte at offset {nonzero_at}) and no wcache journal: refused, nothing was written. {advice}")]
    ForeignData {
        device: String,
        start: u64,
        region_bytes: u64,
        nonzero_at: u64,
        advice: &'static str,
    },
    #[error("backing {device}: journal header at offset {offset} fails its checksum (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderChecksum {
        device: String,
        offset: u64,
        stored: u32,
        computed: u32,
    },
    #[error("backing {device}: journal header: {what}")]
    Header { device: String, what: String },
    #[error("backing {device}: journal of transaction {txn}: entry table fails its checksum (stored {stored:#010x}, computed {computed:#010x}); not replayed")]
    EntriesChecksum {
        device: String,
        txn: u64,
        stored: u32,
        computed: u32,
    },
    #[error("backing {device}: journal of transaction {txn}: journal page {journal_page} (for page {home_page}) fails its checksum; not replayed")]
    PageChecksum {
        device: String,
        txn: u64,
        journal_page: u64,
        home_page: u64,
    },
}

/// Where a backing's journal lives (the operator's choice).
pub enum JournalPlace {
    /// A file or device of its own, from offset 0; the backing is exported whole.
    Own(Arc<dyn BlockDevice>),
    /// The backing's last bytes; the export ends before them.
    BackingEnd,
}

/// How the operator names the backing's end as the journal's place.
pub const BACKING_END: &str = "backing-end";

const ADVICE_BACKING_END: &str = "Give the journal a file or device of its own \
     (--journal EXPORT=PATH), or free those bytes first (shrink what is on the backing, then zero them).";
const ADVICE_OWN: &str =
    "Give an empty file or device (a missing file is created), or zero this one first.";

/// What opening the journal found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalOpen {
    /// A blank region: a journal was formatted there.
    Formatted,
    /// An empty journal.
    Empty,
    /// A committed transaction was replayed in place and retired.
    Replayed { txn: u64, pages: u64 },
}

/// The journal region of a backing (see the module header).
pub struct BackingJournal {
    /// Where the journal's region is (the backing itself at its end, or a device of its own).
    dev: Arc<dyn BlockDevice>,
    /// The backing, where committed pages go in place.
    data: Arc<dyn BlockDevice>,
    /// Bytes of the backing before the journal (all of it when the journal has its own device).
    data_len: u64,
    offset: u64,
    pages: u64,
    page_size: u64,
    /// Data checksum of each journal page staged since the last retire.
    sums: Mutex<Vec<u32>>,
}

/// Bytes a journal of `pages` pages of `page_size` bytes takes.
pub fn region_bytes(pages: u64, page_size: u64) -> u64 {
    BLOCK + (pages * ENTRY_BYTES).div_ceil(BLOCK) * BLOCK + pages * page_size
}

struct Header {
    state: u32,
    txn: u64,
    entries: u64,
    entries_sum: u32,
}

impl BackingJournal {
    fn entries_offset(&self) -> u64 {
        self.offset + BLOCK
    }
    fn page_offset(&self, journal_page: u64) -> u64 {
        self.offset
            + BLOCK
            + (self.pages * ENTRY_BYTES).div_ceil(BLOCK) * BLOCK
            + journal_page * self.page_size
    }

    /// Pages the journal holds.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    fn encode_header(&self, h: &Header) -> AlignedBuf {
        let mut buf = AlignedBuf::new();
        let b = buf.get(BLOCK as usize);
        b.fill(0);
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(self.page_size as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.pages.to_le_bytes());
        b[24..28].copy_from_slice(&h.state.to_le_bytes());
        b[32..40].copy_from_slice(&h.txn.to_le_bytes());
        b[40..48].copy_from_slice(&h.entries.to_le_bytes());
        b[48..52].copy_from_slice(&h.entries_sum.to_le_bytes());
        let sum = crate::checksum::crc32c(&b[..HEADER_SUMMED]);
        b[HEADER_SUMMED..HEADER_SUMMED + 4].copy_from_slice(&sum.to_le_bytes());
        buf
    }

    /// Decode the header block; None when it is all zeros (a blank region).
    fn decode_header(&self, b: &[u8], device: &str) -> Result<Option<Header>, JournalError> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if &b[0..8] != MAGIC {
            let nonzero_at = self.offset + b.iter().position(|&x| x != 0).unwrap_or(0) as u64;
            return Err(self.foreign(device, nonzero_at));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let stored = u32_at(HEADER_SUMMED);
        let computed = crate::checksum::crc32c(&b[..HEADER_SUMMED]);
        if stored != computed {
            return Err(JournalError::HeaderChecksum {
                device: device.to_string(),
                offset: self.offset,
                stored,
                computed,
            });
        }
        let header_err = |what: String| JournalError::Header {
            device: device.to_string(),
            what,
        };
        if u32_at(8) != VERSION {
            return Err(header_err(format!(
                "version {} (this wcache reads {VERSION})",
                u32_at(8)
            )));
        }
        if u64::from(u32_at(12)) != self.page_size || u64_at(16) != self.pages {
            return Err(header_err(format!(
                "made for {} pages of {} bytes, opened for {} pages of {} bytes",
                u64_at(16),
                u32_at(12),
                self.pages,
                self.page_size
            )));
        }
        let h = Header {
            state: u32_at(24),
            txn: u64_at(32),
            entries: u64_at(40),
            entries_sum: u32_at(48),
        };
        if h.state > STATE_COMMITTED || h.entries > self.pages {
            return Err(header_err(format!(
                "state {} with {} entries",
                h.state, h.entries
            )));
        }
        Ok(Some(h))
    }

    fn write_header(&self, h: &Header) -> Result<(), DeviceError> {
        let mut buf = self.encode_header(h);
        self.dev.write_at(buf.get(BLOCK as usize), self.offset)?;
        self.dev.flush()
    }

    fn foreign(&self, device: &str, nonzero_at: u64) -> JournalError {
        JournalError::ForeignData {
            device: device.to_string(),
            start: self.offset,
            region_bytes: region_bytes(self.pages, self.page_size),
            nonzero_at,
            advice: if Arc::ptr_eq(&self.dev, &self.data) {
                ADVICE_BACKING_END
            } else {
                ADVICE_OWN
            },
        }
    }

    /// The first non-zero byte of the region, if any (read in 1 MiB steps).
    fn first_nonzero(&self) -> Result<Option<u64>, DeviceError> {
        const STEP: u64 = 1 << 20;
        let end = self.offset + region_bytes(self.pages, self.page_size);
        let mut buf = AlignedBuf::new();
        let mut at = self.offset;
        while at < end {
            let n = STEP.min(end - at);
            let chunk = buf.get(n as usize);
            self.dev.read_at(chunk, at)?;
            if let Some(i) = chunk.iter().position(|&x| x != 0) {
                return Ok(Some(at + i as u64));
            }
            at += n;
        }
        Ok(None)
    }

    /// Where the region of a journal of `pages` pages is: (its device,
    /// its offset there, the bytes of data before it on the backing).
    fn region(
        data: &Arc<dyn BlockDevice>,
        place: &JournalPlace,
        pages: u64,
        page_size: u64,
    ) -> Result<(Arc<dyn BlockDevice>, u64, u64), JournalError> {
        let region = region_bytes(pages, page_size);
        Ok(match place {
            JournalPlace::BackingEnd => {
                let len = data.len_bytes();
                let offset = len.saturating_sub(region) / BLOCK * BLOCK;
                if len < region || offset == 0 {
                    return Err(JournalError::TooSmall {
                        device: data.name(),
                        len_bytes: len,
                        pages,
                        region_bytes: region,
                    });
                }
                (data.clone(), offset, offset)
            }
            JournalPlace::Own(dev) => {
                if dev.len_bytes() < region {
                    return Err(JournalError::TooSmall {
                        device: dev.name(),
                        len_bytes: dev.len_bytes(),
                        pages,
                        region_bytes: region,
                    });
                }
                (dev.clone(), 0, data.len_bytes())
            }
        })
    }

    /// Open the journal of backing `data` where `place` says, replaying a
    /// committed transaction; a region that holds nothing is formatted, one
    /// that holds anything but a wcache journal is refused untouched.
    pub fn open(
        data: Arc<dyn BlockDevice>,
        place: JournalPlace,
        pages: u64,
        page_size: u64,
    ) -> Result<(BackingJournal, JournalOpen), JournalError> {
        let (dev, offset, data_len) = Self::region(&data, &place, pages, page_size)?;
        let j = BackingJournal {
            dev,
            data,
            data_len,
            offset,
            pages,
            page_size,
            sums: Mutex::new(vec![0; pages as usize]),
        };
        let name = j.dev.name();
        let mut buf = AlignedBuf::new();
        let block = buf.get(BLOCK as usize);
        j.dev.read_at(block, offset)?;
        let header = j.decode_header(block, &name)?;
        let empty = Header {
            state: STATE_EMPTY,
            txn: 0,
            entries: 0,
            entries_sum: 0,
        };
        let found = match header {
            None => {
                if let Some(at) = j.first_nonzero()? {
                    return Err(j.foreign(&name, at));
                }
                j.write_header(&empty)?;
                JournalOpen::Formatted
            }
            Some(h) if h.state == STATE_EMPTY => JournalOpen::Empty,
            Some(h) => {
                let pages = j.replay(&h)?;
                j.write_header(&Header {
                    txn: h.txn,
                    ..empty
                })?;
                JournalOpen::Replayed { txn: h.txn, pages }
            }
        };
        Ok((j, found))
    }

    /// Put a committed transaction's pages in place (after checking every
    /// checksum first, so a damaged journal changes nothing), then flush.
    fn replay(&self, h: &Header) -> Result<u64, JournalError> {
        let dev = self.dev.as_ref();
        let data = self.data.as_ref();
        let name = dev.name();
        let table = (h.entries * ENTRY_BYTES).div_ceil(BLOCK) * BLOCK;
        let mut buf = AlignedBuf::new();
        let entries = buf.get(table.max(BLOCK) as usize);
        dev.read_at(&mut entries[..table as usize], self.entries_offset())?;
        let used = &entries[..(h.entries * ENTRY_BYTES) as usize];
        let computed = crate::checksum::crc32c(used);
        if computed != h.entries_sum {
            return Err(JournalError::EntriesChecksum {
                device: name,
                txn: h.txn,
                stored: h.entries_sum,
                computed,
            });
        }
        let list: Vec<(u64, u32)> = used
            .chunks_exact(ENTRY_BYTES as usize)
            .map(|e| {
                let home = u64::from_le_bytes(e[0..8].try_into().expect("8 bytes"));
                let sum = u32::from_le_bytes(e[8..12].try_into().expect("4 bytes"));
                (home, sum)
            })
            .collect();
        let mut page = AlignedBuf::new();
        for pass in 0..2 {
            for (j, &(home, sum)) in list.iter().enumerate() {
                let page_data = page.get(self.page_size as usize);
                dev.read_at(page_data, self.page_offset(j as u64))?;
                if pass == 0 {
                    if crate::checksum::crc32c(page_data) != sum {
                        return Err(JournalError::PageChecksum {
                            device: name,
                            txn: h.txn,
                            journal_page: j as u64,
                            home_page: home,
                        });
                    }
                    if (home + 1) * self.page_size > self.data_len {
                        return Err(JournalError::Header {
                            device: name,
                            what: format!("entry {j} names page {home}, beyond the data"),
                        });
                    }
                } else {
                    data.write_at(page_data, home * self.page_size)?;
                }
            }
        }
        data.flush()?;
        Ok(list.len() as u64)
    }

    /// Write `data` (whole pages) at journal pages from `journal_page`.
    pub fn stage(&self, journal_page: u64, data: &[u8]) -> Result<(), DeviceError> {
        let dev = self.dev.as_ref();
        let n = data.len() as u64 / self.page_size;
        check_range(&|| dev.name() + " journal", journal_page, n, self.pages)?;
        dev.write_at(data, self.page_offset(journal_page))?;
        let mut sums = self.sums.lock().expect("journal sums");
        for (i, p) in data.chunks_exact(self.page_size as usize).enumerate() {
            sums[journal_page as usize + i] = crate::checksum::crc32c(p);
        }
        Ok(())
    }

    /// Make transaction `txn` durable: its pages (staged at journal pages
    /// 0.. in the order of `homes`) and entries, then its header.
    pub fn commit(&self, txn: u64, homes: &[u64]) -> Result<(), DeviceError> {
        let dev = self.dev.as_ref();
        let n = homes.len() as u64;
        check_range(&|| dev.name() + " journal", 0, n, self.pages)?;
        let table = (n * ENTRY_BYTES).div_ceil(BLOCK) * BLOCK;
        let mut buf = AlignedBuf::new();
        let b = buf.get(table.max(BLOCK) as usize);
        b.fill(0);
        {
            let sums = self.sums.lock().expect("journal sums");
            for (j, &home) in homes.iter().enumerate() {
                let e = &mut b[j * ENTRY_BYTES as usize..(j + 1) * ENTRY_BYTES as usize];
                e[0..8].copy_from_slice(&home.to_le_bytes());
                e[8..12].copy_from_slice(&sums[j].to_le_bytes());
            }
        }
        let entries_sum = crate::checksum::crc32c(&b[..(n * ENTRY_BYTES) as usize]);
        dev.flush()?; // the staged pages first
        dev.write_at(&b[..table as usize], self.entries_offset())?;
        dev.flush()?;
        self.write_header(&Header {
            state: STATE_COMMITTED,
            txn,
            entries: n,
            entries_sum,
        })
    }

    /// The transaction's pages are in place (flushed here first): empty the journal.
    pub fn retire(&self, txn: u64) -> Result<(), DeviceError> {
        self.data.flush()?;
        self.write_header(&Header {
            state: STATE_EMPTY,
            txn,
            entries: 0,
            entries_sum: 0,
        })
    }
}

/// A backing with its journal: reads and writes reach the backing's data
/// only (the bytes before the region, when the region is at its end), and
/// `journal()` gives the region.
pub struct JournaledDevice {
    inner: Arc<dyn BlockDevice>,
    journal: BackingJournal,
}

impl JournaledDevice {
    /// Open `inner`'s journal where `place` says (replaying a committed transaction).
    pub fn open(
        inner: Arc<dyn BlockDevice>,
        place: JournalPlace,
        pages: u64,
        page_size: u64,
    ) -> Result<(JournaledDevice, JournalOpen), JournalError> {
        let (journal, found) = BackingJournal::open(inner.clone(), place, pages, page_size)?;
        Ok((JournaledDevice { inner, journal }, found))
    }

    /// Whether `place` (for backing `data`, a journal of `pages` pages)
    /// starts with a wcache journal header; reads one block, writes nothing.
    pub fn holds_journal(
        data: &Arc<dyn BlockDevice>,
        place: &JournalPlace,
        pages: u64,
        page_size: u64,
    ) -> Result<bool, JournalError> {
        let (dev, offset) = match BackingJournal::region(data, place, pages, page_size) {
            Ok((dev, offset, _)) => (dev, offset),
            Err(JournalError::TooSmall { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut buf = AlignedBuf::new();
        let block = buf.get(BLOCK as usize);
        dev.read_at(block, offset)?;
        Ok(&block[0..8] == MAGIC)
    }

    pub fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
}

impl BlockDevice for JournaledDevice {
    fn len_bytes(&self) -> u64 {
        self.journal.data_len
    }
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError> {
        check_range(
            &|| self.name(),
            offset_bytes,
            buf.len() as u64,
            self.len_bytes(),
        )?;
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, data: &[u8], offset_bytes: u64) -> Result<(), DeviceError> {
        check_range(
            &|| self.name(),
            offset_bytes,
            data.len() as u64,
            self.len_bytes(),
        )?;
        self.inner.write_at(data, offset_bytes)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush()
    }
    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DeviceError> {
        check_range(&|| self.name(), offset_bytes, len_bytes, self.len_bytes())?;
        self.inner.trim(offset_bytes, len_bytes)
    }
    fn writes_durable(&self) -> bool {
        self.inner.writes_durable()
    }
    fn writes_wait_for_medium(&self) -> bool {
        self.inner.writes_wait_for_medium()
    }
    fn alignment_bytes(&self) -> usize {
        self.inner.alignment_bytes()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
    fn health(&self) -> Option<String> {
        self.inner.health()
    }
    fn release(&self) {
        self.inner.release();
        if !Arc::ptr_eq(&self.journal.dev, &self.inner) {
            self.journal.dev.release();
        }
    }
    fn journal(&self) -> Option<&BackingJournal> {
        Some(&self.journal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::mem::MemDevice;

    const PAGE: u64 = 4096;
    const PAGES: u64 = 8;

    fn backing() -> Arc<dyn BlockDevice> {
        Arc::new(MemDevice::new(1 << 20))
    }

    fn page(v: u8) -> Vec<u8> {
        vec![v; PAGE as usize]
    }

    fn read_page(dev: &dyn BlockDevice, p: u64) -> Vec<u8> {
        let mut b = vec![0; PAGE as usize];
        dev.read_at(&mut b, p * PAGE).expect("read");
        b
    }

    /// Stage pages 3 and 7 (values 1 and 2) as transaction 5.
    fn stage_two(j: &BackingJournal) {
        j.stage(0, &page(1)).expect("stage");
        j.stage(1, &page(2)).expect("stage");
    }

    #[test]
    fn a_blank_region_is_formatted_and_the_device_ends_before_it() {
        let b = backing();
        let (dev, found) =
            JournaledDevice::open(b.clone(), JournalPlace::BackingEnd, PAGES, PAGE).expect("open");
        assert_eq!(found, JournalOpen::Formatted);
        assert_eq!(dev.len_bytes(), (1 << 20) - region_bytes(PAGES, PAGE));
        let e = dev
            .write_at(&page(9), dev.len_bytes())
            .expect_err("past the data");
        assert!(matches!(e, DeviceError::OutOfRange { .. }), "{e}");
        let (_, again) =
            JournaledDevice::open(b, JournalPlace::BackingEnd, PAGES, PAGE).expect("reopen");
        assert_eq!(again, JournalOpen::Empty);
    }

    #[test]
    fn a_committed_transaction_is_replayed_in_place_and_an_uncommitted_one_is_not() {
        let b = backing();
        let (dev, _) =
            JournaledDevice::open(b.clone(), JournalPlace::BackingEnd, PAGES, PAGE).expect("open");
        let j = dev.journal().expect("journal");
        stage_two(j);
        // A crash before the commit: nothing in place, nothing to replay.
        let (_, found) = JournaledDevice::open(b.clone(), JournalPlace::BackingEnd, PAGES, PAGE)
            .expect("reopen");
        assert_eq!(found, JournalOpen::Empty);
        assert_eq!(read_page(b.as_ref(), 3), page(0));
        stage_two(j);
        j.commit(5, &[3, 7]).expect("commit");
        // A crash after the commit: replayed at the next open, then retired.
        let (_, found) = JournaledDevice::open(b.clone(), JournalPlace::BackingEnd, PAGES, PAGE)
            .expect("reopen");
        assert_eq!(found, JournalOpen::Replayed { txn: 5, pages: 2 });
        assert_eq!(read_page(b.as_ref(), 3), page(1));
        assert_eq!(read_page(b.as_ref(), 7), page(2));
        let (_, found) =
            JournaledDevice::open(b, JournalPlace::BackingEnd, PAGES, PAGE).expect("reopen");
        assert_eq!(found, JournalOpen::Empty);
    }

    #[test]
    fn damage_is_an_error_that_names_it_and_changes_nothing() {
        let b = backing();
        let (dev, _) =
            JournaledDevice::open(b.clone(), JournalPlace::BackingEnd, PAGES, PAGE).expect("open");
        let offset = dev.len_bytes();
        let j = dev.journal().expect("journal");
        stage_two(j);
        j.commit(5, &[3, 7]).expect("commit");
        // A journal page that does not match its entry.
        let first_page = j.page_offset(0);
        b.write_at(&page(0xAA), first_page).expect("damage");
        let e = JournaledDevice::open(b.clone(), JournalPlace::BackingEnd, PAGES, PAGE)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("journal page 0 (for page 3)"), "{e}");
        assert_eq!(read_page(b.as_ref(), 7), page(0), "nothing replayed");
        // The entry table.
        b.write_at(&page(0x55), offset + BLOCK).expect("damage");
        let e = JournaledDevice::open(b.clone(), JournalPlace::BackingEnd, PAGES, PAGE)
            .err()
            .expect("refused");
        assert!(
            e.to_string().contains("entry table fails its checksum"),
            "{e}"
        );
        // The header.
        let mut header = vec![0u8; BLOCK as usize];
        b.read_at(&mut header, offset).expect("read");
        header[33] ^= 1;
        b.write_at(&header, offset).expect("damage");
        let e = JournaledDevice::open(b, JournalPlace::BackingEnd, PAGES, PAGE)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("header at offset"), "{e}");
        assert!(e.to_string().contains("checksum"), "{e}");
    }

    /// The whole device, for comparing before and after a refusal.
    fn all_bytes(dev: &dyn BlockDevice) -> Vec<u8> {
        let mut b = vec![0; dev.len_bytes() as usize];
        dev.read_at(&mut b, 0).expect("read");
        b
    }

    #[test]
    fn data_anywhere_in_the_named_end_is_refused_untouched_and_a_tiny_backing_is_refused() {
        let region = region_bytes(PAGES, PAGE);
        let offset = ((1 << 20) - region) / BLOCK * BLOCK;
        // A byte in the header block, and one deep in the region with a
        // blank header block (a filesystem's last blocks look like that).
        for at in [offset, offset + region - 1] {
            let b = backing();
            let mut one = vec![0u8; PAGE as usize];
            b.read_at(&mut one, at / PAGE * PAGE).expect("read");
            one[(at % PAGE) as usize] = 7;
            b.write_at(&one, at / PAGE * PAGE).expect("data");
            let before = all_bytes(b.as_ref());
            let e = JournaledDevice::open(b.clone(), JournalPlace::BackingEnd, PAGES, PAGE)
                .err()
                .expect("refused");
            let text = e.to_string();
            assert!(text.contains("hold data"), "{text}");
            assert!(text.contains(&format!("offset {at}")), "{text}");
            assert!(text.contains("--journal EXPORT=PATH"), "{text}");
            assert!(before == all_bytes(b.as_ref()), "nothing written");
        }
        let small: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(64 * 1024));
        let e = JournaledDevice::open(small, JournalPlace::BackingEnd, 64, PAGE)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("too small"), "{e}");
    }

    #[test]
    fn a_journal_of_its_own_leaves_the_backing_whole_and_replays_onto_it() {
        let b = backing();
        let own: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(region_bytes(PAGES, PAGE)));
        let place = || JournalPlace::Own(own.clone());
        let (dev, found) = JournaledDevice::open(b.clone(), place(), PAGES, PAGE).expect("open");
        assert_eq!(found, JournalOpen::Formatted);
        assert_eq!(dev.len_bytes(), 1 << 20, "the backing is exported whole");
        dev.write_at(&page(4), (1 << 20) - PAGE)
            .expect("its last page is data");
        let j = dev.journal().expect("journal");
        stage_two(j);
        j.commit(9, &[3, 255]).expect("commit");
        assert_eq!(read_page(b.as_ref(), 3), page(0), "nothing in place yet");
        let (_, found) = JournaledDevice::open(b.clone(), place(), PAGES, PAGE).expect("reopen");
        assert_eq!(found, JournalOpen::Replayed { txn: 9, pages: 2 });
        assert_eq!(read_page(b.as_ref(), 3), page(1));
        assert_eq!(read_page(b.as_ref(), 255), page(2));
        // A journal device holding other data is refused untouched.
        let other: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(region_bytes(PAGES, PAGE)));
        other.write_at(&page(5), PAGE * 3).expect("data");
        let before = all_bytes(other.as_ref());
        let e = JournaledDevice::open(b.clone(), JournalPlace::Own(other.clone()), PAGES, PAGE)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("Give an empty file"), "{e}");
        assert!(before == all_bytes(other.as_ref()), "nothing written");
        let tiny: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(PAGE));
        let e = JournaledDevice::open(b, JournalPlace::Own(tiny), PAGES, PAGE)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("too small"), "{e}");
    }
}
