//! The file table on disk (`BACKING_DIR/.wcache-files`): which file each
//! window of the mount's volume belongs to, by kernel file handle. A slot
//! is appended and made durable before the first write to its window is
//! submitted, so a page found in the cache after a crash always has its
//! file. A torn last entry (a crash during its append) is dropped: no
//! write to its window was ever submitted.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use wcache_io::checksum::crc32c;

use crate::handle::{FileHandle, HANDLE_BYTES_MAX};

/// The table's name in the backing directory (hidden from the mount).
pub const TABLE_NAME: &str = ".wcache-files";

const HEADER_MAGIC: &[u8; 8] = b"WCFILES1";
const ENTRY_MAGIC: u32 = 0x5743_4653; // "WCFS"
/// The longest cache identity a header holds.
const IDENTITY_BYTES_MAX: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

/// The table file and the entries it holds.
pub struct Table {
    path: PathBuf,
    file: File,
    /// The cache device the entries were made for.
    pub identity: String,
    /// `(slot, handle)`, in the order they were appended.
    pub entries: Vec<(u32, FileHandle)>,
    /// Bytes of the file that hold whole entries (appends go here).
    end: u64,
}

impl Table {
    /// Opens (creating) the table in `dir` and reads its entries; a file
    /// with no valid header is an empty table with no identity.
    pub fn open(dir: &Path) -> Result<Table, TableError> {
        let path = dir.join(TABLE_NAME);
        let err = |source| TableError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(err)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(err)?;
        let (identity, entries, end) = parse(&bytes);
        Ok(Table {
            path,
            file,
            identity,
            entries,
            end: end as u64,
        })
    }

    fn err(&self, source: io::Error) -> TableError {
        TableError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// Empties the table for `identity` (durable when this returns).
    pub fn reset(&mut self, identity: &str) -> Result<(), TableError> {
        let mut header = Vec::with_capacity(16 + identity.len());
        header.extend_from_slice(HEADER_MAGIC);
        let identity = &identity.as_bytes()[..identity.len().min(IDENTITY_BYTES_MAX)];
        header.extend_from_slice(&(identity.len() as u32).to_le_bytes());
        header.extend_from_slice(identity);
        header.extend_from_slice(&crc32c(&header).to_le_bytes());
        self.file.set_len(0).map_err(|e| self.err(e))?;
        self.file
            .write_all_at(&header, 0)
            .map_err(|e| self.err(e))?;
        self.file.sync_data().map_err(|e| self.err(e))?;
        self.identity = String::from_utf8_lossy(identity).into_owned();
        self.entries.clear();
        self.end = header.len() as u64;
        Ok(())
    }

    /// Appends `slot`'s handle, durable when this returns.
    pub fn append(&mut self, slot: u32, handle: &FileHandle) -> Result<(), TableError> {
        let mut entry = Vec::with_capacity(20 + handle.bytes.len());
        entry.extend_from_slice(&ENTRY_MAGIC.to_le_bytes());
        entry.extend_from_slice(&slot.to_le_bytes());
        entry.extend_from_slice(&handle.kind.to_le_bytes());
        entry.extend_from_slice(&(handle.bytes.len() as u32).to_le_bytes());
        entry.extend_from_slice(&handle.bytes);
        entry.extend_from_slice(&crc32c(&entry).to_le_bytes());
        self.file
            .write_all_at(&entry, self.end)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| self.err(e))?;
        self.end += entry.len() as u64;
        self.entries.push((slot, handle.clone()));
        Ok(())
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The identity, the entries up to the first that is not whole and
/// valid, and the bytes they fill.
fn parse(b: &[u8]) -> (String, Vec<(u32, FileHandle)>, usize) {
    let Some(identity_len) = u32_at(b, 8).filter(|_| b.starts_with(HEADER_MAGIC)) else {
        return (String::new(), Vec::new(), 0);
    };
    let identity_len = identity_len as usize;
    let crc_at = 12 + identity_len;
    if identity_len > IDENTITY_BYTES_MAX || u32_at(b, crc_at) != Some(crc32c(&b[..crc_at])) {
        return (String::new(), Vec::new(), 0);
    }
    let identity = String::from_utf8_lossy(&b[12..crc_at]).into_owned();
    let mut at = crc_at + 4;
    let mut entries = Vec::new();
    while let Some((slot, handle, len)) = parse_entry(&b[at..]) {
        entries.push((slot, handle));
        at += len;
    }
    (identity, entries, at)
}

fn parse_entry(b: &[u8]) -> Option<(u32, FileHandle, usize)> {
    if u32_at(b, 0)? != ENTRY_MAGIC {
        return None;
    }
    let slot = u32_at(b, 4)?;
    let kind = u32_at(b, 8)? as i32;
    let len = u32_at(b, 12)? as usize;
    if len > HANDLE_BYTES_MAX || u32_at(b, 16 + len)? != crc32c(&b[..16 + len]) {
        return None;
    }
    let bytes = b[16..16 + len].to_vec();
    Some((slot, FileHandle { kind, bytes }, 20 + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(n: u8) -> FileHandle {
        FileHandle {
            kind: 1,
            bytes: vec![n; 8],
        }
    }

    #[test]
    fn entries_survive_a_reopen_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Table::open(dir.path()).unwrap();
        assert!(t.entries.is_empty());
        t.reset("/cache.img").unwrap();
        t.append(0, &handle(1)).unwrap();
        t.append(7, &handle(2)).unwrap();
        drop(t);
        let t = Table::open(dir.path()).unwrap();
        assert_eq!(t.identity, "/cache.img");
        assert_eq!(t.entries, vec![(0, handle(1)), (7, handle(2))]);
        // A torn third entry: half of it written.
        let path = dir.path().join(TABLE_NAME);
        let len = std::fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&ENTRY_MAGIC.to_le_bytes(), len).unwrap();
        f.write_all_at(&9u32.to_le_bytes(), len + 4).unwrap();
        drop(f);
        let mut t = Table::open(dir.path()).unwrap();
        assert_eq!(t.entries.len(), 2);
        // The next append goes over the torn bytes.
        t.append(9, &handle(3)).unwrap();
        drop(t);
        let t = Table::open(dir.path()).unwrap();
        assert_eq!(t.entries.last(), Some(&(9, handle(3))));
        assert_eq!(t.entries.len(), 3);
    }

    #[test]
    fn a_damaged_header_is_an_empty_table() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Table::open(dir.path()).unwrap();
        t.reset("/c").unwrap();
        t.append(1, &handle(1)).unwrap();
        drop(t);
        let path = dir.path().join(TABLE_NAME);
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(b"X", 12).unwrap();
        drop(f);
        let t = Table::open(dir.path()).unwrap();
        assert_eq!(t.identity, "");
        assert!(t.entries.is_empty());
    }
}
