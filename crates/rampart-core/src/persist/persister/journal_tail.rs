//! The journal at start: a new one, or the valid prefix kept; what follows that prefix (a
//! torn tail, a group of records cut short) is overwritten with zeros, never truncated, in an
//! order a crash cannot turn into damage.

use super::{JOURNAL_TMP, RESERVE_ZEROS, TAIL_CHUNK_BYTES};
use crate::persist::device::Device;
use crate::persist::journal::{self, BATCH_BODY_BYTES_MAX};
use crate::persist::recovery::JOURNAL_FILE;
use crate::time::now_ns;

pub(super) fn journal_header(store_id: [u8; 16], base_seq: u64) -> Vec<u8> {
    journal::Header {
        store_id,
        base_seq,
        created_ns: now_ns(),
    }
    .encode_zeros_ahead()
    .to_vec()
}

/// Opens the journal at persistence's start: returns its committed length and its file's
/// length. `deferred`: a repair keeps the journal as it is until its first checkpoint (see
/// [`Backup::KeepWithJournalUntilReplaced`]); else a new one when `journal_valid_len` is 0,
/// or the valid prefix kept with zeros after it.
pub(super) fn open_journal(
    device: &dyn Device,
    store_id: [u8; 16],
    next_seq: u64,
    journal_valid_len: u64,
    deferred: bool,
) -> std::io::Result<(u64, u64)> {
    if deferred {
        // The first checkpoint makes the new journal from its header alone (nothing is
        // committed before it).
        debug_assert_eq!(journal_valid_len, 0, "a kept journal continues nothing");
        return Ok((journal::HEADER_BYTES as u64, 0));
    }
    if journal_valid_len == 0 {
        let mut new = journal_header(store_id, next_seq);
        new.resize(new.len() + journal::JOURNAL_ZEROS_AHEAD_BYTES_MIN, 0);
        device.write(JOURNAL_TMP, &new)?;
        device.sync(JOURNAL_TMP)?;
        device.rename(JOURNAL_TMP, JOURNAL_FILE)?;
        return Ok((journal::HEADER_BYTES as u64, new.len() as u64));
    }
    // Zeros over whatever follows the valid prefix (a torn tail), and at least the minimum
    // after it; never a truncation, which a crash could apply before the zeros and so leave
    // a torn batch longer than the file (taken for a cut).
    let file_bytes = device.len(JOURNAL_FILE)?.unwrap_or(0);
    let content_end = journal_content_end(device, journal_valid_len, file_bytes)?;
    let zeros_to =
        content_end.max(journal_valid_len + journal::JOURNAL_ZEROS_AHEAD_BYTES_MIN as u64);
    zero_tail(device, journal_valid_len, content_end, zeros_to)?;
    Ok((journal_valid_len, file_bytes.max(zeros_to)))
}

/// Writes `len` zeros into `name` from `offset` (at most its length), in reserve-sized pieces.
pub(super) fn write_zeros(
    device: &dyn Device,
    name: &str,
    offset: u64,
    len: u64,
) -> std::io::Result<()> {
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(RESERVE_ZEROS.len() as u64) as usize;
        device.write_at(name, at, &RESERVE_ZEROS[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// Overwrites the journal's bytes `[valid_len, zeros_to)` with zeros, whole-looking batches
/// last first, each synced before the one before it: the tail may hold a group of records
/// whose last batch is missing (valid batches that recovery drops, decision 0103), and a
/// crash while zeroing them in file order could leave a later one valid after an invalid
/// one, which the next scan must take for damage. Zeroed from the end, whatever a crash
/// leaves is still whole batches of that group, then a torn one or zeros.
pub(super) fn zero_tail(
    device: &dyn Device,
    valid_len: u64,
    content_end: u64,
    zeros_to: u64,
) -> std::io::Result<()> {
    let mut starts = vec![valid_len];
    let mut at = valid_len;
    let mut head = [0u8; journal::BATCH_HEADER_BYTES];
    while at + head.len() as u64 <= content_end
        && starts.len() <= crate::limits::JOURNAL_TAIL_BATCHES_ZEROED_MAX
    {
        if device.read_at(JOURNAL_FILE, at, &mut head)? < head.len() {
            break;
        }
        let Some(batch) = journal::BatchHeader::read(&head) else {
            break;
        };
        let end = at + (journal::BATCH_HEADER_BYTES + batch.body_len as usize) as u64;
        if batch.body_len as usize > BATCH_BODY_BYTES_MAX || end > content_end {
            break;
        }
        at = end;
        starts.push(at);
    }
    let mut to = zeros_to;
    for &from in starts.iter().rev() {
        if from < to {
            write_zeros(device, JOURNAL_FILE, from, to - from)?;
            device.sync(JOURNAL_FILE)?;
            to = from;
        }
    }
    Ok(())
}

/// Where the journal's content ends from `from` on (the last nonzero byte, plus one), reading
/// up to `file_bytes`; `from` if only zeros follow.
pub(super) fn journal_content_end(
    device: &dyn Device,
    from: u64,
    file_bytes: u64,
) -> std::io::Result<u64> {
    let mut end = from;
    let mut at = from;
    let mut chunk = vec![0u8; TAIL_CHUNK_BYTES.min(file_bytes.saturating_sub(from) as usize)];
    while at < file_bytes {
        let n = device.read_at(JOURNAL_FILE, at, &mut chunk)?;
        if n == 0 {
            break;
        }
        if let Some(i) = chunk[..n].iter().rposition(|&b| b != 0) {
            end = at + i as u64 + 1;
        }
        at += n as u64;
    }
    Ok(end)
}
