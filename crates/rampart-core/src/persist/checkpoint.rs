//! The checkpoint: an image of the whole durable state (namespace, attributes, xattrs,
//! small-file data), written compactly (MRAMFS §3.1) and replaced atomically.
//!
//! ```text
//! checkpoint := header body crc32c(body) u32
//! header     := magic "RPCHKPT\0" | version u32 | flags u32 | store_id [16] | seq u64
//!               | created_ns i64 | body_len u64 | crc32c(bytes 0..60) u32      (64 bytes)
//! body       := next_generation | owners | inodes
//! owners     := count, then (mode, uid, gid, durability byte) per entry: the shared table
//!               (MRAMFS's pseudo-ACL)
//! inodes     := count, then per inode in increasing number order:
//!     ino − previous ino | generation | owner index | nlink
//!     | zigzag(mtime − previous inode's mtime) | zigzag(ctime − mtime) | zigzag(atime − mtime)
//!     | payload by kind | xattr count | (name, value)*
//! payload    := regular file: size | tier byte (version 2 on; 0 memory, 1 disk)
//!                 | memory: chunk count | (chunk index − previous index, bytes)*
//!                 | disk: bytes held (the bytes are in the host file data/{ino}-{generation})
//!             | directory:    parent | entry count | (child ino, name)*
//!             | symlink:      target bytes
//!             | device node:  rdev
//!             | fifo, socket: nothing
//! ```
//! The header is the shared frame of `persist::header`. Numbers are LEB128 varints unless marked; `bytes` is a varint length and the bytes.
//! `seq` is the sequence number of the first op *not* in the image: recovery replays the
//! journal from there. Unlinked files still open at checkpoint time are not durable and are
//! left out. Decoding checks every bound and, once the state is built, every invariant of the
//! engine (link counts, parents, entry kinds, names); an image that fails any is refused whole.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64};

use crate::attr::{FileKind, Ino, ROOT_INO};
use crate::contents::Tier;
use crate::engine::{EngineConfig, State};
use crate::memory::file_data::{FileData, CHUNK_BYTES};
use crate::namespace::dir::{Dir, NAME_BYTES_MAX};
use crate::namespace::inode::{Inode, Payload};
use crate::persist::codec::{get_bytes, get_varint, get_zigzag, put_bytes, put_varint, put_zigzag};
use crate::persist::header::{self, Fields, Frame, HeaderError};
use crate::time::TimeNs;
use crate::xattr::{self, Xattrs};

pub const MAGIC: [u8; 8] = *b"RPCHKPT\0";
/// Version 2 records each regular file's tier; version 1 images (no tier byte: every file in
/// memory) are read.
pub const VERSION: u32 = 2;
pub const OLDEST_VERSION: u32 = 1;
pub const HEADER_BYTES: usize = header::HEADER_BYTES;
const FRAME: Frame = Frame {
    magic: MAGIC,
    version: VERSION,
    oldest: OLDEST_VERSION,
};
/// Offsets of the checkpoint's own header fields (bytes 56..60 are zero).
const SEQ_AT: usize = header::FIELDS_AT;
const CREATED_NS_AT: usize = SEQ_AT + 8;
const BODY_LEN_AT: usize = CREATED_NS_AT + 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The format version it was written in (this build writes [`VERSION`]).
    pub version: u32,
    pub store_id: [u8; 16],
    /// The first op not in the image.
    pub seq: u64,
    pub created_ns: TimeNs,
    pub body_len: u64,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut fields = Fields::default();
        fields.put_u64(SEQ_AT, self.seq);
        fields.put_i64(CREATED_NS_AT, self.created_ns);
        fields.put_u64(BODY_LEN_AT, self.body_len);
        FRAME.encode_current(self.store_id, fields)
    }

    /// Decodes the header at the start of a checkpoint (the flags are not read).
    pub fn decode(bytes: &[u8]) -> Result<Header, CheckpointError> {
        let header = FRAME.decode(bytes).map_err(|e| match e {
            HeaderError::Short { .. } | HeaderError::BadMagic => bad("not a rampart checkpoint"),
            HeaderError::BadChecksum => bad("header checksum mismatch"),
            HeaderError::UnsupportedVersion { found, .. } => CheckpointError::Version(found),
        })?;
        Ok(Header {
            version: header.version,
            store_id: header.store_id,
            seq: header.fields.u64(SEQ_AT),
            created_ns: header.fields.i64(CREATED_NS_AT),
            body_len: header.fields.u64(BODY_LEN_AT),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointError {
    /// Damage or a foreign file: bad magic, checksum, length or encoding.
    Format(String),
    Version(u32),
    /// It decodes, but the state it describes breaks an invariant.
    Inconsistent(Vec<String>),
}

impl std::fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointError::Format(m) => write!(f, "checkpoint is damaged: {m}"),
            CheckpointError::Version(v) => write!(
                f,
                "checkpoint format version {v} is not supported (this rampart reads \
                 {OLDEST_VERSION} to {VERSION})"
            ),
            CheckpointError::Inconsistent(p) => write!(
                f,
                "checkpoint describes an inconsistent file system ({} problems, first: {})",
                p.len(),
                p.first().map_or("", String::as_str)
            ),
        }
    }
}

impl std::error::Error for CheckpointError {}

fn bad(what: impl std::fmt::Display) -> CheckpointError {
    CheckpointError::Format(what.to_string())
}

/// The entries of one directory as read: (child inode, name).
type DirEntries<'a> = Vec<(Ino, &'a [u8])>;

fn kind_tag(kind: FileKind) -> u8 {
    kind.code()
}

/// Encodes `state` as a checkpoint holding every op before `seq`.
pub fn encode(state: &State, store_id: [u8; 16], seq: u64, created_ns: TimeNs) -> Vec<u8> {
    let mut image = Vec::new();
    encode_body(state, created_ns, &mut image);
    seal(&mut image, store_id, seq, created_ns);
    image
}

/// The part of [`encode`] that reads the state: replaces `image` with room for the header
/// and the body after it. Keeping the state locked only for this (and handing in a buffer
/// whose pages are already touched) keeps the writers' pause short; [`seal`] finishes.
pub fn encode_body(state: &State, created_ns: TimeNs, image: &mut Vec<u8>) {
    let mut body = std::mem::take(image);
    body.clear();
    body.resize(HEADER_BYTES, 0);
    let mut owners: HashMap<(u32, u32, u32, u8), u64> = HashMap::new();
    let mut owner_list = Vec::new();
    // Inodes unknown to the store (decision 0066) are left out, with the entries naming them.
    let mut any_absent = false;
    let durable: Vec<(Ino, &Inode)> = state
        .inodes()
        .filter(|(_, i)| {
            any_absent |= i.absent;
            i.nlink > 0 && !i.absent
        })
        .collect();
    let known = |ino: Ino| !any_absent || state.inode(ino).is_ok_and(|i| !i.absent);
    for (_, inode) in &durable {
        let key = (inode.mode, inode.uid, inode.gid, inode.durability);
        if let std::collections::hash_map::Entry::Vacant(slot) = owners.entry(key) {
            slot.insert(owner_list.len() as u64);
            owner_list.push(key);
        }
    }
    put_varint(&mut body, u64::from(state.next_generation()));
    put_varint(&mut body, owner_list.len() as u64);
    for (mode, uid, gid, durability) in &owner_list {
        put_varint(&mut body, u64::from(*mode));
        put_varint(&mut body, u64::from(*uid));
        put_varint(&mut body, u64::from(*gid));
        body.push(*durability);
    }
    put_varint(&mut body, durable.len() as u64);
    let mut prev_ino = 0;
    let mut prev_mtime = created_ns;
    for (ino, inode) in &durable {
        put_varint(&mut body, ino - prev_ino);
        prev_ino = *ino;
        put_varint(&mut body, u64::from(inode.generation));
        put_varint(
            &mut body,
            owners[&(inode.mode, inode.uid, inode.gid, inode.durability)],
        );
        // A directory's link count holds its subdirectories' "..": not those left out.
        let mut nlink = inode.nlink;
        if let (true, Payload::Dir(d)) = (any_absent, &inode.payload) {
            d.list_from(0, |e| {
                let subdir = e.kind_code == FileKind::Directory.code();
                nlink -= u32::from(subdir && !known(e.ino));
                true
            });
        }
        put_varint(&mut body, u64::from(nlink));
        put_zigzag(&mut body, inode.mtime_ns.wrapping_sub(prev_mtime));
        prev_mtime = inode.mtime_ns;
        put_zigzag(&mut body, inode.ctime_ns.wrapping_sub(inode.mtime_ns));
        put_zigzag(&mut body, inode.atime().wrapping_sub(inode.mtime_ns));
        encode_payload(&mut body, inode, any_absent, &known);
        encode_xattrs(&mut body, inode);
    }
    *image = body;
}

/// An inode's payload in the image: a file's data (or where it is), a directory's entries
/// (without those naming inodes left out, when `any_absent`), a symlink's target, a device's
/// number.
fn encode_payload(
    body: &mut Vec<u8>,
    inode: &Inode,
    any_absent: bool,
    known: &impl Fn(Ino) -> bool,
) {
    match &inode.payload {
        Payload::File(_) if inode.durability() == crate::attr::Durability::Volatile => {
            // Its data never reaches the store; recovery drops the file.
            put_varint(body, 0);
            body.push(Tier::Memory.code());
            put_varint(body, 0);
        }
        Payload::File(f) if f.tier() == Tier::Disk => {
            // The bytes stay in the host file, never in the image; how many it holds
            // (for `st_blocks`) does.
            put_varint(body, inode.size_bytes);
            body.push(Tier::Disk.code());
            put_varint(body, f.stored_bytes());
        }
        Payload::File(f) => {
            put_varint(body, inode.size_bytes);
            body.push(Tier::Memory.code());
            let chunks: Vec<_> = f.chunks().collect();
            put_varint(body, chunks.len() as u64);
            let mut prev = 0usize;
            for (i, (index, bytes)) in chunks.into_iter().enumerate() {
                put_varint(body, (index - if i == 0 { 0 } else { prev + 1 }) as u64);
                prev = index;
                put_bytes(body, bytes);
            }
        }
        Payload::Dir(d) => {
            put_varint(body, d.parent);
            let mut count = d.len();
            if any_absent {
                d.list_from(0, |e| {
                    count -= usize::from(!known(e.ino));
                    true
                });
            }
            put_varint(body, count as u64);
            d.list_from(0, |e| {
                if known(e.ino) {
                    put_varint(body, e.ino);
                    put_bytes(body, e.name);
                }
                true
            });
        }
        Payload::Symlink(t) => put_bytes(body, t),
        Payload::Special { rdev } => {
            if matches!(inode.kind(), FileKind::CharDevice | FileKind::BlockDevice) {
                put_varint(body, u64::from(*rdev));
            }
        }
    }
}

/// An inode's extended attributes in the image.
fn encode_xattrs(body: &mut Vec<u8>, inode: &Inode) {
    let xattrs: Vec<_> = inode
        .xattrs
        .as_ref()
        .map_or_else(Vec::new, |x| x.iter().collect());
    put_varint(body, xattrs.len() as u64);
    for (name, value) in xattrs {
        put_bytes(body, name);
        put_bytes(body, value);
    }
}

/// Completes an image made by [`encode_body`] with the same `created_ns`: the header in front,
/// the body's checksum behind.
pub fn seal(image: &mut Vec<u8>, store_id: [u8; 16], seq: u64, created_ns: TimeNs) {
    debug_assert!(image.len() >= HEADER_BYTES);
    let header = Header {
        version: VERSION,
        store_id,
        seq,
        created_ns,
        body_len: (image.len() - HEADER_BYTES) as u64,
    };
    image[..HEADER_BYTES].copy_from_slice(&header.encode());
    let crc = crc32c::crc32c(&image[HEADER_BYTES..]);
    image.extend_from_slice(&crc.to_le_bytes());
}

fn varint_u32(input: &mut &[u8], what: &str) -> Result<u32, CheckpointError> {
    let v = get_varint(input).map_err(|e| bad(format!("{what}: {e}")))?;
    u32::try_from(v).map_err(|_| bad(format!("{what} {v} out of range")))
}

fn varint(input: &mut &[u8], what: &str) -> Result<u64, CheckpointError> {
    get_varint(input).map_err(|e| bad(format!("{what}: {e}")))
}

fn zigzag(input: &mut &[u8], what: &str) -> Result<i64, CheckpointError> {
    get_zigzag(input).map_err(|e| bad(format!("{what}: {e}")))
}

fn field_bytes<'a>(
    input: &mut &'a [u8],
    max: usize,
    what: &str,
) -> Result<&'a [u8], CheckpointError> {
    get_bytes(input, max).map_err(|e| bad(format!("{what}: {e}")))
}

/// A count that must fit the remaining input (each item takes at least one byte), so a
/// damaged count cannot make us allocate or loop beyond the file.
fn count(input: &mut &[u8], what: &str) -> Result<usize, CheckpointError> {
    let n = varint(input, what)?;
    if n > input.len() as u64 {
        return Err(bad(format!(
            "{what} {n} exceeds the remaining {} bytes",
            input.len()
        )));
    }
    Ok(n as usize)
}

/// Decodes a checkpoint into a state (checked against every engine invariant) and its header.
pub fn decode(bytes: &[u8], config: &EngineConfig) -> Result<(State, Header), CheckpointError> {
    let (state, header, problems) = decode_for_repair(bytes, config)?;
    if problems.is_empty() {
        Ok((state, header))
    } else {
        Err(CheckpointError::Inconsistent(problems))
    }
}

/// Decodes a checkpoint whose state may break invariants (for `fsck --repair`): returns the
/// state with the problems found. Damage to the encoding is still refused.
pub fn decode_for_repair(
    bytes: &[u8],
    config: &EngineConfig,
) -> Result<(State, Header, Vec<String>), CheckpointError> {
    let (header, body) = checked_body(bytes)?;
    let mut input = body;
    let input = &mut input;
    let next_generation = varint_u32(input, "next generation")?;
    let owners = read_owners(input)?;
    let inode_count = count(input, "inode count")?;
    let mut inodes = Vec::with_capacity(inode_count);
    let mut entries: Vec<(Ino, DirEntries<'_>)> = Vec::new();
    let mut ino: Ino = 0;
    let mut prev_mtime = header.created_ns;
    for _ in 0..inode_count {
        let delta = varint(input, "inode number")?;
        if delta == 0 {
            return Err(bad("inode numbers not increasing"));
        }
        ino = ino
            .checked_add(delta)
            .ok_or_else(|| bad("inode number overflow"))?;
        let (inode, dir_entries) = read_inode(input, ino, &owners, prev_mtime, header.version)?;
        prev_mtime = inode.mtime_ns;
        if let Some(list) = dir_entries {
            entries.push((ino, list));
        }
        inodes.push((ino, inode));
    }
    if !input.is_empty() {
        return Err(bad(format!(
            "{} bytes left after the last inode",
            input.len()
        )));
    }
    // The encoder leaves out inodes without links; a root without them would be left out of
    // the next image, and the store would have no root.
    if inodes
        .iter()
        .any(|(ino, i)| *ino == ROOT_INO && i.nlink == 0)
    {
        return Err(CheckpointError::Inconsistent(vec![
            "the root directory has no links".into(),
        ]));
    }
    insert_entries(&mut inodes, entries)?;
    let (state, problems) = State::from_inodes(config, next_generation, inodes)
        .map_err(|e| CheckpointError::Inconsistent(vec![e.to_string()]))?;
    Ok((state, header, problems))
}

/// The header and the body, once the length the header gives and the body's checksum match.
fn checked_body(bytes: &[u8]) -> Result<(Header, &[u8]), CheckpointError> {
    let header = Header::decode(bytes)?;
    let body_end = (HEADER_BYTES as u64)
        .checked_add(header.body_len)
        .filter(|&e| e.checked_add(4) == Some(bytes.len() as u64))
        .ok_or_else(|| {
            bad(format!(
                "{} bytes, but the header promises {} of body",
                bytes.len(),
                header.body_len
            ))
        })? as usize;
    let body = &bytes[HEADER_BYTES..body_end];
    let crc = u32::from_le_bytes(bytes[body_end..].try_into().expect("4 bytes"));
    if crc32c::crc32c(body) != crc {
        return Err(bad("body checksum mismatch"));
    }
    Ok((header, body))
}

/// One entry of the owners table: (mode, uid, gid, durability byte).
type Owner = (u32, u32, u32, u8);

/// The owners table; every mode in it names a file type.
fn read_owners(input: &mut &[u8]) -> Result<Vec<Owner>, CheckpointError> {
    let owner_count = count(input, "owner count")?;
    let mut owners = Vec::with_capacity(owner_count);
    for _ in 0..owner_count {
        let mode = varint_u32(input, "mode")?;
        if FileKind::from_mode(mode).is_none() {
            return Err(bad(format!("mode {mode:o} has no valid file type")));
        }
        let uid = varint_u32(input, "uid")?;
        let gid = varint_u32(input, "gid")?;
        let durability =
            crate::persist::codec::get_u8(input).map_err(|e| bad(format!("durability: {e}")))?;
        owners.push((mode, uid, gid, durability));
    }
    Ok(owners)
}

/// One inode after its number: its attributes, payload and xattrs. A directory's entries are
/// returned beside it, to be inserted once every inode is known.
fn read_inode<'a>(
    input: &mut &'a [u8],
    ino: Ino,
    owners: &[Owner],
    prev_mtime: TimeNs,
    version: u32,
) -> Result<(Inode, Option<DirEntries<'a>>), CheckpointError> {
    let generation = varint_u32(input, "generation")?;
    let owner = varint(input, "owner index")? as usize;
    let &(mode, uid, gid, durability) = owners
        .get(owner)
        .ok_or_else(|| bad(format!("owner index {owner} past the table")))?;
    let nlink = varint_u32(input, "nlink")?;
    let mtime_ns = prev_mtime.wrapping_add(zigzag(input, "mtime")?);
    let ctime_ns = mtime_ns.wrapping_add(zigzag(input, "ctime")?);
    let atime_ns = mtime_ns.wrapping_add(zigzag(input, "atime")?);
    let kind = FileKind::from_mode(mode).expect("checked with the table");
    let (payload, size_bytes, entries) = read_payload(input, kind, version)?;
    let xattrs = read_xattrs(input, ino)?;
    let inode = Inode {
        mode,
        uid,
        gid,
        nlink,
        generation,
        durability,
        absent: false,
        category: crate::category::counts::DEFAULT_SLOT,
        lookups: AtomicU64::new(0),
        size_bytes,
        atime_ns: AtomicI64::new(atime_ns),
        mtime_ns,
        ctime_ns,
        payload,
        xattrs: (!xattrs.is_empty()).then(|| Box::new(xattrs)),
    };
    Ok((inode, entries))
}

/// The payload of an inode of `kind`, its size, and a directory's entries.
fn read_payload<'a>(
    input: &mut &'a [u8],
    kind: FileKind,
    version: u32,
) -> Result<(Payload, u64, Option<DirEntries<'a>>), CheckpointError> {
    Ok(match kind {
        FileKind::RegularFile => {
            let size_bytes = varint(input, "file size")?;
            let tier = if version >= 2 {
                let code =
                    crate::persist::codec::get_u8(input).map_err(|e| bad(format!("tier: {e}")))?;
                Tier::from_code(code).ok_or_else(|| bad(format!("tier {code} is unknown")))?
            } else {
                Tier::Memory
            };
            if tier == Tier::Disk {
                if size_bytes > crate::limits::FILE_SIZE_BYTES_MAX {
                    return Err(bad(format!("file size {size_bytes} is too large")));
                }
                let written = varint(input, "bytes held on disk")?;
                if written > size_bytes {
                    return Err(bad(format!(
                        "a disk-tier file holds {written} bytes, past its size {size_bytes}"
                    )));
                }
                let host = crate::contents::HostFile::holding(written);
                return Ok((
                    Payload::File(crate::contents::Contents::Disk(host)),
                    size_bytes,
                    None,
                ));
            }
            let n = count(input, "chunk count")?;
            let mut chunks = Vec::with_capacity(n);
            let mut next_index = 0usize;
            for _ in 0..n {
                let index = next_index
                    .checked_add(varint(input, "chunk index")? as usize)
                    .ok_or_else(|| bad("chunk index overflow"))?;
                chunks.push((index, field_bytes(input, CHUNK_BYTES, "chunk")?.to_vec()));
                next_index = index + 1;
            }
            let data = FileData::from_chunks(chunks).map_err(bad)?;
            data.check(size_bytes).map_err(bad)?;
            (Payload::File(data.into()), size_bytes, None)
        }
        FileKind::Directory => {
            let parent = varint(input, "parent")?;
            let n = count(input, "entry count")?;
            let mut list = Vec::with_capacity(n);
            for _ in 0..n {
                let child = varint(input, "entry inode")?;
                list.push((child, field_bytes(input, NAME_BYTES_MAX, "entry name")?));
            }
            (Payload::Dir(Box::new(Dir::new(parent))), 0, Some(list))
        }
        FileKind::Symlink => {
            let target = field_bytes(input, crate::limits::SYMLINK_TARGET_BYTES_MAX, "target")?;
            (Payload::Symlink(target.into()), target.len() as u64, None)
        }
        FileKind::CharDevice | FileKind::BlockDevice => {
            let rdev = varint_u32(input, "rdev")?;
            (Payload::Special { rdev }, 0, None)
        }
        FileKind::NamedPipe | FileKind::Socket => (Payload::Special { rdev: 0 }, 0, None),
    })
}

/// An inode's xattrs, each checked as a new one would be.
fn read_xattrs(input: &mut &[u8], ino: Ino) -> Result<Xattrs, CheckpointError> {
    let n = count(input, "xattr count")?;
    let mut xattrs = Xattrs::default();
    for _ in 0..n {
        let name = field_bytes(input, crate::limits::XATTR_NAME_BYTES_MAX, "xattr name")?;
        let value = field_bytes(input, crate::limits::XATTR_VALUE_BYTES_MAX, "xattr value")?;
        xattrs
            .check_set(name, value, xattr::XATTR_CREATE)
            .map_err(|e| bad(format!("xattr of inode {ino}: {e}")))?;
        xattrs.set(name, value);
    }
    Ok(xattrs)
}

/// Inserts each directory's entries, now that every inode is known, with the kind of the
/// inode each names.
fn insert_entries(
    inodes: &mut [(Ino, Inode)],
    entries: Vec<(Ino, DirEntries<'_>)>,
) -> Result<(), CheckpointError> {
    let kinds: HashMap<Ino, u8> = inodes
        .iter()
        .map(|(ino, inode)| (*ino, kind_tag(inode.kind())))
        .collect();
    let by_ino: HashMap<Ino, usize> = inodes
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (*n, i))
        .collect();
    for (dir_ino, list) in entries {
        let index = by_ino[&dir_ino];
        let Some(dir) = inodes[index].1.dir_mut() else {
            unreachable!("entries are only read for directories")
        };
        for (child, name) in list {
            let kind = *kinds
                .get(&child)
                .ok_or_else(|| bad(format!("directory {dir_ino} names missing inode {child}")))?;
            if name.is_empty()
                || name.contains(&b'/')
                || name.contains(&0)
                || name == b"."
                || name == b".."
            {
                return Err(bad(format!("directory {dir_ino} holds an invalid name")));
            }
            if dir.get(name).is_some() {
                return Err(bad(format!("directory {dir_ino} holds a name twice")));
            }
            dir.insert(name, child, kind);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Ctx, Engine};

    fn sample() -> Engine {
        let e = Engine::new(EngineConfig::default());
        let c = Ctx::library(1000, 100);
        let d = e.mkdir(&c, ROOT_INO, b"dir", 0o755).unwrap();
        let f = e
            .mknod(&c, d.ino, b"file", libc::S_IFREG | 0o644, 0)
            .unwrap();
        e.write(&c, f.ino, 0, b"hello", false).unwrap();
        e.write(&c, f.ino, 3 * CHUNK_BYTES as u64, b"far", false)
            .unwrap();
        e.link(&c, f.ino, ROOT_INO, b"hard").unwrap();
        e.symlink(&c, ROOT_INO, b"link", b"dir/file").unwrap();
        e.mknod(&c, ROOT_INO, b"dev", libc::S_IFCHR | 0o600, 0x0501)
            .unwrap();
        e.mknod(&c, ROOT_INO, b"fifo", libc::S_IFIFO | 0o600, 0)
            .unwrap();
        e.setxattr(&c, f.ino, b"user.k", b"v", 0).unwrap();
        e.mknod(&c, ROOT_INO, b"gone", libc::S_IFREG | 0o644, 0)
            .unwrap();
        e.unlink(&c, ROOT_INO, b"gone").unwrap();
        e
    }

    fn listing(e: &Engine, path: &[u8]) -> Vec<(Vec<u8>, u64)> {
        let dir = e.lookup_path(path).unwrap().ino;
        let mut out = Vec::new();
        e.readdir(dir, 0, |ino, _, _, name| {
            out.push((name.to_vec(), ino));
            true
        })
        .unwrap();
        out.sort();
        out
    }

    #[test]
    fn round_trip_keeps_everything() {
        let e = sample();
        let image = e.with_state(|s| encode(s, [3; 16], 42, 1_700_000_000_000_000_000));
        let (state, header) = decode(&image, &EngineConfig::default()).unwrap();
        assert_eq!(header.seq, 42);
        let r = Engine::from_state(state);
        assert!(r.check().is_empty(), "{:?}", r.check());
        for path in [&b"/"[..], b"/dir"] {
            assert_eq!(listing(&e, path), listing(&r, path));
        }
        // (A directory's allocated bytes are its index's capacity, which a rebuild may change.)
        for path in [&b"/dir/file"[..], b"/hard", b"/link", b"/dev", b"/fifo"] {
            assert_eq!(
                e.lookup_path(path).unwrap(),
                r.lookup_path(path).unwrap(),
                "{path:?}"
            );
        }
        let f = r.lookup_path(b"/dir/file").unwrap().ino;
        let mut buf = Vec::new();
        r.read(f, 0, 5, &mut buf).unwrap();
        assert_eq!(buf, b"hello");
        r.read(f, 3 * CHUNK_BYTES as u64, 10, &mut buf).unwrap();
        assert_eq!(buf, b"far");
        assert_eq!(r.getxattr(f, b"user.k").unwrap(), b"v");
        assert_eq!(
            r.readlink(r.lookup_path(b"/link").unwrap().ino).unwrap(),
            b"dir/file"
        );
        assert_eq!(e.stats(), r.stats());
        // A new inode after recovery never reuses a generation from before.
        let n = r
            .mknod(&Ctx::library(0, 0), ROOT_INO, b"new", libc::S_IFREG, 0)
            .unwrap();
        assert!(n.generation > e.lookup_path(b"/fifo").unwrap().generation);
    }

    #[test]
    fn empty_files_cost_few_bytes() {
        let e = Engine::new(EngineConfig::default());
        let c = Ctx::library(1000, 1000);
        let n = 10_000u64;
        for i in 0..n {
            e.mknod(
                &c,
                ROOT_INO,
                format!("f{i:05}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
            )
            .unwrap();
        }
        let image = e.with_state(|s| encode(s, [0; 16], 0, crate::time::now_ns()));
        // Names (6 bytes each) and their length bytes are the directory's, not the inodes'.
        let names = n * 7;
        let per_inode = (image.len() as u64 - names) as f64 / n as f64;
        eprintln!("checkpoint: {per_inode:.2} bytes per empty-file inode");
        assert!(
            per_inode <= 20.0,
            "{per_inode:.1} bytes per empty-file inode"
        );
    }

    proptest::proptest! {
        /// A valid header followed by arbitrary bytes (with a matching checksum, so the body
        /// decoder itself is exercised) never panics.
        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let header = Header { version: VERSION, store_id: [0; 16], seq: 0, created_ns: 0, body_len: body.len() as u64 };
            let mut bytes = header.encode().to_vec();
            bytes.extend_from_slice(&body);
            bytes.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
            let _ = decode_for_repair(&bytes, &EngineConfig::default());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// A valid image with bytes of its body changed and its checksum fixed (so that only
        /// the decoder and the invariant checks stand guard): never a panic, and whatever
        /// decodes is a consistent file system.
        #[test]
        fn mutated_images_decode_consistently_or_not_at_all(
            edits in proptest::collection::vec((proptest::prelude::any::<u16>(), proptest::prelude::any::<u8>()), 1..6)
        ) {
            let mut image = sample().with_state(|s| encode(s, [3; 16], 42, 5));
            let body_end = image.len() - 4;
            for (at, value) in edits {
                let i = HEADER_BYTES + usize::from(at) % (body_end - HEADER_BYTES);
                image[i] = value;
            }
            let crc = crc32c::crc32c(&image[HEADER_BYTES..body_end]);
            image[body_end..].copy_from_slice(&crc.to_le_bytes());
            if let Ok((state, _)) = decode(&image, &EngineConfig::default()) {
                let problems = Engine::from_state(state).check();
                proptest::prop_assert!(problems.is_empty(), "{:?}", problems);
            }
        }
    }

    /// Found by the fuzzer: a root whose link count reads 0 passed the engine's checks, and
    /// the next checkpoint (which leaves out inodes without links) had no root.
    #[test]
    fn a_root_without_links_is_refused() {
        let mut image = sample().with_state(|s| encode(s, [3; 16], 42, 5));
        // The root is the first inode: after next_generation and the owners table come the
        // inode count, its number delta (1), generation, owner index (0) and nlink.
        let mut input = &image[HEADER_BYTES..];
        varint(&mut input, "").unwrap();
        let owners = varint(&mut input, "").unwrap();
        for _ in 0..owners {
            for _ in 0..3 {
                varint(&mut input, "").unwrap();
            }
            input = &input[1..];
        }
        varint(&mut input, "").unwrap();
        assert_eq!(varint(&mut input, "").unwrap(), 1);
        varint(&mut input, "").unwrap();
        assert_eq!(varint(&mut input, "").unwrap(), 0);
        let nlink_at = image.len() - input.len();
        assert_eq!(
            image[nlink_at], 3,
            "the root's nlink: 2 and one subdirectory"
        );
        image[nlink_at] = 0;
        let body_end = image.len() - 4;
        let crc = crc32c::crc32c(&image[HEADER_BYTES..body_end]);
        image[body_end..].copy_from_slice(&crc.to_le_bytes());
        for result in [
            decode(&image, &EngineConfig::default()).map(|_| ()),
            decode_for_repair(&image, &EngineConfig::default()).map(|_| ()),
        ] {
            assert_eq!(
                result.unwrap_err(),
                CheckpointError::Inconsistent(vec!["the root directory has no links".into()])
            );
        }
    }

    #[test]
    fn header_faults_keep_their_messages() {
        let image = sample().with_state(|s| encode(s, [3; 16], 42, 5));
        let message = |bytes: &[u8]| {
            decode(bytes, &EngineConfig::default())
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        let not_one = "checkpoint is damaged: not a rampart checkpoint";
        assert_eq!(message(&image[..63]), not_one);
        let mut foreign = image.clone();
        foreign[1] = b'X';
        assert_eq!(message(&foreign), not_one);
        let mut damaged = image.clone();
        damaged[33] ^= 1;
        assert_eq!(
            message(&damaged),
            "checkpoint is damaged: header checksum mismatch"
        );
        let mut newer = image.clone();
        newer[8] = 3;
        let crc = crc32c::crc32c(&newer[..60]);
        newer[60..64].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            message(&newer),
            "checkpoint format version 3 is not supported (this rampart reads 1 to 2)"
        );
    }

    #[test]
    fn any_damage_is_refused_not_guessed() {
        let image = sample().with_state(|s| encode(s, [3; 16], 42, 5));
        for len in [0, 10, HEADER_BYTES, image.len() - 1] {
            assert!(
                decode(&image[..len], &EngineConfig::default()).is_err(),
                "len {len}"
            );
        }
        for byte in (0..image.len()).step_by(7) {
            let mut bad = image.clone();
            bad[byte] ^= 0x40;
            assert!(
                decode(&bad, &EngineConfig::default()).is_err(),
                "flip at {byte}"
            );
        }
    }
}
