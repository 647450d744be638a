//! The server with `ServerTls::Require` over TCP, driven byte by byte: an
//! option before STARTTLS is refused with NBD_REP_ERR_TLS_REQD, STARTTLS is
//! acknowledged in plaintext, and after a TLS handshake (`TlsStream`, the
//! client side) NBD_OPT_GO, a WRITE and a READ go over TLS. Certificates
//! are made here with rcgen: no external tool.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use wcache_nbd::proto::{
    client, IHAVEOPT, OPTION_REPLY_MAGIC, OPT_GO, OPT_STARTTLS, REP_ACK, REP_ERR_TLS_REQD,
    REP_INFO, REQUEST_MAGIC, SIMPLE_REPLY_MAGIC,
};
use wcache_nbd::tls::{self, ClientAuth, TlsStream};
use wcache_nbd::{MemExport, Server, ServerConfig, ServerTls};

/// A directory with a CA's certificate and a server's for 127.0.0.1.
fn certificates() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wcache-starttls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("CA");
    let key = KeyPair::generate().expect("key");
    let params = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
    let cert = params.signed_by(&key, &ca).expect("sign");
    std::fs::write(dir.join(tls::CA_CERT_FILE), ca.pem()).expect("write");
    std::fs::write(dir.join(tls::SERVER_CERT_FILE), cert.pem()).expect("write");
    std::fs::write(dir.join(tls::SERVER_KEY_FILE), key.serialize_pem()).expect("write");
    dir
}

fn send_option(stream: &mut impl Write, option: u32, data: &[u8]) {
    let mut out = Vec::new();
    client::encode_option(&mut out, option, data);
    stream.write_all(&out).expect("option");
}

/// (option, reply type, data) of the next option reply.
fn option_reply(stream: &mut impl Read) -> (u32, u32, Vec<u8>) {
    let mut header = [0u8; 20];
    stream.read_exact(&mut header).expect("reply header");
    assert_eq!(&header[..8], &OPTION_REPLY_MAGIC.to_be_bytes());
    let word = |at: usize| u32::from_be_bytes(header[at..at + 4].try_into().expect("word"));
    let mut data = vec![0u8; word(16) as usize];
    stream.read_exact(&mut data).expect("reply data");
    (word(8), word(12), data)
}

fn go_data() -> Vec<u8> {
    let mut data = Vec::new();
    client::encode_info_request(&mut data, b"disk", &[]).expect("short name");
    data
}

/// One request and its simple reply's error; a READ's data into `read`.
fn call(stream: &mut TlsStream, kind: u16, payload: &[u8], read: &mut [u8]) -> u32 {
    let length = (payload.len() + read.len()) as u32;
    let mut request = Vec::new();
    request.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    request.extend_from_slice(&0u16.to_be_bytes());
    request.extend_from_slice(&kind.to_be_bytes());
    request.extend_from_slice(&7u64.to_be_bytes());
    request.extend_from_slice(&4096u64.to_be_bytes());
    request.extend_from_slice(&length.to_be_bytes());
    request.extend_from_slice(payload);
    stream.write_all(&request).expect("request");
    let mut reply = [0u8; 16];
    stream.read_exact(&mut reply).expect("reply");
    assert_eq!(&reply[..4], &SIMPLE_REPLY_MAGIC.to_be_bytes());
    assert_eq!(&reply[8..], &7u64.to_be_bytes());
    stream.read_exact(read).expect("read data");
    u32::from_be_bytes(reply[4..8].try_into().expect("error"))
}

#[test]
fn require_refuses_plaintext_options_then_serves_over_tls() {
    let dir = certificates();
    let config = tls::server_config(&dir, ClientAuth::None).expect("server config");
    let mut server = Server::builder()
        .export("disk", Arc::new(MemExport::new(1 << 20, 512)))
        .config(ServerConfig {
            tls: ServerTls::Require(config),
            ..ServerConfig::default()
        })
        .start()
        .expect("start");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    server.listen_tcp(listener).expect("listen");

    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut greeting = [0u8; 18];
    tcp.read_exact(&mut greeting).expect("greeting");
    assert_eq!(&greeting[8..16], &IHAVEOPT.to_be_bytes());
    tcp.write_all(&3u32.to_be_bytes())
        .expect("fixed newstyle, no zeroes");
    send_option(&mut tcp, OPT_GO, &go_data());
    assert_eq!(option_reply(&mut tcp).1, REP_ERR_TLS_REQD);
    send_option(&mut tcp, OPT_STARTTLS, &[]);
    assert_eq!(option_reply(&mut tcp), (OPT_STARTTLS, REP_ACK, Vec::new()));

    let client_config = tls::client_config(&dir).expect("client config");
    let mut stream = TlsStream::client(tcp, client_config, "127.0.0.1").expect("client");
    stream.handshake().expect("TLS handshake");
    assert!(
        stream.negotiated().starts_with("TLSv1_3"),
        "{}",
        stream.negotiated()
    );
    send_option(&mut stream, OPT_GO, &go_data());
    loop {
        let (option, reply_type, _) = option_reply(&mut stream);
        assert_eq!(option, OPT_GO);
        match reply_type {
            REP_INFO => continue,
            REP_ACK => break,
            other => panic!("NBD_OPT_GO over TLS answered {other:#x}"),
        }
    }
    let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(call(&mut stream, 1, &data, &mut []), 0, "WRITE");
    let mut back = vec![0u8; 4096];
    assert_eq!(call(&mut stream, 0, &[], &mut back), 0, "READ");
    assert!(back == data, "the data came back changed");
    drop(stream);
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
