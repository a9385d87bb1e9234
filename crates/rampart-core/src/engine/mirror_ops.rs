//! The store's mirror (DA2) as files see it: a file whose spec needs DA2 (ROBUST, PARANOID)
//! is told when its contract cannot be kept (decision 0077).

use std::sync::Arc;

use super::category_ops::assigned;
use super::Engine;
use crate::attr::Ino;
use crate::category::Spec;
use crate::error::{Errno, FsResult};
use crate::persist::device::MirrorHealth;

impl Engine {
    /// Attaches the state of the store's mirror (once, at open of a mirrored store).
    pub fn set_mirror_health(&self, health: Arc<MirrorHealth>) {
        let _ = self.mirror.set(health);
    }

    /// The state of the store's mirror; None on a store without one.
    pub fn mirror_health(&self) -> Option<&Arc<MirrorHealth>> {
        self.mirror.get()
    }

    /// Whether `ino`'s spec (its category's, else the store default's) says `asks`.
    fn spec_says(&self, ino: Ino, asks: impl Fn(&Spec) -> bool) -> bool {
        let categories = self.categories();
        let state = self.read_state();
        match assigned(&state, ino) {
            Some(a) => categories.resolve(&a.name).is_ok_and(|r| asks(&r.spec)),
            None => asks(&categories.default_category().spec),
        }
    }

    /// Whether `ino`'s category asks for DA2 (ROBUST, PARANOID).
    pub fn needs_da2(&self, ino: Ino) -> bool {
        self.spec_says(ino, Spec::needs_da2)
    }

    /// EIO if `ino` needs DA2 and the mirror is degraded: its fsync cannot keep the contract,
    /// and says so rather than weakening it. The changes are made durable on the store first.
    pub fn check_da2(&self, ino: Ino) -> FsResult<()> {
        self.check_da2_for(ino, "fsync", Spec::needs_da2)
            .inspect_err(|_| drop(self.sync()))
    }

    /// EIO if `ino` needs DA2 before its writes return (PARANOID) and the mirror is degraded.
    pub(crate) fn check_da2_write(&self, ino: Ino) -> FsResult<()> {
        self.check_da2_for(ino, "write", Spec::needs_da2_before_write)
    }

    fn check_da2_for(&self, ino: Ino, call: &str, asks: fn(&Spec) -> bool) -> FsResult<()> {
        let Some(why) = self.mirror_health().and_then(|h| h.degraded()) else {
            return Ok(());
        };
        if !self.spec_says(ino, asks) {
            return Ok(());
        }
        tracing::error!(
            "inode {ino}: its category needs the mirror (DA2), which is degraded ({why}): \
             {call} fails with EIO (the data is durable on the store alone)"
        );
        Err(Errno::EIO)
    }
}
