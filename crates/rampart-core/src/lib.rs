//! rampart-core: the engine of rampart, a memory-first hybrid file system.
//!
//! The namespace (inodes, directories, links, xattrs) and small-file contents live in memory as
//! their final home. Every mutation is an [`Op`] applied through one path (`State::apply`),
//! handed to the persistence levels, and journaled and replayed as the same value. No FUSE
//! types appear here: `rampart-fuse` maps kernel requests onto [`Engine`], and programs can
//! embed it: [`fs::Fs::open`] opens a store and gives the path-level API (`std::fs`-like);
//! [`Rampart::open`] opens a store (recovery, persistence) and gives its engine.
//!
//! The public surface is what this page re-exports plus the modules a store's tools need:
//! [`store`] (mkfs, the folder), [`persist`] (formats, recovery, the persister and the device
//! seam, for tests and tools), [`fsck`], [`op`], [`error`], [`limits`], [`clock`], [`time`],
//! [`latency`] (histograms for metrics).
//! The rest (state, namespace, memory, contents, xattrs, the lock order) is private: the map is
//! docs/ARCHITECTURE.md.

mod acl;
mod attr;
pub mod category;
pub mod clock;
pub mod contents;
pub mod disk;
mod engine;
pub mod error;
pub mod fs;
pub mod fsck;
pub mod latency;
pub mod limits;
mod lock_order;
mod memory;
mod namespace;
pub mod op;
pub mod persist;
pub mod rampart;
mod state;
pub mod store;
pub mod time;
mod xattr;

pub use attr::{Attr, Durability, FileKind, Ino, SetAttr, SetTime, StatFs, Stats, ROOT_INO};
pub use contents::Tier;
pub use engine::{
    CategoryInfo, CategoryStatus, Ctx, Engine, EngineConfig, FileAtRisk, HeldFile, HostSyncName,
    Invalidation, KernelRequests, Observer, ReadBuf, State, WriteTimes,
};
pub use error::{Broken, Errno, FsResult};
pub use memory::budget::{default_cap_bytes, physical_memory_bytes};
pub use op::{Op, OpSink};
pub use rampart::Rampart;
pub use xattr::XATTR_ACL_KILL_SGID;
