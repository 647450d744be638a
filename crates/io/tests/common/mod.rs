//! Helpers shared by the tests that need external tools (nbdkit).

use std::process::{Command, Stdio};

/// True if `tool` runs; otherwise prints SKIP, or fails under
/// WCACHE_REQUIRE_TOOLS=1.
pub fn have(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var("WCACHE_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "{tool} is required (WCACHE_REQUIRE_TOOLS=1)"
        );
        eprintln!("SKIP: {tool} not installed (apt-get install -y nbdkit)");
    }
    found
}
