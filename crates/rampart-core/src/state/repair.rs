//! Repair in the manner of e2fsck, and what a restart does to volatile files.

use std::collections::{HashMap, HashSet};

use super::{entry_cost, inode_charge, Counts, State};
use crate::attr::{Durability, FileKind, Ino, ROOT_INO};
use crate::error::FsResult;
use crate::namespace::inode::Inode;
use crate::op::Op;

impl State {
    /// Removes every directory entry naming one of `inos`; returns the budget those entries
    /// were charged.
    fn remove_names_of(&mut self, inos: &HashSet<Ino>) -> u64 {
        let dirs: Vec<Ino> = self
            .table
            .iter()
            .filter(|(_, i)| i.is_dir())
            .map(|(n, _)| n)
            .collect();
        let mut charged = 0;
        for dir in dirs {
            let mut names = Vec::new();
            if let Some(d) = self.table.get(dir).ok().and_then(Inode::dir) {
                d.list_from(0, |e| {
                    if inos.contains(&e.ino) {
                        names.push(e.name.to_vec());
                    }
                    true
                });
            }
            for name in names {
                self.dir_mut(dir).remove(&name);
                charged += entry_cost(&name);
            }
        }
        charged
    }

    /// Every name of each of `inos`: (directory, name). One pass over every directory.
    pub(crate) fn names_of(&self, inos: &HashSet<Ino>) -> Vec<(Ino, Vec<u8>)> {
        let mut names = Vec::new();
        if inos.is_empty() {
            return names;
        }
        for (dir, inode) in self.table.iter() {
            if let Some(d) = inode.dir() {
                d.list_from(0, |e| {
                    if inos.contains(&e.ino) {
                        names.push((dir, e.name.to_vec()));
                    }
                    true
                });
            }
        }
        names
    }

    pub(crate) fn drop_volatile(&mut self) -> u64 {
        let volatile: HashSet<Ino> = self
            .table
            .iter()
            .filter(|(_, i)| i.durability() == Durability::Volatile)
            .map(|(n, _)| n)
            .collect();
        self.drop_inodes(&volatile)
    }

    /// Removes the inodes `inos` (regular files) with every name they have; returns how many
    /// there were.
    pub(crate) fn drop_inodes(&mut self, inos: &HashSet<Ino>) -> u64 {
        if inos.is_empty() {
            return 0;
        }
        let freed = self.remove_names_of(inos);
        self.budget.apply(-(freed as i64));
        for &ino in inos {
            if let Ok(inode) = self.table.get_mut(ino) {
                inode.nlink = 0;
            }
            self.free_if_unreferenced(ino);
        }
        inos.len() as u64
    }

    /// The directory /lost+found, made if missing (as /lost+found.fsck if a non-directory has
    /// the name).
    fn lost_and_found(&mut self) -> Ino {
        match self.child(ROOT_INO, b"lost+found") {
            Ok((ino, _)) if self.table.get(ino).is_ok_and(Inode::is_dir) => ino,
            taken => {
                let name: &[u8] = if taken.is_ok() {
                    b"lost+found.fsck"
                } else {
                    b"lost+found"
                };
                let (ino, generation) = self.table.next_allocation().expect("room for one");
                let op = Op::Create {
                    parent: ROOT_INO,
                    name,
                    ino,
                    generation,
                    mode: libc::S_IFDIR | 0o700,
                    uid: 0,
                    gid: 0,
                    rdev: 0,
                    target: b"",
                    time_ns: self.clock.file_time_ns(),
                };
                self.apply(&op).expect("creating lost+found");
                ino
            }
        }
    }

    /// A new disk-tier file in /lost+found named `name`, root's and private (0600), of
    /// `len_bytes`: for a host file whose inode was lost with the journal (`fsck --repair`
    /// adopts it, as e2fsck links unattached inodes). Returns its inode and generation; the
    /// caller renames the host file to that inode's name before the state is written.
    /// `generation_floor`: the largest generation of the host files being adopted; the new
    /// inode's is above it, so its host file name is none of theirs.
    pub(crate) fn adopt_host_file(
        &mut self,
        name: &[u8],
        len_bytes: u64,
        generation_floor: u32,
    ) -> FsResult<(Ino, u32)> {
        let found = self.lost_and_found();
        self.table.raise_next_generation_above(generation_floor);
        let (ino, generation) = self.table.next_allocation()?;
        let time_ns = self.clock.file_time_ns();
        for op in [
            Op::Create {
                parent: found,
                name,
                ino,
                generation,
                mode: libc::S_IFREG | 0o600,
                uid: 0,
                gid: 0,
                rdev: 0,
                target: b"",
                time_ns,
            },
            Op::Migrate {
                ino,
                tier: crate::contents::Tier::Disk,
                time_ns,
            },
            Op::WriteExtent {
                ino,
                offset: 0,
                len: len_bytes,
                time_ns,
                kill_suidgid: false,
            },
        ] {
            self.apply(&op)?;
        }
        Ok((ino, generation))
    }

    /// Inodes reachable from `start` through directory entries (including `start`).
    pub(super) fn reachable_from(&self, start: Ino, seen: &mut HashSet<Ino>) {
        let mut stack = vec![start];
        while let Some(ino) = stack.pop() {
            if !seen.insert(ino) {
                continue;
            }
            if let Some(d) = self.table.get(ino).ok().and_then(Inode::dir) {
                d.list_from(0, |e| {
                    if !seen.contains(&e.ino) && self.table.get(e.ino).is_ok() {
                        stack.push(e.ino);
                    }
                    true
                });
            }
        }
    }

    /// Repairs what `check` finds, in the manner of e2fsck: entries naming missing inodes are
    /// removed, entry kinds corrected, extra names of a directory dropped, parents and link
    /// counts recomputed from the entries, and inodes no entry reaches are linked into
    /// `/lost+found` as `#<ino>` (nothing with data is thrown away). Returns what it did.
    pub fn repair(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        let inos: Vec<Ino> = self.table.iter().map(|(i, _)| i).collect();
        let mut dir_named = self.repair_entries(&inos, &mut done);
        self.relink_unreached(&inos, &mut dir_named, &mut done);
        self.repair_links(&dir_named, &mut done);
        self.recompute_accounting(&mut done);
        done
    }

    /// Entries: drops those naming missing inodes, fixes kinds, keeps one name per directory.
    /// Returns the directory that names each directory.
    fn repair_entries(&mut self, inos: &[Ino], done: &mut Vec<String>) -> HashMap<Ino, Ino> {
        let mut dir_named: HashMap<Ino, Ino> = HashMap::new();
        for &dir_ino in inos {
            let Some(dir) = self.table.get(dir_ino).ok().and_then(Inode::dir) else {
                continue;
            };
            let mut entries = Vec::new();
            dir.list_from(0, |e| {
                entries.push((e.name.to_vec(), e.ino, e.kind_code));
                true
            });
            for (name, child, code) in entries {
                let shown = String::from_utf8_lossy(&name).into_owned();
                let fix = match self.table.get(child) {
                    Err(_) => Some(None),
                    Ok(c)
                        if c.is_dir() && (child == ROOT_INO || dir_named.contains_key(&child)) =>
                    {
                        Some(None)
                    }
                    Ok(c) if c.kind().code() != code => Some(Some(c.kind().code())),
                    Ok(c) => {
                        if c.is_dir() {
                            dir_named.insert(child, dir_ino);
                        }
                        None
                    }
                };
                let d = self.dir_mut(dir_ino);
                match fix {
                    Some(None) => {
                        d.remove(&name);
                        done.push(format!("removed entry {shown:?} of directory {dir_ino}"));
                    }
                    Some(Some(kind)) => {
                        d.replace(&name, child, kind);
                        done.push(format!(
                            "corrected the kind of entry {shown:?} in {dir_ino}"
                        ));
                    }
                    None => {}
                }
            }
        }
        dir_named
    }

    /// Inodes the root does not reach go to /lost+found: directories first (each taken out of
    /// wherever it was named, which also breaks cycles cut off from the root), then what is
    /// still unreached.
    fn relink_unreached(
        &mut self,
        inos: &[Ino],
        dir_named: &mut HashMap<Ino, Ino>,
        done: &mut Vec<String>,
    ) {
        let mut reached = HashSet::new();
        self.reachable_from(ROOT_INO, &mut reached);
        let mut unreached: Vec<Ino> = inos
            .iter()
            .copied()
            .filter(|i| !reached.contains(i))
            .collect();
        unreached.sort_by_key(|&i| (!self.table.get(i).is_ok_and(Inode::is_dir), i));
        let mut found = None;
        for ino in unreached {
            if reached.contains(&ino) {
                continue;
            }
            let kind = self.table.get(ino).expect("inode").kind();
            if kind == FileKind::Directory {
                // (The accounting is recomputed at the end.)
                self.remove_names_of(&HashSet::from([ino]));
            }
            let found = *found.get_or_insert_with(|| self.lost_and_found());
            let name = format!("#{ino}");
            self.dir_mut(found)
                .insert(name.as_bytes(), ino, kind.code());
            if kind == FileKind::Directory {
                dir_named.insert(ino, found);
            }
            self.reachable_from(ino, &mut reached);
            done.push(format!(
                "linked unreachable inode {ino} as /lost+found/{name}"
            ));
        }
    }

    /// Parents and link counts, from the entries.
    fn repair_links(&mut self, dir_named: &HashMap<Ino, Ino>, done: &mut Vec<String>) {
        let mut names: HashMap<Ino, u32> = HashMap::new();
        let mut subdirs: HashMap<Ino, u32> = HashMap::new();
        for (dir_ino, inode) in self.table.iter() {
            if let Some(d) = inode.dir() {
                d.list_from(0, |e| {
                    *names.entry(e.ino).or_default() += 1;
                    if FileKind::from_code(e.kind_code) == Some(FileKind::Directory) {
                        *subdirs.entry(dir_ino).or_default() += 1;
                    }
                    true
                });
            }
        }
        for ino in self.table.iter().map(|(i, _)| i).collect::<Vec<_>>() {
            let inode = self.table.get_mut(ino).expect("inode");
            let expected = if inode.is_dir() {
                2 + subdirs.get(&ino).copied().unwrap_or(0)
            } else {
                names.get(&ino).copied().unwrap_or(0)
            };
            if inode.nlink != expected {
                done.push(format!(
                    "inode {ino}: link count {} set to {expected}",
                    inode.nlink
                ));
                inode.nlink = expected;
            }
            let parent = if ino == ROOT_INO {
                Some(ROOT_INO)
            } else {
                dir_named.get(&ino).copied()
            };
            if let (Some(d), Some(parent)) = (inode.dir_mut(), parent) {
                if d.parent != parent {
                    done.push(format!("directory {ino}: parent set to {parent}"));
                    d.parent = parent;
                }
            }
        }
    }

    /// The counts and the memory accounting, recomputed.
    fn recompute_accounting(&mut self, done: &mut Vec<String>) {
        let mut counts = Counts::default();
        let mut charged = 0u64;
        for (_, inode) in self.table.iter() {
            *counts.slot(inode.kind()) += 1;
            charged += inode_charge(inode);
            if let Some(f) = inode.file() {
                counts.count_contents(f, 1);
            }
            if let Some(d) = inode.dir() {
                d.list_from(0, |e| {
                    charged += entry_cost(e.name);
                    true
                });
            }
        }
        // The per-category counts, from the category attributes.
        let mut categories = crate::category::counts::CategoryCounts::default();
        let inos: Vec<_> = self.table.iter().map(|(ino, _)| ino).collect();
        for ino in inos {
            let inode = self.table.get_mut(ino).expect("inode");
            inode.category = categories.slot_of(inode.xattrs.as_deref());
            if let Some(f) = inode.file() {
                super::count_category(&mut categories, inode.category, f, 1);
            }
        }
        if categories.by_name() != self.categories.by_name() {
            done.push("recomputed the per-category counts".into());
        }
        self.categories = categories;
        if counts != self.counts || charged != self.budget.used_bytes() {
            done.push("recomputed counts and memory accounting".into());
            self.counts = counts;
            let used = self.budget.used_bytes() as i64;
            self.budget.apply(charged as i64 - used);
        }
    }
}
