//! Integration tests: the server over real Unix (and one TCP) sockets, driven
//! by the hand-written client in `common`.

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use wcache_nbd::{AsyncWrite, Export, ExportError, MemExport, Server, WriteBatch, WriteDone};

const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;
const EIO: u32 = 5;
const MIB: u64 = 1024 * 1024;

/// An export wrapper's methods that go to its `inner` export unchanged.
macro_rules! forward_geometry {
    () => {
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
        fn block_size_min_bytes(&self) -> u32 {
            self.inner.block_size_min_bytes()
        }
    };
}

/// `forward_geometry`'s like for FLUSH, TRIM and WRITE_ZEROES.
macro_rules! forward_flush_trim_zeroes {
    () => {
        fn flush(&self) -> Result<(), ExportError> {
            self.inner.flush()
        }
        fn trim(&self, offset: u64, length_bytes: u64, fua: bool) -> Result<(), ExportError> {
            self.inner.trim(offset, length_bytes, fua)
        }
        fn write_zeroes(
            &self,
            o: u64,
            n: u64,
            fua: bool,
            no_hole: bool,
        ) -> Result<(), ExportError> {
            self.inner.write_zeroes(o, n, fua, no_hole)
        }
    };
}

#[test]
fn write_read_flush_trim_write_zeroes_round_trip() {
    let dir = TempDir::new("roundtrip");
    let export = Arc::new(MemExport::new(4 * MIB, 512));
    let server = start_unix(&dir.socket(), vec![("disk", export.clone())]);
    let mut client = connect(&dir.socket(), "disk");
    assert_eq!(client.size_bytes, 4 * MIB);
    assert_eq!(client.block_size_min_bytes, 512);
    // HAS_FLAGS, SEND_FLUSH, SEND_FUA, SEND_TRIM, SEND_WRITE_ZEROES, CAN_MULTI_CONN.
    assert_eq!(client.transmission_flags, 0b1_0110_1101);

    let data = pattern(64 * 1024, 3);
    assert_eq!(client.write(MIB - 4096, &data), 0);
    assert_eq!(client.read(MIB - 4096, data.len() as u32), Ok(data.clone()));

    assert_eq!(client.call(CMD_WRITE, FLAG_FUA, 0, 512, &[9u8; 512]), 0);
    assert_eq!(export.fua_count(), 1);
    assert_eq!(client.call(CMD_FLUSH, 0, 0, 0, &[]), 0);
    assert_eq!(export.flush_count(), 1);

    assert_eq!(client.call(CMD_TRIM, 0, MIB - 4096, 4096, &[]), 0);
    let back = client.read(MIB - 4096, 8192).expect("read after trim");
    assert!(back[..4096].iter().all(|&b| b == 0));
    assert_eq!(&back[4096..], &data[4096..8192]);

    assert_eq!(client.call(CMD_WRITE_ZEROES, 2, MIB, 4096, &[]), 0); // NO_HOLE
    let back = client.read(MIB, 4096).expect("read after zeroes");
    assert!(back.iter().all(|&b| b == 0));

    client.disconnect();
    server.stop();
}

#[test]
fn per_request_errors_leave_the_connection_usable() {
    let dir = TempDir::new("errors");
    let export = Arc::new(MemExport::new(MIB, 4096).with_multi_conn(false));
    let server = start_unix(&dir.socket(), vec![("disk", export)]);
    let mut client = connect(&dir.socket(), "disk");
    assert_eq!(client.transmission_flags & (1 << 8), 0, "no CAN_MULTI_CONN");

    // Write past the end: ENOSPC, and its payload must be skipped.
    assert_eq!(client.write(MIB, &[1u8; 4096]), ENOSPC);
    assert_eq!(client.write(MIB - 4096, &[1u8; 8192]), ENOSPC);
    // Misaligned to the 4 KiB minimum block size.
    assert_eq!(client.write(512, &[1u8; 4096]), EINVAL);
    assert_eq!(client.read(0, 512), Err(EINVAL));
    assert_eq!(client.call(CMD_TRIM, 0, 0, 100, &[]), EINVAL);
    // Read, trim past the end.
    assert_eq!(client.read(MIB, 4096), Err(EINVAL));
    assert_eq!(client.call(CMD_TRIM, 0, MIB, 4096, &[]), EINVAL);
    // Unknown command and unknown flag.
    assert_eq!(client.call(99, 0, 0, 4096, &[]), EINVAL);
    assert_eq!(client.call(CMD_READ, 1 << 9, 0, 4096, &[]), EINVAL);
    // Still in sync.
    assert_eq!(client.write(0, &[5u8; 4096]), 0);
    assert_eq!(client.read(0, 4096), Ok(vec![5u8; 4096]));
    assert!(server.stats().requests_refused >= 9);
    client.disconnect();
    server.stop();
}

#[test]
fn a_32_mib_request_is_served_and_a_larger_one_refused() {
    let dir = TempDir::new("big");
    let export = Arc::new(MemExport::new(64 * MIB, 512));
    let server = start_unix(&dir.socket(), vec![("disk", export)]);
    let mut client = connect(&dir.socket(), "disk");
    let big = pattern(32 * MIB as usize, 7);
    assert_eq!(client.write(MIB, &big), 0);
    assert_eq!(client.read(MIB, big.len() as u32).as_deref(), Ok(&big[..]));

    // One block more than the maximum payload: refused, payload drained.
    let too_big = vec![0xEEu8; 32 * MIB as usize + 512];
    assert_eq!(client.write(0, &too_big), EINVAL);
    assert_eq!(client.read(0, too_big.len() as u32), Err(EINVAL));
    // The refused write did not land, and the stream is still in sync.
    assert_eq!(client.read(0, 512), Ok(vec![0u8; 512]));
    // Commands without payload may exceed the maximum.
    assert_eq!(client.call(CMD_WRITE_ZEROES, 0, 0, 48 * MIB as u32, &[]), 0);
    client.disconnect();
    server.stop();
}

#[test]
fn pipelined_requests_all_get_their_own_reply() {
    let dir = TempDir::new("pipeline");
    let export = Arc::new(MemExport::new(64 * MIB, 512));
    let server = start_unix(&dir.socket(), vec![("disk", export)]);
    let mut client = connect(&dir.socket(), "disk");
    let block = 256 * 1024usize;
    for i in 0..32u64 {
        client.send(
            CMD_WRITE,
            0,
            1000 + i,
            i * block as u64,
            block as u32,
            &pattern(block, i as u8),
        );
    }
    let mut cookies = HashSet::new();
    for _ in 0..32 {
        let reply = client.reply_header();
        assert_eq!(reply.error, 0);
        assert!(cookies.insert(reply.cookie));
    }
    assert_eq!(cookies, (1000..1032).collect());
    for i in 0..32u64 {
        client.send(CMD_READ, 0, 2000 + i, i * block as u64, block as u32, &[]);
    }
    for _ in 0..32 {
        let reply = client.reply_header();
        assert_eq!(reply.error, 0);
        let i = reply.cookie - 2000;
        let mut data = vec![0u8; block];
        client.stream.read_exact(&mut data).expect("payload");
        assert_eq!(data, pattern(block, i as u8), "cookie {}", reply.cookie);
    }
    client.disconnect();
    server.stop();
}

#[test]
fn a_slow_exports_pipelined_requests_go_to_the_workers_and_overlap() {
    let dir = TempDir::new("slow-pipeline");
    let export = Arc::new(SlowFailing::new(Duration::from_millis(2)));
    let server = start_unix(&dir.socket(), vec![("disk", export.clone())]);
    let mut client = connect(&dir.socket(), "disk");
    const REQUESTS: u64 = 64;
    for i in 0..REQUESTS {
        client.send(CMD_WRITE, 0, i, i * 4096, 4096, &pattern(4096, i as u8));
    }
    for _ in 0..REQUESTS {
        assert_eq!(client.reply_header().error, 0);
    }
    let stats = server.stats();
    // The reader runs the first slow requests itself, then hands over, and
    // runs only a probe now and then (1 in 16).
    assert_eq!(stats.requests_served, REQUESTS);
    assert!(
        stats.requests_inline <= REQUESTS / 4,
        "{} of {REQUESTS} slow requests ran on the reader thread",
        stats.requests_inline
    );
    assert!(
        export.running_max.load(Ordering::SeqCst) >= 2,
        "handed-over requests of one connection run concurrently"
    );
    client.disconnect();
    server.stop();
}

#[test]
fn options_list_unknown_export_structured_reply_and_abort() {
    let dir = TempDir::new("options");
    let a: Arc<dyn Export> = Arc::new(MemExport::new(MIB, 512));
    let b: Arc<dyn Export> = Arc::new(MemExport::new(2 * MIB, 512));
    let server = start_unix(&dir.socket(), vec![("a", a), ("b", b)]);

    let mut stream = greet(&dir.socket());
    send_option(&mut stream, OPT_LIST, &[]);
    let mut names = Vec::new();
    loop {
        let reply = read_option_reply(&mut stream);
        if reply.reply_type == REP_ACK {
            break;
        }
        assert_eq!(reply.reply_type, REP_SERVER);
        names.push(String::from_utf8(reply.data[4..].to_vec()).expect("utf8"));
    }
    assert_eq!(names, ["a", "b"]);
    send_option(&mut stream, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(read_option_reply(&mut stream).reply_type, 0x8000_0001);
    // With two exports and no default, the empty name is unknown.
    send_option(&mut stream, OPT_GO, &go_data(""));
    assert_eq!(read_option_reply(&mut stream).reply_type, 0x8000_0006);
    send_option(&mut stream, OPT_ABORT, &[]);
    assert_eq!(read_option_reply(&mut stream).reply_type, REP_ACK);
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).expect("closed after abort");
    assert!(rest.is_empty());

    assert!(matches!(go(greet(&dir.socket()), "zzz"), Err(0x8000_0006)));
    let client = connect(&dir.socket(), "b");
    assert_eq!(client.size_bytes, 2 * MIB);
    client.disconnect();
    server.stop();
}

#[test]
fn garbage_handshake_disconnects_and_server_keeps_serving() {
    let dir = TempDir::new("garbage");
    let export = Arc::new(MemExport::new(MIB, 512));
    let server = start_unix(&dir.socket(), vec![("disk", export)]);

    let mut stream = greet(&dir.socket());
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n")
        .expect("garbage");
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).expect("server closes");
    assert!(rest.is_empty());

    // Unknown client flags are also fatal.
    let mut stream = std::os::unix::net::UnixStream::connect(dir.socket()).expect("connect");
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).expect("greeting");
    stream
        .write_all(&0xffff_ffffu32.to_be_bytes())
        .expect("flags");
    stream.read_to_end(&mut rest).expect("server closes");
    assert!(rest.is_empty());

    let mut client = connect(&dir.socket(), "disk");
    assert_eq!(client.write(0, &[1u8; 512]), 0);
    client.disconnect();
    assert_eq!(server.stats().handshakes_failed, 2);
    server.stop();
}

#[test]
fn bad_request_magic_disconnects() {
    let dir = TempDir::new("badmagic");
    let server = start_unix(
        &dir.socket(),
        vec![("disk", Arc::new(MemExport::new(MIB, 512)))],
    );
    let mut client = connect(&dir.socket(), "disk");
    client.stream.write_all(&[0xAB; 28]).expect("send");
    let mut rest = Vec::new();
    client.stream.read_to_end(&mut rest).expect("server closes");
    assert!(rest.is_empty());
    server.stop();
}

#[test]
fn client_vanishing_mid_request_does_not_hurt_another_client() {
    let dir = TempDir::new("vanish");
    let export = Arc::new(MemExport::new(64 * MIB, 512));
    let server = start_unix(&dir.socket(), vec![("disk", export)]);

    // Dies halfway through a WRITE payload.
    let mut half = connect(&dir.socket(), "disk");
    let mut request = Vec::new();
    request.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    request.extend_from_slice(&0u16.to_be_bytes());
    request.extend_from_slice(&CMD_WRITE.to_be_bytes());
    request.extend_from_slice(&1u64.to_be_bytes());
    request.extend_from_slice(&0u64.to_be_bytes());
    request.extend_from_slice(&(8 * MIB as u32).to_be_bytes());
    request.extend_from_slice(&vec![1u8; 4 * MIB as usize]);
    half.stream.write_all(&request).expect("half request");
    drop(half);

    // Dies with many large reads in flight, never reading the replies.
    let mut greedy = connect(&dir.socket(), "disk");
    for i in 0..32 {
        greedy.send(CMD_READ, 0, i, 0, 4 * MIB as u32, &[]);
    }
    drop(greedy);

    // Dies in the middle of a request header.
    let mut header_only = connect(&dir.socket(), "disk");
    header_only
        .stream
        .write_all(&REQUEST_MAGIC.to_be_bytes())
        .expect("partial header");
    drop(header_only);

    let mut client = connect(&dir.socket(), "disk");
    let data = pattern(MIB as usize, 9);
    assert_eq!(client.write(0, &data), 0);
    assert_eq!(client.read(0, MIB as u32), Ok(data));
    client.disconnect();

    // Every connection thread ends: nothing leaks.
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.connections_count() > 0 {
        assert!(
            Instant::now() < deadline,
            "connection threads still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.stop();
}

/// Memory export that counts large payloads (64 KiB or more) handed to it
/// at an address off 4 KiB, for WRITEs and for READs' data.
struct AlignCheck {
    inner: MemExport,
    misaligned: AtomicUsize,
    large: AtomicUsize,
}

impl AlignCheck {
    fn note(&self, data: &[u8]) {
        if data.len() >= 64 * 1024 {
            self.large.fetch_add(1, Ordering::SeqCst);
            if !(data.as_ptr() as usize).is_multiple_of(4096) {
                self.misaligned.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

impl Export for AlignCheck {
    forward_geometry!();
    fn multi_conn(&self) -> bool {
        false
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.note(buf);
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError> {
        self.note(data);
        self.inner.write(offset, data, fua)
    }
    forward_flush_trim_zeroes!();
}

#[test]
fn large_payloads_reach_the_export_aligned_on_the_reader_and_on_workers() {
    let dir = TempDir::new("aligned");
    let export = Arc::new(AlignCheck {
        inner: MemExport::new(64 * MIB, 512),
        misaligned: AtomicUsize::new(0),
        large: AtomicUsize::new(0),
    });
    let server = start_unix(&dir.socket(), vec![("disk", export.clone())]);
    let mut client = connect(&dir.socket(), "disk");
    // One at a time (the reader runs them), then pipelined (workers too).
    let sizes = [64 * 1024usize, 1 << 20, 4096, 192 * 1024 + 512];
    let mut sent = Vec::new();
    for (i, &len) in sizes.iter().cycle().take(24).enumerate() {
        let at = i as u64 * 2 * MIB + 512;
        let data = pattern(len, i as u8);
        client.send(CMD_WRITE, 0, i as u64, at, len as u32, &data);
        if i < 8 {
            assert_eq!(client.reply_header().error, 0);
        }
        sent.push((at, data));
    }
    for _ in 8..24 {
        assert_eq!(client.reply_header().error, 0);
    }
    for (at, data) in &sent {
        assert_eq!(client.read(*at, data.len() as u32).as_ref(), Ok(data));
    }
    assert_eq!(
        export.large.load(Ordering::SeqCst),
        2 * 18,
        "18 large writes, read back"
    );
    assert_eq!(
        export.misaligned.load(Ordering::SeqCst),
        0,
        "large payloads 4 KiB aligned"
    );
    client.disconnect();
    server.stop();
}

/// Export whose writes take a while and whose reads fail, to test stop and
/// EIO; it counts how many writes run at once.
struct SlowFailing {
    inner: MemExport,
    started: AtomicBool,
    write_time: Duration,
    running: AtomicUsize,
    running_max: AtomicUsize,
}

impl SlowFailing {
    fn new(write_time: Duration) -> Self {
        SlowFailing {
            inner: MemExport::new(MIB, 512),
            started: AtomicBool::new(false),
            write_time,
            running: AtomicUsize::new(0),
            running_max: AtomicUsize::new(0),
        }
    }
}

impl Export for SlowFailing {
    forward_geometry!();
    fn multi_conn(&self) -> bool {
        false
    }
    fn read(&self, _offset: u64, _buf: &mut [u8]) -> Result<(), ExportError> {
        Err(ExportError::Io(std::io::Error::other("media error")))
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError> {
        self.started.store(true, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.running_max.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(self.write_time);
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> Result<(), ExportError> {
        Err(ExportError::NoSpace)
    }
    fn trim(&self, _offset: u64, _length_bytes: u64, _fua: bool) -> Result<(), ExportError> {
        panic!("trim panics to test that a panicking export yields EIO");
    }
    fn write_zeroes(
        &self,
        offset: u64,
        length_bytes: u64,
        fua: bool,
        no_hole: bool,
    ) -> Result<(), ExportError> {
        self.inner.write_zeroes(offset, length_bytes, fua, no_hole)
    }
}

#[test]
fn export_errors_map_to_nbd_errors() {
    let dir = TempDir::new("eio");
    let export = Arc::new(SlowFailing::new(Duration::from_millis(300)));
    let server = start_unix(&dir.socket(), vec![("disk", export)]);
    let mut client = connect(&dir.socket(), "disk");
    assert_eq!(client.read(0, 4096), Err(EIO));
    assert_eq!(client.call(CMD_FLUSH, 0, 0, 0, &[]), ENOSPC);
    assert_eq!(client.call(CMD_TRIM, 0, 0, 512, &[]), EIO);
    assert_eq!(client.write(0, &[1u8; 512]), 0);
    client.disconnect();
    server.stop();
}

#[test]
fn stop_lets_in_flight_requests_finish() {
    let dir = TempDir::new("stop");
    let export = Arc::new(SlowFailing::new(Duration::from_millis(300)));
    let server = start_unix(&dir.socket(), vec![("disk", export.clone())]);
    let mut client = connect(&dir.socket(), "disk");
    client.send(CMD_WRITE, 0, 5, 0, 512, &[3u8; 512]);
    while !export.started.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let stopper = std::thread::spawn(move || server.stop());
    let reply = client.reply_header();
    assert_eq!((reply.error, reply.cookie), (0, 5));
    let mut rest = Vec::new();
    client
        .stream
        .read_to_end(&mut rest)
        .expect("closed after stop");
    assert!(rest.is_empty());
    stopper.join().expect("stop joined every thread");
    // The listener is closed: nobody accepts any more.
    assert!(std::os::unix::net::UnixStream::connect(dir.socket()).is_err());
}

#[test]
fn serves_over_tcp() {
    let export = Arc::new(MemExport::new(MIB, 512));
    let mut server = Server::builder()
        .export("disk", export)
        .start()
        .expect("start");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    server.listen_tcp(listener).expect("listen");
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).expect("greeting");
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    // Old-fashioned NBD_OPT_EXPORT_NAME with the empty (default) name.
    stream
        .write_all(&1u32.to_be_bytes())
        .expect("flags: fixed newstyle only");
    let mut option = Vec::new();
    option.extend_from_slice(b"IHAVEOPT");
    option.extend_from_slice(&1u32.to_be_bytes());
    option.extend_from_slice(&0u32.to_be_bytes());
    stream.write_all(&option).expect("export name");
    let mut reply = [0u8; 8 + 2 + 124];
    stream
        .read_exact(&mut reply)
        .expect("export reply with zeroes");
    assert_eq!(
        u64::from_be_bytes(reply[..8].try_into().expect("size")),
        MIB
    );
    let mut request = Vec::new();
    request.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    request.extend_from_slice(&[0, 0, 0, 1]);
    request.extend_from_slice(&9u64.to_be_bytes());
    request.extend_from_slice(&0u64.to_be_bytes());
    request.extend_from_slice(&512u32.to_be_bytes());
    request.extend_from_slice(&[4u8; 512]);
    stream.write_all(&request).expect("write");
    let mut simple = [0u8; 16];
    stream.read_exact(&mut simple).expect("reply");
    assert_eq!(&simple[4..8], &[0, 0, 0, 0]);
    assert_eq!(
        u64::from_be_bytes(simple[8..].try_into().expect("cookie")),
        9
    );
    drop(stream);
    server.stop();
}

/// Export that starts writes asynchronously (`writes_async`): it holds
/// those of a batch until the batch is dropped (`write_batch`), then a
/// thread of its own writes them
/// into memory and answers them, several at once (`more`), as the cache's
/// io_uring path does. Writes held for over 2 s are sent all the same and
/// counted (`held_too_long`), so that a server that kept a batch open fails
/// the test instead of hanging it.
struct AsyncMem {
    inner: Arc<MemExport>,
    held: Arc<std::sync::Mutex<Vec<Started>>>,
    to_writer: std::sync::Mutex<std::sync::mpsc::Sender<Vec<Started>>>,
    misaligned: AtomicUsize,
    held_too_long: Arc<AtomicUsize>,
    /// `writes_alone_inline`; the WRITEs run through `write` and through
    /// `write_async`.
    alone_inline: bool,
    sync_writes: AtomicUsize,
    async_writes: AtomicUsize,
    /// `write_async_on_reader_max_bytes`, and the writes started on a worker.
    on_reader_max: AtomicUsize,
    started_on_worker: AtomicUsize,
}

type Started = (u64, Vec<u8>, usize, usize, wcache_nbd::WriteDone);

impl AsyncMem {
    fn new() -> Arc<AsyncMem> {
        AsyncMem::with_alone_inline(false)
    }

    fn with_alone_inline(alone_inline: bool) -> Arc<AsyncMem> {
        let inner = Arc::new(MemExport::new(64 * MIB, 512));
        let (tx, rx) = std::sync::mpsc::channel::<Vec<Started>>();
        let memory = inner.clone();
        let held = Arc::new(std::sync::Mutex::new(Vec::<Started>::new()));
        let held_too_long = Arc::new(AtomicUsize::new(0));
        let (watched, late, watchdog_tx) = (held.clone(), held_too_long.clone(), tx.clone());
        std::thread::spawn(move || loop {
            let before = watched.lock().unwrap().len();
            std::thread::sleep(Duration::from_secs(2));
            let mut h = watched.lock().unwrap();
            if before > 0 && !h.is_empty() {
                late.fetch_add(h.len(), Ordering::SeqCst);
                if watchdog_tx.send(std::mem::take(&mut *h)).is_err() {
                    return;
                }
            }
        });
        std::thread::spawn(move || {
            while let Ok(batch) = rx.recv() {
                // Answer late, all of a batch in a row.
                std::thread::sleep(Duration::from_millis(1));
                let last = batch.len().saturating_sub(1);
                for (k, (offset, buffer, start, len, done)) in batch.into_iter().enumerate() {
                    let result = memory.write(offset, &buffer[start..start + len], false);
                    done(result, buffer, k < last);
                }
            }
        });
        Arc::new(AsyncMem {
            inner,
            held,
            to_writer: std::sync::Mutex::new(tx),
            misaligned: AtomicUsize::new(0),
            held_too_long,
            alone_inline,
            sync_writes: AtomicUsize::new(0),
            async_writes: AtomicUsize::new(0),
            on_reader_max: AtomicUsize::new(64 * 1024),
            started_on_worker: AtomicUsize::new(0),
        })
    }
}

impl Export for AsyncMem {
    forward_geometry!();
    fn multi_conn(&self) -> bool {
        true
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError> {
        self.sync_writes.fetch_add(1, Ordering::SeqCst);
        self.inner.write(offset, data, fua)
    }
    forward_flush_trim_zeroes!();
    fn writes_async(&self) -> bool {
        true
    }
    fn writes_alone_inline(&self) -> bool {
        self.alone_inline
    }
    fn write_async_on_reader_max_bytes(&self) -> usize {
        self.on_reader_max.load(Ordering::SeqCst)
    }
    fn write_async(&self, write: AsyncWrite, done: WriteDone) {
        self.start(write, done);
        self.send_held();
    }
    fn write_batch(&self) -> Box<dyn WriteBatch + '_> {
        Box::new(AsyncMemBatch(self))
    }
}

impl AsyncMem {
    /// A write started: counted, checked, held.
    fn start(&self, write: AsyncWrite, done: WriteDone) {
        let AsyncWrite {
            offset,
            buffer,
            start,
            len,
            ..
        } = write;
        self.async_writes.fetch_add(1, Ordering::SeqCst);
        let name = std::thread::current().name().unwrap_or("").to_string();
        if name.starts_with("nbd-worker") {
            self.started_on_worker.fetch_add(1, Ordering::SeqCst);
        }
        if !(buffer[start..].as_ptr() as usize).is_multiple_of(4096) {
            self.misaligned.fetch_add(1, Ordering::SeqCst);
        }
        self.held
            .lock()
            .unwrap()
            .push((offset, buffer, start, len, done));
    }

    /// Sends every write held to the writer thread.
    fn send_held(&self) {
        let batch = std::mem::take(&mut *self.held.lock().unwrap());
        if !batch.is_empty() {
            let _ = self.to_writer.lock().unwrap().send(batch);
        }
    }
}

/// `AsyncMem`'s batch: its writes held until it is dropped.
struct AsyncMemBatch<'a>(&'a AsyncMem);

impl WriteBatch for AsyncMemBatch<'_> {
    fn write_async(&self, write: AsyncWrite, done: WriteDone) {
        self.0.start(write, done);
    }
}

impl Drop for AsyncMemBatch<'_> {
    fn drop(&mut self) {
        self.0.send_held();
    }
}

#[test]
fn a_lone_write_runs_inline_where_the_export_asks_and_pipelined_ones_async() {
    let dir = TempDir::new("alone");
    let export = AsyncMem::with_alone_inline(true);
    let server = start_unix(&dir.socket(), vec![("disk", export.clone())]);
    let mut client = connect(&dir.socket(), "disk");
    // One at a time: nothing follows any of them, so each runs inline.
    let mut sent = Vec::new();
    for i in 0..6u64 {
        let len = [4096usize, 256 * 1024][i as usize % 2];
        let data = pattern(len, i as u8);
        client.send(CMD_WRITE, 0, i, i * MIB, len as u32, &data);
        assert_eq!(client.reply_header().error, 0);
        sent.push((i * MIB, data));
    }
    assert_eq!(
        export.sync_writes.load(Ordering::SeqCst),
        6,
        "lone writes inline"
    );
    assert_eq!(export.async_writes.load(Ordering::SeqCst), 0);
    // Pipelined in one send: the reader finds the next ones behind each.
    let mut burst = Vec::new();
    for i in 0..16u64 {
        let (at, data) = (8 * MIB + i * 8192, pattern(4096, 100 + i as u8));
        burst.extend_from_slice(&request_bytes(CMD_WRITE, 0, 100 + i, at, 4096));
        burst.extend_from_slice(&data);
        sent.push((at, data));
    }
    client.stream.write_all(&burst).expect("send the burst");
    for _ in 0..16 {
        assert_eq!(client.reply_header().error, 0);
    }
    assert!(
        export.async_writes.load(Ordering::SeqCst) >= 8,
        "writes with others behind them go async: {}",
        export.async_writes.load(Ordering::SeqCst)
    );
    for (at, data) in &sent {
        assert_eq!(client.read(*at, data.len() as u32).as_ref(), Ok(data));
    }
    client.disconnect();
    server.stop();
}

#[test]
fn large_async_writes_start_on_the_reader_up_to_the_exports_size() {
    for (max, on_worker) in [(64 * 1024, true), (usize::MAX, false)] {
        let dir = TempDir::new("reader-max");
        let export = AsyncMem::new();
        export.on_reader_max.store(max, Ordering::SeqCst);
        let server = start_unix(&dir.socket(), vec![("disk", export.clone())]);
        let mut client = connect(&dir.socket(), "disk");
        let mut sent = Vec::new();
        for i in 0..8u64 {
            let data = pattern(256 * 1024, i as u8);
            client.send(CMD_WRITE, 0, i, i * MIB, data.len() as u32, &data);
            sent.push((i * MIB, data));
        }
        for _ in 0..8 {
            assert_eq!(client.reply_header().error, 0);
        }
        for (at, data) in &sent {
            assert_eq!(client.read(*at, data.len() as u32).as_ref(), Ok(data));
        }
        let workers = export.started_on_worker.load(Ordering::SeqCst);
        assert_eq!(
            workers > 0,
            on_worker,
            "256 KiB writes under a {max}-byte limit: {workers} on workers"
        );
        client.disconnect();
        server.stop();
    }
}

#[test]
fn async_writes_are_submitted_before_the_server_waits_and_each_gets_its_reply() {
    let dir = TempDir::new("async");
    let export = AsyncMem::new();
    let server = start_unix(&dir.socket(), vec![("disk", export.clone())]);
    let mut client = connect(&dir.socket(), "disk");
    // A held write never submitted would leave the client waiting: fail instead.
    client
        .stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    // Small WRITEs start on the reader (the first 20 only those), large
    // ones (over 64 KiB) on a worker.
    let sizes = [4096usize, 512, 256 * 1024, 8192, 1 << 20];
    let mut at = 0u64;
    let mut sent = Vec::new();
    for i in 0..40u64 {
        let len = match i {
            0..20 => sizes[i as usize % 2],
            _ => sizes[i as usize % sizes.len()],
        };
        let data = pattern(len, i as u8);
        client.send(CMD_WRITE, 0, 3000 + i, at, len as u32, &data);
        sent.push((at, data));
        at += len as u64;
    }
    let mut cookies = HashSet::new();
    for _ in 0..40 {
        let reply = client.reply_header();
        assert_eq!(reply.error, 0);
        assert!(cookies.insert(reply.cookie), "one reply per request");
    }
    assert_eq!(cookies, (3000..3040).collect());
    // A FLUSH and a read after held writes (inline requests) are answered too.
    client.send(CMD_WRITE, 0, 1, 0, 4096, &pattern(4096, 99));
    client.send(CMD_FLUSH, 0, 2, 0, 0, &[]);
    let replies: HashSet<(u32, u64)> = (0..2)
        .map(|_| client.reply_header())
        .map(|r| (r.error, r.cookie))
        .collect();
    assert_eq!(replies, [(0, 1), (0, 2)].into_iter().collect());
    sent[0].1 = pattern(4096, 99);
    for (at, data) in &sent {
        assert_eq!(client.read(*at, data.len() as u32).as_ref(), Ok(data));
    }
    assert_eq!(
        export.misaligned.load(Ordering::SeqCst),
        0,
        "payloads 4 KiB aligned"
    );
    // A write answered while the connection closes still gets its reply.
    client.send(CMD_WRITE, 0, 7, 0, 4096, &pattern(4096, 7));
    client.disconnect_after_reply(7);
    server.stop();
    assert_eq!(
        export.held_too_long.load(Ordering::SeqCst),
        0,
        "the server submits held writes before it waits"
    );
}
