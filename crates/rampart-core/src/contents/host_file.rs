//! The disk tier's contents kind: a regular file whose bytes live in one host file of the
//! store's data folder (`data/{ino:016x}-{generation:08x}`), sparse, read and written
//! through the `Device` seam (and, for FUSE passthrough, through its descriptor).
//!
//! The state holds no byte of such a file and does no I/O: the engine writes the host file
//! before it applies `Op::WriteExtent` (data before metadata), and trims it after a shrinking
//! op is durable (`crate::disk`). Here is only what the state needs to know of it.

use crate::attr::Ino;
use crate::persist::device::DATA_PREFIX;

/// A disk-tier file's contents as the state sees them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HostFile {
    /// The bytes written to the host file as far as the ops say, at most the file's size: an
    /// estimate of what it holds (holes left out; an overwrite is not counted twice only when
    /// it reaches the size), for `st_blocks` and the per-tier figures. No I/O asks the host.
    written_bytes: u64,
}

impl HostFile {
    /// Contents whose host file holds about `written_bytes` (a migration: the memory file's
    /// stored bytes; a checkpoint: the recorded figure).
    pub fn holding(written_bytes: u64) -> HostFile {
        HostFile { written_bytes }
    }

    pub fn stored_bytes(&self) -> u64 {
        self.written_bytes
    }

    /// `len` bytes were written, leaving the file `size_bytes` long: returns the change of
    /// stored bytes.
    pub fn wrote(&mut self, len: u64, size_bytes: u64) -> i64 {
        let before = self.written_bytes;
        self.written_bytes = before.saturating_add(len).min(size_bytes.max(before));
        (self.written_bytes - before) as i64
    }

    /// The file shrank to `size_bytes`: returns the change of stored bytes.
    pub fn truncated(&mut self, size_bytes: u64) -> i64 {
        let before = self.written_bytes;
        self.written_bytes = before.min(size_bytes);
        -((before - self.written_bytes) as i64)
    }

    pub fn check(&self, size_bytes: u64) -> Result<(), crate::error::Broken> {
        if self.written_bytes > size_bytes {
            return Err(crate::error::Broken(format!(
                "disk-tier contents of {} bytes past the size {size_bytes}",
                self.written_bytes
            )));
        }
        Ok(())
    }
}

/// The device name of the host file of inode `ino` of generation `generation`.
pub fn host_file_name(ino: Ino, generation: u32) -> String {
    format!("{DATA_PREFIX}{ino:016x}-{generation:08x}")
}

/// The inode and generation a host file's device name (or bare name) stands for; None for a
/// name rampart does not make.
pub fn parse_host_file_name(name: &str) -> Option<(Ino, u32)> {
    let name = name.strip_prefix(DATA_PREFIX).unwrap_or(name);
    let (ino, generation) = name.split_once('-')?;
    if ino.len() != 16 || generation.len() != 8 {
        return None;
    }
    let lower_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !lower_hex(ino) || !lower_hex(generation) {
        return None;
    }
    Some((
        u64::from_str_radix(ino, 16).ok()?,
        u32::from_str_radix(generation, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_strangers_are_refused() {
        let name = host_file_name(0x2a, 7);
        assert_eq!(name, "data/000000000000002a-00000007");
        assert_eq!(parse_host_file_name(&name), Some((0x2a, 7)));
        assert_eq!(
            parse_host_file_name("000000000000002a-00000007"),
            Some((0x2a, 7))
        );
        for bad in [
            "data/2a-7",
            "data/000000000000002A-00000007",
            "data/000000000000002a_00000007",
            "data/000000000000002a-0000000g",
            "data/x",
        ] {
            assert_eq!(parse_host_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn stored_bytes_follow_writes_and_truncates() {
        let mut f = HostFile::holding(10);
        // Two bytes far apart: two bytes, not the span.
        assert_eq!(f.wrote(1, 1 << 30), 1);
        assert_eq!(f.wrote(1, 1 << 30), 1);
        assert_eq!(f.stored_bytes(), 12);
        // Never past the size.
        assert_eq!(f.wrote(100, 20), 8);
        assert_eq!(f.truncated(4), -16);
        assert_eq!(f.stored_bytes(), 4);
        assert!(f.check(4).is_ok());
        assert!(f.check(3).is_err());
    }
}
