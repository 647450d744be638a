//! An emulated slow disk under the backing directory: each file's data
//! I/O (reads, destages, the syncs of its data) is also an operation of a
//! device model of `wcache-models` run in real time (an HDD by default),
//! so that one machine shows what the cache does for a slow disk. A file
//! sits at `FILE_SPREAD` bytes per inode number on the model's surface
//! (files of one directory near each other, as a filesystem allocates
//! them); metadata operations are not timed. A directory may be given a
//! disk of its own (`Disks`), as a database's log on its own HDD.

use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use crate::dirs::Dirs;
use std::sync::Arc;

use wcache_io::{DeviceError, EmulatedDevice};
use wcache_models::{DevOpKind, SECTOR_BYTES};

/// Bytes of the model's surface between consecutive inode numbers.
pub const FILE_SPREAD: u64 = 1 << 30;

pub struct Disk {
    model: EmulatedDevice,
    capacity: u64,
    name: String,
}

impl Disk {
    /// The model by its registry name (`hdd`, `raid5`, `ssd`, ...).
    pub fn new(name: &str) -> Result<Disk, DeviceError> {
        let model = EmulatedDevice::model_only(name)?;
        let capacity = model.model_capacity_bytes();
        Ok(Disk {
            model,
            capacity,
            name: format!("emulated {name}"),
        })
    }

    /// Where `[at, at + len)` of inode `ino` lies on the model.
    fn place(&self, ino: u64, at: u64, len: u64) -> u64 {
        let len = len.next_multiple_of(SECTOR_BYTES).min(self.capacity);
        let pos = ino.wrapping_mul(FILE_SPREAD).wrapping_add(at) % self.capacity;
        (pos / SECTOR_BYTES * SECTOR_BYTES).min(self.capacity - len)
    }

    pub fn timed<R>(
        &self,
        kind: DevOpKind,
        ino: u64,
        at: u64,
        len: u64,
        io: impl FnOnce() -> R,
    ) -> R {
        let (at, len) = match kind {
            DevOpKind::Flush => (0, 0),
            _ => (self.place(ino, at, len), len),
        };
        self.model.timed(kind, at, len, io)
    }

    pub fn name(&self) -> String {
        self.name.clone()
    }
}

/// The emulated disks of a mount: one under the backing directory, and
/// one more of the same model for each directory given a disk of its own
/// (the paper ran PostgreSQL with its log and its tables on two HDDs).
pub struct Disks {
    main: Arc<Disk>,
    apart: Dirs<Arc<Disk>>,
}

impl Disks {
    /// `model` under `backing_dir` (absolute), and a disk of its own for
    /// each of `apart` (`Dirs::new`).
    pub fn new(model: &str, backing_dir: &Path, apart: &[PathBuf]) -> Result<Disks, String> {
        let main = Arc::new(Disk::new(model).map_err(|e| e.to_string())?);
        let apart = Dirs::new(backing_dir, apart, |rel| {
            let mut disk = Disk::new(model).map_err(|e| e.to_string())?;
            disk.name = format!("emulated {model} of its own under {}", rel.display());
            Ok(Arc::new(disk))
        })?;
        Ok(Disks { main, apart })
    }

    /// The disk of the file open at `fd`: its deepest directory with a
    /// disk of its own, else the backing directory's. A file keeps the
    /// disk it was opened on (a rename moves no data on a real disk either).
    pub fn of(&self, fd: RawFd) -> Arc<Disk> {
        Arc::clone(self.apart.of(fd).unwrap_or(&self.main))
    }

    pub fn name(&self) -> String {
        let mut name = self.main.name();
        for (dir, _) in self.apart.iter() {
            name.push_str(&format!(", {} on a disk of its own", dir.display()));
        }
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placement_lies_on_the_model() {
        let disk = Disk::new("hdd").unwrap();
        for ino in [0, 1, 2, 12345, u64::MAX] {
            for (at, len) in [(0, 1), (4096, 1 << 20), (u64::MAX / 2, 8192)] {
                let p = disk.place(ino, at, len);
                assert!(
                    p.is_multiple_of(SECTOR_BYTES)
                        && p + len.next_multiple_of(SECTOR_BYTES) <= disk.capacity
                );
            }
        }
    }

    /// Which directory a file lies under is `Dirs`'s (`dirs.rs`); here,
    /// that each directory of its own has its own disk.
    #[test]
    fn a_file_under_a_directory_of_its_own_is_on_that_disk() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pg/pg_wal")).unwrap();
        let disks = Disks::new("hdd", dir.path(), &[PathBuf::from("pg/pg_wal")]).unwrap();
        let log = dir.path().join("pg/pg_wal/000001");
        let table = dir.path().join("pg/table");
        std::fs::write(&log, b"x").unwrap();
        std::fs::write(&table, b"x").unwrap();
        use std::os::fd::AsRawFd;
        let of = |p: &Path| Arc::as_ptr(&disks.of(std::fs::File::open(p).unwrap().as_raw_fd()));
        assert_eq!(of(&log), Arc::as_ptr(&disks.apart.iter().next().unwrap().1));
        assert_eq!(of(&table), Arc::as_ptr(&disks.main));
        assert!(Disks::new("hdd", dir.path(), &[PathBuf::from("../out")]).is_err());
    }

    #[test]
    fn a_random_read_takes_a_disk_s_time() {
        let disk = Disk::new("hdd").unwrap();
        let start = std::time::Instant::now();
        for i in 0..5 {
            disk.timed(DevOpKind::Read, i * 7, i * 1_000_000_007, 4096, || ());
        }
        // Five random 4 KiB reads on a 10K RPM disk: milliseconds each, not microseconds.
        assert!(
            start.elapsed() > std::time::Duration::from_millis(5),
            "{:?}",
            start.elapsed()
        );
    }
}
