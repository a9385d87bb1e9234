//! Persistence: the journal, checkpoints and recovery of the memory tier.

pub mod checkpoint;
pub mod codec;
pub mod device;
#[cfg(any(test, feature = "fuzzing"))]
pub mod format_checks;
pub mod header;
pub mod journal;
pub mod level;
pub mod persister;
pub mod policy;
pub mod recovery;

use std::sync::Arc;

use crate::engine::{Engine, EngineConfig};
use crate::error::StartError;
use device::Device;
use persister::{PersistConfig, Persister};
use recovery::Report;

/// Opens a store's file system: recovery, then a persister journaling every change. When
/// recovery changed the state beyond the journal (volatile files dropped, a fresh journal
/// after a checkpoint that got ahead of it), a checkpoint is written before anything else,
/// so that the journal never refers to a state it cannot rebuild.
pub fn open(
    device: Arc<dyn Device>,
    store_id: [u8; 16],
    engine_config: &EngineConfig,
    persist_config: PersistConfig,
) -> Result<(Arc<Engine>, Arc<Persister>, Report), StartError> {
    let (state, report) =
        recovery::recover(&*device, store_id, engine_config).map_err(StartError::Recovery)?;
    let engine = Arc::new(Engine::from_state(state));
    let persister = Persister::start(
        device,
        store_id,
        report.next_seq,
        report.journal_valid_len,
        persist_config,
    )
    .map_err(StartError::Journal)?;
    persister.attach(&engine);
    engine.set_sink(Some(persister.clone()));
    if report.volatile_dropped > 0 {
        persister
            .checkpoint(&engine)
            .map_err(StartError::Checkpoint)?;
    }
    Ok((engine, persister, report))
}
