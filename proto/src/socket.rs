//! Unix sockets: serve one safely, take one from systemd, dial one with reconnects.
//!
//! Serving follows the lessons of earlier CRI proxies: refuse to start when another process is
//! listening on the path (a double start would steal kubelet's traffic), remove a stale socket
//! left by a crash, and give the new socket an explicit owner and mode (0660 root by default, or
//! copied from containerd's socket).

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tonic::transport::{Channel, Endpoint, Uri};

/// Errors from serving or dialling a unix socket.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another process accepts connections on this path.
    #[error("socket {0} is in use by a live process; refusing to start a second instance")]
    InUse(PathBuf),
    /// Something that is not a socket sits at the path; we never delete it.
    #[error("{0} exists and is not a socket; refusing to remove it")]
    NotASocket(PathBuf),
    /// An I/O step failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What we were doing.
        action: &'static str,
        /// Which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The systemd-activated file descriptor could not be used.
    #[error("socket activation (LISTEN_FDS): {0}")]
    Activation(io::Error),
}

/// Owner and permission bits for a socket we create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketPerms {
    /// Permission bits, e.g. `0o660`.
    pub mode: u32,
    /// Owner uid; `None` keeps the creating process's.
    pub uid: Option<u32>,
    /// Owner gid; `None` keeps the creating process's.
    pub gid: Option<u32>,
}

impl Default for SocketPerms {
    fn default() -> Self {
        Self {
            mode: 0o660,
            uid: None,
            gid: None,
        }
    }
}

impl SocketPerms {
    /// Owner, group and mode of an existing socket (for the shim: containerd's). The mode is
    /// never made looser than 0660.
    pub fn copied_from(path: &Path) -> Result<Self, SocketError> {
        let md = std::fs::metadata(path).map_err(|source| SocketError::Io {
            action: "stat",
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            mode: md.permissions().mode() & 0o660,
            uid: Some(md.uid()),
            gid: Some(md.gid()),
        })
    }
}

/// Binds a unix socket at `path` with `perms`.
///
/// - a live socket at `path` (something accepts a connection) => [`SocketError::InUse`];
/// - a stale socket => removed, then bound;
/// - anything else at `path` => [`SocketError::NotASocket`], untouched.
///
/// The parent directory is created (0755) when missing.
pub async fn serve_unix(path: &Path, perms: SocketPerms) -> Result<UnixListener, SocketError> {
    let io_err = |action, source| SocketError::Io {
        action,
        path: path.to_owned(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_socket() => {
            if UnixStream::connect(path).await.is_ok() {
                return Err(SocketError::InUse(path.to_owned()));
            }
            tracing::info!(path = %path.display(), "removing stale socket");
            std::fs::remove_file(path).map_err(|e| io_err("remove stale socket", e))?;
        }
        Ok(_) => return Err(SocketError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("stat", e)),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| io_err("create parent directory of", e))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| io_err("bind", e))?;
    apply_perms(path, perms)?;
    Ok(listener)
}

fn apply_perms(path: &Path, perms: SocketPerms) -> Result<(), SocketError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(perms.mode)).map_err(
        |source| SocketError::Io {
            action: "chmod",
            path: path.to_owned(),
            source,
        },
    )?;
    if perms.uid.is_some() || perms.gid.is_some() {
        std::os::unix::fs::chown(path, perms.uid, perms.gid).map_err(|source| SocketError::Io {
            action: "chown",
            path: path.to_owned(),
            source,
        })?;
    }
    Ok(())
}

/// The unix listener systemd passed at index `idx` (socket activation), if this process was
/// activated. `LISTEN_PID` must name this process, as sd_listen_fds(3) requires.
pub fn activated_listener(idx: usize) -> Result<Option<UnixListener>, SocketError> {
    let mut fds = listenfd::ListenFd::from_env();
    if fds.len() <= idx {
        return Ok(None);
    }
    let std_listener = fds
        .take_unix_listener(idx)
        .map_err(SocketError::Activation)?;
    let Some(l) = std_listener else {
        return Ok(None);
    };
    l.set_nonblocking(true).map_err(SocketError::Activation)?;
    UnixListener::from_std(l)
        .map(Some)
        .map_err(SocketError::Activation)
}

/// Every unix listener systemd passed (socket activation), in `LISTEN_FDS` order; empty when
/// the process was not activated. Use this when a daemon takes more than one socket: reading the
/// activation environment consumes it, so a second [`activated_listener`] call finds nothing.
pub fn activated_listeners() -> Result<Vec<UnixListener>, SocketError> {
    let mut fds = listenfd::ListenFd::from_env();
    let mut out = Vec::with_capacity(fds.len());
    for idx in 0..fds.len() {
        let Some(l) = fds
            .take_unix_listener(idx)
            .map_err(SocketError::Activation)?
        else {
            continue;
        };
        l.set_nonblocking(true).map_err(SocketError::Activation)?;
        out.push(UnixListener::from_std(l).map_err(SocketError::Activation)?);
    }
    Ok(out)
}

/// A gRPC channel to a unix socket that connects lazily and reconnects by itself: each call on a
/// broken connection dials again, so a peer that restarts is picked up without a new channel.
/// Calls while the peer is down fail fast with `UNAVAILABLE`.
pub fn channel(path: impl Into<PathBuf>) -> Channel {
    let path: PathBuf = path.into();
    let endpoint = Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(30));
    endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { UnixStream::connect(path).await.map(TokioIo::new) }
    }))
}

/// Dials `path` once, returning the error if nothing accepts (no retry).
pub async fn connect(path: impl Into<PathBuf>) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.into();
    Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refuses_live_socket_and_replaces_stale_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/x.sock");
        let live = serve_unix(&path, SocketPerms::default())
            .await
            .expect("first bind");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        // Keep accepting so the connect probe succeeds.
        let accept = tokio::spawn(async move {
            let _c = live.accept().await;
            live
        });
        let err = serve_unix(&path, SocketPerms::default()).await;
        assert!(matches!(err, Err(SocketError::InUse(_))), "{err:?}");
        drop(accept.await.expect("accept task"));
        // Now nothing listens: the socket file is stale and gets replaced.
        let again = serve_unix(&path, SocketPerms::default()).await;
        assert!(again.is_ok(), "{again:?}");
    }

    #[tokio::test]
    async fn never_removes_a_regular_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("precious");
        std::fs::write(&path, b"data").expect("write");
        let err = serve_unix(&path, SocketPerms::default()).await;
        assert!(matches!(err, Err(SocketError::NotASocket(_))));
        assert_eq!(std::fs::read(&path).expect("read"), b"data");
    }

    #[test]
    fn copied_perms_are_never_looser_than_0660() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let p = SocketPerms::copied_from(&path).expect("copy");
        assert_eq!(p.mode, 0o660);
    }
}
