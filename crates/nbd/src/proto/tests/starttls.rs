//! `NBD_OPT_STARTTLS` and the three TLS modes of the handshake.

use super::*;

/// A handshake in `mode` past the greeting and fixed-newstyle client flags.
fn started_tls(mode: TlsMode) -> Handshake {
    let mut machine = Handshake::new(exports(), None).with_tls(mode);
    machine.clear_output();
    assert_eq!(machine.handle_input(&BOTH.to_be_bytes()), Ok(4));
    machine
}

/// Sends one option; returns the reply types, and clears the output.
fn reply_types(machine: &mut Handshake, opt: u32, data: &[u8]) -> Vec<u32> {
    let input = option(opt, data);
    assert_eq!(machine.handle_input(&input), Ok(input.len()));
    let replies = parse_replies(machine.output());
    machine.clear_output();
    assert!(replies.iter().all(|r| r.option == opt));
    replies.iter().map(|r| r.reply_type).collect()
}

/// STARTTLS accepted: ACK, then `StartTls`, then nothing consumed until
/// `tls_started`.
fn upgrade(machine: &mut Handshake) {
    let mut input = option(OPT_STARTTLS, &[]);
    let starttls_len = input.len();
    input.extend_from_slice(&[0x16, 0x03, 0x01]); // a TLS ClientHello begins
    assert_eq!(machine.handle_input(&input), Ok(starttls_len));
    let replies = parse_replies(machine.output());
    machine.clear_output();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ACK);
    assert_eq!(machine.poll_event(), Some(HandshakeEvent::StartTls));
    assert!(machine.is_awaiting_tls());
    assert_eq!(machine.handle_input(&input[starttls_len..]), Ok(0));
    machine.tls_started();
    assert!(!machine.is_awaiting_tls());
}

fn go_disk(machine: &mut Handshake) -> Vec<u32> {
    reply_types(machine, OPT_GO, &info_data("disk", &[]))
}

#[test]
fn off_refuses_starttls_with_err_policy_and_never_requires_tls() {
    let mut machine = started_tls(TlsMode::Off);
    assert_eq!(
        reply_types(&mut machine, OPT_STARTTLS, &[]),
        vec![REP_ERR_POLICY]
    );
    assert_eq!(machine.poll_event(), None);
    assert!(!machine.is_awaiting_tls());
    assert_eq!(
        reply_types(&mut machine, OPT_LIST, &[]),
        vec![REP_SERVER, REP_SERVER, REP_ACK]
    );
    assert_eq!(*go_disk(&mut machine).last().expect("ack"), REP_ACK);
    assert!(matches!(
        machine.poll_event(),
        Some(HandshakeEvent::Ready { .. })
    ));
}

#[test]
fn require_refuses_every_option_before_tls_with_err_tls_reqd() {
    let mut machine = started_tls(TlsMode::Require);
    let info = info_data("disk", &[INFO_NAME]);
    let refused: [(u32, &[u8]); 6] = [
        (OPT_LIST, &[]),
        (OPT_INFO, &info),
        (OPT_GO, &info),
        (OPT_STRUCTURED_REPLY, &[]),
        (OPT_SET_META_CONTEXT, &[1, 2, 3]),
        (4242, &[]),
    ];
    for (opt, data) in refused {
        assert_eq!(
            reply_types(&mut machine, opt, data),
            vec![REP_ERR_TLS_REQD],
            "option {opt}"
        );
        assert_eq!(machine.poll_event(), None);
    }
    // Skipped unread, an oversized option is refused for TLS too.
    let length = OPTION_DATA_MAX_BYTES + 1;
    let mut input = Vec::new();
    input.extend_from_slice(&IHAVEOPT.to_be_bytes());
    input.extend_from_slice(&OPT_INFO.to_be_bytes());
    input.extend_from_slice(&length.to_be_bytes());
    input.resize(input.len() + length as usize, 0);
    assert_eq!(machine.handle_input(&input), Ok(input.len()));
    let replies = parse_replies(machine.output());
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].reply_type, REP_ERR_TLS_REQD);
    assert!(!machine.is_finished());
}

#[test]
fn require_closes_on_export_name_before_tls() {
    let mut machine = started_tls(TlsMode::Require);
    let err = machine
        .handle_input(&option(OPT_EXPORT_NAME, b"disk"))
        .expect_err("EXPORT_NAME cannot be refused: the connection closes");
    assert_eq!(err, HandshakeError::TlsRequired);
    assert!(machine.is_finished());
    assert!(
        machine.output().is_empty(),
        "nothing about the export leaks"
    );
}

#[test]
fn require_lets_abort_through_before_tls() {
    let mut machine = started_tls(TlsMode::Require);
    assert_eq!(reply_types(&mut machine, OPT_ABORT, &[]), vec![REP_ACK]);
    assert_eq!(machine.poll_event(), Some(HandshakeEvent::Aborted));
}

#[test]
fn require_serves_after_starttls_and_refuses_a_second_one() {
    let mut machine = started_tls(TlsMode::Require);
    upgrade(&mut machine);
    assert_eq!(
        reply_types(&mut machine, OPT_STARTTLS, &[]),
        vec![REP_ERR_INVALID]
    );
    assert_eq!(
        reply_types(&mut machine, OPT_LIST, &[]),
        vec![REP_SERVER, REP_SERVER, REP_ACK]
    );
    let types = go_disk(&mut machine);
    assert_eq!(types.last(), Some(&REP_ACK));
    assert!(!types.contains(&REP_ERR_TLS_REQD));
    assert!(matches!(
        machine.poll_event(),
        Some(HandshakeEvent::Ready {
            export_index: 0,
            ..
        })
    ));
}

#[test]
fn on_allows_plaintext_and_an_upgrade() {
    let mut plain = started_tls(TlsMode::On);
    assert_eq!(go_disk(&mut plain).last(), Some(&REP_ACK));
    assert!(matches!(
        plain.poll_event(),
        Some(HandshakeEvent::Ready { .. })
    ));
    let mut upgraded = started_tls(TlsMode::On);
    assert_eq!(
        reply_types(&mut upgraded, OPT_STARTTLS, &[9]),
        vec![REP_ERR_INVALID],
        "STARTTLS takes no data"
    );
    upgrade(&mut upgraded);
    assert_eq!(go_disk(&mut upgraded).last(), Some(&REP_ACK));
}
