//! NbdDevice against a real NBD server (nbdkit's memory plugin): the client
//! round-trips bytes, and the driver runs with a remote export as backing.
//! Prints SKIP when nbdkit is missing, unless WCACHE_REQUIRE_TOOLS=1. And
//! against wcache-nbd's own server, whose codec the client shares.

mod common;

use std::os::unix::net::UnixListener;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::have;
use wcache_core::types::VolumeId;
use wcache_core::{EngineConfig, WritePolicyKind};
use wcache_io::{BlockDevice, Driver, DriverConfig, MemDevice, NbdDevice};
use wcache_nbd::{Export, MemExport, Server};

struct Nbdkit(Child);
impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nbdkit_memory(socket: &std::path::Path, size: &str) -> Nbdkit {
    let child = Command::new("nbdkit")
        .args(["-f", "-U"])
        .arg(socket)
        .args(["--exportname=disk", "memory", size])
        .spawn()
        .expect("start nbdkit");
    let start = Instant::now();
    while !socket.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nbdkit did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Nbdkit(child)
}

#[test]
fn nbd_device_round_trips_against_nbdkit_and_backs_the_driver() {
    if !have("nbdkit") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("kit.sock");
    let _kit = nbdkit_memory(&socket, "4M");
    let uri = format!("nbd+unix:///disk?socket={}", socket.display());
    let dev = Arc::new(NbdDevice::connect(&uri, 3).expect("connect"));
    assert_eq!(dev.len_bytes(), 4 << 20);
    assert!(dev.connections() >= 1);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
    dev.write_at(&data, 4096 + 512).expect("write");
    dev.flush().expect("flush");
    let mut back = vec![0u8; data.len()];
    dev.read_at(&mut back, 4096 + 512).expect("read");
    assert!(back == data);
    dev.trim(0, 1 << 20).expect("trim");
    assert!(
        dev.read_at(&mut [0u8; 10], (4 << 20) - 5).is_err(),
        "past the end"
    );

    let config = EngineConfig {
        cache_slots: 64,
        group_size_bytes: 16 * 1024,
        write_policy: WritePolicyKind::WriteBack,
        ..EngineConfig::default()
    };
    let driver = Driver::new(
        config,
        Arc::new(MemDevice::new(64 * 4096)),
        vec![dev.clone() as Arc<dyn BlockDevice>],
        DriverConfig::default(),
    )
    .expect("driver");
    let page: Vec<u8> = (0..4096u32).map(|i| (i % 13) as u8 + 1).collect();
    for i in 0..200u64 {
        driver
            .write(VolumeId(0), i * 4096, &page, false)
            .expect("write");
    }
    driver.drain().expect("drain");
    let mut remote = vec![0u8; 4096];
    dev.read_at(&mut remote, 199 * 4096).expect("read remote");
    assert!(remote == page, "destaged page reached the remote export");
}

#[test]
fn nbd_device_talks_to_wcache_nbds_own_server_and_is_refused_an_unknown_export() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("own.sock");
    let export: Arc<dyn Export> = Arc::new(MemExport::new(1 << 20, 512));
    let mut server = Server::builder()
        .export("disk", export)
        .start()
        .expect("server");
    let listener = UnixListener::bind(&socket).expect("bind");
    server.listen_unix(listener).expect("listen");
    let uri = |name: &str| format!("nbd+unix:///{name}?socket={}", socket.display());
    let dev = NbdDevice::connect(&uri("disk"), 2).expect("connect");
    assert_eq!(dev.len_bytes(), 1 << 20);
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    dev.write_at(&data, 4096).expect("write");
    dev.flush().expect("flush");
    let mut back = vec![0u8; data.len()];
    dev.read_at(&mut back, 4096).expect("read");
    assert!(back == data);
    dev.trim(0, 1 << 20).expect("trim");
    let refused = NbdDevice::connect(&uri("nope"), 1).err().expect("refused");
    let text = refused.to_string();
    assert!(text.contains("server refused export \"nope\""), "{text}");
    drop(dev);
    server.stop();
}
