//! The flush gate: group commit for device flushes. One flush covers every
//! write finished before it started, so many threads that each need their
//! write durable share one `fdatasync` instead of queueing one each. It
//! must never report a flush as done that started before the caller asked.

use std::sync::{Arc, Condvar, Mutex};

use crate::device::{BlockDevice, DeviceError};

/// A device the driver writes, with its flush gate.
pub(super) struct Device {
    pub(super) dev: Arc<dyn BlockDevice>,
    pub(super) gate: FlushGate,
}

impl Device {
    pub(super) fn new(dev: Arc<dyn BlockDevice>) -> Device {
        Device {
            dev,
            gate: FlushGate::default(),
        }
    }
}

/// Group commit: one device flush covers every write finished before it started.
#[derive(Default)]
pub(super) struct FlushGate {
    state: Mutex<GateState>,
    done: Condvar,
}

#[derive(Default)]
struct GateState {
    started: u64,
    finished: u64,
    last_ok: u64,
    running: bool,
    last_error: String,
}

impl FlushGate {
    /// Returns once a flush that started after this call has succeeded.
    /// `true` in the Ok case means this thread ran the flush itself.
    pub(super) fn flush(&self, dev: &dyn BlockDevice) -> Result<bool, DeviceError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let target = st.started + 1;
        let mut ran = false;
        loop {
            if st.last_ok >= target {
                return Ok(ran);
            }
            if st.finished >= target {
                return Err(DeviceError::Io {
                    device: dev.name(),
                    op: "flush",
                    offset_bytes: 0,
                    len_bytes: 0,
                    source: std::io::Error::other(st.last_error.clone()),
                });
            }
            if !st.running {
                st.running = true;
                st.started += 1;
                let generation = st.started;
                drop(st);
                let result = dev.flush();
                ran = true;
                st = self.state.lock().unwrap_or_else(|p| p.into_inner());
                st.running = false;
                st.finished = generation;
                match result {
                    Ok(()) => st.last_ok = generation,
                    Err(e) => st.last_error = e.to_string(),
                }
                self.done.notify_all();
                continue;
            }
            st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}
