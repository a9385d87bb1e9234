//! `rampart_core::fsck` on real store folders: a crashed store replays clean, a damaged
//! journal is reported and cut by a repair, a damaged checkpoint is never rewritten, a check
//! writes nothing and is refused while the store is open.

use std::path::{Path, PathBuf};

use rampart_core::fsck::{self, NoProgress, Phase, Progress, TailReport};
use rampart_core::persist::journal;
use rampart_core::persist::recovery::{CHECKPOINT_FILE, JOURNAL_FILE};
use rampart_core::rampart::Options;
use rampart_core::{Ctx, Rampart, ROOT_INO};

fn temp_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    rampart_core::store::mkfs(&path).expect("mkfs");
    (dir, path)
}

/// Writes `files`, one journal batch per file (a sync after each), then stops without a
/// checkpoint, as a crash would (or with one, as a clean unmount does). Returns the
/// journal's length after each file.
fn written(path: &Path, files: &[(&[u8], &[u8])], unmount: bool) -> Vec<u64> {
    let fs = Rampart::open(path, &Options::default()).expect("open");
    let c = Ctx::library(0, 0);
    let mut ends = Vec::new();
    for (name, data) in files {
        let f = fs
            .engine()
            .mknod(&c, ROOT_INO, name, libc::S_IFREG | 0o644, 0)
            .expect("mknod");
        fs.engine().write(&c, f.ino, 0, data, false).expect("write");
        fs.persister().sync().expect("sync");
        ends.push(fs.persister().stats().journal_bytes);
    }
    if unmount {
        fs.close().expect("close");
    } else {
        // A crash: nothing more is written (no final checkpoint), and the lock goes with
        // the process (here: its file, since this process lives on holding it).
        fs.engine().set_sink(None);
        std::mem::forget(fs);
        std::fs::remove_file(path.join(rampart_core::store::LOCK_FILE)).unwrap();
    }
    ends
}

const FILES: [(&[u8], &[u8]); 3] = [(b"a", b"first"), (b"b", b"second"), (b"c", b"third")];

fn files_of(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            // A folder (data/) stands for its listing.
            let content = if e.file_type().unwrap().is_dir() {
                let mut names: Vec<_> = std::fs::read_dir(e.path())
                    .unwrap()
                    .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                names.join("\n").into_bytes()
            } else {
                std::fs::read(e.path()).unwrap()
            };
            (e.file_name().to_string_lossy().into_owned(), content)
        })
        .collect();
    out.sort();
    out
}

/// Counts the phases and ops reported.
#[derive(Default)]
struct Counted {
    phases: std::sync::Mutex<Vec<Phase>>,
    advanced: std::sync::atomic::AtomicU64,
}

impl Progress for Counted {
    fn phase(&self, phase: Phase, _len: u64) {
        self.phases.lock().unwrap().push(phase);
    }
    fn advance(&self, n: u64) {
        self.advanced
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn a_crashed_store_replays_clean_and_a_check_writes_nothing() {
    let (_dir, path) = temp_store();
    written(&path, &FILES, false);
    let before = files_of(&path);
    let progress = Counted::default();
    let r = fsck::check(&path, &progress).expect("fsck");
    assert!(r.clean, "{:?}", r.problems);
    assert_eq!(r.journal.batches, 3);
    assert_eq!(r.replay.ops_applied, r.journal.ops);
    assert_eq!(r.filesystem.as_ref().unwrap().files, 3);
    assert_eq!(
        files_of(&path),
        before,
        "a check changed the store (or made a lock)"
    );
    let phases = progress.phases.lock().unwrap().clone();
    assert!(
        phases.contains(&Phase::Replay) && !phases.contains(&Phase::Write),
        "{phases:?}"
    );
    assert_eq!(
        progress.advanced.load(std::sync::atomic::Ordering::Relaxed),
        r.journal.ops
    );
}

#[test]
fn a_check_is_refused_while_the_store_is_open() {
    let (_dir, path) = temp_store();
    let fs = Rampart::open(&path, &Options::default()).unwrap();
    for result in [
        fsck::check(&path, &NoProgress),
        fsck::repair(&path, &NoProgress),
    ] {
        let e = result.unwrap_err();
        assert!(e.to_string().contains("already mounted"), "{e}");
    }
    fs.close().unwrap();
    assert!(fsck::check(&path, &NoProgress).unwrap().clean);
}

#[test]
fn a_damaged_journal_is_cut_at_the_damage_and_then_clean() {
    let (_dir, path) = temp_store();
    let ends = written(&path, &FILES, false);
    let journal_path = path.join(JOURNAL_FILE);
    let mut bytes = std::fs::read(&journal_path).unwrap();
    let damage = ends[0] as usize + journal::BATCH_HEADER_BYTES + 1;
    bytes[damage] ^= 0x10;
    std::fs::write(&journal_path, &bytes).unwrap();
    let r = fsck::check(&path, &NoProgress).unwrap();
    assert!(!r.clean);
    match &r.journal.tail {
        Some(TailReport::Damaged {
            offset,
            dropped_batches,
            dropped_bytes,
            ..
        }) => {
            assert_eq!(*offset, ends[0]);
            assert_eq!(*dropped_batches, 1);
            assert_eq!(*dropped_bytes, ends[2] - ends[0]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read(&journal_path).unwrap(),
        bytes,
        "changed without --repair"
    );
    let progress = Counted::default();
    let r = fsck::repair(&path, &progress).unwrap();
    assert!(r.repaired && r.clean, "{:?}", r.unrepairable);
    assert!(progress.phases.lock().unwrap().contains(&Phase::Write));
    assert_eq!(r.filesystem.as_ref().unwrap().files, 1);
    let again = fsck::check(&path, &NoProgress).unwrap();
    assert!(again.clean, "{:?}", again.problems);
    // An empty journal: its header, and the zeros its writer keeps after the last batch.
    assert_eq!(again.journal.valid_bytes, journal::HEADER_BYTES as u64);
    assert_eq!(
        again.journal.bytes,
        (journal::HEADER_BYTES + journal::JOURNAL_ZEROS_AHEAD_BYTES_MIN) as u64
    );
    // The repaired store opens with the file written before the damage.
    let fs = Rampart::open(&path, &Options::default()).unwrap();
    assert_eq!(fs.recovery().ops_replayed, 0);
    assert!(fs.engine().lookup_path(b"a").is_ok());
    assert!(fs.engine().lookup_path(b"c").is_err());
}

#[test]
fn a_damaged_checkpoint_is_never_rewritten() {
    let (_dir, path) = temp_store();
    written(&path, &FILES, true);
    assert!(fsck::check(&path, &NoProgress).unwrap().clean);
    let file = path.join(CHECKPOINT_FILE);
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let r = fsck::repair(&path, &NoProgress).unwrap();
    assert!(!r.clean && !r.repaired);
    assert!(r.unrepairable.unwrap().contains("cannot be repaired"));
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
}

#[test]
fn a_missing_journal_is_accepted_by_a_repair() {
    let (_dir, path) = temp_store();
    written(&path, &FILES, true);
    std::fs::remove_file(path.join(JOURNAL_FILE)).unwrap();
    let r = fsck::check(&path, &NoProgress).unwrap();
    assert!(!r.clean && r.unrepairable.is_none(), "{r:?}");
    assert!(Rampart::open(&path, &Options::default()).is_err());
    let r = fsck::repair(&path, &NoProgress).unwrap();
    assert!(r.repaired, "{r:?}");
    let fs = Rampart::open(&path, &Options::default()).unwrap();
    assert!(fs.engine().lookup_path(b"c").is_ok());
}

/// A store mounted once and crashed before its first checkpoint, then its journal deleted:
/// it held every change, so the store must not open as an empty file system (it did, and
/// fsck called it clean); the `reserve` file a mount makes after the journal tells it from a
/// store just made (decision 0107).
#[test]
fn a_missing_journal_without_a_checkpoint_is_refused_and_accepted_by_a_repair() {
    let (_dir, path) = temp_store();
    // Opened as the daemon opens it: with room reserved for a checkpoint.
    let mut daemon = Options::default();
    daemon.persist.reserve_bytes_min = rampart_core::limits::STORE_RESERVE_BYTES_MIN;
    let fs = Rampart::open(&path, &daemon).expect("open");
    let c = Ctx::library(0, 0);
    let f = fs
        .engine()
        .mknod(&c, ROOT_INO, b"a", libc::S_IFREG | 0o644, 0);
    fs.engine()
        .write(&c, f.unwrap().ino, 0, b"fsync'd", false)
        .unwrap();
    fs.persister().sync().unwrap();
    fs.engine().set_sink(None);
    std::mem::forget(fs); // a crash, before any checkpoint
    std::fs::remove_file(path.join(rampart_core::store::LOCK_FILE)).unwrap();
    assert!(!path.join(CHECKPOINT_FILE).exists() && path.join("reserve").exists());
    std::fs::remove_file(path.join(JOURNAL_FILE)).unwrap();
    let refused = Rampart::open(&path, &Options::default()).unwrap_err();
    assert!(
        refused.to_string().contains("journal is missing"),
        "{refused}"
    );
    let r = fsck::check(&path, &NoProgress).unwrap();
    assert!(!r.clean && r.unrepairable.is_none(), "{r:?}");
    assert!(r.problems.iter().any(|p| p.contains("is missing")), "{r:?}");
    let r = fsck::repair(&path, &NoProgress).unwrap();
    assert!(r.repaired, "{r:?}");
    let fs = Rampart::open(&path, &Options::default()).unwrap();
    assert!(fs.engine().lookup_path(b"a").is_err());
    fs.close().unwrap();
    // A store just made has neither file, and opens empty as ever.
    let (_dir, fresh) = temp_store();
    Rampart::open(&fresh, &Options::default())
        .unwrap()
        .close()
        .unwrap();
}

/// Files over 8 KiB on the disk tier.
fn disk_tier_at_8_kib() -> Options {
    Options {
        engine: rampart_core::EngineConfig {
            large_file_threshold_bytes: Some(8 << 10),
            ..rampart_core::EngineConfig::default()
        },
        ..Options::default()
    }
}

#[test]
fn host_files_missing_or_short_are_problems_and_a_repair_truncates_and_says_what_was_lost() {
    let (_dir, path) = temp_store();
    let options = disk_tier_at_8_kib();
    let fs = Rampart::open(&path, &options).unwrap();
    let c = Ctx::library(0, 0);
    let mut inos = Vec::new();
    for name in [&b"gone"[..], b"short", b"fine"] {
        let f = fs
            .engine()
            .mknod(&c, ROOT_INO, name, libc::S_IFREG | 0o644, 0)
            .unwrap()
            .ino;
        fs.engine().write(&c, f, 0, &[7u8; 50_000], false).unwrap();
        inos.push(f);
    }
    let host = |ino: u64| {
        let generation = fs.engine().getattr(ino).unwrap().generation;
        path.join(format!("data/{ino:016x}-{generation:08x}"))
    };
    let (gone, short) = (host(inos[0]), host(inos[1]));
    fs.close().unwrap();
    // Behind rampart's back: one host file deleted, one cut, a stranger added.
    std::fs::remove_file(&gone).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&short)
        .unwrap()
        .set_len(20_000)
        .unwrap();
    std::fs::write(path.join("data/00000000deadbeef-00000001"), b"x").unwrap();
    // Not a name rampart makes: someone else's, left alone (and reported).
    std::fs::write(path.join("data/stranger"), b"x").unwrap();

    let before = files_of(&path);
    let r = fsck::check(&path, &NoProgress).unwrap();
    assert!(!r.clean);
    assert!(r.data.checked);
    assert_eq!(
        (r.data.files, r.data.missing.len(), r.data.short.len()),
        (3, 1, 1)
    );
    assert_eq!(
        r.data.orphans,
        vec!["data/00000000deadbeef-00000001".to_string()]
    );
    assert_eq!(r.data.foreign, vec!["data/stranger".to_string()]);
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains("is missing: its 50000 bytes are lost")),
        "{:?}",
        r.problems
    );
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains("bytes 20000 to 50000 are lost")),
        "{:?}",
        r.problems
    );
    assert_eq!(files_of(&path), before, "a check writes nothing");

    let r = fsck::repair(&path, &NoProgress).unwrap();
    assert!(r.clean && r.repaired, "{:?}", r.problems);
    let said = r.repairs.join("\n");
    assert!(said.contains("from 50000 to 20000 bytes"), "{said}");
    assert!(said.contains("its 50000 bytes are lost"), "{said}");
    assert!(said.contains("removed 1 host files"), "{said}");
    assert!(
        path.join("data/stranger").exists(),
        "a repair removed someone else's file"
    );
    assert!(fsck::check(&path, &NoProgress).unwrap().clean);

    let fs = Rampart::open(&path, &options).unwrap();
    let e = fs.engine();
    let size = |name: &[u8]| e.lookup_path(name).unwrap().size_bytes;
    assert_eq!(
        (size(b"/gone"), size(b"/short"), size(b"/fine")),
        (0, 20_000, 50_000)
    );
    let mut out = Vec::new();
    e.read(inos[1], 0, 30_000, &mut out).unwrap();
    assert_eq!(out, vec![7u8; 20_000]);
    // The emptied file takes writes again.
    e.write(&c, inos[0], 0, b"again", false).unwrap();
    e.read(inos[0], 0, 100, &mut out).unwrap();
    assert_eq!(out, b"again");
}

/// Decision 0119: a damaged `freed` note (one that does not decode, or longer than any note,
/// refused before it is read) is a problem fsck names, with what --repair does; a repair
/// removes it, and a mount ignores it (the files stay readable).
#[test]
fn a_damaged_freed_note_is_a_problem_and_a_repair_removes_it() {
    use rampart_core::persist::freed_note::{FREED_FILE, NOTE_BYTES_MAX};
    let (_dir, path) = temp_store();
    written(&path, &FILES, true);
    let note = path.join(FREED_FILE);
    let damaged: [(Vec<u8>, &str); 2] = [
        (b"RPFREED\0 not a note at all".to_vec(), "bad checksum"),
        (
            vec![0u8; NOTE_BYTES_MAX as usize + 1],
            "more than the largest note",
        ),
    ];
    for (bytes, why) in damaged {
        std::fs::write(&note, bytes).unwrap();
        let r = fsck::check(&path, &NoProgress).unwrap();
        assert!(!r.clean, "{:?}", r.problems);
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("freed note is damaged")
                    && p.contains(why)
                    && p.contains("--repair")),
            "{:?}",
            r.problems
        );
    }
    let fs = Rampart::open(&path, &Options::default()).expect("a damaged note refused a mount");
    for (name, data) in FILES {
        let a = fs.engine().lookup_path(name).unwrap();
        let mut buf = Vec::new();
        fs.engine().read(a.ino, 0, 100, &mut buf).unwrap();
        assert_eq!(buf, data);
    }
    assert!(
        note.exists(),
        "the mount removed a damaged note before fsck saw it"
    );
    fs.engine().set_sink(None);
    std::mem::forget(fs);
    std::fs::remove_file(path.join(rampart_core::store::LOCK_FILE)).unwrap();
    let r = fsck::repair(&path, &NoProgress).unwrap();
    assert!(r.clean && r.repaired, "{:?}", r.problems);
    assert!(!note.exists(), "the repair left the damaged note");
    assert!(fsck::check(&path, &NoProgress).unwrap().clean);
}

/// Decision 0127: with the journal lost, every disk-tier file created after the checkpoint is
/// linked into /lost+found with its own bytes. The new inodes' generations start where the
/// checkpoint left them, which the lost journal had handed out too: without the floor, the
/// first adopted file was renamed onto the second's host file (found by a review).
#[test]
fn a_repair_that_loses_the_journal_adopts_every_orphan_with_its_own_bytes() {
    let (_dir, path) = temp_store();
    let options = disk_tier_at_8_kib();
    Rampart::open(&path, &options).unwrap().close().unwrap(); // a checkpoint
    let fs = Rampart::open(&path, &options).unwrap();
    let c = Ctx::library(0, 0);
    let contents: Vec<Vec<u8>> = (0..3u8)
        .map(|i| vec![i + 1; 50_000 + usize::from(i)])
        .collect();
    for (i, data) in contents.iter().enumerate() {
        let f = fs
            .engine()
            .mknod(
                &c,
                ROOT_INO,
                format!("f{i}").as_bytes(),
                libc::S_IFREG | 0o644,
                0,
            )
            .unwrap()
            .ino;
        fs.engine().write(&c, f, 0, data, false).unwrap();
    }
    fs.persister().sync().unwrap();
    fs.engine().set_sink(None);
    std::mem::forget(fs); // a crash
    std::fs::remove_file(path.join(rampart_core::store::LOCK_FILE)).unwrap();
    std::fs::remove_file(path.join("journal")).unwrap();

    let r = fsck::repair(&path, &NoProgress).unwrap();
    assert!(r.clean && r.repaired, "{:?}", r.problems);
    assert_eq!(
        r.repairs
            .iter()
            .filter(|l| l.contains("as /lost+found/#host-"))
            .count(),
        3,
        "{:?}",
        r.repairs
    );
    assert!(fsck::check(&path, &NoProgress).unwrap().clean);
    let fs = Rampart::open(&path, &options).unwrap();
    let e = fs.engine();
    let found = e.lookup_path(b"/lost+found").unwrap().ino;
    let mut adopted = Vec::new();
    e.readdir(found, 0, |ino, _, _, name| {
        if name.starts_with(b"#host-") {
            adopted.push(ino);
        }
        true // go on
    })
    .unwrap();
    let mut held: Vec<Vec<u8>> = adopted
        .iter()
        .map(|&ino| {
            let mut out = Vec::new();
            e.read(ino, 0, 1 << 20, &mut out).unwrap();
            out
        })
        .collect();
    held.sort();
    // (Compared without printing 150 KB on failure.)
    assert!(
        held == contents,
        "an adopted file lost its bytes or holds another's: lengths {:?}, first bytes {:?}",
        held.iter().map(Vec::len).collect::<Vec<_>>(),
        held.iter().map(|h| h.first().copied()).collect::<Vec<_>>()
    );
}

/// An unreadable `checkpoint` (here a symbolic link to itself: ELOOP, as EIO would be) is
/// damage the backup pair stands in for, as at mount: a problem `--repair` mends, not a hard
/// error of fsck.
#[test]
fn an_unreadable_checkpoint_is_damage_the_backup_repairs() {
    let (_dir, path) = temp_store();
    written(&path, &FILES[..1], true);
    written(&path, &FILES[1..], true);
    assert!(path.join("checkpoint.prev").exists());
    let file = path.join(CHECKPOINT_FILE);
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(CHECKPOINT_FILE, &file).unwrap();
    let r = fsck::check(&path, &NoProgress).unwrap();
    assert!(!r.clean && r.unrepairable.is_none(), "{r:?}");
    assert!(r.checkpoint.damaged && r.backup.used, "{r:?}");
    assert!(
        r.problems.iter().any(|p| p.contains("cannot be read")),
        "{r:?}"
    );
    let r = fsck::repair(&path, &NoProgress).unwrap();
    assert!(r.repaired, "{r:?}");
    assert!(std::fs::symlink_metadata(&file).unwrap().is_file());
    let fs = Rampart::open(&path, &Options::default()).unwrap();
    assert!(fs.engine().lookup_path(b"c").is_ok());
}

/// A repair's checkpoint holds changes no journal has (here: the lost journal's): the old pair
/// would not chain to the new journal, so it is removed and none is made (decision 0123).
#[test]
fn a_repair_keeps_no_backup_pair() {
    let (_dir, path) = temp_store();
    written(&path, &FILES[..1], true);
    written(&path, &FILES[1..], true);
    assert!(path.join("checkpoint.prev").exists());
    std::fs::remove_file(path.join(JOURNAL_FILE)).unwrap();
    let r = fsck::repair(&path, &NoProgress).unwrap();
    assert!(r.repaired, "{r:?}");
    assert!(!path.join("checkpoint.prev").exists());
    assert!(!path.join("journal.prev").exists());
    // The next checkpoint keeps one again.
    written(&path, &FILES[..0], true);
    assert!(path.join("checkpoint.prev").exists());
    assert!(path.join("journal.prev").exists());
}
