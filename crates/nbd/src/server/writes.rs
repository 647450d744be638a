//! WRITEs an export takes asynchronously (`Export::writes_async`): the
//! payload received into an aligned buffer of its own, the write started
//! on the connection's reader (in the reader's batch, `ReaderBatch`) or a
//! worker (or run to completion on the reader when alone on its connection
//! and the export asks for that), and answered from the export's
//! completion, replies sent together.

use super::*;
use crate::export::{AsyncWrite, WriteBatch};

/// The WRITEs a connection's reader started since it last waited, in one
/// batch of the export's (`Export::write_batch`), opened at the first:
/// their device writes may be held until the batch ends, which `flush`
/// and `end` do before anything that may wait, and the reader's return at
/// the latest (the batch is dropped with it): none is left unsent.
pub(super) struct ReaderBatch<'a> {
    export: &'a dyn Export,
    open: Option<Box<dyn WriteBatch + 'a>>,
}

impl<'a> ReaderBatch<'a> {
    pub(super) fn new(export: &'a dyn Export) -> ReaderBatch<'a> {
        ReaderBatch { export, open: None }
    }

    /// The open batch, opened if none is.
    pub(super) fn get(&mut self) -> &dyn WriteBatch {
        let export = self.export;
        &**self.open.get_or_insert_with(|| export.write_batch())
    }

    /// Ends the batch: the writes it held go out.
    pub(super) fn end(&mut self) {
        self.open = None;
    }

    /// Ends the batch, then sends the replies batched so far: called
    /// before anything that may wait.
    pub(super) fn flush(&mut self, connection: &Connection) {
        self.end();
        connection.send_queued();
    }
}

/// How a received WRITE is started.
pub(super) enum Start<'b> {
    /// Run to completion here with `Export::write`.
    Inline,
    /// `Export::write_async` in the reader's batch.
    Batched(&'b dyn WriteBatch),
    /// `Export::write_async` alone (on a worker).
    Alone,
}

/// Receives a WRITE's payload into a buffer of its own, at an address
/// aligned to 4 KiB, for `Export::write_async`. `None` when the client
/// vanished mid-payload.
pub(super) fn receive_async_write(
    connection: &Arc<Connection>,
    batch: &mut ReaderBatch<'_>,
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
    batch.flush(connection);
    connection.admit(charge_bytes);
    let mut buffer = connection.take_buffer(len + DIRECT_IO_ALIGNMENT_BYTES);
    let start = buffer.as_ptr().align_offset(DIRECT_IO_ALIGNMENT_BYTES);
    if !receive(connection, batch, reader, &mut buffer[start..start + len]) {
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

/// Bytes of a next request already received or waiting in the socket.
pub(super) fn more_input(reader: &BufReader<ReadHalf>) -> bool {
    !reader.buffer().is_empty() || reader.get_ref().socket.has_input()
}

/// A received WRITE, started with `Export::write_async` (in the reader's
/// batch, or alone) or run to completion here with `Export::write`; either
/// way answered by the same completion: the reply is sent from `done`, on
/// whichever thread finishes the write, which also gives the buffer back
/// and releases the request's charge.
pub(super) fn start_write(shared: &Arc<Shared>, job: Job, how: Start<'_>) {
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
    let len = length as usize;
    let write = |buffer| AsyncWrite {
        offset,
        buffer,
        start,
        len,
        fua,
    };
    match how {
        Start::Batched(batch) => batch.write_async(write(buffer), done),
        Start::Alone => export.write_async(write(buffer), done),
        Start::Inline => {
            let result = export.write(offset, &buffer[start..start + len], fua);
            done(result, buffer, false);
        }
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
