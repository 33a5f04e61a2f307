//! Finding (and if needed building) the podward binaries under test, and running helper commands.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::SystemTime;

use crate::error::HarnessError;
use crate::lock::FileLock;

/// The daemons a test may run.
const PACKAGES: [&str; 3] = ["podward-shim", "podward-prober", "podward-housekeeper"];

/// What the daemons are built from (relative to the workspace root): a change here makes a
/// built binary stale. Tests, benches and docs are left out so that editing a test does not
/// send every test process into `cargo build`.
const SOURCES: [&str; 12] = [
    "Cargo.lock",
    "Cargo.toml",
    "shim/src",
    "shim/Cargo.toml",
    "prober-svc/src",
    "prober-svc/Cargo.toml",
    "housekeeper/src",
    "housekeeper/Cargo.toml",
    "proto/src",
    "proto/podward",
    "proto/build.rs",
    "proto/Cargo.toml",
];

/// Whether this process already made sure the binaries are fresh (build once per test process).
static CHECKED: Mutex<bool> = Mutex::new(false);

/// Path of a built podward binary (`"podward-shim"`, `"podward-prober"`, `"podward-housekeeper"`).
///
/// The directory is `$PODWARD_BIN_DIR` when set (used as is, never built), else the cargo
/// profile directory this test binary lives in (`…/target/<profile>/deps/x` →
/// `…/target/<profile>`). When a binary there is missing or older than the sources, the three
/// daemons are built once (`cargo build --bins -p … `, same target dir and profile) under a file
/// lock shared by concurrent test processes. A failed build is printed; the caller then fails on
/// the missing binary with a clear error.
pub fn bin_path(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("PODWARD_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    let Some(profile_dir) = profile_dir() else {
        return PathBuf::from(name);
    };
    let path = profile_dir.join(name);
    let mut checked = CHECKED.lock().unwrap_or_else(|p| p.into_inner());
    if !*checked {
        if let Err(e) = build_if_stale(&profile_dir) {
            eprintln!("podward-e2e: building the podward binaries failed: {e}");
        }
        *checked = true;
    }
    path
}

/// `…/target/<profile>` from the running test executable.
fn profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().map(Path::to_path_buf)
    } else {
        Some(dir.to_path_buf())
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn build_if_stale(profile_dir: &Path) -> Result<(), HarnessError> {
    let _lock = FileLock::acquire(&profile_dir.join(".podward-e2e-build.lock"))?;
    let newest_source = SOURCES
        .iter()
        .filter_map(|d| newest_mtime(&workspace_root().join(d)))
        .max();
    let stale = PACKAGES.iter().any(|bin| {
        match std::fs::metadata(profile_dir.join(bin)).and_then(|m| m.modified()) {
            Ok(built) => newest_source.is_some_and(|src| src > built),
            Err(_) => true,
        }
    });
    if !stale {
        return Ok(());
    }
    let target_dir = profile_dir.parent().unwrap_or(profile_dir);
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_owned(),
        Some(other) => other.to_owned(),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "--bins", "--profile", &profile])
        .env("CARGO_TARGET_DIR", target_dir);
    for p in PACKAGES {
        cmd.args(["-p", p]);
    }
    eprintln!(
        "podward-e2e: building {PACKAGES:?} into {}",
        target_dir.display()
    );
    run_checked(&mut cmd).map(|_| ())
}

/// The newest modification time of any file under `path` (skipping `target` dirs).
fn newest_mtime(path: &Path) -> Option<SystemTime> {
    let md = std::fs::symlink_metadata(path).ok()?;
    if !md.is_dir() {
        return md.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .flatten()
        .filter(|e| e.file_name() != "target")
        .filter_map(|e| newest_mtime(&e.path()))
        .max()
}

/// Runs `cmd` to completion; its stdout on success, else a [`HarnessError::Command`] with the
/// tail of its stderr.
pub(crate) fn run_checked(cmd: &mut Command) -> Result<String, HarnessError> {
    let line = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(HarnessError::io("run", cmd.get_program()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(HarnessError::Command {
        command: line,
        status: out.status,
        stderr: tail(&String::from_utf8_lossy(&out.stderr), 4000),
    })
}

/// The last `max` bytes of `s` (on a char boundary), for error messages.
pub(crate) fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}
