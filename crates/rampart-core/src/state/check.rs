//! The state's invariants, checked: the namespace (entries, parents, link counts,
//! reachability), the contents, and the accounting. An empty list means consistent.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use super::{entry_cost, inode_charge, Counts, State};
use crate::attr::{Ino, ROOT_INO};
use crate::category::counts::CategoryCounts;
use crate::namespace::inode::Payload;

impl State {
    /// Checks every invariant of the namespace and the accounting; returns what is wrong.
    pub fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut names_per_inode: HashMap<Ino, u32> = Default::default();
        let mut subdirs: HashMap<Ino, u32> = Default::default();
        let mut counts = Counts::default();
        let mut categories = CategoryCounts::default();
        let mut budget = 0u64;
        for (ino, inode) in self.table.iter() {
            *counts.slot(inode.kind()) += 1;
            budget += inode_charge(inode);
            let slot = categories.slot_of(inode.xattrs.as_deref());
            if categories.name(slot) != self.categories.name(inode.category) {
                problems.push(format!(
                    "inode {ino}: counted in category {:?}, has {:?}",
                    self.categories.name(inode.category),
                    categories.name(slot)
                ));
            }
            match &inode.payload {
                Payload::File(f) => {
                    counts.count_contents(f, 1);
                    super::count_category(&mut categories, slot, f, 1);
                    if let Err(e) = f.check(inode.size_bytes) {
                        problems.push(format!("inode {ino}: {e}"));
                    }
                }
                Payload::Dir(d) => {
                    if let Err(e) = d.check() {
                        problems.push(format!("directory {ino}: {e}"));
                    }
                    d.list_from(0, |e| {
                        budget += entry_cost(e.name);
                        *names_per_inode.entry(e.ino).or_default() += 1;
                        match self.table.get(e.ino) {
                            Err(_) => problems.push(format!(
                                "directory {ino}: entry {:?} points to free inode {}",
                                String::from_utf8_lossy(e.name),
                                e.ino
                            )),
                            Ok(child) => {
                                if child.kind().code() != e.kind_code {
                                    problems.push(format!("directory {ino}: entry kind differs"));
                                }
                                if let Some(cd) = child.dir() {
                                    *subdirs.entry(ino).or_default() += 1;
                                    if cd.parent != ino {
                                        problems.push(format!(
                                            "directory {} is in {ino} but says its parent is {}",
                                            e.ino, cd.parent
                                        ));
                                    }
                                }
                            }
                        }
                        true
                    });
                }
                _ => {}
            }
        }
        self.check_links(&names_per_inode, &subdirs, &mut problems);
        // A removed directory may keep nlink 0 while the kernel holds it; the root never is
        // removed (the next checkpoint would leave it out, and the store with it).
        if self.table.get(ROOT_INO).is_ok_and(|root| root.nlink == 0) {
            problems.push("the root directory has no links".into());
        }
        for &ino in &self.linkable {
            if !self
                .inode(ino)
                .is_ok_and(|i| i.nlink == 0 && i.file().is_some())
            {
                problems.push(format!("inode {ino} is linkable but not an unnamed file"));
            }
        }
        let mut reached = HashSet::new();
        self.reachable_from(ROOT_INO, &mut reached);
        for (ino, inode) in self.table.iter() {
            if inode.nlink > 0 && !reached.contains(&ino) {
                problems.push(format!("inode {ino} is not reachable from the root"));
            }
        }
        self.check_accounting(&counts, &categories, budget, &mut problems);
        problems
    }

    /// The counts, per-category counts and memory use recorded against those recounted
    /// (`counts`, `categories`, `budget`) by walking the table.
    fn check_accounting(
        &self,
        counts: &Counts,
        categories: &CategoryCounts,
        budget: u64,
        problems: &mut Vec<String>,
    ) {
        if *counts != self.counts {
            problems.push(format!(
                "counts {:?} but {:?} recorded",
                counts, self.counts
            ));
        }
        if categories.by_name() != self.categories.by_name() {
            problems.push(format!(
                "per-category counts {:?} but {:?} recorded",
                categories.by_name(),
                self.categories.by_name()
            ));
        }
        if budget != self.budget.used_bytes() {
            problems.push(format!(
                "memory used is {budget} but {} recorded",
                self.budget.used_bytes()
            ));
        }
        let table_bytes = self.budget.table_bytes();
        if table_bytes != self.table.heap_bytes() {
            problems.push(format!(
                "the inode table holds {} bytes but {table_bytes} are recorded",
                self.table.heap_bytes()
            ));
        }
    }

    /// Link counts against the entries, and inodes with no names nor references.
    fn check_links(
        &self,
        names_per_inode: &HashMap<Ino, u32>,
        subdirs: &HashMap<Ino, u32>,
        problems: &mut Vec<String>,
    ) {
        for (ino, inode) in self.table.iter() {
            let names = names_per_inode.get(&ino).copied().unwrap_or(0);
            let expected = if inode.is_dir() {
                if inode.nlink == 0 {
                    0
                } else {
                    2 + subdirs.get(&ino).copied().unwrap_or(0)
                }
            } else {
                names
            };
            if inode.nlink != expected {
                problems.push(format!(
                    "inode {ino}: nlink {} but {expected} expected",
                    inode.nlink
                ));
            }
            if inode.is_dir() && ino != ROOT_INO && inode.nlink > 0 && names != 1 {
                problems.push(format!("directory {ino} has {names} names"));
            }
            if inode.nlink == 0 && inode.lookups.load(Ordering::Relaxed) == 0 && ino != ROOT_INO {
                problems.push(format!("inode {ino} is unreferenced but not freed"));
            }
        }
    }
}
