//! A mirrored store: two devices kept identical, DA1 (the copy mounted) and DA2 (its mirror,
//! meant for another disk). Every change goes to both; reads come from DA1.
//!
//! The persister, the checkpoints and the disk tier see one device: each append, write and
//! truncate is made on DA1 then on DA2 (page-cache copies, cheap), and each `sync`, `rename`
//! and `remove` (the disk waits) runs on both at once, DA2's on a second thread, returning
//! when both are done. So whatever the persister acknowledges as durable is durable on both
//! copies: every durable write of a mirrored store is PARANOID-strong (decision 0076).
//!
//! A failure of DA1 is returned to the caller as before. A failure of DA2 (an I/O error, or
//! its folder removed, which [`Device::folder_removed`] tells) does not fail the caller: the
//! mirror becomes *degraded* ([`MirrorHealth`]), the error is logged once, and DA2 is not
//! written again while mounted (it has missed a change, so it is no copy any more until the
//! next mount brings it back in line). Files whose spec needs DA2 (ROBUST, PARANOID) get EIO
//! from fsync while degraded (decision 0077).
//!
//! Host files (`data/`) go through the device like the rest; [`Device::file_for_passthrough`]
//! answers None, so the mount does not hand the kernel a descriptor that would write DA1
//! alone.

use std::io;
use std::sync::Arc;

use parking_lot::Mutex;

use super::Device;

/// Whether the mirror (DA2) still receives every change.
#[derive(Debug)]
pub struct MirrorHealth {
    /// The mirror's folder, as shown.
    path: String,
    /// None: in step. Some: why it is not (the first failure).
    degraded: Mutex<Option<String>>,
}

impl MirrorHealth {
    /// A mirror at `path`, in step.
    pub fn new(path: String) -> MirrorHealth {
        MirrorHealth {
            path,
            degraded: Mutex::new(None),
        }
    }

    /// A mirror that starts degraded (its folder was missing or damaged at mount).
    pub fn degraded_from_start(path: String, why: String) -> MirrorHealth {
        MirrorHealth {
            path,
            degraded: Mutex::new(Some(why)),
        }
    }

    /// Where the mirror is.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// None while every change reaches the mirror; else why not.
    pub fn degraded(&self) -> Option<String> {
        self.degraded.lock().clone()
    }

    pub fn is_degraded(&self) -> bool {
        self.degraded.lock().is_some()
    }

    /// Records the first failure (later ones follow from it).
    fn fail(&self, why: String) {
        let mut slot = self.degraded.lock();
        if slot.is_none() {
            tracing::error!(
                "the store's mirror (DA2) is degraded: {why}; serving from the store alone \
                 (ROBUST and PARANOID fsyncs fail with EIO until the mirror is back: remount, \
                 or `rampart mirror add` on the unmounted store)"
            );
            *slot = Some(why);
        }
    }
}

/// Two devices written as one (see the module's documentation).
#[derive(Debug)]
pub struct MirrorDevice {
    primary: Arc<dyn Device>,
    /// None: there was no mirror to open (then `health` is degraded from the start).
    mirror: Option<Arc<dyn Device>>,
    /// Shown in messages: where the mirror is.
    mirror_name: String,
    health: Arc<MirrorHealth>,
}

impl MirrorDevice {
    /// `primary` is DA1 (read and written), `mirror` DA2 (written only), named
    /// `mirror_name` in messages. `health` may start degraded: then `mirror` is never used;
    /// without a mirror it must.
    pub fn new(
        primary: Arc<dyn Device>,
        mirror: Option<Arc<dyn Device>>,
        mirror_name: String,
        health: Arc<MirrorHealth>,
    ) -> MirrorDevice {
        assert!(
            mirror.is_some() || health.is_degraded(),
            "a mirrored store without its mirror is degraded"
        );
        MirrorDevice {
            primary,
            mirror,
            mirror_name,
            health,
        }
    }

    pub fn health(&self) -> &Arc<MirrorHealth> {
        &self.health
    }

    /// Runs `op` on the mirror unless it is degraded; a failure degrades it.
    fn on_mirror(&self, what: &str, name: &str, op: impl FnOnce(&dyn Device) -> io::Result<()>) {
        let Some(mirror) = self.mirror.as_ref().filter(|_| !self.health.is_degraded()) else {
            return;
        };
        if let Err(e) = op(mirror.as_ref()) {
            self.health
                .fail(format!("{what} of {name:?} on {}: {e}", self.mirror_name));
        }
    }

    /// A change of the volatile content: DA1, then DA2.
    fn both(
        &self,
        what: &str,
        name: &str,
        op: impl Fn(&dyn Device) -> io::Result<()>,
    ) -> io::Result<()> {
        op(self.primary.as_ref())?;
        self.on_mirror(what, name, op);
        Ok(())
    }

    /// A wait for the disk: DA1 here and DA2 on a second thread, at once. Returns DA1's
    /// result once both are done; checks that DA2's folder is still there first.
    fn both_at_once(
        &self,
        what: &str,
        name: &str,
        op: impl Fn(&dyn Device) -> io::Result<()> + Sync,
    ) -> io::Result<()> {
        let Some(mirror) = self.mirror.as_ref().filter(|_| !self.health.is_degraded()) else {
            return op(self.primary.as_ref());
        };
        if mirror.folder_removed() {
            self.health
                .fail(format!("its folder {} was removed", self.mirror_name));
            return op(self.primary.as_ref());
        }
        let (primary, mirror) = std::thread::scope(|s| {
            let on_mirror = s.spawn(|| op(mirror.as_ref()));
            let primary = op(self.primary.as_ref());
            let mirror = on_mirror
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the mirror's writer thread panicked")));
            (primary, mirror)
        });
        if let Err(e) = mirror {
            self.health
                .fail(format!("{what} of {name:?} on {}: {e}", self.mirror_name));
        }
        primary
    }
}

impl Device for MirrorDevice {
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        self.primary.read(name)
    }
    fn len(&self, name: &str) -> io::Result<Option<u64>> {
        self.primary.len(name)
    }
    fn append(&self, name: &str, data: &[u8]) -> io::Result<()> {
        self.both("append", name, |d| d.append(name, data))
    }
    fn write(&self, name: &str, data: &[u8]) -> io::Result<()> {
        self.both("write", name, |d| d.write(name, data))
    }
    fn write_at(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        self.both("write", name, |d| d.write_at(name, offset, data))
    }
    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        self.both("truncate", name, |d| d.truncate(name, len))
    }
    fn sync(&self, name: &str) -> io::Result<()> {
        self.both_at_once("sync", name, |d| d.sync(name))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.both_at_once("rename", from, |d| d.rename(from, to))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.both_at_once("remove", name, |d| d.remove(name))
    }
    fn link(&self, from: &str, to: &str) -> io::Result<()> {
        self.both_at_once("link", from, |d| d.link(from, to))
    }
    fn start_writeback(&self, name: &str) -> io::Result<()> {
        self.both("writeback", name, |d| d.start_writeback(name))
    }
    fn drop_cached(&self, name: &str, offset: u64, len: u64) -> io::Result<()> {
        // A hint: a mirror that does not take it is no failing disk.
        if let Some(mirror) = self.mirror.as_ref().filter(|_| !self.health.is_degraded()) {
            if let Err(e) = mirror.drop_cached(name, offset, len) {
                tracing::debug!("dropping {name}'s cached bytes on the mirror: {e}");
            }
        }
        self.primary.drop_cached(name, offset, len)
    }
    fn release_replaced(&self) {
        self.primary.release_replaced();
        if let Some(mirror) = self.mirror.as_ref().filter(|_| !self.health.is_degraded()) {
            mirror.release_replaced();
        }
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.primary.read_at(name, offset, buf)
    }
    fn write_at_sparse(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        self.both("write", name, |d| d.write_at_sparse(name, offset, data))
    }
    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        self.both("set_len", name, |d| d.set_len(name, len))
    }
    fn allocate(&self, name: &str, offset: u64, len: u64) -> io::Result<()> {
        // DA1 decides whether the caller writes zeros instead; DA2 may sit on a file system
        // without fallocate, which is no reason to give it up.
        self.primary.allocate(name, offset, len)?;
        self.on_mirror("allocate", name, |d| {
            super::allocate_or_write_zeros(d, name, offset, len)
        });
        Ok(())
    }
    fn allocate_keep_size(&self, name: &str, offset: u64, len: u64) -> io::Result<()> {
        // Room past the end only: a DA2 without fallocate reads the same without it.
        self.primary.allocate_keep_size(name, offset, len)?;
        self.on_mirror("allocate", name, |d| {
            match d.allocate_keep_size(name, offset, len) {
                Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(()),
                other => other,
            }
        });
        Ok(())
    }
    fn punch_hole(&self, name: &str, offset: u64, len: u64) -> io::Result<()> {
        self.both("punch_hole", name, |d| d.punch_hole(name, offset, len))
    }
    /// None: a descriptor of DA1's host file would let the kernel write DA1 alone.
    fn file_for_passthrough(&self, _name: &str) -> io::Result<Option<std::fs::File>> {
        Ok(None)
    }
    fn create_data_folder(&self) -> io::Result<()> {
        self.both("create_data_folder", "data", |d| d.create_data_folder())
    }
    fn space(&self) -> io::Result<Option<super::HostSpace>> {
        self.primary.space()
    }
    fn list_data(&self) -> io::Result<Vec<String>> {
        self.primary.list_data()
    }
    fn folder_removed(&self) -> bool {
        self.primary.folder_removed()
    }
    fn mirror_health(&self) -> Option<Arc<MirrorHealth>> {
        Some(self.health.clone())
    }
}
