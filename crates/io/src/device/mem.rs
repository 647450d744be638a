//! `MemDevice`: a device in process memory, for tests, benchmarks and a
//! volatile cache. It exists so that the driver can be tested byte-exactly
//! without a filesystem. Memory is taken per 1 MiB chunk on first write, so a
//! large sparse device is cheap; each chunk has its own lock.
//! It must never claim durability across a process exit: `writes_durable()`
//! is true only in the sense of the contract (nothing volatile *inside* the
//! process to flush) — callers that need crash safety must not use it.

use std::sync::RwLock;

use super::{check_range, BlockDevice, DeviceError};

const CHUNK_BYTES: u64 = 1024 * 1024;

pub struct MemDevice {
    size_bytes: u64,
    chunks: Vec<RwLock<Option<Box<[u8]>>>>,
}

impl MemDevice {
    /// A zero-filled device of `size_bytes`.
    pub fn new(size_bytes: u64) -> MemDevice {
        let count = size_bytes.div_ceil(CHUNK_BYTES) as usize;
        MemDevice {
            size_bytes,
            chunks: (0..count).map(|_| RwLock::new(None)).collect(),
        }
    }

    fn chunk_len_bytes(&self, index: usize) -> usize {
        (self.size_bytes - index as u64 * CHUNK_BYTES).min(CHUNK_BYTES) as usize
    }

    /// (chunk, offset in chunk, offset in buffer, length) pieces of a range.
    fn pieces(
        offset_bytes: u64,
        len_bytes: u64,
    ) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        let end = offset_bytes + len_bytes;
        let mut at = offset_bytes;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let in_chunk = at % CHUNK_BYTES;
            let len = (CHUNK_BYTES - in_chunk).min(end - at);
            let piece = (
                (at / CHUNK_BYTES) as usize,
                in_chunk as usize,
                (at - offset_bytes) as usize,
                len as usize,
            );
            at += len;
            Some(piece)
        })
    }

    fn poisoned(&self) -> DeviceError {
        DeviceError::Io {
            device: self.name(),
            op: "lock",
            offset_bytes: 0,
            len_bytes: 0,
            source: std::io::Error::other("memory device lock poisoned"),
        }
    }
}

impl BlockDevice for MemDevice {
    fn len_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), DeviceError> {
        check_range(
            &|| self.name(),
            offset_bytes,
            buf.len() as u64,
            self.size_bytes,
        )?;
        for (index, in_chunk, in_buf, len) in Self::pieces(offset_bytes, buf.len() as u64) {
            let chunk = self.chunks[index].read().map_err(|_| self.poisoned())?;
            let target = &mut buf[in_buf..in_buf + len];
            match chunk.as_ref() {
                Some(data) => target.copy_from_slice(&data[in_chunk..in_chunk + len]),
                None => target.fill(0),
            }
        }
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset_bytes: u64) -> Result<(), DeviceError> {
        check_range(
            &|| self.name(),
            offset_bytes,
            data.len() as u64,
            self.size_bytes,
        )?;
        for (index, in_chunk, in_data, len) in Self::pieces(offset_bytes, data.len() as u64) {
            let chunk_len = self.chunk_len_bytes(index);
            let mut chunk = self.chunks[index].write().map_err(|_| self.poisoned())?;
            let stored = chunk.get_or_insert_with(|| vec![0u8; chunk_len].into_boxed_slice());
            stored[in_chunk..in_chunk + len].copy_from_slice(&data[in_data..in_data + len]);
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn writes_durable(&self) -> bool {
        true
    }

    fn name(&self) -> String {
        format!("mem({} bytes)", self.size_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_device_round_trip_across_chunks() {
        let dev = MemDevice::new(3 * CHUNK_BYTES + 100);
        let data: Vec<u8> = (0..CHUNK_BYTES as usize + 10)
            .map(|i| (i % 251) as u8)
            .collect();
        dev.write_at(&data, CHUNK_BYTES - 5).expect("write");
        let mut back = vec![0u8; data.len()];
        dev.read_at(&mut back, CHUNK_BYTES - 5).expect("read");
        assert_eq!(back, data);
        let mut tail = [9u8; 100];
        dev.read_at(&mut tail, 3 * CHUNK_BYTES).expect("read tail");
        assert!(tail.iter().all(|&b| b == 0));
        assert!(dev.read_at(&mut [0u8; 2], 3 * CHUNK_BYTES + 99).is_err());
    }
}
