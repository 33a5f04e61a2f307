//! The daemon's text logs in a pipe: no ANSI colour codes when stderr is not a terminal (logs
//! redirected to a file or collected by a container runtime must stay plain text).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_podward-prober"))
        .arg("--socket")
        .arg(dir.path().join("prober.sock"))
        .arg("--shim-socket")
        .arg(dir.path().join("no-shim.sock"))
        .arg("--containerd-socket")
        .arg(dir.path().join("no-containerd.sock"))
        .args(["--admin-addr", "127.0.0.1:0", "--node-ip", "127.0.0.1"])
        .args(["--log-format", "text", "--log-level", "info"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start podward-prober");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let started = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                let done = line.contains("podward-prober starting");
                seen.push(line);
                if done {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(started, "no start-up line in {seen:#?}");
    // The start-up line has fields and a level, which the text format colours on a terminal.
    for line in &seen {
        assert!(
            !line.contains('\u{1b}'),
            "ANSI escape in a piped log line: {line:?}"
        );
    }
    assert!(
        seen.iter()
            .any(|l| l.contains(" INFO ") && l.contains("socket=")),
        "the level and fields are still written: {seen:#?}"
    );
}
