//! What goes into each image: the layer's files and the image config.

use std::path::Path;
use std::process::Command;

use crate::error::HarnessError;

/// Where the static busybox comes from (Debian `busybox-static`).
pub(super) const BUSYBOX_BINARY: &str = "/bin/busybox";

/// The runtime part of an OCI image config (the fields we use).
#[derive(Debug, Clone)]
pub(crate) struct ImageConfig {
    /// `Env`.
    pub(crate) env: Vec<String>,
    /// `Entrypoint`.
    pub(crate) entrypoint: Vec<String>,
    /// `Cmd`.
    pub(crate) cmd: Vec<String>,
}

/// Busybox's `PATH`.
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Fixed mtime for reproducible layers.
const MTIME: u64 = 1_700_000_000;

/// The busybox image's config: `sh` by default.
pub(crate) fn busybox_config() -> ImageConfig {
    ImageConfig {
        env: vec![PATH_ENV.into()],
        entrypoint: vec![],
        cmd: vec!["sh".into()],
    }
}

/// The pause image's config: `/pause`.
pub(crate) fn pause_config() -> ImageConfig {
    ImageConfig {
        env: vec![PATH_ENV.into()],
        entrypoint: vec!["/pause".into()],
        cmd: vec![],
    }
}

/// Writes the busybox layer tar (busybox, a symlink per applet, /etc/passwd, /tmp) under `work`.
pub(crate) fn busybox_layer(work: &Path) -> Result<std::path::PathBuf, HarnessError> {
    let applets = list_applets()?;
    let path = work.join("busybox-layer.tar");
    let file = std::fs::File::create(&path).map_err(HarnessError::io("create", &path))?;
    let mut tar = tar::Builder::new(file);
    let io = |e| HarnessError::io("write layer", &path)(e);
    for dir in [
        "bin/", "etc/", "root/", "usr/", "usr/bin/", "var/", "proc/", "sys/", "dev/",
    ] {
        append_dir(&mut tar, dir, 0o755).map_err(io)?;
    }
    append_dir(&mut tar, "tmp/", 0o1777).map_err(io)?;
    let busybox =
        std::fs::read(BUSYBOX_BINARY).map_err(HarnessError::io("read", BUSYBOX_BINARY))?;
    append_file(&mut tar, "bin/busybox", 0o755, &busybox).map_err(io)?;
    for applet in applets.iter().filter(|a| a.as_str() != "busybox") {
        append_symlink(&mut tar, &format!("bin/{applet}"), "busybox").map_err(io)?;
    }
    append_file(
        &mut tar,
        "etc/passwd",
        0o644,
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )
    .map_err(io)?;
    append_file(
        &mut tar,
        "etc/group",
        0o644,
        b"root:x:0:\nnogroup:x:65534:\n",
    )
    .map_err(io)?;
    append_file(&mut tar, "etc/hosts", 0o644, b"127.0.0.1 localhost\n").map_err(io)?;
    tar.into_inner().map_err(io)?;
    Ok(path)
}

/// Compiles `pause.c` statically and writes the pause layer tar under `work`.
pub(crate) fn pause_layer(source: &Path, work: &Path) -> Result<std::path::PathBuf, HarnessError> {
    let bin = work.join("pause");
    let mut cmd = Command::new("gcc");
    cmd.args(["-static", "-Os", "-s", "-o"])
        .arg(&bin)
        .arg(source);
    crate::binaries::run_checked(&mut cmd)?;
    let bytes = std::fs::read(&bin).map_err(HarnessError::io("read", &bin))?;
    let path = work.join("pause-layer.tar");
    let file = std::fs::File::create(&path).map_err(HarnessError::io("create", &path))?;
    let mut tar = tar::Builder::new(file);
    let io = |e| HarnessError::io("write layer", &path)(e);
    for dir in ["dev/", "proc/", "sys/", "etc/"] {
        append_dir(&mut tar, dir, 0o755).map_err(io)?;
    }
    append_file(&mut tar, "pause", 0o755, &bytes).map_err(io)?;
    tar.into_inner().map_err(io)?;
    Ok(path)
}

/// The applet names this busybox provides (`busybox --list`).
fn list_applets() -> Result<Vec<String>, HarnessError> {
    let mut cmd = Command::new(BUSYBOX_BINARY);
    cmd.arg("--list");
    let out = crate::binaries::run_checked(&mut cmd)?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains('/'))
        .map(String::from)
        .collect())
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(MTIME);
    h.set_uid(0);
    h.set_gid(0);
    h
}

fn append_dir(tar: &mut tar::Builder<std::fs::File>, path: &str, mode: u32) -> std::io::Result<()> {
    let mut h = header(tar::EntryType::Directory, mode, 0);
    tar.append_data(&mut h, path, std::io::empty())
}

fn append_file(
    tar: &mut tar::Builder<std::fs::File>,
    path: &str,
    mode: u32,
    data: &[u8],
) -> std::io::Result<()> {
    let mut h = header(tar::EntryType::Regular, mode, data.len() as u64);
    tar.append_data(&mut h, path, data)
}

fn append_symlink(
    tar: &mut tar::Builder<std::fs::File>,
    path: &str,
    target: &str,
) -> std::io::Result<()> {
    let mut h = header(tar::EntryType::Symlink, 0o777, 0);
    tar.append_link(&mut h, path, target)
}
