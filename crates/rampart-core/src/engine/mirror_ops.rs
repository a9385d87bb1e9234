//! The store's mirror (DA2) as files see it: a file whose spec needs DA2 (ROBUST, PARANOID)
//! is told when its contract cannot be kept (decision 0077).

use std::sync::Arc;

use super::category_ops::assigned;
use super::Engine;
use crate::attr::Ino;
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

    /// Whether `ino`'s category (its own, else the store default) asks for DA2.
    pub fn needs_da2(&self, ino: Ino) -> bool {
        let categories = self.categories();
        let state = self.read_state();
        match assigned(&state, ino) {
            Some(a) => categories
                .resolve(&a.name)
                .is_ok_and(|r| r.spec.needs_da2()),
            None => categories.default_category().spec.needs_da2(),
        }
    }

    /// EIO if `ino` needs DA2 and the mirror is degraded: its fsync cannot keep the contract
    /// (the data is durable on the store alone), and says so rather than weakening it.
    pub fn check_da2(&self, ino: Ino) -> FsResult<()> {
        let Some(why) = self.mirror_health().and_then(|h| h.degraded()) else {
            return Ok(());
        };
        if !self.needs_da2(ino) {
            return Ok(());
        }
        tracing::error!(
            "inode {ino}: its category needs the mirror (DA2), which is degraded ({why}): \
             fsync fails with EIO (the data is durable on the store alone)"
        );
        Err(Errno::EIO)
    }
}
