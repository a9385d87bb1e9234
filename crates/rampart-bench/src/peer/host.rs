//! The host peer: the file system under the store, used directly — a folder beside rampart's
//! store on the same file system, no FUSE, no loop device (decision 0061). It is what a user
//! of rampart's disk tier would otherwise use, and what rampart's durable writes and
//! large-file data finally land on; ext4-disk pays for two file systems (its own and the
//! host's under the loop image).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::measure::tree_allocated_bytes;
use super::{resolve, Peer, PeerKind, Usage};
use crate::error::{BenchError, Result};

impl Peer {
    pub(super) fn build_host(&mut self, disk_base: &Path) -> Result<()> {
        let folder = disk_base.join("files");
        super::create_dir(&folder)?;
        // Like the root of a fresh mount: the workloads' folders are made inside.
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| BenchError::io(format!("setting the mode of {}", folder.display()), e))?;
        // The folder is removed with disk_base (its undo was pushed by make_dir).
        self.mnt = resolve(&folder)?;
        self.store = Some(self.mnt.clone());
        let fs = crate::machine::file_system_of(&self.mnt);
        self.set(
            "file system",
            "the host's file system under the store, used directly: a folder beside \
             rampart's store (no FUSE, no loop device)",
        );
        self.set("folder", self.mnt.display().to_string());
        let mount = match &fs {
            Some(fs) => {
                format!("none by the bench: the folder is on the machine's own mount, {fs}")
            }
            None => "none by the bench: the folder is on the machine's own mount (not \
                     found in /proc/self/mountinfo)"
                .into(),
        };
        self.set("mount", mount);
        if let Some(fs) = fs {
            self.describe_mount(&fs.mount_point);
        }
        if self.kind == PeerKind::HostFsync {
            self.set(
                "fsync per file",
                "the workloads fsync every file they write before closing it, the usual way \
                 a program gets durability on a disk file system: PostMark and tar through \
                 an LD_PRELOAD shim compiled at the run (close(2) and fclose(3) of a regular \
                 file open for writing fsync it first, and count it), the MBFS loop, copy \
                 and edit session in the bench's own code. Directories are not fsync'd: on \
                 ext4 the fsync of a new file commits the journal transaction that holds its \
                 name. Writes between open and close are not durable until the close; the \
                 workloads that cannot fsync each file do not run on this peer",
            );
        }
        self.set(
            "why this peer",
            "the durable and large-file reference: rampart's store (journal, checkpoints, \
             the disk tier's host files) sits on this very file system, so it is the floor \
             rampart is measured against; ext4-disk adds a loop device and a second file \
             system (every fsync crosses both)",
        );
        self.set(
            "shared with",
            "the rest of the machine: other programs' writes to the same file system and \
             disk are not excluded (the same holds for rampart's store and ext4-disk's image)",
        );
        Ok(())
    }

    pub(super) fn host_usage(&self) -> Result<Usage> {
        let folder = self.store.as_deref().unwrap_or(&self.mnt);
        Ok(Usage {
            ram_bytes: None,
            store_bytes: Some(tree_allocated_bytes(folder)?),
            method: format!(
                "store: allocated bytes (st_blocks × 512) of every file in {}; RAM: not \
                 measurable (the kernel's shared page and inode caches)",
                folder.display()
            ),
        })
    }
}
