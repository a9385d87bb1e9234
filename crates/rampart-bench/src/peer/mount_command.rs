//! A mount command, kept so the same data can be mounted again.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cleanup::tool;
use crate::cmd;

/// A mount command kept to mount the same data again.
#[derive(Clone)]
pub(super) struct MountCommand {
    program: PathBuf,
    args: Vec<OsString>,
}

impl MountCommand {
    pub(super) fn new(
        program: PathBuf,
        args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Self {
        MountCommand {
            program,
            args: args.into_iter().map(Into::into).collect(),
        }
    }

    /// `mount -t tmpfs -o size=SIZE tmpfs TARGET`.
    pub(super) fn tmpfs(size_bytes: u64, target: &Path) -> Self {
        MountCommand::new(
            tool("mount"),
            [
                OsString::from("-t"),
                "tmpfs".into(),
                "-o".into(),
                format!("size={size_bytes}").into(),
                "tmpfs".into(),
                target.into(),
            ],
        )
    }

    pub(super) fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        command
    }

    pub(super) fn text(&self) -> String {
        cmd::describe(&self.command())
    }
}
