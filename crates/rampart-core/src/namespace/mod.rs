//! The namespace: inodes, the table that holds them, and directories.

pub mod dir;
pub mod inode;
pub mod table;
