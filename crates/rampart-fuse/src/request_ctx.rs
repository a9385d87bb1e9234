//! What a request's handler needs beside the engine: the caller as a `Ctx`, times, the
//! setxattr flags, and the guard that turns a panic into an EIO.

use std::panic::{catch_unwind, AssertUnwindSafe};

use fuser::{Request, TimeOrNow};
use rampart_core::time::to_ns;
use rampart_core::{Ctx, SetTime};

/// The caller of a create, with its umask: FUSE_DONT_MASK leaves applying it to rampart, which
/// does unless the directory has a default ACL (decision 0143).
pub(crate) fn create_ctx(req: &Request, umask: u32) -> Ctx {
    Ctx { umask, ..ctx(req) }
}

pub(crate) fn ctx(req: &Request) -> Ctx {
    Ctx {
        uid: req.uid(),
        gid: req.gid(),
        kernel: true,
        umask: 0,
    }
}

pub(crate) fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::SpecificTime(t) => SetTime::At(to_ns(t)),
        TimeOrNow::Now => SetTime::Now,
    }
}

/// Runs a handler; a panic becomes a logged EIO (the reply, dropped unsent, answers EIO).
pub(crate) fn guarded(what: &str, f: impl FnOnce()) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(f)) {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        tracing::error!("bug: {what} panicked: {message}; answered EIO");
    }
}

/// A SETXATTR's flags for the engine: FUSE_SETXATTR_ACL_KILL_SGID (the setter may not keep
/// setgid) becomes rampart's own flag, which the kernel gives only with an access ACL.
pub(crate) fn xattr_flags(name: &[u8], flags: i32, setxattr_flags: u32) -> i32 {
    let kill_sgid = setxattr_flags & fuser::FUSE_SETXATTR_ACL_KILL_SGID != 0
        && name == b"system.posix_acl_access";
    let flags = flags & !rampart_core::XATTR_ACL_KILL_SGID;
    if kill_sgid {
        flags | rampart_core::XATTR_ACL_KILL_SGID
    } else {
        flags
    }
}
