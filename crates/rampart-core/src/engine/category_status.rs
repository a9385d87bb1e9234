//! What `rampart status`, the metrics and `rampart stat` show per category and per file:
//! files and bytes per tier (the state's counters, `category::counts`), bytes not yet durable
//! and the longest waits (the store level's, `Level::at_risk`), and each category's deadline
//! from its spec. No scan of the inodes: a few entries per category (decision 0085).

use std::collections::BTreeMap;
use std::time::Duration;

use super::Engine;
use crate::attr::Ino;
use crate::category::{Categories, Spec, SpecLevel, Stay};
use crate::error::FsResult;
use crate::persist::level::LevelId;

/// One category's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CategoryStatus {
    /// Its name (`spec:...` for a raw spec; `(other)` for names past the counters' limit).
    pub name: String,
    /// Its spec as the configuration has it (None if the name is no longer known).
    pub spec: Option<Spec>,
    /// Regular files, and their bytes in memory and on the disk tier.
    pub files: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    /// Data bytes written and not yet in the store.
    pub bytes_at_risk: u64,
    /// The age of the oldest change not yet in the store (None: nothing waits).
    pub oldest_at_risk_age: Option<Duration>,
    /// How long its spec lets a change wait before it must be in the store (None: it never
    /// goes there; zero: before the write returns).
    pub deadline: Option<Duration>,
    /// The longest any change of it waited before it was in the store, since mount.
    pub lag_max: Duration,
    /// Regular files held out of the store by the archiver (decision 0090): at risk whole
    /// until their deadline less one commit interval.
    pub held_files: u64,
}

/// What of one file is not yet in the store, and by when it must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileAtRisk {
    /// Data bytes written and not yet in the store.
    pub bytes: u64,
    /// How long its oldest change not yet in the store has waited.
    pub age: Duration,
    /// How long that change may wait in all (None: it never goes to the store).
    pub deadline: Option<Duration>,
    /// Held out of the store by the archiver (decision 0090): how long until it is made
    /// present (zero: at the next commit).
    pub held_for: Option<Duration>,
}

/// How long a spec lets a change stay in memory before it must be in the store.
pub fn deadline_of(spec: &Spec, commit_interval: Duration) -> Option<Duration> {
    match spec.level(SpecLevel::Lm).stay {
        Stay::Never => None,
        Stay::BeforeWrite => Some(Duration::ZERO),
        // Between closes, the commit interval holds.
        Stay::UntilClose => Some(commit_interval),
        Stay::For(d) => Some(d),
    }
}

fn spec_of(categories: &Categories, name: &str) -> Option<Spec> {
    categories.resolve(name).ok().map(|r| r.spec)
}

impl Engine {
    /// Every category of the configuration and every other one a file has, with its figures,
    /// by name.
    pub fn category_status(&self) -> Vec<CategoryStatus> {
        let categories = self.categories();
        let commit_interval = categories.commit_interval();
        let default_name = categories.default_category().name.clone();
        let mut out: BTreeMap<String, CategoryStatus> = categories
            .list()
            .iter()
            .map(|c| {
                let status = CategoryStatus {
                    name: c.name.clone(),
                    spec: Some(c.spec),
                    deadline: deadline_of(&c.spec, commit_interval),
                    ..CategoryStatus::default()
                };
                (c.name.clone(), status)
            })
            .collect();
        fn entry<'a>(
            out: &'a mut BTreeMap<String, CategoryStatus>,
            categories: &Categories,
            name: &str,
        ) -> &'a mut CategoryStatus {
            out.entry(name.to_string()).or_insert_with(|| {
                let spec = spec_of(categories, name);
                CategoryStatus {
                    name: name.to_string(),
                    spec,
                    deadline: spec.and_then(|s| deadline_of(&s, categories.commit_interval())),
                    ..CategoryStatus::default()
                }
            })
        }
        let slot_names: std::collections::HashMap<u16, String>;
        {
            let state = self.read_state();
            let name_of = |slot: u16| {
                state
                    .categories
                    .name(slot)
                    .map_or_else(|| default_name.clone(), str::to_string)
            };
            slot_names = state
                .categories
                .iter()
                .map(|(slot, _)| (slot, name_of(slot)))
                .collect();
            for (slot, count) in state.categories.iter() {
                if count == Default::default() {
                    continue;
                }
                let e = entry(&mut out, &categories, &name_of(slot));
                e.files += count.files;
                e.memory_bytes += count.memory_bytes;
                e.disk_bytes += count.disk_bytes;
            }
        }
        let store = self.levels().get(LevelId::Store).cloned();
        for risk in store.map(|l| l.at_risk()).unwrap_or_default() {
            let name = slot_names
                .get(&risk.slot)
                .cloned()
                .unwrap_or_else(|| default_name.clone());
            let e = entry(&mut out, &categories, &name);
            e.bytes_at_risk += risk.bytes_at_risk;
            e.oldest_at_risk_age = e.oldest_at_risk_age.max(risk.oldest_age);
            e.lag_max = e.lag_max.max(risk.lag_max);
        }
        // Held files are at risk whole, since they were created (decision 0090).
        for (slot, held) in self.held_by_slot() {
            let name = slot_names
                .get(&slot)
                .cloned()
                .unwrap_or_else(|| default_name.clone());
            let e = entry(&mut out, &categories, &name);
            e.held_files += held.files;
            e.bytes_at_risk += held.bytes;
            e.oldest_at_risk_age = e.oldest_at_risk_age.max(Some(held.oldest_age));
        }
        out.into_values().collect()
    }

    /// What of `ino` is not yet in the store and by when it must be (None: nothing waits).
    pub fn at_risk_of(&self, ino: Ino) -> FsResult<Option<FileAtRisk>> {
        let info = self.category(ino)?;
        let deadline = deadline_of(&info.spec, self.categories().commit_interval());
        if let Some(held) = self.held_file(ino)? {
            // Not in the store at all: every byte, since it was created.
            return Ok(Some(FileAtRisk {
                bytes: self.getattr(ino)?.size_bytes,
                age: held.age,
                deadline,
                held_for: Some(held.present_in),
            }));
        }
        let store = self.levels().get(LevelId::Store).cloned();
        let Some(waiting) = store.and_then(|l| l.at_risk_of(ino)) else {
            return Ok(None);
        };
        Ok(Some(FileAtRisk {
            bytes: waiting.bytes,
            age: waiting.since.elapsed(),
            deadline,
            held_for: None,
        }))
    }
}
