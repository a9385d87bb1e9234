//! [`SimDevice`]: the simulated faulty device of the crash tests.

use std::collections::BTreeMap;
use std::fmt;
use std::io;

use parking_lot::Mutex;

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

/// The simulated faulty device for crash tests: deterministic from its seed, shared through
/// `Arc<SimDevice>`. [`SimDevice::crash`] returns a new device holding the state after a power
/// cut, as stated by the module's model.
pub struct SimDevice {
    state: Mutex<SimState>,
}

#[derive(Clone)]
struct SimFile {
    /// What readers see.
    volatile: Vec<u8>,
    /// What survives a crash; None if the file would not exist after one.
    durable: Option<Vec<u8>>,
}

struct SimState {
    files: BTreeMap<String, SimFile>,
    rng: SplitMix64,
    syncs: u64,
    fail_after_syncs: Option<u64>,
    fail_writes: bool,
}

impl SimState {
    /// Passes a sync point: fails with EIO if syncs are set to fail, else counts it.
    fn sync_point(&mut self) -> io::Result<()> {
        if let Some(limit) = self.fail_after_syncs {
            if self.syncs >= limit {
                return Err(os_error(libc::EIO));
            }
        }
        self.syncs += 1;
        Ok(())
    }

    fn check_writes(&self) -> io::Result<()> {
        if self.fail_writes {
            Err(os_error(libc::ENOSPC))
        } else {
            Ok(())
        }
    }

    fn file_mut(&mut self, name: &str) -> io::Result<&mut SimFile> {
        self.files
            .get_mut(name)
            .ok_or_else(|| os_error(libc::ENOENT))
    }

    fn file_or_create(&mut self, name: &str) -> &mut SimFile {
        self.files
            .entry(name.to_owned())
            .or_insert_with(|| SimFile {
                volatile: Vec::new(),
                durable: None,
            })
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

    /// How many of `n` unsynced bytes a torn write keeps: none and all are each likely (1/4),
    /// so recovery meets both edges often, else uniform in `0..=n`.
    fn torn_len(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        match self.below(4) {
            0 => 0,
            1 => n,
            _ => self.below(n as u64 + 1) as usize,
        }
    }
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
                fail_after_syncs: None,
                fail_writes: false,
            }),
        }
    }

    /// Sync points passed so far: successful `sync`, `rename`, and `remove` of an existing file.
    pub fn sync_count(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Once `n` sync points have passed (counting from the device's creation, see
    /// [`SimDevice::sync_count`]), every further `sync`, `rename` and `remove` fails with EIO
    /// and makes nothing durable. `fail_after_syncs(0)` fails them all from now on.
    pub fn fail_after_syncs(&self, n: u64) {
        self.state.lock().fail_after_syncs = Some(n);
    }

    /// While `fail` is true, `append`, `write` and `write_at` fail with ENOSPC and change
    /// nothing.
    pub fn set_fail_writes(&self, fail: bool) {
        self.state.lock().fail_writes = fail;
    }

    /// Ends every injected fault (`fail_after_syncs`, `set_fail_writes`).
    pub fn clear_faults(&self) {
        let mut state = self.state.lock();
        state.fail_after_syncs = None;
        state.fail_writes = false;
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
    pub fn crash(&self, mode: CrashMode) -> SimDevice {
        let mut state = self.state.lock();
        let mut rng = SplitMix64(state.rng.next());
        let mut files = BTreeMap::new();
        for (name, file) in &state.files {
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
                    let changed = &file.volatile[first_change..];
                    let cut = first_change + rng.torn_len(changed.len());
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
                        let keep = rng.torn_len(file.volatile.len());
                        Some(file.volatile[..keep].to_vec())
                    }
                }
                (_, durable) => durable.clone(),
            };
            if let Some(content) = image {
                let file = SimFile {
                    volatile: content.clone(),
                    durable: Some(content),
                };
                files.insert(name.clone(), file);
            }
        }
        let next = SplitMix64(rng.next());
        SimDevice::from_files(files, next)
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
        validate_name(name)?;
        let mut state = self.state.lock();
        state.check_writes()?;
        state.file_or_create(name).volatile.extend_from_slice(data);
        Ok(())
    }

    fn write(&self, name: &str, data: &[u8]) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        state.check_writes()?;
        state.file_or_create(name).volatile = data.to_vec();
        Ok(())
    }

    fn start_writeback(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        // Makes nothing durable (rule 2): only checks that the file exists.
        self.state.lock().file_mut(name).map(drop)
    }

    fn write_at(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        let writable = state.check_writes(); // reported after ENOENT, as DirDevice does
        let file = state.file_mut(name)?;
        writable?;
        let len = file.volatile.len() as u64;
        if offset > len {
            return Err(past_end(name, len, offset));
        }
        let (at, end) = (offset as usize, offset as usize + data.len());
        if end > file.volatile.len() {
            file.volatile.resize(end, 0);
        }
        file.volatile[at..end].copy_from_slice(data);
        Ok(())
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

    fn sync(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        state.file_mut(name)?;
        state.sync_point()?;
        let file = state.file_mut(name)?;
        file.durable = Some(file.volatile.clone());
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let mut state = self.state.lock();
        state.file_mut(from)?;
        state.sync_point()?;
        if from != to {
            let file = state.files.remove(from).expect("checked above");
            let moved = SimFile {
                volatile: file.volatile,
                durable: Some(file.durable.unwrap_or_default()),
            };
            state.files.insert(to.to_owned(), moved);
        }
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        validate_name(name)?;
        let mut state = self.state.lock();
        if state.files.contains_key(name) {
            state.sync_point()?;
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
}
