//! The mirror as the cache's device: reads from the local device, writes
//! to both (to the peer first, so that the peer's write runs beside the
//! local one), a flush that waits for both (the peer's beside the local one).

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
        self.write_both(&[data], offset_bytes, || {
            self.local.write_at(data, offset_bytes)
        })
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset_bytes: u64) -> Result<(), DeviceError> {
        self.write_both(bufs, offset_bytes, || {
            self.local.write_vectored_at(bufs, offset_bytes)
        })
    }

    fn write_many(&self, writes: &[(&[u8], u64)], failed: &mut dyn FnMut(usize, DeviceError)) {
        let _order = self.order.read().unwrap_or_else(|p| p.into_inner());
        let sent: Vec<bool> = writes
            .iter()
            .map(|(data, offset)| self.send_first(&[data], *offset))
            .collect();
        let mut ok = vec![true; writes.len()];
        self.local.write_many(writes, &mut |i, e| {
            ok[i] = false;
            failed(i, e)
        });
        for (((data, offset), sent), ok) in writes.iter().zip(sent).zip(ok) {
            self.after_local(sent, ok, &[data], *offset);
        }
    }

    /// Where the local device declines a direct write, the mirror writes
    /// it buffered itself (its frames are sent already): always true.
    fn write_direct_vectored_at(
        &self,
        bufs: &[&[u8]],
        offset_bytes: u64,
    ) -> Result<bool, DeviceError> {
        self.write_both(bufs, offset_bytes, || {
            if self.local.write_direct_vectored_at(bufs, offset_bytes)? {
                return Ok(());
            }
            self.local.write_vectored_at(bufs, offset_bytes)
        })?;
        Ok(true)
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
