//! The metrics endpoint: a mount's figures in the Prometheus text exposition format (0.0.4),
//! served on `GET /metrics` over plain HTTP/1.0 or 1.1, opt-in at mount on a Unix socket
//! (`--metrics-socket PATH`) and/or a loopback TCP port (`--metrics-listen 127.0.0.1:PORT`).
//!
//! A hand-written server, because it needs little and must cost nothing when idle: one thread
//! waits in poll(2) on the listeners, answers one connection at a time (others wait in the
//! kernel's listen backlog), reads at most [`REQUEST_BYTES_MAX`] of request head and gives a
//! client [`CONNECTION_TIME_MAX`] in all, then closes the connection. Only loopback addresses
//! are served: the figures name paths and rates that are nobody else's business, and a remote
//! scraper can reach them through a proxy that adds what a public endpoint needs (TLS, auth).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rampart_core::latency::{LatencyHistogram, BUCKET_BOUNDS_NS};
use rampart_fuse::RequestKind;

use crate::control::Sources;

/// Longest request head (request line and headers) read; a longer one is answered 431.
const REQUEST_BYTES_MAX: usize = 8 << 10;
/// Longest time one connection may take, from accept to the last byte of the answer.
const CONNECTION_TIME_MAX: Duration = Duration::from_secs(2);

/// Where a mount serves its metrics (neither: it does not).
#[derive(Debug, Clone, Default)]
pub struct MetricsConfig {
    pub socket: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
}

/// `--metrics-listen`: an IP address and port on the loopback interface.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text.trim().parse().map_err(|_| {
        format!("invalid --metrics-listen {text:?}: give an address and port like 127.0.0.1:9750")
    })?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "refusing --metrics-listen {addr}: the metrics endpoint listens on loopback \
             addresses only (127.0.0.1 or [::1]); to scrape it from another machine, put a \
             proxy in front of it"
        ));
    }
    Ok(addr)
}

/// The listeners of a mount's metrics endpoint, bound but not yet served.
pub struct Listeners {
    unix: Option<(UnixListener, PathBuf)>,
    tcp: Option<TcpListener>,
}

/// Binds what `config` asks for. A Unix socket left by a daemon that died is replaced; one a
/// live process answers on, or any other file, is refused.
pub fn bind(config: &MetricsConfig) -> Result<Listeners, String> {
    let unix = match &config.socket {
        Some(path) => Some((bind_unix(path)?, path.clone())),
        None => None,
    };
    let tcp = match config.listen {
        Some(addr) => Some(TcpListener::bind(addr).map_err(|e| {
            format!("cannot listen for metrics on {addr}: {e} (choose another port)")
        })?),
        None => None,
    };
    Ok(Listeners { unix, tcp })
}

fn bind_unix(path: &Path) -> Result<UnixListener, String> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let shown = path.display();
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!(
                "cannot serve metrics at {shown}: a file that is not a socket is there; \
                 remove it or choose another path"
            ));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(format!(
                "cannot serve metrics at {shown}: another process serves on that socket"
            ));
        }
        std::fs::remove_file(path)
            .map_err(|e| format!("cannot replace the stale socket {shown}: {e}"))?;
    }
    let listener =
        UnixListener::bind(path).map_err(|e| format!("cannot serve metrics at {shown}: {e}"))?;
    // Like the control socket: the mount's owner only (connecting needs write permission).
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict {shown} to its owner: {e}"))?;
    Ok(listener)
}

/// A metrics endpoint being served; dropping it stops the thread and removes the socket.
pub struct MetricsEndpoint {
    thread: Option<std::thread::JoinHandle<()>>,
    /// Written to (or closed) to wake the thread and make it stop.
    wake: Option<UnixStream>,
    socket_path: Option<PathBuf>,
}

impl Listeners {
    /// Serves the listeners on a thread of their own.
    pub fn serve(self, sources: Arc<Sources>) -> Result<MetricsEndpoint, String> {
        let socket_path = self.unix.as_ref().map(|(_, path)| path.clone());
        if self.unix.is_none() && self.tcp.is_none() {
            return Ok(MetricsEndpoint {
                thread: None,
                wake: None,
                socket_path,
            });
        }
        let (wake, woken) =
            UnixStream::pair().map_err(|e| format!("cannot start the metrics endpoint: {e}"))?;
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || self.run(&woken, &sources))
            .map_err(|e| format!("cannot start the metrics endpoint: {e}"))?;
        Ok(MetricsEndpoint {
            thread: Some(thread),
            wake: Some(wake),
            socket_path,
        })
    }

    fn run(self, woken: &UnixStream, sources: &Sources) {
        if let Some((_, path)) = &self.unix {
            tracing::info!("serving metrics on the socket {}", path.display());
        }
        if let Some(addr) = self.tcp.as_ref().and_then(|l| l.local_addr().ok()) {
            tracing::info!("serving metrics on http://{addr}/metrics");
        }
        // Slots 1 and 2: the Unix and TCP listeners (-1, which poll skips, when absent).
        let fd_of = |fd: Option<std::os::fd::RawFd>| libc::pollfd {
            fd: fd.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            let mut fds = [
                fd_of(Some(woken.as_fd().as_raw_fd())),
                fd_of(self.unix.as_ref().map(|(l, _)| l.as_raw_fd())),
                fd_of(self.tcp.as_ref().map(|l| l.as_raw_fd())),
            ];
            // SAFETY: `fds` is a live, initialised array of `fds.len()` pollfd structs that
            // poll only reads and writes within; the descriptors stay open meanwhile (owned by
            // `self` and `woken`).
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if ready < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::warn!(
                    "the metrics endpoint stopped: poll failed: {}",
                    std::io::Error::last_os_error()
                );
                return;
            }
            if fds[0].revents != 0 {
                return;
            }
            if let Some((listener, _)) = self.unix.as_ref().filter(|_| fds[1].revents != 0) {
                if let Ok((stream, _)) = listener.accept() {
                    answer_unix(stream, sources);
                }
            }
            if let Some(listener) = self.tcp.as_ref().filter(|_| fds[2].revents != 0) {
                if let Ok((stream, _)) = listener.accept() {
                    answer_tcp(stream, sources);
                }
            }
        }
    }
}

fn answer_unix(stream: UnixStream, sources: &Sources) {
    let deadline = Instant::now() + CONNECTION_TIME_MAX;
    let timeouts = stream
        .set_read_timeout(Some(CONNECTION_TIME_MAX))
        .and_then(|()| stream.set_write_timeout(Some(CONNECTION_TIME_MAX)));
    if timeouts.is_ok() {
        answer(&stream, deadline, sources);
    }
}

fn answer_tcp(stream: std::net::TcpStream, sources: &Sources) {
    let deadline = Instant::now() + CONNECTION_TIME_MAX;
    let timeouts = stream
        .set_read_timeout(Some(CONNECTION_TIME_MAX))
        .and_then(|()| stream.set_write_timeout(Some(CONNECTION_TIME_MAX)));
    if timeouts.is_ok() {
        answer(&stream, deadline, sources);
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        // Closing our end makes the thread's end readable (end of file): it stops.
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if let Some(path) = &self.socket_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Reads a request head from `stream` and answers it; any failure just ends the connection.
fn answer<S>(mut stream: S, deadline: Instant, sources: &Sources)
where
    S: Read + Write,
{
    let reply = match read_head(&mut stream, deadline) {
        Ok(head) => respond(&head, || render(sources)),
        Err(HeadError::TooLarge) => Reply::error(431, "Request Header Fields Too Large"),
        Err(HeadError::Io) => return,
    };
    let _ = stream.write_all(&reply.into_bytes());
}

enum HeadError {
    TooLarge,
    /// The client went away, sent nothing in time, or the deadline passed.
    Io,
}

/// The request line and headers, up to the blank line that ends them.
fn read_head(stream: &mut impl Read, deadline: Instant) -> Result<String, HeadError> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head_end(&head) {
            head.truncate(end);
            return Ok(String::from_utf8_lossy(&head).into_owned());
        }
        if head.len() > REQUEST_BYTES_MAX {
            return Err(HeadError::TooLarge);
        }
        if Instant::now() > deadline {
            return Err(HeadError::Io);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Err(HeadError::Io),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Where the head ends (the blank line; HTTP allows bare newlines).
fn head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = bytes.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

struct Reply {
    status: u16,
    reason: &'static str,
    content_type: &'static str,
    body: String,
    /// HEAD: the headers of a GET without its body.
    head_only: bool,
}

impl Reply {
    fn error(status: u16, reason: &'static str) -> Reply {
        Reply {
            status,
            reason,
            content_type: "text/plain; charset=utf-8",
            body: format!("{status} {reason}\n"),
            head_only: false,
        }
    }

    fn into_bytes(self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.reason,
            self.content_type,
            self.body.len()
        );
        if self.status == 405 {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("\r\n");
        if !self.head_only {
            out.push_str(&self.body);
        }
        out.into_bytes()
    }
}

/// The answer to a request head; `metrics` renders the figures when they are asked for.
fn respond(head: &str, metrics: impl FnOnce() -> String) -> Reply {
    let request_line = head.lines().next().unwrap_or_default();
    let mut parts = request_line.split_ascii_whitespace();
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Reply::error(400, "Bad Request");
    };
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return Reply::error(505, "HTTP Version Not Supported");
    }
    if !matches!(method, "GET" | "HEAD") {
        return Reply::error(405, "Method Not Allowed");
    }
    // Scrapers may add a query string; it selects nothing here.
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return Reply::error(404, "Not Found");
    }
    Reply {
        status: 200,
        reason: "OK",
        content_type: "text/plain; version=0.0.4; charset=utf-8",
        body: metrics(),
        head_only: method == "HEAD",
    }
}

/// One metric family: its HELP and TYPE lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A family of one sample without labels.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    family(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// The samples of a histogram (`labels` without braces, may be empty).
fn histogram(out: &mut String, name: &str, labels: &str, h: &LatencyHistogram) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound_ns, count) in BUCKET_BOUNDS_NS.iter().zip(h.cumulative()) {
        let le = *bound_ns as f64 / 1e9;
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {count}");
    }
    let total = h.cumulative()[BUCKET_BOUNDS_NS.len()];
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {total}");
    let braces = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            format!("{{{s}}}")
        }
    };
    let _ = writeln!(
        out,
        "{name}_sum{} {}",
        braces(labels),
        h.sum_ns as f64 / 1e9
    );
    let _ = writeln!(out, "{name}_count{} {}", braces(labels), h.count);
}

/// The figures of the mount, in the Prometheus text format.
pub fn render(sources: &Sources) -> String {
    let mut out = String::with_capacity(64 << 10);
    render_fuse(&mut out, sources);
    render_persistence(&mut out, sources);
    render_contents(&mut out, sources);
    out
}

fn render_fuse(out: &mut String, sources: &Sources) {
    let counters = &sources.counters;
    family(
        out,
        "rampart_fuse_requests_total",
        "counter",
        "FUSE requests received since the mount, by operation.",
    );
    for kind in RequestKind::ALL {
        let (op, n) = (kind.name(), counters.get(*kind));
        let _ = writeln!(out, "rampart_fuse_requests_total{{op=\"{op}\"}} {n}");
    }
    family(
        out,
        "rampart_fuse_request_duration_seconds",
        "histogram",
        "Time from a FUSE request's arrival to its answer (fsync: after the disk sync), by \
         operation; only operations answered at least once.",
    );
    for (op, h) in counters.latencies() {
        histogram(
            out,
            "rampart_fuse_request_duration_seconds",
            &format!("op=\"{op}\""),
            &h,
        );
    }
    single(
        out,
        "rampart_fuse_sync_failures_total",
        "counter",
        "fsync and fsyncdir requests answered EIO because the store could not be written.",
        counters.sync_failures(),
    );
    single(
        out,
        "rampart_fuse_passthrough_opens_total",
        "counter",
        "Opens answered with FUSE passthrough (the kernel then reads and writes the host file).",
        counters.passthrough_opens(),
    );
    family(
        out,
        "rampart_fuse_errors_total",
        "counter",
        "Errors answered to FUSE requests since the mount, by operation and errno (only \
         those answered at least once; ENOENT from lookup is a normal negative lookup).",
    );
    for (op, errno, n) in rampart_fuse::counters::errors() {
        let name = rampart_fuse::counters::errno_name(errno);
        let _ = writeln!(
            out,
            "rampart_fuse_errors_total{{op=\"{op}\",errno=\"{name}\"}} {n}"
        );
    }
    family(
        out,
        "rampart_info",
        "gauge",
        "Always 1: the daemon's version, how FUSE requests reach it and how the bytes of \
         disk-tier files move (passthrough or daemon).",
    );
    let _ = writeln!(
        out,
        "rampart_info{{version=\"{}\",fuse_transport=\"{}\",data_path=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        sources.fuse_transport,
        sources.engine.data_path()
    );
}

fn render_persistence(out: &mut String, sources: &Sources) {
    let p = sources.persister.stats();
    single(
        out,
        "rampart_persist_commits_total",
        "counter",
        "Group commits: journal batches written and synced.",
        p.commits,
    );
    family(
        out,
        "rampart_persist_commit_duration_seconds",
        "histogram",
        "How long each commit took to write and sync its batches.",
    );
    histogram(
        out,
        "rampart_persist_commit_duration_seconds",
        "",
        &p.commit_latency,
    );
    single(
        out,
        "rampart_store_written_bytes_total",
        "counter",
        "Bytes the daemon wrote to store files (journal, checkpoints, superblock, disk-tier \
         host files it wrote, mirror copies); not what the kernel writes through FUSE \
         passthrough, nor the host file system's own metadata.",
        rampart_core::persist::device::store_written_bytes(),
    );
    single(
        out,
        "rampart_host_sync_failures_total",
        "counter",
        "Syncs of disk-tier host files that failed since the mount: their latest data may be \
         lost; each file's next fsync answers EIO.",
        sources.persister.host_sync_failures(),
    );
    single(
        out,
        "rampart_persist_checkpoints_total",
        "counter",
        "Checkpoints written since the mount.",
        p.checkpoints,
    );
    family(
        out,
        "rampart_persist_checkpoint_duration_seconds",
        "histogram",
        "How long each checkpoint took, from its start to the new files in place.",
    );
    histogram(
        out,
        "rampart_persist_checkpoint_duration_seconds",
        "",
        &p.checkpoint_latency,
    );
    let last_checkpoint = [
        ("pause", "writers waited", p.last_checkpoint_pause),
        ("switch", "commits waited", p.last_checkpoint_switch),
    ];
    for (what, who, d) in last_checkpoint {
        single(
            out,
            &format!("rampart_persist_last_checkpoint_{what}_seconds"),
            "gauge",
            &format!("How long {who} while the last checkpoint ran."),
            d.as_secs_f64(),
        );
    }
    render_journal(out, &p, sources);
}

fn render_journal(
    out: &mut String,
    p: &rampart_core::persist::persister::PersistStats,
    sources: &Sources,
) {
    let gauges = [
        (
            "rampart_persist_checkpoint_image_bytes",
            "The last checkpoint's length.",
            p.checkpoint_image_bytes,
        ),
        (
            "rampart_persist_journal_bytes",
            "The journal's committed length.",
            p.journal_bytes,
        ),
        (
            "rampart_persist_journal_lag_bytes",
            "Bytes of changes applied in memory and not yet written to the journal.",
            p.pending_bytes,
        ),
        (
            "rampart_persist_journal_lag_ops",
            "Changes applied in memory and not yet durable.",
            p.ops_pending,
        ),
    ];
    for (name, help, value) in gauges {
        single(out, name, "gauge", help, value);
    }
    // Absent while not known (no commit yet with changes pending); 0 with nothing pending.
    let age = match (p.ops_pending, p.oldest_pending_age_max) {
        (0, _) => Some(0.0),
        (_, age) => age.map(|a| a.as_secs_f64()),
    };
    if let Some(age) = age {
        single(
            out,
            "rampart_persist_journal_lag_seconds",
            "gauge",
            "At most how long the oldest change not yet durable has waited.",
            age,
        );
    }
    single(
        out,
        "rampart_persist_commit_interval_seconds",
        "gauge",
        "Longest time a change waits before it is durable (--commit-interval).",
        sources.persister.commit_interval().as_secs_f64(),
    );
    single(
        out,
        "rampart_persist_stopped",
        "gauge",
        "1 while persistence is stopped by an I/O error (see rampart status), else 0.",
        u8::from(p.error.is_some()),
    );
    // Absent on a store without a mirror: no series rather than a 0 an alert would fire on.
    if let Some(health) = sources.engine.mirror_health() {
        single(
            out,
            "rampart_mirror_ok",
            "gauge",
            "1 while the store's mirror (DA2) gets every change, 0 while degraded (see rampart status).",
            u8::from(health.degraded().is_none()),
        );
    }
}

fn render_contents(out: &mut String, sources: &Sources) {
    let s = sources.engine.stats();
    family(
        out,
        "rampart_data_bytes",
        "gauge",
        "Bytes of file contents stored, by tier.",
    );
    let _ = writeln!(
        out,
        "rampart_data_bytes{{tier=\"memory\"}} {}",
        s.memory_data_bytes()
    );
    let _ = writeln!(
        out,
        "rampart_data_bytes{{tier=\"disk\"}} {}",
        s.disk_data_bytes
    );
    single(
        out,
        "rampart_memory_used_bytes",
        "gauge",
        "Memory the file system holds (contents, inodes, names), counted against the cap.",
        s.memory_used_bytes,
    );
    single(
        out,
        "rampart_memory_cap_bytes",
        "gauge",
        "Most memory the file system may hold (--memory-cap).",
        s.memory_cap_bytes,
    );
    render_categories(out, sources);
    family(out, "rampart_inodes", "gauge", "Inodes in use, by kind.");
    for (kind, n) in [
        ("file", s.files),
        ("directory", s.directories),
        ("symlink", s.symlinks),
        ("other", s.other),
    ] {
        let _ = writeln!(out, "rampart_inodes{{kind=\"{kind}\"}} {n}");
    }
}

/// A label value as the text format wants it (`\\`, `\"`, `\n` escaped).
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Per category: files, bytes per tier, bytes at risk, the longest wait (decision 0085).
fn render_categories(out: &mut String, sources: &Sources) {
    let categories = sources.engine.category_status();
    family(
        out,
        "rampart_category_bytes",
        "gauge",
        "Bytes of file contents stored, by category and tier.",
    );
    for c in &categories {
        let name = label_value(&c.name);
        for (tier, bytes) in [("memory", c.memory_bytes), ("disk", c.disk_bytes)] {
            let _ = writeln!(
                out,
                "rampart_category_bytes{{category=\"{name}\",tier=\"{tier}\"}} {bytes}"
            );
        }
    }
    family(
        out,
        "rampart_category_files",
        "gauge",
        "Regular files, by category.",
    );
    for c in &categories {
        let _ = writeln!(
            out,
            "rampart_category_files{{category=\"{}\"}} {}",
            label_value(&c.name),
            c.files
        );
    }
    family(
        out,
        "rampart_category_bytes_at_risk",
        "gauge",
        "Bytes written and not yet in the store, by category.",
    );
    for c in &categories {
        let _ = writeln!(
            out,
            "rampart_category_bytes_at_risk{{category=\"{}\"}} {}",
            label_value(&c.name),
            c.bytes_at_risk
        );
    }
    family(
        out,
        "rampart_category_held_files",
        "gauge",
        "Regular files held out of the store until their deadline, by category.",
    );
    for c in &categories {
        let _ = writeln!(
            out,
            "rampart_category_held_files{{category=\"{}\"}} {}",
            label_value(&c.name),
            c.held_files
        );
    }
    family(
        out,
        "rampart_category_deadline_lag_seconds_max",
        "gauge",
        "The longest any change waited before it was in the store, by category, since the mount.",
    );
    for c in &categories {
        let _ = writeln!(
            out,
            "rampart_category_deadline_lag_seconds_max{{category=\"{}\"}} {}",
            label_value(&c.name),
            c.lag_max.as_secs_f64()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_accepted() {
        assert!(parse_listen("127.0.0.1:9750").is_ok());
        assert!(parse_listen("[::1]:9750").is_ok());
        let refused = parse_listen("0.0.0.0:9750").unwrap_err();
        assert!(refused.contains("loopback"), "{refused}");
        assert!(parse_listen("192.168.1.2:80").is_err());
        assert!(parse_listen("localhost:80")
            .unwrap_err()
            .contains("127.0.0.1:9750"));
    }

    #[test]
    fn requests_are_answered_by_method_path_and_version() {
        let metrics = || "m 1\n".to_string();
        let ok = respond("GET /metrics HTTP/1.1\r\nHost: x", metrics);
        assert_eq!((ok.status, ok.body.as_str()), (200, "m 1\n"));
        assert_eq!(respond("GET /metrics?x=1 HTTP/1.0", metrics).status, 200);
        let head = respond("HEAD /metrics HTTP/1.1", metrics).into_bytes();
        let head = String::from_utf8(head).unwrap();
        assert!(head.ends_with("\r\n\r\n") && head.contains("Content-Length: 4"));
        assert_eq!(respond("GET / HTTP/1.1", metrics).status, 404);
        assert_eq!(respond("POST /metrics HTTP/1.1", metrics).status, 405);
        assert_eq!(respond("GET /metrics HTTP/2", metrics).status, 505);
        assert_eq!(respond("GET /metrics", metrics).status, 400);
        assert_eq!(respond("", metrics).status, 400);
    }

    #[test]
    fn a_head_ends_at_the_blank_line_and_is_bounded() {
        let far = Instant::now() + Duration::from_secs(5);
        let mut r = &b"GET /metrics HTTP/1.1\r\nA: b\r\n\r\nbody"[..];
        assert!(matches!(read_head(&mut r, far), Ok(h) if h == "GET /metrics HTTP/1.1\r\nA: b"));
        let mut r = &b"GET /metrics HTTP/1.0\n\n"[..];
        assert!(read_head(&mut r, far).is_ok());
        let long = vec![b'a'; REQUEST_BYTES_MAX + 2048];
        assert!(matches!(
            read_head(&mut &long[..], far),
            Err(HeadError::TooLarge)
        ));
        // The client closes before the blank line.
        assert!(matches!(
            read_head(&mut &b"GET /metrics HTTP/1.1\r\n"[..], far),
            Err(HeadError::Io)
        ));
    }

    #[test]
    fn a_histogram_has_cumulative_buckets_a_sum_and_a_count() {
        let mut h = LatencyHistogram::default();
        h.record(Duration::from_micros(20));
        h.record(Duration::from_secs(30));
        let mut out = String::new();
        histogram(&mut out, "x_seconds", "op=\"read\"", &h);
        assert!(out.contains("x_seconds_bucket{op=\"read\",le=\"0.00001\"} 0\n"));
        assert!(out.contains("x_seconds_bucket{op=\"read\",le=\"0.000025\"} 1\n"));
        assert!(out.contains("x_seconds_bucket{op=\"read\",le=\"10\"} 1\n"));
        assert!(out.contains("x_seconds_bucket{op=\"read\",le=\"+Inf\"} 2\n"));
        assert!(out.contains("x_seconds_sum{op=\"read\"} 30.00002\n"));
        assert!(out.contains("x_seconds_count{op=\"read\"} 2\n"));
        let mut plain = String::new();
        histogram(&mut plain, "y_seconds", "", &h);
        assert!(plain.contains("y_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(plain.contains("y_seconds_count 2\n"));
    }
}
