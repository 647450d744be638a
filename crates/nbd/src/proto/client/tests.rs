//! Unit tests of the client codec: round trips against the server's codec
//! and its handshake, and malformed server bytes giving the named error.

use super::*;
use crate::proto::{
    decode_request_header, encode_option_reply, encode_simple_reply, parse_info_request,
    EnteredVia, Handshake, HandshakeEvent, NbdErrno, CMD_DISC, CMD_FLUSH, CMD_READ, CMD_TRIM,
    CMD_WRITE, INFO_BLOCK_SIZE, INFO_NAME, REP_ERR_UNKNOWN, REP_SERVER, SERVER_HANDSHAKE_FLAGS,
};
use proptest::prelude::*;

fn exports() -> Vec<ExportInfo> {
    vec![
        ExportInfo::new("disk", 1 << 20, 512, false),
        ExportInfo::new("shared", 3 << 30, 4096, true),
    ]
}

fn reply(reply_type: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_option_reply(&mut out, OPT_GO, reply_type, data);
    out
}

/// The client's side of the replies in `bytes`, as `NbdDevice` reads them:
/// the export once GO is acknowledged, `None` if the bytes end before.
fn read_go_replies(mut bytes: &[u8]) -> Result<Option<InfoExport>, ClientError> {
    let mut go = GoReplies::new();
    while let Some(head) = bytes.first_chunk::<OPTION_REPLY_HEADER_LEN>() {
        let header = decode_option_reply_header(head)?;
        let end = OPTION_REPLY_HEADER_LEN + header.length as usize;
        let Some(data) = bytes.get(OPTION_REPLY_HEADER_LEN..end) else {
            return Ok(None);
        };
        if let Some(export) = go.handle(header.reply_type, data)? {
            return Ok(Some(export));
        }
        bytes = &bytes[end..];
    }
    Ok(None)
}

/// Runs the client's handshake for `name` against the server's state
/// machine: what the client learns, and the server's event.
fn handshake(
    name: &str,
) -> (
    Result<Option<InfoExport>, ClientError>,
    Option<HandshakeEvent>,
) {
    let mut server = Handshake::new(exports(), None);
    let greeting = server.output().first_chunk::<GREETING_LEN>().copied();
    let server_flags = decode_greeting(&greeting.expect("a greeting")).expect("greeting");
    server.clear_output();
    let mut sent = Vec::new();
    encode_go(&mut sent, server_flags, name).expect("encode");
    assert_eq!(server.handle_input(&sent), Ok(sent.len()));
    (read_go_replies(server.output()), server.poll_event())
}

#[test]
fn the_servers_greeting_decodes_and_the_client_asks_for_what_it_offers() {
    let server = Handshake::new(exports(), None);
    let greeting = server
        .output()
        .first_chunk::<GREETING_LEN>()
        .expect("greeting");
    assert_eq!(decode_greeting(greeting), Ok(SERVER_HANDSHAKE_FLAGS));
    assert_eq!(
        client_flags(SERVER_HANDSHAKE_FLAGS),
        FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES
    );
    assert_eq!(client_flags(FLAG_FIXED_NEWSTYLE), FLAG_C_FIXED_NEWSTYLE);
}

#[test]
fn go_against_the_servers_handshake_yields_the_export() {
    for (index, export) in exports().iter().enumerate() {
        let (learnt, event) = handshake(&export.name);
        let expected = InfoExport {
            size_bytes: export.size_bytes,
            transmission_flags: export.transmission_flags,
        };
        assert_eq!(learnt, Ok(Some(expected)));
        assert_eq!(
            event,
            Some(HandshakeEvent::Ready {
                export_index: index,
                transmission_flags: export.transmission_flags,
                via: EnteredVia::Go,
                block_size_requested: false,
            })
        );
    }
}

#[test]
fn go_for_an_unknown_export_is_refused_with_the_servers_error() {
    let (learnt, event) = handshake("nope");
    match learnt {
        Err(ClientError::OptionRefused {
            reply_type,
            message,
        }) => {
            assert_eq!(reply_type, REP_ERR_UNKNOWN);
            assert_eq!(message, "no such export");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(event, None);
}

#[test]
fn info_request_round_trips_through_the_servers_parser() {
    let mut data = Vec::new();
    encode_info_request(&mut data, b"vol", &[INFO_NAME, INFO_BLOCK_SIZE]).expect("encode");
    let parsed = parse_info_request(&data).expect("parse");
    assert_eq!(parsed.name, b"vol");
    assert!(parsed.wants(INFO_NAME) && parsed.wants(INFO_BLOCK_SIZE));
    assert!(!parsed.wants(INFO_EXPORT));
}

#[test]
fn an_export_name_over_the_spec_limit_is_refused_before_sending() {
    let name = "x".repeat(STRING_MAX_BYTES + 1);
    let mut out = Vec::new();
    assert_eq!(
        encode_go(&mut out, SERVER_HANDSHAKE_FLAGS, &name),
        Err(ClientError::ExportNameTooLong(STRING_MAX_BYTES + 1))
    );
    assert!(out.is_empty(), "nothing half-encoded");
    let name = "x".repeat(STRING_MAX_BYTES);
    assert_eq!(encode_go(&mut out, SERVER_HANDSHAKE_FLAGS, &name), Ok(()));
}

#[test]
fn bad_greetings_name_what_is_wrong() {
    let mut good = [0u8; GREETING_LEN];
    good[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    good[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    good[16..18].copy_from_slice(&FLAG_FIXED_NEWSTYLE.to_be_bytes());
    assert_eq!(decode_greeting(&good), Ok(FLAG_FIXED_NEWSTYLE));
    let mut bad = good;
    bad[0] ^= 1;
    assert!(matches!(
        decode_greeting(&bad),
        Err(ClientError::BadMagic(_))
    ));
    let mut old_style = good;
    // The oldstyle handshake's magic where IHAVEOPT belongs.
    old_style[8..16].copy_from_slice(&0x0000_4202_8186_1253_u64.to_be_bytes());
    assert!(matches!(
        decode_greeting(&old_style),
        Err(ClientError::NotNewstyle(0x0000_4202_8186_1253))
    ));
    let mut not_fixed = good;
    not_fixed[16..18].copy_from_slice(&FLAG_NO_ZEROES.to_be_bytes());
    assert_eq!(
        decode_greeting(&not_fixed),
        Err(ClientError::NotFixedNewstyle(FLAG_NO_ZEROES))
    );
}

#[test]
fn option_reply_headers_check_magic_and_length() {
    let good = reply(REP_ACK, &[]);
    let head = good
        .first_chunk::<OPTION_REPLY_HEADER_LEN>()
        .expect("header");
    assert_eq!(
        decode_option_reply_header(head),
        Ok(OptionReplyHeader {
            option: OPT_GO,
            reply_type: REP_ACK,
            length: 0,
        })
    );
    let mut bad = *head;
    bad[7] ^= 0x10;
    assert!(matches!(
        decode_option_reply_header(&bad),
        Err(ClientError::BadOptionReplyMagic(_))
    ));
    let mut long = *head;
    long[16..20].copy_from_slice(&(OPTION_REPLY_DATA_MAX_BYTES + 1).to_be_bytes());
    assert_eq!(
        decode_option_reply_header(&long),
        Err(ClientError::OptionReplyTooLong(
            OPTION_REPLY_DATA_MAX_BYTES + 1
        ))
    );
    long[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(
        decode_option_reply_header(&long),
        Err(ClientError::OptionReplyTooLong(u32::MAX))
    );
    long[16..20].copy_from_slice(&OPTION_REPLY_DATA_MAX_BYTES.to_be_bytes());
    assert!(decode_option_reply_header(&long).is_ok());
}

#[test]
fn go_replies_take_the_export_and_ignore_other_info() {
    let export = InfoExport {
        size_bytes: 0x0123_4567_89ab_cdef,
        transmission_flags: 0x0102,
    };
    let mut bytes = reply(REP_INFO, &[0, 3, 0, 0, 2, 0, 0, 0, 16, 0, 0, 2, 0, 0]);
    bytes.extend(reply(REP_INFO, &export.encode()));
    bytes.extend(reply(REP_INFO, &[0, 99])); // an info type it never asked for
    bytes.extend(reply(REP_ACK, &[]));
    assert_eq!(read_go_replies(&bytes), Ok(Some(export)));
    let mut longer = export.encode().to_vec();
    longer.push(7);
    assert_eq!(InfoExport::decode(&longer), Ok(Some(export)));
}

#[test]
fn malformed_go_replies_name_what_is_wrong() {
    let ack = reply(REP_ACK, &[]);
    assert_eq!(read_go_replies(&ack), Err(ClientError::NoInfoExport));
    let short = reply(REP_INFO, &[0]);
    assert_eq!(read_go_replies(&short), Err(ClientError::ShortInfo(1)));
    let truncated = reply(REP_INFO, &[0; INFO_EXPORT_LEN - 1]);
    assert_eq!(
        read_go_replies(&truncated),
        Err(ClientError::ShortInfoExport(11))
    );
    let server = reply(REP_SERVER, b"\0\0\0\0");
    assert_eq!(
        read_go_replies(&server),
        Err(ClientError::UnexpectedReplyType(REP_SERVER))
    );
    let unknown = reply(77, &[]);
    assert_eq!(
        read_go_replies(&unknown),
        Err(ClientError::UnexpectedReplyType(77))
    );
    let refused = reply(REP_FLAG_ERROR | 42, b"why \xff");
    assert_eq!(
        read_go_replies(&refused),
        Err(ClientError::OptionRefused {
            reply_type: REP_FLAG_ERROR | 42,
            message: "why \u{fffd}".into(),
        })
    );
}

#[test]
fn requests_the_client_encodes_decode_on_the_server_to_the_same_fields() {
    for kind in [CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_TRIM] {
        let bytes = encode_request(kind, 7, 4096, 512);
        let header = decode_request_header(&bytes).expect("decode");
        assert_eq!(
            header,
            RequestHeader {
                flags: 0,
                kind,
                cookie: 7,
                offset: 4096,
                length: 512,
            }
        );
    }
}

#[test]
fn simple_replies_the_server_encodes_decode_on_the_client() {
    assert_eq!(
        decode_simple_reply(&encode_simple_reply(None, 9), 9),
        Ok(None)
    );
    for errno in [
        NbdErrno::Perm,
        NbdErrno::Io,
        NbdErrno::NoMem,
        NbdErrno::Inval,
        NbdErrno::NoSpc,
        NbdErrno::Overflow,
        NbdErrno::NotSup,
        NbdErrno::Shutdown,
    ] {
        let bytes = encode_simple_reply(Some(errno), u64::MAX);
        assert_eq!(
            decode_simple_reply(&bytes, u64::MAX),
            Ok(Some(errno.code()))
        );
    }
}

#[test]
fn malformed_simple_replies_name_what_is_wrong() {
    let mut bad = encode_simple_reply(None, 1);
    bad[0] ^= 0x80;
    assert!(matches!(
        decode_simple_reply(&bad, 1),
        Err(ClientError::BadReplyMagic(_))
    ));
    assert_eq!(
        decode_simple_reply(&encode_simple_reply(None, 1), 2),
        Err(ClientError::ReplyOutOfStep {
            expected: 2,
            got: 1
        })
    );
}

#[test]
fn errors_name_what_was_wrong() {
    let text = ClientError::OptionReplyTooLong(1 << 20).to_string();
    assert!(text.contains("1048576") && text.contains("65536"), "{text}");
    let text = ClientError::BadMagic(1).to_string();
    assert!(text.contains("bad magic"), "{text}");
    let text = ClientError::UnexpectedReplyType(77).to_string();
    assert!(text.contains("unexpected option reply type 77"), "{text}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn client_request_headers_round_trip(
        kind in any::<u16>(), cookie in any::<u64>(), offset in any::<u64>(), length in any::<u32>(),
    ) {
        let header = decode_request_header(&encode_request(kind, cookie, offset, length));
        prop_assert_eq!(header, Ok(RequestHeader { flags: 0, kind, cookie, offset, length }));
    }

    #[test]
    fn simple_replies_round_trip(code in 1u32..200, cookie in any::<u64>()) {
        let mut bytes = encode_simple_reply(None, cookie);
        bytes[4..8].copy_from_slice(&code.to_be_bytes());
        prop_assert_eq!(decode_simple_reply(&bytes, cookie), Ok(Some(code)));
    }

    #[test]
    fn client_decoders_survive_arbitrary_bytes(
        data in proptest::collection::vec(any::<u8>(), 0..2048), reply_type in any::<u32>(),
    ) {
        // Arbitrary bytes, and the same as the data of a reply of any type
        // and of an info reply: never a panic, lengths stay bounded.
        let _ = read_go_replies(&data);
        let _ = read_go_replies(&reply(reply_type, &data));
        let _ = read_go_replies(&reply(REP_INFO, &data));
        if let Some(head) = data.first_chunk::<OPTION_REPLY_HEADER_LEN>() {
            if let Ok(header) = decode_option_reply_header(head) {
                prop_assert!(header.length <= OPTION_REPLY_DATA_MAX_BYTES);
            }
        }
        let _ = InfoExport::decode(&data);
        if let Some(greeting) = data.first_chunk::<GREETING_LEN>() {
            let _ = decode_greeting(greeting);
        }
        if let Some(bytes) = data.first_chunk::<SIMPLE_REPLY_HEADER_LEN>() {
            let _ = decode_simple_reply(bytes, 0);
        }
    }
}
