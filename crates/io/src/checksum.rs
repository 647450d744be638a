//! CRC-32C (Castagnoli, as iSCSI uses it), the checksum of every record,
//! header, batch and journal block on the cache and journal devices: one
//! place, so that every format computes it the same way. `crc-fast`
//! (carry-less multiply, AVX-512 where the CPU has it) measured twice the
//! speed of the `crc32c` crate here, from 4 KiB to 1 MiB (66 against 30-33
//! GB/s, 2026-11-27), the same values.

use crc_fast::{CrcAlgorithm, Digest};

/// The CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// A CRC-32C over several pieces, fed in order.
pub struct Crc32c(Digest);

impl Crc32c {
    pub fn new() -> Crc32c {
        Crc32c(Digest::new(CrcAlgorithm::Crc32Iscsi))
    }

    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    pub fn finish(&self) -> u32 {
        self.0.finalize() as u32
    }
}

impl Default for Crc32c {
    fn default() -> Crc32c {
        Crc32c::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_check_value_whole_and_in_pieces() {
        // CRC-32/ISCSI of "123456789" (the CRC catalogue's check value).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        let mut c = Crc32c::new();
        for piece in [&b"1234"[..], b"", b"56789"] {
            c.update(piece);
        }
        assert_eq!(c.finish(), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }
}
