//! The inode table: a dense vector indexed by inode number, and the set of free numbers.
//!
//! A freed number is reused (lowest first), with a new generation so that a reused number is
//! never confused with the file that had it before. Allocation is a function of the table's
//! state, and creation records the number it got, so replaying a journal claims the same
//! numbers.

use std::collections::BTreeSet;

use crate::attr::Ino;
use crate::error::{Errno, FsResult};
use crate::namespace::inode::Inode;

pub use crate::limits::INODES_MAX;

/// Below this many slots the table never shrinks.
const SHRINK_CAPACITY_MIN: usize = 1024;

#[derive(Debug, Default)]
pub struct InodeTable {
    slots: Vec<Option<Inode>>,
    free: BTreeSet<Ino>,
    live: u64,
    next_generation: u32,
}

impl InodeTable {
    pub fn new() -> InodeTable {
        InodeTable {
            // Slot 0 is never used: FUSE reserves inode number 0.
            slots: vec![None],
            free: BTreeSet::new(),
            live: 0,
            next_generation: 1,
        }
    }

    /// The generation the next new inode gets.
    pub fn next_generation(&self) -> u32 {
        self.next_generation
    }

    /// Raises the next generation to at least `generation` (restoring a checkpoint, so that
    /// numbers freed before it are never confused with files made after it).
    pub fn raise_next_generation(&mut self, generation: u32) {
        self.next_generation = self.next_generation.max(generation).max(1);
    }

    pub fn live(&self) -> u64 {
        self.live
    }

    pub fn get(&self, ino: Ino) -> FsResult<&Inode> {
        self.slots
            .get(ino as usize)
            .and_then(Option::as_ref)
            .ok_or(Errno::ENOENT)
    }

    pub fn get_mut(&mut self, ino: Ino) -> FsResult<&mut Inode> {
        self.slots
            .get_mut(ino as usize)
            .and_then(Option::as_mut)
            .ok_or(Errno::ENOENT)
    }

    /// The number and generation the next allocation will get.
    pub fn next_allocation(&self) -> FsResult<(Ino, u32)> {
        let ino = match self.free.first() {
            Some(&ino) => ino,
            None => self.slots.len() as Ino,
        };
        if ino > INODES_MAX {
            return Err(Errno::ENOSPC);
        }
        Ok((ino, self.next_generation))
    }

    /// Makes every later allocation's generation greater than `generation` (fsck's
    /// adoption of host files named by generations a lost journal handed out).
    pub fn raise_next_generation_above(&mut self, generation: u32) {
        self.next_generation = self.next_generation.max(generation.saturating_add(1));
    }

    /// Puts `inode` at number `ino`, which must be free (chosen by `next_allocation`, or
    /// recorded in a journal).
    pub fn insert(&mut self, ino: Ino, inode: Inode) {
        debug_assert!(ino != 0);
        let index = ino as usize;
        if index >= self.slots.len() {
            for gap in self.slots.len()..index {
                self.free.insert(gap as Ino);
            }
            self.slots.resize_with(index + 1, || None);
        } else {
            let was_free = self.free.remove(&ino);
            assert!(
                was_free && self.slots[index].is_none(),
                "inode {ino} is in use"
            );
        }
        self.next_generation = self.next_generation.max(inode.generation.wrapping_add(1));
        if self.next_generation == 0 {
            self.next_generation = 1;
        }
        self.slots[index] = Some(inode);
        self.live += 1;
    }

    /// Frees number `ino`, returning its inode.
    pub fn remove(&mut self, ino: Ino) -> Inode {
        let inode = self.slots[ino as usize]
            .take()
            .expect("freeing an inode that is not in use");
        self.live -= 1;
        if ino as usize == self.slots.len() - 1 {
            self.slots.pop();
            // Keep the vector dense: drop trailing free slots too.
            while self.slots.len() > 2 && self.slots.last().is_some_and(Option::is_none) {
                let last = (self.slots.len() - 1) as Ino;
                self.free.remove(&last);
                self.slots.pop();
            }
            // Give the memory of a table that emptied back (not at every pop: amortized).
            if self.slots.capacity() >= SHRINK_CAPACITY_MIN
                && self.slots.len() < self.slots.capacity() / 4
            {
                self.slots.shrink_to(self.slots.len() * 2);
            }
        } else {
            self.free.insert(ino);
        }
        inode
    }

    /// Every live inode with its number.
    pub fn iter(&self) -> impl Iterator<Item = (Ino, &Inode)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|inode| (i as Ino, inode)))
    }

    /// How much the slot array would grow to insert `ino` (Vec doubles its capacity).
    pub fn growth_bytes(&self, ino: Ino) -> u64 {
        crate::memory::vec_growth_bytes(
            self.slots.capacity(),
            ino as usize + 1,
            std::mem::size_of::<Option<Inode>>(),
        )
    }

    /// Bytes the table itself holds.
    pub fn heap_bytes(&self) -> u64 {
        (self.slots.capacity() * std::mem::size_of::<Option<Inode>>()) as u64
            + self.free.len() as u64 * 16
    }
}
