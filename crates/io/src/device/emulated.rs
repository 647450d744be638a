//! `EmulatedDevice`: a device model of `wcache-models` (HDD, RAID, SSD) run
//! in real time in front of a real data store.
//!
//! It exists so that a single machine can show what a cache does for a slow
//! disk: every operation is submitted to the model at the current real time
//! and the caller sleeps until the model's completion time, while the bytes
//! go to the store (a sparse file or memory). Concurrent callers share one
//! model, so queueing, SATF reordering and seeks between their requests are
//! modelled as the simulator does. The model advances only under its lock
//! and with non-decreasing time. It must never return before the model says
//! the operation is done.

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use wcache_core::time::Nanos;
use wcache_models::{build_device, DevCompletion, DevOp, DevOpKind, DeviceModel, SECTOR_BYTES};

use super::{check_range, BlockDevice, DeviceError};

/// Longest sleep between checks when the model reports no next event.
const IDLE_WAIT_MAX: Duration = Duration::from_millis(50);

struct ModelState {
    model: Box<dyn DeviceModel>,
    /// Time last handed to the model (calls need non-decreasing time).
    last_now: Nanos,
    next_op_id: u64,
    /// Completed operations whose caller has not collected them yet.
    completed: HashSet<u64>,
    done_scratch: Vec<DevCompletion>,
}

pub struct EmulatedDevice {
    store: Arc<dyn BlockDevice>,
    model_name: String,
    origin: Instant,
    state: Mutex<ModelState>,
    changed: Condvar,
}

impl EmulatedDevice {
    /// Wraps `store` with `model`. The model must be at least as large as the store.
    pub fn new(
        model: Box<dyn DeviceModel>,
        store: Arc<dyn BlockDevice>,
    ) -> Result<EmulatedDevice, DeviceError> {
        let model_name = model.name();
        if store.len_bytes() > model.capacity_bytes() {
            return Err(DeviceError::Open {
                device: format!("emulated-{model_name}({})", store.name()),
                what: format!(
                    "store of {} bytes is larger than the {model_name} model ({} bytes)",
                    store.len_bytes(),
                    model.capacity_bytes()
                ),
            });
        }
        Ok(EmulatedDevice {
            store,
            model_name,
            origin: Instant::now(),
            state: Mutex::new(ModelState {
                model,
                last_now: Nanos::ZERO,
                next_op_id: 0,
                completed: HashSet::new(),
                done_scratch: Vec::new(),
            }),
            changed: Condvar::new(),
        })
    }

    /// Builds the model by its simulator registry name (`hdd`, `raid10`, `raid5`, `ssd`, `nvram`).
    pub fn with_model_name(
        name: &str,
        store: Arc<dyn BlockDevice>,
    ) -> Result<EmulatedDevice, DeviceError> {
        let model = build_device(name).map_err(|e| DeviceError::Open {
            device: format!("emulated-{name}({})", store.name()),
            what: e.to_string(),
        })?;
        EmulatedDevice::new(model, store)
    }

    /// The model alone, for a front end that places its own I/O on it
    /// (`timed`): its store takes nothing and reads nothing.
    pub fn model_only(name: &str) -> Result<EmulatedDevice, DeviceError> {
        let model = build_device(name).map_err(|e| DeviceError::Open {
            device: format!("emulated-{name}"),
            what: e.to_string(),
        })?;
        let store = Arc::new(NoStore(model.capacity_bytes()));
        EmulatedDevice::new(model, store)
    }

    /// The model's capacity (where `timed` may place an operation).
    pub fn model_capacity_bytes(&self) -> u64 {
        self.lock().model.capacity_bytes()
    }

    /// Runs `io` as one operation of the model at `offset_bytes`: it is
    /// submitted to the model now, `io` runs, and this returns once the
    /// model says the operation is done (as `read_at` and `write_at` do
    /// around their store's call).
    pub fn timed<R>(
        &self,
        kind: DevOpKind,
        offset_bytes: u64,
        len_bytes: u64,
        io: impl FnOnce() -> R,
    ) -> R {
        let id = self.submit(kind, offset_bytes, len_bytes);
        let result = io();
        self.wait(id);
        result
    }

    fn lock(&self) -> MutexGuard<'_, ModelState> {
        // A panic while holding the lock leaves the model consistent enough
        // for timing purposes; keep going rather than poisoning every caller.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Advance the model to the current real time; wake waiters if anything completed.
    fn advance(&self, st: &mut ModelState) -> Nanos {
        let real = Nanos(self.origin.elapsed().as_nanos() as u64);
        let now = real.max(st.last_now);
        st.last_now = now;
        let mut done = std::mem::take(&mut st.done_scratch);
        st.model.advance(now, &mut done);
        if !done.is_empty() {
            for c in done.drain(..) {
                st.completed.insert(c.id);
            }
            self.changed.notify_all();
        }
        st.done_scratch = done;
        now
    }

    /// Submit an operation to the model at the current time; returns its id.
    fn submit(&self, kind: DevOpKind, offset_bytes: u64, len_bytes: u64) -> u64 {
        let (offset_bytes, len_bytes) = if kind == DevOpKind::Flush {
            (0, 0)
        } else {
            let start = offset_bytes / SECTOR_BYTES * SECTOR_BYTES;
            let end = (offset_bytes + len_bytes.max(1)).next_multiple_of(SECTOR_BYTES);
            (start, end - start)
        };
        let mut st = self.lock();
        let now = self.advance(&mut st);
        let id = st.next_op_id;
        st.next_op_id += 1;
        st.model.submit(
            now,
            DevOp {
                id,
                kind,
                offset_bytes,
                len_bytes,
            },
        );
        self.changed.notify_all();
        id
    }

    /// Sleep until the model has completed `id`. Whichever waiter wakes first
    /// advances the model for everyone.
    fn wait(&self, id: u64) {
        let mut st = self.lock();
        loop {
            let now = self.advance(&mut st);
            if st.completed.remove(&id) {
                return;
            }
            let timeout = match st.model.next_event_time() {
                Some(t) => Duration::from_nanos(t.0.saturating_sub(now.0).max(1)),
                None => IDLE_WAIT_MAX,
            };
            st = self
                .changed
                .wait_timeout(st, timeout.min(IDLE_WAIT_MAX))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// The store of a model alone: `len` bytes that hold nothing.
struct NoStore(u64);

impl BlockDevice for NoStore {
    fn len_bytes(&self) -> u64 {
        self.0
    }
    fn read_at(&self, buf: &mut [u8], _offset_bytes: u64) -> Result<(), DeviceError> {
        buf.fill(0);
        Ok(())
    }
    fn write_at(&self, _data: &[u8], _offset_bytes: u64) -> Result<(), DeviceError> {
        Ok(())
    }
    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn name(&self) -> String {
        "no store".into()
    }
}

impl BlockDevice for EmulatedDevice {
    fn len_bytes(&self) -> u64 {
        self.store.len_bytes()
    }

    fn release(&self) {
        self.store.release();
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError> {
        check_range(
            &|| self.name(),
            offset_bytes,
            buf.len() as u64,
            self.len_bytes(),
        )?;
        let id = self.submit(DevOpKind::Read, offset_bytes, buf.len() as u64);
        let result = self.store.read_at(buf, offset_bytes);
        self.wait(id);
        result
    }

    fn write_at(&self, data: &[u8], offset_bytes: u64) -> Result<(), DeviceError> {
        check_range(
            &|| self.name(),
            offset_bytes,
            data.len() as u64,
            self.len_bytes(),
        )?;
        let id = self.submit(DevOpKind::Write, offset_bytes, data.len() as u64);
        let result = self.store.write_at(data, offset_bytes);
        self.wait(id);
        result
    }

    fn flush(&self) -> Result<(), DeviceError> {
        let id = self.submit(DevOpKind::Flush, 0, 0);
        let result = self.store.flush();
        self.wait(id);
        result
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DeviceError> {
        self.store.trim(offset_bytes, len_bytes)
    }

    fn writes_durable(&self) -> bool {
        // The models have no volatile write cache; durability is the store's.
        self.store.writes_durable()
    }

    fn alignment_bytes(&self) -> usize {
        self.store.alignment_bytes()
    }

    fn writes_wait_for_medium(&self) -> bool {
        self.store.writes_wait_for_medium()
    }

    fn name(&self) -> String {
        format!("emulated-{}({})", self.model_name, self.store.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::mem::MemDevice;

    #[test]
    fn emulated_hdd_round_trips_and_takes_time() {
        let store = Arc::new(MemDevice::new(1 << 20));
        let dev = EmulatedDevice::with_model_name("hdd", store).expect("model");
        let start = Instant::now();
        dev.write_at(&[3u8; 4096], 8192).expect("write");
        dev.flush().expect("flush");
        let mut b = [0u8; 4096];
        dev.read_at(&mut b, 8192).expect("read");
        assert!(b.iter().all(|&x| x == 3));
        // An HDD write costs at least the controller overhead (0.3 ms).
        assert!(start.elapsed() >= Duration::from_micros(300));
    }

    #[test]
    fn unknown_model_name_is_an_open_error() {
        let store = Arc::new(MemDevice::new(4096));
        assert!(matches!(
            EmulatedDevice::with_model_name("tape", store),
            Err(DeviceError::Open { .. })
        ));
    }
}
