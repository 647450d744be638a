//! Certificates for the TLS tests, made by openssl (scripts/test.sh
//! installs it): a CA, and server or client certificates it signs.

use std::path::Path;
use std::process::Command;

pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `text` split at spaces (the paths here have none).
pub fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

/// A CA in `dir`: ca-cert.pem and ca-key.pem.
pub fn make_ca(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut args = words(
        "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
         -keyout ca-key.pem -out ca-cert.pem -addext basicConstraints=critical,CA:TRUE \
         -addext keyUsage=critical,keyCertSign,cRLSign -subj",
    );
    let subject = format!("/CN={name}");
    args.push(&subject);
    openssl(dir, &args);
}

/// `SIDE-cert.pem` and `SIDE-key.pem` (SIDE: server or client) in `dir`,
/// signed by the CA in `ca_dir`, for localhost and `ip`.
pub fn sign(dir: &Path, ca_dir: &Path, side: &str, ip: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let usage = if side == "server" {
        "serverAuth"
    } else {
        "clientAuth"
    };
    let text = format!("subjectAltName=DNS:localhost,IP:{ip}\nextendedKeyUsage={usage}\n");
    std::fs::write(dir.join(format!("{side}.ext")), text).expect("ext file");
    let request = format!(
        "req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN={side} \
         -keyout {side}-key.pem -out {side}.csr"
    );
    openssl(dir, &words(&request));
    let ca = ca_dir.display();
    let signing = format!(
        "x509 -req -in {side}.csr -CA {ca}/ca-cert.pem -CAkey {ca}/ca-key.pem -set_serial 2 \
         -days 30 -extfile {side}.ext -out {side}-cert.pem"
    );
    openssl(dir, &words(&signing));
}
