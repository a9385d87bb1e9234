//! A regular file's contents, behind one type whatever holds them.
//!
//! The namespace and the ops see a file's contents only through [`Contents`]: read, write,
//! truncate, punch, reserve, and what they cost. Today every file's contents are in memory
//! ([`FileData`], the memory tier). The disk tier adds a kind here — a host file in the
//! store's data folder, with a descriptor for FUSE passthrough, holes and trim — as a new
//! variant and its module beside this one, without touching `namespace`, the ops' codec or
//! the FUSE adapter (docs/ARCHITECTURE.md, "Adding a contents kind").
//!
//! Every mutating method returns a [`Delta`] (memory held, bytes stored) for the state's
//! accounting, and may fail: a kind backed by a device can meet EIO or ENOSPC. The memory kind
//! never fails once the budget has been checked.

pub mod host_file;

use crate::error::{Errno, FsResult};
use crate::memory::file_data::FileData;

pub use crate::memory::file_data::Delta;
pub use host_file::HostFile;

/// Where a regular file's bytes live.
#[derive(Debug)]
pub enum Contents {
    /// In RAM, as the file's final home (small files; the memory tier).
    Memory(FileData),
    /// In a host file of the data folder (large files; the disk tier). Reads and writes of
    /// the bytes go to the host file (the engine's `disk` module); only the size is here.
    Disk(HostFile),
}

/// The tier a file's contents are on, for `stat` and `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    Memory,
    Disk,
}

impl Tier {
    /// Its byte in the journal (`Op::Migrate`) and the checkpoint.
    pub fn code(self) -> u8 {
        match self {
            Tier::Memory => 0,
            Tier::Disk => 1,
        }
    }

    pub fn from_code(code: u8) -> Option<Tier> {
        match code {
            0 => Some(Tier::Memory),
            1 => Some(Tier::Disk),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tier::Memory => "memory",
            Tier::Disk => "disk",
        }
    }
}

impl Default for Contents {
    fn default() -> Self {
        Contents::Memory(FileData::default())
    }
}

impl From<FileData> for Contents {
    fn from(data: FileData) -> Self {
        Contents::Memory(data)
    }
}

impl Contents {
    pub fn tier(&self) -> Tier {
        match self {
            Contents::Memory(_) => Tier::Memory,
            Contents::Disk(_) => Tier::Disk,
        }
    }

    /// The in-memory data, if the contents are in memory (checkpoints and materializing
    /// copy them; contents elsewhere are referred to, not copied).
    pub fn memory(&self) -> Option<&FileData> {
        match self {
            Contents::Memory(data) => Some(data),
            Contents::Disk(_) => None,
        }
    }

    /// Heap bytes held in RAM (charged to the memory budget).
    pub fn heap_bytes(&self) -> u64 {
        match self {
            Contents::Memory(data) => data.heap_bytes(),
            Contents::Disk(_) => 0,
        }
    }

    /// Bytes of contents held, holes left out (`st_blocks`).
    pub fn stored_bytes(&self) -> u64 {
        match self {
            Contents::Memory(data) => data.stored_bytes(),
            Contents::Disk(host) => host.stored_bytes(),
        }
    }

    /// Bytes allocated to the contents: held, or reserved by `fallocate` (`st_blocks`).
    pub fn allocated_bytes(&self) -> u64 {
        match self {
            Contents::Memory(data) => data.allocated_bytes(),
            Contents::Disk(host) => host.stored_bytes(),
        }
    }

    /// The chunks of in-memory contents that hold bytes, with their index; nothing for
    /// contents held elsewhere.
    pub fn chunks(&self) -> impl Iterator<Item = (usize, &[u8])> {
        self.memory().into_iter().flat_map(FileData::chunks)
    }

    /// RAM a write of `len` bytes at `offset` may need at most (checked against the budget
    /// before anything changes).
    pub fn write_growth_bytes(&self, offset: u64, len: usize) -> u64 {
        match self {
            Contents::Memory(data) => data.growth_bound_bytes(offset, len),
            Contents::Disk(_) => 0,
        }
    }

    /// How many leading bytes of `data` a memory file already holds at `offset` (stored and
    /// equal); 0 for a disk-tier file.
    pub fn same_prefix_bytes(&self, offset: u64, data: &[u8]) -> usize {
        match self {
            Contents::Memory(file) => file.same_prefix_bytes(offset, data),
            Contents::Disk(_) => 0,
        }
    }

    /// RAM [`Contents::reserve`] of the range would add.
    pub fn reserve_growth_bytes(&self, offset: u64, len: u64) -> u64 {
        match self {
            Contents::Memory(data) => data.reserve_growth_bytes(offset, len),
            Contents::Disk(_) => 0,
        }
    }

    /// Reads up to `len` bytes at `offset` of a file of `size_bytes` into `out` (cleared
    /// first); holes read as zeros. A disk-tier file's bytes are read from its host file by
    /// the engine, never here (EIO).
    pub fn read(&self, size_bytes: u64, offset: u64, len: u32, out: &mut Vec<u8>) -> FsResult<()> {
        match self {
            Contents::Memory(data) => data.read(size_bytes, offset, len, out),
            Contents::Disk(_) => return Err(Errno::EIO),
        }
        Ok(())
    }

    /// Writes bytes held in memory. A disk-tier file is written through its host file and
    /// `Op::WriteExtent` (EIO here: an op that carries bytes never targets it).
    pub fn write(&mut self, offset: u64, bytes: &[u8]) -> FsResult<Delta> {
        match self {
            Contents::Memory(data) => Ok(data.write(offset, bytes)),
            Contents::Disk(_) => Err(Errno::EIO),
        }
    }

    /// `len` bytes were written to a disk-tier file's host file, leaving it `size_bytes` long.
    pub fn wrote_extent(&mut self, len: u64, size_bytes: u64) -> FsResult<Delta> {
        match self {
            Contents::Memory(_) => Err(Errno::EIO),
            Contents::Disk(host) => Ok(Delta {
                heap_bytes: 0,
                stored_bytes: host.wrote(len, size_bytes),
            }),
        }
    }

    /// Drops every byte at or past `size_bytes` (a shrinking truncate).
    pub fn truncate(&mut self, size_bytes: u64) -> FsResult<Delta> {
        match self {
            Contents::Memory(data) => Ok(data.truncate(size_bytes)),
            // The host file is trimmed by the engine once the op is durable.
            Contents::Disk(host) => Ok(Delta {
                heap_bytes: 0,
                stored_bytes: host.truncated(size_bytes),
            }),
        }
    }

    /// Makes `[offset, offset + len)` a hole (PUNCH_HOLE, and the first step of ZERO_RANGE).
    pub fn punch_hole(&mut self, offset: u64, len: u64) -> FsResult<Delta> {
        match self {
            Contents::Memory(data) => Ok(data.punch_hole(offset, len)),
            // Punched in the host file by the engine once the op is durable.
            Contents::Disk(_) => Ok(Delta::default()),
        }
    }

    /// Reserves room for `[offset, offset + len)` so that writes into it cannot fail with
    /// ENOSPC (fallocate), the file being `size_bytes` long after it. In memory the room is
    /// reserved, not stored; a disk-tier file's host file was fallocated by the engine before
    /// the op (decision 0136), so its blocks are held there and count as stored (`st_blocks`;
    /// decision 0145). Room past the size is not counted (the figure stays within the size).
    pub fn reserve(&mut self, offset: u64, len: u64, size_bytes: u64) -> FsResult<Delta> {
        match self {
            Contents::Memory(data) => Ok(data.reserve(offset, len)),
            Contents::Disk(host) => {
                let within_size = offset.saturating_add(len).min(size_bytes);
                Ok(Delta {
                    heap_bytes: 0,
                    stored_bytes: host.wrote(within_size.saturating_sub(offset), size_bytes),
                })
            }
        }
    }

    /// Checks the kind's invariants against the file size.
    pub fn check(&self, size_bytes: u64) -> Result<(), crate::error::Broken> {
        match self {
            Contents::Memory(data) => data.check(size_bytes),
            Contents::Disk(host) => host.check(size_bytes),
        }
    }
}
