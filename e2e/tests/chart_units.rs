//! The host install of the shim: the systemd units pass `systemd-analyze verify` with the built
//! binary as ExecStart, the flags in ExecStart are the shim's, and `deploy/install-shim.sh`
//! installs, re-runs without changes, updates atomically and uninstalls, all under a temporary
//! root.
//! Needs Debian's `systemd` package (for `systemd-analyze`; systemd itself is not run).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn shim_units_pass_systemd_analyze_verify_with_the_built_binary() {
    let shim = podward_e2e::bin_path("podward-shim");
    assert!(shim.exists(), "no built shim at {}", shim.display());
    let out = Command::new("bash")
        .arg(repo().join("deploy/verify-units.sh"))
        .arg(format!("--shim-binary={}", shim.display()))
        .output()
        .expect("run deploy/verify-units.sh");
    let t = text(&out);
    assert!(out.status.success(), "systemd-analyze verify failed:\n{t}");
    // The script proves first that verify rejects a broken unit; make sure that step ran.
    assert!(t.contains("self-test ok"), "{t}");
}

#[test]
fn shim_unit_exec_start_uses_only_flags_the_shim_has_and_sockets_match() {
    let unit = std::fs::read_to_string(repo().join("deploy/systemd/podward-shim.service"))
        .expect("read unit");
    // ExecStart= and its `\` continuation lines.
    let mut exec = String::new();
    for line in unit.lines().skip_while(|l| !l.starts_with("ExecStart=")) {
        exec.push_str(line.trim_end().trim_end_matches('\\'));
        exec.push(' ');
        if !line.trim_end().ends_with('\\') {
            break;
        }
    }
    let words: Vec<&str> = exec
        .trim_start_matches("ExecStart=")
        .split_whitespace()
        .collect();
    assert_eq!(words.first().copied(), Some("/usr/local/bin/podward-shim"));
    let shim = podward_e2e::bin_path("podward-shim");
    let help = Command::new(&shim)
        .arg("--help")
        .output()
        .expect("podward-shim --help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let flags: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| w.starts_with("--"))
        .collect();
    assert!(flags.len() >= 4, "ExecStart lost its flags: {words:?}");
    for f in &flags {
        let f = f.split('=').next().unwrap_or(f);
        assert!(
            help.contains(f),
            "ExecStart flag {f} is not in podward-shim --help"
        );
    }
    // The real parser accepts them (values included).
    let ok = Command::new(&shim)
        .args(&words[1..])
        .arg("--help")
        .output()
        .expect("run shim");
    assert!(
        ok.status.success(),
        "podward-shim rejects ExecStart's args: {}",
        text(&ok)
    );

    // Socket activation hands fd 3 = CRI, fd 4 = control: the socket unit's order must match the
    // service's --listen / --control-socket.
    let socket = std::fs::read_to_string(repo().join("deploy/systemd/podward-shim.socket"))
        .expect("read socket");
    let listens: Vec<&str> = socket
        .lines()
        .filter_map(|l| l.strip_prefix("ListenStream="))
        .collect();
    let value_after = |flag: &str| {
        words
            .iter()
            .position(|w| *w == flag)
            .and_then(|i| words.get(i + 1))
            .copied()
    };
    assert_eq!(
        listens,
        vec![
            value_after("--listen").expect("--listen"),
            value_after("--control-socket").expect("--control-socket")
        ]
    );
    assert!(socket.contains("SocketMode=0660"));
    assert!(
        !socket
            .lines()
            .any(|l| l.starts_with("PartOf=") || l.starts_with("BindsTo=")),
        "the socket must survive a restart of the service"
    );
    assert!(unit.contains("Requires=podward-shim.socket") && unit.contains("Restart=always"));
}

fn install(root: &Path, binary: &Path, extra: &[&str]) -> String {
    let out = Command::new("sh")
        .arg(repo().join("deploy/install-shim.sh"))
        .arg(format!("--root={}", root.display()))
        .arg(format!("--binary={}", binary.display()))
        .arg("--no-systemctl")
        .args(extra)
        .output()
        .expect("run install-shim.sh");
    let t = text(&out);
    assert!(out.status.success(), "install-shim.sh failed:\n{t}");
    t
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn install_shim_is_idempotent_updates_atomically_and_uninstalls() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("host");
    let payload = tmp.path().join("podward-shim");
    std::fs::write(&payload, "#!/bin/sh\necho v1\n").expect("write payload");
    std::fs::set_permissions(&payload, std::fs::Permissions::from_mode(0o700)).expect("chmod");

    let first = install(&root, &payload, &[]);
    let bin = root.join("usr/local/bin/podward-shim");
    let socket = root.join("etc/systemd/system/podward-shim.socket");
    let service = root.join("etc/systemd/system/podward-shim.service");
    let defaults = root.join("etc/default/podward-shim");
    assert_eq!(
        std::fs::read(&bin).expect("bin"),
        std::fs::read(&payload).expect("payload")
    );
    assert_eq!(mode(&bin), 0o755);
    assert_eq!(mode(&socket), 0o644);
    assert_eq!(
        std::fs::read(&service).expect("service"),
        std::fs::read(repo().join("deploy/systemd/podward-shim.service")).expect("unit")
    );
    assert!(first.contains("kubelet is unchanged"), "{first}");

    // Second run: nothing changes, and the operator's settings survive.
    std::fs::write(&defaults, "PODWARD_SHIM_LOG_LEVEL=debug\n").expect("edit defaults");
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&bin).expect("stat"));
    let second = install(&root, &payload, &[]);
    assert!(second.contains("nothing changed"), "{second}");
    assert_eq!(
        std::fs::read_to_string(&defaults).expect("defaults"),
        "PODWARD_SHIM_LOG_LEVEL=debug\n"
    );
    assert_eq!(
        inode,
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&bin).expect("stat"))
    );

    // A new binary is only staged: the active build, its units and the link stay (a crash or a
    // reboot restarts the build that ran); a changed socket unit is staged with it.
    std::fs::write(&payload, "#!/bin/sh\necho v2\n").expect("write v2");
    let units = tmp.path().join("units");
    std::fs::create_dir_all(&units).expect("units dir");
    for f in ["podward-shim.socket", "podward-shim.service"] {
        std::fs::copy(repo().join("deploy/systemd").join(f), units.join(f)).expect("copy unit");
    }
    let socket_v2 = format!(
        "{}\n# v2\n",
        std::fs::read_to_string(units.join("podward-shim.socket")).expect("socket")
    );
    std::fs::write(units.join("podward-shim.socket"), &socket_v2).expect("socket v2");
    let units_flag = format!("--units={}", units.display());
    let staged = install(&root, &payload, &[&units_flag]);
    assert!(staged.contains("staged build"), "{staged}");
    assert!(std::fs::read_to_string(&bin).expect("bin").contains("v1"));
    assert_eq!(
        inode,
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&bin).expect("stat"))
    );
    assert_ne!(
        std::fs::read_to_string(&socket).expect("socket"),
        socket_v2,
        "a staged socket unit is not installed"
    );
    // The explicit step: the link flips to the new build, its units are installed.
    let third = install(&root, &payload, &[&units_flag, "--restart"]);
    assert!(third.contains("activated build"), "{third}");
    assert_eq!(std::fs::read_to_string(&socket).expect("socket"), socket_v2);
    assert!(
        std::fs::symlink_metadata(&bin)
            .expect("link")
            .file_type()
            .is_symlink(),
        "the active build is a link into podward-shim.d"
    );
    assert_ne!(
        inode,
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&bin).expect("stat"))
    );
    assert!(std::fs::read_to_string(&bin).expect("bin").contains("v2"));
    // Back to v1 (a rollback): its build is still there.
    std::fs::write(&payload, "#!/bin/sh\necho v1\n").expect("write v1");
    let back = install(&root, &payload, &["--restart"]);
    assert!(back.contains("activated build"), "{back}");
    assert!(std::fs::read_to_string(&bin).expect("bin").contains("v1"));
    let leftovers: Vec<_> = std::fs::read_dir(bin.parent().expect("dir"))
        .expect("ls")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("podward-new"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind");

    let gone = install(&root, &payload, &["--uninstall"]);
    assert!(
        !bin.exists() && !socket.exists() && !service.exists(),
        "{gone}"
    );
    assert!(defaults.exists(), "uninstall keeps the operator's settings");
}

#[test]
fn install_shim_as_the_chart_runs_it_writes_only_the_mounted_dirs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("host");
    let payload = tmp.path().join("podward-shim");
    std::fs::write(&payload, "#!/bin/sh\n").expect("write payload");
    std::fs::set_permissions(&payload, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    install(
        &root,
        &payload,
        &[
            "--no-defaults",
            "--bin-dir=/usr/local/bin",
            "--unit-dir=/etc/systemd/system",
        ],
    );
    let mut written: Vec<String> = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("ls").flatten() {
            if e.file_type().expect("type").is_dir() {
                stack.push(e.path());
            } else {
                written.push(
                    e.path()
                        .strip_prefix(&root)
                        .expect("under root")
                        .display()
                        .to_string(),
                );
            }
        }
    }
    written.sort();
    // The build's own directory (binary and units), the link to it, the units.
    let build: Vec<&String> = written
        .iter()
        .filter(|w| w.starts_with("usr/local/bin/podward-shim.d/"))
        .collect();
    assert_eq!(build.len(), 3, "{written:?}");
    written.retain(|w| !w.starts_with("usr/local/bin/podward-shim.d/"));
    assert_eq!(
        written,
        vec![
            "etc/systemd/system/podward-shim.service",
            "etc/systemd/system/podward-shim.socket",
            "usr/local/bin/podward-shim"
        ]
    );
}

/// Kills the socket activator (and the shim it exec'd into) when the test ends, pass or fail.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Status code of `GET path` on `port`, if the server answered.
fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head).ok()?;
    String::from_utf8_lossy(&head[..n])
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn shim_starts_on_the_socket_units_sockets_without_recreating_them() {
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, Instant};

    // The units' own socket paths and ExecStart, moved into a temporary /run/podward.
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path();
    let relocate = |s: &str| {
        s.replace("/run/podward/", &format!("{}/", run.display()))
            .replace(
                "/run/containerd/",
                &format!("{}/containerd-absent/", run.display()),
            )
    };
    let socket_unit =
        std::fs::read_to_string(repo().join("deploy/systemd/podward-shim.socket")).expect("read");
    let listens: Vec<String> = socket_unit
        .lines()
        .filter_map(|l| l.strip_prefix("ListenStream="))
        .map(relocate)
        .collect();
    assert_eq!(listens.len(), 2, "CRI and control sockets");
    let service =
        std::fs::read_to_string(repo().join("deploy/systemd/podward-shim.service")).expect("read");
    let mut exec = String::new();
    for line in service.lines().skip_while(|l| !l.starts_with("ExecStart=")) {
        exec.push_str(line.trim_end().trim_end_matches('\\'));
        exec.push(' ');
        if !line.trim_end().ends_with('\\') {
            break;
        }
    }
    let words: Vec<String> = exec
        .trim_start_matches("ExecStart=")
        .split_whitespace()
        .skip(1)
        .map(relocate)
        .collect();
    let admin = podward_e2e::free_port();

    // systemd-socket-activate (Debian's systemd package) binds the sockets like the .socket unit
    // and execs the shim with LISTEN_FDS on the first connection, as systemd does.
    let mut cmd = Command::new("systemd-socket-activate");
    for l in &listens {
        cmd.arg("-l").arg(l);
    }
    cmd.arg("--")
        .arg(podward_e2e::bin_path("podward-shim"))
        .args(&words)
        .arg(format!("--admin-addr=127.0.0.1:{admin}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = KillOnDrop(cmd.spawn().expect("spawn systemd-socket-activate"));

    let deadline = Instant::now() + Duration::from_secs(10);
    while !listens.iter().all(|l| Path::new(l).exists()) {
        assert!(
            Instant::now() < deadline,
            "the activator never bound {listens:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let inodes: Vec<u64> = listens
        .iter()
        .map(|l| std::fs::metadata(l).expect("stat").ino())
        .collect();
    // kubelet's first call: activation.
    let _conn =
        std::os::unix::net::UnixStream::connect(&listens[0]).expect("connect to the CRI socket");

    let deadline = Instant::now() + Duration::from_secs(30);
    while http_status(admin, "/healthz") != Some(200) {
        assert!(
            child.0.try_wait().expect("try_wait").is_none(),
            "the socket-activated shim exited"
        );
        assert!(
            Instant::now() < deadline,
            "the socket-activated shim never served /healthz"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let after: Vec<u64> = listens
        .iter()
        .map(|l| std::fs::metadata(l).expect("stat").ino())
        .collect();
    assert_eq!(
        inodes, after,
        "the shim must use the inherited sockets, not bind new ones"
    );
    // Both sockets still accept connections (served by the shim now).
    for l in &listens {
        std::os::unix::net::UnixStream::connect(l).unwrap_or_else(|e| panic!("connect {l}: {e}"));
    }
}
