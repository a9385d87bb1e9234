//! A program that embeds the engine and mounts it at the same time: changes made through the
//! library API must be visible through the mount at once, despite the kernel's long cache
//! timeouts (the adapter invalidates what the kernel cached). Needs root and /dev/fuse.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rampart_core::{Ctx, Engine, EngineConfig, SetAttr, ROOT_INO};
use rampart_fuse::{mount, MountOptions};

/// Mounting needs root and /dev/fuse: without them the test cannot run, and returning early
/// would count it as passed. So it fails, saying why.
fn require_mount_rights() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    assert!(
        root && Path::new("/dev/fuse").exists(),
        "this test mounts a FUSE file system and needs root and /dev/fuse: run it as root \
         (scripts/test does), or leave it out explicitly with `--skip` (it did not run)"
    );
}

#[test]
fn library_changes_invalidate_the_kernel_cache() {
    require_mount_rights();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().to_path_buf();
    let engine = Arc::new(Engine::new(EngineConfig::default()));
    let mut mounted = mount(engine.clone(), &mnt, &MountOptions::default()).unwrap();
    let mut unmounter = mounted.unmounter();
    let server = std::thread::spawn(move || mounted.run());
    let lib = Ctx::library(0, 0);

    let run = || {
        // The kernel caches a negative entry for "late"...
        assert!(std::fs::metadata(mnt.join("late")).is_err());
        // ...which the library's create must invalidate.
        let late = engine
            .mknod(&lib, ROOT_INO, b"late", libc::S_IFREG | 0o644, 0)
            .unwrap();
        engine
            .write(&lib, late.ino, 0, b"from the library", false)
            .unwrap();
        assert_eq!(
            std::fs::read(mnt.join("late")).unwrap(),
            b"from the library"
        );

        // Page cache and attributes of a file read through the mount...
        std::fs::write(mnt.join("f"), b"first version").unwrap();
        assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"first version");
        let ino = std::fs::metadata(mnt.join("f")).unwrap().ino();
        // ...are dropped when the library rewrites it.
        let set = SetAttr {
            size_bytes: Some(0),
            ..SetAttr::default()
        };
        engine.setattr(&lib, ino, &set).unwrap();
        engine.write(&lib, ino, 0, b"second", false).unwrap();
        assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"second");
        assert_eq!(std::fs::metadata(mnt.join("f")).unwrap().len(), 6);

        // A rename through the library is seen at once under both names.
        engine
            .rename(&lib, ROOT_INO, b"f", ROOT_INO, b"g", 0)
            .unwrap();
        assert!(std::fs::metadata(mnt.join("f")).is_err());
        assert_eq!(std::fs::read(mnt.join("g")).unwrap(), b"second");
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
    unmounter.unmount().unwrap();
    let served = server.join().unwrap();
    assert!(engine.check().is_empty(), "{:?}", engine.check());
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    served.unwrap();
    std::thread::sleep(Duration::from_millis(10));
}
