//! The memory tier: small-file contents held in RAM, and the budget that caps the memory held.

pub mod budget;
pub mod file_data;
