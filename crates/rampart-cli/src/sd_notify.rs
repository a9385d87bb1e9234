//! systemd's readiness protocol (sd_notify(3)): one datagram of `KEY=VALUE` lines to the Unix
//! socket named by $NOTIFY_SOCKET, so that a `Type=notify` service is ready once the mount
//! is, and `systemctl status` shows what the daemon is doing. Without $NOTIFY_SOCKET (not
//! started by systemd) nothing is sent (docs/decisions/0043).

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. "READY=1\nSTATUS=mounted") to systemd, if it asked for it. Failures
/// are logged, never fatal: the mount works the same without a supervisor.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&path, state) {
        tracing::warn!("cannot notify systemd at {path:?}: {e}");
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_bytes();
    // "@name" is a socket in the abstract namespace.
    let address = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(std::path::Path::new(path))?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(state.as_bytes(), &address)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_datagram_reaches_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let receiver = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        super::send(path.as_os_str(), "READY=1\nSTATUS=mounted").unwrap();
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=mounted");
    }
}
