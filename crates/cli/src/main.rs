//! The `wcache` binary.
fn main() {}
