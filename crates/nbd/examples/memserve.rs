//! Serve a MemExport on a Unix socket until stdin closes (for manual checks
//! and benchmarks): `cargo run --example memserve -- /tmp/nbd.sock 64 [workers]`.

use std::sync::Arc;

use wcache_nbd::{MemExport, Server, ServerConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "/tmp/wcache-nbd.sock".into());
    let size_mib: u64 = args.next().map_or(Ok(64), |s| s.parse())?;
    let _ = std::fs::remove_file(&path);
    let export = Arc::new(MemExport::new(size_mib * 1024 * 1024, 512));
    let mut config = ServerConfig::default();
    if let Some(workers) = args.next() {
        config.workers_count = workers.parse()?;
    }
    let mut server = Server::builder()
        .export("disk", export)
        .config(config)
        .start()?;
    server.listen_unix(std::os::unix::net::UnixListener::bind(&path)?)?;
    eprintln!("serving nbd+unix:///disk?socket={path}; close stdin to stop");
    let mut sink = String::new();
    while std::io::stdin().read_line(&mut sink)? > 0 {}
    server.stop();
    let _ = std::fs::remove_file(&path);
    Ok(())
}
