//! The superblock: the store's identity and format version (docs/FORMAT.md).
//!
//! 64 bytes, little-endian: magic `RAMPART\0`, format version (u32), flags (u32), store id
//! (16 bytes), creation time (i64 ns), 20 reserved zero bytes, CRC-32C of the first 60 bytes.

use crate::store::StoreError;
use crate::time::TimeNs;

pub const MAGIC: [u8; 8] = *b"RAMPART\0";
/// The format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
pub const SUPERBLOCK_BYTES: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub format_version: u32,
    pub flags: u32,
    pub store_id: [u8; 16],
    pub created_ns: TimeNs,
}

impl Superblock {
    pub fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut out = [0u8; SUPERBLOCK_BYTES];
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&self.format_version.to_le_bytes());
        out[12..16].copy_from_slice(&self.flags.to_le_bytes());
        out[16..32].copy_from_slice(&self.store_id);
        out[32..40].copy_from_slice(&self.created_ns.to_le_bytes());
        let crc = crc32c::crc32c(&out[..60]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and checks a superblock; `what` names the file in errors.
    pub fn decode(bytes: &[u8], what: &str) -> Result<Superblock, StoreError> {
        if bytes.len() < 8 || bytes[0..8] != MAGIC {
            return Err(StoreError::NotAStore(what.to_string()));
        }
        if bytes.len() != SUPERBLOCK_BYTES {
            return Err(StoreError::Corrupt(format!(
                "{what}: superblock is {} bytes, expected {SUPERBLOCK_BYTES}",
                bytes.len()
            )));
        }
        let stored = u32::from_le_bytes(bytes[60..64].try_into().expect("4 bytes"));
        if crc32c::crc32c(&bytes[..60]) != stored {
            return Err(StoreError::Corrupt(format!(
                "{what}: superblock checksum mismatch"
            )));
        }
        let le32 = |r: std::ops::Range<usize>| u32::from_le_bytes(bytes[r].try_into().expect("4"));
        let format_version = le32(8..12);
        if format_version != FORMAT_VERSION {
            return Err(StoreError::UnsupportedVersion {
                path: what.to_string(),
                found: format_version,
                supported: FORMAT_VERSION,
            });
        }
        Ok(Superblock {
            format_version,
            flags: le32(12..16),
            store_id: bytes[16..32].try_into().expect("16 bytes"),
            created_ns: i64::from_le_bytes(bytes[32..40].try_into().expect("8 bytes")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            format_version: FORMAT_VERSION,
            flags: 0,
            store_id: [7; 16],
            created_ns: 1_700_000_000_000_000_000,
        }
    }

    #[test]
    fn round_trip() {
        let sb = sample();
        assert_eq!(Superblock::decode(&sb.encode(), "sb").unwrap(), sb);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let bytes = sample().encode();
        for bit in 0..SUPERBLOCK_BYTES * 8 {
            let mut damaged = bytes;
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&damaged, "sb").is_err(), "bit {bit}");
        }
    }

    #[test]
    fn truncated_and_foreign_files_are_refused() {
        let bytes = sample().encode();
        assert!(matches!(
            Superblock::decode(&bytes[..40], "sb"),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            Superblock::decode(b"#!/bin/sh\n", "sb"),
            Err(StoreError::NotAStore(_))
        ));
    }
}
