//! The archiver (MBFS §4.2, issue 14 item 7, decision 0090): a regular file created with a
//! deadline longer than the commit interval (SOMETIME, EVENTUAL, GENERATED, any `lm=10min`)
//! starts unknown to the store (`Inode::absent`, decision 0066) and is *held*: the archiver
//! makes it present (`policy::make_present`: its names, attributes and contents, one group of
//! records) one commit interval before its deadline, or sooner when something needs it in the
//! store (fsync, syncfs, a clean unmount, a rename over a known file, a category change). A
//! file deleted before then never costs the store a byte.
//!
//! One bounded structure, no timer per file: the held files by due time. The committer's one
//! wakeup asks for the earliest (`Engine::archive_next_due`) and, once it has come, has the
//! due files made present before it commits (`Engine::archive_due`). Past `HELD_FILES_MAX`
//! the file due first is made present early.
//!
//! Locking: the archiver's mutex is taken under the engine's state lock or alone; nothing is
//! locked under it.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::{Ctx, Engine, Mutation};
use crate::attr::{Durability, FileKind, Ino};
use crate::error::FsResult;
use crate::limits::{
    HELD_FILES_MAX, HELD_PRESENT_BYTES_PER_MUTATION_MAX, HELD_PRESENT_PER_MUTATION_MAX,
};
use crate::persist::level::Route;

/// One held file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    generation: u32,
    /// Its names (directory, name), kept as ops move them, so that making it present needs
    /// no scan of every directory; `policy::make_present` checks them and scans when they do
    /// not add up. At most `HELD_NAMES_MAX`; past that, none (the scan finds them).
    names: Vec<(Ino, Vec<u8>)>,
    /// It had more names than `HELD_NAMES_MAX` once: `names` is no longer kept (a link
    /// after that must not start a list that misses the others).
    names_untracked: bool,
    /// When it was created: its oldest change not in the store.
    since: Instant,
    /// When it is made present: its deadline less one commit interval.
    due: Instant,
}

/// Names tracked per held file (hard links to object files are rare).
const HELD_NAMES_MAX: usize = 4;

/// The held files, by inode and by due time.
#[derive(Debug, Default)]
pub(crate) struct Archiver {
    held: HashMap<Ino, Held>,
    by_due: BTreeSet<(Instant, Ino)>,
}

impl Archiver {
    /// Holds `ino` (just created) until `due`. Returns the file to make present at once when
    /// the archiver is full: the one due first.
    fn hold(&mut self, ino: Ino, held: Held) -> Option<(Ino, u32)> {
        self.release(ino);
        self.by_due.insert((held.due, ino));
        self.held.insert(ino, held);
        if self.held.len() <= HELD_FILES_MAX {
            return None;
        }
        // Released by the caller once made present (with the names tracked until then).
        let &(_, first) = self.by_due.first()?;
        self.held.get(&first).map(|h| (first, h.generation))
    }

    /// Forgets `ino` (made present, or gone); what was held.
    pub(crate) fn release(&mut self, ino: Ino) -> Option<Held> {
        let held = self.held.remove(&ino)?;
        self.by_due.remove(&(held.due, ino));
        Some(held)
    }

    /// Up to `max` files due at `now` (all of them: `now` None), first due first; the caller
    /// releases each once made present (`make_held_present`).
    fn due(&self, now: Option<Instant>, max: usize) -> Vec<(Ino, u32)> {
        self.by_due
            .iter()
            .take_while(|(due, _)| now.is_none_or(|now| *due <= now))
            .take(max)
            .filter_map(|&(_, ino)| self.held.get(&ino).map(|h| (ino, h.generation)))
            .collect()
    }

    fn get(&self, ino: Ino, generation: u32) -> Option<&Held> {
        self.held.get(&ino).filter(|h| h.generation == generation)
    }

    /// The names tracked for held file `ino` (None: not held, or too many to track).
    pub(crate) fn names(&self, ino: Ino) -> Option<Vec<(Ino, Vec<u8>)>> {
        self.held
            .get(&ino)
            .map(|h| h.names.clone())
            .filter(|n| !n.is_empty())
    }

    /// Held file `ino` has the name `to` now, instead of `from` (None: a new link; `to` None:
    /// a name removed).
    fn rename(&mut self, ino: Ino, from: Option<(Ino, &[u8])>, to: Option<(Ino, &[u8])>) {
        let Some(h) = self.held.get_mut(&ino) else {
            return;
        };
        if let Some((p, n)) = from {
            h.names.retain(|(hp, hn)| !(*hp == p && hn == n));
        }
        if let Some((p, n)) = to {
            if h.names_untracked {
                // The scan finds them.
            } else if h.names.len() < HELD_NAMES_MAX {
                h.names.push((p, n.to_vec()));
            } else {
                // Past the bound: make_present scans for them.
                h.names.clear();
                h.names_untracked = true;
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

/// What `rampart stat` shows of a held file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldFile {
    /// How long it has been held (its oldest change not in the store).
    pub age: Duration,
    /// How long until the archiver makes it present (zero: now, at the next commit).
    pub present_in: Duration,
}

/// The deadline a new regular file of `spec` is held for, on a store with `commit_interval`:
/// only `lm=` durations longer than the commit interval are (shorter ones, `until_close`,
/// `before_write` and `never` keep their own ways).
pub(crate) fn hold_for(
    spec: &crate::category::Spec,
    commit_interval: Duration,
) -> Option<Duration> {
    match spec.level(crate::category::SpecLevel::Lm).stay {
        crate::category::Stay::For(d) if d > commit_interval => Some(d),
        _ => None,
    }
}

impl Mutation<'_> {
    /// Holds `ino`, just created unknown to the store, for `deadline` (decision 0090). A
    /// full archiver returns the file due first (perhaps `ino`), for the caller to make
    /// present once the Create is dealt with (`make_held_present`): made present within
    /// it, `ino`'s Create would reach the journal twice.
    #[must_use]
    pub(super) fn hold(
        &mut self,
        ino: Ino,
        deadline: Duration,
        parent: Ino,
        name: &[u8],
    ) -> Option<(Ino, u32)> {
        let inode = self.state.inode(ino).ok()?;
        let now = Instant::now();
        let margin = self.engine.categories().commit_interval();
        let held = Held {
            generation: inode.generation,
            names: vec![(parent, name.to_vec())],
            names_untracked: false,
            since: now,
            due: now + deadline.saturating_sub(margin),
        };
        self.engine.archiver.lock().hold(ino, held)
    }

    /// Makes held file `ino` (of `generation`) present in the store, if it still is held: it
    /// exists under some name, is unknown to the store and is still meant to reach it.
    pub(super) fn make_held_present(&mut self, ino: Ino, generation: u32) {
        let still = self.state.inode(ino).is_ok_and(|i| {
            i.generation == generation
                && i.absent
                && i.nlink > 0
                && i.durability() != Durability::Volatile
        });
        if still {
            // Its creation, attributes and contents: committed whole.
            self.grouped(|m| m.make_present(ino, Route::store(Durability::default())));
        }
        self.engine.archiver.lock().release(ino);
    }

    /// The held file named `name` in `parent`, if it is one (and its generation).
    pub(super) fn held_at(&self, parent: Ino, name: &[u8]) -> Option<(Ino, u32)> {
        if self.engine.archiver.lock().is_empty() {
            return None;
        }
        let (ino, _) = self.state.child(parent, name).ok()?;
        self.held(ino)
    }

    /// `ino` and its generation, if it is held.
    pub(super) fn held(&self, ino: Ino) -> Option<(Ino, u32)> {
        let generation = self.state.inode(ino).ok()?.generation;
        let archiver = self.engine.archiver.lock();
        archiver.get(ino, generation).map(|_| (ino, generation))
    }

    /// Keeps the archiver's names of held files in step with `op`, just applied: `moved` the
    /// held file a rename moved, `removed` the held file it or an unlink removed a name of.
    pub(super) fn track_held_names(
        &mut self,
        op: &crate::op::Op<'_>,
        moved: Option<Ino>,
        removed: Option<Ino>,
    ) {
        use crate::op::{Op, RENAME_EXCHANGE};
        let mut archiver = self.engine.archiver.lock();
        match *op {
            Op::Link {
                ino, parent, name, ..
            } => archiver.rename(ino, None, Some((parent, name))),
            Op::Unlink { parent, name, .. } => {
                if let Some(ino) = removed {
                    archiver.rename(ino, Some((parent, name)), None);
                }
            }
            Op::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                ..
            } => {
                if moved.is_some() && moved == removed {
                    return; // two names of one file: nothing moves
                }
                let exchange = flags & RENAME_EXCHANGE != 0;
                if let Some(ino) = removed {
                    let back = exchange.then_some((parent, name));
                    archiver.rename(ino, Some((new_parent, new_name)), back);
                }
                if let Some(ino) = moved {
                    archiver.rename(ino, Some((parent, name)), Some((new_parent, new_name)));
                }
            }
            _ => {}
        }
    }

    /// Forgets `ino` if it is held and has no name left (deleted before its deadline: the
    /// store never sees it).
    pub(super) fn release_if_gone(&mut self, ino: Ino) {
        let gone = self.state.inode(ino).map_or(true, |i| i.nlink == 0);
        if gone {
            self.engine.archiver.lock().release(ino);
        }
    }
}

impl Engine {
    /// When the archiver next has a file to make present (None: it holds none).
    pub fn archive_next_due(&self) -> Option<Instant> {
        self.archiver.lock().by_due.first().map(|&(due, _)| due)
    }

    /// Makes present held files due at `now`, as many as one mutation takes (the committer
    /// calls it before each commit, and commits again at once while more are due, so that
    /// what it gathers stays bounded; a test may pass a later time). Returns how many were
    /// made present.
    pub fn archive_due(&self, now: Instant) -> usize {
        self.archive(Some(now), true)
    }

    /// Makes every held file present: before a clean unmount's final checkpoint, and for
    /// syncfs (the library's `Fs::sync`). Returns how many were made present.
    pub fn archive_all(&self) -> usize {
        self.archive(None, false)
    }

    /// How many files the archiver holds.
    pub fn held_files(&self) -> usize {
        self.archiver.lock().len()
    }

    fn archive(&self, now: Option<Instant>, once: bool) -> usize {
        let kernel = Ctx {
            kernel: true,
            ..Ctx::library(0, 0)
        };
        let mut made = 0;
        loop {
            // Nothing due (every commit asks): not even the engine's lock is taken.
            if self.archiver.lock().due(now, 1).is_empty() {
                return made;
            }
            // Taken under the state lock, so that a file is never both released here and
            // being made present by an op.
            let done = self.mutate(
                &kernel,
                |m, _| {
                    let due = m
                        .engine
                        .archiver
                        .lock()
                        .due(now, HELD_PRESENT_PER_MUTATION_MAX);
                    let mut bytes = 0u64;
                    let mut n = 0;
                    for &(ino, generation) in &due {
                        if bytes >= HELD_PRESENT_BYTES_PER_MUTATION_MAX {
                            break;
                        }
                        bytes += m.state().inode(ino).map_or(0, |i| i.size_bytes);
                        m.make_held_present(ino, generation);
                        n += 1;
                    }
                    Ok(n)
                },
                |_| Vec::new(),
            );
            match done {
                Ok(0) | Err(_) => return made,
                Ok(n) if once => return made + n,
                Ok(n) => made += n,
            }
        }
    }

    /// Before an fsync of `ino`: a held file is made present, and for a directory its held
    /// entries (decision 0090), so that the sync that follows makes them durable. A directory
    /// may name many: they are made present as many as one mutation takes at a time (as
    /// `archive` does), so that neither the engine's lock nor the pending batch grows with
    /// their number and size.
    pub fn archive_for_sync(&self, ino: Ino) -> FsResult<()> {
        if self.archiver.lock().is_empty() {
            return Ok(());
        }
        let targets: Vec<(Ino, u32)> = {
            let state = self.read_state();
            let inode = state.inode(ino)?;
            let held = |ino: Ino| {
                let generation = state.inode(ino).ok()?.generation;
                let archiver = self.archiver.lock();
                archiver.get(ino, generation).map(|_| (ino, generation))
            };
            match inode.kind() {
                FileKind::Directory => {
                    let mut children = Vec::new();
                    if let Some(dir) = inode.dir() {
                        dir.list_from(0, |e| {
                            if e.kind_code == FileKind::RegularFile.code() {
                                children.push(e.ino);
                            }
                            true
                        });
                    }
                    children.into_iter().filter_map(held).collect()
                }
                _ => held(ino).into_iter().collect(),
            }
        };
        let kernel = Ctx {
            kernel: true,
            ..Ctx::library(0, 0)
        };
        let mut rest = &targets[..];
        while !rest.is_empty() {
            let n = self.mutate(
                &kernel,
                |m, _| {
                    let mut bytes = 0u64;
                    let mut n = 0;
                    for &(target, generation) in rest.iter().take(HELD_PRESENT_PER_MUTATION_MAX) {
                        if bytes >= HELD_PRESENT_BYTES_PER_MUTATION_MAX {
                            break;
                        }
                        bytes += m.state().inode(target).map_or(0, |i| i.size_bytes);
                        // One made present meanwhile (or gone) is left as it is.
                        m.make_held_present(target, generation);
                        n += 1;
                    }
                    Ok(n)
                },
                |_| Vec::new(),
            )?;
            rest = &rest[n..];
        }
        Ok(())
    }

    /// Whether `ino` is held, for how long yet, and since when.
    pub fn held_file(&self, ino: Ino) -> FsResult<Option<HeldFile>> {
        let state = self.read_state();
        let generation = state.inode(ino)?.generation;
        let held = self.archiver.lock().get(ino, generation).cloned();
        let now = Instant::now();
        Ok(held.map(|h| HeldFile {
            age: now.saturating_duration_since(h.since),
            present_in: h.due.saturating_duration_since(now),
        }))
    }

    /// Per category slot: how many files are held, their bytes and the oldest one's age (for
    /// `rampart status`: held files are at risk). One pass over at most `HELD_FILES_MAX` files.
    pub(crate) fn held_by_slot(&self) -> HashMap<u16, HeldInSlot> {
        let state = self.read_state();
        let archiver = self.archiver.lock();
        let now = Instant::now();
        let mut out: HashMap<u16, HeldInSlot> = HashMap::new();
        for (&ino, h) in &archiver.held {
            let Ok(inode) = state.inode(ino) else {
                continue;
            };
            if inode.generation != h.generation {
                continue;
            }
            let e = out.entry(inode.category).or_default();
            e.files += 1;
            e.bytes = e.bytes.saturating_add(inode.size_bytes);
            e.oldest_age = e.oldest_age.max(now.saturating_duration_since(h.since));
        }
        out
    }
}

/// The files the archiver holds of one category slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeldInSlot {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
    /// The oldest one's age.
    pub(crate) oldest_age: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_archiver_gives_up_the_file_due_first_and_takes_files_in_due_order() {
        let mut a = Archiver::default();
        let now = Instant::now();
        let held = |secs: u64| Held {
            generation: 1,
            names: Vec::new(),
            names_untracked: false,
            since: now,
            due: now + Duration::from_secs(secs),
        };
        // Due in reverse order of creation: the last one created is due first.
        for i in 0..HELD_FILES_MAX as u64 {
            assert_eq!(a.hold(100 + i, held(10 + HELD_FILES_MAX as u64 - i)), None);
        }
        let first = 100 + HELD_FILES_MAX as u64 - 1;
        assert_eq!(a.by_due.first().map(|&(_, ino)| ino), Some(first));
        assert_eq!(a.hold(7, held(1_000_000)), Some((first, 1)));
        assert!(
            a.release(first).is_some(),
            "the caller releases it once made present"
        );
        assert_eq!(a.len(), HELD_FILES_MAX);
        // Due in order, only those due; a released one is not.
        assert!(a.release(first - 1).is_some());
        let due = a.due(Some(now + Duration::from_secs(13)), usize::MAX);
        assert_eq!(due, vec![(first - 2, 1)]);
        assert_eq!(a.due(None, 2), vec![(first - 2, 1), (first - 3, 1)]);
        assert!(a.get(100, 2).is_none(), "another generation is not held");
    }
}
