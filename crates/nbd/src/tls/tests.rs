//! The certificates directory's errors, and `TlsStream` over loopback TCP
//! with certificates made here (rcgen): a round trip with one thread
//! reading while another writes, mutual authentication, expiry.

use super::*;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// A fresh, empty directory under the temporary directory.
fn temp_dir(name: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("wcache-tls-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A CA that signs server and client certificates into directories.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().expect("key");
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA"),
        }
    }

    /// Writes `{cert_name, key_name}` signed by this CA into `dir`.
    fn sign_into(&self, dir: &Path, (cert_name, key_name): (&str, &str), expired: bool) {
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let mut params = CertificateParams::new(names).expect("params");
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        if expired {
            params.not_before = rcgen::date_time_ymd(2001, 1, 1);
            params.not_after = rcgen::date_time_ymd(2002, 1, 1);
        }
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        std::fs::write(dir.join(cert_name), cert.pem()).expect("write cert");
        std::fs::write(dir.join(key_name), key.serialize_pem()).expect("write key");
    }

    fn ca_into(&self, dir: &Path) {
        std::fs::write(dir.join(CA_CERT_FILE), self.issuer.pem()).expect("write CA");
    }
}

const SERVER: (&str, &str) = (SERVER_CERT_FILE, SERVER_KEY_FILE);
const CLIENT: (&str, &str) = (CLIENT_CERT_FILE, CLIENT_KEY_FILE);

/// A directory with this CA's certificate, a server's and a client's.
fn full_dir(ca: &Ca, name: &str) -> PathBuf {
    let dir = temp_dir(name);
    ca.ca_into(&dir);
    ca.sign_into(&dir, SERVER, false);
    ca.sign_into(&dir, CLIENT, false);
    dir
}

/// Connects a client to a server over loopback and runs both handshakes;
/// returns (server's result, client's result).
fn connect(
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
) -> (io::Result<TlsStream>, io::Result<TlsStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepting = thread::spawn(move || {
        let (tcp, _) = listener.accept().expect("accept");
        tcp.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let stream = TlsStream::server(tcp, server)?;
        stream.handshake()?;
        // TLS 1.3: the client's certificate is judged after the client's
        // handshake ended; a refusal reaches it on its first read.
        (&stream).write_all(b"ok")?;
        Ok(stream)
    });
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let client = TlsStream::client(tcp, client, "127.0.0.1").and_then(|stream| {
        stream.handshake()?;
        let mut ok = [0u8; 2];
        (&stream).read_exact(&mut ok)?;
        assert_eq!(&ok, b"ok");
        Ok(stream)
    });
    (accepting.join().expect("server thread"), client)
}

#[test]
fn a_reader_and_a_writer_share_a_stream_across_threads() {
    let ca = Ca::new("test CA");
    let dir = full_dir(&ca, "round-trip");
    let server = server_config(&dir, ClientAuth::Required).expect("server config");
    let client = client_config(&dir).expect("client config");
    let (server, client) = connect(server, client);
    let (server, client) = (server.expect("server"), client.expect("client"));
    // The server echoes: one thread reads, another writes what it read.
    let (chunks, echoed) = mpsc::channel::<Vec<u8>>();
    let server_writer = server.try_clone().expect("clone");
    let writing = thread::spawn(move || {
        for chunk in echoed {
            (&server_writer).write_all(&chunk).expect("echo");
        }
    });
    let reading = thread::spawn(move || {
        let mut buf = vec![0u8; 10_000];
        loop {
            match (&server).read(&mut buf) {
                Ok(0) => return,
                Ok(n) => chunks.send(buf[..n].to_vec()).expect("send"),
                Err(e) => panic!("server read: {e}"),
            }
        }
    });
    let sent: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let client_reader = client.try_clone().expect("clone");
    let expected = sent.len();
    let receiving = thread::spawn(move || {
        let mut got = vec![0u8; expected];
        (&client_reader).read_exact(&mut got).expect("echoed");
        got
    });
    for piece in sent.chunks(4096 + 16) {
        (&client).write_all(piece).expect("client write");
    }
    let got = receiving.join().expect("receiver");
    assert!(got == sent, "the bytes came back changed");
    client.close_notify().expect("close_notify");
    reading.join().expect("reader ends at close_notify");
    writing.join().expect("writer");
}

#[test]
fn a_blocked_reader_does_not_hold_up_a_writer() {
    let ca = Ca::new("test CA");
    let dir = full_dir(&ca, "blocked");
    let server = server_config(&dir, ClientAuth::None).expect("server config");
    let (server, client) = connect(server, client_config(&dir).expect("client config"));
    let (server, client) = (server.expect("server"), client.expect("client"));
    let server_reader = server.try_clone().expect("clone");
    let (done, blocked) = mpsc::channel();
    let reading = thread::spawn(move || {
        let mut byte = [0u8; 1];
        let n = (&server_reader).read(&mut byte).expect("read");
        done.send(n).expect("send");
    });
    thread::sleep(Duration::from_millis(50));
    assert!(
        blocked.try_recv().is_err(),
        "the reader waits for the client"
    );
    for _ in 0..100 {
        (&server)
            .write_all(&[5u8; 4096])
            .expect("write while a read waits");
    }
    let mut got = vec![0u8; 100 * 4096];
    (&client).read_exact(&mut got).expect("client read");
    assert!(got.iter().all(|&b| b == 5));
    (&client).write_all(b"x").expect("wake the reader");
    assert_eq!(blocked.recv_timeout(Duration::from_secs(10)), Ok(1));
    reading.join().expect("reader");
}

#[test]
fn required_client_auth_refuses_a_client_of_another_ca_or_none() {
    let ca = Ca::new("test CA");
    let dir = full_dir(&ca, "mutual");
    let server = server_config(&dir, ClientAuth::Required).expect("server config");
    // Trusts the right CA, but its own certificate is another CA's.
    let stranger = temp_dir("stranger");
    ca.ca_into(&stranger);
    Ca::new("other CA").sign_into(&stranger, CLIENT, false);
    let (refused, client) = connect(Arc::clone(&server), client_config(&stranger).expect("cfg"));
    let error = refused.expect_err("the server refuses the client");
    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    assert!(
        error.to_string().contains("invalid peer certificate"),
        "{error}"
    );
    assert!(client.is_err(), "the client is told");
    // No client certificate at all.
    let anonymous = temp_dir("anonymous");
    ca.ca_into(&anonymous);
    let (refused, _) = connect(server, client_config(&anonymous).expect("cfg"));
    let error = refused.expect_err("the server refuses the client");
    assert!(error.to_string().contains("certificate"), "{error}");
}

#[test]
fn a_client_refuses_an_expired_or_unknown_server_certificate() {
    let ca = Ca::new("test CA");
    let expired = temp_dir("expired");
    ca.ca_into(&expired);
    ca.sign_into(&expired, SERVER, true);
    let server =
        server_config(&expired, ClientAuth::None).expect("loads: expiry is judged by peers");
    let (_, client) = connect(server, client_config(&expired).expect("cfg"));
    let error = client.expect_err("the client refuses");
    assert!(error.to_string().contains("xpired"), "{error}");
    let other = full_dir(&Ca::new("other CA"), "other");
    let server = server_config(&other, ClientAuth::None).expect("server config");
    let (_, client) = connect(server, client_config(&expired).expect("cfg"));
    let error = client.expect_err("the client refuses");
    assert!(error.to_string().contains("UnknownIssuer"), "{error}");
}

#[test]
fn missing_and_bad_files_are_named_with_the_reason() {
    let ca = Ca::new("test CA");
    let dir = temp_dir("bad");
    let message = |e: TlsError| e.to_string();
    let e = message(server_config(&dir, ClientAuth::None).expect_err("no files"));
    assert!(e.ends_with("server-cert.pem: missing"), "{e}");
    ca.sign_into(&dir, SERVER, false);
    std::fs::remove_file(dir.join(SERVER_KEY_FILE)).expect("rm");
    let e = message(server_config(&dir, ClientAuth::None).expect_err("no key"));
    assert!(e.ends_with("server-key.pem: missing"), "{e}");
    std::fs::copy(dir.join(SERVER_CERT_FILE), dir.join(SERVER_KEY_FILE)).expect("cp");
    let e = server_config(&dir, ClientAuth::None).expect_err("a cert as key");
    assert!(matches!(e, TlsError::NoPrivateKey { .. }), "{e}");
    assert!(
        e.to_string().contains("server-key.pem: no private key"),
        "{e}"
    );
    // A key of another certificate.
    let other = temp_dir("other");
    ca.sign_into(&other, SERVER, false);
    std::fs::copy(other.join(SERVER_KEY_FILE), dir.join(SERVER_KEY_FILE)).expect("cp");
    let e = message(server_config(&dir, ClientAuth::None).expect_err("mismatch"));
    assert!(
        e.contains("server-key.pem: does not match the certificate in"),
        "{e}"
    );
    assert!(e.ends_with("server-cert.pem"), "{e}");
    std::fs::copy(other.join(SERVER_KEY_FILE), dir.join(SERVER_CERT_FILE)).expect("cp");
    let e = message(server_config(&dir, ClientAuth::None).expect_err("a key as cert"));
    assert!(e.contains("server-cert.pem: no certificate in it"), "{e}");
    // Mutual authentication needs the CA; a client's key needs its certificate's.
    ca.sign_into(&dir, SERVER, false);
    let e = message(server_config(&dir, ClientAuth::Required).expect_err("no CA"));
    assert!(e.ends_with("ca-cert.pem: missing"), "{e}");
    ca.ca_into(&dir);
    server_config(&dir, ClientAuth::Required).expect("complete");
    ca.sign_into(&dir, CLIENT, false);
    std::fs::remove_file(dir.join(CLIENT_KEY_FILE)).expect("rm");
    let e = message(client_config(&dir).expect_err("no client key"));
    assert!(e.ends_with("client-key.pem: missing"), "{e}");
}
