//! The part of librados' and librbd's C API the RBD backing uses, loaded
//! at run time (`dlopen` of `librados.so.2` and `librbd.so.1`), so that
//! wcache builds and runs where Ceph's libraries are not installed and only
//! an `rbd:` backing asks for them, with an error that names the package.
//! Each call returns the library's own result: 0 or a byte count, or a
//! negated errno.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use libloading::Library;

/// `rados_t`, `rados_ioctx_t`, `rbd_image_t`, `rbd_completion_t`: opaque.
pub type Handle = *mut c_void;

/// `RBD_LOCK_MODE_EXCLUSIVE` of `rbd_lock_mode_t`.
pub const LOCK_MODE_EXCLUSIVE: c_int = 0;

/// The functions, with the libraries that hold them kept loaded.
pub struct Api {
    pub rados_create: unsafe extern "C" fn(*mut Handle, *const c_char) -> c_int,
    pub rados_conf_read_file: unsafe extern "C" fn(Handle, *const c_char) -> c_int,
    pub rados_conf_set: unsafe extern "C" fn(Handle, *const c_char, *const c_char) -> c_int,
    pub rados_connect: unsafe extern "C" fn(Handle) -> c_int,
    pub rados_shutdown: unsafe extern "C" fn(Handle),
    pub rados_ioctx_create: unsafe extern "C" fn(Handle, *const c_char, *mut Handle) -> c_int,
    pub rados_ioctx_destroy: unsafe extern "C" fn(Handle),
    pub rbd_open: unsafe extern "C" fn(Handle, *const c_char, *mut Handle, *const c_char) -> c_int,
    pub rbd_close: unsafe extern "C" fn(Handle) -> c_int,
    pub rbd_get_size: unsafe extern "C" fn(Handle, *mut u64) -> c_int,
    pub rbd_read: unsafe extern "C" fn(Handle, u64, usize, *mut c_char) -> isize,
    pub rbd_write: unsafe extern "C" fn(Handle, u64, usize, *const c_char) -> isize,
    pub rbd_discard: unsafe extern "C" fn(Handle, u64, u64) -> c_int,
    pub rbd_flush: unsafe extern "C" fn(Handle) -> c_int,
    pub rbd_aio_create_completion: unsafe extern "C" fn(
        *mut c_void,
        Option<unsafe extern "C" fn(Handle, *mut c_void)>,
        *mut Handle,
    ) -> c_int,
    pub rbd_aio_write: unsafe extern "C" fn(Handle, u64, usize, *const c_char, Handle) -> c_int,
    pub rbd_aio_wait_for_complete: unsafe extern "C" fn(Handle) -> c_int,
    pub rbd_aio_get_return_value: unsafe extern "C" fn(Handle) -> isize,
    pub rbd_aio_release: unsafe extern "C" fn(Handle),
    pub rbd_lock_acquire: unsafe extern "C" fn(Handle, c_int) -> c_int,
    pub rbd_lock_release: unsafe extern "C" fn(Handle) -> c_int,
    pub rbd_lock_get_owners:
        unsafe extern "C" fn(Handle, *mut c_int, *mut *mut c_char, *mut usize) -> c_int,
    pub rbd_lock_get_owners_cleanup: unsafe extern "C" fn(*mut *mut c_char, usize),
    _rados: Library,
    _rbd: Library,
}

const RADOS_LIB: &str = "librados.so.2";
const RBD_LIB: &str = "librbd.so.1";

/// The API, loaded once; the error names the library and the package.
pub fn api() -> Result<&'static Api, String> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Api, String> {
    let open = |name: &str, package: &str| {
        // SAFETY: Ceph's client libraries run no unsound code at load.
        unsafe { Library::new(name) }
            .map_err(|e| format!("cannot load {name} ({e}): install the {package} package"))
    };
    let rados = open(RADOS_LIB, "librados2")?;
    let rbd = open(RBD_LIB, "librbd1")?;
    macro_rules! sym {
        ($lib:expr, $name:literal) => {
            // SAFETY: the type is the C declaration's in librados.h/librbd.h.
            *unsafe { $lib.get($name) }.map_err(|e| {
                format!(
                    "{}: {e}",
                    String::from_utf8_lossy(&$name[..$name.len() - 1])
                )
            })?
        };
    }
    Ok(Api {
        rados_create: sym!(rados, b"rados_create\0"),
        rados_conf_read_file: sym!(rados, b"rados_conf_read_file\0"),
        rados_conf_set: sym!(rados, b"rados_conf_set\0"),
        rados_connect: sym!(rados, b"rados_connect\0"),
        rados_shutdown: sym!(rados, b"rados_shutdown\0"),
        rados_ioctx_create: sym!(rados, b"rados_ioctx_create\0"),
        rados_ioctx_destroy: sym!(rados, b"rados_ioctx_destroy\0"),
        rbd_open: sym!(rbd, b"rbd_open\0"),
        rbd_close: sym!(rbd, b"rbd_close\0"),
        rbd_get_size: sym!(rbd, b"rbd_get_size\0"),
        rbd_read: sym!(rbd, b"rbd_read\0"),
        rbd_write: sym!(rbd, b"rbd_write\0"),
        rbd_discard: sym!(rbd, b"rbd_discard\0"),
        rbd_flush: sym!(rbd, b"rbd_flush\0"),
        rbd_aio_create_completion: sym!(rbd, b"rbd_aio_create_completion\0"),
        rbd_aio_write: sym!(rbd, b"rbd_aio_write\0"),
        rbd_aio_wait_for_complete: sym!(rbd, b"rbd_aio_wait_for_complete\0"),
        rbd_aio_get_return_value: sym!(rbd, b"rbd_aio_get_return_value\0"),
        rbd_aio_release: sym!(rbd, b"rbd_aio_release\0"),
        rbd_lock_acquire: sym!(rbd, b"rbd_lock_acquire\0"),
        rbd_lock_release: sym!(rbd, b"rbd_lock_release\0"),
        rbd_lock_get_owners: sym!(rbd, b"rbd_lock_get_owners\0"),
        rbd_lock_get_owners_cleanup: sym!(rbd, b"rbd_lock_get_owners_cleanup\0"),
        _rados: rados,
        _rbd: rbd,
    })
}

/// A C string for the API; text with a NUL byte is refused by name.
pub fn c_string(what: &str, text: &str) -> Result<CString, String> {
    CString::new(text).map_err(|_| format!("{what} {text:?} holds a NUL byte"))
}

/// The owners of an image's exclusive lock (client addresses).
pub fn lock_owners(api: &Api, image: Handle) -> Vec<String> {
    const MAX: usize = 8;
    let mut owners: [*mut c_char; MAX] = [std::ptr::null_mut(); MAX];
    let (mut mode, mut n) = (0 as c_int, MAX);
    // SAFETY: an open image; room for `n` owner strings.
    let r = unsafe { (api.rbd_lock_get_owners)(image, &mut mode, owners.as_mut_ptr(), &mut n) };
    if r < 0 {
        return Vec::new();
    }
    let names = owners[..n.min(MAX)]
        .iter()
        .filter(|p| !p.is_null())
        // SAFETY: NUL-terminated strings the library wrote.
        .map(|p| unsafe { CStr::from_ptr(*p) }.to_string_lossy().into_owned())
        .collect();
    // SAFETY: the strings the call above allocated.
    unsafe { (api.rbd_lock_get_owners_cleanup)(owners.as_mut_ptr(), n.min(MAX)) };
    names
}
