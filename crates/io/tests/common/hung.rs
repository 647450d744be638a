//! A backing whose writes block until released (a server that stopped
//! answering, or a disk far slower than the cache), for the tests of what
//! still runs while destages hang.

use std::sync::{Condvar, Mutex};

use wcache_io::{BlockDevice, DeviceError, MemDevice};

pub struct HungBacking {
    inner: MemDevice,
    released: Mutex<bool>,
    release: Condvar,
}

impl HungBacking {
    /// A backing of `len_bytes` in memory whose writes block from the start.
    pub fn new(len_bytes: u64) -> HungBacking {
        HungBacking {
            inner: MemDevice::new(len_bytes),
            released: Mutex::new(false),
            release: Condvar::new(),
        }
    }

    /// Lets every blocked write, and every later one, through.
    pub fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.release.notify_all();
    }
}

impl BlockDevice for HungBacking {
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError> {
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, data: &[u8], offset_bytes: u64) -> Result<(), DeviceError> {
        let mut released = self.released.lock().unwrap();
        while !*released {
            released = self.release.wait(released).unwrap();
        }
        self.inner.write_at(data, offset_bytes)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush()
    }
    fn name(&self) -> String {
        "hung backing".into()
    }
}
