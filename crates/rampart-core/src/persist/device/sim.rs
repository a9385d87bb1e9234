//! [`SimDevice`]: the simulated faulty device of the crash tests.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io;

use parking_lot::Mutex;

use super::faults::{Faults, SyncOp, CRASH_IMAGES_MAX};
use super::{copy_window, os_error, past_end, shrink_only, validate_name, Device};

/// What a simulated power cut does to the changes not yet synced (see the module's model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every file holds its durable content; files never synced are gone.
    LoseUnsynced,
    /// The changes since the last sync survive in file order up to a random byte (a torn
    /// write), unless the file is now shorter than its durable content; see the module's model.
    TornTail,
    /// Per file, randomly `LoseUnsynced` or `TornTail`.
    Random,
}

/// A write or sync the device served, as [`SimDevice::events`] lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Bytes changed by `append`, `write`, `write_at`, `write_at_sparse` or `punch_hole`;
    /// `zeros` if all of them are zero (reserved room, a hole), none carrying data.
    Write {
        name: String,
        offset: u64,
        len: u64,
        zeros: bool,
    },
    /// A successful `sync`.
    Sync { name: String },
    /// Room taken by `allocate`: no bytes written.
    Allocate { name: String, offset: u64, len: u64 },
}

/// What the writes to one file name carried since the device was made (see
/// [`SimDevice::written`]): the measure of how many bytes a workload costs the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Bytes of writes that carried some nonzero byte.
    pub data_bytes: u64,
    /// Bytes of writes of nothing but zeros (reserved room written).
    pub zero_bytes: u64,
    /// Bytes `allocate` added, never written.
    pub allocated_bytes: u64,
}

/// How many of the latest events a device keeps.
pub const EVENTS_MAX: usize = 4096;

/// The simulated faulty device for crash tests: deterministic from its seed, shared through
/// `Arc<SimDevice>`. [`SimDevice::crash`] returns a new device holding the state after a power
/// cut, as stated by the module's model; [`SimDevice::set_faults`] injects failures, delays, a
/// full disk and crash images taken before sync points.
pub struct SimDevice {
    state: Mutex<SimState>,
}

#[derive(Clone)]
struct SimFile {
    /// What readers see.
    volatile: Vec<u8>,
    /// What survives a crash; None if the file would not exist after one.
    durable: Option<Vec<u8>>,
    /// The bytes the writes since the last sync that carried data (any byte not zero) cover,
    /// first to last: where a torn write is cut (not in the zeros a writer reserves after).
    data_span: Option<(u64, u64)>,
}

impl SimFile {
    fn new() -> SimFile {
        SimFile {
            volatile: Vec::new(),
            durable: None,
            data_span: None,
        }
    }

    /// Puts `data` at `offset` (zeros fill a hole before it) and notes where it carried data.
    fn put(&mut self, offset: u64, data: &[u8]) {
        let (at, end) = (offset as usize, offset as usize + data.len());
        if end > self.volatile.len() {
            self.volatile.resize(end, 0);
        }
        self.volatile[at..end].copy_from_slice(data);
        if data.iter().any(|&b| b != 0) {
            let (start, stop) = self.data_span.unwrap_or((offset, end as u64));
            self.data_span = Some((start.min(offset), stop.max(end as u64)));
        }
    }

    fn synced(&mut self) {
        self.durable = Some(self.volatile.clone());
        self.data_span = None;
    }
}

struct SimState {
    files: BTreeMap<String, SimFile>,
    rng: SplitMix64,
    syncs: u64,
    faults: Faults,
    /// Sync points failed by `faults.fail_syncs` so far.
    syncs_failed: u64,
    crash_images: Vec<SimDevice>,
    events: VecDeque<Event>,
    /// Per file name (at the time of the write), what the writes carried.
    written: BTreeMap<String, Written>,
}

impl SimState {
    /// Passes a sync point of `op` on `name`: takes the crash image asked for, then fails
    /// with EIO if syncs are set to fail, else counts it.
    fn sync_point(&mut self, op: SyncOp, name: &str) -> io::Result<()> {
        if let Some(images) = &self.faults.crash_images {
            let now = images.at.is_none_or(|k| k == self.syncs);
            if now && images.ops.contains(&op) && self.crash_images.len() < CRASH_IMAGES_MAX {
                let image = self.crash_image(images.mode);
                self.crash_images.push(image);
            }
        }
        if let Some(fail) = &self.faults.fail_syncs {
            let armed =
                self.syncs >= fail.after && fail.count.is_none_or(|n| self.syncs_failed < n);
            if armed && fail.ops.contains(&op) && fail.files.matches(name) {
                self.syncs_failed += 1;
                return Err(os_error(libc::EIO));
            }
        }
        self.syncs += 1;
        Ok(())
    }

    /// Fails with ENOSPC if writes to `name` fail, or if the device would hold more than its
    /// capacity once `name` is `new_len` bytes long.
    fn check_write(&self, name: &str, new_len: u64) -> io::Result<()> {
        if self
            .faults
            .fail_writes
            .as_ref()
            .is_some_and(|f| f.matches(name))
        {
            return Err(os_error(libc::ENOSPC));
        }
        if let Some(capacity) = self.faults.capacity_bytes {
            let others: u64 = self
                .files
                .iter()
                .filter(|(n, _)| *n != name)
                .map(|(_, f)| f.volatile.len() as u64)
                .sum();
            let current = self.files.get(name).map_or(0, |f| f.volatile.len() as u64);
            if new_len > current && others + new_len > capacity {
                return Err(os_error(libc::ENOSPC));
            }
        }
        Ok(())
    }

    fn log(&mut self, event: Event) {
        if self.events.len() >= EVENTS_MAX {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    fn file_mut(&mut self, name: &str) -> io::Result<&mut SimFile> {
        self.files
            .get_mut(name)
            .ok_or_else(|| os_error(libc::ENOENT))
    }

    fn file_or_create(&mut self, name: &str) -> &mut SimFile {
        self.files
            .entry(name.to_owned())
            .or_insert_with(SimFile::new)
    }

    /// A new device holding the state a power cut now would leave (see `SimDevice::crash`).
    fn crash_image(&mut self, mode: CrashMode) -> SimDevice {
        let mut rng = SplitMix64(self.rng.next());
        let mut files = BTreeMap::new();
        for (name, file) in &self.files {
            let mode = match mode {
                CrashMode::Random if rng.below(2) == 0 => CrashMode::LoseUnsynced,
                CrashMode::Random => CrashMode::TornTail,
                other => other,
            };
            let image = match (mode, &file.durable) {
                (CrashMode::TornTail, Some(durable)) if file.volatile.len() >= durable.len() => {
                    // The changes since the sync reach the disk in file order, up to a
                    // random byte: from the first byte that differs, the new bytes up to the
                    // cut, the durable ones after it.
                    let first_change = durable
                        .iter()
                        .zip(&file.volatile)
                        .position(|(a, b)| a != b)
                        .unwrap_or(durable.len());
                    let cut = rng.torn_cut(first_change, file.volatile.len(), file.data_span);
                    let mut content = file.volatile[..cut].to_vec();
                    if cut < durable.len() {
                        content.extend_from_slice(&durable[cut..]);
                    }
                    Some(content)
                }
                (CrashMode::TornTail, None) => {
                    if rng.below(2) == 0 {
                        None
                    } else {
                        let keep = rng.torn_cut(0, file.volatile.len(), file.data_span);
                        Some(file.volatile[..keep].to_vec())
                    }
                }
                (_, durable) => durable.clone(),
            };
            if let Some(content) = image {
                let file = SimFile {
                    volatile: content.clone(),
                    durable: Some(content),
                    data_span: None,
                };
                files.insert(name.clone(), file);
            }
        }
        let next = SplitMix64(rng.next());
        SimDevice::from_files(files, next)
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to pick torn lengths.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Where a torn write of the unsynced bytes `from..to` stops: at `from` (nothing) or `to`
    /// (all) each with chance 1/4, so recovery meets both edges often; else anywhere inside
    /// `data_span`, the bytes of the unsynced writes that carried data, so that the tear
    /// lands in them rather than in zeros reserved after them (anywhere in `from..=to` if
    /// no such write lies there).
    fn torn_cut(&mut self, from: usize, to: usize, data_span: Option<(u64, u64)>) -> usize {
        if from >= to {
            return from;
        }
        let (lo, hi) = match data_span {
            Some((start, end)) if (start as usize) < to && (end as usize) > from => {
                ((start as usize).max(from), (end as usize).min(to))
            }
            _ => (from, to),
        };
        match self.below(4) {
            0 => from,
            1 => to,
            _ => lo + self.below((hi - lo) as u64 + 1) as usize,
        }
    }
}

/// Where a write puts its bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// At the end (the file is created if absent).
    Append,
    /// As the whole new content (the file is created if absent).
    Replace,
    /// At an offset of an existing file, at most its length.
    At(u64),
    /// At any offset of an existing file, a hole before it if past the end.
    AtSparse(u64),
}

impl SimDevice {
    /// An empty device whose random choices (torn lengths, crash modes, bits) follow `seed`.
    pub fn new(seed: u64) -> SimDevice {
        SimDevice::from_files(BTreeMap::new(), SplitMix64(seed))
    }

    fn from_files(files: BTreeMap<String, SimFile>, rng: SplitMix64) -> SimDevice {
        SimDevice {
            state: Mutex::new(SimState {
                files,
                rng,
                syncs: 0,
                faults: Faults::default(),
                syncs_failed: 0,
                crash_images: Vec::new(),
                events: VecDeque::new(),
                written: BTreeMap::new(),
            }),
        }
    }

    /// What the writes to `name` carried since the device was made (a crash image starts
    /// from nothing); counted under the name the file had when written.
    pub fn written(&self, name: &str) -> Written {
        self.state
            .lock()
            .written
            .get(name)
            .copied()
            .unwrap_or_default()
    }

    /// Sync points passed so far: successful `sync`, `rename`, and `remove` of an existing file.
    pub fn sync_count(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Injects `faults` from now on, in place of the ones before (see [`Faults`]).
    pub fn set_faults(&self, faults: Faults) {
        let mut state = self.state.lock();
        state.faults = faults;
        state.syncs_failed = 0;
    }

    /// The faults injected now.
    pub fn faults(&self) -> Faults {
        self.state.lock().faults.clone()
    }

    /// Once `n` sync points have passed (counting from the device's creation, see
    /// [`SimDevice::sync_count`]), every further `sync`, `rename` and `remove` fails with EIO
    /// and makes nothing durable. `fail_after_syncs(0)` fails them all from now on. The same
    /// as `fail_syncs: Some(FailSyncs::after(n))` in [`Faults`], the other faults kept.
    pub fn fail_after_syncs(&self, n: u64) {
        let mut state = self.state.lock();
        state.faults.fail_syncs = Some(super::faults::FailSyncs::after(n));
        state.syncs_failed = 0;
    }

    /// While `fail` is true, `append`, `write` and `write_at` fail with ENOSPC and change
    /// nothing. The same as `fail_writes: Some(Files::All)` in [`Faults`], the others kept.
    pub fn set_fail_writes(&self, fail: bool) {
        self.state.lock().faults.fail_writes = fail.then_some(super::faults::Files::All);
    }

    /// Ends every injected fault.
    pub fn clear_faults(&self) {
        self.set_faults(Faults::default());
    }

    /// The crash images taken before sync points since the last call (see
    /// [`CrashImages`](super::faults::CrashImages)), oldest first.
    pub fn take_crash_images(&self) -> Vec<SimDevice> {
        std::mem::take(&mut self.state.lock().crash_images)
    }

    /// How many crash images are waiting for `take_crash_images`.
    pub fn crash_images_taken(&self) -> usize {
        self.state.lock().crash_images.len()
    }

    /// The latest writes and syncs (at most [`EVENTS_MAX`]), oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.state.lock().events.iter().cloned().collect()
    }

    /// The names of the files that exist now, in order.
    pub fn names(&self) -> Vec<String> {
        self.state.lock().files.keys().cloned().collect()
    }

    /// The durable content of a file (what [`CrashMode::LoseUnsynced`] would leave); None if
    /// the file would not exist after a crash.
    pub fn durable(&self, name: &str) -> Option<Vec<u8>> {
        self.state
            .lock()
            .files
            .get(name)
            .and_then(|f| f.durable.clone())
    }

    /// A new device holding the state after a power cut now (see the module's model). The
    /// new device's files are all durable; its sync count starts at 0, without faults, and its
    /// random choices follow from this device's. This device is unchanged and usable (its
    /// random state advances, so the next crash may differ).
    ///
    /// Under [`CrashMode::TornTail`] the cut falls, half of the time, inside the unsynced
    /// writes that carried data (the last batch, not the zeros reserved after it), else at
    /// either end of the unsynced changes.
    pub fn crash(&self, mode: CrashMode) -> SimDevice {
        self.state.lock().crash_image(mode)
    }

    /// Sleeps as `Faults::delay` asks before a write (or a sync) of `name`; the state is not
    /// locked meanwhile.
    fn delay(&self, name: &str, sync: bool) {
        let delay = self.state.lock().faults.delay.clone();
        if let Some(delay) = delay.filter(|d| d.files.matches(name)) {
            let pause = if sync { delay.sync } else { delay.write };
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
        }
    }

    /// The writes: checks, faults (ENOENT before ENOSPC, as `DirDevice` reports them), then
    /// the bytes put in place.
    fn write_to(&self, name: &str, place: Place, data: &[u8]) -> io::Result<()> {
        validate_name(name)?;
        self.delay(name, false);
        let mut state = self.state.lock();
        let len = match (state.files.get(name), place) {
            (Some(file), _) => file.volatile.len() as u64,
            (None, Place::Append | Place::Replace) => 0,
            (None, Place::At(_) | Place::AtSparse(_)) => return Err(os_error(libc::ENOENT)),
        };
        let offset = match place {
            Place::Append => len,
            Place::Replace => 0,
            Place::At(offset) | Place::AtSparse(offset) => offset,
        };
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&end| usize::try_from(end).is_ok())
            .ok_or_else(|| os_error(libc::EFBIG))?;
        let new_len = if place == Place::Replace {
            end
        } else if data.is_empty() {
            // pwrite of nothing changes nothing, past the end too.
            len
        } else {
            len.max(end)
        };
        state.check_write(name, new_len)?;
        if place == Place::At(offset) && offset > len {
            return Err(past_end(name, len, offset));
        }
        let file = state.file_or_create(name);
        if place == Place::Replace {
            file.volatile.clear();
        }
        if !data.is_empty() {
            file.put(offset, data);
        }
        let zeros = data.iter().all(|&b| b == 0);
        let written = state.written.entry(name.to_owned()).or_default();
        if zeros {
            written.zero_bytes += data.len() as u64;
        } else {
            written.data_bytes += data.len() as u64;
        }
        state.log(Event::Write {
            name: name.to_owned(),
            offset,
            len: data.len() as u64,
            zeros,
        });
        Ok(())
    }

    /// Flips bit `bit_index` (bit `i % 8` of byte `i / 8`) of the file's durable content, as
    /// media damage would; the volatile content too if the file has no unsynced change, so
    /// readers see the damage (as they do after a crash). Errors: NotFound if the file has no
    /// durable content, InvalidInput if the bit lies past its end.
    pub fn flip_bit(&self, name: &str, bit_index: u64) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        let file = state.file_mut(name)?;
        let clean = file.durable.as_ref() == Some(&file.volatile);
        let durable = file
            .durable
            .as_mut()
            .ok_or_else(|| os_error(libc::ENOENT))?;
        let byte = usize::try_from(bit_index / 8)
            .ok()
            .filter(|&b| b < durable.len())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "bit {bit_index} is past the end of {name:?} ({} durable bytes)",
                        durable.len()
                    ),
                )
            })?;
        let mask = 1u8 << (bit_index % 8);
        durable[byte] ^= mask;
        if clean {
            file.volatile[byte] ^= mask;
        }
        Ok(())
    }

    /// Flips one random bit of the file's durable content (see [`SimDevice::flip_bit`]) and
    /// returns its index. InvalidInput if the durable content is empty.
    pub fn flip_random_bit(&self, name: &str) -> io::Result<u64> {
        validate_name(name)?;
        let bit = {
            let mut state = self.state.lock();
            let bits = match state.files.get(name).and_then(|f| f.durable.as_ref()) {
                Some(durable) => durable.len() as u64 * 8,
                None => return Err(os_error(libc::ENOENT)),
            };
            if bits == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{name:?} has no durable byte to damage"),
                ));
            }
            state.rng.below(bits)
        };
        self.flip_bit(name, bit)?;
        Ok(bit)
    }
}

impl fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        let mut files = f.debug_map();
        for (name, file) in &state.files {
            let durable = file.durable.as_ref().map(Vec::len);
            files.entry(
                name,
                &format_args!("{} bytes, durable {durable:?}", file.volatile.len()),
            );
        }
        files.finish()?;
        write!(f, " syncs {}", state.syncs)
    }
}

impl Device for SimDevice {
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        validate_name(name)?;
        Ok(self
            .state
            .lock()
            .files
            .get(name)
            .map(|f| f.volatile.clone()))
    }

    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        validate_name(name)?;
        let state = self.state.lock();
        let data = &state
            .files
            .get(name)
            .ok_or_else(|| os_error(libc::ENOENT))?
            .volatile;
        Ok(copy_window(data, offset, buf))
    }

    fn len(&self, name: &str) -> io::Result<Option<u64>> {
        validate_name(name)?;
        Ok(self
            .state
            .lock()
            .files
            .get(name)
            .map(|f| f.volatile.len() as u64))
    }

    fn append(&self, name: &str, data: &[u8]) -> io::Result<()> {
        self.write_to(name, Place::Append, data)
    }

    fn write(&self, name: &str, data: &[u8]) -> io::Result<()> {
        self.write_to(name, Place::Replace, data)
    }

    fn start_writeback(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        // Makes nothing durable (rule 2): only checks that the file exists.
        self.state.lock().file_mut(name).map(drop)
    }

    fn write_at(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write_to(name, Place::At(offset), data)
    }

    fn write_at_sparse(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write_to(name, Place::AtSparse(offset), data)
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        let file = state.file_mut(name)?;
        let current = file.volatile.len() as u64;
        if len > current {
            return Err(shrink_only(name, current, len));
        }
        file.volatile.truncate(len as usize);
        Ok(())
    }

    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        let current = state.file_mut(name)?.volatile.len() as u64;
        let len_usize = usize::try_from(len).map_err(|_| os_error(libc::EFBIG))?;
        if len > current {
            state.check_write(name, len)?;
        }
        state.file_mut(name)?.volatile.resize(len_usize, 0);
        Ok(())
    }

    fn allocate(&self, name: &str, offset: u64, len: u64) -> io::Result<()> {
        validate_name(name)?;
        self.delay(name, false);
        let mut state = self.state.lock();
        let current = state.file_mut(name)?.volatile.len() as u64;
        let end = offset
            .checked_add(len)
            .filter(|&end| usize::try_from(end).is_ok())
            .ok_or_else(|| os_error(libc::EFBIG))?;
        if len == 0 {
            return Ok(());
        }
        // The room is taken now: a full disk fails here, never a later write into it.
        state.check_write(name, end.max(current))?;
        let file = state.file_mut(name)?;
        if end > current {
            // Reads as zeros; like reserved zeros, never where a torn write is cut.
            file.volatile.resize(end as usize, 0);
        }
        state
            .written
            .entry(name.to_owned())
            .or_default()
            .allocated_bytes += len;
        state.log(Event::Allocate {
            name: name.to_owned(),
            offset,
            len,
        });
        Ok(())
    }

    fn punch_hole(&self, name: &str, offset: u64, len: u64) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        let file = state.file_mut(name)?;
        let size = file.volatile.len() as u64;
        let (start, end) = (offset.min(size), offset.saturating_add(len).min(size));
        if start == end {
            return Ok(());
        }
        file.volatile[start as usize..end as usize].fill(0);
        state.log(Event::Write {
            name: name.to_owned(),
            offset: start,
            len: end - start,
            zeros: true,
        });
        Ok(())
    }

    fn file_for_passthrough(&self, name: &str) -> io::Result<Option<std::fs::File>> {
        validate_name(name)?;
        // No host file; still an error for a file that does not exist, as on `DirDevice`.
        self.state.lock().file_mut(name)?;
        Ok(None)
    }

    fn list_data(&self) -> io::Result<Vec<String>> {
        let state = self.state.lock();
        Ok(state
            .files
            .keys()
            .filter(|n| super::is_data_name(n))
            .cloned()
            .collect())
    }

    fn sync(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        self.delay(name, true);
        let mut state = self.state.lock();
        state.file_mut(name)?;
        state.sync_point(SyncOp::Sync, name)?;
        state.file_mut(name)?.synced();
        state.log(Event::Sync {
            name: name.to_owned(),
        });
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let mut state = self.state.lock();
        state.file_mut(from)?;
        state.sync_point(SyncOp::Rename, from)?;
        if from != to {
            let file = state.files.remove(from).expect("checked above");
            let moved = SimFile {
                durable: Some(file.durable.unwrap_or_default()),
                ..file
            };
            state.files.insert(to.to_owned(), moved);
        }
        Ok(())
    }

    fn link(&self, from: &str, to: &str) -> io::Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let mut state = self.state.lock();
        state.file_mut(from)?;
        if state.files.contains_key(to) {
            return Err(os_error(libc::EEXIST));
        }
        state.sync_point(SyncOp::Link, from)?;
        // A copy: the caller writes neither name again (see `Device::link`). Like a renamed
        // file, the new name is durable and carries what a crash leaves of `from`. Where a
        // real link would share later writes (a checkpoint that fails after linking
        // `journal.prev`, commits going on to `journal`), the copy would go stale: the
        // checkpoint removes both names on that path, so neither device keeps such a pair.
        let file = state.files.get(from).expect("checked above").clone();
        let linked = SimFile {
            durable: Some(file.durable.clone().unwrap_or_default()),
            ..file
        };
        state.files.insert(to.to_owned(), linked);
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        if state.files.contains_key(name) {
            state.sync_point(SyncOp::Remove, name)?;
            state.files.remove(name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::device::tests::is_torn_in_order;

    fn image(dev: &SimDevice) -> Vec<(String, Vec<u8>)> {
        dev.names()
            .into_iter()
            .map(|n| {
                let content = dev.read(&n).unwrap().unwrap();
                (n, content)
            })
            .collect()
    }

    #[test]
    fn lose_unsynced_keeps_exactly_the_synced_content() {
        let dev = SimDevice::new(7);
        dev.append("j", b"synced").unwrap();
        dev.sync("j").unwrap();
        dev.append("j", b" lost").unwrap();
        dev.append("never", b"synced").unwrap();
        dev.write("w", b"old").unwrap();
        dev.sync("w").unwrap();
        dev.write("w", b"replaced").unwrap();
        dev.append("t", b"0123456789").unwrap();
        dev.sync("t").unwrap();
        dev.truncate("t", 3).unwrap();

        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.read("j").unwrap().as_deref(), Some(&b"synced"[..]));
        assert_eq!(after.read("never").unwrap(), None);
        assert_eq!(after.read("w").unwrap().as_deref(), Some(&b"old"[..]));
        assert_eq!(
            after.read("t").unwrap().as_deref(),
            Some(&b"0123456789"[..])
        );
        assert_eq!(after.names(), ["j", "t", "w"]);
        // The original is untouched, and a crashed image is fully durable.
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"synced lost"[..]));
        assert_eq!(image(&after.crash(CrashMode::TornTail)), image(&after));
        assert_eq!(after.sync_count(), 0);
    }

    #[test]
    fn synced_data_survives_every_crash_mode() {
        for seed in 0..50 {
            let dev = SimDevice::new(seed);
            dev.append("j", b"header").unwrap();
            dev.append("j", b"batch1").unwrap();
            dev.sync("j").unwrap();
            dev.write("c", b"checkpoint").unwrap();
            dev.sync("c").unwrap();
            for mode in [
                CrashMode::LoseUnsynced,
                CrashMode::TornTail,
                CrashMode::Random,
            ] {
                let after = dev.crash(mode);
                assert_eq!(
                    after.read("j").unwrap().as_deref(),
                    Some(&b"headerbatch1"[..])
                );
                assert_eq!(
                    after.read("c").unwrap().as_deref(),
                    Some(&b"checkpoint"[..])
                );
            }
        }
    }

    /// Whether `content` is `durable ‖ a prefix of tail`.
    fn is_durable_plus_prefix(content: &[u8], durable: &[u8], tail: &[u8]) -> bool {
        content.len() <= durable.len() + tail.len()
            && content.starts_with(durable)
            && tail.starts_with(&content[durable.len()..])
    }

    #[test]
    fn torn_tail_keeps_a_prefix_of_the_unsynced_appends_and_invents_nothing() {
        let (mut none, mut all, mut part) = (0, 0, 0);
        for seed in 0..300 {
            let dev = SimDevice::new(seed);
            dev.append("j", b"durable:").unwrap();
            dev.sync("j").unwrap();
            dev.append("j", b"first batch;").unwrap();
            dev.append("j", b"second batch;").unwrap();
            let tail = b"first batch;second batch;";
            for mode in [CrashMode::TornTail, CrashMode::Random] {
                let after = dev.crash(mode);
                let content = after.read("j").unwrap().unwrap();
                assert!(
                    is_durable_plus_prefix(&content, b"durable:", tail),
                    "{content:?}"
                );
                if mode == CrashMode::TornTail {
                    match content.len() - 8 {
                        0 => none += 1,
                        n if n == tail.len() => all += 1,
                        _ => part += 1,
                    }
                }
            }
        }
        assert!(none > 0 && all > 0 && part > 0, "{none} {all} {part}");
    }

    #[test]
    fn torn_tail_of_never_synced_and_rewritten_files() {
        let (mut absent, mut present) = (0, 0);
        for seed in 0..200 {
            let dev = SimDevice::new(seed);
            dev.append("new", b"never synced").unwrap();
            dev.write("w", b"old").unwrap();
            dev.sync("w").unwrap();
            dev.write("w", b"old and then some").unwrap();
            dev.truncate("w", 3).unwrap();
            dev.append("w", b"xyz").unwrap();
            let after = dev.crash(CrashMode::TornTail);
            match after.read("new").unwrap() {
                None => absent += 1,
                Some(c) => {
                    present += 1;
                    assert!(b"never synced".starts_with(&c));
                }
            }
            // "old" ‖ "xyz" is what a torn append could give; "old" too. Nothing else.
            let w = after.read("w").unwrap().unwrap();
            assert!(is_durable_plus_prefix(&w, b"old", b"xyz"), "{w:?}");
        }
        assert!(absent > 0 && present > 0);

        // A rewrite at least as long as the durable content tears in file order: the new
        // bytes up to a cut, the durable ones after it.
        let mut torn_mixes = 0;
        for seed in 0..50 {
            let dev = SimDevice::new(seed);
            dev.write("w", b"original").unwrap();
            dev.sync("w").unwrap();
            dev.write("w", b"other").unwrap();
            dev.append("w", b" tail").unwrap();
            let after = dev.crash(CrashMode::TornTail);
            let w = after.read("w").unwrap().unwrap();
            assert!(is_torn_in_order(&w, b"original", b"other tail"), "{w:?}");
            if w != b"original" && w != b"other tail" {
                torn_mixes += 1;
            }
        }
        assert!(torn_mixes > 0);

        // One that shrinks the file is lost whole.
        for seed in 0..20 {
            let dev = SimDevice::new(seed);
            dev.write("w", b"original").unwrap();
            dev.sync("w").unwrap();
            dev.write("w", b"short").unwrap();
            let after = dev.crash(CrashMode::TornTail);
            assert_eq!(after.read("w").unwrap().as_deref(), Some(&b"original"[..]));
        }
    }

    #[test]
    fn torn_overwrite_keeps_new_bytes_up_to_a_cut_and_old_ones_after() {
        let mut seen = std::collections::HashSet::new();
        for seed in 0..100 {
            let dev = SimDevice::new(seed);
            dev.write("j", b"head").unwrap();
            dev.write_at("j", 4, &[0; 8]).unwrap(); // reserved zeros
            dev.sync("j").unwrap();
            dev.write_at("j", 4, b"batch").unwrap();
            let after = dev.crash(CrashMode::TornTail);
            let j = after.read("j").unwrap().unwrap();
            assert!(
                is_torn_in_order(&j, b"head\0\0\0\0\0\0\0\0", b"headbatch\0\0\0"),
                "{j:?}"
            );
            seen.insert(j);
        }
        assert!(seen.len() > 2, "{seen:?}");
        assert!(SimDevice::new(0).write_at("absent", 0, b"x").is_err());
        let dev = SimDevice::new(0);
        dev.write("f", b"ab").unwrap();
        assert_eq!(
            dev.write_at("f", 3, b"x").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        dev.write_at("f", 1, b"xyz").unwrap();
        assert_eq!(dev.read("f").unwrap().unwrap(), b"axyz");
    }

    #[test]
    fn rename_is_durable_but_carries_only_durable_content() {
        // Synced source: the target's crash image is the source's durable content.
        let dev = SimDevice::new(3);
        dev.write("final", b"old checkpoint").unwrap();
        dev.sync("final").unwrap();
        dev.write("tmp", b"new checkpoint").unwrap();
        dev.sync("tmp").unwrap();
        dev.rename("tmp", "final").unwrap();
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.names(), ["final"]);
        assert_eq!(
            after.read("final").unwrap().as_deref(),
            Some(&b"new checkpoint"[..])
        );

        // Unsynced source: the old target is gone for good, the new one is empty.
        let dev = SimDevice::new(3);
        dev.write("final", b"old").unwrap();
        dev.sync("final").unwrap();
        dev.write("tmp", b"not synced").unwrap();
        dev.rename("tmp", "final").unwrap();
        assert_eq!(
            dev.read("final").unwrap().as_deref(),
            Some(&b"not synced"[..])
        );
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.names(), ["final"]);
        assert_eq!(after.read("final").unwrap(), Some(vec![]));
        // ... and under torn writes, a prefix of what it held.
        for seed in 0..50 {
            let dev = SimDevice::new(seed);
            dev.write("tmp", b"not synced").unwrap();
            dev.rename("tmp", "final").unwrap();
            let c = dev
                .crash(CrashMode::TornTail)
                .read("final")
                .unwrap()
                .unwrap();
            assert!(b"not synced".starts_with(&c));
        }

        // Partly synced source: durable part at rename time; a later sync of the target
        // makes the rest durable.
        let dev = SimDevice::new(3);
        dev.append("a", b"synced").unwrap();
        dev.sync("a").unwrap();
        dev.append("a", b"+unsynced").unwrap();
        dev.rename("a", "b").unwrap();
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.read("a").unwrap(), None);
        assert_eq!(after.read("b").unwrap().as_deref(), Some(&b"synced"[..]));
        dev.sync("b").unwrap();
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(
            after.read("b").unwrap().as_deref(),
            Some(&b"synced+unsynced"[..])
        );

        // remove is durable at once.
        let dev = SimDevice::new(3);
        dev.write("x", b"x").unwrap();
        dev.sync("x").unwrap();
        dev.remove("x").unwrap();
        assert_eq!(dev.crash(CrashMode::TornTail).read("x").unwrap(), None);
    }

    #[test]
    fn sync_count_counts_sync_points() {
        let dev = SimDevice::new(0);
        assert_eq!(dev.sync_count(), 0);
        dev.append("a", b"1").unwrap();
        assert_eq!(dev.sync_count(), 0);
        dev.sync("a").unwrap();
        dev.sync("a").unwrap();
        assert_eq!(dev.sync_count(), 2);
        dev.rename("a", "b").unwrap();
        assert_eq!(dev.sync_count(), 3);
        dev.remove("absent").unwrap();
        assert_eq!(dev.sync_count(), 3);
        dev.remove("b").unwrap();
        assert_eq!(dev.sync_count(), 4);
        let _ = dev.sync("absent");
        assert_eq!(dev.sync_count(), 4);
    }

    #[test]
    fn fail_after_syncs_fails_later_sync_points_with_eio() {
        let dev = SimDevice::new(0);
        dev.append("j", b"a").unwrap();
        dev.sync("j").unwrap();
        dev.fail_after_syncs(2);
        dev.append("j", b"b").unwrap();
        dev.sync("j").unwrap();
        dev.append("j", b"c").unwrap();
        let e = dev.sync("j").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(dev.sync_count(), 2);
        // Nothing more becomes durable; writes still succeed; rename and remove fail too.
        dev.append("j", b"d").unwrap();
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"abcd"[..]));
        assert_eq!(dev.durable("j").as_deref(), Some(&b"ab"[..]));
        assert_eq!(
            dev.rename("j", "k").unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        assert_eq!(dev.remove("j").unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(dev.names(), ["j"]);
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.read("j").unwrap().as_deref(), Some(&b"ab"[..]));

        dev.clear_faults();
        dev.sync("j").unwrap();
        assert_eq!(dev.durable("j").as_deref(), Some(&b"abcd"[..]));

        let dev = SimDevice::new(0);
        dev.fail_after_syncs(0);
        dev.write("x", b"x").unwrap();
        assert!(dev.sync("x").is_err());
    }

    #[test]
    fn failing_writes_report_enospc_and_change_nothing() {
        let dev = SimDevice::new(0);
        dev.write("a", b"keep").unwrap();
        dev.set_fail_writes(true);
        assert_eq!(
            dev.append("a", b"x").unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        assert_eq!(
            dev.write("a", b"x").unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        assert_eq!(
            dev.append("b", b"x").unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        assert_eq!(dev.read("a").unwrap().as_deref(), Some(&b"keep"[..]));
        assert_eq!(dev.read("b").unwrap(), None);
        dev.truncate("a", 2).unwrap();
        dev.sync("a").unwrap();
        dev.set_fail_writes(false);
        dev.append("a", b"!").unwrap();
        assert_eq!(dev.read("a").unwrap().as_deref(), Some(&b"ke!"[..]));
    }

    fn differing_bits(a: &[u8], b: &[u8]) -> u32 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
    }

    #[test]
    fn flip_bit_changes_exactly_one_bit() {
        let original = b"some durable checkpoint bytes".to_vec();
        let dev = SimDevice::new(11);
        dev.write("c", &original).unwrap();
        dev.sync("c").unwrap();
        dev.flip_bit("c", 13).unwrap();
        let damaged = dev.read("c").unwrap().unwrap();
        assert_eq!(differing_bits(&original, &damaged), 1);
        assert_eq!(damaged[1] ^ original[1], 1 << 5);
        assert_eq!(dev.durable("c").unwrap(), damaged);
        dev.flip_bit("c", 13).unwrap();
        assert_eq!(dev.read("c").unwrap().unwrap(), original);

        let bits = original.len() as u64 * 8;
        let e = dev.flip_bit("c", bits).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            dev.flip_bit("absent", 0).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        dev.append("unsynced", b"x").unwrap();
        assert_eq!(
            dev.flip_bit("unsynced", 0).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        dev.write("empty", b"").unwrap();
        dev.sync("empty").unwrap();
        assert!(dev.flip_random_bit("empty").is_err());

        for _ in 0..20 {
            let before = dev.durable("c").unwrap();
            let bit = dev.flip_random_bit("c").unwrap();
            assert!(bit < bits);
            let after = dev.durable("c").unwrap();
            assert_eq!(differing_bits(&before, &after), 1);
            assert_ne!(after[(bit / 8) as usize], before[(bit / 8) as usize]);
        }

        // With unsynced changes, readers keep the page cache until the crash shows the damage.
        let dev = SimDevice::new(11);
        dev.write("j", b"ab").unwrap();
        dev.sync("j").unwrap();
        dev.append("j", b"cd").unwrap();
        dev.flip_bit("j", 0).unwrap();
        assert_eq!(dev.read("j").unwrap().as_deref(), Some(&b"abcd"[..]));
        let after = dev.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.read("j").unwrap().as_deref(), Some(&b"`b"[..]));
    }

    fn workload(dev: &SimDevice) {
        for i in 0..20u8 {
            let name = format!("f{}", i % 5);
            dev.append(&name, &vec![i; 1 + usize::from(i) * 7]).unwrap();
            if i % 3 == 0 {
                dev.sync(&name).unwrap();
            }
            if i % 7 == 6 {
                dev.rename(&name, &format!("r{i}")).unwrap();
            }
        }
    }

    #[test]
    fn crashes_are_deterministic_from_the_seed() {
        let images = |seed| {
            let dev = SimDevice::new(seed);
            workload(&dev);
            let mut out = Vec::new();
            for mode in [CrashMode::TornTail, CrashMode::Random, CrashMode::TornTail] {
                let after = dev.crash(mode);
                out.push(image(&after));
                out.push(image(&after.crash(CrashMode::Random)));
            }
            let bit = dev.flip_random_bit("f0").unwrap();
            (out, bit)
        };
        assert_eq!(images(42), images(42));
        assert!((0..10).any(|seed| images(seed) != images(42)));
    }

    #[test]
    fn crash_at_every_sync_point() {
        // The pattern crash tests use: stop durability after k sync points, then crash.
        let total = {
            let dev = SimDevice::new(5);
            workload(&dev);
            dev.sync_count()
        };
        assert!(total > 5);
        let mut previous_durable_bytes = 0;
        for k in 0..=total {
            let dev = SimDevice::new(5);
            dev.fail_after_syncs(k);
            for i in 0..20u8 {
                let name = format!("f{}", i % 5);
                dev.append(&name, &vec![i; 1 + usize::from(i) * 7]).unwrap();
                if i % 3 == 0 {
                    let _ = dev.sync(&name);
                }
                if i % 7 == 6 {
                    let _ = dev.rename(&name, &format!("r{i}"));
                }
            }
            assert_eq!(dev.sync_count(), k);
            let after = dev.crash(CrashMode::LoseUnsynced);
            let bytes: usize = image(&after).iter().map(|(_, c)| c.len()).sum();
            assert!(bytes >= previous_durable_bytes);
            previous_durable_bytes = bytes;
        }
    }

    use crate::persist::device::faults::{CrashImages, Delay, FailSyncs, Faults, Files, SyncOp};
    use std::time::{Duration, Instant};

    #[test]
    fn failing_syncs_can_be_scoped_to_calls_and_files() {
        // What a failed rename of one file looks like: its sync and other renames pass.
        let dev = SimDevice::new(0);
        dev.set_faults(Faults {
            fail_syncs: Some(FailSyncs {
                ops: &[SyncOp::Rename],
                files: Files::Named("journal.tmp".into()),
                ..FailSyncs::after(0)
            }),
            ..Faults::default()
        });
        dev.write("journal.tmp", b"j").unwrap();
        dev.write("checkpoint.tmp", b"c").unwrap();
        dev.sync("journal.tmp").unwrap();
        dev.sync("checkpoint.tmp").unwrap();
        dev.rename("checkpoint.tmp", "checkpoint").unwrap();
        let e = dev.rename("journal.tmp", "journal").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(dev.names(), ["checkpoint", "journal.tmp"]);
        assert_eq!(dev.sync_count(), 3);
        dev.clear_faults();
        dev.rename("journal.tmp", "journal").unwrap();

        // The nth sync point fails, the ones before and after it pass.
        let dev = SimDevice::new(0);
        dev.set_faults(Faults {
            fail_syncs: Some(FailSyncs::nth(1)),
            ..Faults::default()
        });
        dev.append("a", b"1").unwrap();
        dev.sync("a").unwrap();
        dev.append("a", b"2").unwrap();
        assert!(dev.sync("a").is_err());
        assert_eq!(dev.durable("a").as_deref(), Some(&b"1"[..]));
        dev.sync("a").unwrap();
        assert_eq!(dev.durable("a").as_deref(), Some(&b"12"[..]));
        assert_eq!(dev.sync_count(), 2);

        // A prefix, and a predicate.
        let dev = SimDevice::new(0);
        dev.set_faults(Faults {
            fail_syncs: Some(FailSyncs {
                files: Files::Prefix("journal".into()),
                ..FailSyncs::after(0)
            }),
            ..Faults::default()
        });
        for name in ["journal", "journal.tmp", "checkpoint"] {
            dev.append(name, b"x").unwrap();
        }
        assert!(dev.sync("journal").is_err());
        assert!(dev.sync("journal.tmp").is_err());
        assert!(dev.remove("journal.tmp").is_err());
        dev.sync("checkpoint").unwrap();
        dev.set_faults(Faults {
            fail_syncs: Some(FailSyncs {
                files: Files::Matching(|n| n.ends_with(".tmp")),
                ..FailSyncs::after(0)
            }),
            ..Faults::default()
        });
        dev.sync("journal").unwrap();
        assert!(dev.sync("journal.tmp").is_err());
        assert!(dev.faults().fail_syncs.is_some());
    }

    #[test]
    fn failing_writes_can_be_scoped_to_files() {
        let dev = SimDevice::new(0);
        dev.write("journal", b"j").unwrap();
        dev.set_faults(Faults {
            fail_writes: Some(Files::Prefix("checkpoint".into())),
            ..Faults::default()
        });
        let enospc = Some(libc::ENOSPC);
        assert_eq!(
            dev.write("checkpoint.tmp", b"x")
                .unwrap_err()
                .raw_os_error(),
            enospc
        );
        assert_eq!(dev.read("checkpoint.tmp").unwrap(), None);
        dev.append("journal", b"+").unwrap();
        dev.write_at("journal", 0, b"J").unwrap();
        assert_eq!(dev.read("journal").unwrap().as_deref(), Some(&b"J+"[..]));
        dev.set_faults(Faults {
            fail_writes: Some(Files::Named("journal".into())),
            ..Faults::default()
        });
        for result in [
            dev.append("journal", b"x"),
            dev.write_at("journal", 0, b"x"),
            dev.write_at_sparse("journal", 9, b"x"),
            dev.set_len("journal", 9),
        ] {
            assert_eq!(result.unwrap_err().raw_os_error(), enospc);
        }
        // What frees space still works.
        dev.punch_hole("journal", 0, 1).unwrap();
        dev.set_len("journal", 1).unwrap();
        dev.truncate("journal", 0).unwrap();
        dev.write("checkpoint.tmp", b"fine").unwrap();
    }

    #[test]
    fn a_full_disk_refuses_growth_past_its_capacity() {
        let dev = SimDevice::new(0);
        dev.set_faults(Faults {
            capacity_bytes: Some(10),
            ..Faults::default()
        });
        let enospc = Some(libc::ENOSPC);
        dev.append("a", b"123456").unwrap();
        assert_eq!(
            dev.append("b", b"12345").unwrap_err().raw_os_error(),
            enospc
        );
        assert_eq!(dev.read("b").unwrap(), None);
        dev.append("b", b"1234").unwrap(); // exactly full
        assert_eq!(dev.append("a", b"7").unwrap_err().raw_os_error(), enospc);
        assert_eq!(dev.set_len("b", 5).unwrap_err().raw_os_error(), enospc);
        assert_eq!(
            dev.write_at_sparse("b", 4, b"x")
                .unwrap_err()
                .raw_os_error(),
            enospc
        );
        // Overwriting in place, or replacing with no more, still fits.
        dev.write_at("a", 0, b"abcdef").unwrap();
        dev.write("b", b"wxyz").unwrap();
        // Freeing space makes room again.
        dev.truncate("a", 2).unwrap();
        dev.append("b", b"1234").unwrap();
        dev.remove("a").unwrap();
        dev.set_len("b", 10).unwrap();
        assert_eq!(dev.len("b").unwrap(), Some(10));
        assert_eq!(dev.read("a").unwrap(), None);
    }

    #[test]
    fn delays_slow_down_only_the_chosen_files() {
        let pause = Duration::from_millis(150);
        let dev = SimDevice::new(0);
        dev.append("slow", b"x").unwrap();
        dev.append("fast", b"x").unwrap();
        dev.set_faults(Faults {
            delay: Some(Delay {
                files: Files::Named("slow".into()),
                write: pause,
                sync: pause * 2,
            }),
            ..Faults::default()
        });
        let timed = |f: &dyn Fn()| {
            let start = Instant::now();
            f();
            start.elapsed()
        };
        assert!(timed(&|| dev.append("slow", b"y").unwrap()) >= pause);
        assert!(timed(&|| dev.write_at("slow", 0, b"z").unwrap()) >= pause);
        assert!(timed(&|| dev.sync("slow").unwrap()) >= pause * 2);
        assert!(timed(&|| dev.truncate("slow", 1).unwrap()) < pause);
        assert!(timed(&|| dev.append("fast", b"y").unwrap()) < pause);
        assert!(timed(&|| dev.sync("fast").unwrap()) < pause);
        // The device is not locked while a write sleeps: other files go on meanwhile.
        let dev = std::sync::Arc::new(dev);
        let slow = {
            let dev = dev.clone();
            std::thread::spawn(move || dev.append("slow", b"w").unwrap())
        };
        std::thread::sleep(pause / 3);
        assert!(timed(&|| dev.append("fast", b"z").unwrap()) < pause);
        slow.join().unwrap();
        assert_eq!(dev.read("slow").unwrap().as_deref(), Some(&b"zw"[..]));
    }

    #[test]
    fn crash_images_are_taken_before_the_chosen_sync_points() {
        let every = |ops| CrashImages {
            mode: CrashMode::LoseUnsynced,
            at: None,
            ops,
        };
        let dev = SimDevice::new(0);
        dev.set_faults(Faults {
            crash_images: Some(every(&[SyncOp::Sync, SyncOp::Rename])),
            ..Faults::default()
        });
        dev.append("j", b"1").unwrap();
        dev.sync("j").unwrap(); // image: nothing durable yet
        dev.append("j", b"2").unwrap();
        dev.sync("j").unwrap(); // image: "1"
        dev.rename("j", "k").unwrap(); // image: "12" at j
        dev.remove("k").unwrap(); // not a chosen call
        assert_eq!(dev.crash_images_taken(), 3);
        let images = dev.take_crash_images();
        assert_eq!(dev.crash_images_taken(), 0);
        let j: Vec<_> = images.iter().map(|i| i.read("j").unwrap()).collect();
        assert_eq!(j, [None, Some(b"1".to_vec()), Some(b"12".to_vec())]);

        // Only before one sync point, even one that fails.
        let dev = SimDevice::new(0);
        dev.set_faults(Faults {
            crash_images: Some(CrashImages {
                at: Some(1),
                ..every(super::super::faults::ALL_SYNC_OPS)
            }),
            fail_syncs: Some(FailSyncs::after(1)),
            ..Faults::default()
        });
        dev.append("j", b"1").unwrap();
        dev.sync("j").unwrap();
        dev.append("j", b"2").unwrap();
        assert!(dev.sync("j").is_err());
        assert!(dev.sync("j").is_err());
        let images = dev.take_crash_images();
        // Two calls came while the count was 1 (the failed ones do not count).
        assert_eq!(images.len(), 2);
        assert_eq!(images[0].read("j").unwrap().as_deref(), Some(&b"1"[..]));
    }

    #[test]
    fn torn_writes_tear_inside_the_bytes_written_not_the_reserved_zeros() {
        // A journal's commit: a batch over reserved zeros, then more zeros reserved after it.
        let header = [b'H'; 64];
        let reserve = vec![0u8; 4096];
        let batch: Vec<u8> = (1..=100u8).collect();
        let (mut none, mut whole, mut torn) = (0, 0, 0);
        for seed in 0..400 {
            let dev = SimDevice::new(seed);
            dev.write("journal", &header).unwrap();
            dev.append("journal", &reserve).unwrap();
            dev.sync("journal").unwrap();
            let end = header.len() + reserve.len();
            dev.write_at("journal", 64, &batch).unwrap();
            dev.write_at("journal", end as u64, &reserve).unwrap();
            let volatile = dev.read("journal").unwrap().unwrap();
            let image = dev
                .crash(CrashMode::TornTail)
                .read("journal")
                .unwrap()
                .unwrap();
            let durable = dev.durable("journal").unwrap();
            assert!(is_torn_in_order(&image, &durable, &volatile));
            match image[64..164].iter().take_while(|&&b| b != 0).count() {
                0 => none += 1,
                100 => whole += 1,
                _ => torn += 1,
            }
        }
        // About half the images cut the batch itself (a cut anywhere in the 8,292 changed
        // bytes would land in its 100 bytes one time in 80).
        assert!(torn > 120, "{none} {whole} {torn}");
        assert!(none > 50 && whole > 50, "{none} {whole} {torn}");

        // A file never synced tears inside its data too.
        let torn_new = (0..200)
            .filter(|&seed| {
                let dev = SimDevice::new(seed);
                dev.append("c", &batch).unwrap();
                dev.set_len("c", 10_000).unwrap();
                let image = dev.crash(CrashMode::TornTail).read("c").unwrap();
                image.is_some_and(|c| !c.is_empty() && c.len() < batch.len())
            })
            .count();
        assert!(torn_new > 40, "{torn_new}");
    }

    #[test]
    fn events_list_the_latest_writes_and_syncs() {
        let dev = SimDevice::new(0);
        dev.append("j", b"abc").unwrap();
        dev.write_at("j", 1, b"X").unwrap();
        dev.punch_hole("j", 0, 1).unwrap();
        dev.sync("j").unwrap();
        let _ = dev.sync("absent");
        let w = |offset, len, zeros| Event::Write {
            name: "j".into(),
            offset,
            len,
            zeros,
        };
        let sync = Event::Sync { name: "j".into() };
        assert_eq!(
            dev.events(),
            [w(0, 3, false), w(1, 1, false), w(0, 1, true), sync]
        );
        for _ in 0..EVENTS_MAX {
            dev.append("j", b"x").unwrap();
        }
        let events = dev.events();
        assert_eq!(events.len(), EVENTS_MAX);
        assert_eq!(events.last(), Some(&w(3 + EVENTS_MAX as u64 - 1, 1, false)));
        dev.write_at("j", 0, &[0, 0]).unwrap();
        assert_eq!(dev.events().last(), Some(&w(0, 2, true)));
    }
}
