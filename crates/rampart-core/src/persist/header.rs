//! The 64-byte header that begins each file of a store with a format of its own (superblock,
//! checkpoint, journal): one frame, each file with its own magic, version and fields in it
//! (docs/FORMAT.md, "Headers").
//!
//! ```text
//! offset  size  field
//!      0     8  magic: the file's, e.g. "RAMPART\0"
//!      8     4  version u32: the file's format version
//!     12     4  flags u32: the superblock's flags; 0 in the others
//!     16    16  store_id: the superblock's, so a file of another store is told apart
//!     32    28  the file's own fields (`Fields`), zero where it has none
//!     60     4  crc32c of bytes 0..60
//! ```
//! Integers little-endian. Decoding checks, in this order, the length, the magic, the
//! checksum and the version, and says which failed ([`HeaderError`]); the version is checked
//! last so that only an intact header of a newer release is reported as one.

use std::fmt;

pub const HEADER_BYTES: usize = 64;
/// Where the file's own fields begin, and how many bytes they have.
pub const FIELDS_AT: usize = 32;
pub const FIELDS_BYTES: usize = CRC_AT - FIELDS_AT;
const CRC_AT: usize = 60;

/// What identifies a kind of file: its magic, and the format version this build reads and
/// writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    pub magic: [u8; 8],
    pub version: u32,
    /// The oldest version this build still reads (`version` or less).
    pub oldest: u32,
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub flags: u32,
    pub store_id: [u8; 16],
    pub fields: Fields,
}

/// The file's own 28 bytes (header bytes 32..60). Offsets are the header's, so that they
/// read as in the format's tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fields([u8; FIELDS_BYTES]);

impl Fields {
    fn range(at: usize, len: usize) -> std::ops::Range<usize> {
        assert!(
            at >= FIELDS_AT && at + len <= CRC_AT,
            "header field at {at} is outside the file's fields"
        );
        at - FIELDS_AT..at - FIELDS_AT + len
    }

    pub fn put_u64(&mut self, at: usize, v: u64) {
        self.0[Self::range(at, 8)].copy_from_slice(&v.to_le_bytes());
    }

    pub fn put_i64(&mut self, at: usize, v: i64) {
        self.put_u64(at, v as u64);
    }

    pub fn u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.0[Self::range(at, 8)].try_into().expect("8 bytes"))
    }

    pub fn i64(&self, at: usize) -> i64 {
        self.u64(at) as i64
    }
}

/// How a header can be wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer bytes than a header: `len` of them.
    Short { len: usize },
    /// Not this kind of file (or not a rampart file at all).
    BadMagic,
    /// The magic is right but the bytes are damaged.
    BadChecksum,
    /// An intact header of a format version this build does not read.
    UnsupportedVersion { found: u32, supported: u32 },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Short { len } => write!(f, "{len} bytes, shorter than its header"),
            HeaderError::BadMagic => write!(f, "bad magic"),
            HeaderError::BadChecksum => write!(f, "header checksum mismatch"),
            HeaderError::UnsupportedVersion { found, supported } => write!(
                f,
                "format version {found} is not supported (this rampart reads {supported})"
            ),
        }
    }
}

impl std::error::Error for HeaderError {}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

impl Frame {
    /// The header's bytes: this frame's magic, then `header` (whose version is written as
    /// given), then the checksum.
    pub fn encode(&self, header: &Header) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[0..8].copy_from_slice(&self.magic);
        out[8..12].copy_from_slice(&header.version.to_le_bytes());
        out[12..16].copy_from_slice(&header.flags.to_le_bytes());
        out[16..32].copy_from_slice(&header.store_id);
        out[FIELDS_AT..CRC_AT].copy_from_slice(&header.fields.0);
        let crc = crc32c::crc32c(&out[..CRC_AT]);
        out[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// The header of a file written by this release: this frame's version, no flags.
    pub fn encode_current(&self, store_id: [u8; 16], fields: Fields) -> [u8; HEADER_BYTES] {
        self.encode(&Header {
            version: self.version,
            flags: 0,
            store_id,
            fields,
        })
    }

    /// Decodes the header at the start of `bytes` (which may go on past it).
    pub fn decode(&self, bytes: &[u8]) -> Result<Header, HeaderError> {
        if bytes.len() < HEADER_BYTES {
            return Err(HeaderError::Short { len: bytes.len() });
        }
        if bytes[0..8] != self.magic {
            return Err(HeaderError::BadMagic);
        }
        if crc32c::crc32c(&bytes[..CRC_AT]) != le_u32(bytes, CRC_AT) {
            return Err(HeaderError::BadChecksum);
        }
        let version = le_u32(bytes, 8);
        if !(self.oldest..=self.version).contains(&version) {
            return Err(HeaderError::UnsupportedVersion {
                found: version,
                supported: self.version,
            });
        }
        Ok(Header {
            version,
            flags: le_u32(bytes, 12),
            store_id: bytes[16..32].try_into().expect("16 bytes"),
            fields: Fields(bytes[FIELDS_AT..CRC_AT].try_into().expect("28 bytes")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    const FRAME: Frame = Frame {
        magic: *b"RPTEST\0\0",
        version: 3,
        oldest: 3,
    };

    fn sample() -> Header {
        let mut fields = Fields::default();
        fields.put_u64(32, 0x0102_0304_0506_0708);
        fields.put_i64(52, -5);
        Header {
            version: 3,
            flags: 9,
            store_id: [4; 16],
            fields,
        }
    }

    #[test]
    fn layout() {
        let bytes = FRAME.encode(&sample());
        assert_eq!(&bytes[0..8], b"RPTEST\0\0");
        assert_eq!(&bytes[8..16], &[3, 0, 0, 0, 9, 0, 0, 0]);
        assert_eq!(&bytes[16..32], &[4; 16]);
        assert_eq!(&bytes[32..40], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&bytes[40..52], &[0; 12]);
        assert_eq!(&bytes[52..60], &(-5i64).to_le_bytes());
        assert_eq!(&bytes[60..], &crc32c::crc32c(&bytes[..60]).to_le_bytes());
        assert_eq!(sample().fields.i64(52), -5);
    }

    #[test]
    fn each_way_of_being_wrong_is_named() {
        let bytes = FRAME.encode(&sample());
        assert_eq!(FRAME.decode(&bytes), Ok(sample()));
        let mut longer = bytes.to_vec();
        longer.extend_from_slice(b"rest of the file");
        assert_eq!(FRAME.decode(&longer), Ok(sample()));
        assert_eq!(
            FRAME.decode(&bytes[..63]),
            Err(HeaderError::Short { len: 63 })
        );
        let other = Frame {
            magic: *b"RPOTHER\0",
            ..FRAME
        };
        assert_eq!(other.decode(&bytes), Err(HeaderError::BadMagic));
        for at in 8..64 {
            let mut damaged = bytes;
            damaged[at] ^= 0x20;
            assert_eq!(
                FRAME.decode(&damaged),
                Err(HeaderError::BadChecksum),
                "{at}"
            );
        }
        let newer = FRAME.encode(&Header {
            version: 4,
            ..sample()
        });
        assert_eq!(
            FRAME.decode(&newer),
            Err(HeaderError::UnsupportedVersion {
                found: 4,
                supported: 3
            })
        );
        for e in [
            HeaderError::Short { len: 1 },
            HeaderError::BadMagic,
            HeaderError::BadChecksum,
        ] {
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    #[should_panic(expected = "outside the file's fields")]
    fn fields_stay_in_their_bytes() {
        Fields::default().put_u64(56, 1);
    }

    proptest! {
        /// Arbitrary bytes decode or fail, never panic; what decodes encodes back to exactly
        /// its 64 bytes (the header is canonical).
        #[test]
        fn arbitrary_bytes_decode_canonically_or_not_at_all(
            mut bytes in vec(any::<u8>(), 0..100),
            magic_and_crc in any::<bool>(),
        ) {
            if magic_and_crc && bytes.len() >= HEADER_BYTES {
                // Most arbitrary bytes fail at the magic: give half of them a valid frame.
                bytes[..8].copy_from_slice(&FRAME.magic);
                bytes[8..12].copy_from_slice(&FRAME.version.to_le_bytes());
                let crc = crc32c::crc32c(&bytes[..60]);
                bytes[60..64].copy_from_slice(&crc.to_le_bytes());
            }
            if let Ok(header) = FRAME.decode(&bytes) {
                prop_assert_eq!(&FRAME.encode(&header)[..], &bytes[..HEADER_BYTES]);
            }
        }

        #[test]
        fn every_header_round_trips(
            flags in any::<u32>(),
            store_id in any::<[u8; 16]>(),
            a in any::<u64>(),
            b in any::<u64>(),
            c in any::<u64>(),
        ) {
            let mut fields = Fields::default();
            fields.put_u64(32, a);
            fields.put_u64(40, b);
            fields.put_u64(48, c);
            let header = Header { version: FRAME.version, flags, store_id, fields };
            prop_assert_eq!(FRAME.decode(&FRAME.encode(&header)), Ok(header));
        }
    }
}
