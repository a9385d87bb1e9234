//! Per-category counters (issue 14 item 8, issue 17 item 4): regular files, and their bytes in
//! memory and on the disk tier, kept up to date on the paths that already count bytes per tier
//! (`State`'s `Counts`), so that a status request reads them without scanning the inodes
//! (decision 0085).
//!
//! Each inode carries a small slot number (`Inode::category`) naming its category: slot 0 for a
//! file without a category of its own (the store default), slot 1 for names past
//! `CATEGORY_SLOTS_MAX`, then one slot per name seen (interned on first use, never freed:
//! names are few). The slot follows the hidden attribute `CATEGORY_XATTR` wherever an op sets
//! or removes it, live or replayed.

use std::collections::HashMap;

use super::{Assigned, CATEGORY_XATTR};
use crate::limits::CATEGORY_SLOTS_MAX;
use crate::xattr::Xattrs;

/// A file without a category attribute: the store default.
pub const DEFAULT_SLOT: u16 = 0;
/// Names past `CATEGORY_SLOTS_MAX`, counted together.
pub const OTHER_SLOT: u16 = 1;
/// How the other slot is shown.
pub const OTHER_NAME: &str = "(other)";

/// One category's files and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CategoryCount {
    pub files: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
}

impl CategoryCount {
    fn add(&mut self, files: i64, memory_bytes: i64, disk_bytes: i64) {
        self.files = self.files.wrapping_add_signed(files);
        self.memory_bytes = self.memory_bytes.wrapping_add_signed(memory_bytes);
        self.disk_bytes = self.disk_bytes.wrapping_add_signed(disk_bytes);
    }
}

/// The slots' names and counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CategoryCounts {
    /// Slot number → name (`None` for the default and other slots).
    names: Vec<Option<Box<str>>>,
    by_name: HashMap<Box<str>, u16>,
    counts: Vec<CategoryCount>,
}

impl Default for CategoryCounts {
    fn default() -> Self {
        CategoryCounts {
            names: vec![None, None],
            by_name: HashMap::new(),
            counts: vec![CategoryCount::default(); 2],
        }
    }
}

impl CategoryCounts {
    /// The slot of `name`, interned on first use (the other slot once the slots are full).
    pub fn slot_of_name(&mut self, name: &str) -> u16 {
        if let Some(&slot) = self.by_name.get(name) {
            return slot;
        }
        if self.names.len() >= CATEGORY_SLOTS_MAX {
            return OTHER_SLOT;
        }
        let slot = self.names.len() as u16;
        self.names.push(Some(name.into()));
        self.by_name.insert(name.into(), slot);
        self.counts.push(CategoryCount::default());
        slot
    }

    /// The slot for an inode with these attributes.
    pub fn slot_of(&mut self, xattrs: Option<&Xattrs>) -> u16 {
        match xattrs
            .and_then(|x| x.get(CATEGORY_XATTR))
            .and_then(Assigned::decode)
        {
            Some(assigned) => self.slot_of_name(&assigned.name),
            None => DEFAULT_SLOT,
        }
    }

    /// The name a slot counts (None: the store default); `OTHER_NAME` for the other slot.
    pub fn name(&self, slot: u16) -> Option<&str> {
        if slot == OTHER_SLOT {
            return Some(OTHER_NAME);
        }
        self.names.get(usize::from(slot)).and_then(|n| n.as_deref())
    }

    /// Adds (`sign` 1) or takes away (-1) a file's bytes: `stored_bytes` on `disk` or in memory.
    pub fn count_bytes(&mut self, slot: u16, stored_bytes: i64, disk: bool) {
        let count = self.count_mut(slot);
        if disk {
            count.add(0, 0, stored_bytes);
        } else {
            count.add(0, stored_bytes, 0);
        }
    }

    /// Adds or takes away one file.
    pub fn count_file(&mut self, slot: u16, sign: i64) {
        self.count_mut(slot).add(sign, 0, 0);
    }

    fn count_mut(&mut self, slot: u16) -> &mut CategoryCount {
        let i = usize::from(slot).min(self.counts.len() - 1);
        debug_assert_eq!(
            i,
            usize::from(slot),
            "category slot {slot} was never interned"
        );
        &mut self.counts[i]
    }

    /// Every slot with its count (those never used included), in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, CategoryCount)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .map(|(slot, c)| (slot as u16, *c))
    }

    /// The counts alone, for comparing a recount with the kept ones (the names may have been
    /// interned in another order).
    pub fn by_name(&self) -> HashMap<Option<String>, CategoryCount> {
        let mut out: HashMap<Option<String>, CategoryCount> = HashMap::new();
        for (slot, c) in self.iter() {
            if c == CategoryCount::default() {
                continue;
            }
            let e = out.entry(self.name(slot).map(str::to_string)).or_default();
            e.add(c.files as i64, c.memory_bytes as i64, c.disk_bytes as i64);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_get_slots_once_and_overflow_into_other() {
        let mut c = CategoryCounts::default();
        let a = c.slot_of_name("SAFE");
        assert_eq!(c.slot_of_name("SAFE"), a);
        assert_ne!(c.slot_of_name("TEMPORARY"), a);
        assert_eq!(c.name(a), Some("SAFE"));
        assert_eq!(c.name(DEFAULT_SLOT), None);
        for i in 0..CATEGORY_SLOTS_MAX {
            c.slot_of_name(&format!("spec:lm={}s", i + 1));
        }
        assert_eq!(c.slot_of_name("spec:lm=99999s"), OTHER_SLOT);
        assert_eq!(c.name(OTHER_SLOT), Some(OTHER_NAME));
        c.count_file(a, 1);
        c.count_bytes(a, 10, false);
        c.count_bytes(a, 5, true);
        assert_eq!(
            c.by_name()[&Some("SAFE".to_string())],
            CategoryCount {
                files: 1,
                memory_bytes: 10,
                disk_bytes: 5
            }
        );
    }
}
