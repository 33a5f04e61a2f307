//! [`Daemon`]: a podward binary run as a child process.

use std::net::SocketAddr;
use std::process::{ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::error::HarnessError;

/// How long [`Daemon::terminate`] waits for an exit after SIGTERM before it SIGKILLs.
const TERM_TIMEOUT: Duration = Duration::from_secs(20);

/// Where a [`Daemon`]'s stdout and stderr lines go.
#[derive(Debug, Clone)]
pub enum DaemonOutput {
    /// To the test's output (stderr), prefixed with the daemon's name.
    Forward,
    /// Into a bounded channel, as `(daemon name, line)`; lines that find it full are dropped
    /// (a reader that stalls never blocks the daemon, whose pipe keeps draining).
    Lines(tokio::sync::mpsc::Sender<(String, String)>),
}

/// A podward daemon ([`crate::binaries::bin_path`]) as a child process. Its stdout and stderr are
/// copied line by line to the test's output, prefixed with its name (or wherever [`DaemonOutput`]
/// says). Dropping it SIGKILLs it.
#[derive(Debug)]
pub struct Daemon {
    name: String,
    pid: u32,
    child: Mutex<Option<Child>>,
}

impl Daemon {
    /// Starts `name` (a podward binary) with `args`.
    pub async fn spawn(name: &str, args: &[&str]) -> Result<Daemon, HarnessError> {
        Self::spawn_with_output(name, args, DaemonOutput::Forward).await
    }

    /// Starts `name` (a podward binary) with `args`, its output going to `output`. With
    /// [`DaemonOutput::Lines`] the daemon runs in a process group of its own, so a terminal's
    /// Ctrl-C reaches only the caller (the demo), which then stops its daemons in order instead
    /// of all of them dying at once under its cleanup.
    pub async fn spawn_with_output(
        name: &str,
        args: &[&str],
        output: DaemonOutput,
    ) -> Result<Daemon, HarnessError> {
        crate::logging::init_test_logging();
        let path = tokio::task::spawn_blocking({
            let name = name.to_owned();
            move || crate::binaries::bin_path(&name)
        })
        .await
        .map_err(|e| HarnessError::Invalid(format!("bin_path task: {e}")))?;
        let mut command = Command::new(&path);
        if matches!(output, DaemonOutput::Lines(_)) {
            command.process_group(0);
        }
        let mut child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(HarnessError::io("spawn", &path))?;
        let pid = child
            .id()
            .ok_or_else(|| HarnessError::Invalid(format!("{name} has no pid")))?;
        if let Some(out) = child.stdout.take() {
            forward(name.to_owned(), out, output.clone());
        }
        if let Some(err) = child.stderr.take() {
            forward(name.to_owned(), err, output);
        }
        Ok(Daemon {
            name: name.to_owned(),
            pid,
            child: Mutex::new(Some(child)),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Polls `GET http://<admin_addr>/healthz` until it answers 200; fails early if the
    /// daemon exits, or after `timeout`.
    pub async fn wait_healthy(
        &self,
        admin_addr: SocketAddr,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        self.wait_for(admin_addr, "/healthz", timeout).await
    }

    /// Polls `GET http://<admin_addr>/readyz` until it answers 200 (the daemon has its whole
    /// view); fails early if the daemon exits, or after `timeout`.
    pub async fn wait_ready(
        &self,
        admin_addr: SocketAddr,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        self.wait_for(admin_addr, "/readyz", timeout).await
    }

    async fn wait_for(
        &self,
        admin_addr: SocketAddr,
        path: &str,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Err(HarnessError::Exited {
                    name: self.name.clone(),
                    status,
                });
            }
            if let Ok(200) =
                crate::net::http_get_status(admin_addr, path, Duration::from_secs(1)).await
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HarnessError::Timeout {
                    what: format!("{} {path} on {admin_addr}", self.name),
                    after: timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The exit status, if the daemon has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        let mut guard = self.child.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL, without waiting (a crash).
    pub fn kill9(&mut self) {
        let mut guard = self.child.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = guard.as_mut() {
            let _ = c.start_kill();
        }
    }

    /// Sends a signal to the daemon (e.g. SIGHUP).
    pub fn signal(&self, signal: Signal) -> Result<(), HarnessError> {
        let pid = i32::try_from(self.pid)
            .map_err(|_| HarnessError::Invalid("pid out of range".into()))?;
        kill(Pid::from_raw(pid), signal).map_err(|e| HarnessError::Io {
            action: format!("kill -{signal}"),
            path: self.name.clone().into(),
            source: e.into(),
        })
    }

    /// SIGTERM and wait for the exit (SIGKILL after 20 s, reported as a timeout).
    pub async fn terminate(&mut self) -> Result<ExitStatus, HarnessError> {
        let child = self.child.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut child) = child else {
            return Err(HarnessError::Invalid(format!(
                "{} was already terminated",
                self.name
            )));
        };
        if let Ok(Some(status)) = child.try_wait() {
            return Ok(status);
        }
        self.signal(Signal::SIGTERM)?;
        match tokio::time::timeout(TERM_TIMEOUT, child.wait()).await {
            Ok(r) => r.map_err(HarnessError::io("wait for", &self.name)),
            Err(_) => {
                let _ = child.kill().await;
                Err(HarnessError::Timeout {
                    what: format!("{} to exit after SIGTERM", self.name),
                    after: TERM_TIMEOUT,
                })
            }
        }
    }
}

/// Longest line copied to the test output; the rest of a longer line is dropped.
const MAX_LINE: usize = 8 * 1024;

/// Copies a child's output to `output` line by line, holding at most [`MAX_LINE`] bytes of a
/// line in memory whatever the child writes.
fn forward(
    name: String,
    stream: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    output: DaemonOutput,
) {
    let emit = move |line: &[u8]| {
        let line = String::from_utf8_lossy(line);
        match &output {
            DaemonOutput::Forward => eprintln!("[{name}] {line}"),
            DaemonOutput::Lines(tx) => {
                let _ = tx.try_send((name.clone(), line.into_owned()));
            }
        }
    };
    tokio::spawn(async move {
        let mut reader = BufReader::new(stream);
        let mut line: Vec<u8> = Vec::with_capacity(256);
        loop {
            let chunk = match reader.fill_buf().await {
                Ok([]) | Err(_) => break,
                Ok(chunk) => chunk,
            };
            let (part, consumed, end) = match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => (&chunk[..i], i + 1, true),
                None => (chunk, chunk.len(), false),
            };
            let room = MAX_LINE.saturating_sub(line.len());
            line.extend_from_slice(&part[..part.len().min(room)]);
            reader.consume(consumed);
            if end {
                emit(&line);
                line.clear();
            }
        }
        if !line.is_empty() {
            emit(&line);
        }
    });
}
