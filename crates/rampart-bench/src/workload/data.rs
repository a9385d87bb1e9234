//! What several workloads share: seeded pseudo-random data (the same on every peer, and
//! incompressible, so a compressing peer such as btrfs zstd gets no free ride), file helpers
//! that report every error with the path, and digit grouping for settings.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::path::Path;

use crate::error::{BenchError, Result};

/// splitmix64 (Steele, Lea and Flood, 2014): tiny, seedable and the same everywhere, so every
/// peer gets the same offsets and the same data.
pub(crate) struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), without modulo bias (Lemire's multiply-shift, with the
    /// rejection step).
    pub fn below(&mut self, n: u64) -> u64 {
        loop {
            let product = (self.next_u64() as u128) * (n as u128);
            let low = product as u64;
            if low >= n.wrapping_neg() % n {
                return (product >> 64) as u64;
            }
        }
    }

    /// `0..n` in a random order (Fisher–Yates).
    pub fn permutation(&mut self, n: u64) -> Vec<u64> {
        let mut order: Vec<u64> = (0..n).collect();
        for i in (1..order.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        order
    }

    /// Incompressible bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// Creates `path` (it must not exist), writes `size_bytes` from `rng` in 1 MiB writes, fsyncs
/// and closes it.
pub(crate) fn write_random_file(path: &Path, size_bytes: u64, rng: &mut SplitMix64) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err("creating", path))?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = size_bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        rng.fill(&mut chunk[..n]);
        file.write_all(&chunk[..n])
            .map_err(io_err("writing", path))?;
        left -= n as u64;
    }
    file.sync_all().map_err(io_err("fsync of", path))?;
    close_checked(file, path)
}

/// For `map_err`: an I/O error as "`what` `path`: error". The message is only made when there
/// is an error, so it costs nothing inside timed loops.
pub(crate) fn io_err<'a>(
    what: &'a str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> BenchError + 'a {
    move |e| BenchError::io(format!("{what} {}", path.display()), e)
}

/// Closes `file` and reports the error `Drop` would swallow (a FUSE file system reports write
/// errors at close, in its flush).
pub(crate) fn close_checked(file: File, path: &Path) -> Result<()> {
    nix::unistd::close(file.into_raw_fd()).map_err(|e| io_err("closing", path)(e.into()))
}

/// Makes what was written under `dir` durable: syncfs(2) of its file system, then fsync(2) of
/// `dir` itself. The fsync matters on FUSE, where the kernel does not pass syncfs on to the
/// daemon but does pass fsync (rampart commits its journal on it).
pub(crate) fn sync_and_fsync_dir(dir: &Path) -> Result<()> {
    let handle = File::open(dir).map_err(io_err("opening", dir))?;
    nix::unistd::syncfs(handle.as_raw_fd()).map_err(|e| io_err("syncfs of", dir)(e.into()))?;
    handle.sync_all().map_err(io_err("fsync of", dir))
}

/// 1234567 → "1,234,567" for settings.
pub(crate) fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_permutation_and_seeded() {
        let a = SplitMix64(42).permutation(1000);
        let b = SplitMix64(42).permutation(1000);
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_ne!(a, sorted, "shuffled");
    }

    #[test]
    fn splitmix64_reference_output() {
        // First output for seed 0 (the published splitmix64 reference value).
        assert_eq!(SplitMix64(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn random_files_have_the_size_and_the_seeded_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        // Past one 1 MiB write, and not a multiple of 8.
        let size_bytes = (1 << 20) + 13;
        write_random_file(&path, size_bytes, &mut SplitMix64(7)).unwrap();
        let written = std::fs::read(&path).unwrap();
        let mut expected = vec![0u8; size_bytes as usize];
        let mut rng = SplitMix64(7);
        rng.fill(&mut expected[..1 << 20]);
        rng.fill(&mut expected[1 << 20..]);
        assert_eq!(written, expected);
        // It refuses to overwrite.
        let err = write_random_file(&path, 1, &mut SplitMix64(7)).unwrap_err();
        assert!(err.to_string().starts_with("creating "), "{err}");
    }

    #[test]
    fn digits_are_grouped() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1_000), "1,000");
        assert_eq!(group_digits(200_000), "200,000");
        assert_eq!(group_digits(1_234_567), "1,234,567");
    }
}
