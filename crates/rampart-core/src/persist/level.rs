//! The persistence levels seam: the engine hands every applied op to a chain of levels, each a
//! place a file's changes can reach (MBFS's storage hierarchy: LCM other machines' memory, DA1
//! the local store, DA2 a second archive copy). Each level states what it can promise; the
//! policy (`persist::policy`) decides per op, from its inodes' specs, what each level must
//! honour, and a level that cannot keep a promise asked of it is refused when it is added.
//!
//! Today the chain holds one level, the local store (`persist::persister::Persister`). A new
//! level (a mirror, remote memory) implements [`Level`] in a module of its own and is pushed
//! onto the engine's [`Levels`]; the namespace, the ops' codec and the FUSE adapter do not
//! change (docs/ARCHITECTURE.md, "Adding a persistence level").

use std::sync::Arc;

use parking_lot::Mutex;

use crate::attr::{Durability, Ino};
use crate::limits::LEVELS_MAX;
use crate::op::{Op, SyncDone};
pub use crate::persist::persister::at_risk::{CategoryRisk, Waiting};

/// Which level of the storage hierarchy (MBFS §4.1). The order is the hierarchy's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LevelId {
    /// LCM: idle memory of other machines (reserved).
    RemoteMemory,
    /// DA1: the local store (journal, checkpoint).
    Store,
    /// DA2: a second, independent copy of the store (reserved).
    Mirror,
}

impl LevelId {
    pub const ALL: [LevelId; LEVELS_MAX] = [LevelId::RemoteMemory, LevelId::Store, LevelId::Mirror];

    fn index(self) -> usize {
        self as usize
    }
}

/// What one op handed to the levels changed, for the figures of what is at risk: the inode
/// (a namespace op's directory), its category's slot (`category::counts`), and the data bytes
/// it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub ino: Ino,
    pub category: u16,
    pub data_bytes: u64,
}

/// What a level can promise about the changes handed to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Promise {
    /// Changes reach it within a deadline (`Durability::Within`).
    pub deadline: bool,
    /// Changes can be made durable on it before the call that made them returns.
    pub before_return: bool,
    /// The most copies it keeps of each change (1: single).
    pub replicas_max: u8,
}

/// A place changes reach: what the engine calls after each applied op. Called under the
/// engine's exclusive lock (`applied`) or outside it (`sync`, `throttle`), so `applied` must
/// not block on anything that waits for the engine.
pub trait Level: Send + Sync {
    /// Which level this is.
    fn id(&self) -> LevelId {
        LevelId::Store
    }

    /// What it can promise.
    fn promise(&self) -> Promise {
        Promise {
            deadline: true,
            before_return: true,
            replicas_max: 1,
        }
    }

    /// `durability`: what the op must honour on this level; a volatile op is not kept.
    fn applied(&self, op: &Op<'_>, durability: Durability);

    /// What the op just handed over (with `durability`, never volatile) changed. Under the
    /// engine's lock, right after `applied`.
    fn changed(&self, _change: &Change, _durability: Durability) {}

    /// Per category slot: what is not yet durable on this level and the longest wait.
    fn at_risk(&self) -> Vec<CategoryRisk> {
        Vec::new()
    }

    /// What of `ino` is not yet durable on this level (None: nothing, or not tracked).
    fn at_risk_of(&self, _ino: Ino) -> Option<Waiting> {
        None
    }

    /// Makes every op handed over so far durable on this level (fsync). A level that keeps
    /// nothing has nothing to wait for.
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }

    /// Like `sync`, but calls `done` once the ops are durable instead of blocking the caller
    /// (a FUSE worker thread) behind other callers, so that many fsyncs wait on one disk
    /// sync. A level may sync on the caller's thread when no one else waits (the store's
    /// persister does: decision 0100).
    fn sync_async(&self, done: SyncDone) {
        done(self.sync());
    }

    /// As `sync_async`, asked by `asker` (an id of the thread that waits: a FUSE request's
    /// pid), which a level may use to tell a lone writer from many.
    fn sync_async_by(&self, _asker: u64, done: SyncDone) {
        self.sync_async(done);
    }

    /// Called after each change, outside the engine's lock: blocks while too much is waiting
    /// to be written (back-pressure, so that memory outside the cap stays bounded).
    fn throttle(&self) {}

    /// The op just handed over (with `durability`) changed the size or bytes of a disk-tier
    /// file whose host file is `name`: the level makes the host file's data durable before
    /// the op's record (data=ordered, docs/decisions/0057). Under the engine's lock.
    fn host_file_dirty(&self, _name: &str, _durability: Durability) {}

    /// The host file `name` is no longer needed once the ops handed over so far are durable
    /// (its inode is freed, or its file moved back to memory): the level removes it then.
    /// Under the engine's lock. Returns false if the level keeps no such list (the caller
    /// removes it itself).
    fn remove_after_commit(&self, _name: &str) -> bool {
        false
    }

    /// A sync of the host file `name` failed where no fsync was waiting for it (the
    /// committer's own pass over passthrough files): the level keeps it for the file's next
    /// fsync ([`Level::take_host_sync_error`]).
    fn host_sync_failed(&self, _name: &str) {}

    /// Whether a sync of the host file `name` failed since the last time this was asked
    /// (each failure is answered once, to the file's next fsync; fsyncgate). `on_disk`: the
    /// file is on the disk tier now.
    fn take_host_sync_error(&self, _name: &str, _on_disk: bool) -> bool {
        false
    }

    /// The ops handed over from `open` true to `open` false are one op's records (a volatile
    /// file made durable: its durability, then its content and attributes): a commit takes
    /// all of them or none, so that a crash never recovers a half of them. Under the engine's
    /// lock, both calls in the same mutation.
    fn group(&self, _open: bool) {}
}

/// What one op must honour on each level (the policy's answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    durability: [Durability; LEVELS_MAX],
}

impl Route {
    /// Nothing anywhere: the op stays in memory.
    pub const VOLATILE: Route = Route {
        durability: [Durability::Volatile; LEVELS_MAX],
    };

    /// `durability` on the local store, nothing elsewhere (every spec today).
    pub fn store(durability: Durability) -> Route {
        let mut route = Route::VOLATILE;
        route.durability[LevelId::Store.index()] = durability;
        route
    }

    pub fn on(&self, level: LevelId) -> Durability {
        self.durability[level.index()]
    }

    /// The stronger of two routes, level by level.
    pub fn stronger(self, other: Route) -> Route {
        let mut durability = self.durability;
        for (d, o) in durability.iter_mut().zip(other.durability) {
            *d = d.stronger(o);
        }
        Route { durability }
    }

    /// Whether some level must have the op before the call returns.
    pub fn before_return(&self) -> bool {
        self.durability.contains(&Durability::BeforeReturn)
    }
}

/// Why a level cannot join the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LevelError {
    /// A level of this id is already in the chain.
    Duplicate(LevelId),
}

impl std::fmt::Display for LevelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LevelError::Duplicate(id) => write!(f, "the {id:?} level is already attached"),
        }
    }
}

impl std::error::Error for LevelError {}

/// The chain of levels an engine hands its ops to, in hierarchy order; at most one per id.
#[derive(Clone, Default)]
pub struct Levels {
    chain: Vec<Arc<dyn Level>>,
}

impl std::fmt::Debug for Levels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<LevelId> = self.chain.iter().map(|l| l.id()).collect();
        f.debug_struct("Levels").field("chain", &ids).finish()
    }
}

impl Levels {
    /// A chain of one level.
    pub fn one(level: Arc<dyn Level>) -> Levels {
        Levels { chain: vec![level] }
    }

    /// Adds a level in its place in the hierarchy.
    pub fn push(&mut self, level: Arc<dyn Level>) -> Result<(), LevelError> {
        let id = level.id();
        if self.chain.iter().any(|l| l.id() == id) {
            return Err(LevelError::Duplicate(id));
        }
        debug_assert!(self.chain.len() < LEVELS_MAX);
        let at = self.chain.partition_point(|l| l.id() < id);
        self.chain.insert(at, level);
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.chain.is_empty()
    }

    /// The level with this id, if attached.
    pub fn get(&self, id: LevelId) -> Option<&Arc<dyn Level>> {
        self.chain.iter().find(|l| l.id() == id)
    }

    /// Hands an applied op to every level with what it must honour there.
    pub fn applied(&self, op: &Op<'_>, route: &Route) {
        for level in &self.chain {
            level.applied(op, route.on(level.id()));
        }
    }

    /// Hands an applied op to every level, and what it changed (`policy::change`) to those
    /// that must keep it.
    pub(crate) fn applied_in(&self, state: &crate::state::State, op: &Op<'_>, route: &Route) {
        let change = crate::persist::policy::change(state, op);
        for level in &self.chain {
            let durability = route.on(level.id());
            level.applied(op, durability);
            if durability != Durability::Volatile {
                level.changed(&change, durability);
            }
        }
    }

    /// A disk-tier file's host file changed with the op just handed over (see
    /// [`Level::host_file_dirty`]).
    pub fn host_file_dirty(&self, name: &str, route: &Route) {
        for level in &self.chain {
            let durability = route.on(level.id());
            if durability != Durability::Volatile {
                level.host_file_dirty(name, durability);
            }
        }
    }

    /// Hands `name` to the level that removes it after its next commit; false if no level
    /// does (no store: the caller removes it at once).
    pub fn remove_after_commit(&self, name: &str) -> bool {
        // Every level hears of it (not `any`, which would stop at the first).
        let mut taken = false;
        for level in &self.chain {
            taken |= level.remove_after_commit(name);
        }
        taken
    }

    /// Notes on every level that a sync of the host file `name` failed
    /// ([`Level::host_sync_failed`]).
    pub fn host_sync_failed(&self, name: &str) {
        for level in &self.chain {
            level.host_sync_failed(name);
        }
    }

    /// Whether any level saw a sync of the host file `name` fail since it was last asked
    /// ([`Level::take_host_sync_error`]); every level forgets it.
    pub fn take_host_sync_error(&self, name: &str, on_disk: bool) -> bool {
        let mut failed = false;
        for level in &self.chain {
            failed |= level.take_host_sync_error(name, on_disk);
        }
        failed
    }

    /// Opens (`open`) or closes a group of records every level commits whole
    /// ([`Level::group`]).
    pub fn group(&self, open: bool) {
        for level in &self.chain {
            level.group(open);
        }
    }

    /// Makes everything handed over so far durable on every level.
    pub fn sync(&self) -> std::io::Result<()> {
        let mut result = Ok(());
        for level in &self.chain {
            if let Err(e) = level.sync() {
                result = result.and(Err(e));
            }
        }
        result
    }

    /// Like [`Levels::sync`] without blocking: `done` runs once every level has answered, with
    /// the first error if any did.
    pub fn sync_async(&self, done: SyncDone) {
        match self.chain.as_slice() {
            [] => done(Ok(())),
            [only] => only.sync_async(done),
            many => {
                let join = Arc::new(Mutex::new(JoinState {
                    remaining: many.len(),
                    result: Ok(()),
                    done: Some(done),
                }));
                for level in many {
                    let join = join.clone();
                    level.sync_async(Box::new(move |r| JoinState::answer(&join, r)));
                }
            }
        }
    }

    /// As [`Levels::sync_async`], asked by `asker` (`Level::sync_async_by`).
    pub fn sync_async_by(&self, asker: u64, done: SyncDone) {
        match self.chain.as_slice() {
            [only] => only.sync_async_by(asker, done),
            _ => self.sync_async(done),
        }
    }

    /// Back-pressure from every level.
    pub fn throttle(&self) {
        for level in &self.chain {
            level.throttle();
        }
    }
}

/// Collects the answers of several levels to one `sync_async`.
struct JoinState {
    remaining: usize,
    result: std::io::Result<()>,
    done: Option<SyncDone>,
}

impl JoinState {
    fn answer(join: &Mutex<JoinState>, r: std::io::Result<()>) {
        let finished = {
            let mut j = join.lock();
            if let Err(e) = r {
                j.result = std::mem::replace(&mut j.result, Ok(())).and(Err(e));
            }
            j.remaining -= 1;
            if j.remaining == 0 {
                j.done
                    .take()
                    .map(|d| (d, std::mem::replace(&mut j.result, Ok(()))))
            } else {
                None
            }
        };
        // Outside the lock: `done` may reply to the kernel.
        if let Some((done, result)) = finished {
            done(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Counting {
        id: Option<LevelId>,
        applied: AtomicUsize,
        kept: AtomicUsize,
        fail_sync: bool,
    }

    impl Level for Counting {
        fn id(&self) -> LevelId {
            self.id.unwrap_or(LevelId::Store)
        }
        fn applied(&self, _op: &Op<'_>, durability: Durability) {
            self.applied.fetch_add(1, Ordering::Relaxed);
            if durability != Durability::Volatile {
                self.kept.fetch_add(1, Ordering::Relaxed);
            }
        }
        fn sync(&self) -> std::io::Result<()> {
            if self.fail_sync {
                Err(std::io::Error::other("sync failed"))
            } else {
                Ok(())
            }
        }
    }

    fn op() -> Op<'static> {
        Op::Unlink {
            parent: 1,
            name: b"x",
            time_ns: 0,
        }
    }

    #[test]
    fn each_level_gets_what_the_route_asks_of_it() {
        let store = Arc::new(Counting::default());
        let mirror = Arc::new(Counting {
            id: Some(LevelId::Mirror),
            ..Default::default()
        });
        let mut levels = Levels::default();
        levels.push(mirror.clone()).unwrap();
        levels.push(store.clone()).unwrap();
        assert_eq!(
            levels.chain.iter().map(|l| l.id()).collect::<Vec<_>>(),
            [LevelId::Store, LevelId::Mirror],
            "kept in hierarchy order"
        );
        levels.applied(&op(), &Route::store(Durability::BeforeReturn));
        assert_eq!(store.kept.load(Ordering::Relaxed), 1);
        assert_eq!(mirror.applied.load(Ordering::Relaxed), 1);
        assert_eq!(mirror.kept.load(Ordering::Relaxed), 0, "volatile on DA2");
        assert!(matches!(
            levels.push(Arc::new(Counting::default())),
            Err(LevelError::Duplicate(LevelId::Store))
        ));
    }

    #[test]
    fn sync_async_waits_for_every_level_and_keeps_the_error() {
        let mut levels = Levels::default();
        levels.push(Arc::new(Counting::default())).unwrap();
        levels
            .push(Arc::new(Counting {
                id: Some(LevelId::Mirror),
                fail_sync: true,
                ..Default::default()
            }))
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        levels.sync_async(Box::new(move |r| tx.send(r.is_err()).unwrap()));
        assert!(rx.recv().unwrap(), "the mirror's failure is reported");
        assert!(rx.try_recv().is_err(), "done runs once");
        assert!(levels.sync().is_err());
    }

    #[test]
    fn routes_combine_level_by_level() {
        let a = Route::store(Durability::Within(3));
        let b = Route::store(Durability::Within(1));
        assert_eq!(a.stronger(b).on(LevelId::Store), Durability::Within(1));
        assert_eq!(a.on(LevelId::Mirror), Durability::Volatile);
        assert!(!a.before_return());
        assert!(Route::store(Durability::BeforeReturn).before_return());
    }
}
