//! The store facade: an open rampart store with its file system in memory and its persister
//! running. [`Rampart::open`] does what a mount does before serving (lock the store, recover,
//! start persisting); [`Rampart::close`] ends it with a final checkpoint. `rampart mount` adds
//! FUSE to it; a program can use the engine directly.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::{Engine, EngineConfig};
use crate::error::{CloseError, OpenError};
use crate::persist::device::{Device, DirDevice, MirrorDevice, MirrorHealth};
use crate::persist::persister::{PersistConfig, Persister};
use crate::persist::recovery::Report;
use crate::store::Store;

/// How to open a store.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub engine: EngineConfig,
    pub persist: PersistConfig,
}

/// An open store. Closing it (or dropping it) writes a final checkpoint and releases the lock.
#[derive(Debug)]
pub struct Rampart {
    /// The store's folder, resolved (absolute, without links).
    path: PathBuf,
    store_id: [u8; 16],
    /// The store folder's device (None when opened with [`Rampart::open_device`]).
    device: Option<Arc<DirDevice>>,
    engine: Arc<Engine>,
    persister: Arc<Persister>,
    recovery: Report,
    /// Holds the store's lock (None when opened with [`Rampart::open_device`]).
    store: Option<Store>,
    /// The store's mirror (DA2), if it has one.
    mirror: Option<Mirror>,
    /// False once closed.
    running: bool,
}

/// A mounted store's mirror (DA2): where it is, its lock, and whether it is in step.
#[derive(Debug)]
pub struct Mirror {
    pub path: PathBuf,
    pub health: Arc<MirrorHealth>,
    /// What the mount's checks of the two copies found and did.
    pub notes: Vec<String>,
    _lock: Option<std::fs::File>,
}

impl Rampart {
    /// Opens the store at `store_path`: checks its superblock and takes its lock (a second
    /// open fails with "already mounted"), recovers its file system (the newest checkpoint
    /// and the journal's valid prefix) and starts persisting every change (a committer
    /// thread; checkpoints on threads of their own).
    pub fn open(store_path: &Path, options: &Options) -> Result<Rampart, OpenError> {
        let record = crate::store::mirror::read_record(store_path).map_err(OpenError::Store)?;
        // A mirrored store: both copies locked and checked, the one behind brought in line.
        let (store, mirror) = match record {
            None => (Store::open(store_path).map_err(OpenError::Store)?, None),
            Some(record) => {
                let opened =
                    crate::store::mirror::open_mirrored(store_path, &record, &options.engine)
                        .map_err(OpenError::Store)?;
                for note in &opened.notes {
                    tracing::warn!("{note}");
                }
                let mirror = Mirror {
                    path: opened.peer,
                    health: opened.health,
                    notes: opened.notes,
                    _lock: opened.peer_lock,
                };
                (opened.store, Some(mirror))
            }
        };
        // Before recovery: a configuration that does not parse changes nothing.
        let categories = read_categories(
            store.path(),
            options.persist.commit_interval,
            mirror.is_some(),
        )?;
        let folder_error = |error| OpenError::Folder {
            path: store_path.to_path_buf(),
            error,
        };
        let path = std::fs::canonicalize(store.path()).map_err(folder_error)?;
        let store_id = store.superblock().store_id;
        let device = Arc::new(DirDevice::open(path.clone()).map_err(folder_error)?);
        let as_device: Arc<dyn Device> = match &mirror {
            None => device.clone(),
            Some(m) => {
                let peer: Option<Arc<dyn Device>> = if m.health.is_degraded() {
                    None
                } else {
                    let peer =
                        DirDevice::open(m.path.clone()).map_err(|error| OpenError::Folder {
                            path: m.path.clone(),
                            error,
                        })?;
                    Some(Arc::new(peer))
                };
                Arc::new(MirrorDevice::new(
                    device.clone(),
                    peer,
                    m.path.display().to_string(),
                    m.health.clone(),
                ))
            }
        };
        let mut engine_config = options.engine.clone();
        // The mount's threshold, else the store's (its superblock's: 0 is the default).
        engine_config.large_file_threshold_bytes =
            Some(engine_config.large_file_threshold_bytes.unwrap_or_else(|| {
                crate::disk::DiskConfig::threshold_from_superblock(
                    store.superblock().large_file_threshold_bytes,
                )
            }));
        let (engine, persister, recovery) =
            crate::persist::open(as_device, store_id, &engine_config, options.persist.clone())
                .map_err(|error| match &mirror {
                    // The copies were found equal (else the bad one was replaced): both fail.
                    Some(m)
                        if !m.health.is_degraded()
                            && matches!(error, crate::error::StartError::Recovery(_)) =>
                    {
                        OpenError::Store(crate::store::StoreError::Corrupt(format!(
                            "neither copy of the store can be used: {} and its mirror {} hold \
                             the same files, and recovery fails: {error}",
                            path.display(),
                            m.path.display()
                        )))
                    }
                    _ => OpenError::Start {
                        path: path.clone(),
                        error,
                    },
                })?;
        engine.set_categories(Arc::new(categories));
        if let Some(m) = &mirror {
            engine.set_mirror_health(m.health.clone());
        }
        Ok(Rampart {
            path,
            store_id,
            device: Some(device),
            engine,
            persister,
            recovery,
            store: Some(store),
            mirror,
            running: true,
        })
    }

    /// Opens the file system held by `device` with recovery and persistence exactly as
    /// [`Rampart::open`] does, without a store folder or its lock: for tests over a simulated
    /// device (`persist::device::SimDevice`). [`Rampart::path`] is empty.
    pub fn open_device(
        device: Arc<dyn Device>,
        store_id: [u8; 16],
        options: &Options,
    ) -> Result<Rampart, crate::error::StartError> {
        let (engine, persister, recovery) =
            crate::persist::open(device, store_id, &options.engine, options.persist.clone())?;
        Ok(Rampart {
            path: PathBuf::new(),
            store_id,
            device: None,
            engine,
            persister,
            recovery,
            store: None,
            mirror: None,
            running: true,
        })
    }

    /// The file system.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// What makes its changes durable (sync, checkpoints, figures for `rampart status`).
    pub fn persister(&self) -> &Arc<Persister> {
        &self.persister
    }

    /// What recovery found and did when the store was opened.
    pub fn recovery(&self) -> &Report {
        &self.recovery
    }

    /// The store's mirror (DA2), if it has one.
    pub fn mirror(&self) -> Option<&Mirror> {
        self.mirror.as_ref()
    }

    /// The store's folder, resolved.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn store_id(&self) -> [u8; 16] {
        self.store_id
    }

    /// Says, in the store's lock file (and the mirror's), that the store is mounted: once it is
    /// no longer in the mount table, a new mount waits for this daemon (decision 0135).
    pub fn mark_mounted(&self) {
        self.mark(crate::store::Mark::Mounted);
    }

    /// Says that the store has been unmounted and is about to be closed: a new mount of it (or
    /// of its mirror) then waits for this daemon's final checkpoint rather than refusing
    /// (decision 0135). Best effort, as [`Rampart::mark_mounted`]: a failure is logged, and a
    /// new mount then refuses as before.
    pub fn mark_unmounted(&self) {
        self.mark(crate::store::Mark::Unmounted);
    }

    fn mark(&self, mark: crate::store::Mark) {
        if let Some(store) = &self.store {
            if let Err(e) = store.mark(mark) {
                tracing::warn!("cannot mark the store's lock file {mark:?}: {e}");
            }
        }
        // The mirror is never a mount's source: only its end is marked.
        let peer_lock = self.mirror.as_ref().and_then(|m| m._lock.as_ref());
        let peer_lock = peer_lock.filter(|_| mark == crate::store::Mark::Unmounted);
        if let Some(file) = peer_lock {
            if let Err(e) = crate::store::mark_lock(file, mark) {
                tracing::warn!("cannot mark the mirror's lock file {mark:?}: {e}");
            }
        }
    }

    /// Closes the store: stops persisting after a final checkpoint, so that the next open has
    /// nothing to replay, and releases the lock. Err: what was lost, and why.
    pub fn close(mut self) -> Result<(), CloseError> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<(), CloseError> {
        if !std::mem::take(&mut self.running) {
            return Ok(());
        }
        let saved = self.persister.shutdown(&self.engine);
        self.engine.set_sink(None);
        drop(self.store.take());
        drop(self.mirror.take());
        match saved {
            Err(e) => Err(CloseError::FinalCheckpoint(e)),
            // The journal was written through the folder's descriptor: if the folder was
            // deleted meanwhile, so was everything written to it.
            Ok(()) if self.device.as_ref().is_some_and(|d| d.folder_removed()) => {
                Err(CloseError::FolderRemoved(self.path.clone()))
            }
            Ok(()) => Ok(()),
        }
    }
}

/// The name of the store's configuration of categories and filename rules.
pub const CONFIG_FILE: &str = "rampart.toml";
/// The largest configuration read.
const CONFIG_BYTES_MAX: u64 = 1 << 20;

/// The categories of the store at `store_path`: its `rampart.toml` over MBFS's defaults, or
/// the defaults when it has none; `da2`: the store has a mirror. Errors name the file and
/// the line.
pub fn read_categories(
    store_path: &Path,
    commit_interval: std::time::Duration,
    da2: bool,
) -> Result<crate::category::Categories, OpenError> {
    use std::io::Read;
    let path = store_path.join(CONFIG_FILE);
    let config_error = |message: String| {
        OpenError::Config(crate::category::ConfigError {
            source: path.display().to_string(),
            line: None,
            message,
        })
    };
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(crate::category::Categories::builtin(commit_interval).with_da2(da2))
        }
        Err(e) => return Err(config_error(e.to_string())),
    };
    let mut text = String::new();
    file.take(CONFIG_BYTES_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| config_error(format!("{e} (it must be UTF-8 text)")))?;
    if text.len() as u64 > CONFIG_BYTES_MAX {
        return Err(config_error(format!(
            "larger than {CONFIG_BYTES_MAX} bytes"
        )));
    }
    crate::category::Categories::from_toml_on(
        &text,
        &path.display().to_string(),
        commit_interval,
        da2,
    )
    .map_err(OpenError::Config)
}

impl Drop for Rampart {
    fn drop(&mut self) {
        if let Err(e) = self.shut_down() {
            tracing::error!("closing {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StartError;
    use crate::store::StoreError;
    use crate::{Ctx, ROOT_INO};

    fn options() -> Options {
        Options::default()
    }

    #[test]
    fn open_write_close_and_open_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        crate::store::mkfs(&path).unwrap();
        let fs = Rampart::open(&path, &options()).unwrap();
        assert_eq!(fs.recovery().checkpoint_seq, None);
        assert!(matches!(
            Rampart::open(&path, &options()),
            Err(OpenError::Store(StoreError::AlreadyMounted { .. }))
        ));
        let c = Ctx::library(0, 0);
        let f = fs
            .engine()
            .mknod(&c, ROOT_INO, b"f", libc::S_IFREG | 0o644, 0)
            .unwrap();
        fs.engine().write(&c, f.ino, 0, b"kept", false).unwrap();
        fs.close().unwrap();
        let fs = Rampart::open(&path, &options()).unwrap();
        // A clean close leaves a checkpoint and nothing to replay.
        assert!(fs.recovery().checkpoint_seq.is_some());
        assert_eq!(fs.recovery().ops_replayed, 0);
        assert_eq!(fs.engine().lookup_path(b"f").unwrap().size_bytes, 4);
        drop(fs); // closes too
        assert!(Rampart::open(&path, &options()).is_ok());
    }

    #[test]
    fn open_says_what_failed_and_where() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none");
        let e = Rampart::open(&missing, &options()).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let path = dir.path().join("store");
        crate::store::mkfs(&path).unwrap();
        drop(Rampart::open(&path, &options()).unwrap());
        std::fs::remove_file(path.join(crate::persist::recovery::JOURNAL_FILE)).unwrap();
        let e = Rampart::open(&path, &options()).unwrap_err();
        assert!(matches!(
            e,
            OpenError::Start {
                error: StartError::Recovery(_),
                ..
            }
        ));
        let text = e.to_string();
        assert!(
            text.starts_with("cannot recover ") && text.contains("journal is missing"),
            "{text}"
        );
    }

    #[test]
    fn close_reports_a_removed_folder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        crate::store::mkfs(&path).unwrap();
        let fs = Rampart::open(&path, &options()).unwrap();
        std::fs::remove_dir_all(&path).unwrap();
        match fs.close() {
            Err(CloseError::FolderRemoved(p)) => assert!(p.ends_with("store")),
            // The final checkpoint may fail first, in the folder that is gone.
            Err(CloseError::FinalCheckpoint(_)) => {}
            Ok(()) => panic!("closed cleanly although its folder was removed"),
        }
    }
}
