//! POSIX ACLs through the engine (decision 0143): validation, the mode kept in step both ways,
//! inheritance of default ACLs, and both surviving journal replay and a checkpoint.

use std::sync::Arc;
use std::time::Duration;

use rampart_core::persist::device::{CrashMode, Device, SimDevice};
use rampart_core::persist::persister::PersistConfig;
use rampart_core::{Ctx, Engine, EngineConfig, Errno, SetAttr, ROOT_INO, XATTR_ACL_KILL_SGID};

const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";
const U: u32 = u32::MAX;
const USER_OBJ: u16 = 1;
const USER: u16 = 2;
const GROUP_OBJ: u16 = 4;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut out = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

fn kernel(umask: u32) -> Ctx {
    Ctx {
        uid: 0,
        gid: 0,
        kernel: true,
        umask,
    }
}

fn mode(e: &Engine, path: &[u8]) -> u32 {
    u32::from(e.lookup_path(path).unwrap().perm) & 0o7777
}

fn xattr(e: &Engine, path: &[u8], name: &[u8]) -> Result<Vec<u8>, Errno> {
    e.getxattr(e.lookup_path(path).unwrap().ino, name)
}

/// What every test below builds: a file with an access ACL, chmodded; a directory with a
/// default ACL and a file and a directory made in it under umask 077.
fn build(e: &Engine) {
    let c = kernel(0o022);
    let f = e
        .mknod(&c, ROOT_INO, b"f", libc::S_IFREG | 0o666, 0)
        .unwrap();
    assert_eq!(
        mode(e, b"/f"),
        0o644,
        "the umask applies without a default ACL"
    );
    let named = acl(&[
        (USER_OBJ, 7, U),
        (USER, 6, 1000),
        (GROUP_OBJ, 4, U),
        (MASK, 6, U),
        (OTHER, 0, U),
    ]);
    e.setxattr(&c, f.ino, ACCESS, &named, 0).unwrap();
    assert_eq!(mode(e, b"/f"), 0o760, "the mask is the group bits");
    e.setattr(
        &c,
        f.ino,
        &SetAttr {
            mode: Some(0o740),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let d = e.mkdir(&c, ROOT_INO, b"d", 0o755).unwrap();
    let default = acl(&[
        (USER_OBJ, 7, U),
        (USER, 7, 1000),
        (GROUP_OBJ, 5, U),
        (MASK, 7, U),
        (OTHER, 5, U),
    ]);
    e.setxattr(&c, d.ino, DEFAULT, &default, 0).unwrap();
    let c = kernel(0o077);
    e.mknod(&c, d.ino, b"in", libc::S_IFREG | 0o666, 0).unwrap();
    e.mkdir(&c, d.ino, b"sub", 0o777).unwrap();
    e.symlink(&c, d.ino, b"link", b"in").unwrap();
}

fn check(e: &Engine) {
    assert_eq!(mode(e, b"/f"), 0o740);
    let chmodded = acl(&[
        (USER_OBJ, 7, U),
        (USER, 6, 1000),
        (GROUP_OBJ, 4, U),
        (MASK, 4, U),
        (OTHER, 0, U),
    ]);
    assert_eq!(
        xattr(e, b"/f", ACCESS).unwrap(),
        chmodded,
        "chmod sets the mask"
    );
    // Inherited with the umask (077) ignored: 0666 masked by the default ACL.
    assert_eq!(mode(e, b"/d/in"), 0o664);
    let inherited = acl(&[
        (USER_OBJ, 6, U),
        (USER, 7, 1000),
        (GROUP_OBJ, 5, U),
        (MASK, 6, U),
        (OTHER, 4, U),
    ]);
    assert_eq!(xattr(e, b"/d/in", ACCESS).unwrap(), inherited);
    assert_eq!(xattr(e, b"/d/in", DEFAULT), Err(Errno::ENODATA));
    assert_eq!(mode(e, b"/d/sub"), 0o775);
    assert_eq!(
        xattr(e, b"/d/sub", DEFAULT).unwrap(),
        xattr(e, b"/d", DEFAULT).unwrap()
    );
    assert_eq!(mode(e, b"/d/link"), 0o777);
    assert!(e.check().is_empty(), "{:?}", e.check());
}

#[test]
fn acls_keep_the_mode_in_step_and_are_inherited() {
    let e = Engine::new(EngineConfig::default());
    build(&e);
    check(&e);
    let c = kernel(0);
    let f = e.lookup_path(b"/f").unwrap().ino;
    // An ACL equal to a mode is stored as the mode.
    let plain = acl(&[(USER_OBJ, 6, U), (GROUP_OBJ, 0, U), (OTHER, 4, U)]);
    e.setxattr(&c, f, ACCESS, &plain, 0).unwrap();
    assert_eq!(mode(&e, b"/f"), 0o604);
    assert_eq!(xattr(&e, b"/f", ACCESS), Err(Errno::ENODATA));
    // Malformed bytes, a default ACL on a file, a bad version.
    let bad = [
        vec![2, 0, 0],
        acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 4, U)]),
        acl(&[
            (USER_OBJ, 7, U),
            (USER, 4, 5),
            (GROUP_OBJ, 4, U),
            (OTHER, 0, U),
        ]),
    ];
    for b in bad {
        assert_eq!(e.setxattr(&c, f, ACCESS, &b, 0), Err(Errno::EINVAL));
    }
    assert_eq!(e.setxattr(&c, f, DEFAULT, &plain, 0), Err(Errno::EACCES));
    let mut v3 = plain.clone();
    v3[0] = 3;
    assert_eq!(e.setxattr(&c, f, ACCESS, &v3, 0), Err(Errno::EOPNOTSUPP));
    assert_eq!(
        e.setxattr(&c, f, b"system.other", b"", 0),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(mode(&e, b"/f"), 0o604);
    // KILL_SGID clears setgid with the ACL.
    e.setattr(
        &c,
        f,
        &SetAttr {
            mode: Some(0o2770),
            ..SetAttr::default()
        },
    )
    .unwrap();
    e.setxattr(&c, f, ACCESS, &plain, XATTR_ACL_KILL_SGID)
        .unwrap();
    assert_eq!(mode(&e, b"/f"), 0o604);
}

fn cfg() -> PersistConfig {
    PersistConfig {
        commit_interval: Duration::from_secs(3600),
        checkpoint_journal_bytes: u64::MAX,
        ..PersistConfig::default()
    }
}

#[test]
fn acls_survive_replay_and_a_checkpoint() {
    let device = Arc::new(SimDevice::new(7));
    let ec = EngineConfig::default();
    let (e, p, _) = rampart_core::persist::open(device.clone(), [1; 16], &ec, cfg()).unwrap();
    build(&e);
    e.sync().unwrap();
    // From the journal alone.
    let image: Arc<dyn Device> = Arc::new(device.crash(CrashMode::LoseUnsynced));
    let (r, _p2, _) = rampart_core::persist::open(image, [1; 16], &ec, cfg()).unwrap();
    check(&r);
    // From a checkpoint.
    p.checkpoint(&e).unwrap();
    let image: Arc<dyn Device> = Arc::new(device.crash(CrashMode::LoseUnsynced));
    let (r, _p3, _) = rampart_core::persist::open(image, [1; 16], &ec, cfg()).unwrap();
    check(&r);
}
