//! An emulated slow disk under the backing directory: each file's data
//! I/O (reads, destages, the syncs of its data) is also an operation of a
//! device model of `wcache-models` run in real time (an HDD by default),
//! so that one machine shows what the cache does for a slow disk. A file
//! sits at `FILE_SPREAD` bytes per inode number on the model's surface
//! (files of one directory near each other, as a filesystem allocates
//! them); metadata operations are not timed.

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
