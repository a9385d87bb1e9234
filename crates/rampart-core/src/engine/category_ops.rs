//! Categories through the engine (MBFS §5): how a file gets one, and what it does.
//!
//! A file's category is stored on the inode as the hidden attribute `CATEGORY_XATTR`
//! (`ORIGIN NAME`), journaled like any attribute, and its spec sets the inode's durability in
//! the same mutation. Programs read and set it as `user.rampart.category` (a name) and
//! `user.rampart.spec` (a raw spec); the library API sets it with origin `api`. A file is
//! given its category before it is created (`plan_category`), so that one that never reaches
//! the store is unknown to it from the start (decision 0066).

use std::sync::Arc;

use super::{Ctx, Engine, Invalidation, Mutation};
use crate::attr::{Durability, FileKind, Ino, ROOT_INO};
use crate::category::{
    Assigned, Categories, CategoryError, KernelNeeds, KernelRequest, Origin, Resolved, Spec,
    CATEGORY_XATTR, RAW_SPEC_PREFIX, USER_AT_RISK_XATTR, USER_CATEGORY_XATTR, USER_ORIGIN_XATTR,
    USER_SPEC_XATTR,
};
use crate::error::{Errno, FsResult};
use crate::op::Op;
use crate::persist::level::Route;
use crate::state::State;
use crate::time::TimeNs;

use crate::limits::RULE_PATH_DEPTH_MAX;

/// What the kernel of a mount sends, of the requests it can be told not to (OPEN, FLUSH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelRequests {
    /// OPEN is answered (not no-open).
    pub open: bool,
    /// FLUSH is answered (not refused with ENOSYS).
    pub flush: bool,
}

/// A mount's [`KernelRequests`], and which of them `auto` chose from what the store needed
/// (where it did, no rule can give a file a category the kernel does not serve).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KernelMount {
    sent: KernelRequests,
    chosen_by_auto: KernelRequests,
}

impl KernelRequests {
    pub fn sends(&self, request: KernelRequest) -> bool {
        match request {
            KernelRequest::Open => self.open,
            KernelRequest::Flush => self.flush,
        }
    }
}

/// A file's category as `rampart stat` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CategoryInfo {
    pub name: String,
    pub origin: Origin,
    pub spec: Spec,
    /// What the engine enforces on the store.
    pub durability: Durability,
}

/// The category stored on an inode, if any.
pub(crate) fn assigned(state: &State, ino: Ino) -> Option<Assigned> {
    let inode = state.inode(ino).ok()?;
    let value = inode.xattrs.as_ref()?.get(CATEGORY_XATTR)?;
    Assigned::decode(value)
}

/// Only regular files and directories have categories (a directory's is what it hands down).
fn has_category(kind: FileKind) -> bool {
    matches!(kind, FileKind::RegularFile | FileKind::Directory)
}

/// The path of `dir` from the root, with a leading `/` (None past `RULE_PATH_DEPTH_MAX`).
fn path_of(state: &State, mut dir: Ino) -> Option<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = Vec::new();
    while dir != ROOT_INO {
        if names.len() >= RULE_PATH_DEPTH_MAX {
            return None;
        }
        let parent = state.dir(dir).ok()?.parent;
        let mut found = None;
        state.dir(parent).ok()?.list_from(0, |e| {
            if e.ino == dir {
                found = Some(e.name.to_vec());
            }
            found.is_none()
        });
        names.push(found?);
        dir = parent;
    }
    let mut path = Vec::new();
    for name in names.iter().rev() {
        path.push(b'/');
        path.extend_from_slice(name);
    }
    Some(path)
}

/// The paths of directories that filename rules matched against lately: finding a
/// directory's name means scanning its parent's entries, so a create in a directory of a
/// large one would otherwise scan it every time. Forgotten whenever a rename or rmdir may
/// have changed a path (`Engine::namespace_epoch`); bounded by `RULE_DIR_PATHS_MAX`.
#[derive(Debug, Default)]
pub(crate) struct DirPaths {
    epoch: u64,
    paths: std::collections::HashMap<Ino, Vec<u8>>,
}

impl Mutation<'_> {
    /// The path of directory `dir` from the root (with a leading `/`), remembered.
    fn dir_path(&mut self, dir: Ino) -> Option<Vec<u8>> {
        let epoch = self.engine.namespace_epoch();
        {
            let mut cache = self.engine.dir_paths.lock();
            if cache.epoch != epoch {
                cache.paths.clear();
                cache.epoch = epoch;
            }
            if let Some(p) = cache.paths.get(&dir) {
                return Some(p.clone());
            }
        }
        let path = path_of(self.state(), dir)?;
        self.remember_dir_path(dir, &path);
        Some(path)
    }

    /// Remembers the path of directory `ino`, just created as `name` in `parent`, so that
    /// what is created in it needs no scan (a build making many directories in a large one).
    pub(crate) fn remember_new_dir(&mut self, parent: Ino, name: &[u8], ino: Ino) {
        let epoch = self.engine.namespace_epoch();
        let cached = {
            let cache = self.engine.dir_paths.lock();
            (cache.epoch == epoch)
                .then(|| cache.paths.get(&parent).cloned())
                .flatten()
        };
        if let Some(mut path) = cached {
            path.push(b'/');
            path.extend_from_slice(name);
            self.remember_dir_path(ino, &path);
        }
    }

    fn remember_dir_path(&mut self, dir: Ino, path: &[u8]) {
        let epoch = self.engine.namespace_epoch();
        let mut cache = self.engine.dir_paths.lock();
        if cache.epoch != epoch || cache.paths.len() >= crate::limits::RULE_DIR_PATHS_MAX {
            cache.paths.clear();
            cache.epoch = epoch;
        }
        cache.paths.insert(dir, path.to_vec());
    }

    /// Gives `ino` the category `assigned` (None: back to the store default): stores it and
    /// sets the durability its spec asks. A volatile file made durable has its content handed
    /// to the levels (as `Engine::set_durability`).
    pub(crate) fn assign_category(
        &mut self,
        ino: Ino,
        assigned: Option<&Assigned>,
        resolved: Resolved,
        time_ns: TimeNs,
    ) -> FsResult<()> {
        // The attribute, the durability and the content of a file made durable: committed whole.
        self.grouped(|m| m.assign_category_records(ino, assigned, resolved, time_ns))
    }

    fn assign_category_records(
        &mut self,
        ino: Ino,
        assigned: Option<&Assigned>,
        resolved: Resolved,
        time_ns: TimeNs,
    ) -> FsResult<()> {
        let inode = self.state().inode(ino)?;
        let kind = inode.kind();
        let before = inode.durability();
        let had = inode
            .xattrs
            .as_ref()
            .is_some_and(|x| x.get(CATEGORY_XATTR).is_some());
        match assigned {
            Some(a) => self.apply(&Op::SetXattr {
                ino,
                name: CATEGORY_XATTR,
                value: &a.encode(),
                flags: 0,
                time_ns,
            })?,
            None if had => self.apply(&Op::RemoveXattr {
                ino,
                name: CATEGORY_XATTR,
                time_ns,
            })?,
            None => {}
        }
        // A directory cannot be volatile: it is as durable as the files it holds (MBFS §5.4).
        let durability = match (kind, resolved.durability) {
            (FileKind::Directory, Durability::Volatile) => Durability::default(),
            (_, d) => d,
        };
        if durability != before {
            self.apply(&Op::SetDurability {
                ino,
                durability: durability.code(),
                time_ns,
            })?;
        }
        let inode = self.state().inode(ino)?;
        let (linked, absent) = (inode.nlink > 0, inode.absent);
        let route = Route::store(Durability::default().stronger(durability));
        if absent && self.creating_held(ino) {
            // Created held (decision 0090): the archiver makes it present by its deadline.
        } else if absent && resolved.durability != Durability::Volatile && linked {
            // Unknown to the store, and now needs it: created there as it is (a held file
            // given another category too: it reaches the store now, as a known file would).
            self.make_present(ino, route);
        } else if absent && resolved.durability == Durability::Volatile {
            // A held file made TEMPORARY never reaches the store: its archiver slot goes.
            self.engine.archiver.lock().release(ino);
        } else if before == Durability::Volatile && durability != Durability::Volatile && linked {
            self.materialize(ino, route);
        }
        Ok(())
    }

    /// The category of a file being created as `ino` with the category `assigned` (checked
    /// by `checked_category`): as a rule's, it wins over the directory's.
    pub(crate) fn plan_explicit_category(
        &mut self,
        assigned: Assigned,
        resolved: Resolved,
        ino: Ino,
    ) -> (Option<Assigned>, Resolved) {
        if resolved.durability == Durability::Volatile {
            self.create_absent(ino);
        }
        (Some(assigned), resolved)
    }

    /// Before creating `ino` of `kind` as `name` in `parent`: the category a rule or the
    /// directory gives it (None for the store default), and marks it unknown to the store
    /// when it never reaches it: its category is `lm=never`, or it has none and its
    /// directory is unknown to the store (decision 0066). A category that cannot be used any
    /// more (a directory's, from an older configuration) leaves the default, with a warning.
    pub(crate) fn plan_category(
        &mut self,
        categories: &Categories,
        parent: Ino,
        name: &[u8],
        kind: FileKind,
        ino: Ino,
    ) -> Option<(Option<Assigned>, Resolved)> {
        let parent_absent = self.state().inode(parent).is_ok_and(|p| p.absent);
        if !has_category(kind) {
            if parent_absent {
                self.create_absent(ino);
            }
            return None;
        }
        let from_parent = assigned(self.state(), parent);
        if from_parent.is_none() && categories.rules().is_empty() {
            return self.plan_store_default(categories, kind, ino);
        }
        let path = if categories.rules_need_path() {
            self.dir_path(parent).map(|mut p| {
                p.push(b'/');
                p.extend_from_slice(name);
                p
            })
        } else {
            None
        };
        let Some(new) = categories.for_new(name, path.as_deref(), from_parent.as_ref()) else {
            return self.plan_store_default(categories, kind, ino);
        };
        match categories.resolve(&new.name) {
            Ok(resolved) => {
                // `auto` answers what any rule or any directory's category needs.
                debug_assert!(
                    self.engine.kernel_refuses(&resolved.spec, true).is_none(),
                    "{}: {} needs a request auto chose not to have sent",
                    String::from_utf8_lossy(name),
                    new.name
                );
                self.plan_absence(categories, kind, &resolved, ino);
                Some((Some(new), resolved))
            }
            Err(e) => {
                tracing::warn!(
                    "{}: {e}; the file gets the store default",
                    String::from_utf8_lossy(name)
                );
                self.plan_store_default(categories, kind, ino)
            }
        }
    }

    /// The category of an unnamed file (`O_TMPFILE`) created in `parent`: the directory's,
    /// else the store default (None: a plain file's). There is no name, so no filename rule;
    /// linking it in later keeps it, as a link or rename does. One that never reaches the
    /// store is unknown to it (decision 0066), so naming it journals nothing; none is held by
    /// the archiver (decision 0090: a file named later is journaled as today).
    pub(crate) fn plan_unnamed_category(
        &mut self,
        categories: &Categories,
        parent: Ino,
    ) -> Option<(Option<Assigned>, Resolved)> {
        let inherited = assigned(self.state(), parent).and_then(|from_parent| {
            let new = Assigned {
                name: from_parent.name,
                origin: Origin::Directory,
            };
            match categories.resolve(&new.name) {
                Ok(resolved) => Some((Some(new), resolved)),
                Err(e) => {
                    tracing::warn!("an O_TMPFILE file: {e}; it gets the store default");
                    None
                }
            }
        });
        inherited.or_else(|| Some((None, categories.default_if_not_plain()?)))
    }

    /// A new file that no rule or directory gives a category gets the store default: its
    /// durability, when that is not a plain file's (`default = "TEMPORARY"` keeps it out of
    /// the store, as the category does everywhere else; `default = "SAFE"` makes it durable
    /// before write returns). No category attribute is stored: it follows the default.
    fn plan_store_default(
        &mut self,
        categories: &Categories,
        kind: FileKind,
        ino: Ino,
    ) -> Option<(Option<Assigned>, Resolved)> {
        let resolved = categories.default_if_not_plain()?;
        self.plan_absence(categories, kind, &resolved, ino);
        Some((None, resolved))
    }

    /// A new file of `resolved` is unknown to the store when it never reaches it, and held by
    /// the archiver when it is a regular file whose deadline is longer than the commit
    /// interval (decision 0090).
    fn plan_absence(
        &mut self,
        categories: &Categories,
        kind: FileKind,
        resolved: &Resolved,
        ino: Ino,
    ) {
        if resolved.durability == Durability::Volatile {
            self.create_absent(ino);
        } else if kind == FileKind::RegularFile {
            let hold = super::archiver::hold_for(&resolved.spec, categories.commit_interval());
            if let Some(deadline) = hold {
                self.create_held(ino, deadline);
            }
        }
    }
}

impl Engine {
    /// Why the store needs the kernel to send OPEN and FLUSH: its configuration can give a
    /// file a category that needs them (the default, a rule, a category named under
    /// `[categories]`), or an inode already has one (directories too: they hand it down), or
    /// is durable before write returns (set through the library). Read at mount, to choose
    /// `--no-open auto` and `--no-flush auto` (decision 0063); one pass over the inodes.
    pub fn kernel_needs(&self) -> KernelNeeds {
        let categories = self.categories();
        let mut needs = categories.kernel_needs();
        if needs.complete() {
            return needs;
        }
        let state = self.read_state();
        for (ino, inode) in state.inodes() {
            let stored = inode.xattrs.as_ref().and_then(|x| x.get(CATEGORY_XATTR));
            if let Some(a) = stored.and_then(Assigned::decode) {
                if let Ok(r) = categories.resolve(&a.name) {
                    needs.note(&r.spec, || {
                        format!("inode {ino} has the category {}", a.name)
                    });
                }
            }
            if inode.durability() == Durability::BeforeReturn && needs.open.is_none() {
                needs.open = Some(format!("inode {ino} is durable before write returns"));
            }
            if needs.complete() {
                break;
            }
        }
        needs
    }

    /// Tells the engine what the mount's kernel sends (`chosen_by_auto`: which of the two
    /// `--no-open auto`/`--no-flush auto` chose): a category that needs what it does not send
    /// is refused from then on.
    pub fn set_kernel_requests(&self, sent: KernelRequests, chosen_by_auto: KernelRequests) {
        *self.kernel.write() = Some(KernelMount {
            sent,
            chosen_by_auto,
        });
    }

    /// What the mount's kernel sends; None when there is no mount (the library).
    pub fn kernel_requests(&self) -> Option<KernelRequests> {
        self.kernel.read().map(|k| k.sent)
    }

    /// The request a file of `spec` needs and the mount's kernel does not send (only those
    /// `auto` chose not to, with `auto_only`).
    fn kernel_refuses(&self, spec: &Spec, auto_only: bool) -> Option<KernelRequest> {
        let kernel = (*self.kernel.read())?;
        [KernelRequest::Open, KernelRequest::Flush]
            .into_iter()
            .find(|&r| {
                r.needed_by(spec)
                    && !kernel.sent.sends(r)
                    && (!auto_only || kernel.chosen_by_auto.sends(r))
            })
    }

    /// Installs the categories and rules in force (the store's `rampart.toml`).
    pub fn set_categories(&self, categories: Arc<Categories>) {
        *self.categories.write() = categories;
    }

    /// The categories and rules in force.
    pub fn categories(&self) -> Arc<Categories> {
        self.categories.read().clone()
    }

    /// Sets `ino`'s category (`name`: a category, or `spec:` and a raw spec; None: back to
    /// the store default), recording `origin`. Unknown or unusable names are refused with
    /// what to do; nothing changes then.
    pub fn set_category(
        &self,
        ctx: &Ctx,
        ino: Ino,
        name: Option<&str>,
        origin: Origin,
    ) -> Result<(), CategoryError> {
        let (assigned, resolved) = match name {
            Some(name) => {
                let (assigned, resolved) = self.checked_category(name, origin)?;
                (Some(assigned), resolved)
            }
            None => {
                let categories = self.categories();
                (
                    None,
                    categories
                        .resolve(&categories.default_category().name)
                        .expect("the default is checked when the configuration is read"),
                )
            }
        };
        self.mutate(
            ctx,
            |m, time_ns| {
                if !has_category(m.state().inode(ino)?.kind()) {
                    return Err(Errno::EPERM);
                }
                m.assign_category(ino, assigned.as_ref(), resolved, time_ns)
            },
            |_| vec![Invalidation::Inode { ino }],
        )
        .map_err(CategoryError::Refused)
    }

    /// The category `name` as it is stored, with what it means: an unknown or unusable one
    /// (one the kernel of this mount does not serve) is refused.
    pub(crate) fn checked_category(
        &self,
        name: &str,
        origin: Origin,
    ) -> Result<(Assigned, Resolved), CategoryError> {
        let categories = self.categories();
        let name = categories.canonical(name)?;
        let resolved = categories.resolve(&name)?;
        if let Some(request) = self.kernel_refuses(&resolved.spec, false) {
            return Err(CategoryError::NotSentByKernel { name, request });
        }
        Ok((Assigned { name, origin }, resolved))
    }

    /// `ino`'s category: its name, where it came from, its spec and what the engine enforces.
    pub fn category(&self, ino: Ino) -> FsResult<CategoryInfo> {
        let categories = self.categories();
        let state = self.read_state();
        let inode = state.inode(ino)?;
        let (name, origin) = match assigned(&state, ino) {
            Some(a) => (a.name, a.origin),
            None => (categories.default_category().name.clone(), Origin::Default),
        };
        let spec = match categories.resolve(&name) {
            Ok(r) => r.spec,
            // Stored by an older configuration: say what is enforced.
            Err(_) => categories.default_category().spec,
        };
        Ok(CategoryInfo {
            name,
            origin,
            spec,
            durability: inode.durability(),
        })
    }

    /// A path of `ino` from the mount's root for messages (`/a/b`; `inode N` when it has
    /// none): finding a file's name means scanning directories, so only on error paths.
    fn some_path_of(&self, ino: Ino) -> Vec<u8> {
        let state = self.read_state();
        let unnamed = || format!("inode {ino}").into_bytes();
        if ino == ROOT_INO {
            return b"/".to_vec();
        }
        if state.dir(ino).is_ok() {
            return path_of(&state, ino).unwrap_or_else(unnamed);
        }
        for (dir, _) in state.inodes() {
            let Ok(d) = state.dir(dir) else { continue };
            let mut name = None;
            d.list_from(0, |e| {
                if e.ino == ino {
                    name = Some(e.name.to_vec());
                }
                name.is_none()
            });
            if let Some(name) = name {
                let mut path = if dir == ROOT_INO {
                    Vec::new()
                } else {
                    match path_of(&state, dir) {
                        Some(p) => p,
                        None => return unnamed(),
                    }
                };
                path.push(b'/');
                path.extend_from_slice(&name);
                return path;
            }
        }
        unnamed()
    }

    /// Whether writes to `ino` are dropped (DISPOSABLE): only volatile files can be, so only
    /// they pay for looking their category up.
    pub(crate) fn discards_writes(&self, state: &State, ino: Ino) -> bool {
        let Ok(inode) = state.inode(ino) else {
            return false;
        };
        if inode.durability() != Durability::Volatile {
            return false;
        }
        let categories = self.categories();
        assigned(state, ino)
            .and_then(|a| categories.resolve(&a.name).ok())
            .is_some_and(|r| r.spec.discard)
    }

    /// Whether the store knows `ino`: false for what was created with a category that never
    /// reaches it, and what was created under such a directory (decision 0066).
    pub fn known_to_store(&self, ino: Ino) -> FsResult<bool> {
        Ok(!self.read_state().inode(ino)?.absent)
    }

    /// Whether writes to `ino` are accepted and dropped (DISPOSABLE).
    pub fn discards(&self, ino: Ino) -> bool {
        self.discards_writes(&self.read_state(), ino)
    }

    /// Whether closing `ino` must make it durable (`lm=until_close`, e.g. EDITED).
    pub fn durable_at_close(&self, ino: Ino) -> bool {
        let categories = self.categories();
        let state = self.read_state();
        assigned(&state, ino)
            .and_then(|a| categories.resolve(&a.name).ok())
            .is_some_and(|r| r.spec.until_close())
    }

    /// Whether the kernel must send every write of `ino` at once (not keep it in its page
    /// cache): its writes must be durable before they return, or are dropped.
    pub fn writes_through(&self, ino: Ino) -> bool {
        let state = self.read_state();
        match state.inode(ino) {
            Ok(i) if i.durability() == Durability::BeforeReturn => true,
            Ok(i) if i.durability() == Durability::Volatile => self.discards_writes(&state, ino),
            _ => false,
        }
    }

    /// The virtual attributes `user.rampart.category` and `user.rampart.spec`, and the hidden
    /// stored one; None for other names.
    pub(crate) fn get_category_xattr(&self, ino: Ino, name: &[u8]) -> Option<FsResult<Vec<u8>>> {
        if name == CATEGORY_XATTR {
            return Some(Err(Errno::ENODATA));
        }
        if name == USER_AT_RISK_XATTR {
            return Some(self.at_risk_of(ino).map(|risk| {
                let text = match risk {
                    None => "bytes=0".to_string(),
                    Some(r) => {
                        let mut text = format!(
                            "bytes={} age_ms={} deadline_ms={}",
                            r.bytes,
                            r.age.as_millis(),
                            r.deadline
                                .map_or_else(|| "never".to_string(), |d| d.as_millis().to_string())
                        );
                        if let Some(held) = r.held_for {
                            // Held out of the store (decision 0090): made present in this.
                            text.push_str(&format!(" held_ms={}", held.as_millis()));
                        }
                        text
                    }
                };
                text.into_bytes()
            }));
        }
        if name != USER_CATEGORY_XATTR && name != USER_SPEC_XATTR && name != USER_ORIGIN_XATTR {
            return None;
        }
        Some(self.category(ino).and_then(|info| {
            let kind = self.getattr(ino)?.kind;
            if !has_category(kind) {
                return Err(Errno::ENODATA);
            }
            Ok(if name == USER_CATEGORY_XATTR {
                info.name.into_bytes()
            } else if name == USER_ORIGIN_XATTR {
                info.origin.to_string().into_bytes()
            } else {
                info.spec.to_string().into_bytes()
            })
        }))
    }

    /// Sets or removes (`value` None) a category through its virtual attributes; None for
    /// other names.
    pub(crate) fn set_category_xattr(
        &self,
        ctx: &Ctx,
        ino: Ino,
        name: &[u8],
        value: Option<&[u8]>,
    ) -> Option<FsResult<()>> {
        if name == CATEGORY_XATTR || name == USER_ORIGIN_XATTR || name == USER_AT_RISK_XATTR {
            // Only through the virtual attributes, which check what is set; the origin is
            // what setting them records.
            return Some(Err(Errno::EPERM));
        }
        if name != USER_CATEGORY_XATTR && name != USER_SPEC_XATTR {
            return None;
        }
        let text = match value.map(std::str::from_utf8) {
            None => None,
            Some(Ok(t)) => Some(t.trim_matches(|c: char| c.is_whitespace() || c == '\0')),
            Some(Err(_)) => return Some(Err(Errno::EINVAL)),
        };
        if value.is_none() && assigned(&self.read_state(), ino).is_none() {
            return Some(Err(Errno::ENODATA));
        }
        let name = text.map(|t| {
            if name == USER_SPEC_XATTR {
                format!("{RAW_SPEC_PREFIX}{t}")
            } else {
                t.to_string()
            }
        });
        Some(
            self.set_category(ctx, ino, name.as_deref(), Origin::Xattr)
                .map_err(|e| {
                    let path = self.some_path_of(ino);
                    tracing::warn!("{}: {e}", String::from_utf8_lossy(&path));
                    e.errno()
                }),
        )
    }
}
