//! NBD wire protocol: constants, the server's fixed-newstyle handshake as a
//! sans-IO state machine, the transmission-phase codecs (the client's in `client`).
//!
//! This module exists so that every byte the server reads from a client, and
//! the backing client from a server, is interpreted by pure, unit-testable
//! (and fuzzable) code. It must never do I/O, spawn, read a clock, or allocate
//! in proportion to a length the peer sent: every buffer is bounded by a constant.
//!
//! Reference: `doc/proto.md` of the NetworkBlockDevice/nbd project.

use std::collections::VecDeque;

// ---------------------------------------------------------------------------
// Magics and sizes.

/// "NBDMAGIC": first word of the server greeting.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": second word of the greeting, and the prefix of every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Prefix of every fixed-newstyle option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Prefix of every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Prefix of every simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Length of the server greeting: magic, magic, handshake flags.
pub const GREETING_LEN: usize = 8 + 8 + 2;
/// Length of an option request header: magic, option, data length.
pub const OPTION_HEADER_LEN: usize = 8 + 4 + 4;
/// Length of an option reply header: magic, option, reply type, data length.
pub const OPTION_REPLY_HEADER_LEN: usize = 8 + 4 + 4 + 4;
/// Length of a transmission request header.
pub const REQUEST_HEADER_LEN: usize = 4 + 2 + 2 + 8 + 8 + 4;
/// Length of a simple reply header (the READ payload follows it).
pub const SIMPLE_REPLY_HEADER_LEN: usize = 4 + 4 + 8;
/// Zero padding after the `NBD_OPT_EXPORT_NAME` reply unless NO_ZEROES.
pub const EXPORT_NAME_PADDING_LEN: usize = 124;

/// Largest READ or WRITE payload this server accepts: 2^25 bytes, the value
/// the spec says no peer should treat as a denial of service.
pub const PAYLOAD_MAX_BYTES: u32 = 32 * 1024 * 1024;
/// Largest option data the handshake buffers; longer options are skipped
/// without being stored and answered with `NBD_REP_ERR_TOO_BIG`.
pub const OPTION_DATA_MAX_BYTES: u32 = 16 * 1024;
/// Longest string (export name, description) the spec allows.
pub const STRING_MAX_BYTES: usize = 4096;
/// Options accepted in one handshake before the server hangs up (DoS bound).
pub const OPTIONS_PER_HANDSHAKE_MAX: u32 = 1024;
/// Largest minimum block size the spec allows.
pub const BLOCK_SIZE_MIN_MAX_BYTES: u32 = 64 * 1024;
/// Preferred block size advertised when the minimum is smaller.
pub const BLOCK_SIZE_PREFERRED_DEFAULT_BYTES: u32 = 4096;

const _: () = assert!(OPTION_DATA_MAX_BYTES as usize >= 4 + STRING_MAX_BYTES + 2 + 2 * 64);
const _: () = assert!(PAYLOAD_MAX_BYTES >= BLOCK_SIZE_MIN_MAX_BYTES);
const _: () = assert!(BLOCK_SIZE_MIN_MAX_BYTES.is_power_of_two());

// ---------------------------------------------------------------------------
// Handshake flags.

/// Server handshake flag: fixed newstyle negotiation.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Server handshake flag: may omit the 124 zero bytes after EXPORT_NAME.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: client wants no zero padding after EXPORT_NAME.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;
/// Handshake flags this server sends.
pub const SERVER_HANDSHAKE_FLAGS: u16 = FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES;

// Transmission flags.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_ROTATIONAL: u16 = 1 << 4;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_RESIZE: u16 = 1 << 9;
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

/// Transmission flags of an export served by this server.
pub fn transmission_flags(multi_conn: bool) -> u16 {
    let base =
        FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES;
    if multi_conn {
        base | FLAG_CAN_MULTI_CONN
    } else {
        base
    }
}

// ---------------------------------------------------------------------------
// Options, option replies, info types.

pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_PEEK_EXPORT: u32 = 4;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;
pub const OPT_EXTENDED_HEADERS: u32 = 11;

pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
/// `NBD_REP_FLAG_ERROR`: set in the type of every error reply.
pub const REP_FLAG_ERROR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_FLAG_ERROR | 1;
pub const REP_ERR_POLICY: u32 = REP_FLAG_ERROR | 2;
pub const REP_ERR_INVALID: u32 = REP_FLAG_ERROR | 3;
pub const REP_ERR_PLATFORM: u32 = REP_FLAG_ERROR | 4;
pub const REP_ERR_TLS_REQD: u32 = REP_FLAG_ERROR | 5;
pub const REP_ERR_UNKNOWN: u32 = REP_FLAG_ERROR | 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_FLAG_ERROR | 7;
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = REP_FLAG_ERROR | 8;
pub const REP_ERR_TOO_BIG: u32 = REP_FLAG_ERROR | 9;

pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// ---------------------------------------------------------------------------
// Commands, command flags, errors.

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// Error values of the transmission phase (the `error` field of a reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum NbdErrno {
    Perm = 1,
    Io = 5,
    NoMem = 12,
    Inval = 22,
    NoSpc = 28,
    Overflow = 75,
    NotSup = 95,
    Shutdown = 108,
}

impl NbdErrno {
    /// The value sent on the wire.
    pub fn code(self) -> u32 {
        self as u32
    }
}

// ---------------------------------------------------------------------------
// Exports as the handshake sees them.

/// What the handshake needs to know about one export. A snapshot taken when
/// the connection starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    pub name: String,
    pub description: Option<String>,
    pub size_bytes: u64,
    pub transmission_flags: u16,
    pub block_size_min_bytes: u32,
    pub block_size_preferred_bytes: u32,
    pub payload_max_bytes: u32,
}

impl ExportInfo {
    /// An export with this server's flags and block sizes derived from the
    /// minimum. `block_size_min_bytes` must be a power of two ≤ 64 KiB.
    pub fn new(name: &str, size_bytes: u64, block_size_min_bytes: u32, multi_conn: bool) -> Self {
        assert!(block_size_min_bytes.is_power_of_two());
        assert!(block_size_min_bytes <= BLOCK_SIZE_MIN_MAX_BYTES);
        ExportInfo {
            name: name.to_owned(),
            description: None,
            size_bytes,
            transmission_flags: transmission_flags(multi_conn),
            block_size_min_bytes,
            block_size_preferred_bytes: block_size_min_bytes
                .max(BLOCK_SIZE_PREFERRED_DEFAULT_BYTES),
            payload_max_bytes: PAYLOAD_MAX_BYTES,
        }
    }

    /// Geometry used to validate transmission requests.
    pub fn geometry(&self) -> Geometry {
        Geometry {
            size_bytes: self.size_bytes,
            block_size_min_bytes: self.block_size_min_bytes,
            payload_max_bytes: self.payload_max_bytes,
        }
    }
}

// ---------------------------------------------------------------------------
// Handshake state machine.

/// Why the handshake ended without entering transmission. Every variant
/// means: close the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("client sent unknown client flags {0:#x}")]
    UnknownClientFlags(u32),
    #[error("bad option magic {0:#018x}")]
    BadOptionMagic(u64),
    #[error("client chose unknown export {0:?} with NBD_OPT_EXPORT_NAME")]
    UnknownExport(String),
    #[error("option {0} is not allowed without fixed newstyle")]
    NotFixedNewstyle(u32),
    #[error("more than {OPTIONS_PER_HANDSHAKE_MAX} options")]
    TooManyOptions,
    #[error("input after the handshake ended")]
    AlreadyFinished,
    #[error("NBD_OPT_EXPORT_NAME before NBD_OPT_STARTTLS, and TLS is required")]
    TlsRequired,
}

/// Which option ended option haggling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnteredVia {
    ExportName,
    Go,
}

/// Something the server must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeEvent {
    /// Option haggling is over: send the pending output, then serve the
    /// export at `export_index` (into the list given to `Handshake::new`).
    Ready {
        export_index: usize,
        transmission_flags: u16,
        via: EnteredVia,
        /// The client asked for `NBD_INFO_BLOCK_SIZE` and so promised to obey it.
        block_size_requested: bool,
    },
    /// The client sent `NBD_OPT_ABORT`: send the pending output, then close.
    Aborted,
    /// The client sent `NBD_OPT_STARTTLS` and it was accepted: send the
    /// pending output (the ACK, in plaintext), run the TLS handshake on the
    /// connection, then call `Handshake::tls_started`; every later byte,
    /// both ways, goes over TLS.
    StartTls,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    ClientFlags,
    OptionHeader,
    OptionData {
        option: u32,
        length: u32,
    },
    OptionSkip {
        option: u32,
        remaining: u64,
    },
    /// STARTTLS was acknowledged: nothing is consumed until `tls_started`.
    AwaitingTls,
    Finished,
}

/// Server side of the fixed newstyle handshake, sans-IO.
///
/// Call order: `new` (queues the greeting) → loop { send `output()`, then
/// `clear_output()`; read bytes; `handle_input(bytes)` returns how many were
/// consumed; drain `poll_event()` }. Once an event is produced,
/// `handle_input` consumes nothing more: bytes after the final option belong
/// to the transmission phase. An `Err` means: close the connection. With
/// TLS (`with_tls`), `HandshakeEvent::StartTls` stops consumption until the
/// caller has upgraded the connection and called `tls_started`.
#[derive(Debug)]
pub struct Handshake {
    exports: Vec<ExportInfo>,
    default_export: Option<usize>,
    state: State,
    /// Partial header or option data; never longer than `OPTION_DATA_MAX_BYTES`.
    pending: Vec<u8>,
    output: Vec<u8>,
    events: VecDeque<HandshakeEvent>,
    fixed_newstyle: bool,
    no_zeroes: bool,
    options_count: u32,
    tls_mode: TlsMode,
    tls_active: bool,
}

impl Handshake {
    /// `default_export` is the index served for the empty name, if any.
    pub fn new(exports: Vec<ExportInfo>, default_export: Option<usize>) -> Self {
        if let Some(index) = default_export {
            assert!(index < exports.len());
        }
        let mut output = Vec::with_capacity(256);
        output.extend_from_slice(&NBDMAGIC.to_be_bytes());
        output.extend_from_slice(&IHAVEOPT.to_be_bytes());
        output.extend_from_slice(&SERVER_HANDSHAKE_FLAGS.to_be_bytes());
        Handshake {
            exports,
            default_export,
            state: State::ClientFlags,
            pending: Vec::with_capacity(OPTION_HEADER_LEN),
            output,
            events: VecDeque::new(),
            fixed_newstyle: false,
            no_zeroes: false,
            options_count: 0,
            tls_mode: TlsMode::Off,
            tls_active: false,
        }
    }

    /// Bytes to send to the client, in order.
    pub fn output(&self) -> &[u8] {
        &self.output
    }

    /// Forget output that was sent.
    pub fn clear_output(&mut self) {
        self.output.clear();
    }

    /// Next event, if any.
    pub fn poll_event(&mut self) -> Option<HandshakeEvent> {
        self.events.pop_front()
    }

    /// True once haggling has ended (by GO, EXPORT_NAME or ABORT).
    pub fn is_finished(&self) -> bool {
        self.state == State::Finished
    }

    /// Bytes the input buffer holds now (for allocation bounds in tests).
    pub fn buffered_len(&self) -> usize {
        self.pending.len()
    }

    /// Consume client bytes; returns how many were used. Stops consuming once
    /// the handshake is finished.
    pub fn handle_input(&mut self, input: &[u8]) -> Result<usize, HandshakeError> {
        let mut used = 0usize;
        while used < input.len() {
            let rest = &input[used..];
            match self.state {
                State::Finished | State::AwaitingTls => break,
                State::ClientFlags => {
                    used += self.fill_pending(rest, 4);
                    if self.pending.len() == 4 {
                        let flags = be_u32(&self.pending[0..4]);
                        self.pending.clear();
                        self.on_client_flags(flags)?;
                    }
                }
                State::OptionHeader => {
                    used += self.fill_pending(rest, OPTION_HEADER_LEN);
                    if self.pending.len() == OPTION_HEADER_LEN {
                        let magic = be_u64(&self.pending[0..8]);
                        let option = be_u32(&self.pending[8..12]);
                        let length = be_u32(&self.pending[12..16]);
                        self.pending.clear();
                        self.on_option_header(magic, option, length)?;
                    }
                }
                State::OptionData { option, length } => {
                    let want = length as usize;
                    used += self.fill_pending(rest, want);
                    if self.pending.len() == want {
                        let data = std::mem::take(&mut self.pending);
                        self.state = State::OptionHeader;
                        let result = self.on_option(option, &data);
                        self.pending = data;
                        self.pending.clear();
                        result?;
                    }
                }
                State::OptionSkip { option, remaining } => {
                    let take = remaining.min(rest.len() as u64);
                    used += take as usize;
                    let remaining = remaining - take;
                    if remaining == 0 {
                        self.state = State::OptionHeader;
                        if self.tls_required_now() {
                            self.reply_error(option, REP_ERR_TLS_REQD, TLS_REQUIRED_MESSAGE);
                        } else {
                            self.reply_error(option, REP_ERR_TOO_BIG, "option data too long");
                        }
                    } else {
                        self.state = State::OptionSkip { option, remaining };
                    }
                }
            }
        }
        Ok(used)
    }

    fn fill_pending(&mut self, rest: &[u8], want: usize) -> usize {
        debug_assert!(self.pending.len() <= want);
        let take = (want - self.pending.len()).min(rest.len());
        self.pending.extend_from_slice(&rest[..take]);
        take
    }

    fn on_client_flags(&mut self, flags: u32) -> Result<(), HandshakeError> {
        let known = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES;
        if flags & !known != 0 {
            self.state = State::Finished;
            return Err(HandshakeError::UnknownClientFlags(flags));
        }
        self.fixed_newstyle = flags & FLAG_C_FIXED_NEWSTYLE != 0;
        self.no_zeroes = flags & FLAG_C_NO_ZEROES != 0;
        self.state = State::OptionHeader;
        Ok(())
    }

    fn on_option_header(
        &mut self,
        magic: u64,
        option: u32,
        length: u32,
    ) -> Result<(), HandshakeError> {
        if magic != IHAVEOPT {
            self.state = State::Finished;
            return Err(HandshakeError::BadOptionMagic(magic));
        }
        self.options_count += 1;
        if self.options_count > OPTIONS_PER_HANDSHAKE_MAX {
            self.state = State::Finished;
            return Err(HandshakeError::TooManyOptions);
        }
        if !self.fixed_newstyle && option != OPT_EXPORT_NAME {
            // Non-fixed newstyle cannot carry an error reply.
            self.state = State::Finished;
            return Err(HandshakeError::NotFixedNewstyle(option));
        }
        if length > OPTION_DATA_MAX_BYTES {
            if option == OPT_EXPORT_NAME {
                // EXPORT_NAME cannot be errored; the name is too long to exist.
                self.state = State::Finished;
                return Err(HandshakeError::UnknownExport(String::from("<too long>")));
            }
            self.state = State::OptionSkip {
                option,
                remaining: u64::from(length),
            };
            return Ok(());
        }
        if length == 0 {
            self.state = State::OptionHeader;
            return self.on_option(option, &[]);
        }
        self.pending.reserve(length as usize);
        self.state = State::OptionData { option, length };
        Ok(())
    }

    fn on_option(&mut self, option: u32, data: &[u8]) -> Result<(), HandshakeError> {
        if self.tls_required_now() && option != OPT_STARTTLS && option != OPT_ABORT {
            if option == OPT_EXPORT_NAME {
                // It cannot be answered with an error: close, as the spec asks.
                self.state = State::Finished;
                return Err(HandshakeError::TlsRequired);
            }
            self.reply_error(option, REP_ERR_TLS_REQD, TLS_REQUIRED_MESSAGE);
            return Ok(());
        }
        match option {
            OPT_EXPORT_NAME => self.on_export_name(data),
            OPT_ABORT => {
                // Data, if any, is ignored as the spec asks.
                self.reply(option, REP_ACK, &[]);
                self.state = State::Finished;
                self.events.push_back(HandshakeEvent::Aborted);
                Ok(())
            }
            OPT_LIST => {
                if !data.is_empty() {
                    self.reply_error(option, REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
                    return Ok(());
                }
                for index in 0..self.exports.len() {
                    let export = &self.exports[index];
                    let mut body = Vec::with_capacity(4 + export.name.len());
                    body.extend_from_slice(&(export.name.len() as u32).to_be_bytes());
                    body.extend_from_slice(export.name.as_bytes());
                    if let Some(description) = &export.description {
                        body.extend_from_slice(description.as_bytes());
                    }
                    self.reply(option, REP_SERVER, &body);
                }
                self.reply(option, REP_ACK, &[]);
                Ok(())
            }
            OPT_INFO | OPT_GO => {
                self.on_info_or_go(option, data);
                Ok(())
            }
            OPT_STARTTLS => {
                self.on_starttls(data);
                Ok(())
            }
            OPT_STRUCTURED_REPLY => {
                self.reply_error(
                    option,
                    REP_ERR_UNSUP,
                    "structured replies are not supported",
                );
                Ok(())
            }
            _ => {
                self.reply_error(option, REP_ERR_UNSUP, "option not supported");
                Ok(())
            }
        }
    }

    fn lookup(&self, name: &[u8]) -> Option<usize> {
        if name.is_empty() {
            if let Some(index) = self.default_export {
                return Some(index);
            }
        }
        self.exports.iter().position(|e| e.name.as_bytes() == name)
    }

    fn on_export_name(&mut self, name: &[u8]) -> Result<(), HandshakeError> {
        self.state = State::Finished;
        let Some(index) = self.lookup(name) else {
            return Err(HandshakeError::UnknownExport(
                String::from_utf8_lossy(name).into_owned(),
            ));
        };
        let export = &self.exports[index];
        let flags = export.transmission_flags;
        self.output
            .extend_from_slice(&export.size_bytes.to_be_bytes());
        self.output.extend_from_slice(&flags.to_be_bytes());
        if !self.no_zeroes {
            self.output
                .extend_from_slice(&[0u8; EXPORT_NAME_PADDING_LEN]);
        }
        self.events.push_back(HandshakeEvent::Ready {
            export_index: index,
            transmission_flags: flags,
            via: EnteredVia::ExportName,
            block_size_requested: false,
        });
        Ok(())
    }

    fn on_info_or_go(&mut self, option: u32, data: &[u8]) {
        let Some(request) = parse_info_request(data) else {
            self.reply_error(option, REP_ERR_INVALID, "malformed NBD_OPT_INFO/GO data");
            return;
        };
        let Some(index) = self.lookup(request.name) else {
            self.reply_error(option, REP_ERR_UNKNOWN, "no such export");
            return;
        };
        let export = self.exports[index].clone();
        let info = client::InfoExport::of(&export).encode();
        self.reply(option, REP_INFO, &info);
        // Always sent: we enforce a minimum block size, and unrequested info
        // is allowed (clients ignore what they did not ask for).
        let mut sizes = [0u8; 2 + 4 + 4 + 4];
        sizes[0..2].copy_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        sizes[2..6].copy_from_slice(&export.block_size_min_bytes.to_be_bytes());
        sizes[6..10].copy_from_slice(&export.block_size_preferred_bytes.to_be_bytes());
        sizes[10..14].copy_from_slice(&export.payload_max_bytes.to_be_bytes());
        self.reply(option, REP_INFO, &sizes);
        if request.wants(INFO_NAME) {
            let mut body = Vec::with_capacity(2 + export.name.len());
            body.extend_from_slice(&INFO_NAME.to_be_bytes());
            body.extend_from_slice(export.name.as_bytes());
            self.reply(option, REP_INFO, &body);
        }
        if request.wants(INFO_DESCRIPTION) {
            if let Some(description) = &export.description {
                let mut body = Vec::with_capacity(2 + description.len());
                body.extend_from_slice(&INFO_DESCRIPTION.to_be_bytes());
                body.extend_from_slice(description.as_bytes());
                self.reply(option, REP_INFO, &body);
            }
        }
        self.reply(option, REP_ACK, &[]);
        if option == OPT_GO {
            self.state = State::Finished;
            self.events.push_back(HandshakeEvent::Ready {
                export_index: index,
                transmission_flags: export.transmission_flags,
                via: EnteredVia::Go,
                block_size_requested: request.wants(INFO_BLOCK_SIZE),
            });
        }
    }

    fn reply(&mut self, option: u32, reply_type: u32, data: &[u8]) {
        encode_option_reply(&mut self.output, option, reply_type, data);
    }

    fn reply_error(&mut self, option: u32, reply_type: u32, message: &str) {
        debug_assert!(reply_type & REP_FLAG_ERROR != 0);
        self.reply(option, reply_type, message.as_bytes());
    }
}

/// Parsed `NBD_OPT_INFO` / `NBD_OPT_GO` data, borrowing the option bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest<'a> {
    pub name: &'a [u8],
    /// Requested info types, big-endian u16 each.
    requests: &'a [u8],
}

impl InfoRequest<'_> {
    /// Whether the client listed `info_type`.
    pub fn wants(&self, info_type: u16) -> bool {
        self.requests
            .chunks_exact(2)
            .any(|pair| u16::from_be_bytes([pair[0], pair[1]]) == info_type)
    }
}

/// Parse INFO/GO data: u32 name length, name, u16 count, count × u16.
/// `None` when the lengths do not add up exactly.
pub fn parse_info_request(data: &[u8]) -> Option<InfoRequest<'_>> {
    let name_len = be_u32(data.get(0..4)?) as usize;
    if name_len > STRING_MAX_BYTES {
        return None;
    }
    let name_end = 4usize.checked_add(name_len)?;
    let name = data.get(4..name_end)?;
    let count = u16::from_be_bytes(data.get(name_end..name_end + 2)?.try_into().ok()?) as usize;
    let requests = data.get(name_end + 2..)?;
    if requests.len() != count * 2 {
        return None;
    }
    Some(InfoRequest { name, requests })
}

/// Append one fixed-newstyle option reply to `out`.
pub fn encode_option_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    assert!(data.len() <= u32::MAX as usize);
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

// ---------------------------------------------------------------------------
// Transmission phase.

/// A request header as sent, before validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl RequestHeader {
    /// Payload bytes that follow this header on the wire, whether or not the
    /// request turns out valid: only WRITE carries one.
    pub fn payload_len_bytes(&self) -> u32 {
        if self.kind == CMD_WRITE {
            self.length
        } else {
            0
        }
    }

    /// Encode (used by tests and clients).
    pub fn encode(&self) -> [u8; REQUEST_HEADER_LEN] {
        let mut out = [0u8; REQUEST_HEADER_LEN];
        out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.kind.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..28].copy_from_slice(&self.length.to_be_bytes());
        out
    }
}

/// The stream cannot be resynchronised: close the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("bad request magic {0:#010x}")]
    BadMagic(u32),
}

/// Decode a request header.
pub fn decode_request_header(
    bytes: &[u8; REQUEST_HEADER_LEN],
) -> Result<RequestHeader, RequestError> {
    let magic = be_u32(&bytes[0..4]);
    if magic != REQUEST_MAGIC {
        return Err(RequestError::BadMagic(magic));
    }
    Ok(RequestHeader {
        flags: u16::from_be_bytes([bytes[4], bytes[5]]),
        kind: u16::from_be_bytes([bytes[6], bytes[7]]),
        cookie: be_u64(&bytes[8..16]),
        offset: be_u64(&bytes[16..24]),
        length: be_u32(&bytes[24..28]),
    })
}

/// What requests are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub size_bytes: u64,
    pub block_size_min_bytes: u32,
    pub payload_max_bytes: u32,
}

/// A validated command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read {
        offset: u64,
        length: u32,
    },
    Write {
        offset: u64,
        length: u32,
        fua: bool,
    },
    Disconnect,
    Flush,
    Trim {
        offset: u64,
        length: u32,
        fua: bool,
    },
    WriteZeroes {
        offset: u64,
        length: u32,
        fua: bool,
        no_hole: bool,
    },
}

/// What to do with the WRITE payload that follows a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// Nothing follows.
    None,
    /// Read this many bytes into a buffer for the command (≤ payload max).
    Receive(u32),
    /// Read and throw away this many bytes in bounded chunks; the request
    /// was refused and its reply carries the error.
    Discard(u32),
}

/// The decision for one request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub cookie: u64,
    pub command: Result<Command, NbdErrno>,
    pub payload: Payload,
}

/// Validate a request against the export. Never panics; errors are per
/// request and leave the connection usable.
pub fn decide(header: &RequestHeader, geometry: &Geometry) -> Decision {
    let command = validate(header, geometry);
    let wire_len = header.payload_len_bytes();
    let payload = match (&command, wire_len) {
        (_, 0) => Payload::None,
        (Ok(Command::Write { .. }), len) => Payload::Receive(len),
        (_, len) => Payload::Discard(len),
    };
    debug_assert!(match payload {
        Payload::Receive(len) => len <= geometry.payload_max_bytes,
        _ => true,
    });
    Decision {
        cookie: header.cookie,
        command,
        payload,
    }
}

fn validate(header: &RequestHeader, geometry: &Geometry) -> Result<Command, NbdErrno> {
    let fua = header.flags & CMD_FLAG_FUA != 0;
    // FUA is valid on every command once SEND_FUA is advertised (we always do).
    let allowed = match header.kind {
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
        CMD_READ | CMD_WRITE | CMD_DISC | CMD_FLUSH | CMD_TRIM => CMD_FLAG_FUA,
        _ => return Err(NbdErrno::Inval),
    };
    if header.flags & !allowed != 0 {
        return Err(NbdErrno::Inval);
    }
    let offset = header.offset;
    let length = header.length;
    match header.kind {
        CMD_DISC => Ok(Command::Disconnect),
        CMD_FLUSH => {
            if offset != 0 || length != 0 {
                return Err(NbdErrno::Inval);
            }
            Ok(Command::Flush)
        }
        CMD_READ => {
            check_payload(length, geometry)?;
            check_aligned(offset, length, geometry)?;
            check_in_bounds(offset, length, geometry, NbdErrno::Inval)?;
            Ok(Command::Read { offset, length })
        }
        CMD_WRITE => {
            check_payload(length, geometry)?;
            check_aligned(offset, length, geometry)?;
            check_in_bounds(offset, length, geometry, NbdErrno::NoSpc)?;
            Ok(Command::Write {
                offset,
                length,
                fua,
            })
        }
        CMD_TRIM => {
            check_aligned(offset, length, geometry)?;
            check_in_bounds(offset, length, geometry, NbdErrno::Inval)?;
            Ok(Command::Trim {
                offset,
                length,
                fua,
            })
        }
        CMD_WRITE_ZEROES => {
            check_aligned(offset, length, geometry)?;
            // The spec asks for ENOSPC here, as for WRITE.
            check_in_bounds(offset, length, geometry, NbdErrno::NoSpc)?;
            let no_hole = header.flags & CMD_FLAG_NO_HOLE != 0;
            Ok(Command::WriteZeroes {
                offset,
                length,
                fua,
                no_hole,
            })
        }
        _ => Err(NbdErrno::Inval),
    }
}

fn check_payload(length: u32, geometry: &Geometry) -> Result<(), NbdErrno> {
    if length > geometry.payload_max_bytes {
        return Err(NbdErrno::Inval);
    }
    Ok(())
}

fn check_aligned(offset: u64, length: u32, geometry: &Geometry) -> Result<(), NbdErrno> {
    let block = u64::from(geometry.block_size_min_bytes.max(1));
    if !offset.is_multiple_of(block) || !u64::from(length).is_multiple_of(block) {
        return Err(NbdErrno::Inval);
    }
    Ok(())
}

fn check_in_bounds(
    offset: u64,
    length: u32,
    geometry: &Geometry,
    errno: NbdErrno,
) -> Result<(), NbdErrno> {
    match offset.checked_add(u64::from(length)) {
        Some(end) if end <= geometry.size_bytes => Ok(()),
        _ => Err(errno),
    }
}

/// Encode a simple reply header; for a successful READ the data follows.
pub fn encode_simple_reply(error: Option<NbdErrno>, cookie: u64) -> [u8; SIMPLE_REPLY_HEADER_LEN] {
    let mut out = [0u8; SIMPLE_REPLY_HEADER_LEN];
    out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out[4..8].copy_from_slice(&error.map_or(0, NbdErrno::code).to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out
}

// ---------------------------------------------------------------------------
// Byte helpers (callers pass slices of the exact length).

fn be_u32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[..4]);
    u32::from_be_bytes(word)
}

fn be_u64(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(word)
}

/// Entry points for fuzzers (cargo-fuzz, proptest): feed arbitrary bytes to
/// the parsers and check the allocation bounds. They panic only on a bug.
pub mod fuzz;

pub mod client;
mod starttls;
pub use starttls::TlsMode;
use starttls::TLS_REQUIRED_MESSAGE;

#[cfg(test)]
mod tests;
