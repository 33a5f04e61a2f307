//! An optional loopback image registry (Debian `docker-registry`) with busybox pushed by
//! `skopeo`, so tests can exercise CRI `PullImage` over plain HTTP.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::binaries::run_checked;
use crate::error::HarnessError;

/// The repository (and tag) busybox is pushed as: pull `<host>/busybox:latest`.
pub(crate) const BUSYBOX_REPO: &str = "busybox:latest";

/// A running registry process; killed on drop.
#[derive(Debug)]
pub(crate) struct Registry {
    child: Child,
    host: String,
}

/// The first `name` on `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

impl Registry {
    /// Starts a registry on a free loopback port storing under `dir`, and pushes `busybox` (an
    /// OCI archive) to it. `Ok(None)` when `docker-registry` or `skopeo` is not installed.
    pub(crate) async fn start(
        dir: &Path,
        busybox: &Path,
    ) -> Result<Option<Registry>, HarnessError> {
        let (Some(registry_bin), Some(skopeo)) = (which("docker-registry"), which("skopeo")) else {
            tracing::warn!(
                "docker-registry or skopeo not installed (apt-get install docker-registry skopeo): \
                 no loopback registry, PullImage tests will skip"
            );
            return Ok(None);
        };
        std::fs::create_dir_all(dir).map_err(HarnessError::io("create", dir))?;
        let port = crate::net::free_port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.join("config.yml");
        let yaml = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n",
            serde_json::to_string(&dir.join("data").to_string_lossy())?
        );
        std::fs::write(&config, yaml).map_err(HarnessError::io("write", &config))?;
        let log = dir.join("registry.log");
        let out = std::fs::File::create(&log).map_err(HarnessError::io("create", &log))?;
        let err = out.try_clone().map_err(HarnessError::io("dup", &log))?;
        let child = Command::new(registry_bin)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(HarnessError::io("spawn", "docker-registry"))?;
        let mut reg = Registry { child, host };
        reg.wait_ready(port, &log, Duration::from_secs(15)).await?;
        let mut cmd = Command::new(skopeo);
        cmd.args([
            "--insecure-policy",
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
        ])
        .arg(format!("oci-archive:{}", busybox.display()))
        .arg(format!("docker://{}/{BUSYBOX_REPO}", reg.host))
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
        tokio::task::spawn_blocking(move || run_checked(&mut cmd))
            .await
            .map_err(|e| HarnessError::Invalid(format!("skopeo task: {e}")))??;
        Ok(Some(reg))
    }

    /// `host:port` of the registry.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    async fn wait_ready(
        &mut self,
        port: u16,
        log: &Path,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                return Err(HarnessError::Invalid(format!(
                    "docker-registry exited with {status}: {}",
                    crate::binaries::tail(&text, 2000)
                )));
            }
            if let Ok(200) = crate::net::http_get_status(addr, "/v2/", Duration::from_secs(1)).await
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HarnessError::Timeout {
                    what: format!("docker-registry on {addr}"),
                    after: timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
