//! (to be written)

use super::Workload;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    Vec::new()
}
