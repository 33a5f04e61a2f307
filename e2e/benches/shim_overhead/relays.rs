//! The relays under test, each its own process: the shim (the shipped `podward-shim`, or this
//! binary re-executed with `--as-shim` for settings the daemon has no flag for), socat, and the bare relays that are its floors (`--as-bare-relay`,
//! `--as-read-wait-relay`, `--as-thread-relay`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use podward_api::cri;
use podward_e2e::{TestNode, free_port};

use crate::calls::client;

/// The shim, in this process (child mode).
pub(crate) fn as_shim(args: &[String]) {
    // The same runtime flavour as `podward-shim`'s main (see shim/src/main.rs).
    let rt = if args.get(4).map(String::as_str) == Some("multi") {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .expect("runtime");
    let config = podward_shim::config::Config {
        listen: PathBuf::from(&args[0]),
        control_socket: PathBuf::from(&args[1]),
        common: podward_api::daemon::config::Common {
            containerd_socket: PathBuf::from(&args[2]),
            admin_addr: args[3].parse().expect("admin addr"),
            log_level: "warn".into(),
            ..podward_shim::config::Config::default().common
        },
        ..Default::default()
    };
    let options = podward_shim::Options {
        relay_buffer: args
            .get(5)
            .and_then(|k| k.parse::<usize>().ok())
            .map_or(podward_shim::relay::DEFAULT_BUFFER, |k| k << 10),
        repeat_read_interval: if args.get(6).map(String::as_str) == Some("read-every") {
            Duration::ZERO
        } else {
            podward_shim::observe::REPEAT_READ_INTERVAL
        },
        ..Default::default()
    };
    rt.block_on(async move {
        let shutdown = podward_api::daemon::signal::shutdown();
        if let Err(e) = podward_shim::run_with(config, options, shutdown).await {
            eprintln!("shim failed: {e}");
            std::process::exit(1);
        }
    });
}

/// A bare relay in this process (child mode): what a user-space copy costs without the side
/// reader, on the shim's runtime flavour and buffer size. `args`: listen path, containerd socket.
pub(crate) fn as_bare_relay(args: &[String]) {
    serve_child_relay(args, |mut c, mut u| async move {
        // containerd's side read as the shim reads it, the client's at 64 KiB (only small
        // requests come from there).
        let _ = tokio::io::copy_bidirectional_with_sizes(
            &mut c,
            &mut u,
            64 << 10,
            podward_shim::relay::DEFAULT_BUFFER,
        )
        .await;
    });
}

/// A bare relay that waits as the shim waits (child mode): each socket registered with the
/// runtime for reading alone, a blocked write waiting on a second descriptor registered for
/// writing only while it blocks (see shim/src/relay/socket.rs). tokio's own streams, as
/// [`as_bare_relay`] uses them, are registered for both, and every time a peer reads what the
/// relay wrote the kernel reports the socket writable and wakes the runtime for nothing: that
/// relay is a floor for a user-space copy, not for the shim's way of waiting.
/// `args`: listen path, containerd socket.
pub(crate) fn as_read_wait_relay(args: &[String]) {
    serve_child_relay(args, |c, u| async move {
        let _ = read_wait::relay(c, u).await;
    });
}

/// A bare relay on a thread per connection blocking in `poll(2)` (child mode): socat's loop, in
/// Rust, with the other floors' buffers (the client's side read 64 KiB at a time, containerd's
/// at the shim's default). No runtime between the kernel's wake-up and the copy: at one call at
/// a time this relay added less than either tokio floor and than socat (docs/benchmarks.md,
/// Shim). Writes block: both peers read all the time, and a bench client never stalls.
/// `args`: listen path, containerd socket.
pub(crate) fn as_thread_relay(args: &[String]) {
    let listener = std::os::unix::net::UnixListener::bind(&args[0]).expect("bind");
    let containerd = PathBuf::from(&args[1]);
    for client in listener.incoming().flatten() {
        let containerd = containerd.clone();
        std::thread::spawn(move || {
            if let Ok(upstream) = std::os::unix::net::UnixStream::connect(&containerd) {
                let _ = thread_relay::relay(client, upstream);
            }
        });
    }
}

/// Serves `args[0]` on the shim's runtime flavour (current-thread): each accepted connection
/// gets its own connection to containerd (`args[1]`) and `relay` copies between the two.
fn serve_child_relay<F, R>(args: &[String], relay: F)
where
    F: Fn(tokio::net::UnixStream, tokio::net::UnixStream) -> R + Send + Copy + 'static,
    R: std::future::Future<Output = ()> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (listen, containerd) = (PathBuf::from(&args[0]), PathBuf::from(&args[1]));
    rt.block_on(async move {
        let listener = tokio::net::UnixListener::bind(&listen).expect("bind");
        loop {
            let Ok((c, _)) = listener.accept().await else {
                continue;
            };
            let containerd = containerd.clone();
            tokio::spawn(async move {
                if let Ok(u) = tokio::net::UnixStream::connect(&containerd).await {
                    relay(c, u).await;
                }
            });
        }
    });
}

mod thread_relay {
    use std::io::{self, Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

    /// Copies both ways until either side ends.
    pub(super) fn relay(mut c: UnixStream, mut u: UnixStream) -> io::Result<()> {
        let mut up = vec![0u8; 64 << 10];
        let mut down = vec![0u8; podward_shim::relay::DEFAULT_BUFFER];
        loop {
            let (from_client, from_containerd) = {
                let mut fds = [
                    PollFd::new(c.as_fd(), PollFlags::POLLIN),
                    PollFd::new(u.as_fd(), PollFlags::POLLIN),
                ];
                poll(&mut fds, PollTimeout::NONE)?;
                // Any event (data, hang-up, error) is found out by the read.
                (fds[0].any() != Some(false), fds[1].any() != Some(false))
            };
            if from_client && !copy(&mut c, &mut u, &mut up)? {
                return Ok(());
            }
            if from_containerd && !copy(&mut u, &mut c, &mut down)? {
                return Ok(());
            }
        }
    }

    /// One read from `src` written whole to `dst`; false at the end of `src`.
    fn copy(src: &mut UnixStream, dst: &mut UnixStream, buf: &mut [u8]) -> io::Result<bool> {
        let n = src.read(buf)?;
        if n == 0 {
            return Ok(false);
        }
        dst.write_all(&buf[..n])?;
        Ok(true)
    }
}

mod read_wait {
    #![allow(unsafe_code)]

    use std::io::{self, Read, Write};
    use std::os::unix::net::UnixStream;

    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    fn register(s: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
        // SAFETY: the `AsyncFd` owns the stream, whose descriptor stays open until it is dropped.
        unsafe { AsyncFd::register_with_interest(s, interest) }.map_err(io::Error::from)
    }

    /// Copies both ways until either side ends: client reads 64 KiB, containerd's at the
    /// shim's default buffer, as `copy_bidirectional_with_sizes` does for the other floor.
    pub(super) async fn relay(
        c: tokio::net::UnixStream,
        u: tokio::net::UnixStream,
    ) -> io::Result<()> {
        let c = register(c.into_std()?, Interest::READABLE)?;
        let u = register(u.into_std()?, Interest::READABLE)?;
        let mut up = vec![0u8; 64 << 10];
        let mut down = vec![0u8; podward_shim::relay::DEFAULT_BUFFER];
        loop {
            let (mut ready, dst, buf) = tokio::select! {
                r = c.readable() => (r?, &u, &mut up),
                r = u.readable() => (r?, &c, &mut down),
            };
            let n = match ready.get_inner().read(buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready.clear_ready();
                    continue;
                }
                Err(e) => return Err(e),
            };
            if n < buf.len() {
                // A short read took all there was (as the shim's reads assume).
                ready.clear_ready();
            }
            write_all(dst.get_ref(), &buf[..n]).await?;
        }
    }

    async fn write_all(dst: &UnixStream, mut buf: &[u8]) -> io::Result<()> {
        let mut armed: Option<AsyncFd<UnixStream>> = None;
        while !buf.is_empty() {
            match (&*dst).write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let fd = match armed.as_ref() {
                        Some(fd) => fd,
                        None => armed.insert(register(dst.try_clone()?, Interest::WRITABLE)?),
                    };
                    fd.writable().await?.clear_ready();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

pub(crate) async fn start_read_wait_relay(node: &TestNode) -> ShimProcess {
    start_child_relay(node, "--as-read-wait-relay", "bench-read-wait.sock").await
}

pub(crate) async fn start_thread_relay(node: &TestNode) -> ShimProcess {
    start_child_relay(node, "--as-thread-relay", "bench-thread.sock").await
}

pub(crate) async fn start_bare_relay(node: &TestNode) -> ShimProcess {
    start_child_relay(node, "--as-bare-relay", "bench-bare.sock").await
}

async fn start_child_relay(node: &TestNode, mode: &str, sock: &str) -> ShimProcess {
    let cri = node.dir().join(sock);
    let child = std::process::Command::new(std::env::current_exe().expect("current exe"))
        .arg(mode)
        .arg(&cri)
        .arg(node.containerd_socket())
        .spawn()
        .expect("spawn bare relay");
    let relay = ShimProcess {
        child,
        control: cri.clone(),
        cri,
        admin: None,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while client(&relay.cri)
        .version(cri::VersionRequest::default())
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "bare relay did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    relay
}

pub(crate) struct ShimProcess {
    pub(crate) child: std::process::Child,
    pub(crate) cri: PathBuf,
    pub(crate) control: PathBuf,
    /// The admin endpoint (`/metrics`), for a shim.
    pub(crate) admin: Option<std::net::SocketAddr>,
}

impl ShimProcess {
    /// `podward_shim_index_containers` from the shim's `/metrics`.
    pub(crate) async fn indexed_containers(&self) -> Option<u64> {
        let text = podward_e2e::http_get(self.admin?, "/metrics", Duration::from_secs(5))
            .await
            .ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("podward_shim_index_containers "))
            .and_then(|v| v.trim().parse().ok())
    }
}

impl Drop for ShimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// socat as a plain byte relay: one process per connection (`fork`), 8 KiB read/write buffers.
pub(crate) struct Socat {
    pub(crate) child: std::process::Child,
    pub(crate) path: PathBuf,
}

impl Drop for Socat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn start_socat(node: &TestNode) -> Socat {
    let path = node.dir().join("bench-socat.sock");
    let child = std::process::Command::new("socat")
        // socat's default listen backlog (5) refuses bursts of new connections with EAGAIN.
        .arg(format!(
            "UNIX-LISTEN:{},fork,mode=600,backlog=512",
            path.display()
        ))
        .arg(format!(
            "UNIX-CONNECT:{}",
            node.containerd_socket().display()
        ))
        .spawn()
        .expect("spawn socat (Debian package socat; scripts/install-deps.sh)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while client(&path)
        .version(cri::VersionRequest::default())
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "socat did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Socat { child, path }
}

/// How a shim under test is run.
pub(crate) enum ShimBuild {
    /// The shipped `podward-shim` binary of this bench's profile (built beside it when stale):
    /// what a node runs, so the RSS includes exactly the code pages the daemon maps.
    Shipped,
    /// This bench binary re-executed with `--as-shim`: the same library with settings the
    /// daemon has no flag for (read buffer, runtime flavour, reading every repeated List).
    Child {
        buffer_kib: usize,
        flavour: &'static str,
        read_every: bool,
    },
}

pub(crate) async fn start_shim(node: &TestNode, name: &str, build: ShimBuild) -> ShimProcess {
    let cri = node.dir().join(format!("bench-{name}.sock"));
    let control = node.dir().join(format!("bench-{name}-control.sock"));
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let child = match build {
        ShimBuild::Shipped => std::process::Command::new(podward_e2e::bin_path("podward-shim"))
            .arg("--listen")
            .arg(&cri)
            .arg("--control-socket")
            .arg(&control)
            .arg("--containerd-socket")
            .arg(node.containerd_socket())
            .arg("--admin-addr")
            .arg(admin.to_string())
            .args(["--log-level", "warn"])
            .spawn()
            .expect("spawn podward-shim"),
        ShimBuild::Child {
            buffer_kib,
            flavour,
            read_every,
        } => std::process::Command::new(std::env::current_exe().expect("current exe"))
            .arg("--as-shim")
            .arg(&cri)
            .arg(&control)
            .arg(node.containerd_socket())
            .arg(admin.to_string())
            .arg(flavour)
            .arg(buffer_kib.to_string())
            .arg(if read_every { "read-every" } else { "default" })
            .spawn()
            .expect("spawn shim"),
    };
    let shim = ShimProcess {
        child,
        cri,
        control,
        admin: Some(admin),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = client(&shim.cri);
        if c.version(cri::VersionRequest::default()).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "shim did not come up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shim
}
