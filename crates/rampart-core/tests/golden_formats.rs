//! Golden bytes: the encodings of each format version as the release that introduced them
//! wrote them, pinned. A store written by any of them must still decode, and this build must
//! still write the current version's bytes; a change here is a format change (docs/FORMAT.md),
//! never a test fix. Version 2 of the journal and the checkpoint (the disk tier) added the
//! ops `WriteExtent` and `Migrate` and a tier byte per regular file; version 1's bytes stay
//! pinned below and still decode. Version 3 of the journal added the batch flag
//! `GROUP_CONTINUES` (bit 31 of op_count); version 2's batches still replay as before.

use rampart_core::op::Op;
use rampart_core::persist::{checkpoint, journal};
use rampart_core::store::superblock::Superblock;
use rampart_core::{Durability, Engine, EngineConfig, FileKind, Tier};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

const STORE_ID: [u8; 16] = *b"rampart-golden!!";
const CREATED_NS: i64 = 1_700_000_000_123_456_789;

/// Format version 1's superblock of [`STORE_ID`], made at [`CREATED_NS`] (a store made before
/// the disk tier: the threshold's bytes are zero, the default).
const SUPERBLOCK: &str = "
    52414d50 41525400 01000000 00000000 72616d70 6172742d 676f6c64 656e2121
    15cd853d fe9c9717 00000000 00000000 00000000 00000000 00000000 b152b441";

/// A journal header of version 1 of [`STORE_ID`] whose first op is 0x0102_0304_0506.
const JOURNAL_HEADER: &str = "
    52504a4f 55524e00 01000000 00000000 72616d70 6172742d 676f6c64 656e2121
    06050403 02010000 15cd853d fe9c9717 00000000 00000000 00000000 d7263382";

/// The batch of [`every_op`], starting at op 0x0102_0304_0506, base time [`CREATED_NS`].
const JOURNAL_BATCH: &str = "
    52504a42 b2000000 590576ab 06050403 02010000 0d000000 15cd853d fe9c9717
    01010466 696c6502 02a48302 e8076400 00020101 046c696e 6b0303ff c302e807
    64000466 696c6501 02020104 68617264 d00f0301 04686172 6480897a 04010364
    6972ffa7 d6b90705 01046669 6c650105 6d6f7665 64010a06 026b8083 02008080
    80808020 0e100602 1407d6cb d1a7b8c0 b1e8d001 00070280 80040112 0e68656c
    6c6f2c20 6a6f7572 6e616c08 02802080 40061409 02067573 65722e6b 0576616c
    75650216 0a020675 7365722e 6b180b02 ff1a";

/// One op of every kind (both SetAttr presence patterns), times around [`CREATED_NS`].
fn every_op() -> Vec<Op<'static>> {
    let t = CREATED_NS;
    vec![
        Op::Create {
            parent: 1,
            name: b"file",
            ino: 2,
            generation: 2,
            mode: 0o100644,
            uid: 1000,
            gid: 100,
            rdev: 0,
            target: b"",
            time_ns: t + 1,
        },
        Op::Create {
            parent: 1,
            name: b"link",
            ino: 3,
            generation: 3,
            mode: 0o120777,
            uid: 1000,
            gid: 100,
            rdev: 0,
            target: b"file",
            time_ns: t - 1,
        },
        Op::Link {
            ino: 2,
            parent: 1,
            name: b"hard",
            time_ns: t + 1_000,
        },
        Op::Unlink {
            parent: 1,
            name: b"hard",
            time_ns: t + 1_000_000,
        },
        Op::Rmdir {
            parent: 1,
            name: b"dir",
            time_ns: t - 1_000_000_000,
        },
        Op::Rename {
            parent: 1,
            name: b"file",
            new_parent: 1,
            new_name: b"moved",
            flags: 1,
            time_ns: t + 5,
        },
        Op::SetAttr {
            ino: 2,
            mode: Some(0o100600),
            uid: Some(0),
            gid: None,
            size_bytes: Some(1 << 40),
            atime_ns: None,
            mtime_ns: Some(t + 7),
            ctime_ns: t + 8,
            kill_suidgid: true,
        },
        Op::SetAttr {
            ino: 2,
            mode: None,
            uid: None,
            gid: Some(7),
            size_bytes: None,
            atime_ns: Some(i64::MIN),
            mtime_ns: None,
            ctime_ns: t,
            kill_suidgid: false,
        },
        Op::Write {
            ino: 2,
            offset: 65_536,
            data: b"hello, journal",
            time_ns: t + 9,
            kill_suidgid: true,
        },
        Op::Fallocate {
            ino: 2,
            offset: 4096,
            length: 8192,
            mode: 3,
            time_ns: t + 10,
        },
        Op::SetXattr {
            ino: 2,
            name: b"user.k",
            value: b"value",
            flags: 1,
            time_ns: t + 11,
        },
        Op::RemoveXattr {
            ino: 2,
            name: b"user.k",
            time_ns: t + 12,
        },
        Op::SetDurability {
            ino: 2,
            durability: 255,
            time_ns: t + 13,
        },
    ]
}

/// The superblock of a store made with a large-file threshold of 64 KiB.
const SUPERBLOCK_THRESHOLD: &str = "
    52414d50 41525400 01000000 00000000 72616d70 6172742d 676f6c64 656e2121
    15cd853d fe9c9717 00000100 00000000 00000000 00000000 00000000 9a50dd4e";

#[test]
fn superblock_bytes_are_pinned() {
    let sb = Superblock {
        format_version: 1,
        flags: 0,
        store_id: STORE_ID,
        created_ns: CREATED_NS,
        large_file_threshold_bytes: 0,
    };
    assert_eq!(hex(&sb.encode()), hex(&unhex(SUPERBLOCK)));
    assert_eq!(
        Superblock::decode(&unhex(SUPERBLOCK), "golden").unwrap(),
        sb
    );
    let with_threshold = Superblock {
        large_file_threshold_bytes: 64 << 10,
        ..sb
    };
    assert_eq!(
        hex(&with_threshold.encode()),
        hex(&unhex(SUPERBLOCK_THRESHOLD))
    );
    assert_eq!(
        Superblock::decode(&unhex(SUPERBLOCK_THRESHOLD), "golden").unwrap(),
        with_threshold
    );
}

/// The same journal header in version 3 (batches may carry `GROUP_CONTINUES`), as this build
/// writes it.
const JOURNAL_HEADER_V3: &str = "
    52504a4f 55524e00 03000000 00000000 72616d70 6172742d 676f6c64 656e2121
    06050403 02010000 15cd853d fe9c9717 00000000 00000000 00000000 72b902cf";

/// The same journal header in version 2 (the disk tier's ops).
const JOURNAL_HEADER_V2: &str = "
    52504a4f 55524e00 02000000 00000000 72616d70 6172742d 676f6c64 656e2121
    06050403 02010000 15cd853d fe9c9717 00000000 00000000 00000000 d84d6c6b";

#[test]
fn journal_header_bytes_are_pinned() {
    let header = journal::Header {
        store_id: STORE_ID,
        base_seq: 0x0102_0304_0506,
        created_ns: CREATED_NS,
    };
    assert_eq!(hex(&header.encode()), hex(&unhex(JOURNAL_HEADER_V3)));
    assert_eq!(
        journal::Header::decode(&unhex(JOURNAL_HEADER_V3)),
        Ok(header)
    );
    // Versions 2 and 1 still read.
    assert_eq!(
        journal::Header::decode(&unhex(JOURNAL_HEADER_V2)),
        Ok(header)
    );
    assert_eq!(journal::Header::decode(&unhex(JOURNAL_HEADER)), Ok(header));
}

/// The ops of the disk tier (journal version 2), times around [`CREATED_NS`].
fn disk_tier_ops() -> Vec<Op<'static>> {
    let t = CREATED_NS;
    vec![
        Op::Migrate {
            ino: 2,
            tier: Tier::Disk,
            time_ns: t + 14,
        },
        Op::WriteExtent {
            ino: 2,
            offset: 1 << 20,
            len: 65_536,
            time_ns: t + 15,
            kill_suidgid: true,
        },
        Op::WriteExtent {
            ino: 2,
            offset: 0,
            len: 0,
            time_ns: t - 16,
            kill_suidgid: false,
        },
        Op::Migrate {
            ino: 2,
            tier: Tier::Memory,
            time_ns: t + 17,
        },
    ]
}

/// The batch of [`disk_tier_ops`], starting at op 7, base time [`CREATED_NS`].
const JOURNAL_BATCH_DISK: &str = "
    52504a42 18000000 52a14910 07000000 00000000 04000000 15cd853d fe9c9717
    0d02011c 0c028080 40808004 011e0c02 0000001f 0d020022";

#[test]
fn journal_batch_of_the_disk_tier_ops_is_pinned() {
    let mut builder = journal::BatchBuilder::new(7);
    for op in disk_tier_ops() {
        builder.add(&op, CREATED_NS);
    }
    let batch = builder.take_batch().unwrap();
    assert_eq!(hex(&batch), hex(&unhex(JOURNAL_BATCH_DISK)));
    let mut bytes = journal::Header {
        store_id: STORE_ID,
        base_seq: 7,
        created_ns: CREATED_NS,
    }
    .encode_zeros_ahead()
    .to_vec();
    bytes.extend(unhex(JOURNAL_BATCH_DISK));
    bytes.resize(bytes.len() + 4096, 0);
    let scan = journal::scan(&bytes).unwrap();
    let mut ops = Vec::new();
    for batch in &scan.batches {
        batch
            .for_each_op(|_, op| {
                ops.push(op);
                Ok(())
            })
            .unwrap();
    }
    assert_eq!(ops, disk_tier_ops());
}

/// [`JOURNAL_BATCH_DISK`] flagged `GROUP_CONTINUES` (version 3): the group open at its end
/// goes on in the next batch.
const JOURNAL_BATCH_DISK_CONTINUED: &str = "
    52504a42 18000000 4ff26c8c 07000000 00000000 04000080 15cd853d fe9c9717
    0d02011c 0c028080 40808004 011e0c02 0000001f 0d020022";

/// The batch that ends [`JOURNAL_BATCH_DISK_CONTINUED`]'s group: one `Migrate` at op 11.
const JOURNAL_BATCH_GROUP_END: &str = "
    52504a42 04000000 dc996fb4 0b000000 00000000 01000000 15cd853d fe9c9717
    0d020124";

fn group_end_op() -> Op<'static> {
    Op::Migrate {
        ino: 2,
        tier: Tier::Disk,
        time_ns: CREATED_NS + 18,
    }
}

/// The ops of every batch of a scanned journal, in order.
fn ops_of<'a>(scan: &journal::Scan<'a>) -> Result<Vec<Op<'a>>, journal::JournalError> {
    let mut ops = Vec::new();
    for batch in &scan.batches {
        batch.for_each_op(|_, op| {
            ops.push(op);
            Ok(())
        })?;
    }
    Ok(ops)
}

/// A journal of `header` (hex), then `batches` (hex), then the zeros its writer keeps ahead.
fn journal_of(header: &[u8], batches: &[&str]) -> Vec<u8> {
    let mut bytes = header.to_vec();
    for batch in batches {
        bytes.extend(unhex(batch));
    }
    bytes.resize(bytes.len() + 4096, 0);
    bytes
}

#[test]
fn a_group_continued_over_batches_is_pinned_and_read_whole_or_not_at_all() {
    // The flag is bit 31 of op_count, under the batch's CRC.
    let mut flagged = unhex(JOURNAL_BATCH_DISK);
    flagged[23] |= 0x80;
    let crc = crc32c::crc32c(&flagged[12..]);
    flagged[8..12].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(hex(&flagged), hex(&unhex(JOURNAL_BATCH_DISK_CONTINUED)));
    let mut builder = journal::BatchBuilder::new(11);
    builder.add(&group_end_op(), CREATED_NS);
    let end = builder.take_batch().unwrap();
    assert_eq!(hex(&end), hex(&unhex(JOURNAL_BATCH_GROUP_END)));

    let v3 = journal::Header {
        store_id: STORE_ID,
        base_seq: 7,
        created_ns: CREATED_NS,
    }
    .encode_zeros_ahead();
    // Whole: both batches, every op of the group.
    let whole = journal_of(
        &v3,
        &[JOURNAL_BATCH_DISK_CONTINUED, JOURNAL_BATCH_GROUP_END],
    );
    let scan = journal::scan(&whole).unwrap();
    assert_eq!(scan.tail, journal::Tail::Clean);
    let flags: Vec<bool> = scan.batches.iter().map(|b| b.continues_group).collect();
    assert_eq!(flags, [true, false]);
    let mut want = disk_tier_ops();
    want.push(group_end_op());
    assert_eq!(ops_of(&scan).unwrap(), want);
    // Without the batch that ends it: none of the group, a torn tail from its start.
    let cut = journal_of(&v3, &[JOURNAL_BATCH_DISK_CONTINUED]);
    let scan = journal::scan(&cut).unwrap();
    assert!(scan.batches.is_empty());
    assert_eq!(scan.valid_len, journal::HEADER_BYTES as u64);
    assert_eq!(scan.next_seq(), 7);
    assert!(
        matches!(&scan.tail, journal::Tail::Torn { offset: 64, reason, .. }
            if reason.contains("group of records cut short")),
        "{:?}",
        scan.tail
    );
}

#[test]
fn an_old_journal_replays_as_its_release_read_it() {
    // Version 2 (the release before the flag): its batches replay to the same ops.
    let v2 = unhex(JOURNAL_HEADER_V2);
    let mut at_7 = v2.clone();
    at_7[32..40].copy_from_slice(&7u64.to_le_bytes());
    let crc = crc32c::crc32c(&at_7[..60]);
    at_7[60..64].copy_from_slice(&crc.to_le_bytes());
    let old = journal_of(&at_7, &[JOURNAL_BATCH_DISK, JOURNAL_BATCH_GROUP_END]);
    let scan = journal::scan(&old).unwrap();
    assert_eq!(scan.tail, journal::Tail::Clean);
    assert!(scan.batches.iter().all(|b| !b.continues_group));
    let mut want = disk_tier_ops();
    want.push(group_end_op());
    assert_eq!(ops_of(&scan).unwrap(), want);
    // Bit 31 of op_count means nothing there: such a batch is read as that release read it,
    // a count past its records (an op that does not decode), never as a group.
    let flagged = journal_of(&at_7, &[JOURNAL_BATCH_DISK_CONTINUED]);
    let scan = journal::scan(&flagged).unwrap();
    assert_eq!(scan.batches.len(), 1);
    assert!(!scan.batches[0].continues_group);
    assert_eq!(scan.batches[0].op_count, (1 << 31) | 4);
    assert!(ops_of(&scan).is_err());
}

#[test]
fn journal_batch_of_every_op_is_pinned() {
    let mut builder = journal::BatchBuilder::new(0x0102_0304_0506);
    for op in every_op() {
        builder.add(&op, CREATED_NS);
    }
    let batch = builder.take_batch().unwrap();
    assert_eq!(hex(&batch), hex(&unhex(JOURNAL_BATCH)));

    // The golden journal (header, batch, reserved zeros) scans and replays to the same ops.
    let mut bytes = unhex(JOURNAL_HEADER);
    bytes.extend(unhex(JOURNAL_BATCH));
    let valid_len = bytes.len() as u64;
    bytes.resize(bytes.len() + 4096, 0);
    let scan = journal::scan(&bytes).unwrap();
    assert_eq!(scan.tail, journal::Tail::Clean);
    assert_eq!((scan.valid_len, scan.reserved_bytes), (valid_len, 4096));
    assert_eq!(scan.next_seq(), 0x0102_0304_0506 + every_op().len() as u64);
    let mut ops = Vec::new();
    for batch in &scan.batches {
        assert_eq!(batch.base_time_ns, CREATED_NS);
        batch
            .for_each_op(|seq, op| {
                ops.push((seq, op));
                Ok(())
            })
            .unwrap();
    }
    let expected: Vec<_> = (0x0102_0304_0506..).zip(every_op()).collect();
    assert_eq!(ops, expected);
}

/// A checkpoint written by format version 1's first release (`fixtures/checkpoint-v1.bin`):
/// store [`STORE_ID`], seq 42, made at [`CREATED_NS`], of a file system holding a directory, a
/// file with two chunks and a hard link, a symlink, character and block devices, a fifo, a
/// socket, xattrs, a before-return file and a volatile one (its data never stored).
const CHECKPOINT_V1: &[u8] = include_bytes!("fixtures/checkpoint-v1.bin");
/// [`CHECKPOINT_V1`]'s file system as version 2 writes it.
const CHECKPOINT_V2: &[u8] = include_bytes!("fixtures/checkpoint-v2.bin");
/// [`CHECKPOINT_V2`] after `/dir/file` migrated to the disk tier (size only, no bytes).
const CHECKPOINT_V2_DISK: &[u8] = include_bytes!("fixtures/checkpoint-v2-disk.bin");

#[test]
fn checkpoint_with_a_disk_tier_file_is_pinned() {
    let (mut state, header) = checkpoint::decode(CHECKPOINT_V2, &EngineConfig::default()).unwrap();
    let e = Engine::from_state(
        checkpoint::decode(CHECKPOINT_V2, &EngineConfig::default())
            .unwrap()
            .0,
    );
    let file = e.lookup_path(b"/dir/file").unwrap().ino;
    state
        .apply(&Op::Migrate {
            ino: file,
            tier: Tier::Disk,
            time_ns: CREATED_NS,
        })
        .unwrap();
    let image = checkpoint::encode(&state, header.store_id, header.seq, header.created_ns);
    assert_eq!(hex(&image), hex(CHECKPOINT_V2_DISK));
    // The file's bytes ("hello" and "far") are no longer in the image.
    assert!(
        image.len() + 8 <= CHECKPOINT_V2.len(),
        "no file bytes in the image"
    );
    let (state, _) = checkpoint::decode(CHECKPOINT_V2_DISK, &EngineConfig::default()).unwrap();
    let e = Engine::from_state(state);
    assert!(e.check().is_empty(), "{:?}", e.check());
    assert_eq!(e.tier(file), Ok(Tier::Disk));
    let attr = e.lookup_path(b"/dir/file").unwrap();
    assert_eq!(attr.size_bytes, 3 * 65536 + 13);
    assert_eq!(
        e.tier(e.lookup_path(b"/sure").unwrap().ino),
        Ok(Tier::Memory)
    );
}

#[test]
fn checkpoint_of_every_inode_kind_is_pinned() {
    let (state, header) = checkpoint::decode(CHECKPOINT_V1, &EngineConfig::default()).unwrap();
    assert_eq!(
        (header.store_id, header.seq, header.created_ns),
        (STORE_ID, 42, CREATED_NS)
    );
    assert_eq!(
        checkpoint::Header::decode(CHECKPOINT_V1).unwrap().body_len,
        CHECKPOINT_V1.len() as u64 - 64 - 4
    );
    assert_eq!(header.version, 1);
    // Encoding the decoded state again gives version 2's bytes (a tier byte per file), which
    // are pinned too (`fixtures/checkpoint-v2.bin`) and decode to the same state.
    let again = checkpoint::encode(&state, header.store_id, header.seq, header.created_ns);
    assert_eq!(hex(&again), hex(CHECKPOINT_V2));
    let (state, header) = checkpoint::decode(CHECKPOINT_V2, &EngineConfig::default()).unwrap();
    assert_eq!((header.version, header.seq), (2, 42));

    let e = Engine::from_state(state);
    assert!(e.check().is_empty(), "{:?}", e.check());
    let content = |path: &[u8], offset: u64, len: u32| {
        let mut buf = Vec::new();
        e.read(e.lookup_path(path).unwrap().ino, offset, len, &mut buf)
            .unwrap();
        buf
    };
    assert_eq!(content(b"/dir/file", 0, 5), b"hello");
    assert_eq!(content(b"/dir/file", 3 * 65536 + 10, 10), b"far");
    assert_eq!(content(b"/sure", 0, 100), b"synced");
    let file = e.lookup_path(b"/dir/file").unwrap();
    assert_eq!((file.nlink, file.size_bytes), (2, 3 * 65536 + 13));
    assert_eq!(e.lookup_path(b"/hard").unwrap().ino, file.ino);
    assert_eq!(e.getxattr(file.ino, b"user.k").unwrap(), b"v");
    let dir = e.lookup_path(b"/dir").unwrap();
    assert_eq!(e.getxattr(dir.ino, b"trusted.t").unwrap(), b"");
    let link = e.lookup_path(b"/link").unwrap();
    assert_eq!(e.readlink(link.ino).unwrap(), b"dir/file");
    for (path, kind, rdev) in [
        (&b"/dev"[..], FileKind::CharDevice, 0x0501),
        (b"/blk", FileKind::BlockDevice, 0x0802),
        (b"/fifo", FileKind::NamedPipe, 0),
        (b"/dir/sock", FileKind::Socket, 0),
    ] {
        let a = e.lookup_path(path).unwrap();
        assert_eq!(
            (a.kind, a.rdev),
            (kind, rdev),
            "{}",
            String::from_utf8_lossy(path)
        );
    }
    assert_eq!(
        e.lookup_path(b"/sure").unwrap().durability,
        Durability::BeforeReturn
    );
    // The volatile file is in the image (recovery removes it), without its data.
    let scratch = e.lookup_path(b"/scratch").unwrap();
    assert_eq!(
        (scratch.durability, scratch.size_bytes),
        (Durability::Volatile, 0)
    );
    assert!(e.lookup_path(b"/gone").is_err());
}

/// Version 1 of the `mirror` file of [`STORE_ID`], naming the other copy `/mnt/b/store`.
const MIRROR_RECORD: &str = "
    52414d50 4d495252 01000000 00000000 72616d70 6172742d 676f6c64 656e2121
    0c000000 2f6d6e74 2f622f73 746f7265 03a2a1a2";

#[test]
fn mirror_record_bytes_are_pinned() {
    use rampart_core::store::mirror::MirrorRecord;
    let record = MirrorRecord {
        store_id: STORE_ID,
        peer: std::path::PathBuf::from("/mnt/b/store"),
    };
    let bytes = record.encode();
    assert_eq!(
        hex(&bytes),
        hex(&unhex(MIRROR_RECORD)),
        "the mirror record's layout changed"
    );
    assert_eq!(MirrorRecord::decode(&unhex(MIRROR_RECORD)).unwrap(), record);
    // A store without the file is an unmirrored store, as every store made before it.
    let dir = tempfile::tempdir().unwrap();
    rampart_core::store::mkfs(&dir.path().join("s")).unwrap();
    assert_eq!(
        rampart_core::store::mirror::read_record(&dir.path().join("s")).unwrap(),
        None
    );
}

/// Version 1 of the `freed` note (decision 0119) naming two host files: magic `RPFREED\0`,
/// version, count, each name with its u16 length, crc32c of all before it.
const FREED_NOTE_V1: &str = "
    525046524545440001000000020000001e00646174612f303030303030303030
    303030303030322d30303030303030311e00646174612f303030303030303030
    303030303031312d30303030303030337228c9ef";

#[test]
fn freed_note_bytes_are_pinned() {
    use rampart_core::persist::freed_note;
    let names = vec![
        "data/0000000000000002-00000001".to_owned(),
        "data/0000000000000011-00000003".to_owned(),
    ];
    assert_eq!(
        hex(&freed_note::encode(&names)),
        hex(&unhex(FREED_NOTE_V1)),
        "the freed note's layout changed"
    );
    assert_eq!(freed_note::decode(&unhex(FREED_NOTE_V1)).unwrap(), names);
}
