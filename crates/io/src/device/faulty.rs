//! `FaultyDevice`: a wrapper that injects EIO and latency, for tests.
//!
//! It exists so that the driver's and engine's error paths (destage retry,
//! failed fills, failed reads) can be exercised on demand against any real
//! device. Faults are switched at run time through a shared `FaultPlan`;
//! a failed write writes nothing. It must never be used outside tests and
//! demonstrations of failure handling.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{BlockDevice, DeviceError};

/// Which operations fail, and how slow every operation is. All fields may be
/// changed while the device is in use.
#[derive(Debug, Default)]
pub struct FaultPlan {
    /// Fail every write while set.
    pub fail_writes: AtomicBool,
    /// Fail every read while set.
    pub fail_reads: AtomicBool,
    /// Fail every flush while set.
    pub fail_flushes: AtomicBool,
    /// Fail this many of the next writes (counts down), in addition.
    pub fail_next_writes: AtomicU64,
    /// Extra latency added before every operation.
    pub latency_us: AtomicU64,
    /// Errors injected so far.
    pub injected_count: AtomicU64,
    /// Writes that reached the inner device.
    pub writes_passed_count: AtomicU64,
}

impl FaultPlan {
    pub fn new() -> Arc<FaultPlan> {
        Arc::new(FaultPlan::default())
    }
    pub fn set_fail_writes(&self, on: bool) {
        self.fail_writes.store(on, Ordering::SeqCst);
    }
    pub fn set_fail_reads(&self, on: bool) {
        self.fail_reads.store(on, Ordering::SeqCst);
    }
    pub fn set_latency(&self, latency: Duration) {
        self.latency_us
            .store(latency.as_micros() as u64, Ordering::SeqCst);
    }
    pub fn injected(&self) -> u64 {
        self.injected_count.load(Ordering::SeqCst)
    }
    pub fn writes_passed(&self) -> u64 {
        self.writes_passed_count.load(Ordering::SeqCst)
    }

    fn take_write_fault(&self) -> bool {
        if self.fail_writes.load(Ordering::SeqCst) {
            return true;
        }
        self.fail_next_writes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

pub struct FaultyDevice {
    inner: Arc<dyn BlockDevice>,
    plan: Arc<FaultPlan>,
}

impl FaultyDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, plan: Arc<FaultPlan>) -> FaultyDevice {
        FaultyDevice { inner, plan }
    }

    fn delay(&self) {
        let us = self.plan.latency_us.load(Ordering::Relaxed);
        if us > 0 {
            std::thread::sleep(Duration::from_micros(us));
        }
    }

    fn injected(&self, op: &'static str) -> DeviceError {
        self.plan.injected_count.fetch_add(1, Ordering::SeqCst);
        DeviceError::Injected {
            device: self.name(),
            op,
        }
    }
}

impl BlockDevice for FaultyDevice {
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError> {
        self.delay();
        if self.plan.fail_reads.load(Ordering::SeqCst) {
            return Err(self.injected("read"));
        }
        self.inner.read_at(buf, offset_bytes)
    }

    fn write_at(&self, data: &[u8], offset_bytes: u64) -> Result<(), DeviceError> {
        self.delay();
        if self.plan.take_write_fault() {
            return Err(self.injected("write"));
        }
        self.plan.writes_passed_count.fetch_add(1, Ordering::SeqCst);
        self.inner.write_at(data, offset_bytes)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.delay();
        if self.plan.fail_flushes.load(Ordering::SeqCst) {
            return Err(self.injected("flush"));
        }
        self.inner.flush()
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DeviceError> {
        self.inner.trim(offset_bytes, len_bytes)
    }

    fn writes_durable(&self) -> bool {
        self.inner.writes_durable()
    }

    fn alignment_bytes(&self) -> usize {
        self.inner.alignment_bytes()
    }

    fn writes_wait_for_medium(&self) -> bool {
        self.inner.writes_wait_for_medium()
    }

    fn name(&self) -> String {
        format!("faulty({})", self.inner.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::mem::MemDevice;

    #[test]
    fn faulty_device_fails_the_next_writes_then_passes() {
        let plan = FaultPlan::new();
        let dev = FaultyDevice::new(Arc::new(MemDevice::new(4096)), plan.clone());
        plan.fail_next_writes.store(2, Ordering::SeqCst);
        assert!(dev.write_at(&[1], 0).is_err());
        assert!(dev.write_at(&[1], 0).is_err());
        dev.write_at(&[1], 0).expect("third write passes");
        assert_eq!(plan.injected(), 2);
        plan.set_fail_reads(true);
        assert!(dev.read_at(&mut [0], 0).is_err());
        plan.set_fail_reads(false);
        let mut b = [0u8];
        dev.read_at(&mut b, 0).expect("read");
        assert_eq!(b[0], 1);
    }
}
