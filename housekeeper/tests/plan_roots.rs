//! A root flag that cannot be right stops the daemon and `plan --local` before anything is read:
//! a root that is `/` (also as `/var/..` or through a symlink), not a directory, missing, a cgroup
//! root without a cgroup filesystem, a log root inside the pods directory. Usable roots start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use podward_api::test_util::eventually;
use podward_housekeeper::Config;
use podward_housekeeper::report::plan_command;

/// Temp kubelet and log roots, the real cgroup filesystem, no containerd: nothing could act.
fn config(dir: &Path) -> Config {
    std::fs::create_dir_all(dir.join("kubelet/pods")).expect("kubelet root");
    std::fs::create_dir_all(dir.join("logs")).expect("log root");
    Config {
        socket: dir.join("housekeeper.sock"),
        shim_socket: dir.join("shim.sock"),
        prober_socket: dir.join("prober.sock"),
        common: podward_api::daemon::config::Common {
            containerd_socket: dir.join("containerd.sock"),
            ..podward_api::daemon::config::Common::with_admin_port(0)
        },
        kubelet_root: dir.join("kubelet"),
        log_root: dir.join("logs"),
        cgroup_root: "/sys/fs/cgroup".into(),
        interval: Duration::from_secs(3600),
        ..Config::default()
    }
}

/// `run` must return an error at once, without ever serving its socket.
async fn refuses_to_start(config: Config, flag: &str) {
    let socket = config.socket.clone();
    let ran = tokio::time::timeout(
        Duration::from_secs(10),
        podward_housekeeper::run(config, std::future::pending()),
    )
    .await;
    match ran {
        Ok(Err(e)) => assert!(e.to_string().contains(flag), "{flag}: {e}"),
        Ok(Ok(())) => panic!("{flag}: run returned Ok"),
        Err(_) => panic!("{flag}: the daemon started and kept running"),
    }
    assert!(!socket.exists(), "{flag}: the API socket was served");
}

async fn local_plan_refused(config: &Config, flag: &str) {
    match plan_command(config, false, true).await {
        Err(e) => assert!(e.to_string().contains(flag), "{flag}: {e}"),
        Ok(plan) => panic!("{flag}: plan --local ran:\n{plan}"),
    }
}

#[tokio::test]
async fn a_log_root_of_slash_plans_nothing_and_deletes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut c = config(tmp.path());
    c.log_root = "/".into();
    local_plan_refused(&c, "--log-root / is the filesystem root").await;
    c.dry_run = false;
    refuses_to_start(c, "--log-root / is the filesystem root").await;
}

#[tokio::test]
async fn a_kubelet_root_of_slash_in_disguise_refuses_to_start() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let to_slash = tmp.path().join("to-slash");
    std::os::unix::fs::symlink("/", &to_slash).expect("symlink");
    for root in [PathBuf::from("/"), PathBuf::from("/var/.."), to_slash] {
        let mut c = config(tmp.path());
        c.kubelet_root = root.clone();
        local_plan_refused(&c, "--kubelet-root").await;
        refuses_to_start(c, "is the filesystem root").await;
    }
}

/// Sets one root of a config.
type SetRoot = fn(&mut Config, PathBuf);

#[tokio::test]
async fn a_root_that_is_not_a_directory_refuses_to_start() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").expect("file");
    let missing = tmp.path().join("missing");
    let cases: [(&str, SetRoot, &Path, &str); 4] = [
        (
            "--log-root",
            |c, p| c.log_root = p,
            &file,
            "not a directory",
        ),
        (
            "--log-root",
            |c, p| c.log_root = p,
            &missing,
            "does not exist",
        ),
        (
            "--kubelet-root",
            |c, p| c.kubelet_root = p,
            &file,
            "not a directory",
        ),
        (
            "--cgroup-root",
            |c, p| c.cgroup_root = p,
            &missing,
            "does not exist",
        ),
    ];
    for (flag, set, path, why) in cases {
        let mut c = config(tmp.path());
        set(&mut c, path.to_path_buf());
        local_plan_refused(&c, why).await;
        refuses_to_start(c, flag).await;
    }
}

#[tokio::test]
async fn a_cgroup_root_without_a_cgroup_filesystem_refuses_to_start() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Looks like a cgroup tree, but is a plain directory: not where pod cgroups live.
    let fake = tmp.path().join("cgroup");
    std::fs::create_dir_all(fake.join("kubepods/burstable")).expect("mkdir");
    std::fs::write(fake.join("cgroup.controllers"), "cpu memory\n").expect("write");
    let mut c = config(tmp.path());
    c.cgroup_root = fake;
    local_plan_refused(&c, "no cgroup filesystem").await;
    refuses_to_start(c, "--cgroup-root").await;
}

#[tokio::test]
async fn a_log_root_inside_the_pods_directory_refuses_to_start() {
    // Pod dirs are named <uid>, which is also the legacy log dir name: as log dirs they would be
    // removed without the pod dir rules (files under volumes/ block).
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut c = config(tmp.path());
    c.log_root = c.kubelet_root.join("pods");
    local_plan_refused(&c, "overlap").await;
    refuses_to_start(c, "overlap").await;
    let mut c = config(tmp.path());
    c.log_root = c.kubelet_root.clone();
    refuses_to_start(c, "overlap").await;
}

#[tokio::test]
async fn usable_roots_start_and_serve() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let c = config(tmp.path());
    let table = plan_command(&c, false, true).await.expect("plan --local");
    assert!(table.contains("dry run"), "{table}");
    let socket = c.socket.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(podward_housekeeper::run(c, async move {
        let _ = stopped.await;
    }));
    eventually("the API socket", Duration::from_secs(20), async || {
        socket.exists()
    })
    .await;
    let _ = stop.send(());
    daemon.await.expect("join").expect("run");
}
