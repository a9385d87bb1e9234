//! rampart-core: the engine of rampart, a memory-first hybrid file system.
//!
//! The namespace (inodes, directories, links, xattrs) and small-file contents live in memory as
//! their final home. Every mutation is an [`op::Op`] applied through one path
//! ([`engine::State::apply`]), so persistence can journal and replay the same values. No FUSE
//! types appear here: `rampart-fuse` maps kernel requests onto [`engine::Engine`], and programs
//! can embed the engine directly.

pub mod attr;
pub mod clock;
pub mod contents;
pub mod engine;
pub mod error;
pub mod fsck;
pub mod limits;
pub mod lock_order;
pub mod memory;
pub mod namespace;
pub mod op;
pub mod persist;
pub mod rampart;
pub mod state;
pub mod store;
pub mod time;
pub mod xattr;

pub use attr::{Attr, Durability, FileKind, Ino, SetAttr, SetTime, StatFs, Stats, ROOT_INO};
pub use engine::{Ctx, Engine, EngineConfig, Invalidation, Observer, WriteTimes};
pub use error::{Errno, FsResult};
pub use op::{Op, OpSink};
pub use rampart::Rampart;
