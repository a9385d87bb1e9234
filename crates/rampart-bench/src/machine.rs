//! What machine a run was made on: CPU, memory, kernel, disks, FUSE, versions, load.
//! (Interface fixed; the implementation is being written.)

use serde::Serialize;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Machine {
    /// (what, value) pairs in report order: "CPU", "Intel Xeon ... (2 vCPUs)".
    pub facts: Vec<(String, String)>,
}

/// Describes this machine now.
pub fn describe() -> Machine {
    Machine::default()
}
