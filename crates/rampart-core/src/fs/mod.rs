//! The path-level API, in the spirit of [`std::fs`]: a program opens a store and uses its file
//! system at memory speed, without system calls, on the same engine and persistence as a mount
//! (MBFS's "raw interface" for programs, §5.1 of the paper).
//!
//! - [`Fs`]: an open store (or an in-memory file system) and the path operations: create,
//!   read, write, rename, remove, list, metadata, permissions, links, xattrs, sync.
//! - [`File`] and [`OpenOptions`]: open files with `Read`, `Write` and `Seek`.
//! - [`Metadata`], [`ReadDir`], [`DirEntry`]: what it reports.
//!
//! Paths are resolved by the library against the store's root (`/a/b` and `a/b` are the same
//! file; there is no current directory): `.` and `..`, and symlinks wherever `std::fs` follows
//! them, at most `limits::SYMLINK_FOLLOWS_MAX` of them per path (then ELOOP) and
//! `limits::PATH_BYTES_MAX` bytes (then ENAMETOOLONG).
//!
//! Errors are [`std::io::Error`]s carrying the errno (`raw_os_error`), so `kind()` gives
//! `NotFound`, `AlreadyExists`, `NotADirectory`, `IsADirectory`, `DirectoryNotEmpty`, ... as
//! for the same call on a mount; like `std::fs`, they do not repeat the path.
//!
//! Permissions: the caller is trusted as the uid and gid it opened the store with. New files
//! are theirs, and no permission bits are checked (a program that embeds the file system owns
//! it, as root owns a mount; the mount checks permissions in the kernel). Writes by a uid other
//! than 0 clear setuid/setgid, as the kernel does.
//!
//! Durability is the mount's: a change is in memory when the call returns and reaches the
//! store within the commit interval (5 s by default); [`File::sync_all`] and [`Fs::sync`] make
//! every change so far durable (fsync); [`Fs::close`] writes a final checkpoint. A store is
//! opened by one process at a time: a library user and a mount of the same store refuse each
//! other (the store's lock).
//!
//! ```
//! use rampart_core::fs::Fs;
//!
//! let dir = tempfile::tempdir()?;
//! let store = dir.path().join("store");
//! rampart_core::store::mkfs(&store).map_err(std::io::Error::other)?;
//!
//! let fs = Fs::open(&store)?;
//! fs.create_dir_all("/projects/demo")?;
//! fs.write("/projects/demo/README", b"hello from the library\n")?;
//! fs.sync()?; // durable now
//! fs.close()?; // final checkpoint; the store can be mounted now
//!
//! let fs = Fs::open(&store)?;
//! assert_eq!(fs.read_to_string("projects/demo/README")?, "hello from the library\n");
//! # Ok::<(), std::io::Error>(())
//! ```

mod file;
mod meta;
mod ops;
mod resolve;

pub use file::{File, OpenOptions};
pub use meta::{DirEntry, Metadata, ReadDir};

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::engine::{Ctx, Engine, EngineConfig};
use crate::error::{Errno, OpenError};
use crate::rampart::{Options, Rampart};

/// An errno as the `io::Error` that carries it.
/// A refused category as an `io::Error` that says why and what to do.
pub(crate) fn category_error(e: crate::category::CategoryError) -> io::Error {
    match e {
        crate::category::CategoryError::Refused(e) => errno(e),
        e => io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
    }
}

pub(crate) fn errno(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.code())
}

/// Why a store could not be opened, as an `io::Error` with a message that names the store and
/// what to do; a store opened elsewhere (mounted, or by another program) is `ResourceBusy`.
fn open_error(e: OpenError) -> io::Error {
    let kind = match &e {
        OpenError::Store(crate::store::StoreError::AlreadyMounted { .. }) => {
            io::ErrorKind::ResourceBusy
        }
        OpenError::Store(crate::store::StoreError::Missing(_)) => io::ErrorKind::NotFound,
        OpenError::Folder { error, .. } => error.kind(),
        _ => io::ErrorKind::InvalidData,
    };
    io::Error::new(kind, e.to_string())
}

/// A file system opened through the library: a store (see [`Fs::open`]) or one in memory
/// only ([`Fs::in_memory`]). Cheap to clone and shared between threads; the store closes when
/// the last clone and the last [`File`] are dropped, or at [`Fs::close`].
#[derive(Clone, Debug)]
pub struct Fs {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    engine: Arc<Engine>,
    ctx: Ctx,
    /// The open store, if any; dropping it closes the store (final checkpoint).
    store: Option<Rampart>,
    /// Directories resolved by path, so that a path in a known directory is one lookup.
    dirs: resolve::DirCache,
}

impl Fs {
    /// Opens the store at `store_path` (made by `rampart mkfs` or [`crate::store::mkfs`]) with
    /// the default settings, acting as the process's effective uid and gid. Fails with
    /// `ResourceBusy` if the store is mounted or open in another program, `NotFound` if there
    /// is none.
    pub fn open(store_path: impl AsRef<Path>) -> io::Result<Fs> {
        // SAFETY: geteuid and getegid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Fs::open_with(store_path, &Options::default(), uid, gid)
    }

    /// Opens the store at `store_path` with `options` (memory cap, commit interval, ...),
    /// acting as `uid:gid` (the owner of what it creates; trusted, see the module's page).
    pub fn open_with(
        store_path: impl AsRef<Path>,
        options: &Options,
        uid: u32,
        gid: u32,
    ) -> io::Result<Fs> {
        let store = Rampart::open(store_path.as_ref(), options).map_err(open_error)?;
        Ok(Fs::from_rampart(store, uid, gid))
    }

    /// The path API over a store opened with [`Rampart::open`] (or [`Rampart::open_device`]).
    pub fn from_rampart(store: Rampart, uid: u32, gid: u32) -> Fs {
        Fs::build(store.engine().clone(), Some(store), uid, gid)
    }

    /// The path API over an engine without a store (nothing is persisted), acting as `uid:gid`.
    pub fn from_engine(engine: Arc<Engine>, uid: u32, gid: u32) -> Fs {
        Fs::build(engine, None, uid, gid)
    }

    /// A new, empty file system in memory only, acting as root: for tests and examples.
    ///
    /// ```
    /// let fs = rampart_core::fs::Fs::in_memory();
    /// fs.write("a", b"x")?;
    /// assert_eq!(fs.read("a")?, b"x");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn in_memory() -> Fs {
        Fs::from_engine(Arc::new(Engine::new(EngineConfig::default())), 0, 0)
    }

    fn build(engine: Arc<Engine>, store: Option<Rampart>, uid: u32, gid: u32) -> Fs {
        Fs {
            inner: Arc::new(Inner {
                engine,
                ctx: Ctx::library(uid, gid),
                store,
                dirs: resolve::DirCache::default(),
            }),
        }
    }

    /// The engine underneath (the inode-level API).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.inner.engine
    }

    /// The open store, if this file system has one.
    pub fn store(&self) -> Option<&Rampart> {
        self.inner.store.as_ref()
    }

    /// Makes every change so far durable (sync(2) of the store: one journal commit), the
    /// files held out of the store until their deadline too (decision 0090).
    pub fn sync(&self) -> io::Result<()> {
        self.inner.engine.archive_all();
        self.inner.engine.sync()
    }

    /// Closes the store: a final checkpoint, then its lock is released. Fails with
    /// `ResourceBusy` (closing nothing) while other clones of this `Fs` or open [`File`]s
    /// exist; otherwise with what the final checkpoint lost.
    pub fn close(self) -> io::Result<()> {
        let inner = Arc::try_unwrap(self.inner).map_err(|inner| {
            io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "cannot close the store: {} other handles (Fs clones or open files) still \
                     use it; drop them first",
                    Arc::strong_count(&inner) - 1
                ),
            )
        })?;
        match inner.store {
            Some(store) => store.close().map_err(io::Error::other),
            None => Ok(()),
        }
    }

    pub(crate) fn ctx(&self) -> &Ctx {
        &self.inner.ctx
    }

    /// The caller as the kernel: its creations are counted, so that an open file outlives
    /// its last name until the handle is dropped.
    pub(crate) fn open_ctx(&self) -> Ctx {
        Ctx {
            kernel: true,
            ..self.inner.ctx
        }
    }

    fn resolver(&self) -> resolve::Resolver<'_> {
        resolve::Resolver {
            engine: &self.inner.engine,
            ctx: &self.inner.ctx,
            cache: Some(&self.inner.dirs),
            creating: false,
        }
    }

    pub(crate) fn resolve<'p>(
        &self,
        path: &'p Path,
        follow_last: bool,
    ) -> Result<resolve::Found<'p>, Errno> {
        self.resolver().resolve(path, follow_last, false)
    }

    /// [`Fs::resolve`] for a call on the name itself (see `Resolver::resolve_entry`).
    pub(crate) fn resolve_entry<'p>(
        &self,
        path: &'p Path,
    ) -> Result<(resolve::Found<'p>, resolve::Last), Errno> {
        self.resolver().resolve_entry(path)
    }

    /// [`Fs::resolve`] for opening: the lookup of what `path` names is counted as an open
    /// file's reference (when the result has a name and attributes), for `forget` at drop.
    /// `creating`: an open that may create (O_CREAT without O_EXCL).
    pub(crate) fn resolve_counted<'p>(
        &self,
        path: &'p Path,
        follow_last: bool,
        creating: bool,
    ) -> Result<resolve::Found<'p>, Errno> {
        resolve::Resolver {
            creating,
            ..self.resolver()
        }
        .resolve(path, follow_last, true)
    }
}
