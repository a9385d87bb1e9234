//! Gives freed memory back to the system after the file system shrinks.
//!
//! glibc keeps freed heap memory for reuse: after PostMark deletes its 160 MB of files, the
//! daemon stayed at 250 MB resident for a file system of 1.5 MB. A memory-first file system
//! should not keep what its files no longer use, so a thread looks at how much free memory
//! the allocator holds and calls `malloc_trim` once that has grown by [`FREE_GROWTH_BYTES_MAX`]
//! since the last trim (trimmed memory still counts as free to the allocator, so the figure
//! after a trim is the baseline).
//!
//! `malloc_trim` gives back free pages inside the allocator's bins, but not the free top of a
//! thread's arena: glibc trims that only on `free`, once it exceeds a threshold that grows with
//! the largest block ever freed (up to 64 MiB per arena). After 256 MiB of 1 MiB files were
//! written and deleted, three arenas kept 25 MB each resident. The thresholds are therefore
//! fixed here (decision 0134).

use std::time::Duration;

/// How often the allocator's free memory is looked at.
const CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// Trim once the allocator's free memory has grown this much since the last trim.
const FREE_GROWTH_BYTES_MAX: usize = 16 << 20;

/// Blocks below this size come from the arenas, as they did under glibc's own growing
/// threshold (its largest value): file data and journal batches reuse memory without faults.
const MMAP_THRESHOLD_BYTES: usize = 32 << 20;
/// The free top of an arena beyond this is given back at the `free` that makes it.
const TRIM_THRESHOLD_BYTES: usize = 8 << 20;

/// Fixes the allocator's thresholds and starts the watcher thread (it lives as long as the
/// process).
pub fn start() -> std::io::Result<()> {
    set_thresholds();
    std::thread::Builder::new()
        .name("memory-trim".into())
        .spawn(|| {
            let mut baseline_bytes = 0usize;
            loop {
                std::thread::sleep(CHECK_INTERVAL);
                let free_bytes = free_held_bytes();
                if free_bytes > baseline_bytes + FREE_GROWTH_BYTES_MAX {
                    trim();
                    baseline_bytes = free_held_bytes();
                } else {
                    // Freed memory that was reused lowers the baseline too.
                    baseline_bytes = baseline_bytes.min(free_bytes);
                }
            }
        })
        .map(drop)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn free_held_bytes() -> usize {
    // SAFETY: mallinfo2 has no preconditions; it reads the allocator's statistics under its
    // own locks and returns them by value.
    let info = unsafe { libc::mallinfo2() };
    info.fordblks
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim has no preconditions; it takes the allocator's own locks and only
    // releases memory that no allocation holds.
    let released = unsafe { libc::malloc_trim(0) };
    tracing::debug!("malloc_trim released memory: {}", released != 0);
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_thresholds() {
    for (param, value) in [
        (libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        (libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
    ] {
        // SAFETY: mallopt has no preconditions; it changes the allocator's parameters under
        // its own lock. Both values are within glibc's accepted range (a refusal returns 0).
        if unsafe { libc::mallopt(param, value as libc::c_int) } == 0 {
            tracing::warn!("the allocator refused parameter {param} = {value}");
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_thresholds() {}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn free_held_bytes() -> usize {
    0
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
