//! The journal: a file of checksummed batches of ops, written only at its end (docs/FORMAT.md).
//!
//! ```text
//! journal  := header batch*
//! header   := magic "RPJOURN\0" | version u32 | reserved u32 | store_id [16] | base_seq u64
//!             | created_ns i64 | reserved [12] | crc32c(bytes 0..60) u32          (64 bytes)
//! batch    := magic u32 "RPJB" | body_len u32 | crc u32 | first_seq u64 | counts u32
//!             | base_time_ns i64 | body                                          (32 + body_len)
//! counts   := op_count (bits 0..30) | GROUP_CONTINUES (bit 31, version 3)
//! body     := op_count ops, each encoded by `codec::encode_op` against base_time_ns
//! crc      := crc32c of first_seq .. end of body
//! ```
//! A group of records committed whole (`Level::group`) larger than one batch spans batches:
//! each but its last carries `GROUP_CONTINUES` and holds nothing but the group's records (the
//! writer starts such a group in a batch of its own). A valid prefix never ends in a flagged
//! batch: scanning drops a run of them at the end, with the group's start as the end of the
//! valid prefix, as the torn tail it is (decision 0103).
//! The header is the shared frame of `persist::header`. All integers little-endian. Invariants: the first batch's `first_seq` is the header's
//! `base_seq`, and each batch starts where the previous one ended (`first_seq + op_count`);
//! `op_count ≥ 1`; `body_len ≤ BATCH_BODY_BYTES_MAX`. A batch is written with one write at the
//! journal's end and made durable by one fdatasync shared by every op in it (group commit);
//! a commit of several batches syncs each before writing the next.
//!
//! The writer keeps zeros reserved after the last batch (`JOURNAL_RESERVE_BYTES`): written after
//! a small batch, so that a commit overwrites blocks the file system has already allocated and
//! written and its fdatasync has no file-system metadata to write; allocated after a large one,
//! so that its bytes are not written twice (decision 0093). A remainder of nothing but zeros is
//! the clean end.
//!
//! Scanning stops at the first batch that is incomplete or fails its checksum. If nothing
//! valid follows it, it is a torn tail: the last write was cut by a crash before its sync,
//! so it was never acknowledged as durable, and recovery drops it. If a valid batch does
//! follow, the damage is in the middle of data that was durable: recovery refuses to guess
//! and reports it (`Tail::Damaged`), so the caller can stop with a clear error.

use crate::op::Op;
use crate::persist::codec::{self, DecodeError};
use crate::persist::header::{self, Fields, Frame, HeaderError};

pub const MAGIC: [u8; 8] = *b"RPJOURN\0";
/// Version 2 adds the disk tier's ops (`WriteExtent`, `Migrate`); version 3 the batch flag
/// `GROUP_CONTINUES`. Versions 1 and 2 are read (without the flag).
pub const VERSION: u32 = 3;
/// The first version whose batches may carry `GROUP_CONTINUES`.
pub const GROUPS_SINCE_VERSION: u32 = 3;
/// Bit 31 of a batch's op_count field (version 3): the group of records open at the end of
/// this batch goes on in the next one, and every record of this batch belongs to it.
pub const GROUP_CONTINUES: u32 = 1 << 31;
pub const OLDEST_VERSION: u32 = 1;
pub const HEADER_BYTES: usize = header::HEADER_BYTES;
const FRAME: Frame = Frame {
    magic: MAGIC,
    version: VERSION,
    oldest: OLDEST_VERSION,
};
/// Header flag (bit 0 of `flags`): the writer keeps zeros ahead. Every batch it writes lies
/// inside space already zeroed and synced, with at least `JOURNAL_ZEROS_AHEAD_BYTES_MIN` zeros
/// after it, so a crash can never leave the file ending inside a batch or right after one:
/// such an end is a journal cut short (damage), not a torn tail (decision 0038).
pub const FLAG_ZEROS_AHEAD: u32 = 1;
pub use crate::limits::JOURNAL_ZEROS_AHEAD_BYTES_MIN;
/// Offsets of the journal's own header fields (bytes 48..60 are reserved zeros).
const BASE_SEQ_AT: usize = header::FIELDS_AT;
const CREATED_NS_AT: usize = BASE_SEQ_AT + 8;
const BATCH_MAGIC: u32 = u32::from_le_bytes(*b"RPJB");
pub const BATCH_HEADER_BYTES: usize = 32;
pub use crate::limits::BATCH_BODY_BYTES_MAX;
use crate::limits::{BATCH_BUFFERS_SPARE_MAX, BATCH_BUFFER_KEPT_BYTES_MAX};

/// The body a batch may reach while a group of records is open and still take one more op:
/// the largest op record is a write of `WRITE_BYTES_MAX` with its fields (limits.rs checks
/// that `WRITE_BYTES_MAX + 64` fits a batch), so the batch stays within the limit.
pub const GROUP_WHOLE_BYTES_MAX: usize =
    BATCH_BODY_BYTES_MAX - (crate::limits::WRITE_BYTES_MAX + 64);
pub use crate::limits::JOURNAL_RESERVE_BYTES;

/// The journal's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub store_id: [u8; 16],
    /// Sequence number of the first op this journal holds (the checkpoint holds all before).
    pub base_seq: u64,
    pub created_ns: i64,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut fields = Fields::default();
        fields.put_u64(BASE_SEQ_AT, self.base_seq);
        fields.put_i64(CREATED_NS_AT, self.created_ns);
        FRAME.encode_current(self.store_id, fields)
    }

    /// The header as this release's daemon writes it: with [`FLAG_ZEROS_AHEAD`] (the writer
    /// keeps its promise, so scanning can tell a journal cut short from a torn tail).
    pub fn encode_zeros_ahead(&self) -> [u8; HEADER_BYTES] {
        let mut fields = Fields::default();
        fields.put_u64(BASE_SEQ_AT, self.base_seq);
        fields.put_i64(CREATED_NS_AT, self.created_ns);
        FRAME.encode(&header::Header {
            version: VERSION,
            flags: FLAG_ZEROS_AHEAD,
            store_id: self.store_id,
            fields,
        })
    }

    /// Decodes the header at the start of a journal (the reserved bytes are not read).
    pub fn decode(bytes: &[u8]) -> Result<Header, JournalError> {
        let header = FRAME.decode(bytes).map_err(|e| match e {
            HeaderError::UnsupportedVersion { found, .. } => JournalError::Version(found),
            e => JournalError::Header(e),
        })?;
        Ok(Header {
            store_id: header.store_id,
            base_seq: header.fields.u64(BASE_SEQ_AT),
            created_ns: header.fields.i64(CREATED_NS_AT),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalError {
    /// The header is short, of another kind of file, or damaged (a newer version is
    /// `Version`).
    Header(HeaderError),
    Version(u32),
    Op {
        seq: u64,
        error: DecodeError,
    },
}

impl std::fmt::Display for JournalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JournalError::Header(e) => match e {
                HeaderError::Short { .. } => write!(f, "journal header: shorter than its header"),
                HeaderError::BadMagic => {
                    write!(f, "journal header: not a rampart journal (bad magic)")
                }
                e => write!(f, "journal header: {e}"),
            },
            JournalError::Version(v) => write!(
                f,
                "journal format version {v} is not supported (this rampart reads \
                 {OLDEST_VERSION} to {VERSION})"
            ),
            JournalError::Op { seq, error } => {
                write!(
                    f,
                    "journal op {seq} passed its checksum but does not decode: {error}"
                )
            }
        }
    }
}

impl std::error::Error for JournalError {}

/// The fixed part in front of each batch's body (`BATCH_HEADER_BYTES`): magic "RPJB",
/// body_len u32, crc u32, first_seq u64, op_count u32 (with `GROUP_CONTINUES` in version 3),
/// base_time_ns i64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub body_len: u32,
    /// crc32c of the bytes from `first_seq` to the end of the body.
    pub crc: u32,
    pub first_seq: u64,
    /// The field as written: in version 3, bit 31 is `GROUP_CONTINUES`.
    pub op_count: u32,
    pub base_time_ns: i64,
}

impl BatchHeader {
    /// Where the checksummed bytes begin: at `first_seq`.
    const CRC_FROM: usize = 12;

    /// Reads the batch header at the start of `bytes`: None if fewer bytes than one, or no
    /// batch magic. Nothing else is checked.
    pub fn read(bytes: &[u8]) -> Option<BatchHeader> {
        if bytes.len() < BATCH_HEADER_BYTES || le_u32(bytes, 0) != BATCH_MAGIC {
            return None;
        }
        Some(BatchHeader {
            body_len: le_u32(bytes, 4),
            crc: le_u32(bytes, 8),
            first_seq: le_u64(bytes, 12),
            op_count: le_u32(bytes, 20),
            base_time_ns: le_u64(bytes, 24) as i64,
        })
    }

    /// Writes the header of the batch whose body follows it in `batch` (`batch[..32]` is
    /// reserved for it), leaving the CRC to [`Unchecked::finish`]: the batch is framed where it
    /// was encoded, without a copy.
    fn frame_in_place(
        first_seq: u64,
        op_count: u32,
        continues_group: bool,
        base_time_ns: i64,
        batch: &mut [u8],
    ) {
        debug_assert!(batch.len() >= BATCH_HEADER_BYTES);
        debug_assert!(
            op_count & GROUP_CONTINUES == 0,
            "too many ops for one batch"
        );
        let op_count = if continues_group {
            op_count | GROUP_CONTINUES
        } else {
            op_count
        };
        let body_len = (batch.len() - BATCH_HEADER_BYTES) as u32;
        batch[0..4].copy_from_slice(&BATCH_MAGIC.to_le_bytes());
        batch[4..8].copy_from_slice(&body_len.to_le_bytes());
        batch[8..12].copy_from_slice(&[0; 4]);
        batch[12..20].copy_from_slice(&first_seq.to_le_bytes());
        batch[20..24].copy_from_slice(&op_count.to_le_bytes());
        batch[24..32].copy_from_slice(&(base_time_ns as u64).to_le_bytes());
    }
}

/// Whole framed batches whose CRCs are not computed yet: what [`BatchBuilder::take_frames`]
/// hands out under the persister's `pending` lock, so that the CRCs (a pass over every byte)
/// are computed after the lock is released.
#[derive(Debug)]
pub struct Unchecked(Vec<Vec<u8>>);

impl Unchecked {
    /// Computes each batch's CRC: the framed batches, ready to be written.
    pub fn finish(mut self) -> Framed {
        for buffer in &mut self.0 {
            let mut at = 0;
            while at < buffer.len() {
                let batch = &mut buffer[at..];
                debug_assert!(BatchHeader::read(batch).is_some(), "a batch lost its magic");
                let len = BATCH_HEADER_BYTES + le_u32(batch, 4) as usize;
                let crc = crc32c::crc32c(&batch[BatchHeader::CRC_FROM..len]);
                batch[8..12].copy_from_slice(&crc.to_le_bytes());
                at += len;
            }
            debug_assert_eq!(at, buffer.len(), "a framed batch was cut");
        }
        Framed(self.0)
    }
}

/// Whole framed batches, in order, ready to be written: one buffer per batch as the batch
/// builder sealed them (never copied into one; decision 0114).
#[derive(Debug)]
pub struct Framed(Vec<Vec<u8>>);

impl Framed {
    /// The batches, in order, one slice each.
    pub fn batches(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().flat_map(|buffer| framed_batches(buffer))
    }

    /// Bytes of all the batches.
    pub fn len(&self) -> usize {
        self.0.iter().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batches as one run of bytes (copied only if there are several buffers).
    pub fn into_bytes(mut self) -> Vec<u8> {
        if self.0.len() == 1 {
            return self.0.pop().unwrap_or_default();
        }
        self.0.concat()
    }
}

/// One valid batch, borrowing the journal's bytes.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    pub first_seq: u64,
    pub op_count: u32,
    /// The group of records open at the batch's end goes on in the next batch
    /// (`GROUP_CONTINUES`): all of this batch's records belong to it.
    pub continues_group: bool,
    pub base_time_ns: i64,
    pub body: &'a [u8],
    /// Offset of the batch in the file.
    pub offset: u64,
}

impl<'a> Batch<'a> {
    /// Decodes the batch's ops, calling `apply(seq, op)` for each in order.
    pub fn for_each_op(
        &self,
        mut apply: impl FnMut(u64, Op<'a>) -> Result<(), JournalError>,
    ) -> Result<(), JournalError> {
        let mut input = self.body;
        for i in 0..u64::from(self.op_count) {
            let seq = self.first_seq + i;
            let op = codec::decode_op(&mut input, self.base_time_ns)
                .map_err(|error| JournalError::Op { seq, error })?;
            apply(seq, op)?;
        }
        if !input.is_empty() {
            return Err(JournalError::Op {
                seq: self.first_seq + u64::from(self.op_count),
                error: DecodeError::BadValue("bytes left after the batch's last op"),
            });
        }
        Ok(())
    }
}

/// How the valid prefix of a journal ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tail {
    /// The file ends exactly after the last valid batch.
    Clean,
    /// An incomplete or failing last batch, with nothing valid after it: a write cut short
    /// by a crash, never acknowledged. `bytes` are dropped (the zeros reserved after them are
    /// not counted).
    Torn {
        offset: u64,
        bytes: u64,
        reason: String,
    },
    /// The journal ends inside a batch, or right after one without the zeros its writer
    /// always leaves there (journals with [`FLAG_ZEROS_AHEAD`] only): no crash leaves that, so
    /// the file was cut short and batches that were durable may be gone.
    Cut { offset: u64, reason: String },
    /// A batch fails, but a valid batch follows it: damage to durable data.
    Damaged {
        offset: u64,
        reason: String,
        /// Where the next valid-looking batch starts.
        next_valid_offset: u64,
    },
}

/// The result of scanning a journal.
#[derive(Debug)]
pub struct Scan<'a> {
    pub header: Header,
    pub batches: Vec<Batch<'a>>,
    /// Bytes of the valid prefix (header and whole batches, but for a group of records cut
    /// short at its end: that is in the tail).
    pub valid_len: u64,
    pub tail: Tail,
    /// Zero bytes after the valid prefix: space the writer reserved ahead (see `JOURNAL_RESERVE_BYTES`).
    pub reserved_bytes: u64,
}

impl Scan<'_> {
    /// The sequence number the next op would get.
    pub fn next_seq(&self) -> u64 {
        self.batches.last().map_or(self.header.base_seq, |b| {
            b.first_seq + u64::from(b.op_count)
        })
    }

    pub fn op_count(&self) -> u64 {
        self.batches.iter().map(|b| u64::from(b.op_count)).sum()
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The valid batch at offset `at`, whatever its sequence number (`rampart fsck` counts the
/// batches that follow damage).
pub fn batch_at(bytes: &[u8], at: usize) -> Option<Batch<'_>> {
    if at > bytes.len() {
        return None;
    }
    let groups = bytes.len() < HEADER_BYTES || flags_groups(le_u32(bytes, 8));
    parse_batch(bytes, at, None, groups).ok()
}

/// Whether batches of a journal of `version` may carry `GROUP_CONTINUES`.
fn flags_groups(version: u32) -> bool {
    version >= GROUPS_SINCE_VERSION
}

/// Parses the batch at `at`, checking it against the expected sequence number; `groups`: the
/// journal's version has `GROUP_CONTINUES` (older ones read the field as a plain count).
fn parse_batch(
    bytes: &[u8],
    at: usize,
    expected_seq: Option<u64>,
    groups: bool,
) -> Result<Batch<'_>, String> {
    let rest = &bytes[at..];
    if rest.len() < BATCH_HEADER_BYTES {
        return Err(format!("{} bytes, shorter than a batch header", rest.len()));
    }
    let head = BatchHeader::read(rest).ok_or("no batch magic")?;
    let body_len = head.body_len as usize;
    if body_len > BATCH_BODY_BYTES_MAX {
        return Err(format!("batch body of {body_len} bytes is over the limit"));
    }
    if rest.len() < BATCH_HEADER_BYTES + body_len {
        return Err(format!(
            "batch of {} bytes but only {} left",
            BATCH_HEADER_BYTES + body_len,
            rest.len()
        ));
    }
    if crc32c::crc32c(&rest[BatchHeader::CRC_FROM..BATCH_HEADER_BYTES + body_len]) != head.crc {
        return Err("batch checksum mismatch".into());
    }
    let (op_count, continues_group) = if groups {
        (
            head.op_count & !GROUP_CONTINUES,
            head.op_count & GROUP_CONTINUES != 0,
        )
    } else {
        (head.op_count, false)
    };
    if op_count == 0 {
        return Err("empty batch".into());
    }
    if let Some(expected) = expected_seq {
        if head.first_seq != expected {
            return Err(format!(
                "batch starts at op {}, expected {expected}",
                head.first_seq
            ));
        }
    }
    Ok(Batch {
        first_seq: head.first_seq,
        op_count,
        continues_group,
        base_time_ns: head.base_time_ns,
        body: &rest[BATCH_HEADER_BYTES..BATCH_HEADER_BYTES + body_len],
        offset: at as u64,
    })
}

/// Scans a whole journal: the header, then every valid batch up to the first bad one.
pub fn scan(bytes: &[u8]) -> Result<Scan<'_>, JournalError> {
    let header = Header::decode(bytes)?;
    // The checksum has passed: the flags are the writer's.
    let zeros_ahead = le_u32(bytes, 12) & FLAG_ZEROS_AHEAD != 0;
    let groups = flags_groups(le_u32(bytes, 8));
    let mut batches = Vec::new();
    let mut at = HEADER_BYTES;
    let mut next_seq = header.base_seq;
    let tail = loop {
        if at >= bytes.len() {
            break Tail::Clean;
        }
        match parse_batch(bytes, at, Some(next_seq), groups) {
            Ok(batch) => {
                next_seq = batch.first_seq + u64::from(batch.op_count);
                at += BATCH_HEADER_BYTES + batch.body.len();
                batches.push(batch);
            }
            Err(_) if content_end(bytes) <= at => break Tail::Clean,
            Err(reason) => {
                break match find_next_valid(bytes, at + 1, next_seq, groups) {
                    Some(next_valid_offset) => Tail::Damaged {
                        offset: at as u64,
                        reason,
                        next_valid_offset: next_valid_offset as u64,
                    },
                    None => Tail::Torn {
                        offset: at as u64,
                        bytes: (content_end(bytes) - at) as u64,
                        reason,
                    },
                }
            }
        }
    };
    let tail = if zeros_ahead {
        cut_short(bytes, at, tail)
    } else {
        tail
    };
    let (at, tail) = drop_unfinished_group(bytes, &mut batches, at, tail);
    let reserved_bytes = match tail {
        Tail::Clean => (bytes.len() - at) as u64,
        _ => 0,
    };
    Ok(Scan {
        header,
        batches,
        valid_len: at as u64,
        tail,
        reserved_bytes,
    })
}

/// Drops the batches of a group of records whose last batch is missing (a run of batches
/// flagged `GROUP_CONTINUES` at the end of the valid prefix): its commit was cut by a crash
/// before it ended, so none of it was acknowledged, and recovering a part of it would break
/// the promise that a group is recovered whole. Returns the new end of the valid prefix (the
/// group's first batch) and the tail: a torn one from there, or the damage or cut that
/// followed (still refused, and `fsck --repair` keeps the prefix without the group).
fn drop_unfinished_group(
    bytes: &[u8],
    batches: &mut Vec<Batch<'_>>,
    at: usize,
    tail: Tail,
) -> (usize, Tail) {
    let continued = batches
        .iter()
        .rev()
        .take_while(|b| b.continues_group)
        .count();
    if continued == 0 {
        return (at, tail);
    }
    let dropped = batches.split_off(batches.len() - continued);
    let group_at = dropped[0].offset as usize;
    let ops: u64 = dropped.iter().map(|b| u64::from(b.op_count)).sum();
    let after = match &tail {
        Tail::Clean => String::new(),
        Tail::Torn { reason, .. } => format!(", then a torn batch ({reason})"),
        Tail::Cut { .. } | Tail::Damaged { .. } => return (group_at, tail),
    };
    let reason = format!(
        "a group of records cut short: {continued} whole batches of it ({ops} ops) but not          the batch that ends it{after}"
    );
    let torn = Tail::Torn {
        offset: group_at as u64,
        bytes: (content_end(bytes).max(at) - group_at) as u64,
        reason,
    };
    (group_at, torn)
}

/// For a journal whose writer keeps zeros ahead: a clean end or a torn tail that no crash
/// can leave is a journal cut short ([`Tail::Cut`]). The writer writes a batch of `n` bytes
/// at `at` only when the synced file already runs to `at + n + JOURNAL_ZEROS_AHEAD_BYTES_MIN`
/// or further, and a crash never shortens a synced file; so after any crash the file holds
/// at least that many bytes. A torn batch header names at most its real length (header bytes
/// not yet written read as zeros), and an unreadable one at least a header and one byte.
fn cut_short(bytes: &[u8], at: usize, tail: Tail) -> Tail {
    let len = bytes.len();
    let need = match &tail {
        Tail::Clean => at + JOURNAL_ZEROS_AHEAD_BYTES_MIN,
        Tail::Torn { .. } => {
            let batch_bytes = BatchHeader::read(&bytes[at..])
                .map(|h| BATCH_HEADER_BYTES + h.body_len as usize)
                .filter(|&n| n <= BATCH_HEADER_BYTES + BATCH_BODY_BYTES_MAX)
                .unwrap_or(BATCH_HEADER_BYTES + 1);
            at + batch_bytes + JOURNAL_ZEROS_AHEAD_BYTES_MIN
        }
        Tail::Cut { .. } | Tail::Damaged { .. } => return tail,
    };
    if len >= need {
        // A last batch whole in length that fails its checks reads as a tear, whatever
        // broke it: a crash may leave any part of it unwritten (a fault injector tears one
        // write at any byte), so no pattern of zeros tells damage from a tear (decision 0133).
        return tail;
    }
    let reason = match tail {
        Tail::Clean => format!(
            "the file ends {} bytes after the last whole batch, without the {} zeros its \
             writer always leaves there",
            len - at,
            JOURNAL_ZEROS_AHEAD_BYTES_MIN
        ),
        _ => format!(
            "the file ends {} bytes into a batch that needs {} bytes and the zeros after it: \
             a crash leaves a torn batch whole in length, so the file was cut short",
            len - at,
            need - at
        ),
    };
    Tail::Cut {
        offset: at as u64,
        reason,
    }
}

/// The journal's length without the zeros at its end (the writer's reserve, or nothing).
pub fn content_end(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

/// The offset of the next batch after `from` that passes its checksum and continues this
/// journal's numbering (starts after `expected_seq`), if any. The numbering check keeps a
/// torn batch whose data holds a copy of an ordinary journal (of this store's past, or another
/// store's) from being taken for damage; data crafted to hold a valid batch numbered past this
/// journal's end, torn by a crash, is still reported as damage (a refused mount that
/// `rampart fsck --repair` settles, losing nothing acknowledged).
fn find_next_valid(bytes: &[u8], from: usize, expected_seq: u64, groups: bool) -> Option<usize> {
    let magic = BATCH_MAGIC.to_le_bytes();
    let mut at = from;
    while at + BATCH_HEADER_BYTES <= bytes.len() {
        let window = &bytes[at..];
        let found = window.windows(4).position(|w| w == magic)?;
        at += found;
        if parse_batch(bytes, at, None, groups).is_ok_and(|b| b.first_seq > expected_seq) {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// Builds batches: ops are encoded as they come, and `take_batch` frames what has gathered.
/// A batch is sealed once its body passes half of `BATCH_BODY_BYTES_MAX` (`GROUP_WHOLE_BYTES_MAX`
/// while a group is open); as one op is at most 16 MiB, no batch ever passes the limit, however
/// much gathers between two commits.
///
/// A group of records (`set_group_open`) that outgrows a batch goes on in the next, the batch
/// sealed with `GROUP_CONTINUES`; such a batch holds only the group's records, so a group that
/// began after other records of its batch is first moved into a batch of its own (the
/// records before it sealed without the flag). Most groups fit one batch and cost nothing.
///
/// Ops are encoded after room left for their batch's header, so sealing a batch writes the
/// header in front of it and hands the buffer over as it is; the one copy of a written page
/// is its encoding (a sealed batch is copied only when another is already waiting, i.e. more
/// than half of `BATCH_BODY_BYTES_MAX` gathered between two commits). The committer gives
/// the buffer back once written ([`BatchBuilder::recycle`]), so the next batch does not grow
/// a fresh one from nothing.
#[derive(Debug)]
pub struct BatchBuilder {
    next_seq: u64,
    /// The first op of what the next `take_batch` returns (every op before it was taken).
    taken_to: u64,
    first_seq: u64,
    op_count: u32,
    base_time_ns: i64,
    /// The open batch: `BATCH_HEADER_BYTES` reserved for its header, then its ops.
    batch: Vec<u8>,
    /// Whole batches, framed (but for their CRCs), waiting for the next commit: one buffer
    /// each, in order.
    sealed: Vec<Vec<u8>>,
    /// Bytes in `sealed`.
    sealed_bytes: usize,
    /// Buffers written by a commit and given back, empty, for the next batches (at most
    /// `BATCH_BUFFERS_SPARE_MAX`).
    spare: Vec<Vec<u8>>,
    /// A group of records is open: its records are committed whole.
    group_open: bool,
    /// Where the open group's records begin in the open batch: (op index, byte offset); None
    /// if no op of it was added yet. (0, `BATCH_HEADER_BYTES`) once it continues from an
    /// earlier batch.
    group_from: Option<(u32, usize)>,
}

impl BatchBuilder {
    pub fn new(next_seq: u64) -> BatchBuilder {
        BatchBuilder {
            next_seq,
            taken_to: next_seq,
            first_seq: next_seq,
            op_count: 0,
            base_time_ns: 0,
            batch: vec![0; BATCH_HEADER_BYTES],
            sealed: Vec::new(),
            sealed_bytes: 0,
            spare: Vec::new(),
            group_open: false,
            group_from: None,
        }
    }

    /// Opens or closes the group of records the next ops belong to (`Level::group`): a
    /// commit must not take frames while one is open (the last would lack the flag).
    pub fn set_group_open(&mut self, open: bool) {
        self.group_open = open;
        self.group_from = None;
    }

    /// Counts an op that is not encoded (persistence has stopped; only a checkpoint, which
    /// holds every op, can resume it).
    pub fn skip(&mut self) {
        self.next_seq += 1;
    }

    /// Sequence number the next op gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The first op of the next batch `take_batch` returns: ops before it were taken.
    pub fn taken_to(&self) -> u64 {
        self.taken_to
    }

    pub fn is_empty(&self) -> bool {
        self.op_count == 0 && self.sealed.is_empty()
    }

    /// Bytes gathered so far.
    pub fn body_bytes(&self) -> usize {
        self.batch.len() - BATCH_HEADER_BYTES + self.sealed_bytes
    }

    /// Encodes `op` into the open batch; returns its sequence number. While a group is open,
    /// the batch is sealed only when the next op might not fit (`GROUP_WHOLE_BYTES_MAX`), so
    /// that a group of up to that size stays in one batch; a larger one continues in the next
    /// (`GROUP_CONTINUES`), and replay drops a group whose last batch is missing.
    pub fn add(&mut self, op: &Op<'_>, time_ns: i64) -> u64 {
        if self.op_count == 0 {
            self.base_time_ns = time_ns;
        }
        if self.group_open && self.group_from.is_none() {
            self.group_from = Some((self.op_count, self.batch.len()));
        }
        codec::encode_op(op, self.base_time_ns, &mut self.batch);
        self.op_count += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        if !self.group_open {
            if self.body_len() > BATCH_BODY_BYTES_MAX / 2 {
                self.seal(false);
            }
        } else if self.body_len() > GROUP_WHOLE_BYTES_MAX {
            self.split_before_group();
            if self.body_len() > GROUP_WHOLE_BYTES_MAX {
                self.seal(true);
                self.group_from = Some((0, BATCH_HEADER_BYTES));
            }
        }
        debug_assert!(self.body_len() <= BATCH_BODY_BYTES_MAX);
        seq
    }

    /// The open batch's body length.
    fn body_len(&self) -> usize {
        self.batch.len() - BATCH_HEADER_BYTES
    }

    /// If the open group began after other records of the open batch, seals those records as
    /// a batch of their own and moves the group's into a new one (same base time, so their
    /// encodings stay valid): a batch flagged `GROUP_CONTINUES` holds only its group.
    fn split_before_group(&mut self) {
        let Some((first_op, from)) = self.group_from.filter(|&(op, _)| op > 0) else {
            return;
        };
        let mut group = self.spare.pop().unwrap_or_default();
        group.clear();
        group.resize(BATCH_HEADER_BYTES, 0);
        group.extend_from_slice(&self.batch[from..]);
        self.batch.truncate(from);
        let (group_ops, base_time_ns) = (self.op_count - first_op, self.base_time_ns);
        self.op_count = first_op;
        self.seal_open(false);
        let emptied = std::mem::replace(&mut self.batch, group);
        self.spare.push(emptied);
        self.first_seq += u64::from(first_op);
        self.op_count = group_ops;
        self.base_time_ns = base_time_ns;
        self.group_from = Some((0, BATCH_HEADER_BYTES));
        debug_assert_eq!(self.first_seq + u64::from(self.op_count), self.next_seq);
    }

    /// Frames the open batch onto `sealed` and starts a new one (`continues_group`: flagged
    /// `GROUP_CONTINUES`).
    fn seal(&mut self, continues_group: bool) {
        if self.op_count == 0 {
            return;
        }
        self.seal_open(continues_group);
        debug_assert!(self.batch.is_empty());
        self.batch.resize(BATCH_HEADER_BYTES, 0);
        self.first_seq = self.next_seq;
        self.op_count = 0;
    }

    /// Frames the open batch's `op_count` ops onto `sealed`, leaving an empty buffer open.
    fn seal_open(&mut self, continues_group: bool) {
        assert!(
            self.body_len() <= BATCH_BODY_BYTES_MAX,
            "batch over the limit"
        );
        BatchHeader::frame_in_place(
            self.first_seq,
            self.op_count,
            continues_group,
            self.base_time_ns,
            &mut self.batch,
        );
        // Handed over without a copy, behind the batches already sealed (a copy into one
        // buffer faulted in fresh pages for every byte when writers outran the committer).
        let mut next = self.spare.pop().unwrap_or_default();
        next.clear();
        let sealed = std::mem::replace(&mut self.batch, next);
        self.sealed_bytes += sealed.len();
        self.sealed.push(sealed);
    }

    /// Keeps at most twice what the last batch needed and never more than
    /// BATCH_BUFFER_KEPT_BYTES_MAX of an empty buffer's capacity: after a burst of large
    /// writes it would otherwise hold up to twice the largest batch for as long as the store
    /// stays idle. (Growing a fresh buffer from nothing by doubling copied every batch's
    /// bytes again: a tenth of a small-write workload's time.)
    fn trim(buffer: &mut Vec<u8>, used_bytes: usize) {
        debug_assert!(buffer.is_empty());
        buffer.shrink_to(
            used_bytes
                .saturating_mul(2)
                .min(BATCH_BUFFER_KEPT_BYTES_MAX),
        );
    }

    /// Takes everything gathered (one or more whole batches, framed but for their CRCs) and
    /// starts anew. None if empty. Cheap: meant to be called under a lock, with the CRCs
    /// computed after it ([`Unchecked::finish`]).
    pub fn take_frames(&mut self) -> Option<Unchecked> {
        // A group taken open would end in a batch without the flag: recovered in part.
        debug_assert!(!self.group_open, "a commit took an open group");
        self.seal(false);
        if self.sealed.is_empty() {
            return None;
        }
        self.taken_to = self.next_seq;
        self.sealed_bytes = 0;
        Some(Unchecked(std::mem::take(&mut self.sealed)))
    }

    /// Frames everything gathered (one or more whole batches) and starts anew. None if
    /// empty.
    pub fn take_batch(&mut self) -> Option<Vec<u8>> {
        self.take_frames().map(|u| u.finish().into_bytes())
    }

    /// Gives back the buffers' memory while nothing is gathered (a commit found nothing to
    /// write): kept between batches so that busy writers do not fault their pages in again,
    /// they are not held by an idle store.
    pub fn release_idle(&mut self) {
        if self.op_count == 0 && self.sealed.is_empty() {
            self.spare = Vec::new();
            self.batch.shrink_to(BATCH_HEADER_BYTES);
        }
    }

    /// Bytes of memory held by the builder's buffers (capacity).
    pub fn buffer_capacity_bytes(&self) -> usize {
        let held = |buffers: &[Vec<u8>]| buffers.iter().map(Vec::capacity).sum::<usize>();
        self.batch.capacity() + held(&self.sealed) + held(&self.spare)
    }

    /// Gives back the buffers that `take_frames` returned, once written, for the next
    /// batches to reuse (each trimmed to twice what it held, the largest kept first).
    pub fn recycle(&mut self, framed: Framed) {
        for mut buffer in framed.0 {
            let used_bytes = buffer.len();
            buffer.clear();
            Self::trim(&mut buffer, used_bytes);
            self.spare.push(buffer);
        }
        self.spare.sort_by_key(Vec::capacity);
        let extra = self.spare.len().saturating_sub(BATCH_BUFFERS_SPARE_MAX);
        // Smallest first: the ones dropped; `pop` takes the largest.
        self.spare.drain(..extra);
    }
}

/// Splits whole framed batches (what `BatchBuilder::take_batch` returns) into one slice per
/// batch.
pub fn framed_batches(mut framed: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if framed.len() < BATCH_HEADER_BYTES {
            debug_assert!(framed.is_empty(), "a framed batch was cut");
            return None;
        }
        debug_assert!(
            BatchHeader::read(framed).is_some(),
            "a framed batch lost its magic"
        );
        let len = (BATCH_HEADER_BYTES + le_u32(framed, 4) as usize).min(framed.len());
        let (batch, rest) = framed.split_at(len);
        framed = rest;
        Some(batch)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adds `bytes` of 512 B writes to `b`.
    fn add_writes(b: &mut BatchBuilder, bytes: usize) {
        let data = [7u8; 512];
        for i in 0..bytes / 512 {
            let op = Op::Write {
                ino: 2,
                offset: (i * 512) as u64,
                data: &data,
                time_ns: 0,
                kill_suidgid: false,
            };
            b.add(&op, 0);
        }
    }

    /// A busy writer's batches reuse the buffers the committer gives back, whole (their
    /// pages stay in memory); an idle builder gives them back (decision 0114).
    #[test]
    fn batch_buffers_are_kept_while_busy_and_released_when_idle() {
        let mut b = BatchBuilder::new(1);
        let batch_bytes = BATCH_BODY_BYTES_MAX / 4;
        add_writes(&mut b, batch_bytes);
        let first = b.take_frames().unwrap().finish();
        assert_eq!(first.0.len(), 1);
        let (first_at, first_capacity) = (first.0[0].as_ptr(), first.0[0].capacity());
        let held_bytes = first_capacity + b.buffer_capacity_bytes();
        assert!(first_capacity >= batch_bytes);
        b.recycle(first);
        assert_eq!(b.buffer_capacity_bytes(), held_bytes, "nothing trimmed");
        // The second batch is built in the other buffer, the third in the first one again.
        add_writes(&mut b, batch_bytes);
        let second = b.take_frames().unwrap().finish();
        b.recycle(second);
        add_writes(&mut b, batch_bytes);
        let third = b.take_frames().unwrap().finish();
        assert_eq!(third.0[0].as_ptr(), first_at, "built in the kept buffer");
        b.recycle(third);
        assert!(b.buffer_capacity_bytes() >= 2 * batch_bytes);
        b.release_idle();
        assert!(b.buffer_capacity_bytes() <= 2 * BATCH_HEADER_BYTES);
        // Nothing gathered is dropped by a release.
        add_writes(&mut b, 512);
        b.release_idle();
        let mut c = BatchBuilder::new(1);
        add_writes(&mut c, 512);
        assert_eq!(b.take_batch().unwrap().len(), c.take_batch().unwrap().len());
    }

    /// When writers outrun the committer, batches sealed behind one another stay in their
    /// own buffers (not copied into one), and read back as one journal, in order.
    #[test]
    fn batches_sealed_before_a_commit_keep_their_buffers() {
        let mut b = BatchBuilder::new(1);
        let ops = 3 * BATCH_BODY_BYTES_MAX / 2 / 512;
        add_writes(&mut b, ops * 512);
        let framed = b.take_frames().unwrap().finish();
        assert!(framed.0.len() >= 3, "{} buffers", framed.0.len());
        assert_eq!(framed.batches().count(), framed.0.len());
        let mut journal = Header {
            base_seq: 1,
            ..header()
        }
        .encode()
        .to_vec();
        for batch in framed.batches() {
            journal.extend_from_slice(batch);
        }
        let s = scan(&journal).unwrap();
        assert_eq!(s.tail, Tail::Clean);
        assert_eq!(s.batches.len(), framed.0.len());
        let ops_read: u64 = s.batches.iter().map(|x| u64::from(x.op_count)).sum();
        assert_eq!(ops_read, ops as u64);
        b.recycle(framed);
        assert!(b.spare.len() <= BATCH_BUFFERS_SPARE_MAX);
    }

    #[test]
    fn framed_batches_splits_what_take_batch_returns() {
        let mut b = BatchBuilder::new(7);
        let big = vec![1u8; 9 << 20];
        for i in 0..8 {
            let op = Op::Write {
                ino: 2,
                offset: i << 24,
                data: &big,
                time_ns: 0,
                kill_suidgid: false,
            };
            b.add(&op, 0);
        }
        let framed = b.take_batch().unwrap();
        let pieces: Vec<&[u8]> = framed_batches(&framed).collect();
        assert!(pieces.len() >= 2, "{} batches", pieces.len());
        assert_eq!(pieces.iter().map(|p| p.len()).sum::<usize>(), framed.len());
        let mut journal = Header {
            base_seq: 7,
            ..header()
        }
        .encode()
        .to_vec();
        for (i, piece) in pieces.iter().enumerate() {
            journal.extend_from_slice(piece);
            let s = scan(&journal).unwrap();
            assert_eq!((s.batches.len(), s.tail.clone()), (i + 1, Tail::Clean));
        }
    }

    #[test]
    fn batches_taken_in_recycled_buffers_scan_whole() {
        // Each commit's buffer is given back and reused by the next batch (decision 0095):
        // what a later commit takes must be framed and checksummed as if fresh.
        let mut b = BatchBuilder::new(7);
        let mut journal = Header {
            base_seq: 7,
            ..header()
        }
        .encode()
        .to_vec();
        for round in 0..4u64 {
            let data = vec![round as u8; 1000 + 3000 * round as usize];
            for i in 0..3 {
                let op = Op::Write {
                    ino: 2,
                    offset: i * 4096,
                    data: &data,
                    time_ns: 0,
                    kill_suidgid: false,
                };
                b.add(&op, round as i64);
            }
            let framed = b.take_frames().unwrap().finish();
            for batch in framed.batches() {
                journal.extend_from_slice(batch);
            }
            b.recycle(framed);
            let s = scan(&journal).unwrap();
            assert_eq!(s.batches.len(), round as usize + 1);
            assert_eq!(s.tail, Tail::Clean);
            let last = s.batches.last().unwrap();
            assert_eq!((last.first_seq, last.op_count), (7 + 3 * round, 3));
        }
        assert!(b.take_frames().is_none());
    }

    /// A journal (zeros ahead) of: `big_before` 16 MiB writes and `before` unlinks outside any
    /// group, then a group of `writes` 16 MiB writes (more than a batch holds), then one
    /// unlink; its batches' ends.
    fn journal_with_a_large_group(
        big_before: u64,
        before: usize,
        writes: u64,
    ) -> (Vec<u8>, Vec<usize>) {
        let mut b = BatchBuilder::new(100);
        let unlink = |name: &'static [u8]| Op::Unlink {
            parent: 1,
            name,
            time_ns: 5,
        };
        let data = vec![7u8; crate::limits::WRITE_BYTES_MAX];
        let write = |ino, i: u64| Op::Write {
            ino,
            offset: i << 24,
            data: &data,
            time_ns: 9 + i as i64,
            kill_suidgid: false,
        };
        for i in 0..big_before {
            b.add(&write(3, i), 4);
        }
        for _ in 0..before {
            b.add(&unlink(b"before"), 5);
        }
        b.set_group_open(true);
        for i in 0..writes {
            b.add(&write(2, i), 9 + i as i64);
        }
        b.set_group_open(false);
        b.add(&unlink(b"after"), 20);
        let framed = b.take_batch().unwrap();
        let mut out = header().encode_zeros_ahead().to_vec();
        let mut ends = Vec::new();
        for batch in framed_batches(&framed) {
            out.extend_from_slice(batch);
            ends.push(out.len());
        }
        (out, ends)
    }

    #[test]
    fn a_group_larger_than_a_batch_is_read_whole_or_not_at_all() {
        // The group first in its batch; after records of its batch (moved to a batch of its
        // own); and so after a batch sealed earlier in the same commit.
        for (big_before, before) in [(0, 0), (0, 3), (2, 1)] {
            let (j, ends) = journal_with_a_large_group(big_before, before, 4);
            let ops_before = big_before + before as u64;
            let mut whole = j.clone();
            whole.resize(j.len() + JOURNAL_ZEROS_AHEAD_BYTES_MIN, 0);
            let s = scan(&whole).unwrap();
            assert_eq!(s.tail, Tail::Clean);
            // Every batch of the group but its last flagged, and holding nothing but the
            // group's writes; none before it.
            let flags: Vec<bool> = s.batches.iter().map(|b| b.continues_group).collect();
            let group_first = flags.iter().position(|&f| f).expect("a flagged batch");
            let group_last = flags.len() - 1;
            assert_eq!(
                group_first,
                usize::from(big_before > 0) + usize::from(before > 0)
            );
            assert!(
                flags[group_first..group_last].iter().all(|&f| f),
                "{flags:?}"
            );
            assert!(!flags[group_last]);
            let mut seqs = Vec::new();
            for batch in &s.batches {
                batch
                    .for_each_op(|seq, op| {
                        if batch.continues_group {
                            assert!(matches!(op, Op::Write { ino: 2, .. }), "{op:?}");
                        }
                        if let Op::Write { ino: 2, offset, .. } = op {
                            assert_eq!(offset >> 24, seq - 100 - ops_before);
                        }
                        seqs.push(seq);
                        Ok(())
                    })
                    .unwrap();
            }
            assert_eq!(seqs, (100..100 + ops_before + 5).collect::<Vec<_>>());
            // Cut after any batch but the last, or torn inside any: none of the group.
            let group_at = if group_first == 0 {
                HEADER_BYTES
            } else {
                ends[group_first - 1]
            };
            for (i, &end) in ends.iter().enumerate() {
                let start = if i == 0 { HEADER_BYTES } else { ends[i - 1] };
                for cut in [start + 1, end] {
                    let mut cut_bytes = j[..cut].to_vec();
                    cut_bytes.resize(j.len() + JOURNAL_ZEROS_AHEAD_BYTES_MIN, 0);
                    let s = scan(&cut_bytes).unwrap();
                    // What a cut took may have been zeros anyway (a record's last byte).
                    if cut_bytes[..j.len()] == j[..] {
                        assert_eq!(s.tail, Tail::Clean);
                        continue;
                    }
                    let kept = ends[..group_first]
                        .iter()
                        .take_while(|&&e| cut_bytes[..e] == j[..e])
                        .count();
                    assert_eq!(s.batches.len(), kept, "cut {cut} in batch {i}");
                    if cut <= group_at {
                        continue;
                    }
                    assert_eq!(s.next_seq(), 100 + ops_before);
                    assert_eq!(s.valid_len, group_at as u64);
                    assert!(
                        matches!(s.tail, Tail::Torn { offset, .. } if offset == group_at as u64),
                        "cut {cut}: {:?}",
                        s.tail
                    );
                }
            }
        }
    }

    fn header() -> Header {
        Header {
            store_id: [9; 16],
            base_seq: 100,
            created_ns: 1_700_000_000_000_000_000,
        }
    }

    fn journal_with(batches: &[&[(&[u8], u64)]]) -> Vec<u8> {
        let mut out = header().encode().to_vec();
        let mut b = BatchBuilder::new(100);
        for batch in batches {
            for (name, t) in batch.iter() {
                let op = Op::Unlink {
                    parent: 1,
                    name,
                    time_ns: *t as i64,
                };
                b.add(&op, *t as i64);
            }
            out.extend(b.take_batch().unwrap());
        }
        out
    }

    fn names(scan: &Scan<'_>) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        for b in &scan.batches {
            b.for_each_op(|seq, op| {
                if let Op::Unlink { name, .. } = op {
                    out.push((seq, name.to_vec()));
                }
                Ok(())
            })
            .unwrap();
        }
        out
    }

    proptest::proptest! {
        /// Any bytes after a valid header scan to a result, never a panic, and every batch
        /// the scan accepts decodes or reports an error.
        #[test]
        fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let mut bytes = header().encode().to_vec();
            bytes.extend_from_slice(&tail);
            if let Ok(s) = scan(&bytes) {
                for b in &s.batches {
                    let _ = b.for_each_op(|_, _| Ok(()));
                }
            }
            let _ = scan(&tail);
        }
    }

    #[test]
    fn round_trip_and_sequence_numbers() {
        let j = journal_with(&[&[(b"a", 5), (b"b", 6)], &[(b"c", 7)]]);
        let scan = scan(&j).unwrap();
        assert_eq!(scan.tail, Tail::Clean);
        assert_eq!(scan.next_seq(), 103);
        assert_eq!(
            names(&scan),
            vec![
                (100, b"a".to_vec()),
                (101, b"b".to_vec()),
                (102, b"c".to_vec())
            ]
        );
        assert_eq!(scan.valid_len, j.len() as u64);
    }

    #[test]
    fn every_truncation_is_a_torn_tail_keeping_whole_batches() {
        let j = journal_with(&[&[(b"a", 5)], &[(b"bb", 6), (b"cc", 7)], &[(b"d", 8)]]);
        let full = scan(&j).unwrap();
        let ends: Vec<u64> = full
            .batches
            .iter()
            .map(|b| b.offset + (BATCH_HEADER_BYTES + b.body.len()) as u64)
            .collect();
        for len in HEADER_BYTES..j.len() {
            let s = scan(&j[..len]).unwrap();
            let whole = ends.iter().filter(|&&e| e <= len as u64).count();
            assert_eq!(s.batches.len(), whole, "at length {len}");
            match s.tail {
                Tail::Clean => assert!(len == HEADER_BYTES || ends.contains(&(len as u64))),
                Tail::Torn { .. } => {}
                Tail::Damaged { .. } => panic!("truncation at {len} seen as damage"),
                Tail::Cut { .. } => panic!("a journal without FLAG_ZEROS_AHEAD seen as cut"),
            }
        }
    }

    #[test]
    fn reserved_zeros_are_a_clean_end_and_a_torn_write_into_them_is_torn() {
        let j = journal_with(&[&[(b"a", 5)], &[(b"b", 6)]]);
        let full = scan(&j).unwrap();
        let mut reserved = j.clone();
        reserved.resize(j.len() + 4096, 0);
        let s = scan(&reserved).unwrap();
        assert_eq!(s.tail, Tail::Clean);
        assert_eq!((s.valid_len, s.reserved_bytes), (j.len() as u64, 4096));
        assert_eq!(s.next_seq(), full.next_seq());
        // A third batch cut anywhere inside the reserve (the rest still zeros) is torn, and
        // so is one whose first bytes never landed (zeros, then some of its later bytes).
        let three = journal_with(&[&[(b"a", 5)], &[(b"b", 6)], &[(b"c", 7)]]);
        for cut in j.len() + 1..three.len() {
            let mut torn = three[..cut].to_vec();
            torn.resize(three.len() + 4096, 0);
            let s = scan(&torn).unwrap();
            if three[cut..].iter().all(|&b| b == 0) {
                // What the cut lost was zeros anyway: the batch is whole.
                assert_eq!((s.batches.len(), s.tail.clone()), (3, Tail::Clean));
            } else {
                let content_end = torn.iter().rposition(|&b| b != 0).unwrap() + 1;
                let expected = (content_end - j.len()) as u64;
                assert!(
                    matches!(s.tail, Tail::Torn { bytes, .. } if bytes == expected),
                    "cut {cut}: {:?}",
                    s.tail
                );
                assert_eq!((s.valid_len, s.reserved_bytes), (j.len() as u64, 0));
            }
            let mut holed = reserved.clone();
            holed[cut..three.len()].copy_from_slice(&three[cut..]);
            if holed[j.len()..].iter().any(|&b| b != 0) {
                let s = scan(&holed).unwrap();
                assert!(
                    matches!(s.tail, Tail::Torn { .. }),
                    "hole to {cut}: {:?}",
                    s.tail
                );
            }
        }
    }

    #[test]
    fn a_flipped_bit_in_the_last_batch_is_torn_in_the_middle_is_damage() {
        let j = journal_with(&[&[(b"a", 5)], &[(b"b", 6)], &[(b"c", 7)]]);
        let full = scan(&j).unwrap();
        let last = full.batches[2].offset as usize;
        let middle = full.batches[1].offset as usize;
        let mut torn = j.clone();
        torn[last + BATCH_HEADER_BYTES + 1] ^= 1; // in the body
        let s = scan(&torn).unwrap();
        assert_eq!(s.batches.len(), 2);
        assert!(matches!(s.tail, Tail::Torn { .. }), "{:?}", s.tail);
        let mut damaged = j.clone();
        damaged[middle + BATCH_HEADER_BYTES + 1] ^= 0x10;
        let s = scan(&damaged).unwrap();
        assert_eq!(s.batches.len(), 1);
        match s.tail {
            Tail::Damaged {
                offset,
                next_valid_offset,
                ..
            } => {
                assert_eq!(offset, middle as u64);
                assert_eq!(next_valid_offset, last as u64);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_headers_are_refused() {
        let j = journal_with(&[&[(b"a", 5)]]);
        assert!(matches!(scan(&j[..10]), Err(JournalError::Header(_))));
        // The messages of the release before the shared header codec.
        let message = |bytes: &[u8]| scan(bytes).unwrap_err().to_string();
        assert_eq!(message(&j[..10]), "journal header: shorter than its header");
        let mut foreign = j.clone();
        foreign[0] = b'X';
        assert_eq!(
            message(&foreign),
            "journal header: not a rampart journal (bad magic)"
        );
        let mut damaged = j.clone();
        damaged[40] ^= 1;
        assert_eq!(
            message(&damaged),
            "journal header: header checksum mismatch"
        );
        let mut bad = j.clone();
        bad[33] ^= 1;
        assert!(matches!(scan(&bad), Err(JournalError::Header(_))));
        let mut newer = header();
        newer.base_seq = 1;
        let mut v2 = newer.encode();
        v2[8] = 4;
        let crc = crc32c::crc32c(&v2[..60]);
        v2[60..64].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(scan(&v2), Err(JournalError::Version(4))));
        assert_eq!(
            message(&v2),
            "journal format version 4 is not supported (this rampart reads 1 to 3)"
        );
    }

    #[test]
    fn a_last_batch_missing_a_part_of_any_length_reads_as_a_tear() {
        // As tests/powercut's LazyFS `torn-op parts=3 persist=1,3` leaves it: a small batch
        // (two renames) whose middle third was never written, its end written.
        let mut j = header().encode_zeros_ahead().to_vec();
        let mut b = BatchBuilder::new(100);
        for t in [5i64, 9] {
            let op = Op::Rename {
                parent: 1,
                name: b"a",
                new_parent: 1,
                new_name: b"b",
                flags: 0,
                time_ns: t,
            };
            b.add(&op, t);
        }
        j.extend(b.take_batch().unwrap());
        let end = j.len();
        let start = scan(&j).unwrap().batches[0].offset as usize;
        let batch_bytes = end - start;
        assert_ne!(j[end - 1], 0, "the batch ends in a time difference");
        j.resize(end + 4096, 0);
        for part in [batch_bytes / 3, 8, 1] {
            for from in start + BATCH_HEADER_BYTES..end - part {
                let mut holed = j.clone();
                if holed[from..from + part].iter().all(|&b| b == 0) {
                    continue;
                }
                holed[from..from + part].fill(0);
                let tail = scan(&holed).unwrap().tail;
                assert!(
                    matches!(tail, Tail::Torn { .. }),
                    "{part} bytes lost at {from} of a {batch_bytes}-byte batch: {tail:?}"
                );
            }
        }
    }

    /// A journal as this release's daemon leaves it: flagged, batches, the zeros after them.
    fn zeros_ahead_journal(batches: usize) -> (Vec<u8>, Vec<usize>) {
        let mut out = header().encode_zeros_ahead().to_vec();
        let mut b = BatchBuilder::new(100);
        let mut ends = Vec::new();
        for i in 0..batches {
            for _ in 0..=i {
                let op = Op::Unlink {
                    parent: 1,
                    name: b"some name",
                    time_ns: 5,
                };
                b.add(&op, 5);
            }
            out.extend(b.take_batch().unwrap());
            ends.push(out.len());
        }
        (out, ends)
    }

    #[test]
    fn a_zeros_ahead_journal_cut_anywhere_is_cut_not_torn() {
        let (j, ends) = zeros_ahead_journal(4);
        // Whole, with the zeros: clean.
        let mut whole = j.clone();
        whole.resize(j.len() + JOURNAL_ZEROS_AHEAD_BYTES_MIN, 0);
        assert_eq!(scan(&whole).unwrap().tail, Tail::Clean);
        // Cut at any byte after the header (the zeros gone, and maybe batches): cut.
        for len in HEADER_BYTES..=j.len() {
            let s = scan(&j[..len]).unwrap();
            assert!(
                matches!(s.tail, Tail::Cut { .. }),
                "cut at {len}: {:?}",
                s.tail
            );
            let kept = ends.iter().filter(|&&e| e <= len).count();
            assert_eq!(s.batches.len(), kept, "cut at {len}");
        }
        // Fewer zeros than the writer keeps after the last batch: cut too.
        let mut short = j.clone();
        short.resize(j.len() + JOURNAL_ZEROS_AHEAD_BYTES_MIN - 1, 0);
        assert!(matches!(scan(&short).unwrap().tail, Tail::Cut { .. }));
        // The same bytes without the flag: the lenient reading of older journals.
        let mut old = header().encode().to_vec();
        old.extend_from_slice(&j[HEADER_BYTES..ends[1] + 10]);
        assert!(matches!(scan(&old).unwrap().tail, Tail::Torn { .. }));
    }

    #[test]
    fn a_zeros_ahead_journal_torn_by_a_crash_is_torn_at_every_byte() {
        // What a crash leaves: the last batch written over synced zeros, torn at any byte (in
        // file order, or with its first sectors missing), the zeros after it still there.
        let (j, ends) = zeros_ahead_journal(3);
        let last = ends[1];
        for cut in last..j.len() {
            for first_missing in [false, true] {
                let mut torn = j[..cut].to_vec();
                if first_missing {
                    // The batch's first bytes not yet on the disk (out-of-order sectors).
                    torn[last..last.min(cut).max(last + 8).min(cut)].fill(0);
                }
                torn.resize(j.len() + JOURNAL_ZEROS_AHEAD_BYTES_MIN, 0);
                let s = scan(&torn).unwrap();
                assert!(
                    matches!(s.tail, Tail::Torn { .. } | Tail::Clean),
                    "tear at {cut} (first missing {first_missing}): {:?}",
                    s.tail
                );
                // The batch's last bytes may be zeros: cut among them, it is whole.
                let whole = torn[..j.len()] == j[..];
                assert_eq!(s.batches.len(), if whole { 3 } else { 2 }, "tear at {cut}");
            }
        }
    }
}
