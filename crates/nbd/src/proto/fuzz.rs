//! Entry points for fuzzers (cargo-fuzz, proptest): feed arbitrary bytes to
//! the parsers and check the allocation bounds. They panic only on a bug.

use super::*;

/// Feed `data` to a handshake in chunks whose sizes come from `data`
/// itself; assert buffers stay bounded.
pub fn handshake(data: &[u8]) {
    let mut exports = vec![ExportInfo::new("a", 1 << 20, 512, true)];
    exports.push(ExportInfo::new("", 4096, 1, false));
    let mode = match data.first().map(|b| b % 3) {
        Some(1) => TlsMode::On,
        Some(2) => TlsMode::Require,
        _ => TlsMode::Off,
    };
    let mut machine = Handshake::new(exports, Some(0)).with_tls(mode);
    let mut at = 0usize;
    let mut step = 1usize;
    while at < data.len() {
        let end = (at + step).min(data.len());
        match machine.handle_input(&data[at..end]) {
            Ok(used) => {
                assert!(used <= end - at);
                if used < end - at && !machine.is_awaiting_tls() {
                    assert!(machine.is_finished());
                    break;
                }
            }
            Err(_) => break,
        }
        assert!(machine.buffered_len() <= OPTION_DATA_MAX_BYTES as usize);
        // A chunk of ≤ 37 bytes completes at most 3 options; replies are
        // bounded by the export list, never by lengths the client claims.
        assert!(machine.output().len() <= 4096);
        machine.clear_output();
        while let Some(event) = machine.poll_event() {
            if event == HandshakeEvent::StartTls {
                // As if the TLS handshake succeeded: the rest is option haggling again.
                machine.tls_started();
            }
        }
        step = usize::from(data[at]) % 37 + 1;
        at = end;
    }
}

/// Parse `data` as a stream of transmission requests against a small
/// export, skipping payloads as the server would; assert that no
/// accepted payload exceeds the limits.
pub fn requests(data: &[u8]) {
    let geometry = Geometry {
        size_bytes: 1 << 20,
        block_size_min_bytes: 512,
        payload_max_bytes: PAYLOAD_MAX_BYTES,
    };
    let mut rest = data;
    while rest.len() >= REQUEST_HEADER_LEN {
        let mut bytes = [0u8; REQUEST_HEADER_LEN];
        bytes.copy_from_slice(&rest[..REQUEST_HEADER_LEN]);
        rest = &rest[REQUEST_HEADER_LEN..];
        let header = match decode_request_header(&bytes) {
            Ok(header) => header,
            Err(_) => {
                // Try again as if the magic were right: exercise validation.
                bytes[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
                match decode_request_header(&bytes) {
                    Ok(header) => header,
                    Err(_) => unreachable!("magic was just fixed"),
                }
            }
        };
        let decision = decide(&header, &geometry);
        assert_eq!(decision.cookie, header.cookie);
        let skip = match decision.payload {
            Payload::None => 0,
            Payload::Receive(len) => {
                assert!(len <= geometry.payload_max_bytes);
                assert!(matches!(decision.command, Ok(Command::Write { .. })));
                assert!(header.offset + u64::from(len) <= geometry.size_bytes);
                len as usize
            }
            Payload::Discard(len) => {
                assert!(decision.command.is_err());
                len as usize
            }
        };
        if let Ok(Command::Read { offset, length }) = decision.command {
            assert!(length <= geometry.payload_max_bytes);
            assert!(offset + u64::from(length) <= geometry.size_bytes);
        }
        rest = &rest[skip.min(rest.len())..];
    }
}
