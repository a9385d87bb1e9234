//! How big and how often: the profiles. Workloads scale their own parameters from these.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Seconds in all: for the test that checks the report end to end. Numbers mean little.
    Tiny,
    /// Under 3 minutes on 2 cores: a first look, one repetition.
    Quick,
    /// The published numbers: paper-sized runs where time allows, three repetitions.
    Full,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Tiny => "tiny",
            Profile::Quick => "quick",
            Profile::Full => "full",
        }
    }

    pub fn parse(text: &str) -> Option<Profile> {
        match text {
            "tiny" => Some(Profile::Tiny),
            "quick" => Some(Profile::Quick),
            "full" => Some(Profile::Full),
            _ => None,
        }
    }

    /// Repetitions of every (workload, peer) pair; the report gives their median and spread.
    pub fn repetitions(self) -> usize {
        match self {
            Profile::Tiny | Profile::Quick => 1,
            Profile::Full => 3,
        }
    }

    /// Full runs make every peer anew for every workload (no state carried between
    /// workloads); the shorter profiles make each peer once per repetition and give each
    /// workload a fresh directory on it.
    pub fn fresh_peer_per_workload(self) -> bool {
        self == Profile::Full
    }

    /// Size of each RAM disk (the loop files in /dev/shm) and of the disk loop file.
    pub fn device_size_bytes(self) -> u64 {
        match self {
            Profile::Tiny => 512 << 20,
            Profile::Quick => 2 << 30,
            Profile::Full => 4 << 30,
        }
    }

    /// Size of ext4-disk's image (sparse, on the real disk): room for the disk-tier workloads
    /// (32 fio files of 256 MiB, a mount with 50 GiB of large files in full). Only what is
    /// written takes space.
    pub fn disk_device_size_bytes(self) -> u64 {
        match self {
            Profile::Tiny => 1 << 30,
            Profile::Quick => 16 << 30,
            Profile::Full => 64 << 30,
        }
    }

    /// Pick one of three values by profile: `p.pick(tiny, quick, full)`.
    pub fn pick<T>(self, tiny: T, quick: T, full: T) -> T {
        match self {
            Profile::Tiny => tiny,
            Profile::Quick => quick,
            Profile::Full => full,
        }
    }
}
