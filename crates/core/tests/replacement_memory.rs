//! Pins the metadata each replacement policy reports, per slot, so that a
//! change in per-slot state is seen (the engine's budget is 32 bytes of
//! metadata per cached 4 KiB page, all structures together).

use wcache_core::policy::replacement::{build_replacement, REPLACEMENTS};

const SLOTS: usize = 1 << 20; // 4 GiB of 4 KiB pages

/// Exact `metadata_bytes()` for 2^20 slots.
fn expected_bytes(name: &str) -> usize {
    let bit_bytes = SLOTS / 8;
    match name {
        // prev + next u32, present bit
        "lru" => 8 * SLOTS + bit_bytes,
        // prev + next u32, present and referenced bits
        "clock" => 8 * SLOTS + 2 * bit_bytes,
        // resident: prev + next u32, key u64, present and in_t2 bits;
        // ghosts (c entries): prev + next u32, key u64, in_b2 bit;
        // ghost index: u32 per entry, next power of two above 1.5 c.
        "arc" => 16 * SLOTS + 2 * bit_bytes + 16 * SLOTS + bit_bytes + 4 * (2 * SLOTS),
        other => panic!("no expectation for {other}"),
    }
}

#[test]
fn replacement_metadata_bytes_per_slot() {
    for name in REPLACEMENTS.names() {
        let policy = build_replacement(name, SLOTS).expect("listed name builds");
        let bytes = policy.metadata_bytes();
        eprintln!("{name}: {:.3} bytes per slot", bytes as f64 / SLOTS as f64);
        assert_eq!(bytes, expected_bytes(name), "{name}");
    }
}

#[test]
fn replacement_lru_and_clock_stay_under_9_bytes_per_slot() {
    for name in ["lru", "clock"] {
        let policy = build_replacement(name, SLOTS).expect("listed name builds");
        assert!(policy.metadata_bytes() <= 9 * SLOTS, "{name}");
    }
}
