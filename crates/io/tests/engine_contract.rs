//! The engine's persistence contract as the driver relies on it, checked on
//! the engine alone: a slot whose record is dirty is reused only after
//! FreeSlots has durably freed it (EngineConfig::persistent).

use std::collections::HashSet;

use wcache_core::time::Nanos;
use wcache_core::types::{RequestId, VolumeId};
use wcache_core::{Engine, EngineConfig, IoCommand, Request, RequestFlags, RequestKind};

fn run(engine: &mut Engine, freed: &mut HashSet<u32>, live: &mut HashSet<u32>) -> Vec<String> {
    let mut violations = Vec::new();
    while let Some(cmd) = engine.poll_command() {
        match &cmd {
            IoCommand::WritePage { slot, .. } => {
                if live.contains(&slot.0) && !freed.contains(&slot.0) {
                    violations.push(format!(
                        "WritePage into slot {} whose record was never freed",
                        slot.0
                    ));
                }
                freed.remove(&slot.0);
                live.insert(slot.0);
            }
            IoCommand::FreeSlots { slots, .. } => {
                for s in slots {
                    freed.insert(s.0);
                }
            }
            _ => {}
        }
        engine
            .handle_completion(Nanos(0), cmd.io(), Ok(()))
            .expect("completion");
    }
    while engine.poll_response().is_some() {}
    violations
}

#[test]
fn persistent_engine_frees_an_evicted_clean_slot_before_reusing_it() {
    let config = EngineConfig {
        page_size_bytes: 4096,
        group_size_bytes: 4096,
        cache_slots: 4,
        persistent: true,
        keep_clean: true,
        requests_max: 8,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(config).expect("engine");
    engine.add_volume(1 << 20).expect("volume");
    let (mut freed, mut live) = (HashSet::new(), HashSet::new());
    let mut violations = Vec::new();
    let write = |engine: &mut Engine, id: u64, page: u64| {
        let req = Request {
            id: RequestId(id),
            volume: VolumeId(0),
            kind: RequestKind::Write,
            offset_bytes: page * 4096,
            len_bytes: 4096,
            flags: RequestFlags::default(),
        };
        engine.handle_request(Nanos(0), req).expect("request");
    };
    for page in 0..4 {
        write(&mut engine, page + 1, page);
        violations.extend(run(&mut engine, &mut freed, &mut live));
    }
    engine.start_drain();
    violations.extend(run(&mut engine, &mut freed, &mut live));
    engine.stop_drain();
    assert_eq!(engine.dirty_pages(), 0, "all four pages destaged and clean");
    // A new page: no free slot, so a clean one is evicted. Its record still
    // names the old page (dirty, as written), so it must be freed first.
    write(&mut engine, 10, 100);
    violations.extend(run(&mut engine, &mut freed, &mut live));
    assert!(violations.is_empty(), "{violations:?}");
}
