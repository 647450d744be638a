//! A small hand-written NBD client for the integration tests. Deliberately
//! independent of `wcache_nbd::proto`'s encoders, except for constants, so
//! that a codec bug cannot hide itself.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wcache_nbd::{Export, Server};

pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const REPLY_MAGIC: u32 = 0x6744_6698;
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const FLAG_FUA: u16 = 1;

pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;

/// A temporary directory for a socket, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("wcache-nbd-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn socket(&self) -> PathBuf {
        self.0.join("nbd.sock")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Start a server with the given exports listening on `path`.
pub fn start_unix(path: &Path, exports: Vec<(&str, Arc<dyn Export>)>) -> Server {
    let mut builder = Server::builder();
    for (name, export) in exports {
        builder = builder.export(name, export);
    }
    let mut server = builder.start().expect("start server");
    let listener = std::os::unix::net::UnixListener::bind(path).expect("bind");
    server.listen_unix(listener).expect("listen");
    server
}

pub struct OptionReply {
    pub option: u32,
    pub reply_type: u32,
    pub data: Vec<u8>,
}

pub struct Reply {
    pub error: u32,
    pub cookie: u64,
}

pub struct Client {
    pub stream: UnixStream,
    pub size_bytes: u64,
    pub transmission_flags: u16,
    pub block_size_min_bytes: u32,
}

pub fn read_u16(stream: &mut impl Read) -> u16 {
    let mut b = [0u8; 2];
    stream.read_exact(&mut b).expect("read u16");
    u16::from_be_bytes(b)
}

pub fn read_u32(stream: &mut impl Read) -> u32 {
    let mut b = [0u8; 4];
    stream.read_exact(&mut b).expect("read u32");
    u32::from_be_bytes(b)
}

pub fn read_u64(stream: &mut impl Read) -> u64 {
    let mut b = [0u8; 8];
    stream.read_exact(&mut b).expect("read u64");
    u64::from_be_bytes(b)
}

/// Connect, read the greeting and send client flags (fixed newstyle, no zeroes).
pub fn greet(path: &Path) -> UnixStream {
    let mut stream = UnixStream::connect(path).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    assert_eq!(read_u64(&mut stream), 0x4e42_444d_4147_4943);
    assert_eq!(read_u64(&mut stream), 0x4948_4156_454f_5054);
    assert_eq!(read_u16(&mut stream), 0b11);
    stream.write_all(&3u32.to_be_bytes()).expect("client flags");
    stream
}

pub fn send_option(stream: &mut UnixStream, option: u32, data: &[u8]) {
    let mut out = Vec::new();
    out.extend_from_slice(&0x4948_4156_454f_5054u64.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    stream.write_all(&out).expect("send option");
}

pub fn read_option_reply(stream: &mut UnixStream) -> OptionReply {
    assert_eq!(read_u64(stream), OPTION_REPLY_MAGIC);
    let option = read_u32(stream);
    let reply_type = read_u32(stream);
    let len = read_u32(stream) as usize;
    let mut data = vec![0u8; len];
    stream.read_exact(&mut data).expect("reply data");
    OptionReply {
        option,
        reply_type,
        data,
    }
}

pub fn go_data(name: &str) -> Vec<u8> {
    let mut data = Vec::new();
    data.extend_from_slice(&(name.len() as u32).to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&1u16.to_be_bytes());
    data.extend_from_slice(&3u16.to_be_bytes()); // NBD_INFO_BLOCK_SIZE
    data
}

/// Send NBD_OPT_GO; `Err(reply type)` if the server refused.
pub fn go(mut stream: UnixStream, name: &str) -> Result<Client, u32> {
    send_option(&mut stream, OPT_GO, &go_data(name));
    let mut client = Client {
        stream,
        size_bytes: 0,
        transmission_flags: 0,
        block_size_min_bytes: 1,
    };
    loop {
        let reply = read_option_reply(&mut client.stream);
        assert_eq!(reply.option, OPT_GO);
        match reply.reply_type {
            REP_INFO => {
                let info_type = u16::from_be_bytes([reply.data[0], reply.data[1]]);
                if info_type == 0 {
                    client.size_bytes =
                        u64::from_be_bytes(reply.data[2..10].try_into().expect("size"));
                    client.transmission_flags =
                        u16::from_be_bytes([reply.data[10], reply.data[11]]);
                } else if info_type == 3 {
                    client.block_size_min_bytes =
                        u32::from_be_bytes(reply.data[2..6].try_into().expect("min"));
                }
            }
            REP_ACK => return Ok(client),
            other => return Err(other),
        }
    }
}

pub fn connect(path: &Path, name: &str) -> Client {
    go(greet(path), name).expect("NBD_OPT_GO accepted")
}

/// A request's header, as `Client::send` sends it before the payload.
pub fn request_bytes(kind: u16, flags: u16, cookie: u64, offset: u64, length: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(28);
    out.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
    out
}

impl Client {
    pub fn send(
        &mut self,
        kind: u16,
        flags: u16,
        cookie: u64,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) {
        let mut out = request_bytes(kind, flags, cookie, offset, length);
        out.extend_from_slice(payload);
        self.stream.write_all(&out).expect("send request");
    }

    pub fn reply_header(&mut self) -> Reply {
        assert_eq!(read_u32(&mut self.stream), REPLY_MAGIC);
        let error = read_u32(&mut self.stream);
        let cookie = read_u64(&mut self.stream);
        Reply { error, cookie }
    }

    /// One request, one reply; returns the error value.
    pub fn call(&mut self, kind: u16, flags: u16, offset: u64, length: u32, payload: &[u8]) -> u32 {
        self.send(kind, flags, 77, offset, length, payload);
        let reply = self.reply_header();
        assert_eq!(reply.cookie, 77);
        reply.error
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> u32 {
        self.call(CMD_WRITE, 0, offset, data.len() as u32, data)
    }

    pub fn read(&mut self, offset: u64, length: u32) -> Result<Vec<u8>, u32> {
        self.send(CMD_READ, 0, 78, offset, length, &[]);
        let reply = self.reply_header();
        assert_eq!(reply.cookie, 78);
        if reply.error != 0 {
            return Err(reply.error);
        }
        let mut data = vec![0u8; length as usize];
        self.stream.read_exact(&mut data).expect("read payload");
        Ok(data)
    }

    /// Sends DISC right behind a request still in flight: its reply must
    /// come before the server closes.
    pub fn disconnect_after_reply(mut self, cookie: u64) {
        self.send(CMD_DISC, 0, 0, 0, 0, &[]);
        let reply = self.reply_header();
        assert_eq!((reply.error, reply.cookie), (0, cookie));
        let mut rest = Vec::new();
        self.stream.read_to_end(&mut rest).expect("read to end");
        assert!(rest.is_empty());
    }

    pub fn disconnect(mut self) {
        self.send(CMD_DISC, 0, 0, 0, 0, &[]);
        let mut rest = Vec::new();
        // The server closes after DISC: reading reaches end of stream.
        self.stream.read_to_end(&mut rest).expect("read to end");
        assert!(rest.is_empty());
    }
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
