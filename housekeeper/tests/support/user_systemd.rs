//! A real systemd manager for tests: `systemd --user` with its own D-Bus session bus, in its own
//! cgroup `podward-sdtest-<id>` (in the v2 hierarchy, and in the named `systemd` v1 hierarchy when
//! the host has one), started in a private mount namespace.
//!
//! The development machines boot without systemd. systemd refuses to run a user manager unless
//! `/run/systemd/system` exists (`sd_booted()`), so the manager gets a private tmpfs on `/run`
//! holding that directory: the host's `/run` is never touched. Its units come only from a temp
//! dir (`SYSTEMD_UNIT_PATH`): a `default.target` that wants `dbus.socket` + `dbus.service`, because
//! a manager connects its API to the bus only once it runs those two units itself. Everything it
//! starts lives under its cgroup, and `Drop` kills that cgroup (`cgroup.kill`) and removes it.
//!
//! Pod slices are made the way kubelet and runc make them: `StartTransientUnit` of the pod slice,
//! then of a `cri-containerd-<id>.scope` in it holding a real process (`PIDs`).

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use podward_api::test_util::eventually;

use super::real_cgroups::{dirs_deepest_first, v2_mount};
use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value};

const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const SYSTEMD: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";

const START: &str = r#"set -e
for procs in "$@"; do echo $$ > "$procs"; done
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/systemd/system
exec systemd --user
"#;

/// A running `systemd --user` with its bus.
pub struct UserSystemd {
    procs: Procs,
    /// Its cgroup in the v2 hierarchy: the root of every unit it makes.
    pub unified: PathBuf,
    /// Its cgroup in the named `systemd` v1 hierarchy, if the host has one (hybrid).
    pub named: Option<PathBuf>,
    /// The session bus address it serves its API on.
    pub bus: String,
    conn: zbus::Connection,
    dir: tempfile::TempDir,
}

/// The manager and the sleepers, killed (with everything in the manager's cgroup) and their
/// cgroups removed on drop, also when the start itself fails.
struct Procs {
    manager: Child,
    sleepers: Vec<Child>,
    cgroups: Vec<PathBuf>,
}

impl UserSystemd {
    /// Starts the manager and waits (bounded) until it answers on its bus.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let units = dir.path().join("units");
        let run = dir.path().join("run");
        let home = dir.path().join("home");
        for d in [&units, &run, &home] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(
            units.join("default.target"),
            "[Unit]\nDescription=podward test manager\nWants=dbus.socket dbus.service\n",
        )
        .expect("default.target");
        std::fs::write(
            units.join("dbus.socket"),
            "[Unit]\nDescription=test bus socket\n[Socket]\nListenStream=%t/bus\n",
        )
        .expect("dbus.socket");
        std::fs::write(
            units.join("dbus.service"),
            "[Unit]\nDescription=test bus\nRequires=dbus.socket\n[Service]\n\
             ExecStart=/usr/bin/dbus-daemon --session --address=systemd: --nofork --nopidfile \
             --systemd-activation\n",
        )
        .expect("dbus.service");

        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        let name = format!("podward-sdtest-{}-{nanos}", std::process::id());
        let unified = v2_mount().join(&name);
        std::fs::create_dir(&unified).expect("mkdir v2 test cgroup (needs root)");
        let named_root = Path::new("/sys/fs/cgroup/systemd");
        let named = (named_root.join("cgroup.procs").exists()
            && !named_root.join("cgroup.controllers").exists())
        .then(|| named_root.join(&name));
        if let Some(n) = &named {
            std::fs::create_dir(n).expect("mkdir named test cgroup");
        }
        let mut procs = vec![unified.join("cgroup.procs")];
        procs.extend(named.iter().map(|n| n.join("cgroup.procs")));
        let log = std::fs::File::create(dir.path().join("systemd.log")).expect("log");
        let manager = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                START,
                "sh",
            ])
            .args(&procs)
            .env("XDG_RUNTIME_DIR", &run)
            .env("HOME", &home)
            .env("SYSTEMD_UNIT_PATH", &units)
            .env("SYSTEMD_LOG_TARGET", "console")
            .env("SYSTEMD_LOG_LEVEL", "info")
            .env(
                "DBUS_SESSION_BUS_ADDRESS",
                format!("unix:path={}", run.join("bus").display()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn systemd --user (needs util-linux unshare and systemd)");
        let bus = format!("unix:path={}", run.join("bus").display());
        let mut cgroups = vec![unified.clone()];
        cgroups.extend(named.clone());
        let procs = Procs {
            manager,
            sleepers: Vec::new(),
            cgroups,
        };

        let mut conn = None;
        let log_path = dir.path().join("systemd.log");
        let started = std::time::Instant::now();
        let mut told = false;
        eventually(
            "systemd --user to answer on its bus",
            Duration::from_secs(30),
            async || {
                if !told && started.elapsed() > Duration::from_secs(25) {
                    told = true;
                    eprintln!(
                        "systemd --user log so far:\n{}",
                        std::fs::read_to_string(&log_path).unwrap_or_default()
                    );
                }
                let Ok(b) = zbus::connection::Builder::address(bus.as_str()) else {
                    return false;
                };
                let Ok(c) = b.build().await else {
                    return false;
                };
                let ok = c
                    .call_method(
                        Some(SYSTEMD),
                        MANAGER_PATH,
                        Some(MANAGER),
                        "GetUnit",
                        &("default.target",),
                    )
                    .await
                    .is_ok();
                if ok {
                    conn = Some(c);
                }
                ok
            },
        )
        .await;
        let conn = conn.expect("connected once the manager answered");
        Self {
            procs,
            unified,
            named,
            bus,
            conn,
            dir,
        }
    }

    /// The manager's log so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("systemd.log")).unwrap_or_default()
    }

    async fn manager_call<B>(&self, method: &str, body: &B) -> zbus::Result<zbus::Message>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        self.conn
            .call_method(Some(SYSTEMD), MANAGER_PATH, Some(MANAGER), method, body)
            .await
    }

    /// A pod the way kubelet and runc make one under the systemd driver: the pod slice, then a
    /// `cri-containerd-<id>.scope` in it with a `sleep` inside. Returns the sleeper's pid once
    /// systemd has moved it into the scope.
    pub async fn start_pod(&mut self, slice: &str, container_id: &str) -> i32 {
        let no_aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
        let slice_props: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from("podward test pod slice")),
            ("DefaultDependencies", Value::from(false)),
        ];
        self.manager_call(
            "StartTransientUnit",
            &(slice, "replace", slice_props, no_aux.clone()),
        )
        .await
        .unwrap_or_else(|e| panic!("start {slice}: {e}\n{}", self.log()));
        let child = Command::new("sleep")
            .arg("3600")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        self.procs.sleepers.push(child);
        let scope = format!("cri-containerd-{container_id}.scope");
        let scope_props: Vec<(&str, Value<'_>)> = vec![
            ("Slice", Value::from(slice)),
            ("PIDs", Value::from(vec![pid])),
            ("Delegate", Value::from(true)),
            ("DefaultDependencies", Value::from(false)),
        ];
        self.manager_call(
            "StartTransientUnit",
            &(scope.as_str(), "replace", scope_props, no_aux),
        )
        .await
        .unwrap_or_else(|e| panic!("start {scope}: {e}\n{}", self.log()));
        let pid = i32::try_from(pid).expect("pid");
        eventually(
            "the sleeper to be in its scope",
            Duration::from_secs(10),
            async || {
                std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                    .is_ok_and(|c| c.contains(&scope))
            },
        )
        .await;
        pid
    }

    /// A `sleep` moved by hand into `rel` under [`Self::unified`]: a cgroup systemd was never
    /// told about.
    pub fn sleeper_in(&mut self, rel: &str) -> i32 {
        let child = Command::new("sleep")
            .arg("3600")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        self.procs.sleepers.push(child);
        let dir = self.unified.join(rel);
        std::fs::create_dir_all(&dir).expect("mkdir cgroup");
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).expect("move pid");
        i32::try_from(pid).expect("pid")
    }

    /// Whether systemd has `unit` loaded (`GetUnit` does not answer `NoSuchUnit`).
    pub async fn knows(&self, unit: &str) -> bool {
        match self.manager_call("GetUnit", &(unit,)).await {
            Ok(_) => true,
            Err(zbus::Error::MethodError(name, _, _))
                if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit" =>
            {
                false
            }
            Err(e) => panic!("GetUnit({unit}): {e}"),
        }
    }

    /// A `u64` property of a loaded unit (`iface` e.g. `org.freedesktop.systemd1.Slice`).
    pub async fn u64_property(&self, unit: &str, iface: &str, name: &str) -> u64 {
        let path: OwnedObjectPath = self
            .manager_call("GetUnit", &(unit,))
            .await
            .unwrap_or_else(|e| panic!("GetUnit({unit}): {e}"))
            .body()
            .deserialize()
            .expect("object path");
        let reply = self
            .conn
            .call_method(
                Some(SYSTEMD),
                path.as_str(),
                Some("org.freedesktop.DBus.Properties"),
                "Get",
                &(iface, name),
            )
            .await
            .unwrap_or_else(|e| panic!("Get {iface}.{name} of {unit}: {e}"));
        let v: OwnedValue = reply.body().deserialize().expect("variant");
        u64::try_from(v).expect("u64 property")
    }

    fn sleeper(&mut self, pid: i32) -> &mut Child {
        self.procs
            .sleepers
            .iter_mut()
            .find(|c| c.id() as i32 == pid)
            .expect("one of our sleepers")
    }

    /// Reaps `pid` if it was one of ours and returns the signal that ended it, waiting (bounded).
    pub fn wait_signal(&mut self, pid: i32) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let child = self.sleeper(pid);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status.signal();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Whether our sleeper `pid` still runs.
    pub fn alive(&mut self, pid: i32) -> bool {
        matches!(self.sleeper(pid).try_wait(), Ok(None))
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        let _ = self.manager.kill();
        let _ = self.manager.wait();
        // Everything the manager started (its bus, scopes) is in its cgroup.
        let _ = std::fs::write(self.cgroups[0].join("cgroup.kill"), "1");
        for c in &mut self.sleepers {
            let _ = c.kill();
            let _ = c.wait();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        for root in &self.cgroups {
            for dir in dirs_deepest_first(root) {
                while std::fs::remove_dir(&dir).is_err()
                    && dir.exists()
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}
