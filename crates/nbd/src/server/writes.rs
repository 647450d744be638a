//! WRITEs an export takes asynchronously (`Export::writes_async`): the
//! payload received into an aligned buffer of its own, the write started
//! on the connection's reader or a worker (or run to completion on the
//! reader when alone on its connection and the export asks for that), and
//! answered from the export's completion, replies sent together.

use super::*;

/// Receives a WRITE's payload into a buffer of its own, at an address
/// aligned to 4 KiB, for `Export::write_async`. `None` when the client
/// vanished mid-payload.
pub(super) fn receive_async_write(
    connection: &Arc<Connection>,
    reader: &mut BufReader<ReadHalf>,
    cookie: u64,
    command: Command,
) -> Option<Job> {
    let Command::Write { length, .. } = command else {
        unreachable!("only WRITEs start asynchronously");
    };
    let len = length as usize;
    let charge_bytes = u64::from(length);
    // admit() may wait for writes to finish: nothing batched may wait with it.
    connection.flush_replies();
    connection.admit(charge_bytes);
    let mut buffer = connection.take_buffer(len + DIRECT_IO_ALIGNMENT_BYTES);
    let start = buffer.as_ptr().align_offset(DIRECT_IO_ALIGNMENT_BYTES);
    if !receive(connection, reader, &mut buffer[start..start + len]) {
        connection.release(charge_bytes);
        return None;
    }
    Some(Job {
        connection: Arc::clone(connection),
        cookie,
        command,
        buffer,
        charge_bytes,
        payload_start: Some(start),
        reply_start: 0,
    })
}

/// Starts a received WRITE with `Export::write_async`; the reply is sent
/// from `done`, on whichever thread finishes the write, which also gives
/// the buffer back and releases the request's charge.
pub(super) fn start_write_async(shared: &Arc<Shared>, job: Job) {
    start_write(shared, job, true)
}

/// Bytes of a next request already received or waiting in the socket.
pub(super) fn more_input(reader: &BufReader<ReadHalf>) -> bool {
    !reader.buffer().is_empty() || reader.get_ref().socket.has_input()
}

/// A received WRITE, started with `Export::write_async` (`run_async`) or
/// run to completion here with `Export::write`; either way answered by
/// the same completion.
pub(super) fn start_write(shared: &Arc<Shared>, job: Job, run_async: bool) {
    let Job {
        connection,
        cookie,
        command,
        buffer,
        charge_bytes,
        payload_start,
        reply_start: _,
    } = job;
    let (
        Command::Write {
            offset,
            length,
            fua,
        },
        Some(start),
    ) = (command, payload_start)
    else {
        unreachable!("only received WRITEs start asynchronously");
    };
    let shared_done = Arc::clone(shared);
    let connection_done = Arc::clone(&connection);
    let done: crate::export::WriteDone = Box::new(move |result, mut buffer, more| {
        let error = result.err().map(|e| e.errno());
        if !connection_done.broken.load(Ordering::SeqCst) {
            reply(
                &shared_done,
                &connection_done,
                cookie,
                command,
                error,
                &mut buffer,
                true,
            );
        }
        connection_done.recycle(buffer);
        send_batched_replies(connection_done, charge_bytes, more);
    });
    let export = &connection.export;
    if run_async {
        export.write_async(offset, buffer, start, length as usize, fua, done);
    } else {
        let result = export.write(offset, &buffer[start..start + length as usize], fua);
        done(result, buffer, false);
    }
}

thread_local! {
    /// Requests answered by `write_async` completions on this thread whose
    /// replies are queued, not yet sent: (connection, charge).
    static UNSENT: std::cell::RefCell<Vec<(Arc<Connection>, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// After a reply was queued on `connection` by a completion: with `more`
/// (another completion follows at once on this thread) it is remembered;
/// otherwise every remembered connection's replies are sent, one `write`
/// per connection, and only then are the requests released (a connection
/// that is closing waits for that, so no reply is left unsent).
pub(super) fn send_batched_replies(connection: Arc<Connection>, charge_bytes: u64, more: bool) {
    let answered = UNSENT.with(|unsent| {
        let mut unsent = unsent.borrow_mut();
        unsent.push((connection, charge_bytes));
        if more {
            return Vec::new();
        }
        std::mem::take(&mut *unsent)
    });
    for (k, (c, _)) in answered.iter().enumerate() {
        if !answered[..k].iter().any(|(d, _)| Arc::ptr_eq(c, d)) {
            c.send_queued();
        }
    }
    for (c, charge_bytes) in answered {
        c.release(charge_bytes);
    }
}
