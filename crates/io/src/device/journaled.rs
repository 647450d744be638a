//! `JournaledDevice`: a backing whose last bytes hold a journal, so that
//! journaled write-back's transactions reach it atomically on any block
//! device (pages staged in the journal, a commit record, then in place,
//! then retired), and whoever opens it next replays a committed one.
//!
//! Layout (`docs/on-disk-format.md`, "Backing journal"): the region starts
//! at the first 4096-byte boundary at or below `len - region_bytes`; the
//! device above exposes only the bytes before it. In the region: a 4096-byte
//! header, the entry table (16 bytes per journal page, rounded up to whole
//! 4096-byte blocks), then the journal pages. Commit writes the entries,
//! flushes, writes the header naming the transaction, flushes; retire
//! rewrites the header as empty and flushes, before the next transaction
//! stages over the pages. A committed header is therefore always backed by
//! durable entries and pages: a checksum that fails is damage, never a torn
//! commit, and is an error that names what failed.

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
    #[error("backing {device} ({len_bytes} bytes) is too small for a journal of {pages} pages ({region_bytes} bytes) and any data")]
    TooSmall {
        device: String,
        len_bytes: u64,
        pages: u64,
        region_bytes: u64,
    },
    #[error("backing {device}: the journal region at offset {offset} holds other data (no wcache journal header); starting would overwrite it (pass --force to format a journal there)")]
    ForeignData { device: String, offset: u64 },
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
    /// The whole backing, journal region included.
    dev: Arc<dyn BlockDevice>,
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
        let sum = crc32c::crc32c(&b[..HEADER_SUMMED]);
        b[HEADER_SUMMED..HEADER_SUMMED + 4].copy_from_slice(&sum.to_le_bytes());
        buf
    }

    /// Decode the header block; None when it is all zeros (a blank region).
    fn decode_header(&self, b: &[u8], device: &str) -> Result<Option<Header>, JournalError> {
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if &b[0..8] != MAGIC {
            return Err(JournalError::ForeignData {
                device: device.to_string(),
                offset: self.offset,
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let stored = u32_at(HEADER_SUMMED);
        let computed = crc32c::crc32c(&b[..HEADER_SUMMED]);
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

    /// Open the journal at the end of `dev`, replaying a committed
    /// transaction; a blank region is formatted, and so is one holding
    /// other data when `force`.
    pub fn open(
        dev: Arc<dyn BlockDevice>,
        pages: u64,
        page_size: u64,
        force: bool,
    ) -> Result<(BackingJournal, JournalOpen), JournalError> {
        let region = region_bytes(pages, page_size);
        let len = dev.len_bytes();
        let dev_ref = dev.as_ref();
        let too_small = || JournalError::TooSmall {
            device: dev_ref.name(),
            len_bytes: len,
            pages,
            region_bytes: region,
        };
        let offset = len.checked_sub(region).ok_or_else(too_small)? / BLOCK * BLOCK;
        if offset == 0 {
            return Err(too_small());
        }
        let j = BackingJournal {
            dev: dev.clone(),
            offset,
            pages,
            page_size,
            sums: Mutex::new(vec![0; pages as usize]),
        };
        let mut buf = AlignedBuf::new();
        let block = buf.get(BLOCK as usize);
        dev_ref.read_at(block, offset)?;
        let header = match j.decode_header(block, &dev_ref.name()) {
            Err(JournalError::ForeignData { .. }) if force => None,
            other => other?,
        };
        let empty = Header {
            state: STATE_EMPTY,
            txn: 0,
            entries: 0,
            entries_sum: 0,
        };
        let found = match header {
            None => {
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
        let name = dev.name();
        let table = (h.entries * ENTRY_BYTES).div_ceil(BLOCK) * BLOCK;
        let mut buf = AlignedBuf::new();
        let entries = buf.get(table.max(BLOCK) as usize);
        dev.read_at(&mut entries[..table as usize], self.entries_offset())?;
        let used = &entries[..(h.entries * ENTRY_BYTES) as usize];
        let computed = crc32c::crc32c(used);
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
                let data = page.get(self.page_size as usize);
                dev.read_at(data, self.page_offset(j as u64))?;
                if pass == 0 {
                    if crc32c::crc32c(data) != sum {
                        return Err(JournalError::PageChecksum {
                            device: name,
                            txn: h.txn,
                            journal_page: j as u64,
                            home_page: home,
                        });
                    }
                    if (home + 1) * self.page_size > self.offset {
                        return Err(JournalError::Header {
                            device: name,
                            what: format!("entry {j} names page {home}, beyond the data"),
                        });
                    }
                } else {
                    dev.write_at(data, home * self.page_size)?;
                }
            }
        }
        dev.flush()?;
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
            sums[journal_page as usize + i] = crc32c::crc32c(p);
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
        let entries_sum = crc32c::crc32c(&b[..(n * ENTRY_BYTES) as usize]);
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
        self.dev.flush()?;
        self.write_header(&Header {
            state: STATE_EMPTY,
            txn,
            entries: 0,
            entries_sum: 0,
        })
    }
}

/// A backing with a journal region at its end: reads and writes reach the
/// bytes before the region only, and `journal()` gives the region.
pub struct JournaledDevice {
    inner: Arc<dyn BlockDevice>,
    journal: BackingJournal,
}

impl JournaledDevice {
    /// Open `inner`'s journal (replaying a committed transaction).
    pub fn open(
        inner: Arc<dyn BlockDevice>,
        pages: u64,
        page_size: u64,
        force: bool,
    ) -> Result<(JournaledDevice, JournalOpen), JournalError> {
        let (journal, found) = BackingJournal::open(inner.clone(), pages, page_size, force)?;
        Ok((JournaledDevice { inner, journal }, found))
    }

    pub fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
}

impl BlockDevice for JournaledDevice {
    fn len_bytes(&self) -> u64 {
        self.journal.offset
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
        let (dev, found) = JournaledDevice::open(b.clone(), PAGES, PAGE, false).expect("open");
        assert_eq!(found, JournalOpen::Formatted);
        assert_eq!(dev.len_bytes(), (1 << 20) - region_bytes(PAGES, PAGE));
        let e = dev
            .write_at(&page(9), dev.len_bytes())
            .expect_err("past the data");
        assert!(matches!(e, DeviceError::OutOfRange { .. }), "{e}");
        let (_, again) = JournaledDevice::open(b, PAGES, PAGE, false).expect("reopen");
        assert_eq!(again, JournalOpen::Empty);
    }

    #[test]
    fn a_committed_transaction_is_replayed_in_place_and_an_uncommitted_one_is_not() {
        let b = backing();
        let (dev, _) = JournaledDevice::open(b.clone(), PAGES, PAGE, false).expect("open");
        let j = dev.journal().expect("journal");
        stage_two(j);
        // A crash before the commit: nothing in place, nothing to replay.
        let (_, found) = JournaledDevice::open(b.clone(), PAGES, PAGE, false).expect("reopen");
        assert_eq!(found, JournalOpen::Empty);
        assert_eq!(read_page(b.as_ref(), 3), page(0));
        stage_two(j);
        j.commit(5, &[3, 7]).expect("commit");
        // A crash after the commit: replayed at the next open, then retired.
        let (_, found) = JournaledDevice::open(b.clone(), PAGES, PAGE, false).expect("reopen");
        assert_eq!(found, JournalOpen::Replayed { txn: 5, pages: 2 });
        assert_eq!(read_page(b.as_ref(), 3), page(1));
        assert_eq!(read_page(b.as_ref(), 7), page(2));
        let (_, found) = JournaledDevice::open(b, PAGES, PAGE, false).expect("reopen");
        assert_eq!(found, JournalOpen::Empty);
    }

    #[test]
    fn damage_is_an_error_that_names_it_and_changes_nothing() {
        let b = backing();
        let (dev, _) = JournaledDevice::open(b.clone(), PAGES, PAGE, false).expect("open");
        let offset = dev.len_bytes();
        let j = dev.journal().expect("journal");
        stage_two(j);
        j.commit(5, &[3, 7]).expect("commit");
        // A journal page that does not match its entry.
        let first_page = j.page_offset(0);
        b.write_at(&page(0xAA), first_page).expect("damage");
        let e = JournaledDevice::open(b.clone(), PAGES, PAGE, false)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("journal page 0 (for page 3)"), "{e}");
        assert_eq!(read_page(b.as_ref(), 7), page(0), "nothing replayed");
        // The entry table.
        b.write_at(&page(0x55), offset + BLOCK).expect("damage");
        let e = JournaledDevice::open(b.clone(), PAGES, PAGE, false)
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
        let e = JournaledDevice::open(b, PAGES, PAGE, false)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("header at offset"), "{e}");
        assert!(e.to_string().contains("checksum"), "{e}");
    }

    #[test]
    fn other_data_is_refused_unless_forced_and_a_tiny_backing_is_refused() {
        let b = backing();
        let offset = ((1 << 20) - region_bytes(PAGES, PAGE)) / BLOCK * BLOCK;
        b.write_at(&page(7), offset).expect("data");
        let e = JournaledDevice::open(b.clone(), PAGES, PAGE, false)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("holds other data"), "{e}");
        let (_, found) = JournaledDevice::open(b, PAGES, PAGE, true).expect("forced");
        assert_eq!(found, JournalOpen::Formatted);
        let small: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(64 * 1024));
        let e = JournaledDevice::open(small, 64, PAGE, false)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("too small"), "{e}");
    }
}
