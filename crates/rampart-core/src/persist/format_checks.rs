//! The properties every decoder of the on-disk formats must have, as functions that panic when
//! one does not hold: the fuzz targets (`fuzz/`) and the property tests run the same checks,
//! so `cargo test` exercises what the fuzzer does, without nightly.
//!
//! Each takes arbitrary bytes. Arbitrary bytes almost never pass a checksum, so most checks
//! read a first "shape" byte that may have them framed validly first (a right magic, version
//! and checksum around them), so that the decoders behind the checksums are reached too.

use crate::engine::{Ctx, Engine, EngineConfig};
use crate::op::Op;
use crate::persist::{checkpoint, codec, journal};
use crate::store::superblock::{self, Superblock};

/// Sets the 4 bytes at `at` to the crc32c of `covered`.
fn put_crc(bytes: &mut [u8], covered: std::ops::Range<usize>, at: usize) {
    let crc = crc32c::crc32c(&bytes[covered]);
    bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Splits off the shape byte (0 for empty input).
fn shape(data: &[u8]) -> (u8, &[u8]) {
    data.split_first().map_or((0, data), |(s, rest)| (*s, rest))
}

/// `Superblock::decode`: never panics; what decodes encodes back to the same first 40 bytes
/// (the 20 reserved ones are not read) and decodes again to the same superblock.
pub fn superblock(data: &[u8]) {
    let (shape, rest) = shape(data);
    let mut bytes = rest.to_vec();
    if shape & 1 == 1 && bytes.len() >= superblock::SUPERBLOCK_BYTES {
        bytes[..8].copy_from_slice(&superblock::MAGIC);
        if shape & 2 == 0 {
            bytes[8..12].copy_from_slice(&superblock::FORMAT_VERSION.to_le_bytes());
        }
        put_crc(&mut bytes, 0..60, 60);
    }
    if let Ok(sb) = Superblock::decode(&bytes, "fuzz") {
        let again = sb.encode();
        assert_eq!(again[..40], bytes[..40], "{sb:?}");
        assert_eq!(Superblock::decode(&again, "fuzz").ok(), Some(sb));
    }
}

/// `checkpoint::decode` and `decode_for_repair` on arbitrary bytes, or (by the shape byte) on
/// a valid header and checksum around arbitrary body bytes. Never a panic; see
/// [`checkpoint_decodes_consistently`] for what must hold of what decodes.
pub fn checkpoint(data: &[u8]) {
    let (shape, rest) = shape(data);
    if shape & 1 == 0 {
        return checkpoint_decodes_consistently(rest);
    }
    let header = checkpoint::Header {
        version: checkpoint::VERSION,
        store_id: [7; 16],
        seq: 42,
        created_ns: 1_700_000_000_000_000_000,
        body_len: rest.len() as u64,
    };
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(rest);
    bytes.extend_from_slice(&crc32c::crc32c(rest).to_le_bytes());
    checkpoint_decodes_consistently(&bytes);
}

/// A valid image of a small file system (every kind of inode) with `edits` (offset, value)
/// applied to its body and the body's checksum fixed: only the decoder and the invariant
/// checks stand guard.
pub fn checkpoint_mutated(edits: &[u8]) {
    let mut image = sample_engine().with_state(|s| checkpoint::encode(s, [3; 16], 42, 5));
    let body = checkpoint::HEADER_BYTES..image.len() - 4;
    for edit in edits.chunks_exact(3) {
        let at = usize::from(u16::from_le_bytes([edit[0], edit[1]])) % body.len();
        image[body.start + at] = edit[2];
    }
    let crc_at = body.end;
    put_crc(&mut image, body, crc_at);
    checkpoint_decodes_consistently(&image);
}

/// What decodes is a consistent file system, and encoding it is canonical: its image decodes
/// to a state that encodes to the same image. What decodes for repair, once repaired, is
/// consistent too.
fn checkpoint_decodes_consistently(bytes: &[u8]) {
    let config = EngineConfig::default();
    if let Ok((state, header)) = checkpoint::decode(bytes, &config) {
        let image = checkpoint::encode(&state, header.store_id, header.seq, header.created_ns);
        let problems = Engine::from_state(state).check();
        assert!(problems.is_empty(), "{problems:?}");
        let (again, _) = checkpoint::decode(&image, &config).expect("a re-encoded image");
        let image_again =
            checkpoint::encode(&again, header.store_id, header.seq, header.created_ns);
        assert!(image_again == image, "encoding is not canonical");
    }
    if let Ok((mut state, _, problems)) = checkpoint::decode_for_repair(bytes, &config) {
        if !problems.is_empty() {
            state.repair();
        }
        let problems = Engine::from_state(state).check();
        assert!(problems.is_empty(), "after repair: {problems:?}");
    }
}

/// A small file system holding every kind of inode.
fn sample_engine() -> Engine {
    let e = Engine::new(EngineConfig::default());
    let c = Ctx::library(1000, 100);
    let root = crate::attr::ROOT_INO;
    let d = e.mkdir(&c, root, b"dir", 0o755).expect("mkdir");
    let f = e
        .mknod(&c, d.ino, b"file", libc::S_IFREG | 0o644, 0)
        .expect("mknod");
    e.write(&c, f.ino, 0, b"hello", false).expect("write");
    e.write(&c, f.ino, 3 << 16, b"far", false).expect("write");
    e.link(&c, f.ino, root, b"hard").expect("link");
    e.symlink(&c, root, b"link", b"dir/file").expect("symlink");
    e.mknod(&c, root, b"dev", libc::S_IFCHR | 0o600, 0x0501)
        .expect("mknod");
    e.mknod(&c, d.ino, b"fifo", libc::S_IFIFO | 0o600, 0)
        .expect("mknod");
    e.setxattr(&c, f.ino, b"user.k", b"v", 0).expect("setxattr");
    e
}

/// `journal::scan` of arbitrary bytes, or (by the shape byte) of a valid header followed by
/// them. See [`scan_holds_together`].
pub fn journal(data: &[u8]) {
    let (shape, rest) = shape(data);
    if shape & 1 == 0 {
        return scan_holds_together(rest);
    }
    let mut bytes = sample_header().encode().to_vec();
    bytes.extend_from_slice(rest);
    scan_holds_together(&bytes);
}

fn sample_header() -> journal::Header {
    journal::Header {
        store_id: [9; 16],
        base_seq: 100,
        created_ns: 1_700_000_000_000_000_000,
    }
}

/// A valid journal of a few batches, with reserved zeros after them.
pub fn sample_journal() -> Vec<u8> {
    let mut out = sample_header().encode().to_vec();
    let mut builder = journal::BatchBuilder::new(100);
    let data = [0x5a_u8; 300];
    for batch in 0..4u64 {
        for i in 0..=batch {
            let t = 1_700_000_000_000_000_000 + (batch * 10 + i) as i64;
            builder.add(
                &Op::Unlink {
                    parent: 1,
                    name: b"some name",
                    time_ns: t,
                },
                t,
            );
            builder.add(
                &Op::Write {
                    ino: 5 + i,
                    offset: i << 12,
                    data: &data[..(batch * 70) as usize],
                    time_ns: t,
                    kill_suidgid: false,
                },
                t,
            );
        }
        out.extend(builder.take_batch().expect("a batch"));
    }
    out.resize(out.len() + 512, 0);
    out
}

/// A valid journal ([`sample_journal`]) with bytes changed ((offset, xor mask) in 3 bytes
/// each) and, if `data` has a byte left over, cut to a length it gives. Besides
/// [`scan_holds_together`], the batches wholly before the first change are all found,
/// unchanged.
pub fn journal_mutated(data: &[u8]) {
    let original = sample_journal();
    let mut bytes = original.clone();
    let edits = data.chunks_exact(3);
    if let [cut_lo, cut_hi] = *edits.remainder() {
        bytes.truncate(usize::from(u16::from_le_bytes([cut_lo, cut_hi])) % (original.len() + 1));
    }
    let mut first_change = bytes.len();
    for edit in edits {
        let at = usize::from(u16::from_le_bytes([edit[0], edit[1]]));
        if let Some(byte) = bytes.get_mut(at) {
            *byte ^= edit[2];
            if edit[2] != 0 {
                first_change = first_change.min(at);
            }
        }
    }
    scan_holds_together(&bytes);
    let full = journal::scan(&original).expect("the sample journal");
    let Ok(scan) = journal::scan(&bytes) else {
        assert!(
            first_change < journal::HEADER_BYTES,
            "header refused undamaged"
        );
        return;
    };
    for (i, want) in full.batches.iter().enumerate() {
        let end = want.offset as usize + journal::BATCH_HEADER_BYTES + want.body.len();
        if end > first_change {
            break;
        }
        let got = scan.batches.get(i).expect("an undamaged batch was lost");
        assert_eq!((got.offset, got.first_seq), (want.offset, want.first_seq));
        assert_eq!(got.body, want.body);
    }
}

/// What every scan must satisfy: batches that continue each other's numbering and lie
/// whole inside the valid prefix, whose ops decode or report an error; a clean end of zeros
/// only; and scanning the valid prefix alone finds the same batches, ending clean.
fn scan_holds_together(bytes: &[u8]) {
    let Ok(scan) = journal::scan(bytes) else {
        return;
    };
    let mut at = journal::HEADER_BYTES as u64;
    let mut seq = scan.header.base_seq;
    for batch in &scan.batches {
        assert_eq!((batch.offset, batch.first_seq), (at, seq));
        assert!(batch.op_count >= 1);
        // Ops decode, or the batch reports an error; a batch whose ops all decode is exactly
        // their encodings (records are canonical).
        let mut again = Vec::new();
        let decoded = batch.for_each_op(|_, op| {
            codec::encode_op(&op, batch.base_time_ns, &mut again);
            Ok(())
        });
        assert!(decoded.is_err() || again == batch.body, "batch at {at}");
        at += (journal::BATCH_HEADER_BYTES + batch.body.len()) as u64;
        seq += u64::from(batch.op_count);
    }
    assert_eq!((scan.valid_len, scan.next_seq()), (at, seq));
    match &scan.tail {
        journal::Tail::Clean => {
            assert_eq!(scan.valid_len + scan.reserved_bytes, bytes.len() as u64);
            assert!(bytes[at as usize..].iter().all(|&b| b == 0));
        }
        journal::Tail::Torn {
            offset, bytes: n, ..
        } => {
            assert_eq!(*offset, at);
            assert!(at + n <= bytes.len() as u64 && *n > 0);
        }
        // Past the valid prefix by a group cut short (dropped from it), if any.
        journal::Tail::Cut { offset, .. } => assert!(*offset >= at),
        journal::Tail::Damaged {
            offset,
            next_valid_offset,
            ..
        } => {
            assert!(*offset >= at);
            assert!(*next_valid_offset > *offset && *next_valid_offset < bytes.len() as u64);
        }
    }
    // The valid prefix, with the zeros a writer that keeps them ahead leaves after it.
    let mut prefix_bytes = bytes[..at as usize].to_vec();
    prefix_bytes.resize(
        prefix_bytes.len() + journal::JOURNAL_ZEROS_AHEAD_BYTES_MIN,
        0,
    );
    let prefix = journal::scan(&prefix_bytes).expect("the valid prefix");
    assert_eq!(prefix.tail, journal::Tail::Clean);
    assert_eq!(prefix.batches.len(), scan.batches.len());
}

/// The fuzz targets' checks as property tests (what `scripts/fuzz` runs without nightly).
#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn superblock_decodes_canonically_or_not_at_all(data in vec(any::<u8>(), 0..80)) {
            super::superblock(&data);
        }

        #[test]
        fn journal_scans_hold_together(data in vec(any::<u8>(), 0..400)) {
            super::journal(&data);
        }

        #[test]
        fn damaged_journals_keep_their_undamaged_batches(data in vec(any::<u8>(), 0..20)) {
            super::journal_mutated(&data);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn checkpoints_decode_consistently_or_not_at_all(data in vec(any::<u8>(), 0..400)) {
            super::checkpoint(&data);
        }

        #[test]
        fn mutated_checkpoints_decode_consistently_or_not_at_all(
            data in vec(any::<u8>(), 3..18)
        ) {
            super::checkpoint_mutated(&data);
        }
    }

    #[test]
    fn the_samples_pass_their_own_checks() {
        use crate::persist::{checkpoint, journal};
        let journal = super::sample_journal();
        let scan = journal::scan(&journal).unwrap();
        assert_eq!((scan.batches.len(), scan.tail), (4, journal::Tail::Clean));
        let image = super::sample_engine().with_state(|s| checkpoint::encode(s, [3; 16], 42, 5));
        checkpoint::decode(&image, &crate::engine::EngineConfig::default()).unwrap();
        super::journal_mutated(&[]);
        super::checkpoint_mutated(&[]);
        let journal = super::sample_journal();
        let mut data = vec![1];
        data.extend_from_slice(&journal[crate::persist::journal::HEADER_BYTES..]);
        super::journal(&data);
    }
}
