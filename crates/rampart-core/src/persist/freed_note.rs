//! The `freed` note (decision 0119): host files of deleted disk-tier files that were removed
//! before their deletion was durable, because the journal had stopped on a full disk and
//! their room was what the disk needed. Recovery drops the inodes it names whose host file is
//! gone (the deletion the user made), instead of reporting a missing host file; the next
//! checkpoint (whose image no longer holds those inodes) removes the note.
//!
//! Format (little-endian): magic `RPFREED\0` | version u32 (1) | count u32 |
//! count × (name_len u16 | name bytes, a host file name `data/<ino>-<generation>`) |
//! crc32c of every byte before it u32. Written whole to `freed.tmp`, synced, renamed.

use std::collections::HashSet;

use crate::attr::Ino;
use crate::contents::host_file::parse_host_file_name;
use crate::contents::Tier;
use crate::persist::device::Device;
use crate::state::State;

pub const FREED_FILE: &str = "freed";
const FREED_TMP: &str = "freed.tmp";
const MAGIC: [u8; 8] = *b"RPFREED\0";
pub const VERSION: u32 = 1;
/// A note names at most this many host files (one removal round takes at most
/// `HOST_REMOVALS_PENDING_MAX`; rounds add to the note until a checkpoint removes it).
pub const FREED_NAMES_MAX: usize = 1 << 16;
/// A name is a host file name, `data/<16 hex digits>-<8 hex digits>` (30 bytes); longer
/// than this is damage.
pub const NAME_BYTES_MAX: usize = 64;
/// The largest note: header, the most names of the longest length, checksum.
pub const NOTE_BYTES_MAX: u64 = (16 + FREED_NAMES_MAX * (2 + NAME_BYTES_MAX) + 4) as u64;

pub fn encode(names: &[String]) -> Vec<u8> {
    debug_assert!(names.len() <= FREED_NAMES_MAX);
    debug_assert!(names.iter().all(|n| n.len() <= NAME_BYTES_MAX));
    let mut out = Vec::with_capacity(16 + names.iter().map(|n| n.len() + 2).sum::<usize>());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for name in names {
        let bytes = name.as_bytes();
        out.extend_from_slice(&(bytes.len().min(u16::MAX as usize) as u16).to_le_bytes());
        out.extend_from_slice(&bytes[..bytes.len().min(u16::MAX as usize)]);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The names a note holds, or what is wrong with it.
pub fn decode(bytes: &[u8]) -> Result<Vec<String>, String> {
    if bytes.len() < 20 {
        return Err(format!("{} bytes, shorter than a note", bytes.len()));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if body[..8] != MAGIC {
        return Err("not a freed note (bad magic)".into());
    }
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err("bad checksum".into());
    }
    let version = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!("unsupported version {version}"));
    }
    let count = u32::from_le_bytes(body[12..16].try_into().expect("4 bytes")) as usize;
    if count > FREED_NAMES_MAX {
        return Err(format!("{count} names, more than {FREED_NAMES_MAX}"));
    }
    let mut rest = &body[16..];
    let mut names = Vec::with_capacity(count);
    for _ in 0..count {
        let Some((len, tail)) = rest.split_first_chunk::<2>() else {
            return Err("cut short".into());
        };
        let len = usize::from(u16::from_le_bytes(*len));
        if len > NAME_BYTES_MAX {
            return Err(format!("a name of {len} bytes, more than {NAME_BYTES_MAX}"));
        }
        if tail.len() < len {
            return Err("cut short".into());
        }
        let name = std::str::from_utf8(&tail[..len]).map_err(|_| "a name not UTF-8")?;
        names.push(name.to_owned());
        rest = &tail[len..];
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last name", rest.len()));
    }
    Ok(names)
}

/// The names in the store's note (none if there is none). A damaged note (longer than
/// `NOTE_BYTES_MAX`, checked before it is read, or one that does not decode) is an
/// `InvalidData` error saying what is wrong.
pub fn read(device: &dyn Device) -> std::io::Result<Vec<String>> {
    let damaged = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the store's {FREED_FILE} note is damaged ({why})"),
        )
    };
    match device.len(FREED_FILE)? {
        None => return Ok(Vec::new()),
        Some(len) if len > NOTE_BYTES_MAX => {
            return Err(damaged(format!(
                "{len} bytes, more than the largest note, {NOTE_BYTES_MAX}"
            )))
        }
        Some(_) => {}
    }
    let Some(bytes) = device.read(FREED_FILE)? else {
        return Ok(Vec::new());
    };
    decode(&bytes).map_err(damaged)
}

/// Writes the note (whole, synced, renamed into place) naming `names`.
pub fn write(device: &dyn Device, names: &[String]) -> std::io::Result<()> {
    device.write(FREED_TMP, &encode(names))?;
    device.sync(FREED_TMP)?;
    device.rename(FREED_TMP, FREED_FILE)
}

/// Removes the note (and a `freed.tmp` a crash left): called after a checkpoint whose image
/// was taken after the note was written, so it holds none of the inodes named.
pub fn remove(device: &dyn Device) {
    for name in [FREED_TMP, FREED_FILE] {
        if let Err(e) = device.remove(name) {
            tracing::warn!("removing the store's {name}: {e}; it is harmless and removed later");
        }
    }
}

/// Removes the note if there is one (a store without one is not written to).
pub fn remove_if_present(device: &dyn Device) {
    match device.len(FREED_FILE) {
        Ok(Some(_)) => remove(device),
        Ok(None) => {}
        Err(e) => tracing::warn!("looking for the store's {FREED_FILE} note: {e}"),
    }
}

/// Recovery: the inodes the note names whose host file is gone (their deletion, made before
/// the crash, was not yet durable). The mount removes them and journals their unlinks
/// (`persist::open`); fsck drops them from what it checks. A damaged note is an
/// `InvalidData` error (`read`).
pub fn deleted_inodes(state: &State, device: &dyn Device) -> std::io::Result<HashSet<Ino>> {
    let names = read(device)?;
    let mut deleted = HashSet::new();
    for name in &names {
        let Some((ino, generation)) = parse_host_file_name(name) else {
            continue;
        };
        let ours = state.inode(ino).is_ok_and(|i| {
            i.nlink > 0
                && i.generation == generation
                && i.file().map(|f| f.tier()) == Some(Tier::Disk)
        });
        if ours && device.len(name)?.is_none() {
            deleted.insert(ino);
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_decodes_to_its_names_and_damage_is_named() {
        let names = vec![
            "data/0000000000000002-00000001".to_owned(),
            "data/x".to_owned(),
        ];
        let bytes = encode(&names);
        assert_eq!(decode(&bytes).unwrap(), names);
        assert_eq!(decode(&encode(&[])).unwrap(), Vec::<String>::new());
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert_eq!(decode(&bad).unwrap_err(), "bad checksum");
        assert!(decode(&bytes[..10]).is_err());
        let mut other = bytes;
        other[0] = b'X';
        assert!(decode(&other).unwrap_err().contains("magic"));
        // Made by hand: `encode` asserts (in debug builds) that it is never given such a name.
        let name = "d".repeat(NAME_BYTES_MAX + 1);
        let mut long = Vec::new();
        long.extend_from_slice(&MAGIC);
        long.extend_from_slice(&VERSION.to_le_bytes());
        long.extend_from_slice(&1u32.to_le_bytes());
        long.extend_from_slice(&(name.len() as u16).to_le_bytes());
        long.extend_from_slice(name.as_bytes());
        let crc = crc32c::crc32c(&long);
        long.extend_from_slice(&crc.to_le_bytes());
        assert!(decode(&long).unwrap_err().contains("more than"));
    }
}
