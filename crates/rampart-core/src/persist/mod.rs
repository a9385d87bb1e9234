//! Persistence: the journal, checkpoints and recovery of the memory tier.

pub mod checkpoint;
pub mod codec;
pub mod device;
pub mod journal;
pub mod persister;
pub mod recovery;
