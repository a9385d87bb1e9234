//! The journal's record codec: one [`Op`] in compact binary form.
//!
//! The journal logs every applied op with [`encode_op`]; replay reads them back with
//! [`decode_op`] and applies them again. As in the compact inode encodings of mramfs (§3.1),
//! every number is a variable-length integer, so the small values that dominate (inode numbers,
//! modes, ids, time deltas, lengths) take one to four bytes instead of four to eight.
//!
//! ## Primitives
//!
//! - **varint**: an unsigned LEB128 integer of at most 64 bits. Seven bits per byte, least
//!   significant group first; the high bit of a byte is set when another byte follows. 1 to 10
//!   bytes. Only the shortest encoding is accepted: a last byte of 0 after another byte is
//!   *overlong*, and so is a tenth byte above 1 (the value would not fit 64 bits).
//! - **zigzag**: a signed 64-bit integer mapped to unsigned as `(n << 1) ^ (n >> 63)`
//!   (0, -1, 1, -2, … become 0, 1, 2, 3, …), then written as a varint, so small magnitudes of
//!   either sign are short.
//! - **time**: a timestamp (i64 nanoseconds since the Unix epoch) as the zigzag of its
//!   difference from the batch's base time, `time - base` computed modulo 2^64 (so every pair
//!   of i64 values round-trips). The journal writer chooses the base per batch; a time within
//!   ±1 ms of it costs at most 3 bytes, within ±134 ms at most 4, within ±17 s at most 5.
//! - **u32**: a varint whose value must fit 32 bits (mode, uid, gid, rdev, generation, rename
//!   flags).
//! - **i32**: a zigzag whose value must fit a signed 32-bit integer (fallocate mode, xattr
//!   flags).
//! - **bytes**: a varint length, then that many raw bytes. Each field has a limit (below); a
//!   longer length is rejected before any byte of the field is read.
//!
//! ## Records
//!
//! A record is one tag byte naming the op, then its fields in the order listed, with nothing
//! between them; a record carries no length or checksum of its own (the journal's framing does).
//! Records are self-delimiting, so a batch is simply records one after another.
//!
//! | tag | op | fields |
//! |---|---|---|
//! | 1 | Create | parent varint, name bytes ≤ 255, ino varint, generation u32, mode u32, uid u32, gid u32, rdev u32, target bytes ≤ 4095, time |
//! | 2 | Link | ino varint, parent varint, name bytes ≤ 255, time |
//! | 3 | Unlink | parent varint, name bytes ≤ 255, time |
//! | 4 | Rmdir | parent varint, name bytes ≤ 255, time |
//! | 5 | Rename | parent varint, name bytes ≤ 255, new_parent varint, new_name bytes ≤ 255, flags u32, time |
//! | 6 | SetAttr | ino varint, presence byte, then only the present ones of: mode u32, uid u32, gid u32, size varint, atime time, mtime time; then ctime time |
//! | 7 | Write | ino varint, offset varint, flags byte, time, data bytes ≤ 16 MiB |
//! | 8 | Fallocate | ino varint, offset varint, length varint, mode i32, time |
//! | 9 | SetXattr | ino varint, name bytes ≤ 255, value bytes ≤ 65536, flags i32, time |
//! | 10 | RemoveXattr | ino varint, name bytes ≤ 255, time |
//! | 11 | SetDurability | ino varint, durability byte (`Durability::code`), time |
//!
//! Tag 0 and tags 12–255 are unknown and rejected (a zero-filled tail is never taken for ops).
//!
//! The SetAttr presence byte: bit 0 mode, bit 1 uid, bit 2 gid, bit 3 size, bit 4 atime,
//! bit 5 mtime (each set when the field is present and follows), bit 6 `kill_suidgid`; bit 7 is
//! reserved and must be 0. The Write flags byte: bit 0 `kill_suidgid`; bits 1–7 must be 0.
//!
//! The limits are the engine's: names [`crate::limits::NAME_BYTES_MAX`], symlink targets
//! [`SYMLINK_TARGET_BYTES_MAX`], xattr names and values [`crate::limits::XATTR_NAME_BYTES_MAX`] and
//! [`crate::limits::XATTR_VALUE_BYTES_MAX`], write data [`WRITE_BYTES_MAX`]. The codec checks only the encoding,
//! not the meaning: an empty name or an offset past the largest file size decodes, and the
//! engine refuses it on apply as it would have refused it the first time.
//!
//! The encoding is canonical: every op has exactly one encoding for a given base time, and
//! decoding accepts only that one, so re-encoding a decoded record gives back its bytes.
//!
//! ## Decoding
//!
//! Decoders take `&mut &[u8]` and advance it past what they read; on an error they leave it
//! where it was. Decoded ops borrow names and data from the input, copying nothing. A length is
//! never trusted beyond the remaining input or the field's limit, so arbitrary bytes give an
//! `Ok` or a [`DecodeError`], never a panic or a large allocation.

use std::fmt;

use crate::limits::SYMLINK_TARGET_BYTES_MAX;
use crate::op::Op;
use crate::time::TimeNs;

pub use crate::limits::WRITE_BYTES_MAX;

pub use crate::limits::VARINT_BYTES_MAX;

/// The tag byte of each op.
pub mod tag {
    pub const CREATE: u8 = 1;
    pub const LINK: u8 = 2;
    pub const UNLINK: u8 = 3;
    pub const RMDIR: u8 = 4;
    pub const RENAME: u8 = 5;
    pub const SET_ATTR: u8 = 6;
    pub const WRITE: u8 = 7;
    pub const FALLOCATE: u8 = 8;
    pub const SET_XATTR: u8 = 9;
    pub const REMOVE_XATTR: u8 = 10;
    pub const SET_DURABILITY: u8 = 11;
    /// Journal format version 2 on.
    pub const WRITE_EXTENT: u8 = 12;
    pub const MIGRATE: u8 = 13;
}

/// SetAttr presence bits.
const SA_MODE: u8 = 1 << 0;
const SA_UID: u8 = 1 << 1;
const SA_GID: u8 = 1 << 2;
const SA_SIZE: u8 = 1 << 3;
const SA_ATIME: u8 = 1 << 4;
const SA_MTIME: u8 = 1 << 5;
const SA_KILL_SUIDGID: u8 = 1 << 6;
const SA_RESERVED: u8 = 1 << 7;

/// Write flag bits.
const WR_KILL_SUIDGID: u8 = 1 << 0;

/// What was wrong with an encoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended in the middle of a record.
    Truncated,
    /// A varint was longer than its shortest form, or did not fit 64 bits.
    Overlong,
    /// The tag byte names no op.
    UnknownTag(u8),
    /// A byte string's length exceeds its field's limit.
    TooLong { what: &'static str, len: u64 },
    /// A field's value is out of its range (the field is named).
    BadValue(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "the record ends in the middle of a field"),
            DecodeError::Overlong => write!(f, "overlong or overflowing varint"),
            DecodeError::UnknownTag(t) => write!(f, "unknown op tag {t:#04x}"),
            DecodeError::TooLong { what, len } => {
                write!(f, "{what} of {len} bytes is longer than its limit")
            }
            DecodeError::BadValue(what) => write!(f, "{what} is out of range"),
        }
    }
}

impl std::error::Error for DecodeError {}

// ---------------------------------------------------------------------------------------------
// Primitives

/// Appends `v` as an unsigned LEB128 varint (1–10 bytes).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint in its shortest form.
pub fn get_varint(input: &mut &[u8]) -> Result<u64, DecodeError> {
    let bytes = *input;
    let mut v = 0u64;
    for (i, &b) in bytes.iter().take(VARINT_BYTES_MAX).enumerate() {
        if i == VARINT_BYTES_MAX - 1 && b > 1 {
            // Bits beyond the 64th, or a continuation past the tenth byte.
            return Err(DecodeError::Overlong);
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err(DecodeError::Overlong);
            }
            *input = &bytes[i + 1..];
            return Ok(v);
        }
    }
    Err(DecodeError::Truncated)
}

/// The zigzag mapping of a signed integer to an unsigned one.
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// Appends a signed integer as a zigzag varint.
pub fn put_zigzag(out: &mut Vec<u8>, v: i64) {
    put_varint(out, zigzag(v));
}

/// Reads a zigzag varint.
pub fn get_zigzag(input: &mut &[u8]) -> Result<i64, DecodeError> {
    get_varint(input).map(unzigzag)
}

/// Appends a byte string: its length as a varint, then the bytes.
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Reads a byte string of at most `max_len` bytes, borrowing it from the input.
pub fn get_bytes<'a>(input: &mut &'a [u8], max_len: usize) -> Result<&'a [u8], DecodeError> {
    get_field_bytes(input, max_len, "byte string")
}

/// Reads one byte.
pub fn get_u8(input: &mut &[u8]) -> Result<u8, DecodeError> {
    let (&b, rest) = input.split_first().ok_or(DecodeError::Truncated)?;
    *input = rest;
    Ok(b)
}

/// [`get_bytes`] naming the field in a `TooLong` error.
fn get_field_bytes<'a>(
    input: &mut &'a [u8],
    max_len: usize,
    what: &'static str,
) -> Result<&'a [u8], DecodeError> {
    let mut cur = *input;
    let len = get_varint(&mut cur)?;
    if len > max_len as u64 {
        return Err(DecodeError::TooLong { what, len });
    }
    // len ≤ max_len, so it fits a usize; checked against what is left before slicing.
    let len = len as usize;
    if len > cur.len() {
        return Err(DecodeError::Truncated);
    }
    let (bytes, rest) = cur.split_at(len);
    *input = rest;
    Ok(bytes)
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    put_varint(out, u64::from(v));
}

fn get_u32(input: &mut &[u8], what: &'static str) -> Result<u32, DecodeError> {
    let mut cur = *input;
    let v = u32::try_from(get_varint(&mut cur)?).map_err(|_| DecodeError::BadValue(what))?;
    *input = cur;
    Ok(v)
}

fn put_i32(out: &mut Vec<u8>, v: i32) {
    put_zigzag(out, i64::from(v));
}

fn get_i32(input: &mut &[u8], what: &'static str) -> Result<i32, DecodeError> {
    let mut cur = *input;
    let v = i32::try_from(get_zigzag(&mut cur)?).map_err(|_| DecodeError::BadValue(what))?;
    *input = cur;
    Ok(v)
}

fn put_time(out: &mut Vec<u8>, t: TimeNs, base: TimeNs) {
    put_zigzag(out, t.wrapping_sub(base));
}

fn get_time(input: &mut &[u8], base: TimeNs) -> Result<TimeNs, DecodeError> {
    get_zigzag(input).map(|d| base.wrapping_add(d))
}

fn put_name(out: &mut Vec<u8>, name: &[u8]) {
    debug_assert!(name.len() <= crate::limits::NAME_BYTES_MAX);
    put_bytes(out, name);
}

fn get_name<'a>(input: &mut &'a [u8]) -> Result<&'a [u8], DecodeError> {
    get_field_bytes(input, crate::limits::NAME_BYTES_MAX, "name")
}

// ---------------------------------------------------------------------------------------------
// Records

/// Appends the record of `op`, its times relative to `base_time_ns`.
///
/// The op must respect the field limits of the format (it does when the engine applied it); a
/// longer field would be written but refused on decode.
pub fn encode_op(op: &Op<'_>, base_time_ns: i64, out: &mut Vec<u8>) {
    match op {
        Op::Create { .. }
        | Op::Link { .. }
        | Op::Unlink { .. }
        | Op::Rmdir { .. }
        | Op::Rename { .. } => encode_entry_op(op, base_time_ns, out),
        Op::SetAttr { .. } => encode_set_attr(op, base_time_ns, out),
        Op::Write { .. }
        | Op::Fallocate { .. }
        | Op::SetXattr { .. }
        | Op::RemoveXattr { .. }
        | Op::SetDurability { .. }
        | Op::WriteExtent { .. }
        | Op::Migrate { .. } => encode_inode_op(op, base_time_ns, out),
    }
}

/// The records of ops on directory entries: Create, Link, Unlink, Rmdir, Rename.
fn encode_entry_op(op: &Op<'_>, base: TimeNs, out: &mut Vec<u8>) {
    match *op {
        Op::Create {
            parent,
            name,
            ino,
            generation,
            mode,
            uid,
            gid,
            rdev,
            target,
            time_ns,
        } => {
            debug_assert!(target.len() <= SYMLINK_TARGET_BYTES_MAX);
            out.push(tag::CREATE);
            put_varint(out, parent);
            put_name(out, name);
            put_varint(out, ino);
            put_u32(out, generation);
            put_u32(out, mode);
            put_u32(out, uid);
            put_u32(out, gid);
            put_u32(out, rdev);
            put_bytes(out, target);
            put_time(out, time_ns, base);
        }
        Op::Link {
            ino,
            parent,
            name,
            time_ns,
        } => {
            out.push(tag::LINK);
            put_varint(out, ino);
            put_varint(out, parent);
            put_name(out, name);
            put_time(out, time_ns, base);
        }
        Op::Unlink {
            parent,
            name,
            time_ns,
        } => {
            out.push(tag::UNLINK);
            put_varint(out, parent);
            put_name(out, name);
            put_time(out, time_ns, base);
        }
        Op::Rmdir {
            parent,
            name,
            time_ns,
        } => {
            out.push(tag::RMDIR);
            put_varint(out, parent);
            put_name(out, name);
            put_time(out, time_ns, base);
        }
        Op::Rename {
            parent,
            name,
            new_parent,
            new_name,
            flags,
            time_ns,
        } => {
            out.push(tag::RENAME);
            put_varint(out, parent);
            put_name(out, name);
            put_varint(out, new_parent);
            put_name(out, new_name);
            put_u32(out, flags);
            put_time(out, time_ns, base);
        }
        _ => unreachable!("not an entry op: {op:?}"),
    }
}

/// The records of ops on one inode's data, xattrs and durability.
fn encode_inode_op(op: &Op<'_>, base: TimeNs, out: &mut Vec<u8>) {
    match *op {
        Op::Write {
            ino,
            offset,
            data,
            time_ns,
            kill_suidgid,
        } => {
            debug_assert!(data.len() <= WRITE_BYTES_MAX);
            out.push(tag::WRITE);
            put_varint(out, ino);
            put_varint(out, offset);
            out.push(if kill_suidgid { WR_KILL_SUIDGID } else { 0 });
            put_time(out, time_ns, base);
            put_bytes(out, data);
        }
        Op::Fallocate {
            ino,
            offset,
            length,
            mode,
            time_ns,
        } => {
            out.push(tag::FALLOCATE);
            put_varint(out, ino);
            put_varint(out, offset);
            put_varint(out, length);
            put_i32(out, mode);
            put_time(out, time_ns, base);
        }
        Op::SetXattr {
            ino,
            name,
            value,
            flags,
            time_ns,
        } => {
            debug_assert!(name.len() <= crate::limits::XATTR_NAME_BYTES_MAX);
            debug_assert!(value.len() <= crate::limits::XATTR_VALUE_BYTES_MAX);
            out.push(tag::SET_XATTR);
            put_varint(out, ino);
            put_bytes(out, name);
            put_bytes(out, value);
            put_i32(out, flags);
            put_time(out, time_ns, base);
        }
        Op::RemoveXattr { ino, name, time_ns } => {
            debug_assert!(name.len() <= crate::limits::XATTR_NAME_BYTES_MAX);
            out.push(tag::REMOVE_XATTR);
            put_varint(out, ino);
            put_bytes(out, name);
            put_time(out, time_ns, base);
        }
        Op::SetDurability {
            ino,
            durability,
            time_ns,
        } => {
            out.push(tag::SET_DURABILITY);
            put_varint(out, ino);
            out.push(durability);
            put_time(out, time_ns, base);
        }
        Op::WriteExtent {
            ino,
            offset,
            len,
            time_ns,
            kill_suidgid,
        } => {
            out.push(tag::WRITE_EXTENT);
            put_varint(out, ino);
            put_varint(out, offset);
            put_varint(out, len);
            out.push(if kill_suidgid { WR_KILL_SUIDGID } else { 0 });
            put_time(out, time_ns, base);
        }
        Op::Migrate { ino, tier, time_ns } => {
            out.push(tag::MIGRATE);
            put_varint(out, ino);
            out.push(tier.code());
            put_time(out, time_ns, base);
        }
        _ => unreachable!("not a data, xattr or durability op: {op:?}"),
    }
}

/// The SetAttr record: its presence byte says which fields follow.
fn encode_set_attr(op: &Op<'_>, base: TimeNs, out: &mut Vec<u8>) {
    let Op::SetAttr {
        ino,
        mode,
        uid,
        gid,
        size_bytes,
        atime_ns,
        mtime_ns,
        ctime_ns,
        kill_suidgid,
    } = *op
    else {
        unreachable!("not a SetAttr: {op:?}")
    };
    let mut presence = 0u8;
    for (present, bit) in [
        (mode.is_some(), SA_MODE),
        (uid.is_some(), SA_UID),
        (gid.is_some(), SA_GID),
        (size_bytes.is_some(), SA_SIZE),
        (atime_ns.is_some(), SA_ATIME),
        (mtime_ns.is_some(), SA_MTIME),
        (kill_suidgid, SA_KILL_SUIDGID),
    ] {
        if present {
            presence |= bit;
        }
    }
    out.push(tag::SET_ATTR);
    put_varint(out, ino);
    out.push(presence);
    if let Some(v) = mode {
        put_u32(out, v);
    }
    if let Some(v) = uid {
        put_u32(out, v);
    }
    if let Some(v) = gid {
        put_u32(out, v);
    }
    if let Some(v) = size_bytes {
        put_varint(out, v);
    }
    if let Some(t) = atime_ns {
        put_time(out, t, base);
    }
    if let Some(t) = mtime_ns {
        put_time(out, t, base);
    }
    put_time(out, ctime_ns, base);
}

/// Reads one record, its times relative to `base_time_ns`, and advances `input` past it. On an
/// error `input` is left where it was. The op borrows its names and data from `input`.
pub fn decode_op<'a>(input: &mut &'a [u8], base_time_ns: i64) -> Result<Op<'a>, DecodeError> {
    let mut cur = *input;
    let op = decode_fields(&mut cur, base_time_ns)?;
    *input = cur;
    Ok(op)
}

/// The tag, then the fields of its op, in the families of the encoder.
fn decode_fields<'a>(r: &mut &'a [u8], base: TimeNs) -> Result<Op<'a>, DecodeError> {
    match get_u8(r)? {
        t @ (tag::CREATE | tag::LINK | tag::UNLINK | tag::RMDIR | tag::RENAME) => {
            decode_entry_op(t, r, base)
        }
        tag::SET_ATTR => decode_set_attr(r, base),
        t @ (tag::WRITE
        | tag::FALLOCATE
        | tag::SET_XATTR
        | tag::REMOVE_XATTR
        | tag::SET_DURABILITY
        | tag::WRITE_EXTENT
        | tag::MIGRATE) => decode_inode_op(t, r, base),
        t => Err(DecodeError::UnknownTag(t)),
    }
}

/// The fields of the ops on directory entries (the tag is read).
fn decode_entry_op<'a>(t: u8, r: &mut &'a [u8], base: TimeNs) -> Result<Op<'a>, DecodeError> {
    Ok(match t {
        tag::CREATE => Op::Create {
            parent: get_varint(r)?,
            name: get_name(r)?,
            ino: get_varint(r)?,
            generation: get_u32(r, "generation")?,
            mode: get_u32(r, "mode")?,
            uid: get_u32(r, "uid")?,
            gid: get_u32(r, "gid")?,
            rdev: get_u32(r, "rdev")?,
            target: get_field_bytes(r, SYMLINK_TARGET_BYTES_MAX, "symlink target")?,
            time_ns: get_time(r, base)?,
        },
        tag::LINK => Op::Link {
            ino: get_varint(r)?,
            parent: get_varint(r)?,
            name: get_name(r)?,
            time_ns: get_time(r, base)?,
        },
        tag::UNLINK => Op::Unlink {
            parent: get_varint(r)?,
            name: get_name(r)?,
            time_ns: get_time(r, base)?,
        },
        tag::RMDIR => Op::Rmdir {
            parent: get_varint(r)?,
            name: get_name(r)?,
            time_ns: get_time(r, base)?,
        },
        tag::RENAME => Op::Rename {
            parent: get_varint(r)?,
            name: get_name(r)?,
            new_parent: get_varint(r)?,
            new_name: get_name(r)?,
            flags: get_u32(r, "rename flags")?,
            time_ns: get_time(r, base)?,
        },
        t => unreachable!("tag {t} is not an entry op's"),
    })
}

/// The fields of a SetAttr (the tag is read): the presence byte, then the fields it names.
fn decode_set_attr<'a>(r: &mut &'a [u8], base: TimeNs) -> Result<Op<'a>, DecodeError> {
    let ino = get_varint(r)?;
    let presence = get_u8(r)?;
    if presence & SA_RESERVED != 0 {
        return Err(DecodeError::BadValue("setattr presence byte"));
    }
    let has = |bit: u8| presence & bit != 0;
    let mode = has(SA_MODE).then(|| get_u32(r, "mode")).transpose()?;
    let uid = has(SA_UID).then(|| get_u32(r, "uid")).transpose()?;
    let gid = has(SA_GID).then(|| get_u32(r, "gid")).transpose()?;
    let size_bytes = has(SA_SIZE).then(|| get_varint(r)).transpose()?;
    let atime_ns = has(SA_ATIME).then(|| get_time(r, base)).transpose()?;
    let mtime_ns = has(SA_MTIME).then(|| get_time(r, base)).transpose()?;
    Ok(Op::SetAttr {
        ino,
        mode,
        uid,
        gid,
        size_bytes,
        atime_ns,
        mtime_ns,
        ctime_ns: get_time(r, base)?,
        kill_suidgid: has(SA_KILL_SUIDGID),
    })
}

/// The fields of the ops on one inode's data, xattrs and durability (the tag is read).
fn decode_inode_op<'a>(t: u8, r: &mut &'a [u8], base: TimeNs) -> Result<Op<'a>, DecodeError> {
    Ok(match t {
        tag::WRITE => {
            let ino = get_varint(r)?;
            let offset = get_varint(r)?;
            let flags = get_u8(r)?;
            if flags & !WR_KILL_SUIDGID != 0 {
                return Err(DecodeError::BadValue("write flags byte"));
            }
            Op::Write {
                ino,
                offset,
                time_ns: get_time(r, base)?,
                data: get_field_bytes(r, WRITE_BYTES_MAX, "write data")?,
                kill_suidgid: flags & WR_KILL_SUIDGID != 0,
            }
        }
        tag::FALLOCATE => Op::Fallocate {
            ino: get_varint(r)?,
            offset: get_varint(r)?,
            length: get_varint(r)?,
            mode: get_i32(r, "fallocate mode")?,
            time_ns: get_time(r, base)?,
        },
        tag::SET_XATTR => Op::SetXattr {
            ino: get_varint(r)?,
            name: get_field_bytes(r, crate::limits::XATTR_NAME_BYTES_MAX, "xattr name")?,
            value: get_field_bytes(r, crate::limits::XATTR_VALUE_BYTES_MAX, "xattr value")?,
            flags: get_i32(r, "xattr flags")?,
            time_ns: get_time(r, base)?,
        },
        tag::REMOVE_XATTR => Op::RemoveXattr {
            ino: get_varint(r)?,
            name: get_field_bytes(r, crate::limits::XATTR_NAME_BYTES_MAX, "xattr name")?,
            time_ns: get_time(r, base)?,
        },
        tag::SET_DURABILITY => Op::SetDurability {
            ino: get_varint(r)?,
            durability: get_u8(r)?,
            time_ns: get_time(r, base)?,
        },
        tag::WRITE_EXTENT => {
            let ino = get_varint(r)?;
            let offset = get_varint(r)?;
            let len = get_varint(r)?;
            let flags = get_u8(r)?;
            if flags & !WR_KILL_SUIDGID != 0 {
                return Err(DecodeError::BadValue("write extent flags byte"));
            }
            Op::WriteExtent {
                ino,
                offset,
                len,
                time_ns: get_time(r, base)?,
                kill_suidgid: flags & WR_KILL_SUIDGID != 0,
            }
        }
        tag::MIGRATE => Op::Migrate {
            ino: get_varint(r)?,
            tier: crate::contents::Tier::from_code(get_u8(r)?)
                .ok_or(DecodeError::BadValue("migration tier"))?,
            time_ns: get_time(r, base)?,
        },
        t => unreachable!("tag {t} is not an inode op's"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::option;
    use proptest::prelude::*;

    /// The owned data of one op, which a test generates and then borrows as an [`Op`].
    #[derive(Debug, Clone)]
    enum Owned {
        Create {
            parent: u64,
            name: Vec<u8>,
            ino: u64,
            generation: u32,
            mode: u32,
            uid: u32,
            gid: u32,
            rdev: u32,
            target: Vec<u8>,
            time_ns: i64,
        },
        Link {
            ino: u64,
            parent: u64,
            name: Vec<u8>,
            time_ns: i64,
        },
        Unlink {
            parent: u64,
            name: Vec<u8>,
            time_ns: i64,
        },
        Rmdir {
            parent: u64,
            name: Vec<u8>,
            time_ns: i64,
        },
        Rename {
            parent: u64,
            name: Vec<u8>,
            new_parent: u64,
            new_name: Vec<u8>,
            flags: u32,
            time_ns: i64,
        },
        SetAttr {
            ino: u64,
            mode: Option<u32>,
            uid: Option<u32>,
            gid: Option<u32>,
            size_bytes: Option<u64>,
            atime_ns: Option<i64>,
            mtime_ns: Option<i64>,
            ctime_ns: i64,
            kill_suidgid: bool,
        },
        Write {
            ino: u64,
            offset: u64,
            data: Vec<u8>,
            time_ns: i64,
            kill_suidgid: bool,
        },
        Fallocate {
            ino: u64,
            offset: u64,
            length: u64,
            mode: i32,
            time_ns: i64,
        },
        SetXattr {
            ino: u64,
            name: Vec<u8>,
            value: Vec<u8>,
            flags: i32,
            time_ns: i64,
        },
        RemoveXattr {
            ino: u64,
            name: Vec<u8>,
            time_ns: i64,
        },
        SetDurability {
            ino: u64,
            durability: u8,
            time_ns: i64,
        },
        WriteExtent {
            ino: u64,
            offset: u64,
            len: u64,
            time_ns: i64,
            kill_suidgid: bool,
        },
        Migrate {
            ino: u64,
            disk: bool,
            time_ns: i64,
        },
    }

    impl Owned {
        fn op(&self) -> Op<'_> {
            match self {
                Owned::Create {
                    parent,
                    name,
                    ino,
                    generation,
                    mode,
                    uid,
                    gid,
                    rdev,
                    target,
                    time_ns,
                } => Op::Create {
                    parent: *parent,
                    name,
                    ino: *ino,
                    generation: *generation,
                    mode: *mode,
                    uid: *uid,
                    gid: *gid,
                    rdev: *rdev,
                    target,
                    time_ns: *time_ns,
                },
                Owned::Link {
                    ino,
                    parent,
                    name,
                    time_ns,
                } => Op::Link {
                    ino: *ino,
                    parent: *parent,
                    name,
                    time_ns: *time_ns,
                },
                Owned::Unlink {
                    parent,
                    name,
                    time_ns,
                } => Op::Unlink {
                    parent: *parent,
                    name,
                    time_ns: *time_ns,
                },
                Owned::Rmdir {
                    parent,
                    name,
                    time_ns,
                } => Op::Rmdir {
                    parent: *parent,
                    name,
                    time_ns: *time_ns,
                },
                Owned::Rename {
                    parent,
                    name,
                    new_parent,
                    new_name,
                    flags,
                    time_ns,
                } => Op::Rename {
                    parent: *parent,
                    name,
                    new_parent: *new_parent,
                    new_name,
                    flags: *flags,
                    time_ns: *time_ns,
                },
                Owned::SetAttr {
                    ino,
                    mode,
                    uid,
                    gid,
                    size_bytes,
                    atime_ns,
                    mtime_ns,
                    ctime_ns,
                    kill_suidgid,
                } => Op::SetAttr {
                    ino: *ino,
                    mode: *mode,
                    uid: *uid,
                    gid: *gid,
                    size_bytes: *size_bytes,
                    atime_ns: *atime_ns,
                    mtime_ns: *mtime_ns,
                    ctime_ns: *ctime_ns,
                    kill_suidgid: *kill_suidgid,
                },
                Owned::Write {
                    ino,
                    offset,
                    data,
                    time_ns,
                    kill_suidgid,
                } => Op::Write {
                    ino: *ino,
                    offset: *offset,
                    data,
                    time_ns: *time_ns,
                    kill_suidgid: *kill_suidgid,
                },
                Owned::Fallocate {
                    ino,
                    offset,
                    length,
                    mode,
                    time_ns,
                } => Op::Fallocate {
                    ino: *ino,
                    offset: *offset,
                    length: *length,
                    mode: *mode,
                    time_ns: *time_ns,
                },
                Owned::SetXattr {
                    ino,
                    name,
                    value,
                    flags,
                    time_ns,
                } => Op::SetXattr {
                    ino: *ino,
                    name,
                    value,
                    flags: *flags,
                    time_ns: *time_ns,
                },
                Owned::RemoveXattr { ino, name, time_ns } => Op::RemoveXattr {
                    ino: *ino,
                    name,
                    time_ns: *time_ns,
                },
                Owned::SetDurability {
                    ino,
                    durability,
                    time_ns,
                } => Op::SetDurability {
                    ino: *ino,
                    durability: *durability,
                    time_ns: *time_ns,
                },
                Owned::WriteExtent {
                    ino,
                    offset,
                    len,
                    time_ns,
                    kill_suidgid,
                } => Op::WriteExtent {
                    ino: *ino,
                    offset: *offset,
                    len: *len,
                    time_ns: *time_ns,
                    kill_suidgid: *kill_suidgid,
                },
                Owned::Migrate { ino, disk, time_ns } => Op::Migrate {
                    ino: *ino,
                    tier: if *disk {
                        crate::contents::Tier::Disk
                    } else {
                        crate::contents::Tier::Memory
                    },
                    time_ns: *time_ns,
                },
            }
        }
    }

    /// A typical base time: late 2023.
    const BASE: i64 = 1_700_000_000_123_456_789;

    fn u64s() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(1u64),
            Just(u64::MAX),
            0..300u64,
            0..10_000_000u64,
            any::<u64>(),
        ]
    }

    fn u32s() -> impl Strategy<Value = u32> {
        prop_oneof![
            Just(0u32),
            Just(u32::MAX),
            0..2000u32,
            Just(0o100644u32),
            any::<u32>(),
        ]
    }

    fn i32s() -> impl Strategy<Value = i32> {
        prop_oneof![
            Just(0i32),
            Just(i32::MIN),
            Just(i32::MAX),
            -64..64i32,
            any::<i32>(),
        ]
    }

    fn times() -> impl Strategy<Value = i64> {
        prop_oneof![
            Just(i64::MIN),
            Just(i64::MAX),
            Just(0i64),
            Just(BASE),
            (BASE - 2_000_000_000)..(BASE + 2_000_000_000),
            any::<i64>(),
        ]
    }

    fn bases() -> impl Strategy<Value = i64> {
        prop_oneof![
            Just(BASE),
            Just(0i64),
            Just(i64::MIN),
            Just(i64::MAX),
            any::<i64>(),
        ]
    }

    /// Byte strings up to `max` long, with the empty and the maximal one often.
    fn bytes(max: usize, sample_max: usize) -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(Vec::new()),
            Just(vec![0xA5u8; max]),
            vec(any::<u8>(), 0..=sample_max.min(max)),
        ]
    }

    fn names() -> impl Strategy<Value = Vec<u8>> {
        bytes(crate::limits::NAME_BYTES_MAX, crate::limits::NAME_BYTES_MAX)
    }

    /// Every variant, boxed per arm: the unboxed strategy's value trees overflow the stack of a
    /// test thread in debug builds.
    fn owned_ops() -> BoxedStrategy<Owned> {
        prop_oneof![
            (
                u64s(),
                names(),
                u64s(),
                u32s(),
                u32s(),
                u32s(),
                u32s(),
                u32s(),
                bytes(SYMLINK_TARGET_BYTES_MAX, 300),
                times(),
            )
                .prop_map(
                    |(parent, name, ino, generation, mode, uid, gid, rdev, target, time_ns)| {
                        Owned::Create {
                            parent,
                            name,
                            ino,
                            generation,
                            mode,
                            uid,
                            gid,
                            rdev,
                            target,
                            time_ns,
                        }
                    }
                )
                .boxed(),
            (u64s(), u64s(), names(), times())
                .prop_map(|(ino, parent, name, time_ns)| {
                    Owned::Link {
                        ino,
                        parent,
                        name,
                        time_ns,
                    }
                })
                .boxed(),
            (u64s(), names(), times())
                .prop_map(|(parent, name, time_ns)| Owned::Unlink {
                    parent,
                    name,
                    time_ns
                })
                .boxed(),
            (u64s(), names(), times())
                .prop_map(|(parent, name, time_ns)| Owned::Rmdir {
                    parent,
                    name,
                    time_ns
                })
                .boxed(),
            (u64s(), names(), u64s(), names(), u32s(), times())
                .prop_map(
                    |(parent, name, new_parent, new_name, flags, time_ns)| Owned::Rename {
                        parent,
                        name,
                        new_parent,
                        new_name,
                        flags,
                        time_ns,
                    }
                )
                .boxed(),
            (
                u64s(),
                option::of(u32s()),
                option::of(u32s()),
                option::of(u32s()),
                option::of(u64s()),
                option::of(times()),
                option::of(times()),
                times(),
                any::<bool>(),
            )
                .prop_map(
                    |(ino, mode, uid, gid, size_bytes, atime_ns, mtime_ns, ctime_ns, kill)| {
                        Owned::SetAttr {
                            ino,
                            mode,
                            uid,
                            gid,
                            size_bytes,
                            atime_ns,
                            mtime_ns,
                            ctime_ns,
                            kill_suidgid: kill,
                        }
                    }
                )
                .boxed(),
            (u64s(), u64s(), bytes(70_000, 5000), times(), any::<bool>())
                .prop_map(|(ino, offset, data, time_ns, kill_suidgid)| Owned::Write {
                    ino,
                    offset,
                    data,
                    time_ns,
                    kill_suidgid,
                })
                .boxed(),
            (u64s(), u64s(), u64s(), i32s(), times())
                .prop_map(|(ino, offset, length, mode, time_ns)| Owned::Fallocate {
                    ino,
                    offset,
                    length,
                    mode,
                    time_ns,
                })
                .boxed(),
            (
                u64s(),
                bytes(
                    crate::limits::XATTR_NAME_BYTES_MAX,
                    crate::limits::XATTR_NAME_BYTES_MAX
                ),
                bytes(crate::limits::XATTR_VALUE_BYTES_MAX, 300),
                i32s(),
                times(),
            )
                .prop_map(|(ino, name, value, flags, time_ns)| Owned::SetXattr {
                    ino,
                    name,
                    value,
                    flags,
                    time_ns,
                })
                .boxed(),
            (
                u64s(),
                bytes(
                    crate::limits::XATTR_NAME_BYTES_MAX,
                    crate::limits::XATTR_NAME_BYTES_MAX
                ),
                times()
            )
                .prop_map(|(ino, name, time_ns)| Owned::RemoveXattr { ino, name, time_ns })
                .boxed(),
            (u64s(), any::<u8>(), times())
                .prop_map(|(ino, durability, time_ns)| Owned::SetDurability {
                    ino,
                    durability,
                    time_ns,
                })
                .boxed(),
            (u64s(), u64s(), u64s(), times(), any::<bool>())
                .prop_map(
                    |(ino, offset, len, time_ns, kill_suidgid)| Owned::WriteExtent {
                        ino,
                        offset,
                        len,
                        time_ns,
                        kill_suidgid,
                    }
                )
                .boxed(),
            (u64s(), any::<bool>(), times())
                .prop_map(|(ino, disk, time_ns)| Owned::Migrate { ino, disk, time_ns })
                .boxed(),
        ]
        .boxed()
    }

    fn encode(op: &Op<'_>, base: i64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_op(op, base, &mut out);
        out
    }

    /// Decodes records until the input ends or an error; checks on the way that every record
    /// consumed something, stays within the input and re-encodes to exactly its bytes.
    fn decode_all_checked(bytes: &[u8], base: i64) -> usize {
        let mut input = bytes;
        let mut count = 0;
        while !input.is_empty() {
            let before = input;
            match decode_op(&mut input, base) {
                Ok(op) => {
                    assert!(input.len() < before.len(), "a record consumed nothing");
                    let used = &before[..before.len() - input.len()];
                    assert_eq!(encode(&op, base), used, "not canonical: {op:?}");
                    count += 1;
                }
                Err(_) => {
                    assert_eq!(input, before, "a failed decode moved the input");
                    break;
                }
            }
        }
        count
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn every_op_round_trips(owned in owned_ops(), base in bases()) {
            let op = owned.op();
            let bytes = encode(&op, base);
            let mut input = &bytes[..];
            let back = decode_op(&mut input, base).unwrap();
            prop_assert_eq!(back, op);
            prop_assert!(input.is_empty(), "{} bytes left over", input.len());
        }

        #[test]
        fn concatenated_ops_decode_one_after_another(
            owned in vec(owned_ops(), 1..16),
            base in bases(),
        ) {
            let mut bytes = Vec::new();
            for o in &owned {
                encode_op(&o.op(), base, &mut bytes);
            }
            let mut input = &bytes[..];
            for o in &owned {
                prop_assert_eq!(decode_op(&mut input, base).unwrap(), o.op());
            }
            prop_assert!(input.is_empty());
        }

        #[test]
        fn every_truncation_is_an_error(owned in owned_ops(), base in bases()) {
            let bytes = encode(&owned.op(), base);
            for len in 0..bytes.len() {
                let prefix = &bytes[..len];
                let mut input = prefix;
                prop_assert_eq!(decode_op(&mut input, base), Err(DecodeError::Truncated));
                prop_assert_eq!(input.len(), len, "a failed decode moved the input");
            }
        }

    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..512), base in bases()) {
            decode_all_checked(&bytes, base);
        }

        #[test]
        fn arbitrary_bytes_after_a_valid_tag_never_panic(
            tag in 1u8..=10,
            rest in vec(any::<u8>(), 0..512),
            base in bases(),
        ) {
            let mut bytes = vec![tag];
            bytes.extend_from_slice(&rest);
            decode_all_checked(&bytes, base);
        }

        #[test]
        fn corrupted_encodings_never_panic(
            owned in vec(owned_ops(), 1..4),
            base in bases(),
            flips in vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        ) {
            let mut bytes = Vec::new();
            for o in &owned {
                encode_op(&o.op(), base, &mut bytes);
            }
            for (at, mask) in flips {
                let i = at.index(bytes.len());
                bytes[i] ^= mask;
            }
            decode_all_checked(&bytes, base);
        }

        #[test]
        fn varints_and_zigzags_round_trip(v in any::<u64>(), s in any::<i64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            put_zigzag(&mut out, s);
            let mut input = &out[..];
            prop_assert_eq!(get_varint(&mut input), Ok(v));
            prop_assert_eq!(get_zigzag(&mut input), Ok(s));
            prop_assert!(input.is_empty());
        }
    }

    #[test]
    fn varint_edges() {
        for (v, len) in [
            (0u64, 1usize),
            (127, 1),
            (128, 2),
            (16_383, 2),
            (16_384, 3),
            (u64::from(u32::MAX), 5),
            (u64::MAX, 10),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), len, "varint of {v}");
            let mut input = &out[..];
            assert_eq!(get_varint(&mut input), Ok(v));
            assert!(input.is_empty());
        }
        let bad: [(&[u8], DecodeError); 6] = [
            (&[], DecodeError::Truncated),
            (&[0x80], DecodeError::Truncated),
            (&[0x80, 0x00], DecodeError::Overlong),
            (&[0xff, 0x80, 0x00], DecodeError::Overlong),
            (
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
                DecodeError::Overlong,
            ),
            (&[0xff; 11], DecodeError::Overlong),
        ];
        for (bytes, err) in bad {
            let mut input = bytes;
            assert_eq!(get_varint(&mut input), Err(err), "{bytes:02x?}");
            assert_eq!(input, bytes, "a failed decode moved the input");
        }
        // The largest ten-byte varint is u64::MAX; a zero-padded one is refused.
        let mut input: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(get_varint(&mut input), Ok(u64::MAX));
        let mut input: &[u8] = &[0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(get_varint(&mut input), Err(DecodeError::Overlong));
    }

    #[test]
    fn zigzag_edges() {
        for (v, z) in [
            (0i64, 0u64),
            (-1, 1),
            (1, 2),
            (-2, 3),
            (i64::MAX, u64::MAX - 1),
            (i64::MIN, u64::MAX),
        ] {
            assert_eq!(zigzag(v), z);
            assert_eq!(unzigzag(z), v);
        }
    }

    #[test]
    fn get_bytes_is_bounded() {
        let mut out = Vec::new();
        put_bytes(&mut out, b"hello");
        let mut input = &out[..];
        assert_eq!(get_bytes(&mut input, 5), Ok(&b"hello"[..]));
        assert!(input.is_empty());

        let mut input = &out[..];
        assert_eq!(
            get_bytes(&mut input, 4),
            Err(DecodeError::TooLong {
                what: "byte string",
                len: 5
            })
        );
        assert_eq!(input, &out[..]);

        // A huge length with no bytes behind it: refused without allocating or slicing.
        let mut huge = Vec::new();
        put_varint(&mut huge, u64::MAX);
        let mut input = &huge[..];
        assert_eq!(
            get_bytes(&mut input, usize::MAX),
            Err(DecodeError::Truncated)
        );
        let mut input = &out[..out.len() - 1];
        assert_eq!(get_bytes(&mut input, 100), Err(DecodeError::Truncated));

        let mut input: &[u8] = &[];
        assert_eq!(get_u8(&mut input), Err(DecodeError::Truncated));
    }

    #[test]
    fn bad_records_are_named() {
        fn decode(bytes: &[u8]) -> Result<Op<'_>, DecodeError> {
            let mut input = bytes;
            decode_op(&mut input, 0)
        }
        assert_eq!(decode(&[0]), Err(DecodeError::UnknownTag(0)));
        assert_eq!(decode(&[14, 1, 2, 3]), Err(DecodeError::UnknownTag(14)));
        assert_eq!(
            decode(&[tag::MIGRATE, 1, 2, 0]),
            Err(DecodeError::BadValue("migration tier"))
        );
        assert_eq!(
            decode(&[tag::WRITE_EXTENT, 1, 0, 0, 2, 0]),
            Err(DecodeError::BadValue("write extent flags byte"))
        );
        assert_eq!(decode(&[0xff]), Err(DecodeError::UnknownTag(0xff)));

        // Unlink in directory 1 of a 256-byte name.
        let mut r = vec![tag::UNLINK, 1];
        put_varint(&mut r, 256);
        assert_eq!(
            decode(&r),
            Err(DecodeError::TooLong {
                what: "name",
                len: 256
            })
        );

        // A symlink target of 4096 bytes.
        let mut r = vec![tag::CREATE, 1, 1, b'a', 2, 0, 0, 0, 0, 0];
        put_varint(&mut r, 4096);
        assert_eq!(
            decode(&r),
            Err(DecodeError::TooLong {
                what: "symlink target",
                len: 4096
            })
        );

        // A Create whose mode does not fit 32 bits.
        let mut r = vec![tag::CREATE, 1, 1, b'a', 2, 0];
        put_varint(&mut r, 1 << 32);
        assert_eq!(decode(&r), Err(DecodeError::BadValue("mode")));

        // An xattr value one byte over its limit, and xattr flags beyond i32.
        let mut r = vec![tag::SET_XATTR, 5, 1, b'u'];
        put_varint(&mut r, crate::limits::XATTR_VALUE_BYTES_MAX as u64 + 1);
        assert_eq!(
            decode(&r),
            Err(DecodeError::TooLong {
                what: "xattr value",
                len: crate::limits::XATTR_VALUE_BYTES_MAX as u64 + 1
            })
        );
        let mut r = vec![tag::SET_XATTR, 5, 1, b'u', 0];
        put_zigzag(&mut r, i64::from(i32::MAX) + 1);
        assert_eq!(decode(&r), Err(DecodeError::BadValue("xattr flags")));

        // Write data one byte over WRITE_BYTES_MAX: refused before looking for the bytes.
        let mut r = vec![tag::WRITE, 5, 0, 0, 0];
        put_varint(&mut r, WRITE_BYTES_MAX as u64 + 1);
        assert_eq!(
            decode(&r),
            Err(DecodeError::TooLong {
                what: "write data",
                len: WRITE_BYTES_MAX as u64 + 1
            })
        );
        // Reserved bits.
        assert_eq!(
            decode(&[tag::WRITE, 5, 0, 2, 0, 0]),
            Err(DecodeError::BadValue("write flags byte"))
        );
        assert_eq!(
            decode(&[tag::SET_ATTR, 5, 0x80, 0]),
            Err(DecodeError::BadValue("setattr presence byte"))
        );
        // An overlong varint inside a record.
        assert_eq!(
            decode(&[tag::UNLINK, 0x81, 0x00, 0, 0]),
            Err(DecodeError::Overlong)
        );

        for e in [
            DecodeError::Truncated,
            DecodeError::Overlong,
            DecodeError::UnknownTag(12),
            DecodeError::TooLong {
                what: "name",
                len: 300,
            },
            DecodeError::BadValue("mode"),
        ] {
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn maximal_write_round_trips() {
        let data = vec![0x5Au8; WRITE_BYTES_MAX];
        let op = Op::Write {
            ino: u64::MAX,
            offset: u64::MAX,
            data: &data,
            time_ns: i64::MIN,
            kill_suidgid: true,
        };
        let bytes = encode(&op, i64::MAX);
        let mut input = &bytes[..];
        assert_eq!(decode_op(&mut input, i64::MAX), Ok(op));
        assert!(input.is_empty());
        // The data is borrowed from the input, not copied.
        let mut input = &bytes[..];
        let Ok(Op::Write { data: back, .. }) = decode_op(&mut input, i64::MAX) else {
            panic!("not a write");
        };
        assert_eq!(
            back.as_ptr(),
            bytes[bytes.len() - WRITE_BYTES_MAX..].as_ptr()
        );
    }

    fn create_of(name: &[u8], ino: u64, time_ns: i64) -> Op<'_> {
        Op::Create {
            parent: 1,
            name,
            ino,
            generation: 1,
            mode: libc::S_IFREG | 0o644,
            uid: 1000,
            gid: 1000,
            rdev: 0,
            target: b"",
            time_ns,
        }
    }

    #[test]
    fn a_small_create_fits_in_30_bytes() {
        let name = b"report.txt";
        assert_eq!(name.len(), 10);
        for delta in [0i64, 1, -1, 999_999_999, -999_999_999] {
            let op = create_of(name, 42, BASE + delta);
            let size = encode(&op, BASE).len();
            assert!(
                size <= 30,
                "a Create with a 10-byte name, inode 42 and a time {delta} ns from the base \
                 encodes in {size} bytes, more than 30"
            );
        }
    }

    /// Sizes of typical records (run with `--nocapture` to see them).
    #[test]
    fn typical_sizes() {
        let base = BASE;
        let t = base + 250_000; // a quarter of a millisecond into the batch
        let create = encode(&create_of(b"report.txt", 123_456, t), base);
        let data = [0u8; 4096];
        let write = encode(
            &Op::Write {
                ino: 123_456,
                offset: 1 << 20,
                data: &data,
                time_ns: t,
                kill_suidgid: false,
            },
            base,
        );
        let write_header = write.len() - data.len();
        let rename = encode(
            &Op::Rename {
                parent: 17,
                name: b"report.txt.tmp",
                new_parent: 17,
                new_name: b"report.txt",
                flags: 0,
                time_ns: t,
            },
            base,
        );
        let unlink = encode(
            &Op::Unlink {
                parent: 17,
                name: b"report.txt",
                time_ns: t,
            },
            base,
        );
        let setattr = encode(
            &Op::SetAttr {
                ino: 123_456,
                mode: None,
                uid: None,
                gid: None,
                size_bytes: Some(0),
                atime_ns: None,
                mtime_ns: Some(t),
                ctime_ns: t,
                kill_suidgid: false,
            },
            base,
        );
        println!(
            "create {} B, write of 4096 B: {} B ({write_header} B header), rename {} B, \
             unlink {} B, truncate {} B",
            create.len(),
            write.len(),
            rename.len(),
            unlink.len(),
            setattr.len()
        );
        assert!(create.len() <= 30, "create: {} bytes", create.len());
        assert!(write_header <= 16, "write header: {write_header} bytes");
        assert!(rename.len() <= 36, "rename: {} bytes", rename.len());
    }
}
