//! `NbdDevice`: a minimal NBD client, so a remote export (nbdkit, qemu-nbd,
//! another wcache) can be the backing store — networked storage behind the cache.
//!
//! Fixed newstyle handshake with `NBD_OPT_GO`, then READ, WRITE, FLUSH, TRIM
//! with simple replies, over TCP or a Unix socket. Each connection carries
//! one request at a time under its lock; several connections are opened when
//! the server advertises `CAN_MULTI_CONN` (flush on one covers writes on all),
//! otherwise exactly one, so `flush()` always covers every earlier write.
//! It must never report a write done before the server replied to it, and
//! never treat a write as durable before a FLUSH reply unless the server
//! offers no flush (it then has no volatile cache to flush).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::{check_range, BlockDevice, DeviceError};

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const REPLY_MAGIC_OPT: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const FLAG_FIXED_NEWSTYLE: u16 = 1;
const FLAG_NO_ZEROES: u16 = 2;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const REP_FLAG_ERROR: u32 = 1 << 31;
const INFO_EXPORT: u16 = 0;
const TFLAG_SEND_FLUSH: u16 = 1 << 2;
const TFLAG_SEND_TRIM: u16 = 1 << 5;
const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;
const CMD_TRIM: u16 = 4;
/// Option reply payloads we accept (the server may send long descriptions).
const OPTION_REPLY_MAX_BYTES: u32 = 64 * 1024;
/// Largest READ/WRITE sent in one request (the spec's safe maximum).
const REQUEST_MAX_BYTES: usize = 32 * 1024 * 1024;

/// Where the export is: parsed from an NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NbdAddress {
    Tcp { host_port: String, export: String },
    Unix { socket: String, export: String },
}

impl NbdAddress {
    /// Parses `nbd://host[:port][/export]` and `nbd+unix:///[export]?socket=PATH`.
    pub fn parse(uri: &str) -> Result<NbdAddress, DeviceError> {
        let bad = |what: &str| DeviceError::Open {
            device: uri.to_string(),
            what: format!(
                "{what} (expected nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH)"
            ),
        };
        if let Some(rest) = uri.strip_prefix("nbd+unix://") {
            let (path, query) = rest.split_once('?').ok_or_else(|| bad("no ?socket="))?;
            let socket = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("socket="))
                .ok_or_else(|| bad("no socket= in the query"))?;
            let export = path.strip_prefix('/').unwrap_or(path).to_string();
            return Ok(NbdAddress::Unix {
                socket: socket.to_string(),
                export,
            });
        }
        if let Some(rest) = uri.strip_prefix("nbd://") {
            let (host, export) = rest.split_once('/').unwrap_or((rest, ""));
            if host.is_empty() {
                return Err(bad("no host"));
            }
            let host_port = if host.contains(':') && !host.ends_with(']') {
                host.to_string()
            } else {
                format!("{host}:10809")
            };
            return Ok(NbdAddress::Tcp {
                host_port,
                export: export.to_string(),
            });
        }
        Err(bad("not an NBD URI"))
    }

    fn export(&self) -> &str {
        match self {
            NbdAddress::Tcp { export, .. } | NbdAddress::Unix { export, .. } => export,
        }
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Conn {
    stream: Stream,
    /// False after an I/O error: the stream may be out of step and is not reused.
    healthy: bool,
}

pub struct NbdDevice {
    uri: String,
    size_bytes: u64,
    transmission_flags: u16,
    conns: Vec<Mutex<Conn>>,
    next_conn: AtomicUsize,
    next_cookie: AtomicU64,
}

fn proto_err(uri: &str, what: impl Into<String>) -> DeviceError {
    DeviceError::Protocol {
        device: uri.to_string(),
        what: what.into(),
    }
}

fn read_u16(s: &mut Stream) -> io::Result<u16> {
    let mut b = [0u8; 2];
    s.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}
fn read_u32(s: &mut Stream) -> io::Result<u32> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}
fn read_u64(s: &mut Stream) -> io::Result<u64> {
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

impl NbdDevice {
    /// Connects to `uri`; opens up to `connections_max` connections when the
    /// server allows several (`CAN_MULTI_CONN`).
    pub fn connect(uri: &str, connections_max: usize) -> Result<NbdDevice, DeviceError> {
        let address = NbdAddress::parse(uri)?;
        let (first, size_bytes, flags) = Self::open_one(uri, &address)?;
        let mut conns = vec![Mutex::new(first)];
        if flags & TFLAG_CAN_MULTI_CONN != 0 {
            for _ in 1..connections_max.max(1) {
                let (conn, size, _) = Self::open_one(uri, &address)?;
                if size != size_bytes {
                    return Err(proto_err(uri, "export size changed between connections"));
                }
                conns.push(Mutex::new(conn));
            }
        }
        Ok(NbdDevice {
            uri: uri.to_string(),
            size_bytes,
            transmission_flags: flags,
            conns,
            next_conn: AtomicUsize::new(0),
            next_cookie: AtomicU64::new(1),
        })
    }

    /// Connections opened.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    fn open_one(uri: &str, address: &NbdAddress) -> Result<(Conn, u64, u16), DeviceError> {
        let io = |e: io::Error| proto_err(uri, format!("handshake: {e}"));
        let mut stream = match address {
            NbdAddress::Tcp { host_port, .. } => {
                let s = TcpStream::connect(host_port).map_err(|e| DeviceError::Open {
                    device: uri.to_string(),
                    what: e.to_string(),
                })?;
                s.set_nodelay(true).map_err(io)?;
                Stream::Tcp(s)
            }
            NbdAddress::Unix { socket, .. } => {
                Stream::Unix(UnixStream::connect(socket).map_err(|e| DeviceError::Open {
                    device: uri.to_string(),
                    what: e.to_string(),
                })?)
            }
        };
        if read_u64(&mut stream).map_err(io)? != NBDMAGIC {
            return Err(proto_err(uri, "not an NBD server (bad magic)"));
        }
        if read_u64(&mut stream).map_err(io)? != IHAVEOPT {
            return Err(proto_err(uri, "server does not speak newstyle"));
        }
        let server_flags = read_u16(&mut stream).map_err(io)?;
        if server_flags & FLAG_FIXED_NEWSTYLE == 0 {
            return Err(proto_err(uri, "server does not speak fixed newstyle"));
        }
        let client_flags = (FLAG_FIXED_NEWSTYLE | (server_flags & FLAG_NO_ZEROES)) as u32;
        let name = address.export().as_bytes();
        let mut msg = Vec::with_capacity(32 + name.len());
        msg.extend_from_slice(&client_flags.to_be_bytes());
        msg.extend_from_slice(&IHAVEOPT.to_be_bytes());
        msg.extend_from_slice(&OPT_GO.to_be_bytes());
        msg.extend_from_slice(&((4 + name.len() + 2) as u32).to_be_bytes());
        msg.extend_from_slice(&(name.len() as u32).to_be_bytes());
        msg.extend_from_slice(name);
        msg.extend_from_slice(&0u16.to_be_bytes());
        stream.write_all(&msg).map_err(io)?;
        let mut export_info: Option<(u64, u16)> = None;
        loop {
            if read_u64(&mut stream).map_err(io)? != REPLY_MAGIC_OPT {
                return Err(proto_err(uri, "bad option reply magic"));
            }
            let _option = read_u32(&mut stream).map_err(io)?;
            let reply = read_u32(&mut stream).map_err(io)?;
            let len = read_u32(&mut stream).map_err(io)?;
            if len > OPTION_REPLY_MAX_BYTES {
                return Err(proto_err(uri, format!("option reply of {len} bytes")));
            }
            let mut data = vec![0u8; len as usize];
            stream.read_exact(&mut data).map_err(io)?;
            if reply & REP_FLAG_ERROR != 0 {
                let text = String::from_utf8_lossy(&data).into_owned();
                return Err(DeviceError::Open {
                    device: uri.to_string(),
                    what: format!(
                        "server refused export {:?}: error {reply:#x} {text}",
                        address.export()
                    ),
                });
            }
            match reply {
                REP_INFO
                    if data.len() >= 12
                        && u16::from_be_bytes([data[0], data[1]]) == INFO_EXPORT =>
                {
                    let mut size = [0u8; 8];
                    size.copy_from_slice(&data[2..10]);
                    export_info = Some((
                        u64::from_be_bytes(size),
                        u16::from_be_bytes([data[10], data[11]]),
                    ));
                }
                REP_INFO => {}
                REP_ACK => break,
                other => return Err(proto_err(uri, format!("unexpected option reply {other}"))),
            }
        }
        let (size, flags) =
            export_info.ok_or_else(|| proto_err(uri, "GO acked without NBD_INFO_EXPORT"))?;
        Ok((
            Conn {
                stream,
                healthy: true,
            },
            size,
            flags,
        ))
    }

    fn conn(&self) -> MutexGuard<'_, Conn> {
        let n = self.conns.len();
        let start = self.next_conn.fetch_add(1, Ordering::Relaxed);
        for i in 0..n {
            if let Ok(guard) = self.conns[(start + i) % n].try_lock() {
                return guard;
            }
        }
        self.conns[start % n]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// One request and its simple reply. `payload` is sent after the header
    /// (WRITE); `read_into` receives the reply data (READ).
    fn request(
        &self,
        op: &'static str,
        command: u16,
        offset_bytes: u64,
        len_bytes: u32,
        payload: Option<&[u8]>,
        read_into: Option<&mut [u8]>,
    ) -> Result<(), DeviceError> {
        let mut conn = self.conn();
        if !conn.healthy {
            return Err(proto_err(
                &self.uri,
                "connection broken by an earlier error",
            ));
        }
        let cookie = self.next_cookie.fetch_add(1, Ordering::Relaxed);
        let mut header = [0u8; 28];
        header[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        header[4..6].copy_from_slice(&0u16.to_be_bytes());
        header[6..8].copy_from_slice(&command.to_be_bytes());
        header[8..16].copy_from_slice(&cookie.to_be_bytes());
        header[16..24].copy_from_slice(&offset_bytes.to_be_bytes());
        header[24..28].copy_from_slice(&len_bytes.to_be_bytes());
        let result = (|| -> io::Result<Result<(), u32>> {
            conn.stream.write_all(&header)?;
            if let Some(p) = payload {
                conn.stream.write_all(p)?;
            }
            let mut reply = [0u8; 16];
            conn.stream.read_exact(&mut reply)?;
            let magic = u32::from_be_bytes([reply[0], reply[1], reply[2], reply[3]]);
            let errno = u32::from_be_bytes([reply[4], reply[5], reply[6], reply[7]]);
            let mut got = [0u8; 8];
            got.copy_from_slice(&reply[8..16]);
            if magic != SIMPLE_REPLY_MAGIC || u64::from_be_bytes(got) != cookie {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "reply out of step",
                ));
            }
            if errno != 0 {
                return Ok(Err(errno));
            }
            if let Some(buf) = read_into {
                conn.stream.read_exact(buf)?;
            }
            Ok(Ok(()))
        })();
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(errno)) => Err(DeviceError::Remote {
                device: self.uri.clone(),
                op,
                errno,
            }),
            Err(e) => {
                conn.healthy = false;
                Err(DeviceError::Io {
                    device: self.uri.clone(),
                    op,
                    offset_bytes,
                    len_bytes: len_bytes as u64,
                    source: e,
                })
            }
        }
    }
}

impl BlockDevice for NbdDevice {
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
        for piece in buf.chunks_mut(REQUEST_MAX_BYTES) {
            let len = piece.len() as u32;
            self.request("read", CMD_READ, at, len, None, Some(piece))?;
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
        for piece in data.chunks(REQUEST_MAX_BYTES) {
            let len = piece.len() as u32;
            self.request("write", CMD_WRITE, at, len, Some(piece), None)?;
            at += len as u64;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        if self.transmission_flags & TFLAG_SEND_FLUSH == 0 {
            return Ok(());
        }
        self.request("flush", CMD_FLUSH, 0, 0, None, None)
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), DeviceError> {
        if self.transmission_flags & TFLAG_SEND_TRIM == 0 {
            return Ok(());
        }
        check_range(&|| self.name(), offset_bytes, len_bytes, self.size_bytes)?;
        let mut at = offset_bytes;
        let end = offset_bytes + len_bytes;
        while at < end {
            let len = (end - at).min(u32::MAX as u64 / 2) as u32;
            self.request("trim", CMD_TRIM, at, len, None, None)?;
            at += len as u64;
        }
        Ok(())
    }

    fn writes_durable(&self) -> bool {
        // A server that offers no FLUSH has no volatile cache to flush.
        self.transmission_flags & TFLAG_SEND_FLUSH == 0
    }

    fn name(&self) -> String {
        self.uri.clone()
    }
}

impl Drop for NbdDevice {
    fn drop(&mut self) {
        for conn in &self.conns {
            if let Ok(mut c) = conn.lock() {
                if c.healthy {
                    let mut header = [0u8; 28];
                    header[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
                    header[6..8].copy_from_slice(&CMD_DISC.to_be_bytes());
                    let _ = c.stream.write_all(&header);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse() {
        assert_eq!(
            NbdAddress::parse("nbd://localhost/disk").expect("tcp"),
            NbdAddress::Tcp {
                host_port: "localhost:10809".into(),
                export: "disk".into()
            }
        );
        assert_eq!(
            NbdAddress::parse("nbd://127.0.0.1:1234").expect("tcp port"),
            NbdAddress::Tcp {
                host_port: "127.0.0.1:1234".into(),
                export: "".into()
            }
        );
        assert_eq!(
            NbdAddress::parse("nbd+unix:///vol?socket=/tmp/s.sock").expect("unix"),
            NbdAddress::Unix {
                socket: "/tmp/s.sock".into(),
                export: "vol".into()
            }
        );
        assert!(NbdAddress::parse("http://x").is_err());
        assert!(NbdAddress::parse("nbd+unix:///vol").is_err());
    }
}
