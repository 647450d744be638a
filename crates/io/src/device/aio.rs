//! Several writes of one thread in flight at once, through Linux native AIO
//! (`io_submit`/`io_getevents`): a page's data and its record block are
//! sent together and waited for together, with no thread handoff. With
//! O_DIRECT the writes run in parallel at the device (with `RWF_DSYNC`,
//! each is durable when it completes); without it the kernel runs them one
//! after another inside `io_submit`, which is still correct. This module
//! must never report a write done before its completion event said so.

use std::cell::RefCell;
use std::io;

/// `struct iocb` of `<linux/aio_abi.h>` (little-endian field order).
#[repr(C)]
#[derive(Default)]
struct Iocb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: i32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

/// `struct io_event`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const _: () = assert!(std::mem::size_of::<Iocb>() == 64);
const _: () = assert!(std::mem::size_of::<IoEvent>() == 32);
#[cfg(not(target_endian = "little"))]
compile_error!("the iocb layout here is the little-endian one");

const IOCB_CMD_PWRITE: u16 = 1;

/// Writes one thread may have in flight at once (more are sent in turns).
pub const AIO_WRITES_MAX: usize = 64;

/// One thread's AIO context, created on first use and destroyed with the thread.
struct Context {
    id: libc::c_ulong,
}

impl Context {
    fn new() -> io::Result<Context> {
        let mut id: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context id into `id`.
        let rc =
            unsafe { libc::syscall(libc::SYS_io_setup, AIO_WRITES_MAX as libc::c_long, &mut id) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Context { id })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: destroys the context this struct created; nothing is in
        // flight (every submission is waited for before `write_all` returns).
        unsafe { libc::syscall(libc::SYS_io_destroy, self.id) };
    }
}

thread_local! {
    /// `None` once io_setup failed on this thread: the caller writes one by one.
    static CONTEXT: RefCell<Option<Option<Context>>> = const { RefCell::new(None) };
}

/// Writes every `(data, offset_bytes)` to `fd` with `rw_flags` (e.g.
/// `RWF_DSYNC`), all in flight together (up to `AIO_WRITES_MAX` at a
/// time), and returns each write's outcome in `results` (`Ok(n)`: `n`
/// bytes written, maybe short). `Err` from the function itself: AIO is not
/// available on this thread, nothing was written; the caller writes one by
/// one instead. Buffers must stay alive for the call (they do: borrowed).
pub fn write_all(
    fd: libc::c_int,
    writes: &[(&[u8], u64)],
    rw_flags: libc::c_int,
    results: &mut Vec<io::Result<usize>>,
) -> io::Result<()> {
    CONTEXT.with(|c| {
        let mut c = c.borrow_mut();
        let ctx = c.get_or_insert_with(|| Context::new().ok());
        let Some(ctx) = ctx.as_ref() else {
            return Err(io::Error::from_raw_os_error(libc::ENOSYS));
        };
        results.clear();
        for chunk in writes.chunks(AIO_WRITES_MAX) {
            submit_and_wait(ctx, fd, chunk, rw_flags, results)?;
        }
        Ok(())
    })
}

/// One submission of at most `AIO_WRITES_MAX` writes, waited for whole.
fn submit_and_wait(
    ctx: &Context,
    fd: libc::c_int,
    writes: &[(&[u8], u64)],
    rw_flags: libc::c_int,
    results: &mut Vec<io::Result<usize>>,
) -> io::Result<()> {
    let base = results.len();
    let mut iocbs: [Iocb; AIO_WRITES_MAX] = std::array::from_fn(|_| Iocb::default());
    let mut ptrs: [*mut Iocb; AIO_WRITES_MAX] = [std::ptr::null_mut(); AIO_WRITES_MAX];
    for (i, (data, offset)) in writes.iter().enumerate() {
        let offset =
            i64::try_from(*offset).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        iocbs[i] = Iocb {
            aio_data: i as u64,
            aio_rw_flags: rw_flags,
            aio_lio_opcode: IOCB_CMD_PWRITE,
            aio_fildes: fd as u32,
            aio_buf: data.as_ptr() as u64,
            aio_nbytes: data.len() as u64,
            aio_offset: offset,
            ..Iocb::default()
        };
    }
    for (i, p) in ptrs.iter_mut().enumerate().take(writes.len()) {
        *p = &mut iocbs[i];
    }
    results.extend((0..writes.len()).map(|_| Ok(0)));
    let mut submitted = 0;
    while submitted < writes.len() {
        // SAFETY: the iocbs and the buffers they name live until every
        // submitted one completed (waited for below before returning).
        let n = unsafe {
            libc::syscall(
                libc::SYS_io_submit,
                ctx.id,
                (writes.len() - submitted) as libc::c_long,
                ptrs[submitted..].as_mut_ptr(),
            )
        };
        if n <= 0 {
            let e = io::Error::last_os_error();
            if n < 0 && e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // Not submitted: those fail; the submitted ones are waited for.
            for r in &mut results[base + submitted..base + writes.len()] {
                *r = Err(io::Error::new(e.kind(), e.to_string()));
            }
            if submitted == 0 {
                results.truncate(base);
                return Err(e);
            }
            break;
        }
        submitted += n as usize;
    }
    wait_for(ctx, submitted, &mut results[base..])
}

/// Waits for `count` completion events and stores their outcomes.
fn wait_for(ctx: &Context, count: usize, results: &mut [io::Result<usize>]) -> io::Result<()> {
    let mut events = [IoEvent::default(); AIO_WRITES_MAX];
    let mut done = 0;
    while done < count {
        // SAFETY: `events` has room for `count - done` events; no timeout.
        let n = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                ctx.id,
                1 as libc::c_long,
                (count - done) as libc::c_long,
                events.as_mut_ptr(),
                std::ptr::null_mut::<libc::timespec>(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The writes are still in flight and their buffers borrowed:
            // there is no safe way back. A context that cannot be waited on
            // is a broken kernel interface.
            panic!("io_getevents failed with writes in flight: {e}");
        }
        for ev in &events[..n as usize] {
            results[ev.data as usize] = if ev.res < 0 {
                Err(io::Error::from_raw_os_error(-ev.res as i32))
            } else {
                Ok(ev.res as usize)
            };
        }
        done += n as usize;
    }
    Ok(())
}
