//! NBD client codecs, sans-IO, so that the backing client and the server share one codec.
//!
//! What an NBD client (`wcache-io`'s `NbdDevice`) encodes and decodes: the
//! greeting, client flags and `NBD_OPT_GO`, option replies and
//! `NBD_INFO_EXPORT`, request headers and simple replies. Like the server's
//! side it never does I/O, and never allocates in proportion to a length the
//! server sent beyond `OPTION_REPLY_DATA_MAX_BYTES`: the caller reads each
//! header, asks here how long the data behind it may be, and reads that much.
//! Bytes that cannot be what they claim are a `ClientError` naming what was
//! wrong, never a panic.

use super::{
    be_u32, be_u64, ExportInfo, RequestHeader, FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES,
    FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES, GREETING_LEN, IHAVEOPT, INFO_EXPORT, NBDMAGIC,
    OPTION_REPLY_HEADER_LEN, OPTION_REPLY_MAGIC, OPT_GO, REP_ACK, REP_FLAG_ERROR, REP_INFO,
    REQUEST_HEADER_LEN, SIMPLE_REPLY_HEADER_LEN, SIMPLE_REPLY_MAGIC, STRING_MAX_BYTES,
};

/// The TCP port IANA assigned to NBD, used when an address names none.
pub const DEFAULT_PORT: u16 = 10809;
/// Largest option reply data the client reads (a server may send long
/// descriptions); a reply that claims more is refused before it is read.
pub const OPTION_REPLY_DATA_MAX_BYTES: u32 = 64 * 1024;
/// Length of an `NBD_INFO_EXPORT` reply's data: info type, size,
/// transmission flags.
pub const INFO_EXPORT_LEN: usize = 2 + 8 + 2;

const _: () = assert!(OPTION_REPLY_DATA_MAX_BYTES as usize >= 2 + STRING_MAX_BYTES);

/// Why the server's bytes are not what the client asked for. Every variant
/// means: close the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("not an NBD server (bad magic {0:#018x})")]
    BadMagic(u64),
    #[error("server does not speak newstyle (magic {0:#018x} where IHAVEOPT belongs)")]
    NotNewstyle(u64),
    #[error("server does not speak fixed newstyle (handshake flags {0:#06x})")]
    NotFixedNewstyle(u16),
    #[error("export name of {0} bytes, longer than the {STRING_MAX_BYTES} the spec allows")]
    ExportNameTooLong(usize),
    #[error("bad option reply magic {0:#018x}")]
    BadOptionReplyMagic(u64),
    #[error("option reply of {0} bytes, more than the {OPTION_REPLY_DATA_MAX_BYTES} accepted")]
    OptionReplyTooLong(u32),
    #[error("server refused the option: error {reply_type:#x} {message}")]
    OptionRefused { reply_type: u32, message: String },
    #[error("unexpected option reply type {0}")]
    UnexpectedReplyType(u32),
    #[error("NBD_REP_INFO of {0} bytes, too short for an info type")]
    ShortInfo(usize),
    #[error("NBD_INFO_EXPORT of {0} bytes, expected {INFO_EXPORT_LEN}")]
    ShortInfoExport(usize),
    #[error("NBD_OPT_GO acknowledged without NBD_INFO_EXPORT")]
    NoInfoExport,
    #[error("bad simple reply magic {0:#010x}")]
    BadReplyMagic(u32),
    #[error("reply out of step: cookie {got}, expected {expected}")]
    ReplyOutOfStep { expected: u64, got: u64 },
}

// ---------------------------------------------------------------------------
// Handshake.

/// Checks the server's greeting (`NBDMAGIC`, `IHAVEOPT`, handshake flags)
/// and returns its handshake flags.
pub fn decode_greeting(bytes: &[u8; GREETING_LEN]) -> Result<u16, ClientError> {
    let magic = be_u64(&bytes[0..8]);
    if magic != NBDMAGIC {
        return Err(ClientError::BadMagic(magic));
    }
    let magic = be_u64(&bytes[8..16]);
    if magic != IHAVEOPT {
        return Err(ClientError::NotNewstyle(magic));
    }
    let flags = u16::from_be_bytes([bytes[16], bytes[17]]);
    if flags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(ClientError::NotFixedNewstyle(flags));
    }
    Ok(flags)
}

/// The client flags answering a server's handshake flags: fixed newstyle,
/// and no zeroes when the server offers it.
pub fn client_flags(server_flags: u16) -> u32 {
    if server_flags & FLAG_NO_ZEROES != 0 {
        FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES
    } else {
        FLAG_C_FIXED_NEWSTYLE
    }
}

/// Appends one option request to `out`: `IHAVEOPT`, the option, the data's
/// length, the data.
pub fn encode_option(out: &mut Vec<u8>, option: u32, data: &[u8]) {
    assert!(data.len() <= u32::MAX as usize);
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// Appends the data of `NBD_OPT_INFO` or `NBD_OPT_GO` to `out`: the name's
/// length, the name, how many info types follow, each (what
/// `parse_info_request` reads). `requests` is the caller's own list: at most
/// `u16::MAX` entries.
pub fn encode_info_request(
    out: &mut Vec<u8>,
    name: &[u8],
    requests: &[u16],
) -> Result<(), ClientError> {
    if name.len() > STRING_MAX_BYTES {
        return Err(ClientError::ExportNameTooLong(name.len()));
    }
    assert!(requests.len() <= usize::from(u16::MAX));
    out.extend_from_slice(&(name.len() as u32).to_be_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(&(requests.len() as u16).to_be_bytes());
    for info_type in requests {
        out.extend_from_slice(&info_type.to_be_bytes());
    }
    Ok(())
}

/// Appends what the client sends after the greeting: its flags, then
/// `NBD_OPT_GO` for `export_name` listing no info types (`NBD_INFO_EXPORT`
/// is sent whether asked for or not).
pub fn encode_go(
    out: &mut Vec<u8>,
    server_flags: u16,
    export_name: &str,
) -> Result<(), ClientError> {
    let mut data = Vec::new();
    encode_info_request(&mut data, export_name.as_bytes(), &[])?;
    out.extend_from_slice(&client_flags(server_flags).to_be_bytes());
    encode_option(out, OPT_GO, &data);
    Ok(())
}

/// An option reply header, its magic checked and its length within
/// `OPTION_REPLY_DATA_MAX_BYTES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionReplyHeader {
    pub option: u32,
    pub reply_type: u32,
    /// Bytes of data that follow the header.
    pub length: u32,
}

/// Decodes an option reply header; the caller then reads `length` bytes.
pub fn decode_option_reply_header(
    bytes: &[u8; OPTION_REPLY_HEADER_LEN],
) -> Result<OptionReplyHeader, ClientError> {
    let magic = be_u64(&bytes[0..8]);
    if magic != OPTION_REPLY_MAGIC {
        return Err(ClientError::BadOptionReplyMagic(magic));
    }
    let length = be_u32(&bytes[16..20]);
    if length > OPTION_REPLY_DATA_MAX_BYTES {
        return Err(ClientError::OptionReplyTooLong(length));
    }
    Ok(OptionReplyHeader {
        option: be_u32(&bytes[8..12]),
        reply_type: be_u32(&bytes[12..16]),
        length,
    })
}

/// What `NBD_INFO_EXPORT` says of an export: all the transmission phase
/// needs. The server encodes it, the client decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InfoExport {
    pub size_bytes: u64,
    pub transmission_flags: u16,
}

impl InfoExport {
    /// What `NBD_INFO_EXPORT` says of one of the server's exports.
    pub fn of(export: &ExportInfo) -> InfoExport {
        InfoExport {
            size_bytes: export.size_bytes,
            transmission_flags: export.transmission_flags,
        }
    }

    /// The data of an `NBD_REP_INFO` reply carrying it.
    pub fn encode(&self) -> [u8; INFO_EXPORT_LEN] {
        let mut out = [0u8; INFO_EXPORT_LEN];
        out[0..2].copy_from_slice(&INFO_EXPORT.to_be_bytes());
        out[2..10].copy_from_slice(&self.size_bytes.to_be_bytes());
        out[10..12].copy_from_slice(&self.transmission_flags.to_be_bytes());
        out
    }

    /// Decodes the data of an `NBD_REP_INFO` reply: `Ok(None)` for an info
    /// type other than `NBD_INFO_EXPORT` (the client asked for none, and
    /// ignores what it did not ask for).
    pub fn decode(data: &[u8]) -> Result<Option<InfoExport>, ClientError> {
        let Some(info_type) = data.get(0..2) else {
            return Err(ClientError::ShortInfo(data.len()));
        };
        if u16::from_be_bytes([info_type[0], info_type[1]]) != INFO_EXPORT {
            return Ok(None);
        }
        if data.len() < INFO_EXPORT_LEN {
            return Err(ClientError::ShortInfoExport(data.len()));
        }
        Ok(Some(InfoExport {
            size_bytes: be_u64(&data[2..10]),
            transmission_flags: u16::from_be_bytes([data[10], data[11]]),
        }))
    }
}

/// The client's side of the replies to one `NBD_OPT_GO`: fed each reply in
/// turn, it says when the export is ready.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GoReplies {
    export: Option<InfoExport>,
}

impl GoReplies {
    /// Nothing received yet.
    pub fn new() -> GoReplies {
        GoReplies::default()
    }

    /// Takes one reply: its type and its data (`OptionReplyHeader::length`
    /// bytes). `Ok(Some(export))` once the server acknowledged GO: the
    /// transmission phase starts; `Ok(None)` while more replies are due.
    pub fn handle(
        &mut self,
        reply_type: u32,
        data: &[u8],
    ) -> Result<Option<InfoExport>, ClientError> {
        if reply_type & REP_FLAG_ERROR != 0 {
            return Err(ClientError::OptionRefused {
                reply_type,
                message: String::from_utf8_lossy(data).into_owned(),
            });
        }
        match reply_type {
            REP_INFO => {
                if let Some(export) = InfoExport::decode(data)? {
                    self.export = Some(export);
                }
                Ok(None)
            }
            REP_ACK => self.export.map(Some).ok_or(ClientError::NoInfoExport),
            other => Err(ClientError::UnexpectedReplyType(other)),
        }
    }
}

// ---------------------------------------------------------------------------
// Transmission.

/// A request header with no command flags, as this client sends them.
pub fn encode_request(
    kind: u16,
    cookie: u64,
    offset: u64,
    length: u32,
) -> [u8; REQUEST_HEADER_LEN] {
    RequestHeader {
        flags: 0,
        kind,
        cookie,
        offset,
        length,
    }
    .encode()
}

/// Decodes a simple reply header answering the request sent with `cookie`
/// (one request at a time): the error the server answered, `None` for
/// success (a READ's data then follows).
pub fn decode_simple_reply(
    bytes: &[u8; SIMPLE_REPLY_HEADER_LEN],
    cookie: u64,
) -> Result<Option<u32>, ClientError> {
    let magic = be_u32(&bytes[0..4]);
    if magic != SIMPLE_REPLY_MAGIC {
        return Err(ClientError::BadReplyMagic(magic));
    }
    let got = be_u64(&bytes[8..16]);
    if got != cookie {
        return Err(ClientError::ReplyOutOfStep {
            expected: cookie,
            got,
        });
    }
    Ok(Some(be_u32(&bytes[4..8])).filter(|&error| error != 0))
}

#[cfg(test)]
mod tests;
