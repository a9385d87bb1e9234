//! A directory: a hash index from name to entry, with readdir cookies that stay valid while
//! entries come and go.
//!
//! Entries live in a slot vector; an entry's cookie is its slot index, which never changes while
//! the entry exists. A removed entry leaves a free slot (threaded on a free list) that a later
//! entry may reuse, so a listing in progress sees every entry that existed throughout exactly
//! once, and an entry added meanwhile at most once. Names live in one arena per directory (no
//! allocation per name); the hash table stores only slot indices. The arena is compacted when
//! half of it is dead, which rewrites offsets but not slots, so cookies survive compaction.
//! Lookup, insert and remove are O(1); readdir from a cookie is O(1) per entry.

use std::hash::BuildHasher;
use std::sync::OnceLock;

use hashbrown::HashTable;

use crate::attr::Ino;
use crate::error::Broken;

/// Longest name of one entry, in bytes (Linux's NAME_MAX).
pub use crate::limits::NAME_BYTES_MAX;

use crate::limits::{DIR_ENTRIES_MAX, DIR_NAMES_BYTES_MAX};

const FREE_NONE: u32 = u32::MAX;

/// Arenas smaller than this are not worth compacting.
const ARENA_COMPACT_MIN_BYTES: usize = 4096;

/// One slot: a live entry (`ino != 0`) or a free slot whose `name_off` is the next free slot.
#[derive(Clone, Copy, Debug)]
struct Slot {
    ino: Ino,
    name_off: u32,
    name_len: u8,
    kind_code: u8,
}

/// An entry as readdir returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry<'a> {
    pub name: &'a [u8],
    pub ino: Ino,
    pub kind_code: u8,
    /// The cookie that resumes a listing just after this entry.
    pub next_cookie: u64,
}

fn hasher() -> &'static hashbrown::DefaultHashBuilder {
    // One random seed per process: names chosen to collide cannot be precomputed.
    static HASHER: OnceLock<hashbrown::DefaultHashBuilder> = OnceLock::new();
    HASHER.get_or_init(hashbrown::DefaultHashBuilder::default)
}

fn hash_name(name: &[u8]) -> u64 {
    hasher().hash_one(name)
}

/// The entries of one directory, and its parent.
#[derive(Debug)]
pub struct Dir {
    pub parent: Ino,
    slots: Vec<Slot>,
    free_head: u32,
    index: HashTable<u32>,
    names: Vec<u8>,
    names_dead_bytes: usize,
}

/// Cookies 1 and 2 resume after "." and ".."; cookie `slot + 3` resumes after `slot`.
const COOKIE_FIRST_SLOT: u64 = 2;

impl Dir {
    pub fn new(parent: Ino) -> Dir {
        Dir {
            parent,
            slots: Vec::new(),
            free_head: FREE_NONE,
            index: HashTable::new(),
            names: Vec::new(),
            names_dead_bytes: 0,
        }
    }

    /// Number of entries (without "." and "..").
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether one more entry named with `name_len` bytes fits: slot indices and name offsets
    /// are `u32`s (the callers refuse with ENOSPC otherwise).
    pub fn has_room_for(&self, name_len: usize) -> bool {
        self.len() < DIR_ENTRIES_MAX && self.names.len() + name_len <= DIR_NAMES_BYTES_MAX
    }

    fn slot_name(&self, slot: &Slot) -> &[u8] {
        let start = slot.name_off as usize;
        &self.names[start..start + slot.name_len as usize]
    }

    fn find(&self, name: &[u8]) -> Option<u32> {
        let hash = hash_name(name);
        self.index
            .find(hash, |&i| {
                let slot = &self.slots[i as usize];
                self.slot_name(slot) == name
            })
            .copied()
    }

    /// The entry of `name`: its inode and kind code.
    pub fn get(&self, name: &[u8]) -> Option<(Ino, u8)> {
        self.find(name).map(|i| {
            let slot = &self.slots[i as usize];
            (slot.ino, slot.kind_code)
        })
    }

    /// Adds an entry. The caller has checked that `name` is valid and absent.
    pub fn insert(&mut self, name: &[u8], ino: Ino, kind_code: u8) {
        debug_assert!(!name.is_empty() && name.len() <= NAME_BYTES_MAX);
        debug_assert!(ino != 0);
        debug_assert!(self.find(name).is_none(), "duplicate entry");
        debug_assert!(self.has_room_for(name.len()), "checked by the caller");
        let name_off = u32::try_from(self.names.len()).expect("directory name arena over 4 GiB");
        self.names.extend_from_slice(name);
        let slot = Slot {
            ino,
            name_off,
            name_len: name.len() as u8,
            kind_code,
        };
        let index = if self.free_head != FREE_NONE {
            let i = self.free_head;
            self.free_head = self.slots[i as usize].name_off;
            self.slots[i as usize] = slot;
            i
        } else {
            self.slots.push(slot);
            (self.slots.len() - 1) as u32
        };
        let hash = hash_name(name);
        let slots = &self.slots;
        let names = &self.names;
        self.index.insert_unique(hash, index, |&i| {
            let s = &slots[i as usize];
            let start = s.name_off as usize;
            hash_name(&names[start..start + s.name_len as usize])
        });
    }

    /// Removes the entry of `name`, returning its inode and kind code.
    pub fn remove(&mut self, name: &[u8]) -> Option<(Ino, u8)> {
        let hash = hash_name(name);
        let slots = &self.slots;
        let names = &self.names;
        let entry = self
            .index
            .find_entry(hash, |&i| {
                let s = &slots[i as usize];
                let start = s.name_off as usize;
                &names[start..start + s.name_len as usize] == name
            })
            .ok()?;
        let (index, _) = entry.remove();
        let slot = self.slots[index as usize];
        self.slots[index as usize] = Slot {
            ino: 0,
            name_off: self.free_head,
            name_len: 0,
            kind_code: 0,
        };
        self.free_head = index;
        self.names_dead_bytes += slot.name_len as usize;
        if self.index.is_empty() {
            // Nothing to keep: drop every slot and the arena. Cookies of a listing in progress
            // then point past the end, which ends that listing: correct, the directory is empty.
            self.slots = Vec::new();
            self.free_head = FREE_NONE;
            self.names = Vec::new();
            self.names_dead_bytes = 0;
            self.index = HashTable::new();
        } else if self.names_dead_bytes > ARENA_COMPACT_MIN_BYTES
            && self.names_dead_bytes * 2 > self.names.len()
        {
            self.compact_names();
        }
        Some((slot.ino, slot.kind_code))
    }

    /// Changes the inode (and kind) an existing entry points to, in place; used by rename.
    pub fn replace(&mut self, name: &[u8], ino: Ino, kind_code: u8) -> Option<Ino> {
        let i = self.find(name)?;
        let slot = &mut self.slots[i as usize];
        let old = slot.ino;
        slot.ino = ino;
        slot.kind_code = kind_code;
        Some(old)
    }

    fn compact_names(&mut self) {
        let mut names = Vec::with_capacity(self.names.len() - self.names_dead_bytes);
        for slot in self.slots.iter_mut().filter(|s| s.ino != 0) {
            let start = slot.name_off as usize;
            let off = names.len() as u32;
            names.extend_from_slice(&self.names[start..start + slot.name_len as usize]);
            slot.name_off = off;
        }
        self.names = names;
        self.names_dead_bytes = 0;
    }

    /// Calls `emit` for each entry from `cookie` on, in slot order, until it returns false.
    /// Cookie 0 and the cookies of "." and ".." are handled by the caller; this starts at
    /// slot `cookie - 2` for `cookie >= 2`.
    pub fn list_from(&self, cookie: u64, mut emit: impl FnMut(DirEntry<'_>) -> bool) {
        let first = cookie.saturating_sub(COOKIE_FIRST_SLOT) as usize;
        for (i, slot) in self.slots.iter().enumerate().skip(first) {
            if slot.ino == 0 {
                continue;
            }
            let entry = DirEntry {
                name: self.slot_name(slot),
                ino: slot.ino,
                kind_code: slot.kind_code,
                next_cookie: i as u64 + COOKIE_FIRST_SLOT + 1,
            };
            if !emit(entry) {
                return;
            }
        }
    }

    /// Bytes of heap memory this directory holds (for the memory budget).
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.names.capacity()
            + self.index.capacity() * (std::mem::size_of::<u32>() + 1)
    }

    /// Checks the internal invariants (tests and fsck).
    pub fn check(&self) -> Result<(), Broken> {
        let live = self.slots.iter().filter(|s| s.ino != 0).count();
        if live != self.index.len() {
            return Err(Broken(format!(
                "{live} live slots but {} indexed",
                self.index.len()
            )));
        }
        for slot in self.slots.iter().filter(|s| s.ino != 0) {
            let name = self.slot_name(slot);
            match self.find(name) {
                Some(i) if self.slots[i as usize].ino == slot.ino => {}
                _ => return Err(Broken(format!("entry {:?} is not found by its name", name))),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn listing(dir: &Dir, cookie: u64) -> Vec<(Vec<u8>, Ino, u64)> {
        let mut out = Vec::new();
        dir.list_from(cookie, |e| {
            out.push((e.name.to_vec(), e.ino, e.next_cookie));
            true
        });
        out
    }

    #[test]
    fn insert_get_remove() {
        let mut d = Dir::new(1);
        d.insert(b"a", 10, 8);
        d.insert(b"b", 11, 4);
        assert_eq!(d.get(b"a"), Some((10, 8)));
        assert_eq!(d.get(b"c"), None);
        assert_eq!(d.remove(b"a"), Some((10, 8)));
        assert_eq!(d.get(b"a"), None);
        assert_eq!(d.len(), 1);
        d.check().unwrap();
    }

    #[test]
    fn cookies_survive_removal_of_other_entries_and_compaction() {
        let mut d = Dir::new(1);
        for i in 0..10_000u64 {
            d.insert(format!("name-{i:06}-padding-padding").as_bytes(), i + 2, 8);
        }
        let first = listing(&d, 0);
        assert_eq!(first.len(), 10_000);
        // Resume from the middle after removing most other entries (forces compaction).
        let resume = first[4_999].2;
        for i in (0..10_000u64).filter(|i| i % 10 != 0) {
            d.remove(format!("name-{i:06}-padding-padding").as_bytes());
        }
        d.check().unwrap();
        let rest = listing(&d, resume);
        let expected: Vec<u64> = (5_000..10_000u64)
            .filter(|i| i % 10 == 0)
            .map(|i| i + 2)
            .collect();
        assert_eq!(rest.iter().map(|e| e.1).collect::<Vec<_>>(), expected);
    }

    #[test]
    fn random_operations_match_a_model() {
        let mut d = Dir::new(1);
        let mut model: HashMap<Vec<u8>, Ino> = HashMap::new();
        let mut seed = 0x9e3779b97f4a7c15u64;
        for step in 0..50_000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let name = format!("n{}", seed % 3000).into_bytes();
            match model.remove(&name) {
                Some(ino) => assert_eq!(d.remove(&name).map(|e| e.0), Some(ino)),
                None => {
                    d.insert(&name, step + 2, 8);
                    model.insert(name, step + 2);
                }
            }
        }
        d.check().unwrap();
        let mut listed: Vec<_> = listing(&d, 0).into_iter().map(|e| (e.0, e.1)).collect();
        let mut expected: Vec<_> = model.into_iter().collect();
        listed.sort();
        expected.sort();
        assert_eq!(listed, expected);
    }
}
