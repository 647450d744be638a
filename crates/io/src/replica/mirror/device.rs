//! The mirror as the cache's device: reads from the local device, writes
//! to both, a flush that waits for both (the peer's beside the local one).

use super::{Kind, Mirror};
use crate::device::{BlockDevice, DeviceError};

impl BlockDevice for Mirror {
    fn len_bytes(&self) -> u64 {
        self.local.len_bytes()
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError> {
        self.local.read_at(buf, offset_bytes)
    }

    fn write_at(&self, data: &[u8], offset_bytes: u64) -> Result<(), DeviceError> {
        self.local.write_at(data, offset_bytes)?;
        self.mirror(&[data], offset_bytes);
        Ok(())
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset_bytes: u64) -> Result<(), DeviceError> {
        self.local.write_vectored_at(bufs, offset_bytes)?;
        self.mirror(bufs, offset_bytes);
        Ok(())
    }

    fn write_many(&self, writes: &[(&[u8], u64)], failed: &mut dyn FnMut(usize, DeviceError)) {
        let mut bad = vec![false; writes.len()];
        self.local.write_many(writes, &mut |i, e| {
            bad[i] = true;
            failed(i, e)
        });
        for ((data, offset), bad) in writes.iter().zip(bad) {
            if !bad {
                self.mirror(&[data], *offset);
            }
        }
    }

    fn write_direct_vectored_at(
        &self,
        bufs: &[&[u8]],
        offset_bytes: u64,
    ) -> Result<bool, DeviceError> {
        let done = self.local.write_direct_vectored_at(bufs, offset_bytes)?;
        if done {
            self.mirror(bufs, offset_bytes);
        }
        Ok(done)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        // The peer's flush runs while the local one does: every write that
        // returned before this call was sent before this frame.
        let asked = self.ask_flush(Kind::Flush);
        let local = self.local.flush();
        if let Some(asked) = asked {
            self.await_flush(asked);
        }
        local
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DeviceError> {
        // Trimmed content is unspecified: the peer may keep the old bytes.
        self.local.trim(offset_bytes, len_bytes)
    }

    fn fill_holes(&self) -> Result<u64, DeviceError> {
        // Holes read as zeros before and after: nothing changes for the peer.
        self.local.fill_holes()
    }

    fn alignment_bytes(&self) -> usize {
        self.local.alignment_bytes()
    }

    fn name(&self) -> String {
        self.local.name()
    }

    fn health(&self) -> Option<String> {
        let s = self.status();
        Some(format!("replication {} to {}", s.state, s.peer))
    }

    fn release(&self) {
        self.local.release()
    }
}
