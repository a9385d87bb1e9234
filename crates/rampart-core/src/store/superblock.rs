//! The superblock: the store's identity and format version (docs/FORMAT.md).
//!
//! A [`header`](crate::persist::header) of its own and nothing else: magic `RAMPART\0`, format
//! version, flags, store id, then in the file's fields the creation time (i64 ns at offset 32)
//! and 20 reserved zero bytes.

use crate::persist::header::{self, Fields, Frame, HeaderError, HEADER_BYTES};
use crate::store::StoreError;
use crate::time::TimeNs;

pub const MAGIC: [u8; 8] = *b"RAMPART\0";
/// The format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
pub const SUPERBLOCK_BYTES: usize = HEADER_BYTES;
const FRAME: Frame = Frame {
    magic: MAGIC,
    version: FORMAT_VERSION,
    oldest: FORMAT_VERSION,
};
/// Offsets of the superblock's own fields.
const CREATED_NS_AT: usize = header::FIELDS_AT;
/// The large-file threshold (u64): 0 for the default, `u64::MAX` for no disk tier. Bytes
/// that format version 1 reserved as zeros, so stores made before read as the default.
const LARGE_FILE_THRESHOLD_AT: usize = header::FIELDS_AT + 8;

/// The superblock's threshold value that turns the disk tier off.
pub const THRESHOLD_OFF: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub format_version: u32,
    pub flags: u32,
    pub store_id: [u8; 16],
    pub created_ns: TimeNs,
    /// Files larger than this live on the disk tier: 0 for the default
    /// (`limits::LARGE_FILE_THRESHOLD_BYTES_DEFAULT`), [`THRESHOLD_OFF`] for never.
    pub large_file_threshold_bytes: u64,
}

impl Superblock {
    pub fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut fields = Fields::default();
        fields.put_i64(CREATED_NS_AT, self.created_ns);
        fields.put_u64(LARGE_FILE_THRESHOLD_AT, self.large_file_threshold_bytes);
        FRAME.encode(&header::Header {
            version: self.format_version,
            flags: self.flags,
            store_id: self.store_id,
            fields,
        })
    }

    /// Decodes and checks a superblock; `what` names the file in errors.
    pub fn decode(bytes: &[u8], what: &str) -> Result<Superblock, StoreError> {
        // Without the magic it is no store at all; with it, any other fault is damage.
        if !bytes.starts_with(&MAGIC) {
            return Err(StoreError::NotAStore(what.to_string()));
        }
        if bytes.len() != SUPERBLOCK_BYTES {
            return Err(StoreError::Corrupt(format!(
                "{what}: superblock is {} bytes, expected {SUPERBLOCK_BYTES}",
                bytes.len()
            )));
        }
        let header = FRAME.decode(bytes).map_err(|e| match e {
            HeaderError::UnsupportedVersion { found, supported } => {
                StoreError::UnsupportedVersion {
                    path: what.to_string(),
                    found,
                    supported,
                }
            }
            HeaderError::BadChecksum => {
                StoreError::Corrupt(format!("{what}: superblock checksum mismatch"))
            }
            HeaderError::Short { .. } | HeaderError::BadMagic => {
                unreachable!("the length and the magic were checked above")
            }
        })?;
        Ok(Superblock {
            format_version: header.version,
            flags: header.flags,
            store_id: header.store_id,
            created_ns: header.fields.i64(CREATED_NS_AT),
            large_file_threshold_bytes: header.fields.u64(LARGE_FILE_THRESHOLD_AT),
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
            large_file_threshold_bytes: 64 << 10,
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
    fn faults_keep_their_messages() {
        let message = |bytes: &[u8]| Superblock::decode(bytes, "sb").unwrap_err().to_string();
        let bytes = sample().encode();
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert_eq!(
            message(&longer),
            "store is damaged: sb: superblock is 65 bytes, expected 64"
        );
        let mut damaged = bytes;
        damaged[20] ^= 1;
        assert_eq!(
            message(&damaged),
            "store is damaged: sb: superblock checksum mismatch"
        );
        let newer = Superblock {
            format_version: 2,
            ..sample()
        };
        assert!(message(&newer.encode()).starts_with("sb: store format version 2 is not"));
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
