//! `wcache serve --tls require` on a TCP port, with real libnbd clients
//! (nbdinfo, nbdcopy) and certificates made by openssl: a client with the
//! right certificates reads the size and writes and reads data back over
//! TLS; plaintext, a client certificate of another CA, and a client that
//! does not trust the server's CA are refused; a certificates directory
//! without the server's key refuses the start, naming the file, before the
//! cache file is created. The tools are required (scripts/test.sh installs
//! them): a missing one fails the test with the package to install.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::certs::{make_ca, sign, words};
use common::{wcache, Served};

/// Fails, naming the package, when `tool` is not installed.
fn need(tool: &str, package: &str) {
    let found = Command::new(tool).arg("--version").output().is_ok();
    assert!(
        found,
        "{tool} is not installed: apt-get install -y {package} (scripts/test.sh does)"
    );
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"))
}

/// The `nbds://HOST:PORT` part of the URI the server announced.
fn tls_address(log: &str) -> String {
    let at = log
        .find("nbds://")
        .unwrap_or_else(|| panic!("no nbds:// URI: {log}"));
    let rest = &log[at..];
    let end = rest["nbds://".len()..].find('/').expect("a path") + "nbds://".len();
    rest[..end].to_string()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn tls_require_serves_libnbd_clients_and_refuses_plaintext_and_strangers() {
    need("openssl", "openssl");
    need("nbdinfo", "libnbd-bin");
    need("nbdcopy", "libnbd-bin");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (good, other_ca) = (tmp.path().join("good"), tmp.path().join("other-ca"));
    make_ca(&good, "wcache test CA");
    sign(&good, &good, "server", "127.0.0.1");
    sign(&good, &good, "client", "127.0.0.1");
    make_ca(&other_ca, "another CA");
    // Trusts the server, but its certificate is another CA's.
    let stranger = tmp.path().join("stranger");
    sign(&stranger, &other_ca, "client", "127.0.0.1");
    std::fs::copy(good.join("ca-cert.pem"), stranger.join("ca-cert.pem")).expect("cp");
    // Has a certificate of ours, but trusts only another CA.
    let untrusting = tmp.path().join("untrusting");
    sign(&untrusting, &good, "client", "127.0.0.1");
    std::fs::copy(other_ca.join("ca-cert.pem"), untrusting.join("ca-cert.pem")).expect("cp");

    let good_dir = good.to_string_lossy().into_owned();
    let data_dir = tmp.path().join("data").to_string_lossy().into_owned();
    let args = format!(
        "--data-dir {data_dir} --cache mem --cache-size 64M --backing mem:256M \
         --listen 127.0.0.1:0 --tls require --tls-certificates {good_dir} --tls-verify-peer"
    );
    let args = words(&args);
    let served = Served::start(&args, &tmp.path().join("wcache.sock"));
    let address = tls_address(&served.log_text());
    let uri = |dir: &Path| format!("{address}/disk?tls-certificates={}", dir.display());

    let info = run("nbdinfo", &[&uri(&good)]);
    assert!(info.status.success(), "nbdinfo over TLS: {}", text(&info));
    let shown = String::from_utf8_lossy(&info.stdout);
    assert!(shown.contains("export-size: 268435456"), "{shown}");
    assert!(shown.contains("with TLS"), "{shown}");

    // 1 MiB written and read back through TLS.
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 31 % 253) as u8).collect();
    let file = tmp.path().join("data.bin");
    std::fs::write(&file, &data).expect("data file");
    let copied = run("nbdcopy", &[&file.to_string_lossy(), &uri(&good)]);
    assert!(copied.status.success(), "nbdcopy in: {}", text(&copied));
    let back = tmp.path().join("back.bin");
    let copied = run("nbdcopy", &[&uri(&good), &back.to_string_lossy()]);
    assert!(copied.status.success(), "nbdcopy out: {}", text(&copied));
    let read = std::fs::read(&back).expect("read back");
    assert_eq!(read.len(), 256 << 20);
    assert!(read[..data.len()] == data[..], "the data came back changed");

    let plain = address.replacen("nbds://", "nbd://", 1);
    let refused = run("nbdinfo", &[&format!("{plain}/disk")]);
    assert!(
        !refused.status.success(),
        "plaintext served: {}",
        text(&refused)
    );
    let refused = run("nbdinfo", &[&uri(&stranger)]);
    assert!(
        !refused.status.success(),
        "another CA's client served: {}",
        text(&refused)
    );
    let refused = run("nbdinfo", &[&uri(&untrusting)]);
    assert!(!refused.status.success(), "an untrusting client connected");
    let (stopped, log) = served.stop();
    assert!(stopped, "{log}");
    assert!(log.contains("NBD TLS handshake failed"), "{log}");
    // GnuTLS sends no certificate that the server's list of CAs does not
    // name; a client that sends one gets "invalid peer certificate".
    assert!(
        log.contains("error=peer sent no certificates")
            || log.contains("error=invalid peer certificate"),
        "{log}"
    );
}

#[test]
fn tls_require_refuses_to_start_without_the_server_key_naming_it() {
    need("openssl", "openssl");
    let tmp = tempfile::tempdir().expect("tempdir");
    let certs = tmp.path().join("certs");
    make_ca(&certs, "wcache test CA");
    sign(&certs, &certs, "server", "127.0.0.1");
    std::fs::remove_file(certs.join("server-key.pem")).expect("rm");
    let cache = tmp.path().join("cache.img");
    let (dir, cache_path) = (certs.to_string_lossy(), cache.to_string_lossy());
    let data_dir = tmp.path().join("data").to_string_lossy().into_owned();
    let common = format!(
        "serve --data-dir {data_dir} --cache {cache_path} --cache-size 64M --backing mem:256M \
         --listen 127.0.0.1:0 --tls require"
    );
    let common = words(&common);
    let with_dir = [&common[..], &["--tls-certificates", &dir]].concat();
    let (ok, _, err) = wcache(&with_dir);
    assert!(!ok, "started without server-key.pem");
    assert!(err.contains("server-key.pem: missing"), "{err}");
    assert!(
        !cache.exists(),
        "the cache file was created before the refusal"
    );
    let (ok, _, err) = wcache(&common);
    assert!(!ok, "started TLS without certificates");
    assert!(
        err.contains("--tls require needs --tls-certificates"),
        "{err}"
    );
    assert!(!cache.exists());
}
