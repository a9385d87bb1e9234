//! Path resolution for the path API: components, `.` and `..`, symlinks (with a limit on hops
//! and on the components walked), as the kernel's path walk does for a mount.
//!
//! The walk keeps the directories it went through from the root, so `..` goes back along the
//! path actually walked (a symlink's relative target is resolved from the symlink's directory;
//! an absolute one from the store's root). Paths are relative to the store's root whether they
//! start with `/` or not: the library has no current directory.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::attr::{Attr, FileKind, Ino, ROOT_INO};
use crate::engine::{Ctx, Engine};
use crate::error::Errno;
use crate::limits::{PATH_BYTES_MAX, PATH_DEPTH_MAX, SYMLINK_FOLLOWS_MAX};

/// Where a path leads.
#[derive(Debug)]
pub(crate) struct Found {
    /// The directory holding the last component (the directory itself when the path names a
    /// directory without a last name: `/`, `a/..`).
    pub parent: Ino,
    /// The last component; None when the path ends at a directory reached by `..` or is the
    /// root.
    pub name: Option<Vec<u8>>,
    /// What the last component names; None when it does not exist (the parent does).
    pub attr: Option<Attr>,
    /// The path ended with `/`: it must name a directory.
    pub must_be_dir: bool,
}

impl Found {
    /// The name, or the error of an operation that needs one (creating or removing `/`).
    pub fn name_or(&self, errno: Errno) -> Result<&[u8], Errno> {
        self.name.as_deref().ok_or(errno)
    }

    /// The inode it names, or ENOENT.
    pub fn existing(&self) -> Result<Attr, Errno> {
        self.attr.ok_or(Errno::ENOENT)
    }
}

/// The components of `path` without `.` and empty ones, last first (a stack), and whether the
/// path ends with a slash (or `/.`).
fn components(path: &[u8]) -> (Vec<Vec<u8>>, bool) {
    let trailing = path.ends_with(b"/") || path.ends_with(b"/.") || path == b".";
    let parts = path
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .rev()
        .map(<[u8]>::to_vec)
        .collect();
    (parts, trailing)
}

/// Resolves `path`; `follow_last`: whether a symlink as the last component is followed (it
/// always is when the path ends with a slash).
pub(crate) fn resolve(
    engine: &Engine,
    ctx: &Ctx,
    path: &Path,
    follow_last: bool,
) -> Result<Found, Errno> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Err(Errno::ENOENT);
    }
    if bytes.len() > PATH_BYTES_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    let (mut todo, must_be_dir) = components(bytes);
    let follow_last = follow_last || must_be_dir;
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
        let attr = match engine.lookup(ctx, dir, &part) {
            Ok(attr) => attr,
            Err(Errno::ENOENT) if last => {
                return Ok(Found {
                    parent: dir,
                    name: Some(part),
                    attr: None,
                    must_be_dir,
                })
            }
            Err(e) => return Err(e),
        };
        match attr.kind {
            FileKind::Symlink if !last || follow_last => {
                follows += 1;
                if follows > SYMLINK_FOLLOWS_MAX {
                    return Err(Errno(libc::ELOOP));
                }
                let target = engine.readlink(attr.ino)?;
                if target.is_empty() {
                    return Err(Errno::ENOENT);
                }
                if target.starts_with(b"/") {
                    dirs.truncate(1);
                }
                let (parts, target_trailing) = components(&target);
                if last && target_trailing && parts.is_empty() {
                    // A link to "/" or "." as the last component: the directory reached.
                    continue;
                }
                todo.extend(parts);
            }
            FileKind::Directory if !last => dirs.push(attr.ino),
            _ if !last => return Err(Errno::ENOTDIR),
            kind => {
                if must_be_dir && kind != FileKind::Directory {
                    return Err(Errno::ENOTDIR);
                }
                return Ok(Found {
                    parent: dir,
                    name: Some(part),
                    attr: Some(attr),
                    must_be_dir,
                });
            }
        }
    }
    // The path ended at a directory of the walk itself ("/", "a/..", a link to "/").
    let dir = *dirs.last().expect("the root is never popped");
    Ok(Found {
        parent: dir,
        name: None,
        attr: Some(engine.getattr(dir)?),
        must_be_dir,
    })
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
        let r = |p: &str, follow| resolve(&e, &c, Path::new(p), follow);
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
        let r = |p: &str| resolve(&e, &c, Path::new(p), true).unwrap_err();
        assert_eq!(r("loop"), Errno(libc::ELOOP));
        assert_eq!(r("a/f/x"), Errno::ENOTDIR);
        assert_eq!(r("a/f/"), Errno::ENOTDIR);
        assert_eq!(r("nope/x"), Errno::ENOENT);
        assert_eq!(r(""), Errno::ENOENT);
        assert_eq!(r(&"a/".repeat(3000)), Errno::ENAMETOOLONG);
        // Many components within PATH_BYTES_MAX bytes are fine; past the depth limit not.
        let deep = "./".repeat(2000) + "a";
        assert!(resolve(&e, &c, Path::new(&deep), true).is_ok());
    }
}
