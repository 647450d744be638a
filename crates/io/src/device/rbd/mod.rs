//! `RbdDevice`: a Ceph RBD image as the backing, through librbd (loaded at
//! run time: `ffi.rs`), so that wcache sits in front of a distributed block
//! store. The spec is qemu's: `rbd:POOL/IMAGE[:KEY=VALUE]...` with `conf`
//! (a ceph.conf; default: librados' search, `$CEPH_CONF` then
//! `/etc/ceph/ceph.conf`), `keyring`, `id` (the client, default `admin`),
//! and any other key set in librados' configuration.
//!
//! Fencing: the device holds the image's exclusive lock from open to drop
//! (`rbd_lock_acquire`, which also stops librbd from handing the lock to
//! another client on request), so a second wcache on the image is refused
//! naming the holder, and a client that broke the lock had the old holder
//! blocklisted by the cluster: its later writes fail, never land.
//!
//! librbd's own cache is off unless the spec sets `rbd_cache`: a write
//! returns once the OSDs committed it (durable: `writes_durable`). Requests
//! wait for the cluster as librados does (an OSD or a monitor restarting
//! under them), bounded by the backing timeout when one is given.

mod ffi;

use std::ffi::CString;
use std::io;
use std::sync::{RwLock, RwLockReadGuard};
use std::time::Duration;

use ffi::{c_string, Api, Handle};

use super::{check_range, BlockDevice, DeviceError};

/// What an `rbd:` spec names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbdSpec {
    pub pool: String,
    pub image: String,
    pub id: Option<String>,
    pub conf: Option<String>,
    /// Every other `KEY=VALUE`, in order (`keyring` among them).
    pub options: Vec<(String, String)>,
}

/// librados' connect waits this long for the monitors when no backing
/// timeout is given (its own default is 5 minutes).
const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Largest piece of one librbd read or write call.
const PIECE_MAX_BYTES: usize = 64 << 20;

impl RbdSpec {
    /// Parses `rbd:POOL/IMAGE[:KEY=VALUE]...`.
    pub fn parse(spec: &str) -> Result<RbdSpec, DeviceError> {
        let bad = |what: String| DeviceError::Open {
            device: spec.to_string(),
            what: format!("{what} (expected rbd:POOL/IMAGE[:conf=PATH][:keyring=PATH][:id=NAME])"),
        };
        let rest = spec
            .strip_prefix("rbd:")
            .ok_or_else(|| bad("not an rbd: spec".into()))?;
        let mut parts = rest.split(':');
        let name = parts.next().unwrap_or_default();
        let (pool, image) = name
            .split_once('/')
            .filter(|(p, i)| !p.is_empty() && !i.is_empty() && !i.contains('/'))
            .ok_or_else(|| bad(format!("{name:?} is not POOL/IMAGE")))?;
        let mut out = RbdSpec {
            pool: pool.to_string(),
            image: image.to_string(),
            id: None,
            conf: None,
            options: Vec::new(),
        };
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                .ok_or_else(|| bad(format!("option {part:?} is not KEY=VALUE")))?;
            match key {
                "id" => out.id = Some(value.to_string()),
                "conf" => out.conf = Some(value.to_string()),
                _ => out.options.push((key.to_string(), value.to_string())),
            }
        }
        Ok(out)
    }

    /// The image, without the options: the backing's identity.
    pub fn identity(&self) -> String {
        format!("rbd:{}/{}", self.pool, self.image)
    }

    fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// An open image with its exclusive lock held.
pub struct RbdDevice {
    api: &'static Api,
    cluster: Handle,
    ioctx: Handle,
    /// Null once released (closed): I/O holds it shared, the close alone.
    image: RwLock<Handle>,
    size_bytes: u64,
    name: String,
    cached: bool,
}

// SAFETY: librados' cluster and io context handles and librbd's image
// handle may be used from many threads at once (their API's contract);
// they are only closed in `drop`, with no call in flight.
unsafe impl Send for RbdDevice {}
// SAFETY: as above.
unsafe impl Sync for RbdDevice {}

/// A negated errno from librados/librbd as an `io::Error`. A timeout is
/// the cluster holding a request it cannot serve (a full pool, a PG with no
/// OSD up) until librados' timeout: it says so.
fn os_error(r: i64) -> io::Error {
    match (-r) as i32 {
        libc::ETIMEDOUT => io::Error::new(
            io::ErrorKind::TimedOut,
            "the cluster did not complete it within the backing timeout (a full pool or quota, or no OSD up for its PG: `ceph health`)",
        ),
        errno => io::Error::from_raw_os_error(errno),
    }
}

impl RbdDevice {
    /// Connects, opens the image and takes its exclusive lock;
    /// `timeout` bounds the connect and each request (None: the connect
    /// waits `CONNECT_TIMEOUT_DEFAULT`, requests wait for the cluster).
    pub fn open(spec: &str, timeout: Option<Duration>) -> Result<RbdDevice, DeviceError> {
        let parsed = RbdSpec::parse(spec)?;
        let name = parsed.identity();
        let fail = |what: String| DeviceError::Open {
            device: name.clone(),
            what,
        };
        let api = ffi::api().map_err(&fail)?;
        let cluster = connect(api, &parsed, timeout).map_err(&fail)?;
        let mut dev = RbdDevice {
            api,
            cluster,
            ioctx: std::ptr::null_mut(),
            image: RwLock::new(std::ptr::null_mut()),
            size_bytes: 0,
            name: name.clone(),
            cached: parsed.option("rbd_cache").is_some_and(|v| v == "true"),
        };
        // From here `dev`'s drop closes whatever was opened.
        dev.open_image(&parsed).map_err(&fail)?;
        let start = std::time::Instant::now();
        dev.lock().map_err(&fail)?;
        if start.elapsed() > Duration::from_secs(1) {
            // librbd breaks a lock whose holder died once its watch expires.
            tracing::warn!(
                "{name}: its exclusive lock took {:.0} s: a holder that died held it",
                start.elapsed().as_secs_f64()
            );
        }
        Ok(dev)
    }

    fn open_image(&mut self, spec: &RbdSpec) -> Result<(), String> {
        let pool = c_string("pool", &spec.pool)?;
        // SAFETY: a connected cluster handle; a valid out pointer.
        let r =
            unsafe { (self.api.rados_ioctx_create)(self.cluster, pool.as_ptr(), &mut self.ioctx) };
        if r < 0 {
            self.ioctx = std::ptr::null_mut();
            return Err(match -r {
                libc::ENOENT => format!("no pool {:?} in the cluster", spec.pool),
                _ => format!("pool {:?}: {}", spec.pool, os_error(r as i64)),
            });
        }
        let name = c_string("image", &spec.image)?;
        let image = self.image.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: an open io context; no snapshot (null): the image itself.
        let r = unsafe { (self.api.rbd_open)(self.ioctx, name.as_ptr(), image, std::ptr::null()) };
        if r < 0 {
            *image = std::ptr::null_mut();
            return Err(match -r {
                libc::ENOENT => format!("no image {:?} in pool {:?}", spec.image, spec.pool),
                _ => format!("open: {}", os_error(r as i64)),
            });
        }
        // SAFETY: an open image; a valid out pointer.
        let r = unsafe { (self.api.rbd_get_size)(*image, &mut self.size_bytes) };
        if r < 0 {
            return Err(format!("size: {}", os_error(r as i64)));
        }
        Ok(())
    }

    /// The open image for one call, or an error once released.
    fn image(&self, op: &'static str) -> Result<RwLockReadGuard<'_, Handle>, DeviceError> {
        let image = self.image.read().unwrap_or_else(|e| e.into_inner());
        if image.is_null() {
            return Err(DeviceError::Io {
                device: self.name.clone(),
                op,
                offset_bytes: 0,
                len_bytes: 0,
                source: io::Error::other("closed: the cache released the image"),
            });
        }
        Ok(image)
    }

    /// Takes the exclusive lock, or names who holds it.
    fn lock(&self) -> Result<(), String> {
        let image = *self.image.read().unwrap_or_else(|e| e.into_inner());
        // SAFETY: an open image.
        let r = unsafe { (self.api.rbd_lock_acquire)(image, ffi::LOCK_MODE_EXCLUSIVE) };
        if r == 0 {
            return Ok(());
        }
        let owners = ffi::lock_owners(self.api, image);
        Err(match -r {
            libc::EINVAL | libc::EOPNOTSUPP => format!(
                "the image has no exclusive-lock feature, so nothing stops a second host writing it: enable it (rbd feature enable {} exclusive-lock)",
                self.name.trim_start_matches("rbd:")
            ),
            _ if !owners.is_empty() => format!(
                "its exclusive lock is held by {}: another wcache (or client) is serving this image ({})",
                owners.join(", "),
                os_error(r as i64)
            ),
            _ => format!("exclusive lock: {}", os_error(r as i64)),
        })
    }

    fn io_error(&self, op: &'static str, offset_bytes: u64, len: usize, r: i64) -> DeviceError {
        DeviceError::Io {
            device: self.name.clone(),
            op,
            offset_bytes,
            len_bytes: len as u64,
            source: os_error(r),
        }
    }
}

/// A connected cluster handle for `spec`.
fn connect(api: &Api, spec: &RbdSpec, timeout: Option<Duration>) -> Result<Handle, String> {
    let mut cluster: Handle = std::ptr::null_mut();
    let id = spec.id.as_deref().map(|i| c_string("id", i)).transpose()?;
    let id_ptr = id.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: a valid out pointer; the id a C string or null (admin).
    let r = unsafe { (api.rados_create)(&mut cluster, id_ptr) };
    if r < 0 {
        return Err(format!("rados_create: {}", os_error(r as i64)));
    }
    let result = configure(api, cluster, spec, timeout).and_then(|()| {
        // SAFETY: a configured cluster handle.
        let r = unsafe { (api.rados_connect)(cluster) };
        match -r {
            0 => Ok(()),
            libc::EACCES | libc::EPERM => Err(format!(
                "the cluster refused client.{}'s credentials (id, keyring): {}",
                spec.id.as_deref().unwrap_or("admin"),
                os_error(r as i64)
            )),
            libc::ETIMEDOUT => {
                Err("no monitor answered (is the cluster up? mon_host in its ceph.conf)".into())
            }
            libc::ENOENT => Err(format!(
                "connect: {} (a keyring missing?)",
                os_error(r as i64)
            )),
            _ => Err(format!("connect: {}", os_error(r as i64))),
        }
    });
    if let Err(e) = result {
        // SAFETY: created above, not used again.
        unsafe { (api.rados_shutdown)(cluster) };
        return Err(e);
    }
    Ok(cluster)
}

fn configure(
    api: &Api,
    cluster: Handle,
    spec: &RbdSpec,
    timeout: Option<Duration>,
) -> Result<(), String> {
    let conf = spec
        .conf
        .as_deref()
        .map(|c| c_string("conf", c))
        .transpose()?;
    let conf_ptr = conf.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: a created cluster handle; a path or null (the default search).
    let r = unsafe { (api.rados_conf_read_file)(cluster, conf_ptr) };
    if r < 0 {
        let which = spec
            .conf
            .as_deref()
            .unwrap_or("$CEPH_CONF or /etc/ceph/ceph.conf");
        return Err(format!(
            "cannot read the Ceph configuration {which}: {}",
            os_error(r as i64)
        ));
    }
    let connect = timeout
        .unwrap_or(CONNECT_TIMEOUT_DEFAULT)
        .as_secs()
        .max(1)
        .to_string();
    let mut settings: Vec<(String, String)> = vec![
        ("client_mount_timeout".into(), connect),
        ("rbd_cache".into(), "false".into()),
    ];
    if let Some(t) = timeout {
        let secs = t.as_secs().max(1).to_string();
        settings.push(("rados_osd_op_timeout".into(), secs.clone()));
        settings.push(("rados_mon_op_timeout".into(), secs));
    }
    settings.extend(spec.options.iter().cloned());
    for (key, value) in settings {
        let (k, v): (CString, CString) = (c_string("option", &key)?, c_string("value", &value)?);
        // SAFETY: a created cluster handle; C strings.
        let r = unsafe { (api.rados_conf_set)(cluster, k.as_ptr(), v.as_ptr()) };
        if r < 0 {
            return Err(format!("option {key}={value}: {}", os_error(r as i64)));
        }
    }
    Ok(())
}

impl Drop for RbdDevice {
    fn drop(&mut self) {
        // SAFETY: each handle opened by `open`, closed once, none in use.
        unsafe {
            let image = *self.image.get_mut().unwrap_or_else(|e| e.into_inner());
            if !image.is_null() {
                (self.api.rbd_close)(image);
            }
            if !self.ioctx.is_null() {
                (self.api.rados_ioctx_destroy)(self.ioctx);
            }
            (self.api.rados_shutdown)(self.cluster);
        }
    }
}

impl BlockDevice for RbdDevice {
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
        let mut at = offset_bytes;
        for piece in buf.chunks_mut(PIECE_MAX_BYTES) {
            let len = piece.len();
            let image = self.image("read")?;
            // SAFETY: an open image; `piece` is writable for `len` bytes.
            let r = unsafe { (self.api.rbd_read)(*image, at, len, piece.as_mut_ptr().cast()) };
            if r < 0 {
                return Err(self.io_error("read", at, len, r as i64));
            }
            // A read inside the image is whole; anything short reads as zeros.
            piece[r as usize..].fill(0);
            at += len as u64;
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
        let mut at = offset_bytes;
        for piece in data.chunks(PIECE_MAX_BYTES) {
            let len = piece.len();
            let image = self.image("write")?;
            // SAFETY: an open image; `piece` is readable for `len` bytes.
            let r = unsafe { (self.api.rbd_write)(*image, at, len, piece.as_ptr().cast()) };
            if r < 0 || r as usize != len {
                // A short write (never seen) is an I/O error; an errno is itself.
                let errno = if r < 0 { r as i64 } else { -(libc::EIO as i64) };
                return Err(self.io_error("write", at, len, errno));
            }
            at += len as u64;
        }
        Ok(())
    }

    /// Every write in flight at once (librbd's asynchronous writes), then
    /// each waited for.
    fn write_many(&self, writes: &[(&[u8], u64)], failed: &mut dyn FnMut(usize, DeviceError)) {
        let image = match self.image("write") {
            Ok(image) => image,
            Err(_) => {
                for (i, (data, at)) in writes.iter().enumerate() {
                    failed(
                        i,
                        self.io_error("write", *at, data.len(), -(libc::EBADF as i64)),
                    );
                }
                return;
            }
        };
        let mut pending: Vec<(usize, Handle)> = Vec::with_capacity(writes.len());
        let mut reported = vec![false; writes.len()];
        for (i, (data, at)) in writes.iter().enumerate() {
            let len = data.len() as u64;
            if let Err(e) = check_range(&|| self.name(), *at, len, self.size_bytes) {
                failed(i, e);
                continue;
            }
            for (k, piece) in data.chunks(PIECE_MAX_BYTES).enumerate() {
                let piece_at = *at + (k * PIECE_MAX_BYTES) as u64;
                match self.aio_write(*image, piece, piece_at) {
                    Ok(c) => pending.push((i, c)),
                    Err(r) => {
                        reported[i] = true;
                        failed(i, self.io_error("write", piece_at, piece.len(), r));
                        break;
                    }
                }
            }
        }
        for (i, c) in pending {
            // SAFETY: a completion of a write in flight, released once.
            let r = unsafe {
                (self.api.rbd_aio_wait_for_complete)(c);
                let r = (self.api.rbd_aio_get_return_value)(c);
                (self.api.rbd_aio_release)(c);
                r
            };
            if r < 0 && !reported[i] {
                reported[i] = true;
                let (data, at) = writes[i];
                failed(i, self.io_error("write", at, data.len(), r as i64));
            }
        }
    }

    fn flush(&self) -> Result<(), DeviceError> {
        let image = self.image("flush")?;
        // SAFETY: an open image.
        let r = unsafe { (self.api.rbd_flush)(*image) };
        if r < 0 {
            return Err(self.io_error("flush", 0, 0, r as i64));
        }
        Ok(())
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DeviceError> {
        check_range(&|| self.name(), offset_bytes, len_bytes, self.size_bytes)?;
        let image = self.image("trim")?;
        // SAFETY: an open image.
        let r = unsafe { (self.api.rbd_discard)(*image, offset_bytes, len_bytes) };
        if r < 0 {
            return Err(self.io_error("trim", offset_bytes, len_bytes as usize, r as i64));
        }
        Ok(())
    }

    /// Closes the image: its exclusive lock is released and its watch
    /// removed, so the next holder need not wait for the watch to expire (a
    /// process ends without dropping its devices). Later calls fail.
    fn release(&self) {
        let mut image = self.image.write().unwrap_or_else(|e| e.into_inner());
        if image.is_null() {
            return;
        }
        // SAFETY: an open image, no call in flight (the lock excludes them).
        let r = unsafe {
            let r = (self.api.rbd_lock_release)(*image);
            (self.api.rbd_close)(*image);
            r
        };
        *image = std::ptr::null_mut();
        match r {
            0 => tracing::info!("{}: closed, its exclusive lock released", self.name),
            _ => tracing::warn!(
                "{}: closed; releasing its lock: {}",
                self.name,
                os_error(r as i64)
            ),
        }
    }

    /// With librbd's cache off a write returns once the OSDs committed it.
    fn writes_durable(&self) -> bool {
        !self.cached
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

impl RbdDevice {
    /// One asynchronous write in flight: its completion, or the errno.
    fn aio_write(&self, image: Handle, data: &[u8], at: u64) -> Result<Handle, i64> {
        let mut c: Handle = std::ptr::null_mut();
        // SAFETY: no callback; a valid out pointer.
        let r = unsafe { (self.api.rbd_aio_create_completion)(std::ptr::null_mut(), None, &mut c) };
        if r < 0 {
            return Err(r as i64);
        }
        // SAFETY: an open image; `data` outlives the wait in `write_many`.
        let r = unsafe { (self.api.rbd_aio_write)(image, at, data.len(), data.as_ptr().cast(), c) };
        if r < 0 {
            // SAFETY: never submitted: released here only.
            unsafe { (self.api.rbd_aio_release)(c) };
            return Err(r as i64);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_are_named() {
        let s =
            RbdSpec::parse("rbd:wcache/img0:conf=/tmp/c.conf:keyring=/tmp/k:id=me:rbd_cache=true")
                .unwrap();
        assert_eq!((s.pool.as_str(), s.image.as_str()), ("wcache", "img0"));
        assert_eq!(s.conf.as_deref(), Some("/tmp/c.conf"));
        assert_eq!(s.id.as_deref(), Some("me"));
        assert_eq!(s.option("keyring"), Some("/tmp/k"));
        assert_eq!(s.option("rbd_cache"), Some("true"));
        assert_eq!(s.identity(), "rbd:wcache/img0");
        for (bad, says) in [
            ("rbd:img0", "is not POOL/IMAGE"),
            ("rbd:/img0", "is not POOL/IMAGE"),
            ("rbd:p/a/b", "is not POOL/IMAGE"),
            ("rbd:p/i:conf", "is not KEY=VALUE"),
            ("rbd:p/i:=x", "is not KEY=VALUE"),
            ("nbd://x/y", "not an rbd: spec"),
        ] {
            let e = RbdSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
    }
}
