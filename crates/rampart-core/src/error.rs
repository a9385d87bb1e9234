//! Errors of the engine. File-system operations fail with a POSIX errno, because that is what
//! every caller (the FUSE adapter, the library user) ultimately needs; store-level failures carry
//! a message that names the path and what to do.

use std::fmt;

/// A POSIX error number, as returned by file-system operations.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const EBUSY: Errno = Errno(libc::EBUSY);

    /// The raw errno value.
    pub fn code(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for Errno {}

/// Result of a file-system operation.
pub type FsResult<T> = Result<T, Errno>;
