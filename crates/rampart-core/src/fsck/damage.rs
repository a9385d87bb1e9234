//! What lies after the damage of a journal: the valid batches that `fsck --repair` would drop
//! with it, counted so that the report can say how much is lost.

use crate::persist::journal::{self, Tail};

/// Most damaged regions of one journal that are looked past to count what follows them.
const DAMAGE_SCAN_MAX: usize = 64;

/// The valid batches found after the damage of a journal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AfterDamage {
    pub batches: u64,
    pub ops: u64,
    /// The sequence number after the last of them.
    pub next_seq: u64,
    /// The offset where the last of them ends.
    pub end: u64,
}

/// Counts the valid batches of `bytes` from `at` (a batch that passes its checksum, after
/// damage), looking past at most `DAMAGE_SCAN_MAX` damaged regions.
pub fn count_after_damage(bytes: &[u8], store_id: [u8; 16], mut at: usize) -> AfterDamage {
    // Each valid batch found after damage is scanned as the start of a journal of its own: a
    // header naming its first op is written just before it (in a copy; what was there has
    // been scanned already), so the journal's own scan finds the batches and the damage.
    let mut work = bytes.to_vec();
    let mut found = AfterDamage {
        end: at as u64,
        ..AfterDamage::default()
    };
    for _ in 0..DAMAGE_SCAN_MAX {
        if at < journal::HEADER_BYTES {
            break;
        }
        let Some(batch) = journal::batch_at(&work, at) else {
            break;
        };
        let header = journal::Header {
            store_id,
            base_seq: batch.first_seq,
            created_ns: 0,
        };
        let start = at - journal::HEADER_BYTES;
        work[start..at].copy_from_slice(&header.encode());
        let Ok(scan) = journal::scan(&work[start..]) else {
            break;
        };
        found.batches += scan.batches.len() as u64;
        found.ops += scan.op_count();
        found.next_seq = found.next_seq.max(scan.next_seq());
        found.end = found.end.max((start as u64) + scan.valid_len);
        match scan.tail {
            Tail::Damaged {
                next_valid_offset, ..
            } if next_valid_offset as usize > journal::HEADER_BYTES => {
                at = start + next_valid_offset as usize;
            }
            _ => break,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Op;

    #[test]
    fn counts_what_follows_several_damages() {
        let id = [5; 16];
        let mut bytes = journal::Header {
            store_id: id,
            base_seq: 10,
            created_ns: 0,
        }
        .encode()
        .to_vec();
        let mut builder = journal::BatchBuilder::new(10);
        let mut starts = Vec::new();
        for i in 0..5u8 {
            for _ in 0..=i {
                builder.add(
                    &Op::Unlink {
                        parent: 1,
                        name: b"x",
                        time_ns: 1,
                    },
                    1,
                );
            }
            starts.push(bytes.len());
            bytes.extend(builder.take_batch().unwrap());
        }
        // damage batches 1 and 3: batches 2 and 4 (3 + 5 ops) are valid after the first damage
        bytes[starts[1] + journal::BATCH_HEADER_BYTES] ^= 1;
        bytes[starts[3] + journal::BATCH_HEADER_BYTES] ^= 1;
        let scan = journal::scan(&bytes).unwrap();
        let Tail::Damaged {
            next_valid_offset, ..
        } = scan.tail
        else {
            panic!("{:?}", scan.tail)
        };
        assert_eq!(next_valid_offset as usize, starts[2]);
        let found = count_after_damage(&bytes, id, starts[2]);
        assert_eq!((found.batches, found.ops, found.next_seq), (2, 8, 10 + 15));
        assert_eq!(found.end, bytes.len() as u64); // the last valid batch ends the journal
                                                   // Nothing valid at the offset: nothing counted.
        assert_eq!(count_after_damage(&bytes, id, starts[1]).batches, 0);
    }
}
