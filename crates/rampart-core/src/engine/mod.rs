//! The engine: the public API of the file system, over the state (`crate::state`) behind one
//! reader-writer lock, handing every applied op to the persistence levels.
//!
//! Reads (lookup, getattr, read, readdir) share the lock; mutations take it exclusively. One
//! lock keeps multi-directory operations (rename) trivially atomic; the critical sections are
//! short memory operations, so on the machines we target the lock is not the bottleneck (see
//! docs/decisions/0002-one-engine-lock.md).
//!
//! Every mutation takes one sequence ([`Engine::mutate`]): the time, the lock, build and
//! apply the op (`State::apply`), ask the policy what each level must honour and hand the op
//! to the levels, drop the lock, tell the observer what the kernel may have cached, then
//! honour the durability (throttle; sync before returning where asked).

mod archiver;
pub use archiver::HeldFile;
mod category_ops;
mod category_status;
pub use category_ops::{CategoryInfo, KernelRequests};
pub use category_status::{CategoryStatus, FileAtRisk};
mod disk_ops;
pub use disk_ops::HostSyncName;
mod file_ops;
pub use file_ops::ReadBuf;
mod info;
mod memory_pressure;
mod mirror_ops;
mod namespace_ops;
mod xattr_ops;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{RwLock, RwLockWriteGuard};

use crate::attr::Durability;
use crate::clock::{Clock, SystemClock};
use crate::error::{Errno, FsResult};
use crate::lock_order::{self, Rank};
use crate::op::{Op, OpSink};
use crate::persist::level::{Levels, Route};
use crate::persist::policy;
use crate::time::TimeNs;

pub use crate::state::State;

/// Who asks: the owner of new inodes, and whether the caller is the kernel (whose lookups are
/// counted, and which needs no cache invalidation for the changes it makes itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctx {
    pub uid: u32,
    pub gid: u32,
    pub kernel: bool,
    /// The caller's umask, applied by a create in a directory with no default ACL (with a
    /// default ACL it is ignored, as on any file system with POSIX ACLs). The kernel sends it
    /// with each create (FUSE_DONT_MASK); a library caller's is 0 (decision 0143).
    pub umask: u32,
}

impl Ctx {
    /// A library caller acting as `uid:gid`.
    pub fn library(uid: u32, gid: u32) -> Ctx {
        Ctx {
            uid,
            gid,
            kernel: false,
            umask: 0,
        }
    }
}

/// Who sets a regular file's mtime and ctime when it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteTimes {
    /// The engine, with the time of the write (a library, or FUSE without writeback cache).
    Stamp,
    /// The kernel (FUSE's writeback cache): a write leaves them as they are, and the kernel
    /// sends its own with SETATTR. Not when the write drops setuid/setgid: that changes ctime.
    KeptByKernel,
}

/// What the kernel may have cached that a change from outside it made stale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalidation {
    /// An entry of a directory (its name now points elsewhere, or nowhere).
    Entry {
        parent: crate::attr::Ino,
        name: Vec<u8>,
    },
    /// The attributes and data of an inode.
    Inode { ino: crate::attr::Ino },
    /// The attributes of an inode only: its cached pages stay. The one kind that is safe to
    /// send while the kernel waits for the reply to a request about that inode (a WRITE whose
    /// pages are under writeback): invalidating pages would wait for that very reply.
    Attributes { ino: crate::attr::Ino },
}

/// Told of changes the kernel did not make itself: every change by a library caller, and
/// what the engine changes on its own while serving the kernel (the setuid bit a write clears),
/// so that a mount can invalidate the kernel's caches.
pub trait Observer: Send + Sync {
    fn invalidate(&self, what: &[Invalidation]);
}

/// Settings of an engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub memory_cap_bytes: u64,
    pub root_uid: u32,
    pub root_gid: u32,
    pub root_mode: u32,
    /// Where file times come from (tests drive a `clock::ManualClock`).
    pub clock: Arc<dyn Clock>,
    /// Files larger than this move to the disk tier, when the engine has a store: `None` for
    /// the store's own (its superblock's; the default 1 MiB without one), `u64::MAX` for
    /// never (decision 0060).
    pub large_file_threshold_bytes: Option<u64>,
    /// The smallest file memory pressure moves to the disk tier (decision 0059).
    pub evict_min_size_bytes: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            memory_cap_bytes: crate::memory::budget::default_cap_bytes(),
            root_uid: 0,
            root_gid: 0,
            root_mode: 0o755,
            clock: Arc::new(SystemClock),
            large_file_threshold_bytes: None,
            evict_min_size_bytes: crate::limits::EVICT_MIN_SIZE_BYTES_DEFAULT,
        }
    }
}

/// The file-system engine. Shared between threads (`Arc<Engine>`).
pub struct Engine {
    state: RwLock<State>,
    /// Replaced whole (rarely); cloned as an `Arc` on every path that uses it outside the lock.
    levels: RwLock<Arc<Levels>>,
    observer: RwLock<Option<Arc<dyn Observer>>>,
    clock: Arc<dyn Clock>,
    /// Moves (under the state lock) with every rename and rmdir: what a path of directories
    /// names can only change then, so callers that remember resolved directories (the path
    /// API's cache) forget them when it moves.
    namespace_epoch: AtomicU64,
    /// The categories and filename rules in force (`category`); replaced whole at mount.
    categories: RwLock<Arc<crate::category::Categories>>,
    /// Directory paths for filename rules (`category_ops::DirPaths`); taken under the state
    /// lock, nothing is locked under it.
    dir_paths: parking_lot::Mutex<category_ops::DirPaths>,
    /// The disk tier, once the store's device is attached (`Engine::set_disk_tier`); without
    /// it every file stays in memory.
    disk: std::sync::OnceLock<Arc<crate::disk::DiskTier>>,
    /// Set by the FUSE adapter (`set_passthrough_available`), shown by `rampart status`.
    passthrough_available: std::sync::atomic::AtomicBool,
    /// What the kernel of the mount sends (`set_kernel_requests`); None without a mount.
    kernel: parking_lot::RwLock<Option<category_ops::KernelMount>>,
    /// The store's mirror (DA2), on a mirrored store (`set_mirror_health`).
    mirror: std::sync::OnceLock<Arc<crate::persist::device::MirrorHealth>>,
    /// The files held out of the store until their deadline (`archiver`, decision 0090).
    archiver: parking_lot::Mutex<archiver::Archiver>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

/// A mutation in progress: the exclusive lock, and what the ops applied so far must honour.
pub(crate) struct Mutation<'e> {
    engine: &'e Engine,
    state: RwLockWriteGuard<'e, State>,
    route: Route,
    /// Changes the ops made that the kernel cannot know from its request and the reply.
    behind_kernel: Vec<Invalidation>,
    /// The inode the next Create makes is unknown to the store (`Inode::absent`).
    absent_create: Option<crate::attr::Ino>,
    /// ... and held by the archiver for this deadline (decision 0090).
    hold_create: Option<(crate::attr::Ino, std::time::Duration)>,
    _rank: lock_order::Held,
}

/// A held file (inode, generation), where one is named.
type HeldAt = Option<(crate::attr::Ino, u32)>;

impl Mutation<'_> {
    /// The state as the ops applied so far left it.
    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    /// Applies `op` and hands it to the levels with what the policy says it must honour.
    pub(crate) fn apply(&mut self, op: &Op<'_>) -> FsResult<()> {
        let (moved, removed) = self.held_names_before(op);
        let privileges = |state: &State, ino| state.inode(ino).ok().map(privileges_of);
        let watched = attributes_not_in_reply(op);
        let before = watched.and_then(|ino| privileges(&self.state, ino));
        let seen = policy::before(&self.state, op);
        self.state.apply(op)?;
        if matches!(op, Op::Rename { .. } | Op::Rmdir { .. }) {
            self.engine.namespace_epoch.fetch_add(1, Ordering::Release);
        }
        if let Some(ino) = watched {
            if before != privileges(&self.state, ino) {
                self.behind_kernel.push(Invalidation::Attributes { ino });
            }
        }
        if moved.is_some() || removed.is_some() || matches!(op, Op::Link { .. }) {
            self.track_held_names(op, moved.map(|(i, _)| i), removed.map(|(i, _)| i));
        }
        if let Some((ino, _)) = removed {
            self.release_if_gone(ino);
        }
        let early = self.hold_if_created(op)?;
        let (presence, needed) = policy::presence(&self.state, op, &seen);
        let told = match presence {
            policy::Presence::Skip => {
                // Nothing reaches the levels; a host file the op left unused still goes.
                let levels = self.engine.levels.read();
                self.after_applied(&levels, op, &Route::VOLATILE);
                drop(levels);
                if let Some((first, generation)) = early {
                    self.make_held_present(first, generation);
                }
                return Ok(());
            }
            policy::Presence::Tell => *op,
            policy::Presence::Instead(instead) => instead,
        };
        let mut route = policy::route(&self.state, &told);
        if let Some(moved) = seen.moved {
            // Removing or moving a SAFE file is as strong as creating one (MBFS §5.4).
            route = route.stronger(Route::store(moved));
        }
        if let Some(dir) = needed {
            self.make_present(dir, route);
        }
        let levels = self.engine.levels.read();
        // Before the op is handed over: a commit may take it at once, and must find its host
        // file among those to sync first.
        self.after_applied(&levels, &told, &route);
        levels.applied_in(&self.state, &told, &route);
        drop(levels);
        self.route = self.route.stronger(route);
        if let Some((first, generation)) = early {
            self.make_held_present(first, generation);
        }
        Ok(())
    }

    /// The held files whose names `op` moves or removes (source, target), before it is
    /// applied; a held file renamed over one the store knows is made present first.
    fn held_names_before(&mut self, op: &Op<'_>) -> (HeldAt, HeldAt) {
        // The held files whose names this op moves or removes (source, target): the archiver
        // tracks their names, and forgets one deleted before its deadline.
        match *op {
            Op::Unlink { parent, name, .. } => (None, self.held_at(parent, name)),
            Op::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                ..
            } => {
                // A held file renamed over one the store knows (the atomic-replace pattern):
                // made present first, so that a crash never loses both (decision 0090). An
                // exchange is symmetric: the held file may be either side.
                let known = |m: &Self, parent, name| {
                    m.state
                        .child(parent, name)
                        .is_ok_and(|(t, _)| m.state.inode(t).is_ok_and(|i| !i.absent))
                };
                if let Some((ino, generation)) = self.held_at(parent, name) {
                    if known(self, new_parent, new_name) {
                        self.make_held_present(ino, generation);
                    }
                }
                if flags & crate::op::RENAME_EXCHANGE != 0 {
                    if let Some((ino, generation)) = self.held_at(new_parent, new_name) {
                        if known(self, parent, name) {
                            self.make_held_present(ino, generation);
                        }
                    }
                }
                (
                    self.held_at(parent, name),
                    self.held_at(new_parent, new_name),
                )
            }
            _ => (None, None),
        }
    }

    /// After a Create of an inode unknown to the store: marks it absent and gives it to
    /// the archiver if held; the file a full archiver gives up, to make present once the
    /// Create is dealt with.
    fn hold_if_created(&mut self, op: &Op<'_>) -> FsResult<HeldAt> {
        // A full archiver gives up the file due first (it may be this one): made present
        // once this Create is dealt with, so that its Create reaches the levels once.
        let mut early = None;
        if let Op::Create { ino, .. } = *op {
            if self.absent_create.take() == Some(ino) {
                self.state.table.get_mut(ino)?.absent = true;
                if let (Some((held, deadline)), Op::Create { parent, name, .. }) =
                    (self.hold_create, *op)
                {
                    if held == ino {
                        early = self.hold(ino, deadline, parent, name);
                    }
                }
            }
        }
        Ok(early)
    }

    /// Runs `f`, whose ops' records the levels commit whole (`Level::group`): an op that
    /// hands over several records (a volatile file made durable) must not be recovered half
    /// done after a crash.
    pub(crate) fn grouped<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        /// Closes the group on every path out of `f`, a panic too (commits wait for it).
        struct Closes(Arc<Levels>);
        impl Drop for Closes {
            fn drop(&mut self) {
                self.0.group(false);
            }
        }
        let levels = self.engine.levels.read().clone();
        levels.group(true);
        let _closes = Closes(levels);
        f(self)
    }

    /// Marks the inode the next Create makes as unknown to the store (decision 0066).
    pub(crate) fn create_absent(&mut self, ino: crate::attr::Ino) {
        self.absent_create = Some(ino);
    }

    /// Marks the regular file the next Create makes as unknown to the store and held by the
    /// archiver until `deadline` less one commit interval (decision 0090).
    pub(crate) fn create_held(&mut self, ino: crate::attr::Ino, deadline: std::time::Duration) {
        self.absent_create = Some(ino);
        self.hold_create = Some((ino, deadline));
    }

    /// Whether `ino` is the file this mutation creates held (its category is assigned after
    /// the create: that must not make it present).
    pub(crate) fn creating_held(&self, ino: crate::attr::Ino) -> bool {
        self.hold_create.is_some_and(|(i, _)| i == ino)
    }

    /// Makes `ino`, if unknown to the store, known to it (and the directories above it):
    /// hands the levels the ops that create it as it is, with `route` (at least the store
    /// default). A no-op for an inode the store knows.
    pub(crate) fn make_present(&mut self, ino: crate::attr::Ino, route: Route) {
        if !self.state.inode(ino).is_ok_and(|i| i.absent) {
            return;
        }
        let route = route.stronger(Route::store(Durability::default()));
        let levels = self.engine.levels.read();
        // A held file's names, as the archiver tracked them (no scan of every directory).
        let names = self.engine.archiver.lock().names(ino);
        let made = policy::make_present(&self.state, ino, names, |op| {
            // A disk-tier file's host file is synced before its records (data=ordered).
            self.after_applied(&levels, op, &route);
            levels.applied_in(&self.state, op, &route)
        });
        drop(levels);
        let mut archiver = self.engine.archiver.lock();
        for made in made {
            archiver.release(made);
            if let Ok(inode) = self.state.table.get_mut(made) {
                inode.absent = false;
            }
        }
        drop(archiver);
        self.route = self.route.stronger(route);
    }

    /// What the disk tier asks of the levels after `op` (data=ordered, decision 0057): the
    /// host file of a disk-tier file whose size or bytes the op changed is synced before the
    /// op's record.
    fn after_applied(&self, levels: &Levels, op: &Op<'_>, route: &Route) {
        let ino = match *op {
            Op::WriteExtent { ino, .. }
            | Op::Migrate { ino, .. }
            | Op::Fallocate { ino, .. }
            | Op::SetAttr {
                ino,
                size_bytes: Some(_),
                ..
            } => ino,
            _ => return,
        };
        let Ok(inode) = self.state.inode(ino) else {
            return;
        };
        let name = crate::contents::host_file::host_file_name(ino, inode.generation);
        match inode.file().map(crate::contents::Contents::tier) {
            Some(crate::contents::Tier::Disk) => levels.host_file_dirty(&name, route),
            Some(crate::contents::Tier::Memory)
                if matches!(
                    op,
                    Op::Migrate {
                        tier: crate::contents::Tier::Memory,
                        ..
                    }
                ) =>
            {
                // The host file is removed by the caller once this move is durable, under the
                // file's host lock (`remove_host_file_after_return`): not by the committer
                // after the commit, which could race the file moving out again and back.
                let _ = levels;
                if let Some(disk) = self.engine.disk.get() {
                    disk.forget_file(ino);
                }
            }
            _ => {}
        }
    }

    /// Hands the levels the ops that rebuild `ino`'s current contents (a volatile file made
    /// durable: the levels never saw its data changes), with `route`. They are already true
    /// of the state, so they are not applied.
    pub(crate) fn materialize(&mut self, ino: crate::attr::Ino, route: Route) {
        let levels = self.engine.levels.read();
        policy::materialize(&self.state, ino, |op| {
            self.after_applied(&levels, op, &route);
            levels.applied_in(&self.state, op, &route);
        });
        self.route = self.route.stronger(route);
    }

    /// Creates an unnamed file (`O_TMPFILE`). Nothing reaches the levels: an inode with no
    /// links is gone at the next restart (decision 0051).
    pub(crate) fn create_unnamed(&mut self, unnamed: &crate::state::Unnamed) -> FsResult<()> {
        self.state.create_unnamed(unnamed)
    }

    /// Marks unnamed file `ino` unknown to the store (its category never reaches it, decision
    /// 0066): naming it hands the levels nothing.
    pub(crate) fn make_unnamed_absent(&mut self, ino: crate::attr::Ino) -> FsResult<()> {
        debug_assert!(self.state.inode(ino).is_ok_and(|i| i.nlink == 0));
        self.state.table.get_mut(ino)?.absent = true;
        Ok(())
    }

    /// Applies `link`, the first name of a linkable unnamed file, and hands the levels, in
    /// its place, the ops that create the file under that name with its current contents and
    /// attributes (`policy::materialize_linked`): they never saw the file.
    pub(crate) fn name_unnamed(&mut self, link: &Op<'_>) -> FsResult<()> {
        // The file's creation, attributes and content: committed whole.
        self.grouped(|m| m.name_unnamed_records(link))
    }

    fn name_unnamed_records(&mut self, link: &Op<'_>) -> FsResult<()> {
        let Op::Link {
            ino,
            parent,
            name,
            time_ns,
        } = *link
        else {
            return Err(Errno::EINVAL);
        };
        self.state.apply(link)?;
        if self.state.inode(ino)?.absent {
            // Unknown to the store (TEMPORARY, DISPOSABLE): as a create of one, nothing.
            return Ok(());
        }
        // Named in a directory the store does not know: it must know the directory first.
        self.make_present(parent, Route::store(Durability::default()));
        let levels = self.engine.levels.read();
        let mut route = None;
        policy::materialize_linked(&self.state, ino, parent, name, time_ns, |op| {
            // The create comes first; everything after it is as strong as it.
            let r = *route.get_or_insert_with(|| policy::route(&self.state, op));
            levels.applied_in(&self.state, op, &r);
        });
        self.route = self.route.stronger(route.unwrap_or(Route::VOLATILE));
        Ok(())
    }
}

/// The inode whose attributes `op` may change without the kernel learning them from its reply:
/// a WRITE, FALLOCATE or COPY_FILE_RANGE is answered with a count or nothing, not attributes
/// (SETATTR and the namespace ops reply with the attributes the op left).
fn attributes_not_in_reply(op: &Op<'_>) -> Option<crate::attr::Ino> {
    match *op {
        Op::Write { ino, .. } | Op::Fallocate { ino, .. } => Some(ino),
        _ => None,
    }
}

/// What a write may take away behind the kernel's back (killpriv, decision 0009): the mode bits
/// and `security.capability`, whose absence the kernel remembers (S_NOSEC).
fn privileges_of(inode: &crate::namespace::inode::Inode) -> (u32, bool) {
    let capability = inode
        .xattrs
        .as_ref()
        .is_some_and(|x| x.get(crate::state::CAPABILITY_XATTR).is_some());
    (inode.mode, capability)
}

impl Engine {
    /// An engine over a state rebuilt by recovery, with the system clock.
    pub fn from_state(state: State) -> Engine {
        Engine::with_clock(state, Arc::new(SystemClock))
    }

    /// An engine over `state`, stamping times from `clock`.
    pub fn with_clock(state: State, clock: Arc<dyn Clock>) -> Engine {
        Engine {
            state: RwLock::new(state),
            levels: RwLock::new(Arc::new(Levels::default())),
            observer: RwLock::new(None),
            clock,
            namespace_epoch: AtomicU64::new(0),
            categories: RwLock::new(Arc::new(crate::category::Categories::builtin(
                crate::persist::persister::PersistConfig::default().commit_interval,
            ))),
            dir_paths: parking_lot::Mutex::new(category_ops::DirPaths::default()),
            disk: std::sync::OnceLock::new(),
            passthrough_available: std::sync::atomic::AtomicBool::new(false),
            mirror: std::sync::OnceLock::new(),
            kernel: parking_lot::RwLock::new(None),
            archiver: parking_lot::Mutex::new(archiver::Archiver::default()),
        }
    }

    pub fn new(config: EngineConfig) -> Engine {
        Engine::with_clock(State::new(&config), config.clock.clone())
    }

    /// A number that changes whenever a rename or rmdir may have changed which directory a
    /// path through directories only (no symlink) names: creations and unlinks cannot, as
    /// they never replace or remove a directory.
    pub fn namespace_epoch(&self) -> u64 {
        self.namespace_epoch.load(Ordering::Acquire)
    }

    /// Runs `f` with shared access to the state (a checkpoint encodes it meanwhile; writers
    /// wait).
    pub fn with_state<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        let _rank = lock_order::acquire(Rank::EngineState);
        f(&self.state.read())
    }

    /// Installs the persistence levels the engine hands its ops to.
    pub fn set_levels(&self, levels: Levels) {
        *self.levels.write() = Arc::new(levels);
    }

    /// Installs one level, the local store (or none).
    pub fn set_sink(&self, sink: Option<Arc<dyn OpSink>>) {
        self.set_levels(sink.map_or_else(Levels::default, Levels::one));
    }

    /// The levels attached now.
    pub fn levels(&self) -> Arc<Levels> {
        self.levels.read().clone()
    }

    /// Like [`Engine::sync`], without waiting for other fsyncs' commits: `done` runs once every
    /// change so far is durable. When the same thread asked last, no commit is under way and
    /// the last one answered at most one fsync, the caller's thread commits and `done` runs
    /// before the return (decision 0100); otherwise the committer answers, and concurrent
    /// callers share its sync.
    pub fn sync_async(&self, done: crate::op::SyncDone) {
        let levels = self.levels.read().clone();
        levels.sync_async(done);
    }

    /// As [`Engine::sync_async`], for `asker` (a FUSE request's thread): the caller's thread
    /// commits only while the same asker asks twice in a row (decision 0100).
    pub fn sync_async_by(&self, asker: u64, done: crate::op::SyncDone) {
        let levels = self.levels.read().clone();
        levels.sync_async_by(asker, done);
    }

    /// Makes every change so far durable, as far as the levels go (fsync).
    pub fn sync(&self) -> std::io::Result<()> {
        let levels = self.levels.read().clone();
        levels.sync()
    }

    /// Installs the receiver of cache invalidations (a mount).
    pub fn set_observer(&self, observer: Option<Arc<dyn Observer>>) {
        *self.observer.write() = observer;
    }

    /// The time stamped on inodes now.
    pub(crate) fn now_ns(&self) -> TimeNs {
        self.clock.file_time_ns()
    }

    /// Shared access to the state for a read-only operation.
    pub(crate) fn read_state(&self) -> ReadState<'_> {
        let rank = lock_order::acquire(Rank::EngineState);
        ReadState {
            guard: self.state.read(),
            _rank: rank,
        }
    }

    /// The exclusive lock, for a change that is not an op (freeing an unreferenced inode).
    pub(crate) fn write_state(&self) -> WriteState<'_> {
        let rank = lock_order::acquire(Rank::EngineState);
        WriteState {
            guard: self.state.write(),
            _rank: rank,
        }
    }

    /// The one sequence of every mutation. `body` gets the time and a [`Mutation`] through
    /// which it applies its ops; once it returns Ok, the lock is dropped, the observer is told
    /// what `invalidations` lists (for library callers: the kernel knows its own changes) and,
    /// for every caller, what the ops changed that the kernel cannot know from its request
    /// (the setuid bit a write clears), and the ops' durability is honoured. A failed `body` has changed nothing the levels
    /// saw after its last successful `apply`.
    pub(crate) fn mutate<T>(
        &self,
        ctx: &crate::Ctx,
        body: impl FnOnce(&mut Mutation<'_>, TimeNs) -> FsResult<T>,
        invalidations: impl FnOnce(&T) -> Vec<Invalidation>,
    ) -> FsResult<T> {
        let time_ns = self.now_ns();
        let rank = lock_order::acquire(Rank::EngineState);
        let mut mutation = Mutation {
            engine: self,
            state: self.state.write(),
            route: Route::VOLATILE,
            behind_kernel: Vec::new(),
            absent_create: None,
            hold_create: None,
            _rank: rank,
        };
        let out = body(&mut mutation, time_ns);
        if !mutation.state.freed_host_files.is_empty() {
            let freed = std::mem::take(&mut mutation.state.freed_host_files);
            self.host_files_freed(&mut mutation.state, &freed);
        }
        let route = mutation.route;
        let mut told = std::mem::take(&mut mutation.behind_kernel);
        drop(mutation);
        // The change is in memory whatever honouring it does, so the kernel is told first
        // (what the ops applied before a failure changed, too).
        if let (false, Ok(out)) = (ctx.kernel, &out) {
            told.extend(invalidations(out));
        }
        if !told.is_empty() {
            if let Some(observer) = self.observer.read().clone() {
                observer.invalidate(&told);
            }
        }
        let out = out?;
        self.honour(route)?;
        Ok(out)
    }

    /// After the lock is dropped: writers wait while too much waits to be written, and a
    /// before-return change is made durable before returning.
    fn honour(&self, route: Route) -> FsResult<()> {
        let levels = self.levels.read().clone();
        levels.throttle();
        if !route.before_return() {
            return Ok(());
        }
        levels.sync().map_err(|e| {
            tracing::error!("a before-return change could not be made durable: {e}");
            Errno::EIO
        })
    }

    /// Sets how soon changes to `ino` must reach the store. A volatile file made durable has
    /// its whole current content handed to the levels at once (its changes were not).
    pub fn set_durability(
        &self,
        ctx: &crate::Ctx,
        ino: crate::attr::Ino,
        durability: Durability,
    ) -> FsResult<()> {
        self.mutate(
            ctx,
            |m, time_ns| {
                m.grouped(|m| {
                    let before = m.state().inode(ino)?.durability();
                    m.apply(&Op::SetDurability {
                        ino,
                        durability: durability.code(),
                        time_ns,
                    })?;
                    // An inode with no links (unlinked, or unnamed) stays unknown to the levels.
                    let inode = m.state().inode(ino)?;
                    let (linked, absent) = (inode.nlink > 0, inode.absent);
                    let route = Route::store(Durability::default().stronger(durability));
                    if absent && durability != Durability::Volatile && linked {
                        m.make_present(ino, route);
                    } else if absent && durability == Durability::Volatile {
                        // Held, and now never to reach the store: its archiver slot goes.
                        m.engine.archiver.lock().release(ino);
                    } else if before == Durability::Volatile
                        && durability != Durability::Volatile
                        && linked
                    {
                        m.materialize(ino, route);
                    }
                    Ok(())
                })
            },
            |_| vec![Invalidation::Inode { ino }],
        )
    }
}

/// Shared access to the state, with its place in the lock order.
pub(crate) struct ReadState<'e> {
    guard: parking_lot::RwLockReadGuard<'e, State>,
    _rank: lock_order::Held,
}

impl std::ops::Deref for ReadState<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

/// Exclusive access to the state outside an op, with its place in the lock order.
pub(crate) struct WriteState<'e> {
    guard: RwLockWriteGuard<'e, State>,
    _rank: lock_order::Held,
}

impl std::ops::Deref for WriteState<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for WriteState<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

#[cfg(test)]
mod tests;
