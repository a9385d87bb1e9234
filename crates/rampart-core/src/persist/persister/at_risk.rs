//! What is not yet durable, per category and per inode, and how long changes waited before
//! they were (issue 14 items 7 and 8): bytes at risk, the oldest change not yet durable, and
//! the longest wait since mount, measured at each commit rather than assumed from the commit
//! interval (decision 0085).
//!
//! The persister notes each change it gathers (`note`, under its pending lock); a commit takes
//! the notes with the ops, holds them while it writes (`in_flight`), and once the batch is
//! synced measures each category's wait from its first change to the sync (`settle`). Per
//! category that is one entry per slot (bounded by `CATEGORY_SLOTS_MAX`); per inode, at most
//! `AT_RISK_INODES_MAX` entries, beyond which the committer is asked to commit at once.

// hashbrown's default hasher (foldhash), not std's SipHash: these maps are updated for
// every op a writer makes (decision 0115).
use hashbrown::HashMap;
use std::time::{Duration, Instant};

use crate::attr::Ino;
use crate::limits::AT_RISK_INODES_MAX;
use crate::persist::level::Change;

/// Changes not yet durable: their data bytes and when the first of them was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub bytes: u64,
    pub since: Instant,
}

impl Waiting {
    fn add(&mut self, other: Waiting) {
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.since = self.since.min(other.since);
    }
}

/// One category's figures on a level (`Level::at_risk`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CategoryRisk {
    /// The category's slot (`category::counts`).
    pub slot: u16,
    /// Data bytes written and not yet durable.
    pub bytes_at_risk: u64,
    /// How long the oldest change not yet durable has waited (None: nothing waits).
    pub oldest_age: Option<Duration>,
    /// The longest any change waited before it was durable, since the level started.
    pub lag_max: Duration,
}

/// Changes gathered (or being committed), by category slot and by inode.
#[derive(Debug, Default)]
pub(super) struct AtRisk {
    by_slot: HashMap<u16, Waiting>,
    by_ino: HashMap<Ino, Waiting>,
}

impl AtRisk {
    /// Notes a change made now (`now` reads the clock). Returns true when the per-inode table
    /// is full: the caller commits at once (a change of an inode not in it is still counted
    /// for its category). The clock is read only for a category or inode not noted yet: an
    /// entry's first change is never later than this one, so its `since` stays (a clock read
    /// per op was 2 % of a library writer's time; decision 0115).
    pub(super) fn note(&mut self, change: &Change, now: impl Fn() -> Instant) -> bool {
        let bytes = change.data_bytes;
        let mut read = None;
        let mut first = |bytes| Waiting {
            bytes,
            since: *read.get_or_insert_with(&now),
        };
        match self.by_slot.get_mut(&change.category) {
            Some(e) => e.bytes = e.bytes.saturating_add(bytes),
            None => {
                self.by_slot.insert(change.category, first(bytes));
            }
        }
        let full = self.by_ino.len() >= AT_RISK_INODES_MAX;
        match self.by_ino.get_mut(&change.ino) {
            Some(e) => e.bytes = e.bytes.saturating_add(bytes),
            None if !full => {
                self.by_ino.insert(change.ino, first(bytes));
            }
            None => {}
        }
        full
    }

    /// Adds what `other` holds.
    pub(super) fn merge(&mut self, other: AtRisk) {
        for (slot, w) in other.by_slot {
            self.by_slot
                .entry(slot)
                .and_modify(|e| e.add(w))
                .or_insert(w);
        }
        for (ino, w) in other.by_ino {
            if self.by_ino.len() < AT_RISK_INODES_MAX || self.by_ino.contains_key(&ino) {
                self.by_ino.entry(ino).and_modify(|e| e.add(w)).or_insert(w);
            }
        }
    }

    /// Whether the per-inode table is full (`note` returned true).
    pub(super) fn is_full(&self) -> bool {
        self.by_ino.len() >= AT_RISK_INODES_MAX
    }

    pub(super) fn of_ino(&self, ino: Ino) -> Option<Waiting> {
        self.by_ino.get(&ino).copied()
    }

    pub(super) fn by_slot(&self) -> impl Iterator<Item = (u16, Waiting)> + '_ {
        self.by_slot.iter().map(|(&s, &w)| (s, w))
    }
}

/// Per category, the longest wait measured so far.
#[derive(Debug, Default)]
pub(super) struct Lags {
    by_slot: HashMap<u16, Duration>,
}

impl Lags {
    /// Everything in `committed` is durable as of `at`: measures how long each category's
    /// first change waited.
    pub(super) fn settle(&mut self, committed: &AtRisk, at: Instant) {
        for (slot, w) in committed.by_slot() {
            let lag = at.saturating_duration_since(w.since);
            let max = self.by_slot.entry(slot).or_default();
            *max = (*max).max(lag);
        }
    }

    pub(super) fn get(&self, slot: u16) -> Duration {
        self.by_slot.get(&slot).copied().unwrap_or_default()
    }

    pub(super) fn slots(&self) -> impl Iterator<Item = u16> + '_ {
        self.by_slot.keys().copied()
    }
}

/// The figures per category from what is gathered, what is being committed, and the lags.
pub(super) fn report(
    gathered: &AtRisk,
    in_flight: &AtRisk,
    lags: &Lags,
    now: Instant,
) -> Vec<CategoryRisk> {
    let mut out: HashMap<u16, CategoryRisk> = HashMap::new();
    for (slot, w) in gathered.by_slot().chain(in_flight.by_slot()) {
        let r = out.entry(slot).or_insert(CategoryRisk {
            slot,
            ..CategoryRisk::default()
        });
        r.bytes_at_risk = r.bytes_at_risk.saturating_add(w.bytes);
        let age = now.saturating_duration_since(w.since);
        r.oldest_age = Some(r.oldest_age.map_or(age, |a| a.max(age)));
    }
    for slot in lags.slots() {
        out.entry(slot).or_insert(CategoryRisk {
            slot,
            ..CategoryRisk::default()
        });
    }
    let mut out: Vec<CategoryRisk> = out
        .into_values()
        .map(|mut r| {
            r.lag_max = lags.get(r.slot);
            r
        })
        .collect();
    out.sort_by_key(|r| r.slot);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_add_up_per_category_and_inode_and_settle_into_lags() {
        let t0 = Instant::now();
        let mut a = AtRisk::default();
        let c = |ino, category, data_bytes| Change {
            ino,
            category,
            data_bytes,
        };
        assert!(!a.note(&c(5, 2, 100), || t0));
        assert!(!a.note(&c(5, 2, 50), || t0 + Duration::from_secs(1)));
        assert!(!a.note(&c(6, 3, 7), || t0 + Duration::from_secs(2)));
        assert_eq!(a.of_ino(5).map(|w| (w.bytes, w.since)), Some((150, t0)));
        let now = t0 + Duration::from_secs(3);
        let r = report(&a, &AtRisk::default(), &Lags::default(), now);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].slot, r[0].bytes_at_risk), (2, 150));
        assert_eq!(r[0].oldest_age, Some(Duration::from_secs(3)));
        assert_eq!(r[1].oldest_age, Some(Duration::from_secs(1)));
        let mut lags = Lags::default();
        lags.settle(&a, now);
        let r = report(&AtRisk::default(), &AtRisk::default(), &lags, now);
        assert_eq!(r[0].lag_max, Duration::from_secs(3));
        assert_eq!((r[0].bytes_at_risk, r[0].oldest_age), (0, None));
    }

    /// The clock is read for a new category or inode only, once per note.
    #[test]
    fn the_clock_is_read_only_for_a_first_change() {
        let t0 = Instant::now();
        let reads = std::cell::Cell::new(0);
        let now = || {
            reads.set(reads.get() + 1);
            t0
        };
        let mut a = AtRisk::default();
        let c = |ino, category| Change {
            ino,
            category,
            data_bytes: 10,
        };
        a.note(&c(5, 2), now);
        assert_eq!(
            reads.get(),
            1,
            "a new category and inode: one read for both"
        );
        a.note(&c(5, 2), now);
        assert_eq!(reads.get(), 1, "both noted already: no read");
        a.note(&c(6, 2), now);
        assert_eq!(reads.get(), 2, "a new inode");
        assert_eq!(a.of_ino(5).map(|w| (w.bytes, w.since)), Some((20, t0)));
        assert_eq!(a.by_slot[&2].bytes, 30);
    }

    #[test]
    fn the_inode_table_is_bounded() {
        let t0 = Instant::now();
        let mut a = AtRisk::default();
        let mut full = false;
        for ino in 0..=AT_RISK_INODES_MAX as u64 {
            full = a.note(
                &Change {
                    ino: ino + 1,
                    category: 0,
                    data_bytes: 1,
                },
                || t0,
            );
        }
        assert!(full);
        assert_eq!(a.by_ino.len(), AT_RISK_INODES_MAX);
        assert_eq!(a.by_slot[&0].bytes, AT_RISK_INODES_MAX as u64 + 1);
    }
}
