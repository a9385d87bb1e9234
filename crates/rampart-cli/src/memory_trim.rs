//! Gives freed memory back to the system after the file system shrinks.
//!
//! glibc keeps freed heap memory for reuse: after PostMark deletes its 160 MB of files, the
//! daemon stayed at 250 MB resident for a file system of 1.5 MB. A memory-first file system
//! should not keep what its files no longer use, so a thread looks at how much free memory
//! the allocator holds and calls `malloc_trim` once that has grown by [`FREE_GROWTH_BYTES_MAX`]
//! since the last trim (trimmed memory still counts as free to the allocator, so the figure
//! after a trim is the baseline).

use std::time::Duration;

/// How often the allocator's free memory is looked at.
const CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// Trim once the allocator's free memory has grown this much since the last trim.
const FREE_GROWTH_BYTES_MAX: usize = 16 << 20;

/// Starts the watcher thread (it lives as long as the process).
pub fn start() -> std::io::Result<()> {
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

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn free_held_bytes() -> usize {
    0
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
