//! The replication link's bytes, as pure encoding (no I/O but the reads
//! and writes of whole messages): the primary's hello and the peer's
//! answer, then frames. A frame is a 24-byte header (kind, length, device
//! offset, id) and, for a write, its data. Every field that does not
//! decode is an error naming it; the link is then dropped, never guessed
//! at. `docs/replication.md` ("The link") describes the same bytes.

use std::io::{self, Read, Write};

/// The first bytes of both hellos.
pub const MAGIC: [u8; 8] = *b"WCREPL\0\x01";
/// The link's version; a peer of another version is refused by name.
pub const VERSION: u32 = 1;
/// A frame's header.
pub const HEADER_BYTES: usize = 24;
/// The largest write a frame carries (a longer write is cut in pieces).
pub const FRAME_DATA_MAX: usize = 4 << 20;
/// The longest message an answer carries.
const TEXT_MAX: usize = 4096;

/// What the primary says first: which cache it mirrors, at which epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub cache_id: [u8; 16],
    pub epoch: u64,
    pub size_bytes: u64,
}

/// The peer's answer to a hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Mirroring: frames follow.
    Accepted = 0,
    /// Another version of the link.
    Version = 1,
    /// The peer mirrors another cache.
    OtherCache = 2,
    /// The peer took over this cache, or mirrors a newer epoch of it: the
    /// primary is fenced.
    TakenOver = 3,
    /// The peer's device has another size.
    Size = 4,
    /// The peer cannot mirror (its device failed, its state cannot be written).
    Failed = 5,
    /// Mirroring, on a copy that holds nothing known of this cache (a new
    /// peer, or one told to forget with `--force`): every region is
    /// compared before the first write.
    AcceptedNew = 6,
}

impl Answer {
    fn from_u32(v: u32) -> Option<Answer> {
        Some(match v {
            0 => Answer::Accepted,
            1 => Answer::Version,
            2 => Answer::OtherCache,
            3 => Answer::TakenOver,
            4 => Answer::Size,
            5 => Answer::Failed,
            6 => Answer::AcceptedNew,
            _ => return None,
        })
    }
}

/// The peer's answer with its epoch, the cache it mirrors and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub answer: Answer,
    pub epoch: u64,
    pub cache_id: [u8; 16],
    pub text: String,
}

/// A frame's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Primary: write the data at the offset.
    Write = 1,
    /// Primary: the range reads as zeros.
    Zero = 2,
    /// Primary: make every earlier frame durable, answer `Flushed` with the id.
    Flush = 3,
    /// Primary: a resync starts; the mirror is not consistent until its end.
    ResyncBegin = 4,
    /// Primary: the resync is complete; flush, record the mirror consistent,
    /// answer `Flushed` with the id.
    ResyncEnd = 5,
    /// Primary: a clean stop; nothing follows.
    Bye = 6,
    /// Peer: every frame up to the flush with this id is durable.
    Flushed = 7,
    /// Peer: a frame failed (its text follows); the link ends.
    Failed = 8,
    /// Primary, before the first write of a connection: the checksums of
    /// the range at the offset, whose length in bytes follows (8 bytes).
    SumsAsk = 9,
    /// Peer: the crc32c of each `SUM_PAGE_BYTES` of the range asked, in order.
    Sums = 10,
}

/// The unit a resync compares: a range the peer holds with the same crc32c
/// as the primary's, page by page, is not sent again.
pub const SUM_PAGE_BYTES: u64 = 4096;

/// The checksums of `data`, one crc32c per `SUM_PAGE_BYTES` (the last may be shorter).
pub fn page_sums(data: &[u8], out: &mut Vec<u8>) {
    for page in data.chunks(SUM_PAGE_BYTES as usize) {
        out.extend_from_slice(&crate::checksum::crc32c(page).to_le_bytes());
    }
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Write,
            2 => Kind::Zero,
            3 => Kind::Flush,
            4 => Kind::ResyncBegin,
            5 => Kind::ResyncEnd,
            6 => Kind::Bye,
            7 => Kind::Flushed,
            8 => Kind::Failed,
            9 => Kind::SumsAsk,
            10 => Kind::Sums,
            _ => return None,
        })
    }
}

/// A frame's header: its kind, the bytes that follow (writes and failures),
/// the device range and the id of a flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub len: u32,
    pub offset: u64,
    pub id: u64,
}

impl Header {
    pub fn new(kind: Kind, len: u32, offset: u64, id: u64) -> Header {
        Header {
            kind,
            len,
            offset,
            id,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0] = self.kind as u8;
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.id.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; HEADER_BYTES]) -> Result<Header, io::Error> {
        let kind = Kind::from_u8(b[0]).ok_or_else(|| bad(format!("frame kind {}", b[0])))?;
        let len = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
        if len as usize > FRAME_DATA_MAX {
            return Err(bad(format!("frame length {len} over {FRAME_DATA_MAX}")));
        }
        Ok(Header {
            kind,
            len,
            offset: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            id: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
        })
    }

    /// Reads one header.
    pub fn read(r: &mut (impl Read + ?Sized)) -> io::Result<Header> {
        let mut b = [0u8; HEADER_BYTES];
        r.read_exact(&mut b)?;
        Header::decode(&b)
    }
}

fn bad(what: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("replication link: {what}"),
    )
}

impl Hello {
    pub fn write(&self, w: &mut impl Write) -> io::Result<()> {
        let mut b = Vec::with_capacity(48);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&self.cache_id);
        b.extend_from_slice(&self.epoch.to_le_bytes());
        b.extend_from_slice(&self.size_bytes.to_le_bytes());
        w.write_all(&b)?;
        w.flush()
    }

    /// Reads a hello; `Err(version)` when the magic is right and the
    /// version is not (the peer answers `Answer::Version`).
    pub fn read(r: &mut impl Read) -> io::Result<Result<Hello, u32>> {
        let mut b = [0u8; 48];
        r.read_exact(&mut b)?;
        check_magic(&b[..8])?;
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Ok(Err(version));
        }
        Ok(Ok(Hello {
            cache_id: b[16..32].try_into().expect("16 bytes"),
            epoch: u64::from_le_bytes(b[32..40].try_into().expect("8 bytes")),
            size_bytes: u64::from_le_bytes(b[40..48].try_into().expect("8 bytes")),
        }))
    }
}

fn check_magic(b: &[u8]) -> io::Result<()> {
    if b != MAGIC {
        return Err(bad(format!(
            "the other end is not a wcache replication link (first bytes {:02x?})",
            b
        )));
    }
    Ok(())
}

impl Reply {
    pub fn write(&self, w: &mut impl Write) -> io::Result<()> {
        let text = &self.text.as_bytes()[..self.text.len().min(TEXT_MAX)];
        let mut b = Vec::with_capacity(48 + text.len());
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(self.answer as u32).to_le_bytes());
        b.extend_from_slice(&self.epoch.to_le_bytes());
        b.extend_from_slice(&self.cache_id);
        b.extend_from_slice(&(text.len() as u32).to_le_bytes());
        b.extend_from_slice(text);
        w.write_all(&b)?;
        w.flush()
    }

    pub fn read(r: &mut impl Read) -> io::Result<Reply> {
        let mut b = [0u8; 44];
        r.read_exact(&mut b)?;
        check_magic(&b[..8])?;
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        let code = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
        let answer = Answer::from_u32(code).ok_or_else(|| bad(format!("answer {code}")))?;
        let len = u32::from_le_bytes(b[40..44].try_into().expect("4 bytes")) as usize;
        if len > TEXT_MAX {
            return Err(bad(format!("answer text of {len} bytes")));
        }
        let mut text = vec![0u8; len];
        r.read_exact(&mut text)?;
        let answer = if version != VERSION {
            Answer::Version
        } else {
            answer
        };
        Ok(Reply {
            answer,
            epoch: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
            cache_id: b[24..40].try_into().expect("16 bytes"),
            text: String::from_utf8_lossy(&text).into_owned(),
        })
    }
}

/// A cache id as operators see it (hex).
pub fn show_id(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_decodes_to_what_was_encoded_and_bad_fields_are_named() {
        let h = Header::new(Kind::Write, 4096, 1 << 40, 7);
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let mut b = h.encode();
        b[0] = 99;
        let e = Header::decode(&b).unwrap_err().to_string();
        assert!(e.contains("frame kind 99"), "{e}");
        let big = Header::new(Kind::Write, FRAME_DATA_MAX as u32 + 1, 0, 0);
        let e = Header::decode(&big.encode()).unwrap_err().to_string();
        assert!(e.contains("frame length"), "{e}");
    }

    #[test]
    fn hellos_and_replies_round_trip_and_a_stranger_is_named() {
        let hello = Hello {
            cache_id: [3; 16],
            epoch: 9,
            size_bytes: 1 << 30,
        };
        let mut b = Vec::new();
        hello.write(&mut b).unwrap();
        assert_eq!(Hello::read(&mut &b[..]).unwrap(), Ok(hello));
        b[8] = 2;
        assert_eq!(Hello::read(&mut &b[..]).unwrap(), Err(2));
        let reply = Reply {
            answer: Answer::TakenOver,
            epoch: 10,
            cache_id: [3; 16],
            text: "taken over".into(),
        };
        let mut b = Vec::new();
        reply.write(&mut b).unwrap();
        assert_eq!(Reply::read(&mut &b[..]).unwrap(), reply);
        let e = Reply::read(
            &mut &b"GET / HTTP/1.1\r\n\r\n........................................"[..],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not a wcache replication link"), "{e}");
    }
}
