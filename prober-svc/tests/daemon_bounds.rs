//! The daemon's sockets are bounded, checked on the real binary: a
//! connection to the API socket that never sends the HTTP/2 preface is closed at the handshake
//! deadline, one Watch more than `--max-subscribers` is RESOURCE_EXHAUSTED naming the limit,
//! and an `--admin-addr` that is not loopback is warned about at start.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use podward_api::daemon::grpc::HANDSHAKE_TIMEOUT;
use podward_api::prober::v1::WatchRequest;
use podward_api::prober::v1::prober_client::ProberClient;
use podward_api::test_util::eventually;
use tokio::io::AsyncReadExt;

struct Daemon {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &std::path::Path) -> Daemon {
    let mut child = Command::new(env!("CARGO_BIN_EXE_podward-prober"))
        .arg("--socket")
        .arg(dir.join("prober.sock"))
        .arg("--shim-socket")
        .arg(dir.join("no-shim.sock"))
        .arg("--containerd-socket")
        .arg(dir.join("no-containerd.sock"))
        // Any address of the host: the wildcard is what an operator exposing it would give.
        .args(["--admin-addr", "0.0.0.0:0", "--node-ip", "127.0.0.1"])
        .args(["--max-subscribers", "1"])
        .args(["--log-format", "text", "--log-level", "info"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start podward-prober");
    let stderr = child.stderr.take().expect("stderr");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            sink.lock().expect("lines").push(line);
        }
    });
    Daemon { child, lines }
}

#[tokio::test]
async fn the_api_socket_is_bounded_and_a_public_admin_addr_is_warned_about() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("prober.sock");
    let daemon = start(dir.path());
    eventually("the API socket", Duration::from_secs(30), async || {
        tokio::net::UnixStream::connect(&socket).await.is_ok()
    })
    .await;
    {
        let lines = daemon.lines.lock().expect("lines");
        assert!(
            lines
                .iter()
                .any(|l| l.contains("WARN") && l.contains("not a loopback address")),
            "{lines:#?}"
        );
    }

    // One Watch is allowed, the second is refused with the limit in the message.
    let mut client = ProberClient::new(podward_api::socket::channel(&socket));
    let _first = client
        .watch(WatchRequest::default())
        .await
        .expect("the first Watch");
    let err = client
        .watch(WatchRequest::default())
        .await
        .expect_err("a second Watch beyond --max-subscribers 1");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(
        err.message().contains("--max-subscribers 1"),
        "{}",
        err.message()
    );

    // A client that never speaks is closed at the handshake deadline.
    let mut silent = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("connect");
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(HANDSHAKE_TIMEOUT * 2, silent.read(&mut buf))
        .await
        .expect("the prober closed a connection that sent no preface");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}
