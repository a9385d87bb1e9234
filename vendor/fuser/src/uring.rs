//! FUSE over io_uring (Linux 6.14+; rampart's addition to fuser).
//!
//! The kernel hands each request to the ring queue of the CPU the requesting task runs on,
//! and the reply goes back through the same entry. With one queue thread pinned to each CPU,
//! a request and its reply never wake another CPU, which on a VM without halt-polling saves
//! two wake-ups of a halted vCPU per request (docs/research/fuse-over-io-uring in rampart).
//!
//! Layout of one entry (kernel ABI, `struct fuse_uring_req_header` and a payload buffer):
//! - header, 288 bytes: `in_out` (128: the `fuse_in_header` of a request, the
//!   `fuse_out_header` of a reply), `op_in` (128: the request's first argument, if not empty),
//!   `fuse_uring_ent_in_out` (32: flags, commit_id, payload_sz, ...);
//! - payload: the request's other arguments concatenated / all of the reply's arguments.
//!
//! A request is rebuilt in the classic byte layout (header ‖ first argument ‖ rest) in front of
//! its payload, in the same allocation, so fuser's parser and dispatch serve it unchanged. A
//! reply is copied into a buffer of its own when it is sent (from any thread), and into the
//! entry by the queue thread, which alone touches its ring: it then commits it and fetches the
//! next request in one COMMIT_AND_FETCH. Replies sent from other threads (rampart answers
//! fsync from its commit thread) wake the queue thread through an eventfd read on the ring.
//!
//! FORGET, INTERRUPT, notifications and requests queued before the rings are ready still go
//! through `/dev/fuse`, so the classic event loop keeps running beside the queues.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use log::{debug, error, warn};
use parking_lot::Mutex;

use crate::Filesystem;
use crate::channel::{Channel, ChannelSender};
use crate::ll::Operation;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`.
const HEADER_BYTES: usize = 288;
const OP_IN_AT: usize = 128;
const OP_IN_BYTES: usize = 128;
const ENT_AT: usize = 256;
/// `struct fuse_in_header` / `struct fuse_out_header`.
const IN_HEADER_BYTES: usize = 40;
const OUT_HEADER_BYTES: usize = 16;
/// Room in front of the payload for the request's header and first argument.
const PAD_BYTES: usize = 4096;
/// The most memory all queues' entries may take together (at least 2 entries per queue).
const ENTRIES_BYTES_MAX: usize = 64 << 20;
/// user_data of the eventfd read; entries use their index.
const WAKE_USER_DATA: u64 = u64::MAX;

/// One registered entry's memory: the header and `[pad | payload]`.
struct EntryMemory {
    header: *mut u8,
    buf: *mut u8,
    payload_bytes: usize,
}

// SAFETY: the pointers own their allocations (freed in Drop); who may touch them when is
// governed by the entry's state: the kernel writes a request and reads a reply only while the
// entry is registered and not handed to us, and the queue thread alone reads and writes them
// in between (replies from other threads go through `Pending`, never to these buffers).
unsafe impl Send for EntryMemory {}

impl EntryMemory {
    // 16-byte alignment: the allocator then zeroes through calloc, whose large blocks are
    // fresh pages that cost memory only once the kernel writes a request into them (the kernel
    // copies with copy_to_user and needs no particular alignment; fuser's parser needs 8).
    fn header_layout() -> Layout {
        Layout::from_size_align(HEADER_BYTES, 16).expect("valid layout")
    }

    fn buf_layout(payload_bytes: usize) -> Layout {
        Layout::from_size_align(PAD_BYTES + payload_bytes, 16).expect("valid layout")
    }

    fn new(payload_bytes: usize) -> io::Result<EntryMemory> {
        // SAFETY: both layouts have a non-zero size.
        let header = unsafe { alloc_zeroed(Self::header_layout()) };
        let buf = unsafe { alloc_zeroed(Self::buf_layout(payload_bytes)) };
        if header.is_null() || buf.is_null() {
            // SAFETY: freeing what was allocated above with the same layouts.
            unsafe {
                if !header.is_null() {
                    dealloc(header, Self::header_layout());
                }
                if !buf.is_null() {
                    dealloc(buf, Self::buf_layout(payload_bytes));
                }
            }
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "io_uring entry"));
        }
        Ok(EntryMemory {
            header,
            buf,
            payload_bytes,
        })
    }

    fn payload(&self) -> *mut u8 {
        // SAFETY: the allocation is PAD_BYTES + payload_bytes long.
        unsafe { self.buf.add(PAD_BYTES) }
    }
}

impl Drop for EntryMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with these layouts, freed once.
        unsafe {
            dealloc(self.header, Self::header_layout());
            dealloc(self.buf, Self::buf_layout(self.payload_bytes));
        }
    }
}

/// A reply waiting for its queue thread to commit it.
struct PendingReply {
    entry: usize,
    commit_id: u64,
    bytes: Vec<u8>,
}

/// What a queue shares with the threads that reply to its requests.
pub(crate) struct QueueShared {
    qid: u16,
    pending: Mutex<Vec<PendingReply>>,
    wake_fd: RawFd,
}

thread_local! {
    /// The queue this thread runs (`Arc::as_ptr` of its `QueueShared`), 0 on other threads:
    /// a reply sent from its own queue thread needs no wake-up, and telling so takes no lock.
    static SERVING_QUEUE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Drop for QueueShared {
    fn drop(&mut self) {
        // SAFETY: the eventfd was created for this queue and is closed once.
        unsafe { libc::close(self.wake_fd) };
    }
}

/// Sends one request's reply through its ring entry.
#[derive(Clone)]
pub(crate) struct UringSender {
    queue: Arc<QueueShared>,
    entry: usize,
    commit_id: u64,
    /// The session's /dev/fuse, for the backing-file ioctls of passthrough opens (they are
    /// made on the device, whichever transport carries the reply).
    device: ChannelSender,
}

impl std::fmt::Debug for UringSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringSender")
            .field("qid", &self.queue.qid)
            .field("entry", &self.entry)
            .field("commit_id", &self.commit_id)
            .finish()
    }
}

impl UringSender {
    pub(crate) fn device(&self) -> &ChannelSender {
        &self.device
    }

    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let len: usize = data.iter().map(|s| s.len()).sum();
        let mut bytes = Vec::with_capacity(len);
        for slice in data {
            bytes.extend_from_slice(slice);
        }
        if bytes.len() < OUT_HEADER_BYTES {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "short reply"));
        }
        self.queue.pending.lock().push(PendingReply {
            entry: self.entry,
            commit_id: self.commit_id,
            bytes,
        });
        let own_queue = SERVING_QUEUE.with(|q| q.get()) == Arc::as_ptr(&self.queue) as usize;
        if own_queue {
            return Ok(());
        }
        let deferred = DEFERRED_WAKES.with(|d| match d.borrow_mut().as_mut() {
            Some(queues) => {
                if !queues.iter().any(|q| Arc::ptr_eq(q, &self.queue)) {
                    queues.push(self.queue.clone());
                }
                true
            }
            None => false,
        });
        if deferred {
            return Ok(());
        }
        wake_queue(&self.queue)
    }
}

/// Wakes a queue thread to commit the replies pending for it.
fn wake_queue(queue: &QueueShared) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a live u64 to the queue's eventfd.
    let n = unsafe { libc::write(queue.wake_fd, (&one as *const u64).cast(), 8) };
    if n != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

thread_local! {
    /// Inside `replies_batched` on this thread: the queues that have replies waiting and are
    /// woken once when it ends.
    static DEFERRED_WAKES: std::cell::RefCell<Option<Vec<Arc<QueueShared>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `answer`, which sends replies from a thread other than their queue threads (rampart's
/// commit thread answering the fsyncs one disk sync covered), and wakes each queue with replies
/// once at the end instead of once per reply: its thread then commits them all in one pass and
/// one submission, instead of being woken again for each reply pushed while it ran. The wakes
/// happen even if `answer` panics (a reply left unwoken would wait for the queue's next
/// request). Nested calls join the outer one.
pub fn replies_batched(answer: &mut dyn FnMut()) {
    struct WakeAtEnd;
    impl Drop for WakeAtEnd {
        fn drop(&mut self) {
            let queues = DEFERRED_WAKES
                .with(|d| d.borrow_mut().take())
                .unwrap_or_default();
            for queue in queues {
                if let Err(e) = wake_queue(&queue) {
                    error!("queue {}: cannot wake it for its replies: {e}", queue.qid);
                }
            }
        }
    }
    let outer = DEFERRED_WAKES.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_some() {
            return true;
        }
        *d = Some(Vec::new());
        false
    });
    if outer {
        return answer();
    }
    let _wake = WakeAtEnd;
    answer();
}

/// Rings made before the INIT reply (so that io_uring is only offered when they exist).
pub(crate) struct Prepared {
    queues: Vec<PreparedQueue>,
    payload_bytes: usize,
}

struct PreparedQueue {
    qid: u16,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    entries: Vec<EntryMemory>,
    shared: Arc<QueueShared>,
    /// Set by `start`.
    device: Option<ChannelSender>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("queues", &self.queues.len())
            .field("payload_bytes", &self.payload_bytes)
            .finish()
    }
}

/// The CPUs that may ever be online: the kernel wants one queue for each.
fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut count = 0usize;
    for part in text.trim().split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {text:?}"));
        let lo: usize = lo.trim().parse().map_err(|_| bad())?;
        let hi: usize = hi.trim().parse().map_err(|_| bad())?;
        count = count.max(hi + 1);
        if lo > hi {
            return Err(bad());
        }
    }
    Ok(count)
}

impl Prepared {
    /// Sets up one ring of `depth` entries per possible CPU, with payload buffers of
    /// `payload_bytes` (the kernel's `max(8192, max_write, max_pages * page size)`).
    pub(crate) fn new(depth: u16, payload_bytes: usize) -> io::Result<Prepared> {
        let cpus = possible_cpus()?;
        if cpus == 0 || cpus > usize::from(u16::MAX) {
            return Err(io::Error::other("no possible CPUs"));
        }
        // Every entry holds a payload buffer: keep all of them under ENTRIES_BYTES_MAX, with
        // at least 2 entries per queue (many-CPU machines get shallower queues).
        let per_queue_max = ENTRIES_BYTES_MAX / (cpus * (payload_bytes + PAD_BYTES)).max(1);
        let depth = depth.min(per_queue_max.min(64) as u16).max(2);
        let mut queues = Vec::with_capacity(cpus);
        for qid in 0..cpus {
            let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
                .build(u32::from(depth) * 2 + 2)?;
            let entries = (0..depth)
                .map(|_| EntryMemory::new(payload_bytes))
                .collect::<io::Result<Vec<_>>>()?;
            // SAFETY: eventfd(2) with valid flags; the result is checked.
            let wake_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
            if wake_fd < 0 {
                return Err(io::Error::last_os_error());
            }
            queues.push(PreparedQueue {
                qid: qid as u16,
                ring,
                entries,
                shared: Arc::new(QueueShared {
                    qid: qid as u16,
                    pending: Mutex::new(Vec::new()),
                    wake_fd,
                }),
                device: None,
            });
        }
        Ok(Prepared {
            queues,
            payload_bytes,
        })
    }

    /// Starts the queue threads; each registers its entries and serves requests until the
    /// connection ends.
    pub(crate) fn start<FS: Filesystem + 'static>(
        self,
        channel: &Channel,
        mountpoint: Option<PathBuf>,
        make_loop: impl Fn(String) -> SessionEventLoop<FS>,
    ) -> io::Result<Vec<JoinHandle<io::Result<()>>>> {
        let fuse_fd = channel.as_fd().as_raw_fd();
        let mountpoint = Arc::new(mountpoint);
        let mut threads = Vec::with_capacity(self.queues.len());
        for mut queue in self.queues {
            queue.device = Some(channel.sender());
            let name = format!("fuser-q{}", queue.qid);
            let event_loop = make_loop(name.clone());
            let for_thread = mountpoint.clone();
            let spawned = thread::Builder::new()
                .name(name)
                .spawn(move || serve_queue(queue, fuse_fd, event_loop, &for_thread));
            match spawned {
                Ok(thread) => threads.push(thread),
                Err(e) => {
                    // The kernel waits for every queue: without this one nothing is served.
                    fail_connection(&mountpoint, &format!("cannot start a queue thread: {e}"));
                    return Err(e);
                }
            }
        }
        Ok(threads)
    }
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it for cpu < CPU_SETSIZE, and
    // sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return;
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            // A possible CPU that is offline: serve from wherever we run.
            debug!("cannot pin to cpu {cpu}: {}", io::Error::last_os_error());
        }
    }
}

fn uring_cmd(fuse_fd: RawFd, cmd_op: u32, qid: u16, commit_id: u64) -> opcode::UringCmd80 {
    // struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 padding[6]; }
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    opcode::UringCmd80::new(types::Fd(fuse_fd), cmd_op).cmd(cmd)
}

/// A REGISTER of entry `index`: `addr` points to two iovecs (header, payload), `len` is 2.
fn register_sqe(
    fuse_fd: RawFd,
    qid: u16,
    index: usize,
    iovecs: &[libc::iovec; 2],
) -> squeue::Entry128 {
    let entry = uring_cmd(fuse_fd, FUSE_IO_URING_CMD_REGISTER, qid, 0)
        .addr(Some(iovecs.as_ptr() as u64))
        .build()
        .user_data(index as u64);
    // The io-uring crate has no setter for the SQE's `len` (offset 24), which REGISTER needs.
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is #[repr(C)] over the kernel's 128-byte SQE (size checked above);
    // `len` is the u32 at byte 24 of `struct io_uring_sqe`.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(entry) };
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: the same bytes back into the same type.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

fn push(ring: &mut IoUring<squeue::Entry128, cqueue::Entry>, sqe: &squeue::Entry128) -> io::Result<()> {
    loop {
        // SAFETY: every buffer an SQE names (iovecs, entry memory, the eventfd counter) lives
        // in `serve_queue` until the ring is dropped.
        if unsafe { ring.submission().push(sqe) }.is_ok() {
            return Ok(());
        }
        // The submission queue is full: hand what is there to the kernel first.
        ring.submit()?;
    }
}

fn ne_u32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn ne_u64(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn serve_queue<FS: Filesystem>(
    mut queue: PreparedQueue,
    fuse_fd: RawFd,
    event_loop: SessionEventLoop<FS>,
    mountpoint: &Option<PathBuf>,
) -> io::Result<()> {
    let qid = queue.qid;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_queue(&mut queue, fuse_fd, &event_loop)
    }))
    .unwrap_or_else(|_| Err(io::Error::other("a queue thread panicked")));
    if let Err(e) = &result {
        // Entries may still be registered with the kernel, which could write a request into
        // them: leak the ring and the buffers rather than free memory the kernel may use.
        std::mem::forget(queue);
        // Requests made on this CPU would now wait forever: end the connection instead.
        fail_connection(mountpoint, &format!("queue {qid}: {e}"));
    }
    result
}

/// The transport cannot go on. Aborts the FUSE connection through fusectl, so that callers
/// get ENOTCONN and the session ends (the file system then shuts down as on unmount); without
/// fusectl, aborts the process, which ends the connection too (what was made durable stays).
fn fail_connection(mountpoint: &Option<PathBuf>, why: &str) {
    error!("FUSE over io_uring failed: {why}; ending the connection");
    if let Some(abort) = mountpoint.as_deref().and_then(fusectl_abort_file) {
        if std::fs::write(&abort, b"1").is_ok() {
            return;
        }
    }
    error!("no fusectl abort file for the mount; aborting the process");
    std::process::abort();
}

/// `/sys/fs/fuse/connections/<minor>/abort` of the FUSE mount at `mountpoint`, found through
/// /proc/self/mountinfo (a stat of the mount could itself wait on the broken queue).
fn fusectl_abort_file(mountpoint: &Path) -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let wanted = mountpoint.to_str()?;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(dev), Some(point)) = (fields.get(2), fields.get(4)) else {
            continue;
        };
        let point = point
            .replace("\\040", " ")
            .replace("\\011", "\t")
            .replace("\\012", "\n")
            .replace("\\134", "\\");
        if point != wanted {
            continue;
        }
        let minor = dev.split(':').nth(1)?;
        let abort = PathBuf::from(format!("/sys/fs/fuse/connections/{minor}/abort"));
        if abort.exists() {
            return Some(abort);
        }
    }
    None
}

fn run_queue<FS: Filesystem>(
    queue: &mut PreparedQueue,
    fuse_fd: RawFd,
    event_loop: &SessionEventLoop<FS>,
) -> io::Result<()> {
    pin_to_cpu(usize::from(queue.qid));
    SERVING_QUEUE.with(|q| q.set(Arc::as_ptr(&queue.shared) as usize));
    let qid = queue.qid;
    let iovecs: Vec<[libc::iovec; 2]> = queue
        .entries
        .iter()
        .map(|e| {
            [
                libc::iovec {
                    iov_base: e.header.cast(),
                    iov_len: HEADER_BYTES,
                },
                libc::iovec {
                    iov_base: e.payload().cast(),
                    iov_len: e.payload_bytes,
                },
            ]
        })
        .collect();
    // The eventfd read stays armed until the ring is gone, so its target must outlive the
    // ring: 8 bytes leaked once per queue.
    let wake_counter: &'static mut [u8; 8] = Box::leak(Box::new([0u8; 8]));
    let wake_read = opcode::Read::new(
        types::Fd(queue.shared.wake_fd),
        wake_counter.as_mut_ptr(),
        8,
    )
    .build()
    .user_data(WAKE_USER_DATA);
    let wake_read: squeue::Entry128 = wake_read.into();
    for (index, iov) in iovecs.iter().enumerate() {
        push(&mut queue.ring, &register_sqe(fuse_fd, qid, index, iov))?;
    }
    push(&mut queue.ring, &wake_read)?;
    let mut live_entries = queue.entries.len();
    // Whether an entry's command in flight is a REGISTER (else a COMMIT_AND_FETCH).
    let mut registering = vec![true; queue.entries.len()];
    // Reused from one wake-up to the next: no allocation per pass.
    let mut completions: Vec<(u64, i32)> = Vec::with_capacity(queue.entries.len() + 1);
    let mut replies: Vec<PendingReply> = Vec::with_capacity(queue.entries.len());
    loop {
        match queue.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        completions.clear();
        completions.extend(queue.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(user_data, result) in &completions {
            if user_data == WAKE_USER_DATA {
                if result < 0 && result != -libc::EINTR && result != -libc::EAGAIN {
                    warn!("queue {qid}: eventfd read failed: {result}");
                }
                push(&mut queue.ring, &wake_read)?;
                continue;
            }
            let index = user_data as usize;
            if result < 0 {
                match -result {
                    libc::EAGAIN | libc::EINTR if registering[index] => {
                        // Not ready yet (INIT not processed): register again, after a pause.
                        thread::sleep(std::time::Duration::from_millis(1));
                        push(&mut queue.ring, &register_sqe(fuse_fd, qid, index, &iovecs[index]))?;
                    }
                    libc::ENOTCONN | libc::ECANCELED | libc::ECONNABORTED | libc::ENODEV => {
                        live_entries -= 1;
                    }
                    errno => {
                        error!(
                            "queue {qid}: entry {index}: {}",
                            io::Error::from_raw_os_error(errno)
                        );
                        live_entries -= 1;
                    }
                }
                continue;
            }
            serve_request(queue, index, event_loop);
        }
        if live_entries == 0 {
            debug!("queue {qid}: connection ended");
            return Ok(());
        }
        debug_assert!(replies.is_empty());
        std::mem::swap(&mut *queue.shared.pending.lock(), &mut replies);
        for reply in replies.drain(..) {
            registering[reply.entry] = false;
            commit(queue, fuse_fd, reply)?;
        }
    }
}

/// Rebuilds the request in entry `index` in the classic layout and dispatches it.
fn serve_request<FS: Filesystem>(queue: &PreparedQueue, index: usize, event_loop: &SessionEventLoop<FS>) {
    let entry = &queue.entries[index];
    // SAFETY: the kernel has handed this entry to us (its CQE arrived): it does not touch
    // the buffers until we commit, and only this thread uses them meanwhile.
    let header = unsafe { std::slice::from_raw_parts(entry.header, HEADER_BYTES) };
    let request_len = ne_u32(header, 0) as usize;
    let commit_id = ne_u64(header, ENT_AT + 8);
    let payload_len = ne_u32(header, ENT_AT + 16) as usize;
    // Made once per request, moved into it (each clone costs two atomic increments).
    let make_sender = || crate::uring::UringSender {
        queue: queue.shared.clone(),
        entry: index,
        commit_id,
        device: queue.device.clone().expect("set by start before the queue runs"),
    };
    let op_len = request_len
        .checked_sub(IN_HEADER_BYTES + payload_len)
        .filter(|n| *n <= OP_IN_BYTES && n % 8 == 0 && payload_len <= entry.payload_bytes);
    let Some(op_len) = op_len else {
        error!(
            "queue {}: malformed request (len {request_len}, payload {payload_len})",
            queue.qid
        );
        let _ = reply_errno(&make_sender(), libc::EIO);
        return;
    };
    let prefix = IN_HEADER_BYTES + op_len;
    // SAFETY: as above; [PAD_BYTES - prefix, PAD_BYTES + payload_len) lies inside `buf`
    // (prefix ≤ 168 < PAD_BYTES, payload_len ≤ payload_bytes), and `header` is a separate
    // allocation, so the copies do not overlap.
    let request = unsafe {
        let start = entry.payload().sub(prefix);
        std::ptr::copy_nonoverlapping(entry.header, start, IN_HEADER_BYTES);
        std::ptr::copy_nonoverlapping(
            entry.header.add(OP_IN_AT),
            start.add(IN_HEADER_BYTES),
            op_len,
        );
        std::slice::from_raw_parts(start, prefix + payload_len)
    };
    match RequestWithSender::new_uring(make_sender(), request) {
        Some(req) => {
            if let Ok(Operation::Destroy(_)) = req.request.operation() {
                req.reply::<crate::ReplyEmpty>().ok();
            } else {
                req.dispatch(event_loop);
            }
        }
        None => {
            let _ = reply_errno(&make_sender(), libc::EIO);
        }
    }
}

fn reply_errno(sender: &UringSender, errno: i32) -> io::Result<()> {
    let mut header = [0u8; OUT_HEADER_BYTES];
    header[0..4].copy_from_slice(&(OUT_HEADER_BYTES as u32).to_ne_bytes());
    header[4..8].copy_from_slice(&(-errno).to_ne_bytes());
    header[8..16].copy_from_slice(&sender.commit_id.to_ne_bytes());
    sender.send(&[IoSlice::new(&header)])
}

/// Copies a reply into its entry and submits COMMIT_AND_FETCH, which also re-arms the entry.
fn commit(queue: &mut PreparedQueue, fuse_fd: RawFd, reply: PendingReply) -> io::Result<()> {
    let entry = &queue.entries[reply.entry];
    let (head, args) = reply.bytes.split_at(OUT_HEADER_BYTES);
    let mut head_bytes = [0u8; OUT_HEADER_BYTES];
    head_bytes.copy_from_slice(head);
    let args = if args.len() > entry.payload_bytes {
        // Cannot happen within max_write and max_pages; answer EIO rather than overflow.
        error!("queue {}: a reply of {} bytes is too long", queue.qid, args.len());
        head_bytes[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
        &[][..]
    } else {
        args
    };
    // SAFETY: the entry is ours until the commit below is submitted; the request that was
    // rebuilt in its buffer has been dispatched (its borrow ended when dispatch returned, or
    // this reply came later from another thread), so nothing else reads or writes it. The
    // lengths fit: 16 bytes of header, and `args` at most `payload_bytes`.
    unsafe {
        std::ptr::copy_nonoverlapping(head_bytes.as_ptr(), entry.header, OUT_HEADER_BYTES);
        std::ptr::copy_nonoverlapping(args.as_ptr(), entry.payload(), args.len());
        let size = (args.len() as u32).to_ne_bytes();
        std::ptr::copy_nonoverlapping(size.as_ptr(), entry.header.add(ENT_AT + 16), 4);
    }
    let sqe = uring_cmd(fuse_fd, FUSE_IO_URING_CMD_COMMIT_AND_FETCH, queue.qid, reply.commit_id)
        .build()
        .user_data(reply.entry as u64);
    push(&mut queue.ring, &sqe)
}

/// The payload size the kernel requires of every entry.
pub(crate) fn payload_bytes(max_write: u32, max_pages: u16) -> usize {
    let page = page_size::get();
    8192.max(max_write as usize).max(usize::from(max_pages) * page)
}
