//! Path resolution for the path API: components, `.` and `..`, symlinks (with a limit on hops
//! and on the components walked), as the kernel's path walk does for a mount.
//!
//! The walk keeps the directories it went through from the root, so `..` goes back along the
//! path actually walked (a symlink's relative target is resolved from the symlink's directory;
//! an absolute one from the store's root). Paths are relative to the store's root whether they
//! start with `/` or not: the library has no current directory.
//!
//! Most calls name a file in a directory already used (PostMark's flat directories, a
//! program's data folder): the directory part of such a path is remembered (`DirCache`), so
//! only the last name is looked up. The cache is dropped whenever the engine's namespace
//! epoch moves (a rename or rmdir), and holds only walks that followed no symlink, so it
//! always gives what walking again would.

use std::borrow::Cow;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use hashbrown::HashMap;
use parking_lot::RwLock;

use crate::attr::{Attr, FileKind, Ino, ROOT_INO};
use crate::engine::{Ctx, Engine};
use crate::error::Errno;
use crate::limits::{
    LIBRARY_DIR_CACHE_ENTRIES_MAX, PATH_BYTES_MAX, PATH_DEPTH_MAX, SYMLINK_FOLLOWS_MAX,
};

/// Where a path leads (`'p`: the path resolved, whose last name it borrows when it can).
#[derive(Debug)]
pub(crate) struct Found<'p> {
    /// The directory holding the last component (the directory itself when the path names a
    /// directory without a last name: `/`, `a/..`).
    pub parent: Ino,
    /// The last component; None when the path ends at a directory reached by `..` or is the
    /// root. Borrowed from the path on the cached path (no allocation per call); owned
    /// after a full walk (a symlink's target may supply it).
    pub name: Option<Cow<'p, [u8]>>,
    /// What the last component names; None when it does not exist (the parent does).
    pub attr: Option<Attr>,
    /// The path ended with `/`: it must name a directory.
    pub must_be_dir: bool,
}

impl<'p> Found<'p> {
    fn named(parent: Ino, name: &'p [u8], attr: Option<Attr>) -> Found<'p> {
        Found {
            parent,
            name: Some(Cow::Borrowed(name)),
            attr,
            must_be_dir: false,
        }
    }

    /// The name, or the error of an operation that needs one (creating or removing `/`).
    pub fn name_or(&self, errno: Errno) -> Result<&[u8], Errno> {
        self.name.as_deref().ok_or(errno)
    }

    /// The inode it names, or ENOENT.
    pub fn existing(&self) -> Result<Attr, Errno> {
        self.attr.ok_or(Errno::ENOENT)
    }
}

/// What a path's last component is, as the kernel's walk names it (LAST_NORM, LAST_DOT,
/// LAST_DOTDOT, LAST_ROOT): only a plain name can be created, removed or renamed, and each of
/// the others has its own errno per call (`rmdir("a/.")` is EINVAL, not the removal of `a`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Last {
    Name,
    Dot,
    DotDot,
    Root,
}

/// The kind of `path`'s last component (trailing slashes ignored, as the kernel does).
pub(crate) fn last_of(path: &[u8]) -> Last {
    let end = path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    let trimmed = &path[..end];
    if trimmed.is_empty() {
        return Last::Root;
    }
    let start = trimmed
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(0, |i| i + 1);
    match &trimmed[start..] {
        b"." => Last::Dot,
        b".." => Last::DotDot,
        _ => Last::Name,
    }
}

/// How a path ends after its last name: nothing, a slash, or `.` (`a/`, `a/.`): either way
/// the name must be a directory, but only a slash makes an open with O_CREAT EISDIR before
/// the name is looked up (`a/.` is a walk through `a`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trailing {
    No,
    Slash,
    Dot,
}

/// The components of `path` without `.` and empty ones, last first (a stack), and how the
/// path ends.
fn components(path: &[u8]) -> (Vec<Vec<u8>>, Trailing) {
    let trailing = if last_of(path) == Last::Dot {
        Trailing::Dot
    } else if path.ends_with(b"/") {
        Trailing::Slash
    } else {
        Trailing::No
    };
    let parts = path
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .rev()
        .map(<[u8]>::to_vec)
        .collect();
    (parts, trailing)
}

/// A symlink's target as components to walk next, and how it ends; an absolute one restarts
/// the walk's directories at the root.
fn link_target(target: &[u8], dirs: &mut Vec<Ino>) -> Result<(Vec<Vec<u8>>, Trailing), Errno> {
    if target.is_empty() {
        return Err(Errno::ENOENT);
    }
    if target.starts_with(b"/") {
        dirs.truncate(1);
    }
    Ok(components(target))
}

/// Directories resolved by path (the part before the last `/`), valid for one namespace
/// epoch of the engine.
#[derive(Debug, Default)]
pub(crate) struct DirCache {
    inner: RwLock<Remembered>,
}

#[derive(Debug, Default)]
struct Remembered {
    epoch: u64,
    dirs: HashMap<Box<[u8]>, Ino>,
}

impl DirCache {
    fn get(&self, epoch: u64, path: &[u8]) -> Option<Ino> {
        let remembered = self.inner.read();
        if remembered.epoch != epoch {
            return None;
        }
        remembered.dirs.get(path).copied()
    }

    /// Remembers `path` as `dir`, walked at `epoch` (read before the walk began).
    fn put(&self, epoch: u64, path: &[u8], dir: Ino) {
        let mut remembered = self.inner.write();
        if remembered.epoch > epoch {
            return; // walked before a rename or rmdir: maybe stale already
        }
        if remembered.epoch < epoch || remembered.dirs.len() >= LIBRARY_DIR_CACHE_ENTRIES_MAX {
            remembered.dirs.clear();
            remembered.epoch = epoch;
        }
        remembered.dirs.insert(path.into(), dir);
    }
}

/// Who resolves: the engine, the caller, and the caller's cache of directories (none in
/// tests of the walk itself).
pub(crate) struct Resolver<'a> {
    pub engine: &'a Engine,
    pub ctx: &'a Ctx,
    pub cache: Option<&'a DirCache>,
    /// Resolving to create (open with O_CREAT, no O_EXCL): a last component that must be a
    /// directory (a symlink's target ending in `/`) is EISDIR before it is looked up, as the
    /// kernel's open_last_lookups refuses it.
    pub creating: bool,
}

/// What a walk found, and what it took.
struct Walked {
    found: Found<'static>,
    /// Components walked (`..` included), against `PATH_DEPTH_MAX`.
    components: usize,
    /// Whether a symlink was followed (such a walk is not remembered).
    followed: bool,
}

impl Walked {
    /// A walk that ended at the entry `name` of `dir` (`attr` None: a free name).
    fn entry(
        dir: Ino,
        name: Vec<u8>,
        attr: Option<Attr>,
        must_be_dir: bool,
        components: usize,
        follows: usize,
    ) -> Walked {
        Walked {
            found: Found {
                parent: dir,
                name: Some(Cow::Owned(name)),
                attr,
                must_be_dir,
            },
            components,
            followed: follows > 0,
        }
    }
}

/// `path` split into its directory part and a last name that is neither `.` nor `..`; None
/// when there is no such name (a trailing `/`, `.` or `..` last), which the full walk handles.
fn split_last(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let (dir, last) = match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&path[..0], path),
    };
    (!last.is_empty() && last != b"." && last != b"..").then_some((dir, last))
}

impl Resolver<'_> {
    /// Resolves `path`; `follow_last`: whether a symlink as the last component is followed
    /// (it always is when the path ends with a slash). `count_last`: the lookup of what the
    /// path names is counted as the kernel's (an open file's reference, dropped by `forget`);
    /// it is counted exactly when the result has both a name and attributes.
    pub fn resolve<'p>(
        &self,
        path: &'p Path,
        follow_last: bool,
        count_last: bool,
    ) -> Result<Found<'p>, Errno> {
        let bytes = path.as_os_str().as_bytes();
        if bytes.is_empty() {
            return Err(Errno::ENOENT);
        }
        if bytes.len() > PATH_BYTES_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if let (Some(cache), Some((dir_path, last))) = (self.cache, split_last(bytes)) {
            if let Some(dir) = self.cached_dir(cache, dir_path)? {
                let ctx = self.last_ctx(count_last);
                match self.engine.lookup(&ctx, dir, last) {
                    Ok(attr) if attr.kind == FileKind::Symlink && follow_last => {
                        // Rare: the full walk follows it.
                        if count_last {
                            self.engine.forget(attr.ino, 1);
                        }
                    }
                    Ok(attr) => return Ok(Found::named(dir, last, Some(attr))),
                    Err(Errno::ENOENT) => return Ok(Found::named(dir, last, None)),
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(self.walk(bytes, follow_last, count_last, true)?.found)
    }

    /// Resolves `path` for a call on the name itself (mkdir, rmdir, unlink, rename, link,
    /// symlink), as the kernel's parent walk and its lookup of the last name: a last symlink
    /// is not followed even before a trailing slash (the caller judges the slash:
    /// `found.must_be_dir`). A path that ends in `.`, `..` or `/` names no entry: it is walked
    /// whole, every component a directory, and the caller refuses it by its [`Last`].
    pub fn resolve_entry<'p>(&self, path: &'p Path) -> Result<(Found<'p>, Last), Errno> {
        let bytes = path.as_os_str().as_bytes();
        let last = last_of(bytes);
        if last != Last::Name {
            let found = self.resolve(path, true, false)?;
            found.existing()?;
            return Ok((found, last));
        }
        if !bytes.ends_with(b"/") {
            return Ok((self.resolve(path, false, false)?, last));
        }
        if bytes.len() > PATH_BYTES_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok((self.walk(bytes, false, false, false)?.found, last))
    }

    /// The directory `dir_path` names, from the cache or walked (and then remembered);
    /// None when the full walk must decide (a walk at the depth limit).
    fn cached_dir(&self, cache: &DirCache, dir_path: &[u8]) -> Result<Option<Ino>, Errno> {
        if dir_path.iter().all(|&b| b == b'/') {
            return Ok(Some(ROOT_INO));
        }
        let epoch = self.engine.namespace_epoch();
        if let Some(dir) = cache.get(epoch, dir_path) {
            return Ok(Some(dir));
        }
        // A directory is walked, never created.
        let dir_walker = Resolver {
            creating: false,
            ..*self
        };
        let walked = dir_walker.walk(dir_path, true, false, true)?;
        let dir = match (walked.found.name, walked.found.attr) {
            (None, _) => walked.found.parent,
            (Some(_), Some(attr)) if attr.kind == FileKind::Directory => attr.ino,
            (Some(_), Some(_)) => return Err(Errno::ENOTDIR),
            (Some(_), None) => return Err(Errno::ENOENT),
        };
        if walked.components >= PATH_DEPTH_MAX {
            return Ok(None);
        }
        if !walked.followed {
            cache.put(epoch, dir_path, dir);
        }
        Ok(Some(dir))
    }

    fn last_ctx(&self, count_last: bool) -> Ctx {
        Ctx {
            kernel: count_last,
            ..*self.ctx
        }
    }

    /// The walk from the root, component by component. `slash_follows`: a trailing slash
    /// follows a last symlink and requires a directory (false: the entry itself is found).
    fn walk(
        &self,
        bytes: &[u8],
        follow_last: bool,
        count_last: bool,
        slash_follows: bool,
    ) -> Result<Walked, Errno> {
        let engine = self.engine;
        let (mut todo, trailing) = components(bytes);
        let mut must_be_dir = trailing != Trailing::No;
        let mut slash_last = trailing == Trailing::Slash;
        let follow_last = follow_last || (must_be_dir && slash_follows);
        let mut dirs: Vec<Ino> = vec![ROOT_INO];
        let mut follows = 0usize;
        let mut walked = 0usize;
        while let Some(part) = todo.pop() {
            walked += 1;
            if walked > PATH_DEPTH_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            let last = todo.is_empty();
            let dir = *dirs.last().expect("the root is never popped");
            if part == b".." {
                if dirs.len() > 1 {
                    dirs.pop();
                }
                continue;
            }
            if last && slash_last && self.creating {
                return Err(Errno::EISDIR);
            }
            let ctx = self.last_ctx(last && count_last);
            let attr = match engine.lookup(&ctx, dir, &part) {
                Ok(attr) => attr,
                // `a/.` (or a symlink to it): `a` is walked through, so it must exist.
                Err(Errno::ENOENT) if last && must_be_dir && !slash_last => {
                    return Err(Errno::ENOENT)
                }
                Err(Errno::ENOENT) if last => {
                    return Ok(Walked::entry(dir, part, None, must_be_dir, walked, follows));
                }
                Err(e) => return Err(e),
            };
            match attr.kind {
                FileKind::Symlink if !last || follow_last => {
                    if ctx.kernel {
                        engine.forget(attr.ino, 1);
                    }
                    follows += 1;
                    if follows > SYMLINK_FOLLOWS_MAX {
                        return Err(Errno(libc::ELOOP));
                    }
                    let target = engine.readlink(attr.ino)?;
                    let (parts, target_trailing) = link_target(&target, &mut dirs)?;
                    // A last symlink's target ending in `/` or `/.` must name a directory,
                    // as the path would had it ended so; a link to "/" or "." as the last
                    // component ends the walk at the directory reached.
                    if last && target_trailing != Trailing::No {
                        // Once the walk ends in `/.`, the name before it is walked through:
                        // a slash at the end of its own target makes it no last name.
                        let dot_ended = must_be_dir && !slash_last;
                        must_be_dir = true;
                        slash_last = !dot_ended && target_trailing == Trailing::Slash;
                    }
                    todo.extend(parts);
                }
                FileKind::Directory if !last => dirs.push(attr.ino),
                _ if !last => return Err(Errno::ENOTDIR),
                kind => {
                    if must_be_dir && slash_follows && kind != FileKind::Directory {
                        if ctx.kernel {
                            engine.forget(attr.ino, 1);
                        }
                        return Err(Errno::ENOTDIR);
                    }
                    let found = Walked::entry(dir, part, Some(attr), must_be_dir, walked, follows);
                    return Ok(found);
                }
            }
        }
        // The path ended at a directory of the walk itself ("/", "a/..", a link to "/").
        let dir = *dirs.last().expect("the root is never popped");
        Ok(Walked {
            found: Found {
                parent: dir,
                name: None,
                attr: Some(engine.getattr(dir)?),
                must_be_dir,
            },
            components: walked,
            followed: follows > 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;

    fn setup() -> (Engine, Ctx) {
        let e = Engine::new(EngineConfig::default());
        let c = Ctx::library(0, 0);
        let a = e.mkdir(&c, ROOT_INO, b"a", 0o755).unwrap();
        e.mkdir(&c, a.ino, b"b", 0o755).unwrap();
        e.mknod(&c, a.ino, b"f", libc::S_IFREG | 0o644, 0).unwrap();
        e.symlink(&c, ROOT_INO, b"up", b"a/b/..").unwrap();
        e.symlink(&c, ROOT_INO, b"abs", b"/a/f").unwrap();
        e.symlink(&c, ROOT_INO, b"loop", b"loop").unwrap();
        (e, c)
    }

    fn ino_of(e: &Engine, path: &str) -> Ino {
        e.lookup_path(path.as_bytes()).unwrap().ino
    }

    #[test]
    fn dot_dot_and_symlinks_resolve_as_the_kernel_does() {
        let (e, c) = setup();
        let walk = Resolver {
            engine: &e,
            ctx: &c,
            cache: None,
            creating: false,
        };
        let r = |p: &'static str, follow| walk.resolve(Path::new(p), follow, false);
        assert_eq!(
            r("/a/b/../f", true).unwrap().attr.unwrap().ino,
            ino_of(&e, "a/f")
        );
        assert_eq!(
            r("up/f", true).unwrap().attr.unwrap().ino,
            ino_of(&e, "a/f")
        );
        assert_eq!(r("abs", true).unwrap().attr.unwrap().ino, ino_of(&e, "a/f"));
        // Not following the last component gives the link itself.
        let link = r("abs", false).unwrap().attr.unwrap();
        assert_eq!(link.kind, FileKind::Symlink);
        // Above the root stays at the root.
        let root = r("/../..", true).unwrap();
        assert_eq!((root.parent, root.name.is_none()), (ROOT_INO, true));
        let missing = r("a/new", true).unwrap();
        assert_eq!(missing.parent, ino_of(&e, "a"));
        assert!(missing.attr.is_none());
    }

    #[test]
    fn errors_carry_the_errno_of_each_failure() {
        let (e, c) = setup();
        let walk = Resolver {
            engine: &e,
            ctx: &c,
            cache: None,
            creating: false,
        };
        let r = |p: &str| walk.resolve(Path::new(p), true, false).unwrap_err();
        assert_eq!(r("loop"), Errno(libc::ELOOP));
        assert_eq!(r("a/f/x"), Errno::ENOTDIR);
        assert_eq!(r("a/f/"), Errno::ENOTDIR);
        assert_eq!(r("nope/x"), Errno::ENOENT);
        assert_eq!(r(""), Errno::ENOENT);
        assert_eq!(r(&"a/".repeat(3000)), Errno::ENAMETOOLONG);
        // Many components within PATH_BYTES_MAX bytes are fine; past the depth limit not.
        let deep = "./".repeat(2000) + "a";
        assert!(walk.resolve(Path::new(&deep), true, false).is_ok());
    }

    /// The directory cache gives what walking again would: after a directory is renamed,
    /// replaced, removed and made again, or reached through a symlink that changes.
    #[test]
    fn remembered_directories_follow_renames_removals_and_symlinks() {
        let fs = crate::fs::Fs::in_memory();
        fs.create_dir_all("/d/sub").unwrap();
        fs.write("/d/sub/f", b"one").unwrap();
        assert_eq!(fs.read("/d/sub/f").unwrap(), b"one"); // /d/sub remembered
        fs.rename("/d/sub", "/d/old").unwrap();
        assert_eq!(
            fs.read("/d/sub/f").unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        fs.create_dir("/d/sub").unwrap();
        fs.write("/d/sub/f", b"two").unwrap();
        assert_eq!(fs.read("/d/old/f").unwrap(), b"one");
        assert_eq!(fs.read("/d/sub/f").unwrap(), b"two");
        // Removed and made again: a new inode under the same path.
        fs.remove_file("/d/sub/f").unwrap();
        fs.remove_dir("/d/sub").unwrap();
        fs.create_dir("/d/sub").unwrap();
        assert!(!fs.exists("/d/sub/f").unwrap());
        fs.write("/d/sub/f", b"three").unwrap();
        assert_eq!(fs.read("/d/sub/f").unwrap(), b"three");
        // Through a symlink that is replaced by another (no rename or rmdir involved).
        fs.symlink("/d/old", "/l").unwrap();
        assert_eq!(fs.read("/l/f").unwrap(), b"one");
        fs.remove_file("/l").unwrap();
        fs.symlink("/d/sub", "/l").unwrap();
        assert_eq!(fs.read("/l/f").unwrap(), b"three");
        // The inode-level API moves the epoch as well.
        let d = fs.metadata("/d").unwrap().ino();
        let ctx = Ctx::library(0, 0);
        fs.engine().rename(&ctx, d, b"sub", d, b"moved", 0).unwrap();
        assert!(!fs.exists("/d/sub/f").unwrap());
        assert_eq!(fs.read("/d/moved/f").unwrap(), b"three");
    }

    /// A path in a remembered directory borrows its last name from the path (no allocation
    /// per call); a full walk owns it.
    #[test]
    fn a_path_in_a_remembered_directory_borrows_its_name() {
        let fs = crate::fs::Fs::in_memory();
        fs.create_dir_all("/d/sub").unwrap();
        let first = fs.resolve(Path::new("/d/sub/f"), false).unwrap();
        assert_eq!(first.name.as_deref(), Some(&b"f"[..]));
        let again = fs.resolve(Path::new("/d/sub/g"), false).unwrap();
        assert!(matches!(again.name, Some(Cow::Borrowed(b"g"))), "{again:?}");
        // A trailing slash takes the full walk.
        let walked = fs.resolve(Path::new("/d/sub/h/"), false).unwrap();
        assert!(matches!(walked.name, Some(Cow::Owned(_))), "{walked:?}");
        assert_eq!(
            (walked.parent, walked.name.as_deref()),
            (again.parent, Some(&b"h"[..]))
        );
    }

    /// An open file holds exactly one reference, dropped with it: a file removed while open
    /// is freed at the drop, whichever way the path was resolved.
    #[test]
    fn an_open_counts_one_reference_however_resolved() {
        let fs = crate::fs::Fs::in_memory();
        fs.create_dir("/d").unwrap();
        fs.write("/d/target", b"x").unwrap();
        fs.symlink("target", "/d/link").unwrap();
        for path in ["/d/target", "/d/link", "d/./target"] {
            let file = crate::fs::File::open(&fs, path).unwrap();
            let ino = file.ino();
            let lookups = |fs: &crate::fs::Fs| {
                fs.engine().with_state(|s| {
                    s.inode(ino)
                        .unwrap()
                        .lookups
                        .load(std::sync::atomic::Ordering::Acquire)
                })
            };
            assert_eq!(lookups(&fs), 1, "{path}");
            drop(file);
            assert_eq!(lookups(&fs), 0, "{path}");
        }
        let e = crate::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&fs, "/d/target")
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        let ino = fs.metadata("/d/target").unwrap().ino();
        let left = fs.engine().with_state(|s| {
            s.inode(ino)
                .unwrap()
                .lookups
                .load(std::sync::atomic::Ordering::Acquire)
        });
        assert_eq!(left, 0);
    }
}
