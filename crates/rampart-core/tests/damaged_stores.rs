//! The damaged-store matrix (docs/research/damaged-stores.md, decisions 0132, 0133): a store
//! with a checkpoint, a journal, the backup pair, a `reserve` and host files of disk-tier
//! files, then every subset of those files deleted and each headed file truncated to 0, cut
//! in half or given a flipped byte. For each: the open (what a mount does) recovers every
//! file or refuses with a message and changes nothing; fsck never panics; `fsck --repair`
//! then an open keep every file that any remaining file can give back (bytes compared).

use std::collections::BTreeMap;
use std::path::Path;

use rampart_core::fsck::{self, NoProgress};
use rampart_core::persist::journal;
use rampart_core::rampart::Options;
use rampart_core::{Ctx, Rampart, ROOT_INO};

/// The store's parts the matrix damages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Superblock,
    Checkpoint,
    Journal,
    CheckpointPrev,
    JournalPrev,
    Reserve,
    HostFiles,
}

const PARTS: [Part; 7] = [
    Part::Superblock,
    Part::Checkpoint,
    Part::Journal,
    Part::CheckpointPrev,
    Part::JournalPrev,
    Part::Reserve,
    Part::HostFiles,
];

impl Part {
    fn file(self) -> &'static str {
        match self {
            Part::Superblock => "superblock",
            Part::Checkpoint => "checkpoint",
            Part::Journal => "journal",
            Part::CheckpointPrev => "checkpoint.prev",
            Part::JournalPrev => "journal.prev",
            Part::Reserve => "reserve",
            Part::HostFiles => "data",
        }
    }
}

/// The files of the template store: `a` (memory) and `b` (disk tier) are in the checkpoint
/// and in the backup pair's journal; `c` (memory) and `d` (disk tier) only in the journal.
fn contents() -> BTreeMap<&'static str, Vec<u8>> {
    BTreeMap::from([
        ("a", b"in the checkpoint, in memory".to_vec()),
        ("b", vec![0xb0; 20_000]),
        ("c", b"in the journal only, in memory".to_vec()),
        ("d", vec![0xd0; 30_000]),
    ])
}

/// Files over 8 KiB on the disk tier.
fn options() -> Options {
    Options {
        engine: rampart_core::EngineConfig {
            large_file_threshold_bytes: Some(8 << 10),
            ..rampart_core::EngineConfig::default()
        },
        ..Options::default()
    }
}

fn write_files(fs: &Rampart, names: &[&str]) {
    let c = Ctx::library(0, 0);
    let all = contents();
    for name in names {
        let e = fs.engine();
        let f = e
            .mknod(&c, ROOT_INO, name.as_bytes(), libc::S_IFREG | 0o644, 0)
            .unwrap();
        e.write(&c, f.ino, 0, &all[name], false).unwrap();
    }
    fs.persister().sync().unwrap();
}

/// Builds the template store at `path`.
fn template(path: &Path) {
    rampart_core::store::mkfs(path).unwrap();
    let mut daemon = options();
    daemon.persist.reserve_bytes_min = rampart_core::limits::STORE_RESERVE_BYTES_MIN;
    Rampart::open(path, &daemon).unwrap().close().unwrap();
    let fs = Rampart::open(path, &daemon).unwrap();
    write_files(&fs, &["a", "b"]);
    fs.close().unwrap(); // the second checkpoint keeps the first as the backup pair
    let fs = Rampart::open(path, &daemon).unwrap();
    write_files(&fs, &["c", "d"]);
    fs.engine().set_sink(None);
    std::mem::forget(fs); // a crash
    std::fs::remove_file(path.join(rampart_core::store::LOCK_FILE)).unwrap();
    for part in PARTS {
        assert!(path.join(part.file()).exists(), "{part:?}");
    }
    assert_eq!(host_files(path).len(), 2, "b and d");
}

fn host_files(store: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(dir) = std::fs::read_dir(store.join("data")) else {
        return BTreeMap::new();
    };
    dir.map(|e| {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        (name, std::fs::read(e.path()).unwrap())
    })
    .collect()
}

/// Every file of the store folder with its bytes (not the reserve, nor the lock file an open
/// makes).
fn listing(store: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = host_files(store);
    for e in std::fs::read_dir(store).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_file() && name != "reserve" && name != "lock" {
            out.insert(name, std::fs::read(e.path()).unwrap());
        }
    }
    out
}

/// A copy of the template (the reserve as an empty file: only its presence counts).
fn copy(template: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    std::fs::create_dir(to.join("data")).unwrap();
    for e in std::fs::read_dir(template).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if name == "reserve" {
            std::fs::write(to.join(&name), b"").unwrap();
        } else if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
    for (name, bytes) in host_files(template) {
        std::fs::write(to.join("data").join(name), bytes).unwrap();
    }
    for dir in [to, &to.join("data")] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    Deleted,
    Emptied,
    Halved,
    Flipped,
}

/// Where the file's content ends: a journal's zeros ahead of its next batch hold nothing, so
/// its damage is aimed at its batches.
fn content_len(path: &Path, part: Part) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    match part {
        Part::Journal | Part::JournalPrev => journal::content_end(&bytes) as u64,
        _ => bytes.len() as u64,
    }
}

fn damage(store: &Path, part: Part, how: Damage) {
    let path = store.join(part.file());
    match how {
        Damage::Deleted if part == Part::HostFiles => std::fs::remove_dir_all(path).unwrap(),
        Damage::Deleted => std::fs::remove_file(path).unwrap(),
        Damage::Emptied => std::fs::write(path, b"").unwrap(),
        Damage::Halved => {
            let len = content_len(&path, part);
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(len / 2)
                .unwrap();
        }
        Damage::Flipped => {
            let middle = (content_len(&path, part) / 2) as usize;
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[middle] ^= 0x40;
            std::fs::write(path, bytes).unwrap();
        }
    }
}

/// The files of the open store with their bytes; those in /lost+found by their bytes only.
fn files_in(fs: &Rampart) -> (BTreeMap<String, Vec<u8>>, Vec<Vec<u8>>) {
    let e = fs.engine();
    // A read that fails stands as its error, which no expected content equals.
    let read = |ino| {
        let mut out = Vec::new();
        match e.read(ino, 0, 1 << 20, &mut out) {
            Ok(()) => out,
            Err(err) => format!("read error: {err:?}").into_bytes(),
        }
    };
    let mut named = BTreeMap::new();
    for name in ["a", "b", "c", "d"] {
        if let Ok(attr) = e.lookup_path(name.as_bytes()) {
            named.insert(name.to_string(), read(attr.ino));
        }
    }
    let mut found = Vec::new();
    if let Ok(dir) = e.lookup_path(b"/lost+found") {
        let mut inos = Vec::new();
        e.readdir(dir.ino, 0, |ino, _, _, name| {
            if name != b"." && name != b".." {
                inos.push(ino);
            }
            true
        })
        .unwrap();
        found = inos.into_iter().map(read).collect();
    }
    (named, found)
}

/// What the cell's remaining files can give back: the files that must be found by name, and
/// the bytes that must be found by name or in /lost+found.
fn expected(lost: &[Part]) -> (Vec<&'static str>, Vec<&'static str>) {
    let kept = |p| !lost.contains(&p);
    let store_id_known = [
        Part::Superblock,
        Part::Checkpoint,
        Part::Journal,
        Part::CheckpointPrev,
        Part::JournalPrev,
    ]
    .into_iter()
    .any(kept);
    if !store_id_known {
        return (vec![], vec![]);
    }
    let pair = kept(Part::CheckpointPrev) && kept(Part::JournalPrev);
    let base = kept(Part::Checkpoint) || pair;
    let hosts = kept(Part::HostFiles);
    let mut named = vec![];
    if base {
        named.push("a");
        if hosts {
            named.push("b");
        }
        if kept(Part::Journal) {
            named.push("c");
            if hosts {
                named.push("d");
            }
        }
    }
    let bytes = if hosts { vec!["b", "d"] } else { vec![] };
    (named, bytes)
}

/// One cell: `lost` are the parts deleted or damaged (`how`). Returns a line for the table.
fn cell(template_path: &Path, lost: &[Part], how: Damage) -> String {
    let all = contents();
    let dir = tempfile::tempdir().unwrap();
    let damaged = |name: &str| {
        let store = dir.path().join(name);
        copy(template_path, &store);
        for &part in lost {
            damage(&store, part, how);
        }
        store
    };
    // See the first arm of the open's match.
    let torn_reading = lost.contains(&Part::Journal) && matches!(how, Damage::Flipped);
    // The open, as a mount does it.
    let store = damaged("open");
    let before = listing(&store);
    let opened = match Rampart::open(&store, &options()) {
        // With nothing but the superblock left, the store cannot be told from one just made.
        Ok(fs) if PARTS[1..].iter().all(|p| lost.contains(p)) => {
            fs.close().unwrap();
            "opens empty (nothing left to tell it from a new store)".to_string()
        }
        // A flipped byte in the journal's last batch reads as a torn tail: no check can tell
        // them apart (decision 0133). The batch holds c and d.
        Ok(fs) if torn_reading => {
            let (named, _) = files_in(&fs);
            fs.close().unwrap();
            for name in ["a", "b"] {
                assert!(named.get(name) == Some(&all[name]), "{how:?}: lost {name}");
            }
            format!(
                "opens with {:?}: the damaged last batch reads as torn (limitation)",
                named.keys().collect::<Vec<_>>()
            )
        }
        Ok(fs) => {
            let (named, _) = files_in(&fs);
            let missing_hosts = lost.contains(&Part::HostFiles);
            for (name, bytes) in &all {
                let memory = *name == "a" || *name == "c";
                if memory || !missing_hosts {
                    assert!(
                        named.get(*name) == Some(bytes),
                        "{lost:?} {how:?}: opened without {name} intact"
                    );
                }
            }
            fs.close().unwrap();
            let unreadable: Vec<&String> = named
                .iter()
                .filter(|(name, bytes)| all[name.as_str()] != **bytes)
                .map(|(name, _)| name)
                .collect();
            if unreadable.is_empty() {
                "opens, every file".to_string()
            } else {
                format!("opens; without their host files {unreadable:?} read otherwise")
            }
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                ["superblock", "checkpoint", "journal", "host file", "data"]
                    .iter()
                    .any(|w| text.contains(w)),
                "{lost:?} {how:?}: unclear refusal: {text}"
            );
            let after = listing(&store);
            let changed: Vec<&String> = before
                .keys()
                .chain(after.keys())
                .filter(|k| before.get(*k) != after.get(*k))
                .collect();
            assert!(
                changed.is_empty(),
                "{lost:?} {how:?}: a refused open changed the store: {changed:?}"
            );
            format!("refuses: {}", text.chars().take(90).collect::<String>())
        }
    };
    let store = damaged("fsck");
    let checked = match fsck::check(&store, &NoProgress) {
        Ok(r) => {
            assert!(
                !(r.clean && opened.starts_with("refuses")),
                "{lost:?} {how:?}: fsck calls clean a store the open refuses"
            );
            if r.clean {
                "clean"
            } else if r.unrepairable.is_some() {
                "unrepairable"
            } else {
                "problems"
            }
        }
        Err(_) => "error",
    };
    let hosts_before = host_files(&store);
    let repaired = fsck::repair(&store, &NoProgress);
    let (want_named, want_bytes) = expected(lost);
    let outcome = match repaired {
        Ok(r) if r.unrepairable.is_none() => {
            let fs = Rampart::open(&store, &options())
                .unwrap_or_else(|e| panic!("{lost:?} {how:?}: no open after a repair: {e}; {r:?}"));
            let (named, found) = files_in(&fs);
            fs.close().unwrap();
            let again = fsck::check(&store, &NoProgress).unwrap();
            assert!(
                again.clean,
                "{lost:?} {how:?}: not clean after a repair: {:?}",
                again.problems
            );
            for name in &want_named {
                assert!(
                    named.get(*name) == Some(&all[name]),
                    "{lost:?} {how:?}: the repair lost {name}"
                );
            }
            // The limitation above: the batch reads as torn, d's host file as what a crash
            // leaves, removed by the open and the repair alike.
            for name in want_bytes.iter().filter(|_| !torn_reading) {
                assert!(
                    named.get(*name) == Some(&all[name]) || found.contains(&all[name]),
                    "{lost:?} {how:?}: the repair lost the bytes of {name}"
                );
            }
            let mut kept: Vec<String> = named.keys().cloned().collect();
            kept.extend(found.iter().map(|_| "lost+found".to_string()));
            format!("repaired: {}", kept.join(" "))
        }
        Ok(r) => {
            assert_eq!(
                host_files(&store),
                hosts_before,
                "{lost:?} {how:?}: an unrepairable store lost host files"
            );
            format!("unrepairable: {}", r.unrepairable.unwrap_or_default())
        }
        Err(e) => {
            assert_eq!(
                host_files(&store),
                hosts_before,
                "{lost:?} {how:?}: a failed repair lost host files"
            );
            format!("fsck error: {e}")
        }
    };
    format!("{lost:?} {how:?} | {opened} | {checked} | {outcome}")
}

fn template_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    template(&path);
    (dir, path)
}

/// Prints the table when `DAMAGED_STORES_TABLE` is set (for the research note).
fn print(lines: &[String]) {
    if std::env::var_os("DAMAGED_STORES_TABLE").is_some() {
        for line in lines {
            println!("{line}");
        }
    }
}

#[test]
fn every_subset_of_deleted_files_keeps_what_the_rest_holds() {
    let (_dir, path) = template_dir();
    let lines: Vec<String> = (1u32..1 << PARTS.len())
        .map(|mask| {
            let lost: Vec<Part> = PARTS
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, p)| *p)
                .collect();
            cell(&path, &lost, Damage::Deleted)
        })
        .collect();
    print(&lines);
}

#[test]
fn each_headed_file_emptied_halved_or_flipped_keeps_what_the_rest_holds() {
    let (_dir, path) = template_dir();
    let mut lines = Vec::new();
    for part in &PARTS[..5] {
        for how in [Damage::Emptied, Damage::Halved, Damage::Flipped] {
            lines.push(cell(&path, &[*part], how));
        }
    }
    print(&lines);
}

/// The checkpoint and the journal both damaged: the backup pair alone rebuilds the store up to
/// the checkpoint before the last, and the host file written after it is adopted (0133).
#[test]
fn the_checkpoint_and_the_journal_damaged_together_fall_back_on_the_backup_pair() {
    let (_dir, path) = template_dir();
    let lines: Vec<String> = [Damage::Emptied, Damage::Halved, Damage::Flipped]
        .into_iter()
        .map(|how| cell(&path, &[Part::Checkpoint, Part::Journal], how))
        .collect();
    for line in &lines {
        assert!(line.contains("repaired: a b"), "{line}");
    }
    print(&lines);
}

/// A copy of the template at `to` whose checkpoint is deleted and whose journal is cut in
/// half: the repair rebuilds from the backup pair and the journal's valid prefix (0133).
fn pair_and_cut_journal(template: &Path, to: &Path) {
    copy(template, to);
    damage(to, Part::Checkpoint, Damage::Deleted);
    damage(to, Part::Journal, Damage::Halved);
}

/// The store's top-level files (not the reserve nor the lock) by name, and its host files'
/// bytes (an adoption renames them), sorted.
fn store_files(store: &Path) -> (BTreeMap<String, Vec<u8>>, Vec<Vec<u8>>) {
    let hosts = host_files(store);
    let mut top = listing(store);
    top.retain(|name, _| !hosts.contains_key(name));
    let mut bytes: Vec<Vec<u8>> = hosts.into_values().collect();
    bytes.sort();
    (top, bytes)
}

/// The files an open of the repaired `store` serves (named, and /lost+found's sorted).
fn repaired_files(store: &Path) -> (BTreeMap<String, Vec<u8>>, Vec<Vec<u8>>) {
    let r = fsck::repair(store, &NoProgress).unwrap();
    assert!(r.unrepairable.is_none() && (r.repaired || r.clean), "{r:?}");
    let fs = Rampart::open(store, &options()).unwrap();
    let (named, mut found) = files_in(&fs);
    fs.close().unwrap();
    found.sort();
    (named, found)
}

/// Review of decision 0133: the repair removed the pair before its checkpoint was written,
/// and put a new journal over the old one before: a failed write lost the store.
#[test]
fn a_repair_that_cannot_write_its_checkpoint_keeps_every_file_it_rebuilds_from() {
    let (dir, template) = template_dir();
    let baseline = dir.path().join("baseline");
    pair_and_cut_journal(&template, &baseline);
    let want = repaired_files(&baseline);
    assert!(
        want.0.contains_key("a") && want.0.contains_key("b"),
        "{want:?}"
    );
    let store = dir.path().join("failing");
    pair_and_cut_journal(&template, &store);
    let before = store_files(&store);
    // A folder where the checkpoint's temporary file goes: writing it fails.
    std::fs::create_dir(store.join("checkpoint.tmp")).unwrap();
    let failed = fsck::repair(&store, &NoProgress);
    assert!(
        failed.as_ref().is_err() || failed.as_ref().is_ok_and(|r| !r.repaired),
        "{failed:?}"
    );
    assert_eq!(
        store_files(&store),
        before,
        "a failed repair changed the store"
    );
    std::fs::remove_dir(store.join("checkpoint.tmp")).unwrap();
    assert_eq!(repaired_files(&store), want, "the second repair");
}

/// The same repair through the crash simulator: a power cut before any of its sync points
/// leaves a store that the next repair rebuilds with the same files.
#[test]
fn a_repair_cut_at_any_sync_point_can_be_run_again() {
    use rampart_core::persist::device::{CrashImages, CrashMode, Device, Faults, SimDevice};
    let (dir, template) = template_dir();
    let baseline = dir.path().join("baseline");
    pair_and_cut_journal(&template, &baseline);
    let want = repaired_files(&baseline);
    let store = dir.path().join("simulated");
    pair_and_cut_journal(&template, &store);
    let sim = std::sync::Arc::new(SimDevice::new(7));
    for (name, bytes) in listing(&store) {
        let hosted = host_files(&store).contains_key(&name);
        let name = if hosted { format!("data/{name}") } else { name };
        sim.write(&name, &bytes).unwrap();
        sim.sync(&name).unwrap();
    }
    sim.set_faults(Faults {
        crash_images: Some(CrashImages {
            mode: CrashMode::LoseUnsynced,
            at: None,
            ops: rampart_core::persist::device::faults::ALL_SYNC_OPS,
        }),
        ..Faults::default()
    });
    let r = fsck::repair_through(&store, sim.clone(), &NoProgress).unwrap();
    assert!(r.repaired, "{r:?}");
    let images = sim.take_crash_images();
    assert!(images.len() > 3, "{} sync points", images.len());
    for (i, image) in images.iter().enumerate() {
        let cut = dir.path().join(format!("cut-{i}"));
        std::fs::create_dir_all(cut.join("data")).unwrap();
        for dir in [&cut, &cut.join("data")] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        std::fs::copy(store.join("superblock"), cut.join("superblock")).unwrap();
        for name in image.names() {
            if let Some(bytes) = image.read(&name).unwrap() {
                std::fs::write(cut.join(&name), bytes).unwrap();
            }
        }
        assert_eq!(repaired_files(&cut), want, "a crash before sync point {i}");
    }
}

/// Review of decision 0133: an error reading the journal was taken for a lost journal, and
/// the repair gave up changes it may hold.
#[test]
fn a_journal_that_cannot_be_read_is_not_given_up() {
    let (dir, template) = template_dir();
    let store = dir.path().join("unreadable");
    copy(&template, &store);
    damage(&store, Part::Checkpoint, Damage::Deleted);
    let journal = std::fs::read(store.join("journal")).unwrap();
    // A folder in its place: opening it works, reading it fails (EISDIR), as EIO would.
    std::fs::remove_file(store.join("journal")).unwrap();
    std::fs::create_dir(store.join("journal")).unwrap();
    let before = store_files(&store);
    let r = fsck::repair(&store, &NoProgress).unwrap();
    let why = r.unrepairable.clone().unwrap_or_default();
    assert!(
        why.contains("cannot be read") && why.contains("may be intact"),
        "{r:?}"
    );
    assert!(!r.repaired, "{r:?}");
    assert_eq!(store_files(&store), before, "an unrepairable store changed");
    // Readable again: the whole chain gives every file back.
    std::fs::remove_dir(store.join("journal")).unwrap();
    std::fs::write(store.join("journal"), journal).unwrap();
    let (named, _) = repaired_files(&store);
    for (name, bytes) in contents() {
        assert_eq!(named.get(name), Some(&bytes), "{name}");
    }
}

/// Review of decision 0133: a journal that starts past the backup (a gap) was given up
/// before its op numbers were counted, and the repaired checkpoint could hand them out again.
#[test]
fn a_repair_never_reuses_the_op_numbers_of_a_journal_it_gives_up() {
    let (dir, template) = template_dir();
    let store = dir.path().join("gap");
    copy(&template, &store);
    damage(&store, Part::Checkpoint, Damage::Deleted);
    let old = journal::Header::decode(&std::fs::read(store.join("journal")).unwrap()).unwrap();
    let base_seq = 1_000_000;
    let header = journal::Header { base_seq, ..old };
    let mut bytes = header.encode_zeros_ahead().to_vec();
    bytes.resize(bytes.len() + 4096, 0);
    std::fs::write(store.join("journal"), bytes).unwrap();
    let r = fsck::repair(&store, &NoProgress).unwrap();
    assert!(r.repaired, "{r:?}");
    let image = std::fs::read(store.join("checkpoint")).unwrap();
    let seq = rampart_core::persist::checkpoint::Header::decode(&image)
        .unwrap()
        .seq;
    assert!(seq >= base_seq, "the repaired checkpoint ends at op {seq}");
}

/// The repair's report counts the journal's own ops apart from journal.prev's.
#[test]
fn the_repair_says_how_many_ops_of_each_journal_it_kept() {
    let (dir, template) = template_dir();
    let store = dir.path().join("counts");
    pair_and_cut_journal(&template, &store);
    let r = fsck::check(&store, &NoProgress).unwrap();
    let said = r
        .problems
        .iter()
        .find(|p| p.contains("cannot continue it"))
        .unwrap_or_else(|| panic!("{r:?}"));
    let of_prev = format!("of {})", store.join("journal.prev").display());
    assert!(
        said.contains("replayed onto it (and ") && said.contains(&of_prev),
        "{said}"
    );
    assert!(r.replay.ops_applied > 0, "{r:?}");
}
