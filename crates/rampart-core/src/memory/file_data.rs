//! The contents of a regular file held in memory.
//!
//! A file is a flat vector of 64 KiB chunks: no indirection tree. A chunk holds the bytes from
//! its start up to its own length; the rest of its range reads as zeros, and an empty chunk is a
//! hole that costs no memory. A small file is one chunk that grows with the file, so a 512-byte
//! file costs about 512 bytes of data.
//!
//! Invariant: no chunk holds bytes at or past the file size (checked by [`FileData::check`]),
//! so growing a file by truncate exposes zeros, never old bytes.
//!
//! A chunk's capacity may run past its bytes: `fallocate` reserves memory that way
//! ([`FileData::reserve`]), so that later writes into the range need no more and cannot fail
//! with ENOSPC. Reserved capacity is charged like bytes; a chunk with capacity and no bytes
//! is still a hole when read.

use crate::error::Broken;

pub use crate::limits::CHUNK_BYTES;

pub use crate::limits::FILE_SIZE_BYTES_MAX;

#[derive(Debug, Default)]
pub struct FileData {
    chunks: Vec<Vec<u8>>,
}

/// What an operation changed: heap bytes held and content bytes stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    pub heap_bytes: i64,
    pub stored_bytes: i64,
}

const TABLE_ENTRY_BYTES: i64 = std::mem::size_of::<Vec<u8>>() as i64;

fn chunk_heap(c: &[u8], cap: usize) -> (i64, i64) {
    (cap as i64, c.len() as i64)
}

impl FileData {
    /// Bytes of heap memory held (chunk capacities and the chunk table).
    pub fn heap_bytes(&self) -> u64 {
        let table = self.chunks.capacity() * std::mem::size_of::<Vec<u8>>();
        let data: usize = self.chunks.iter().map(Vec::capacity).sum();
        (table + data) as u64
    }

    /// The chunks that hold bytes, with their index (holes left out).
    pub fn chunks(&self) -> impl Iterator<Item = (usize, &[u8])> {
        self.chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.is_empty())
            .map(|(i, c)| (i, c.as_slice()))
    }

    /// Rebuilds a file from chunks given in increasing index order (a checkpoint); the caller
    /// checks the result against the size with [`FileData::check`].
    pub fn from_chunks(
        chunks: impl IntoIterator<Item = (usize, Vec<u8>)>,
    ) -> Result<FileData, Broken> {
        let mut data = FileData::default();
        for (index, bytes) in chunks {
            if bytes.is_empty() || bytes.len() > CHUNK_BYTES {
                return Err(Broken(format!("chunk {index} holds {} bytes", bytes.len())));
            }
            if index < data.chunks.len() {
                return Err(Broken(format!("chunk {index} out of order")));
            }
            if index as u64 >= FILE_SIZE_BYTES_MAX / CHUNK_BYTES as u64 {
                return Err(Broken(format!(
                    "chunk {index} is past the largest file size"
                )));
            }
            data.chunks.resize_with(index, Vec::new);
            let mut chunk = bytes;
            chunk.shrink_to_fit();
            data.chunks.push(chunk);
        }
        Ok(data)
    }

    /// Bytes of contents held (not counting holes).
    pub fn stored_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.len() as u64).sum()
    }

    /// Bytes allocated to the contents (`st_blocks`): the bytes held, and the capacity
    /// `fallocate` reserved in chunks that hold no bytes yet. A chunk holding bytes counts
    /// them only: its spare capacity may be growth slack, which a checkpoint does not keep,
    /// and `st_blocks` must not change across a remount for that.
    pub fn allocated_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .map(|c| if c.is_empty() { c.capacity() } else { c.len() } as u64)
            .sum()
    }

    /// How many leading bytes of `data` the file already holds at `offset`: stored (a hole
    /// ends them, even where `data` is zeros, so leaving them out of a write changes neither
    /// the bytes nor the memory held) and equal.
    pub fn same_prefix_bytes(&self, offset: u64, data: &[u8]) -> usize {
        let mut same = 0usize;
        while same < data.len() {
            let at = offset + same as u64;
            let Some(chunk) = usize::try_from(at / CHUNK_BYTES as u64)
                .ok()
                .and_then(|i| self.chunks.get(i))
            else {
                break;
            };
            let within = (at % CHUNK_BYTES as u64) as usize;
            if within >= chunk.len() {
                break;
            }
            let n = (chunk.len() - within).min(data.len() - same);
            let stored = &chunk[within..within + n];
            match stored
                .iter()
                .zip(&data[same..same + n])
                .position(|(a, b)| a != b)
            {
                Some(i) => return same + i,
                None => same += n,
            }
        }
        same
    }

    /// Heap bytes a write of `len` bytes at `offset` may add at most; used to refuse a write
    /// before it starts rather than fail half-way. Capacity already held (reserved by
    /// `fallocate`, or slack) is counted, so a write into a reserved range needs nothing.
    pub fn growth_bound_bytes(&self, offset: u64, len: usize) -> u64 {
        self.growth_bytes(offset, len as u64, |chunk, end| {
            if chunk.len() >= end {
                0
            } else {
                grown_capacity(chunk, end) - chunk.capacity()
            }
        })
    }

    /// Heap bytes [`FileData::reserve`] of the same range would add.
    pub fn reserve_growth_bytes(&self, offset: u64, len: u64) -> u64 {
        self.growth_bytes(offset, len, |chunk, end| {
            end.saturating_sub(chunk.capacity())
        })
    }

    /// Sums `chunk_growth(chunk, end in chunk)` over the chunks `[offset, offset + len)`
    /// touches (missing ones as empty), plus the chunk table's growth.
    fn growth_bytes(
        &self,
        offset: u64,
        len: u64,
        chunk_growth: impl Fn(&Vec<u8>, usize) -> usize,
    ) -> u64 {
        let end = offset.saturating_add(len).min(FILE_SIZE_BYTES_MAX);
        if offset >= end {
            return 0;
        }
        let chunk = CHUNK_BYTES as u64;
        let (first, last) = (offset / chunk, (end - 1) / chunk);
        let table_growth = super::vec_growth_bytes(
            self.chunks.capacity(),
            last as usize + 1,
            std::mem::size_of::<Vec<u8>>(),
        );
        let in_end = |index: u64| (end - index * chunk).min(chunk) as usize;
        // Chunks that exist are asked one by one; missing ones (as many as the range is long,
        // so not looped over) each need their whole part: every chunk but the last a full one.
        let have = self.chunks.len() as u64;
        let existing: u64 = (first..have.min(last + 1))
            .map(|index| chunk_growth(&self.chunks[index as usize], in_end(index)) as u64)
            .sum();
        let missing_from = first.max(have);
        let missing = if missing_from <= last {
            (last - missing_from) * chunk + in_end(last) as u64
        } else {
            0
        };
        table_growth + existing + missing
    }

    /// Reserves memory for `[offset, offset + len)`: every chunk it touches gets the capacity
    /// to hold its part, without holding bytes (it still reads as zeros, and the size is the
    /// caller's). The caller checked the budget with [`FileData::reserve_growth_bytes`].
    pub fn reserve(&mut self, offset: u64, len: u64) -> Delta {
        let table_before = self.chunks.capacity() as i64;
        let mut delta = Delta::default();
        let end = offset.saturating_add(len).min(FILE_SIZE_BYTES_MAX);
        if offset >= end {
            return delta;
        }
        let first_chunk = (offset / CHUNK_BYTES as u64) as usize;
        let last_chunk = ((end - 1) / CHUNK_BYTES as u64) as usize;
        if self.chunks.len() <= last_chunk {
            self.chunks.resize_with(last_chunk + 1, Vec::new);
        }
        for index in first_chunk..=last_chunk {
            let start = index as u64 * CHUNK_BYTES as u64;
            let in_end = (end - start).min(CHUNK_BYTES as u64) as usize;
            let chunk = &mut self.chunks[index];
            if chunk.capacity() < in_end {
                let cap0 = chunk.capacity() as i64;
                chunk.reserve_exact(in_end - chunk.len());
                delta.heap_bytes += chunk.capacity() as i64 - cap0;
            }
        }
        delta.heap_bytes += (self.chunks.capacity() as i64 - table_before) * TABLE_ENTRY_BYTES;
        delta
    }

    /// Copies up to `len` bytes from `offset` into `out`, bounded by `size` (the file size).
    pub fn read(&self, size: u64, offset: u64, len: u32, out: &mut Vec<u8>) {
        out.clear();
        if offset >= size {
            return;
        }
        let end = size.min(offset + u64::from(len));
        out.reserve((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let index = (pos / CHUNK_BYTES as u64) as usize;
            let in_chunk = (pos % CHUNK_BYTES as u64) as usize;
            let take = ((CHUNK_BYTES - in_chunk) as u64).min(end - pos) as usize;
            let chunk: &[u8] = self.chunks.get(index).map(Vec::as_slice).unwrap_or(&[]);
            let have = chunk.len().saturating_sub(in_chunk).min(take);
            if have > 0 {
                out.extend_from_slice(&chunk[in_chunk..in_chunk + have]);
            }
            out.resize(out.len() + (take - have), 0);
            pos += take as u64;
        }
    }

    /// Writes `data` at `offset`. The caller checked the size limit and the memory budget.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Delta {
        let table_before = self.chunks.capacity() as i64;
        let mut delta = Delta::default();
        if !data.is_empty() {
            // Once, so that the table grows as `growth_bound_bytes` says.
            let last = ((offset + data.len() as u64 - 1) / CHUNK_BYTES as u64) as usize;
            if self.chunks.len() <= last {
                self.chunks.resize_with(last + 1, Vec::new);
            }
        }
        let mut pos = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let index = (pos / CHUNK_BYTES as u64) as usize;
            let in_chunk = (pos % CHUNK_BYTES as u64) as usize;
            let take = (CHUNK_BYTES - in_chunk).min(rest.len());
            let chunk = &mut self.chunks[index];
            let (cap0, len0) = chunk_heap(chunk, chunk.capacity());
            write_in_chunk(chunk, in_chunk, &rest[..take]);
            let (cap1, len1) = chunk_heap(chunk, chunk.capacity());
            delta.heap_bytes += cap1 - cap0;
            delta.stored_bytes += len1 - len0;
            rest = &rest[take..];
            pos += take as u64;
        }
        delta.heap_bytes += (self.chunks.capacity() as i64 - table_before) * TABLE_ENTRY_BYTES;
        delta
    }

    /// Drops every byte at or past `size`.
    pub fn truncate(&mut self, size: u64) -> Delta {
        let table_before = self.chunks.capacity() as i64;
        let mut delta = Delta::default();
        let keep_chunks = size.div_ceil(CHUNK_BYTES as u64) as usize;
        if self.chunks.len() > keep_chunks {
            for c in &self.chunks[keep_chunks..] {
                delta.heap_bytes -= c.capacity() as i64;
                delta.stored_bytes -= c.len() as i64;
            }
            self.chunks.truncate(keep_chunks);
            if self.chunks.capacity() > 2 * keep_chunks + 4 {
                self.chunks.shrink_to_fit();
            }
        }
        let tail = (size % CHUNK_BYTES as u64) as usize;
        if tail != 0 {
            if let Some(last) = self.chunks.get_mut(keep_chunks - 1) {
                if last.len() > tail {
                    let (cap0, len0) = chunk_heap(last, last.capacity());
                    last.truncate(tail);
                    if last.capacity() > 2 * tail {
                        last.shrink_to_fit();
                    }
                    let (cap1, len1) = chunk_heap(last, last.capacity());
                    delta.heap_bytes += cap1 - cap0;
                    delta.stored_bytes += len1 - len0;
                }
            }
        }
        self.trim_trailing_holes();
        delta.heap_bytes += (self.chunks.capacity() as i64 - table_before) * TABLE_ENTRY_BYTES;
        delta
    }

    /// Makes `[offset, offset + len)` read as zeros, freeing whole chunks where it can.
    pub fn punch_hole(&mut self, offset: u64, len: u64) -> Delta {
        let table_before = self.chunks.capacity() as i64;
        let mut delta = Delta::default();
        let end = offset.saturating_add(len);
        let mut pos = offset;
        while pos < end {
            let index = (pos / CHUNK_BYTES as u64) as usize;
            if index >= self.chunks.len() {
                break;
            }
            let in_chunk = (pos % CHUNK_BYTES as u64) as usize;
            let take = ((CHUNK_BYTES - in_chunk) as u64).min(end - pos) as usize;
            let chunk = &mut self.chunks[index];
            let (cap0, len0) = chunk_heap(chunk, chunk.capacity());
            if in_chunk == 0 && take == CHUNK_BYTES {
                *chunk = Vec::new();
            } else if in_chunk + take >= chunk.len() {
                // Capacity is kept: part of the chunk is outside the hole, and a reservation
                // (fallocate) there must survive; it stays charged.
                chunk.truncate(in_chunk);
            } else {
                chunk[in_chunk..in_chunk + take].fill(0);
            }
            let (cap1, len1) = chunk_heap(chunk, chunk.capacity());
            delta.heap_bytes += cap1 - cap0;
            delta.stored_bytes += len1 - len0;
            pos += take as u64;
        }
        self.trim_trailing_holes();
        delta.heap_bytes += (self.chunks.capacity() as i64 - table_before) * TABLE_ENTRY_BYTES;
        delta
    }

    /// Drops trailing holes that hold no memory (reserved ones stay).
    fn trim_trailing_holes(&mut self) {
        while self.chunks.last().is_some_and(|c| c.capacity() == 0) {
            self.chunks.pop();
        }
    }

    /// Checks the invariants against the file size.
    pub fn check(&self, size: u64) -> Result<(), Broken> {
        for (i, chunk) in self.chunks.iter().enumerate() {
            let start = (i * CHUNK_BYTES) as u64;
            if chunk.len() > CHUNK_BYTES {
                return Err(Broken(format!("chunk {i} holds {} bytes", chunk.len())));
            }
            if !chunk.is_empty() && start + chunk.len() as u64 > size {
                return Err(Broken(format!(
                    "chunk {i} holds bytes up to {} past the size {size}",
                    start + chunk.len() as u64
                )));
            }
        }
        Ok(())
    }
}

/// The capacity a chunk grown to `len` bytes has: at most doubled, never past a chunk, so a
/// file's slack is bounded by its size and by one chunk.
fn grown_capacity(chunk: &Vec<u8>, len: usize) -> usize {
    let capacity = chunk.capacity();
    if capacity >= len {
        capacity
    } else {
        len.max((capacity * 2).min(CHUNK_BYTES))
    }
}

/// Writes `data` at `at` in a chunk, growing it to `grown_capacity`. What the write covers
/// past the chunk's bytes is appended, not zero-filled first and then overwritten: that was
/// a second pass over memory that is often freshly faulted in (decision 0129). Only a gap
/// between the chunk's bytes and `at` is zeroed (it reads as zeros).
fn write_in_chunk(chunk: &mut Vec<u8>, at: usize, data: &[u8]) {
    let end = at + data.len();
    debug_assert!(end <= CHUNK_BYTES);
    let target = grown_capacity(chunk, end);
    if chunk.capacity() < target {
        chunk.reserve_exact(target - chunk.len());
    }
    if chunk.len() < at {
        chunk.resize(at, 0);
    }
    let overwritten = (chunk.len() - at).min(data.len());
    chunk[at..at + overwritten].copy_from_slice(&data[..overwritten]);
    chunk.extend_from_slice(&data[overwritten..]);
    debug_assert!(chunk.len() >= end);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A plain byte vector as the model of a file.
    #[derive(Debug, Clone)]
    enum Action {
        Write(u64, Vec<u8>),
        Truncate(u64),
        Punch(u64, u64),
        Reserve(u64, u64),
    }

    fn action() -> impl Strategy<Value = Action> {
        let off = 0u64..(4 * CHUNK_BYTES as u64);
        prop_oneof![
            (
                off.clone(),
                proptest::collection::vec(any::<u8>(), 0..3 * CHUNK_BYTES / 2)
            )
                .prop_map(|(o, d)| Action::Write(o, d)),
            off.clone().prop_map(Action::Truncate),
            (off.clone(), 0u64..(2 * CHUNK_BYTES as u64)).prop_map(|(o, l)| Action::Punch(o, l)),
            (off.clone(), 0u64..(2 * CHUNK_BYTES as u64)).prop_map(|(o, l)| Action::Reserve(o, l)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_a_byte_vector(actions in proptest::collection::vec(action(), 1..24)) {
            let mut data = FileData::default();
            let mut model: Vec<u8> = Vec::new();
            let (mut heap, mut stored) = (0i64, 0i64);
            for a in actions {
                let delta = match a {
                    Action::Write(o, d) => {
                        let bound = data.growth_bound_bytes(o, d.len());
                        let delta = data.write(o, &d);
                        prop_assert!(delta.heap_bytes <= bound as i64, "grew {} over a bound of {}", delta.heap_bytes, bound);
                        let end = o as usize + d.len();
                        if model.len() < end && !d.is_empty() { model.resize(end, 0); }
                        model[o as usize..o as usize + d.len()].copy_from_slice(&d);
                        delta
                    }
                    Action::Truncate(s) => {
                        let delta = data.truncate(s);
                        model.resize(s as usize, 0);
                        delta
                    }
                    Action::Punch(o, l) => {
                        let delta = data.punch_hole(o, l);
                        let end = ((o + l) as usize).min(model.len());
                        if (o as usize) < end { model[o as usize..end].fill(0); }
                        delta
                    }
                    Action::Reserve(o, l) => {
                        let expected = data.reserve_growth_bytes(o, l);
                        let delta = data.reserve(o, l);
                        prop_assert_eq!(delta.stored_bytes, 0);
                        prop_assert!(delta.heap_bytes <= expected as i64);
                        // Writes into the range now need no memory.
                        prop_assert_eq!(data.growth_bound_bytes(o, l as usize), 0);
                        delta
                    }
                };
                heap += delta.heap_bytes;
                stored += delta.stored_bytes;
                prop_assert_eq!(heap, data.heap_bytes() as i64);
                prop_assert_eq!(stored, data.stored_bytes() as i64);
                let size = model.len() as u64;
                data.check(size).map_err(|e| TestCaseError::fail(e.0))?;
                let mut out = Vec::new();
                data.read(size, 0, size as u32 + 10, &mut out);
                prop_assert_eq!(&out, &model);
            }
        }
    }

    #[test]
    fn reserved_memory_is_kept_and_used_by_writes() {
        let mut data = FileData::default();
        let reserved = data.reserve(0, 3 * CHUNK_BYTES as u64 + 100);
        assert!(reserved.heap_bytes >= 3 * CHUNK_BYTES as i64 + 100);
        assert_eq!(data.stored_bytes(), 0);
        // A punch elsewhere, or of part of a reserved chunk, keeps the reservation; writing
        // into it costs nothing more.
        let punched = data.punch_hole(5 * CHUNK_BYTES as u64, 10);
        assert_eq!(punched.heap_bytes, 0);
        let punched = data.punch_hole(0, 100);
        assert_eq!(punched.heap_bytes, 0);
        assert_eq!(data.growth_bound_bytes(100, CHUNK_BYTES - 100), 0);
        let written = data.write(CHUNK_BYTES as u64, &[1u8; 2 * CHUNK_BYTES]);
        assert_eq!(written.heap_bytes, 0);
        data.check(3 * CHUNK_BYTES as u64).unwrap();
        // Truncating below it gives it back.
        data.truncate(0);
        assert!(data.heap_bytes() <= 4 * std::mem::size_of::<Vec<u8>>() as u64);
    }

    #[test]
    fn growth_of_a_huge_range_is_computed_without_visiting_it() {
        let data = FileData::default();
        let started = std::time::Instant::now();
        let growth = data.reserve_growth_bytes(0, u64::MAX);
        assert!(growth >= FILE_SIZE_BYTES_MAX, "{growth}");
        assert!(data.growth_bound_bytes(FILE_SIZE_BYTES_MAX - 1, 1) > 0);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn small_file_costs_about_its_size() {
        let mut data = FileData::default();
        for i in 0..16 {
            data.write(i * 512, &[7u8; 512]);
        }
        assert_eq!(data.stored_bytes(), 8192);
        assert!(data.heap_bytes() <= 2 * 8192 + 64, "{}", data.heap_bytes());
    }

    /// A write that starts inside a chunk's bytes and runs past them, or starts past them,
    /// keeps what it does not cover, zeros the gap, and grows the capacity as predicted.
    #[test]
    fn writes_past_a_chunks_bytes_extend_it() {
        let mut data = FileData::default();
        data.write(0, &[1u8; 100]);
        let bound = data.growth_bound_bytes(90, 30);
        let grown = data.write(90, &[2u8; 30]);
        assert_eq!(grown.heap_bytes, bound as i64);
        assert_eq!(grown.stored_bytes, 20);
        data.write(200, &[3u8; 10]);
        let mut out = Vec::new();
        data.read(210, 0, 300, &mut out);
        let mut expected = vec![1u8; 90];
        expected.extend([2u8; 30]);
        expected.extend([0u8; 80]);
        expected.extend([3u8; 10]);
        assert_eq!(out, expected);
        assert_eq!(data.stored_bytes(), 210);
        data.check(210).unwrap();
    }

    #[test]
    fn holes_cost_nothing_and_read_as_zeros() {
        let mut data = FileData::default();
        data.write(10 * CHUNK_BYTES as u64, b"tail");
        assert_eq!(data.stored_bytes(), 4);
        let mut out = Vec::new();
        data.read(10 * CHUNK_BYTES as u64 + 4, 5, 10, &mut out);
        assert_eq!(out, vec![0u8; 10]);
    }
}
