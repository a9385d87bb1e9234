//! The tmpfs peer: volatile, the ramfs bound of Conquest.

use super::describe::bytes_text;
use super::measure::statfs_used_bytes;
use super::mount_command::MountCommand;
use super::{Peer, PeerEnv, Usage};
use crate::cleanup::tool;
use crate::error::Result;

impl Peer {
    pub(super) fn build_tmpfs(&mut self, env: &PeerEnv) -> Result<()> {
        let size = env.profile.device_size_bytes();
        let mount = MountCommand::tmpfs(size, &self.mnt);
        let mnt = self.mnt.clone();
        self.mount(mount.clone(), &mnt)?;
        self.set(
            "file system",
            "tmpfs (volatile: the ramfs/tmpfs bound of Conquest §5 and MRAMFS §5)",
        );
        self.set("size", bytes_text(size));
        self.set("mount", mount.text());
        self.describe_mount(&mnt);
        self.set(
            "mount version",
            self.version(&tool("mount"), &["--version"]),
        );
        Ok(())
    }

    pub(super) fn tmpfs_usage(&self) -> Result<Usage> {
        Ok(Usage {
            ram_bytes: Some(statfs_used_bytes(&self.mnt)?),
            store_bytes: None,
            method: "RAM: statfs of the mount, (blocks − free blocks) × fragment size; \
                     store: none (volatile)"
                .into(),
        })
    }
}
