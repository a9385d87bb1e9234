//! PostMark's algorithm (postmark.c v1.53, as packaged by Debian), re-done in Rust with one
//! addition: Conquest's second size class (§5.3). With the large share at 0 it draws the same
//! random numbers in the same order as the real tool and so performs exactly the same file
//! operations, which the test in `conquest_postmark.rs` checks against `/usr/bin/postmark`.
//!
//! Kept from postmark.c, on purpose:
//! - the file table has `2 × files` slots; a slot is free when its size is 0; new files take
//!   the next slot after the last one allocated, else the first free one;
//! - names are `s<RND(subdirectories)>/<files created so far>` when there are more than one
//!   subdirectory, else just the number;
//! - a file's size is `low + RND(high - low)` (so `high` itself is only reached by appends);
//! - a transaction draws `RND(10) < bias_read` (read, else append) and then
//!   `RND(10) < bias_create` (create, else delete); a bias of -1 disables that half;
//! - a used file is found by drawing `RND(2 × files)` until the slot is in use;
//! - reads read the whole file in `read_block` pieces then the remainder (possibly 0 bytes);
//!   writes likewise from a buffer of `2 × high` printable random bytes made from the
//!   generator before anything else;
//! - an append adds `RND(high - size) + 1` bytes, and only to a file below `high`;
//! - unbuffered I/O: plain open/read/write/close, files opened `O_RDWR|O_CREAT` (create),
//!   `O_RDONLY` (read), `O_RDWR|O_APPEND` (append).
//!
//! Conquest's addition (its modified source is not available to us; this is our reading of
//! §5.3): when a file is created it is large with probability `large_per_mille / 1000`, drawn
//! as `RND(1000) < large_per_mille` just before its size, and only when the share is above 0
//! (so a share of 0 leaves postmark's sequence untouched). A large file's size and its append
//! limit come from the large class. The write buffer is twice the largest class's `high`.
//! Every share above 0 draws the same numbers, so those runs perform the same sequence of
//! operations and differ only in which files are large.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::mt::Mt19937;
use crate::cmd::Cancel;
use crate::error::{BenchError, Result};
use crate::workload::data::io_err;

/// File sizes drawn uniformly from `low_bytes..high_bytes` (PostMark's `set size low high`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeClass {
    pub low_bytes: u32,
    pub high_bytes: u32,
}

#[derive(Clone, Debug)]
pub struct Config {
    /// `set number`: files in the initial pool.
    pub files: u32,
    /// `set transactions`.
    pub transactions: u32,
    /// `set subdirectories` (postmark uses them only when above 1).
    pub subdirectories: u32,
    pub small: SizeClass,
    pub large: SizeClass,
    /// Share of created files that are large, in tenths of a percent (0..=1000).
    pub large_per_mille: u32,
    pub read_block_bytes: u32,
    pub write_block_bytes: u32,
    /// `set bias read`: out of 10, the chance a transaction reads rather than appends; -1 off.
    pub bias_read: i32,
    /// `set bias create`: out of 10, the chance of creating rather than deleting; -1 off.
    pub bias_create: i32,
    /// `set seed`.
    pub seed: u32,
}

impl Config {
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(BenchError::Other(format!("PostMark driver: {what}")));
        if self.files == 0 || self.transactions == 0 {
            return bad("files and transactions must be positive");
        }
        for class in [self.small, self.large] {
            if class.low_bytes == 0 || class.low_bytes > class.high_bytes {
                // A size of 0 would mark the slot free, as in postmark.c.
                return bad("a size class needs 0 < low <= high");
            }
        }
        if self.large_per_mille > 1000 {
            return bad("the large share is at most 1000 per mille");
        }
        if self.read_block_bytes == 0 || self.write_block_bytes == 0 {
            return bad("block sizes must be positive");
        }
        if !(-1..=10).contains(&self.bias_read) || !(-1..=10).contains(&self.bias_create) {
            return bad("biases are -1..=10");
        }
        if self.files.checked_mul(2).is_none() {
            return bad("too many files");
        }
        Ok(())
    }

    fn source_bytes(&self) -> usize {
        let high = if self.large_per_mille > 0 {
            self.small.high_bytes.max(self.large.high_bytes)
        } else {
            self.small.high_bytes
        };
        high as usize * 2
    }
}

/// What PostMark's verbose report counts, and the times of its three phases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub created: u64,
    /// Files created in the initial pool ("Creation alone").
    pub created_alone: u64,
    /// Files created by transactions ("Mixed with transactions").
    pub created_mixed: u64,
    pub read: u64,
    pub appended: u64,
    pub deleted: u64,
    /// Files deleted after the transactions ("Deletion alone").
    pub deleted_alone: u64,
    pub deleted_mixed: u64,
    /// Of `created`, how many were large.
    pub created_large: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

#[derive(Clone, Debug)]
pub struct RunTimes {
    pub create_pool: Duration,
    pub transactions: Duration,
    pub delete_rest: Duration,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    /// Current size; 0 = free slot (postmark's convention).
    size_bytes: u32,
    /// The file's number (its name) and subdirectory.
    number: u64,
    subdir: u32,
    large: bool,
}

/// What the driver runs on: system calls (a mounted peer), or a file system in the process
/// (`library.rs`). postmark.c's opens, as each method says.
pub trait Target {
    type File: Read + Write;
    fn create_dir(&self, path: &Path) -> std::io::Result<()>;
    fn remove_dir(&self, path: &Path) -> std::io::Result<()>;
    /// O_RDWR|O_CREAT, mode 0644, no O_TRUNC (names are never reused in a run).
    fn create(&self, path: &Path) -> std::io::Result<Self::File>;
    /// O_RDONLY.
    fn open_read(&self, path: &Path) -> std::io::Result<Self::File>;
    /// O_RDWR|O_APPEND.
    fn open_append(&self, path: &Path) -> std::io::Result<Self::File>;
    fn remove_file(&self, path: &Path) -> std::io::Result<()>;
}

/// System calls through `std::fs`, on whatever is mounted.
pub struct Syscalls;

impl Target for Syscalls {
    type File = std::fs::File;
    fn create_dir(&self, path: &Path) -> std::io::Result<()> {
        std::fs::create_dir(path)
    }
    fn remove_dir(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_dir(path)
    }
    fn create(&self, path: &Path) -> std::io::Result<std::fs::File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
    }
    fn open_read(&self, path: &Path) -> std::io::Result<std::fs::File> {
        std::fs::File::open(path)
    }
    fn open_append(&self, path: &Path) -> std::io::Result<std::fs::File> {
        OpenOptions::new().read(true).append(true).open(path)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_file(path)
    }
}

struct Driver<'a, T: Target> {
    target: &'a T,
    cfg: &'a Config,
    dir: &'a Path,
    cancel: &'a Cancel,
    rng: Mt19937,
    source: Vec<u8>,
    read_buffer: Vec<u8>,
    table: Vec<Slot>,
    /// postmark's `file_allocated`.
    next_slot: usize,
    counts: Counts,
    path: PathBuf,
}

/// Runs one PostMark iteration in `dir` (which must exist and be empty): creates the
/// subdirectories, the pool, runs the transactions, deletes what is left and the
/// subdirectories. Fails on any I/O error (postmark would print it and carry on, making its
/// counts meaningless) and when the pool runs out of files, as postmark does.
pub fn run(cfg: &Config, dir: &Path, cancel: &Cancel) -> Result<(Counts, RunTimes)> {
    run_on(&Syscalls, cfg, dir, cancel)
}

/// [`run`] on `target`.
pub fn run_on<T: Target>(
    target: &T,
    cfg: &Config,
    dir: &Path,
    cancel: &Cancel,
) -> Result<(Counts, RunTimes)> {
    cfg.validate()?;
    let mut rng = Mt19937::new(cfg.seed);
    // postmark.c's initialize_file_source: printable junk, drawn before anything else.
    let source: Vec<u8> = (0..cfg.source_bytes())
        .map(|_| 32 + rng.rnd(95) as u8)
        .collect();
    let mut d = Driver {
        target,
        cfg,
        dir,
        cancel,
        rng,
        source,
        read_buffer: vec![0; cfg.read_block_bytes as usize],
        table: vec![Slot::default(); cfg.files as usize * 2],
        next_slot: 0,
        counts: Counts::default(),
        path: PathBuf::new(),
    };
    if cfg.subdirectories > 1 {
        for i in 0..cfg.subdirectories {
            let sub = dir.join(format!("s{i}"));
            target.create_dir(&sub).map_err(io_err("creating", &sub))?;
        }
    }
    let outcome = d.phases();
    if cfg.subdirectories > 1 {
        for i in 0..cfg.subdirectories {
            let sub = dir.join(format!("s{i}"));
            // After an error files may remain; the caller removes the tree then.
            let _ = target.remove_dir(&sub);
        }
    }
    let times = outcome?;
    Ok((d.counts, times))
}

impl<T: Target> Driver<'_, T> {
    fn phases(&mut self) -> Result<RunTimes> {
        let started = Instant::now();
        for i in 0..self.cfg.files {
            if i % 256 == 0 {
                self.cancel.check()?;
            }
            self.create_file()?;
        }
        self.counts.created_alone = self.counts.created;
        let pool_done = Instant::now();

        for i in 0..self.cfg.transactions {
            if i % 256 == 0 {
                self.cancel.check()?;
            }
            if self.counts.created == self.counts.deleted {
                return Err(BenchError::Other(format!(
                    "PostMark driver: out of files after {i} transactions (more files or \
                     fewer transactions needed, as postmark says)"
                )));
            }
            if self.cfg.bias_read != -1 {
                if (self.rng.rnd(10) as i32) < self.cfg.bias_read {
                    let slot = self.find_used_file();
                    self.read_file(slot)?;
                } else {
                    let slot = self.find_used_file();
                    self.append_file(slot)?;
                }
            }
            if self.cfg.bias_create != -1 {
                if (self.rng.rnd(10) as i32) < self.cfg.bias_create {
                    self.create_file()?;
                } else {
                    let slot = self.find_used_file();
                    self.delete_file(slot)?;
                }
            }
        }
        let transactions_done = Instant::now();
        self.counts.created_mixed = self.counts.created - self.counts.created_alone;

        let deleted_before = self.counts.deleted;
        for slot in 0..self.table.len() {
            if slot % 256 == 0 {
                self.cancel.check()?;
            }
            self.delete_file(slot)?;
        }
        let finished = Instant::now();
        self.counts.deleted_alone = self.counts.deleted - deleted_before;
        self.counts.deleted_mixed = deleted_before;
        Ok(RunTimes {
            create_pool: pool_done - started,
            transactions: transactions_done - pool_done,
            delete_rest: finished - transactions_done,
        })
    }

    fn set_path(&mut self, slot: usize) {
        let s = &self.table[slot];
        self.path.clear();
        self.path.push(self.dir);
        if self.cfg.subdirectories > 1 {
            self.path.push(format!("s{}", s.subdir));
        }
        self.path.push(s.number.to_string());
    }

    /// postmark.c's find_free_file.
    fn find_free_file(&mut self) -> Option<usize> {
        if self.next_slot < self.table.len() && self.table[self.next_slot].size_bytes == 0 {
            self.next_slot += 1;
            return Some(self.next_slot - 1);
        }
        let free = self.table.iter().position(|s| s.size_bytes == 0)?;
        self.next_slot = free + 1;
        Some(free)
    }

    /// postmark.c's find_used_file (only called while some file exists).
    fn find_used_file(&mut self) -> usize {
        loop {
            let slot = self.rng.rnd(self.table.len() as u32) as usize;
            if self.table[slot].size_bytes != 0 {
                return slot;
            }
        }
    }

    fn class(&self, large: bool) -> SizeClass {
        if large {
            self.cfg.large
        } else {
            self.cfg.small
        }
    }

    fn create_file(&mut self) -> Result<()> {
        let Some(slot) = self.find_free_file() else {
            return Ok(());
        };
        // create_file_name: the subdirectory is drawn before the number is taken.
        let subdir = if self.cfg.subdirectories > 1 {
            self.rng.rnd(self.cfg.subdirectories)
        } else {
            0
        };
        self.counts.created += 1;
        let large = self.cfg.large_per_mille > 0 && self.rng.rnd(1000) < self.cfg.large_per_mille;
        let class = self.class(large);
        let size_bytes = class.low_bytes + self.rng.rnd(class.high_bytes - class.low_bytes);
        self.table[slot] = Slot {
            size_bytes,
            number: self.counts.created,
            subdir,
            large,
        };
        if large {
            self.counts.created_large += 1;
        }
        self.set_path(slot);
        let file = self
            .target
            .create(&self.path)
            .map_err(io_err("creating", &self.path))?;
        self.write_blocks(file, size_bytes)
    }

    /// postmark.c's write_blocks: whole blocks from the start of the source buffer, then the
    /// remainder (a zero-length write when there is none, as postmark does), then close.
    fn write_blocks(&mut self, mut file: T::File, size_bytes: u32) -> Result<()> {
        let block = self.cfg.write_block_bytes as usize;
        let size = size_bytes as usize;
        let mut offset = 0;
        let err = |e| BenchError::io("PostMark driver: writing", e);
        while size - offset >= block {
            file.write_all(&self.source[offset..offset + block])
                .map_err(err)?;
            offset += block;
        }
        let rest = &self.source[offset..size];
        if rest.is_empty() {
            file.write(rest).map_err(err)?;
        } else {
            file.write_all(rest).map_err(err)?;
        }
        self.counts.bytes_written += size_bytes as u64;
        Ok(())
    }

    fn read_file(&mut self, slot: usize) -> Result<()> {
        self.set_path(slot);
        let mut file = self
            .target
            .open_read(&self.path)
            .map_err(io_err("opening", &self.path))?;
        let size = self.table[slot].size_bytes as usize;
        let block = self.read_buffer.len();
        let err = |e| BenchError::io("PostMark driver: reading", e);
        let mut left = size;
        while left >= block {
            file.read_exact(&mut self.read_buffer).map_err(err)?;
            left -= block;
        }
        if left == 0 {
            file.read(&mut self.read_buffer[..0]).map_err(err)?;
        } else {
            file.read_exact(&mut self.read_buffer[..left])
                .map_err(err)?;
        }
        self.counts.bytes_read += size as u64;
        self.counts.read += 1;
        Ok(())
    }

    fn append_file(&mut self, slot: usize) -> Result<()> {
        let high = self.class(self.table[slot].large).high_bytes;
        let size = self.table[slot].size_bytes;
        if size >= high {
            return Ok(());
        }
        self.set_path(slot);
        let file = self
            .target
            .open_append(&self.path)
            .map_err(|e| BenchError::io(format!("opening {} to append", self.path.display()), e))?;
        let block = self.rng.rnd(high - size) + 1;
        self.write_blocks(file, block)?;
        self.table[slot].size_bytes += block;
        self.counts.appended += 1;
        Ok(())
    }

    fn delete_file(&mut self, slot: usize) -> Result<()> {
        if self.table[slot].size_bytes == 0 {
            return Ok(());
        }
        self.set_path(slot);
        self.target
            .remove_file(&self.path)
            .map_err(io_err("deleting", &self.path))?;
        self.table[slot].size_bytes = 0;
        self.counts.deleted += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mixed_config(large_per_mille: u32) -> Config {
        Config {
            files: 500,
            transactions: 3_000,
            subdirectories: 5,
            small: SizeClass {
                low_bytes: 100,
                high_bytes: 200,
            },
            // Cheap stand-ins for 2–5 MiB: the class logic, not the bytes, is under test.
            large: SizeClass {
                low_bytes: 1_000,
                high_bytes: 2_000,
            },
            large_per_mille,
            read_block_bytes: 64,
            write_block_bytes: 64,
            bias_read: 8,
            bias_create: 5,
            seed: 42,
        }
    }

    /// With a share above 0 there is no real tool to compare with, so check what can be
    /// checked: the share of large files is the asked one within 4 standard deviations, every
    /// file stays within its class's bounds (the bytes read are a sum of sizes), and the same
    /// seed gives the same run.
    #[test]
    fn large_share_is_drawn_as_configured() {
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        for per_mille in [0u32, 100, 500] {
            let cfg = mixed_config(per_mille);
            let dir = shm.path().join(format!("p{per_mille}"));
            std::fs::create_dir(&dir).unwrap();
            let (counts, _) = run(&cfg, &dir, Cancel::global()).unwrap();
            let n = counts.created as f64;
            let p = per_mille as f64 / 1000.0;
            let sd = (n * p * (1.0 - p)).sqrt();
            let large = counts.created_large as f64;
            assert!((large - n * p).abs() <= 4.0 * sd + 1e-9, "{counts:?}");
            let mean_read = counts.bytes_read as f64 / counts.read as f64;
            assert!(
                mean_read >= 100.0 && mean_read <= 200.0 + p * 1_800.0,
                "{counts:?}"
            );
            let dir2 = shm.path().join(format!("again{per_mille}"));
            std::fs::create_dir(&dir2).unwrap();
            assert_eq!(run(&cfg, &dir2, Cancel::global()).unwrap().0, counts);
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        }
    }
}
