//! Golden bytes: the encodings of format version 1 as the release that introduced them wrote
//! them, pinned. A store written by that release must still decode, and this build must still
//! write the same bytes; a change here is a format change (docs/FORMAT.md), never a test fix.

use rampart_core::op::Op;
use rampart_core::persist::{checkpoint, journal};
use rampart_core::store::superblock::Superblock;
use rampart_core::{Durability, Engine, EngineConfig, FileKind};

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

/// Format version 1's superblock of [`STORE_ID`], made at [`CREATED_NS`].
const SUPERBLOCK: &str = "
    52414d50 41525400 01000000 00000000 72616d70 6172742d 676f6c64 656e2121
    15cd853d fe9c9717 00000000 00000000 00000000 00000000 00000000 b152b441";

/// A journal header of [`STORE_ID`] whose first op is 0x0102_0304_0506.
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

#[test]
fn superblock_bytes_are_pinned() {
    let sb = Superblock {
        format_version: 1,
        flags: 0,
        store_id: STORE_ID,
        created_ns: CREATED_NS,
    };
    assert_eq!(hex(&sb.encode()), hex(&unhex(SUPERBLOCK)));
    assert_eq!(
        Superblock::decode(&unhex(SUPERBLOCK), "golden").unwrap(),
        sb
    );
}

#[test]
fn journal_header_bytes_are_pinned() {
    let header = journal::Header {
        store_id: STORE_ID,
        base_seq: 0x0102_0304_0506,
        created_ns: CREATED_NS,
    };
    assert_eq!(hex(&header.encode()), hex(&unhex(JOURNAL_HEADER)));
    assert_eq!(journal::Header::decode(&unhex(JOURNAL_HEADER)), Ok(header));
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
    // Encoding the decoded state again gives back exactly the same bytes.
    let again = checkpoint::encode(&state, header.store_id, header.seq, header.created_ns);
    assert_eq!(hex(&again), hex(CHECKPOINT_V1));

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
