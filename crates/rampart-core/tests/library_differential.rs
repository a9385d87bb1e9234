//! The path API against the kernel: the same random calls through `rampart_core::fs` and
//! through `std::fs` on the host, each giving the same result (the same data, or the same
//! errno), and the two trees equal after each sequence.
//!
//! The library resolves paths itself (`fs/resolve.rs`: `.`, `..`, symlinks, trailing `/`,
//! its cache of directories), with its store's root as `/` and `..` of the root the root. The
//! host side gets the same view by a `chroot` into an empty folder, so absolute symlinks and
//! `..` resolve there as in the library. So this binary holds one test and needs root (it
//! says so and passes without it: CI runs it as root), run in a child process so the folder
//! can be removed afterwards.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use rampart_core::fs::{Fs, OpenOptions};
use rampart_core::FileKind;

/// One call, on paths drawn from a few colliding names.
#[derive(Debug, Clone)]
enum Call {
    CreateDir(String),
    RemoveDir(String),
    Write(String, Vec<u8>),
    Append(String, Vec<u8>),
    CreateNew(String),
    Read(String),
    Rename(String, String),
    RemoveFile(String),
    Symlink(String, String),
    ReadLink(String),
    HardLink(String, String),
    Metadata(String),
    SymlinkMetadata(String),
    ReadDir(String),
    SetLen(String, u64),
    CreateDirAll(String),
    RemoveDirAll(String),
    SetMode(String, u32),
    WriteAt(String, u64, Vec<u8>),
    ReadAt(String, u64, usize),
    SetXattr(String, &'static str, Vec<u8>),
    GetXattr(String, &'static str),
    RemoveXattr(String, &'static str),
}

fn component() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => Just("a"),
        4 => Just("b"),
        2 => Just("c"),
        3 => Just("l"),
        1 => Just("."),
        2 => Just(".."),
    ]
}

fn path() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        prop::collection::vec(component(), 1..4),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(absolute, parts, trailing_slash)| {
            let mut p = if absolute {
                String::from("/")
            } else {
                String::new()
            };
            p.push_str(&parts.join("/"));
            if trailing_slash {
                p.push('/');
            }
            p
        })
}

fn xattr_name() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("user.a"), Just("user.b")]
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..64)
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        3 => path().prop_map(Call::CreateDir),
        2 => path().prop_map(Call::RemoveDir),
        3 => (path(), bytes()).prop_map(|(p, b)| Call::Write(p, b)),
        1 => (path(), bytes()).prop_map(|(p, b)| Call::Append(p, b)),
        1 => path().prop_map(Call::CreateNew),
        2 => path().prop_map(Call::Read),
        3 => (path(), path()).prop_map(|(a, b)| Call::Rename(a, b)),
        2 => path().prop_map(Call::RemoveFile),
        3 => (path(), path()).prop_map(|(target, link)| Call::Symlink(target, link)),
        1 => path().prop_map(Call::ReadLink),
        2 => (path(), path()).prop_map(|(a, b)| Call::HardLink(a, b)),
        2 => path().prop_map(Call::Metadata),
        1 => path().prop_map(Call::SymlinkMetadata),
        1 => path().prop_map(Call::ReadDir),
        1 => (path(), 0u64..100).prop_map(|(p, n)| Call::SetLen(p, n)),
        1 => path().prop_map(Call::CreateDirAll),
        1 => path().prop_map(Call::RemoveDirAll),
        1 => (path(), prop_oneof![Just(0o644u32), Just(0o755), Just(0o1777), Just(0o4700)])
            .prop_map(|(p, m)| Call::SetMode(p, m)),
        2 => (path(), 0u64..200, bytes()).prop_map(|(p, o, b)| Call::WriteAt(p, o, b)),
        2 => (path(), 0u64..200, 0usize..100).prop_map(|(p, o, n)| Call::ReadAt(p, o, n)),
        1 => (path(), xattr_name(), bytes()).prop_map(|(p, n, v)| Call::SetXattr(p, n, v)),
        1 => (path(), xattr_name()).prop_map(|(p, n)| Call::GetXattr(p, n)),
        1 => (path(), xattr_name()).prop_map(|(p, n)| Call::RemoveXattr(p, n)),
    ]
}

/// What a call gave: a value both sides can be compared on, or an errno.
type Outcome = Result<String, i32>;

fn errno_of(e: std::io::Error) -> i32 {
    // An error without an errno fails the comparison visibly.
    e.raw_os_error().unwrap_or(-1)
}

fn kind_name(is_dir: bool, is_symlink: bool) -> &'static str {
    match (is_dir, is_symlink) {
        (true, _) => "dir",
        (_, true) => "symlink",
        _ => "file",
    }
}

fn on_library(fs: &Fs, c: &Call) -> Outcome {
    let r: std::io::Result<String> = (|| match c {
        Call::CreateDir(p) => fs.create_dir(p).map(|_| String::new()),
        Call::RemoveDir(p) => fs.remove_dir(p).map(|_| String::new()),
        Call::Write(p, b) => fs.write(p, b).map(|_| String::new()),
        Call::Append(p, b) => {
            let mut f = OpenOptions::new().append(true).open(fs, p)?;
            f.write_all(b).map(|_| String::new())
        }
        Call::CreateNew(p) => OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(fs, p)
            .map(|_| String::new()),
        Call::Read(p) => {
            let mut f = rampart_core::fs::File::open(fs, p)?;
            let mut v = Vec::new();
            f.read_to_end(&mut v)?;
            Ok(format!("{v:?}"))
        }
        Call::Rename(a, b) => fs.rename(a, b).map(|_| String::new()),
        Call::RemoveFile(p) => fs.remove_file(p).map(|_| String::new()),
        Call::Symlink(t, l) => fs.symlink(t, l).map(|_| String::new()),
        Call::ReadLink(p) => fs.read_link(p).map(|t| t.display().to_string()),
        Call::HardLink(a, b) => fs.hard_link(a, b).map(|_| String::new()),
        Call::Metadata(p) | Call::SymlinkMetadata(p) => {
            let m = if matches!(c, Call::Metadata(_)) {
                fs.metadata(p)?
            } else {
                fs.symlink_metadata(p)?
            };
            let size = if m.is_dir() { 0 } else { m.len() };
            Ok(format!(
                "{} {:o} {} {size}",
                kind_name(m.is_dir(), m.is_symlink()),
                m.mode() & 0o7777,
                m.nlink()
            ))
        }
        Call::ReadDir(p) => {
            let mut names = Vec::new();
            for e in fs.read_dir(p)? {
                names.push(e?.file_name().to_string_lossy().into_owned());
            }
            names.sort();
            Ok(names.join(","))
        }
        Call::SetLen(p, n) => {
            let f = OpenOptions::new().write(true).open(fs, p)?;
            f.set_len(*n).map(|_| String::new())
        }
        Call::CreateDirAll(p) => fs.create_dir_all(p).map(|_| String::new()),
        Call::RemoveDirAll(p) => fs.remove_dir_all(p).map(|_| String::new()),
        Call::SetMode(p, m) => fs
            .set_permissions(p, std::fs::Permissions::from_mode(*m))
            .map(|_| String::new()),
        Call::WriteAt(p, o, b) => {
            let mut f = OpenOptions::new().write(true).open(fs, p)?;
            f.seek(SeekFrom::Start(*o))?;
            f.write_all(b).map(|_| String::new())
        }
        Call::ReadAt(p, o, n) => {
            let mut f = rampart_core::fs::File::open(fs, p)?;
            f.seek(SeekFrom::Start(*o))?;
            let mut v = vec![0; *n];
            let got = f.read(&mut v)?;
            Ok(format!("{:?}", &v[..got]))
        }
        Call::SetXattr(p, n, v) => fs.set_xattr(p, n, v).map(|_| String::new()),
        Call::GetXattr(p, n) => fs.get_xattr(p, n).map(|v| format!("{v:?}")),
        Call::RemoveXattr(p, n) => fs.remove_xattr(p, n).map(|_| String::new()),
    })();
    r.map_err(errno_of)
}

fn on_host(c: &Call) -> Outcome {
    let r: std::io::Result<String> = (|| match c {
        Call::CreateDir(p) => std::fs::create_dir(p).map(|_| String::new()),
        Call::RemoveDir(p) => std::fs::remove_dir(p).map(|_| String::new()),
        Call::Write(p, b) => std::fs::write(p, b).map(|_| String::new()),
        Call::Append(p, b) => {
            let mut f = std::fs::OpenOptions::new().append(true).open(p)?;
            f.write_all(b).map(|_| String::new())
        }
        Call::CreateNew(p) => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p)
            .map(|_| String::new()),
        Call::Read(p) => {
            let mut f = std::fs::File::open(p)?;
            let mut v = Vec::new();
            f.read_to_end(&mut v)?;
            Ok(format!("{v:?}"))
        }
        Call::Rename(a, b) => std::fs::rename(a, b).map(|_| String::new()),
        Call::RemoveFile(p) => std::fs::remove_file(p).map(|_| String::new()),
        Call::Symlink(t, l) => std::os::unix::fs::symlink(t, l).map(|_| String::new()),
        Call::ReadLink(p) => std::fs::read_link(p).map(|t| t.display().to_string()),
        Call::HardLink(a, b) => std::fs::hard_link(a, b).map(|_| String::new()),
        Call::Metadata(p) | Call::SymlinkMetadata(p) => {
            let m = if matches!(c, Call::Metadata(_)) {
                std::fs::metadata(p)?
            } else {
                std::fs::symlink_metadata(p)?
            };
            let size = if m.is_dir() { 0 } else { m.len() };
            Ok(format!(
                "{} {:o} {} {size}",
                kind_name(m.is_dir(), m.file_type().is_symlink()),
                m.mode() & 0o7777,
                m.nlink()
            ))
        }
        Call::ReadDir(p) => {
            let mut names = Vec::new();
            for e in std::fs::read_dir(p)? {
                names.push(e?.file_name().to_string_lossy().into_owned());
            }
            names.sort();
            Ok(names.join(","))
        }
        Call::SetLen(p, n) => {
            let f = std::fs::OpenOptions::new().write(true).open(p)?;
            f.set_len(*n).map(|_| String::new())
        }
        Call::CreateDirAll(p) => std::fs::create_dir_all(p).map(|_| String::new()),
        Call::RemoveDirAll(p) => {
            // The library refuses `.`, `..` and `/` before removing anything, with rmdir's
            // errno; std empties them first (decision 0140). Modelled, not called.
            let is_symlink = std::fs::symlink_metadata(p)?.file_type().is_symlink();
            let last = p.trim_end_matches('/').rsplit('/').next().unwrap_or("");
            let root = !is_symlink && std::fs::canonicalize(p)? == Path::new("/");
            match last {
                "." => Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
                ".." => Err(std::io::Error::from_raw_os_error(libc::ENOTEMPTY)),
                "" => Err(std::io::Error::from_raw_os_error(libc::EBUSY)),
                _ if root => Err(std::io::Error::from_raw_os_error(libc::EBUSY)),
                _ => std::fs::remove_dir_all(p).map(|_| String::new()),
            }
        }
        Call::SetMode(p, m) => {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(*m)).map(|_| String::new())
        }
        Call::WriteAt(p, o, b) => {
            let mut f = std::fs::OpenOptions::new().write(true).open(p)?;
            f.seek(SeekFrom::Start(*o))?;
            f.write_all(b).map(|_| String::new())
        }
        Call::ReadAt(p, o, n) => {
            let mut f = std::fs::File::open(p)?;
            f.seek(SeekFrom::Start(*o))?;
            let mut v = vec![0; *n];
            let got = f.read(&mut v)?;
            Ok(format!("{:?}", &v[..got]))
        }
        Call::SetXattr(p, n, v) => host_xattr::set(p, n, v).map(|_| String::new()),
        Call::GetXattr(p, n) => host_xattr::get(p, n).map(|v| format!("{v:?}")),
        Call::RemoveXattr(p, n) => host_xattr::remove(p, n).map(|_| String::new()),
    })();
    r.map_err(errno_of)
}

/// setxattr(2), getxattr(2) and removexattr(2): they follow symlinks, as the library's do.
mod host_xattr {
    use std::ffi::CString;
    use std::io;

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    pub fn set(path: &str, name: &str, value: &[u8]) -> io::Result<()> {
        let (p, n) = (c(path), c(name));
        // SAFETY: both strings are NUL-terminated and live across the call; value is a valid
        // slice of value.len() bytes.
        let r = unsafe {
            libc::setxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub fn get(path: &str, name: &str) -> io::Result<Vec<u8>> {
        let (p, n) = (c(path), c(name));
        let mut buf = vec![0u8; 65536];
        // SAFETY: as above; buf is writable for buf.len() bytes.
        let r =
            unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(r as usize);
        Ok(buf)
    }

    pub fn remove(path: &str, name: &str) -> io::Result<()> {
        let (p, n) = (c(path), c(name));
        // SAFETY: both strings are NUL-terminated and live across the call.
        let r = unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// Every name under `/` with what it is (type, bytes or symlink target, link count).
fn library_tree(fs: &Fs, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
    for e in fs.read_dir(dir).expect("library read_dir") {
        let e = e.expect("library entry");
        let p = dir.join(e.file_name());
        let m = fs.symlink_metadata(&p).expect("library lstat");
        let what = match m.kind() {
            FileKind::Directory => {
                library_tree(fs, &p, out);
                "dir".to_string()
            }
            FileKind::Symlink => format!("-> {}", fs.read_link(&p).unwrap().display()),
            _ => format!(
                "{:?} x{} {:o}",
                fs.read(&p).unwrap(),
                m.nlink(),
                m.mode() & 0o7777
            ),
        };
        out.insert(p, what);
    }
}

fn host_tree(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
    for e in std::fs::read_dir(dir).expect("host read_dir") {
        let p = e.expect("host entry").path();
        let m = std::fs::symlink_metadata(&p).expect("host lstat");
        let what = if m.is_dir() {
            host_tree(&p, out);
            "dir".to_string()
        } else if m.file_type().is_symlink() {
            format!("-> {}", std::fs::read_link(&p).unwrap().display())
        } else {
            format!(
                "{:?} x{} {:o}",
                std::fs::read(&p).unwrap(),
                m.nlink(),
                m.mode() & 0o7777
            )
        };
        out.insert(p, what);
    }
}

fn empty_host_root() {
    std::fs::set_permissions("/", std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in ["user.a", "user.b"] {
        let _ = host_xattr::remove("/", name); // ENODATA when not set
    }
    for e in std::fs::read_dir("/").unwrap() {
        let p = e.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
}

/// Set in the child process: the folder it chroots into.
const CHILD_ROOT: &str = "RAMPART_LIBDIFF_ROOT";

#[test]
fn the_path_api_gives_what_the_kernel_gives() {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the host side needs chroot (root)");
        return;
    }
    let Some(root) = std::env::var_os(CHILD_ROOT) else {
        // The parent: runs this test again in a child process that chroots (its root stays
        // the parent's to remove), and passes or fails with it.
        let root = std::env::temp_dir().join(format!("rampart-libdiff-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "the_path_api_gives_what_the_kernel_gives",
                "--nocapture",
            ])
            .env(CHILD_ROOT, &root)
            .status()
            .unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(status.success(), "the chrooted child failed: {status}");
        return;
    };
    // The child: from here on it sees `root` as `/`.
    std::os::unix::fs::chroot(&root).unwrap();
    std::env::set_current_dir("/").unwrap();
    let config = ProptestConfig {
        // PROPTEST_CASES=N for a longer hunt.
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(400),
        // No regression file: the chroot has no source tree to write it to.
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(calls in prop::collection::vec(call(), 1..60))| {
        empty_host_root();
        let fs = Fs::in_memory();
        for (i, c) in calls.iter().enumerate() {
            let want = on_host(c);
            let got = on_library(&fs, c);
            prop_assert_eq!(&got, &want, "call {} {:?} (library, kernel)", i, c);
        }
        let (mut lib, mut host) = (BTreeMap::new(), BTreeMap::new());
        library_tree(&fs, Path::new("/"), &mut lib);
        host_tree(Path::new("/"), &mut host);
        prop_assert_eq!(lib, host);
    });
}
