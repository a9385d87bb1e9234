//! fsync per file for programs the bench does not write (postmark, tar) on host-fsync: an
//! `LD_PRELOAD` shim, compiled with `cc` at the run, whose `close(2)` and `fclose(3)` fsync a
//! regular file open for writing before closing it, as a program that wants its files durable
//! does (decision 0108). Each process adds the fsyncs it made to a count file at exit, so the
//! run reports how many there were: a figure that could be 0, not an assumption.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::data::io_err;
use crate::cmd::{self, Cancel};
use crate::error::{BenchError, Result};

/// The shim. `close` is looked up lazily (a constructor may run after another library's
/// first close); an fsync that fails fails the close with its errno, so the program reports
/// it instead of believing its file durable.
const SHIM_C: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned long fsyncs;
static int (*real_close)(int);
static int (*real_fclose)(FILE *);

static int written_regular(int fd) {
    int flags = fcntl(fd, F_GETFL);
    struct stat st;
    if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY) return 0;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

/* 0, or the errno of a failed fsync. */
static int sync_if_written(int fd) {
    if (fd < 0 || !written_regular(fd)) return 0;
    if (fsync(fd) != 0) return errno;
    __atomic_add_fetch(&fsyncs, 1, __ATOMIC_RELAXED);
    return 0;
}

int close(int fd) {
    if (!real_close) real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
    int failed = sync_if_written(fd);
    int r = real_close(fd);
    if (failed) { errno = failed; return -1; }
    return r;
}

int fclose(FILE *f) {
    if (!real_fclose) real_fclose = (int (*)(FILE *))dlsym(RTLD_NEXT, "fclose");
    int failed = 0;
    if (f && fflush(f) == 0) failed = sync_if_written(fileno(f));
    int r = real_fclose(f);
    if (failed) { errno = failed; return -1; }
    return r;
}

__attribute__((destructor)) static void report_fsyncs(void) {
    const char *path = getenv("RAMPART_BENCH_FSYNC_COUNT");
    if (!path) return;
    if (!real_close) real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0) return;
    dprintf(fd, "%lu\n", fsyncs);
    real_close(fd);
}
"#;

/// Longest `cc` may take to build the shim.
const CC_TIMEOUT: Duration = Duration::from_secs(60);

/// The environment variable naming the file the shim adds its count to.
const COUNT_VAR: &str = "RAMPART_BENCH_FSYNC_COUNT";

/// A compiled shim and the file its processes report to.
pub struct FsyncShim {
    library: PathBuf,
    count_file: PathBuf,
}

impl FsyncShim {
    /// Compiles the shim into `scratch` (untimed: before the workload's clock starts).
    pub fn build(scratch: &Path, cancel: &Cancel) -> Result<FsyncShim> {
        let source = scratch.join("fsync-each.c");
        let library = scratch.join("fsync-each.so");
        std::fs::write(&source, SHIM_C).map_err(io_err("writing", &source))?;
        cmd::run(
            Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-o"])
                .arg(&library)
                .arg(&source)
                .arg("-ldl"),
            cancel,
            CC_TIMEOUT,
        )
        .map_err(|e| BenchError::Other(format!("compiling the fsync-per-file shim: {e}")))?;
        let count_file = scratch.join("fsync-each.count");
        let _ = std::fs::remove_file(&count_file);
        Ok(FsyncShim {
            library,
            count_file,
        })
    }

    /// Makes `command` fsync every file it writes before closing it.
    pub fn apply(&self, command: &mut Command) {
        command
            .env("LD_PRELOAD", &self.library)
            .env(COUNT_VAR, &self.count_file);
    }

    /// The fsyncs the shim's processes made, as they reported them at exit.
    pub fn fsyncs(&self) -> Result<u64> {
        let text = match std::fs::read_to_string(&self.count_file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(BenchError::Other(format!(
                    "no process reported its fsyncs to {} (the shim was not loaded?)",
                    self.count_file.display()
                )))
            }
            Err(e) => return Err(io_err("reading", &self.count_file)(e)),
        };
        text.lines()
            .map(|l| {
                l.trim().parse::<u64>().map_err(|_| {
                    BenchError::Other(format!("unexpected line {l:?} in the fsync count"))
                })
            })
            .sum()
    }
}

/// The note a run on host-fsync gets: how many files it fsync'd and how.
pub(crate) fn fsync_note(fsyncs: u64, how: &str) -> String {
    format!("fsync per file (host-fsync): {fsyncs} fsync(2) before close ({how})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_fsyncs_written_files_and_counts_them() {
        if cmd::which("cc").is_none() {
            println!("skipped: no cc");
            return;
        }
        let dir = crate::testing::shm_tempdir();
        let shim = FsyncShim::build(dir.path(), Cancel::global()).unwrap();
        let source = dir.path().join("a");
        std::fs::write(&source, b"hello").unwrap();
        let copy = dir.path().join("b");
        // cp writes one file: one fsync. cat only reads one: none (its stdout is a pipe).
        for (program, args) in [("cp", vec![&source, &copy]), ("cat", vec![&source])] {
            let mut command = Command::new(program);
            command.args(args);
            shim.apply(&mut command);
            cmd::run(&mut command, Cancel::global(), Duration::from_secs(30)).unwrap();
        }
        assert_eq!(std::fs::read(&copy).unwrap(), b"hello");
        assert_eq!(shim.fsyncs().unwrap(), 1);
        // Without the shim nothing is counted: the count is the shim's, not a guess.
        let other = FsyncShim {
            library: shim.library.clone(),
            count_file: dir.path().join("none"),
        };
        assert!(other.fsyncs().is_err());
    }
}
