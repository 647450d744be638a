//! How a cache file or block device makes writes durable fastest, measured
//! where it lies: a write with `RWF_DSYNC` on an `O_DIRECT` descriptor
//! against a buffered write and `fdatasync`. The same device answers the
//! two very differently from one machine (or day) to the next, so
//! `wcache serve --cache-sync auto` asks at start and prints the answer.
//! It never changes a byte: it rewrites bytes it has just read.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Instant;

use super::SyncMode;
use crate::device::AlignedBuf;

/// Bytes each timed write rewrites (a batch of 16 pages).
const PROBE_BYTES: usize = 64 * 1024;
/// Timed writes of each kind; the median counts.
const PROBES: usize = 7;

/// What the measurement chose, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct DurabilityChoice {
    pub sync: SyncMode,
    pub direct: bool,
    /// Median microseconds of a durable 64 KiB write each way (None: that
    /// way could not be tried on this device, e.g. no `O_DIRECT` on tmpfs).
    pub dsync_direct_us: Option<f64>,
    pub fdatasync_us: f64,
}

impl DurabilityChoice {
    /// One line for the log: the choice and the two figures.
    pub fn describe(&self) -> String {
        let chosen = if self.direct {
            "dsync + O_DIRECT"
        } else {
            "fdatasync"
        };
        match self.dsync_direct_us {
            Some(d) => format!(
                "{chosen} (a durable 64 KiB write: {d:.0} us with RWF_DSYNC on O_DIRECT, {:.0} us written and fdatasync'd)",
                self.fdatasync_us
            ),
            None => format!(
                "{chosen} ({:.0} us per durable 64 KiB write; O_DIRECT not available here)",
                self.fdatasync_us
            ),
        }
    }
}

/// Times durable rewrites of the device's last 64 KiB both ways and
/// chooses the faster. The caller must hold the device exclusively (its
/// lock): the bytes are read and written back unchanged.
pub fn measure(path: &Path) -> std::io::Result<DurabilityChoice> {
    let buffered = OpenOptions::new().read(true).write(true).open(path)?;
    let len = device_len(&buffered)?;
    if len < PROBE_BYTES as u64 {
        return Err(std::io::Error::other(format!(
            "{}: {len} bytes, too small to measure a {PROBE_BYTES}-byte write",
            path.display()
        )));
    }
    let offset = (len - PROBE_BYTES as u64) / 4096 * 4096;
    let mut buf = AlignedBuf::new();
    let data = buf.get(PROBE_BYTES);
    buffered.read_exact_at(data, offset)?;
    let fdatasync_us = median_us(|| {
        buffered.write_all_at(data, offset)?;
        buffered.sync_data()
    })?;
    let direct = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path);
    let dsync_direct_us = match direct {
        Ok(f) => Some(median_us(|| write_dsync(&f, data, offset))?),
        Err(_) => None,
    };
    let direct_wins = dsync_direct_us.is_some_and(|d| d < fdatasync_us);
    Ok(DurabilityChoice {
        sync: if direct_wins {
            SyncMode::Dsync
        } else {
            SyncMode::Fdatasync
        },
        direct: direct_wins,
        dsync_direct_us,
        fdatasync_us,
    })
}

/// A regular file's length, or a block device's size.
fn device_len(f: &std::fs::File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = f;
    let len = f.seek(SeekFrom::End(0))?;
    f.seek(SeekFrom::Start(0))?;
    Ok(len)
}

/// One `pwritev2(RWF_DSYNC)` of all of `data` (a short write is an error:
/// a probe of 64 KiB at an aligned offset is written whole or not at all).
fn write_dsync(f: &std::fs::File, data: &[u8], offset: u64) -> std::io::Result<()> {
    let iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: one iovec over a live buffer of iov_len bytes; the descriptor
    // is open for the call's duration.
    let n = unsafe {
        libc::pwritev2(
            f.as_raw_fd(),
            &iov,
            1,
            offset as libc::off_t,
            libc::RWF_DSYNC,
        )
    };
    match n {
        n if n < 0 => Err(std::io::Error::last_os_error()),
        n if n as usize != data.len() => Err(std::io::Error::other(format!(
            "short probe write: {n} of {} bytes",
            data.len()
        ))),
        _ => Ok(()),
    }
}

/// The median of `PROBES` timings of `op`, in microseconds.
fn median_us(mut op: impl FnMut() -> std::io::Result<()>) -> std::io::Result<f64> {
    let mut times = Vec::with_capacity(PROBES);
    for _ in 0..PROBES {
        let t = Instant::now();
        op()?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[PROBES / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_chooses_one_way_and_leaves_every_byte_as_it_was() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cache.img");
        let image: Vec<u8> = (0..256 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &image).expect("write");
        let choice = measure(&path).expect("measure");
        assert_eq!(choice.direct, choice.sync == SyncMode::Dsync);
        assert!(choice.fdatasync_us > 0.0);
        if choice.direct {
            assert!(choice
                .dsync_direct_us
                .is_some_and(|d| d < choice.fdatasync_us));
        }
        assert!(choice.describe().contains("64 KiB"));
        assert_eq!(std::fs::read(&path).expect("read"), image);
    }

    #[test]
    fn a_device_smaller_than_a_probe_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tiny.img");
        std::fs::write(&path, [1u8; 4096]).expect("write");
        let e = measure(&path).expect_err("too small");
        assert!(e.to_string().contains("tiny.img"), "{e}");
        assert_eq!(std::fs::read(&path).expect("read"), vec![1u8; 4096]);
    }
}
