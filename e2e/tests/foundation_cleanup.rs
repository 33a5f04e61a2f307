//! Foundation: dropping a TestNode leaves no process, mount, cgroup or file behind — with pods
//! still running, after a panic, and after containerd was killed.

use std::time::Duration;

use podward_e2e::{ContainerSpec, Driver, Pod, PodSpec, TestNode};

/// Starts a sleeping pod and a crash-looping pod; returns them with the node.
async fn busy_node() -> (TestNode, Vec<Pod>) {
    let node = TestNode::start().await.expect("start node");
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    // A pod-network pod too, when the CNI plugins are installed (bridge, netns, CNI cache).
    let netpod = match node.pod_subnet() {
        Some(_) => Some(
            driver
                .run_pod(
                    &node,
                    PodSpec::new("netpod")
                        .pod_network()
                        .container(ContainerSpec::new("n", &["sleep", "3600"])),
                )
                .await
                .expect("netpod"),
        ),
        None => None,
    };
    let sleeper = driver
        .run_pod(
            &node,
            PodSpec::new("sleeper").container(ContainerSpec::new("s", &["sleep", "3600"])),
        )
        .await
        .expect("sleeper");
    let looper = driver
        .run_pod(
            &node,
            PodSpec::new("looper")
                .container(ContainerSpec::new("l", &["sh", "-c", "sleep 0.2; exit 1"])),
        )
        .await
        .expect("looper");
    looper
        .wait_restart_count("l", 1, Duration::from_secs(20))
        .await
        .expect("looping");
    let mut pods = vec![sleeper, looper];
    pods.extend(netpod);
    (node, pods)
}

/// The footprint is visible while the node runs (so the leak check can see leaks at all).
fn assert_footprint_present(fp: &podward_e2e::Footprint) {
    assert!(!fp.pod_processes().is_empty(), "no pod process seen");
    assert!(!fp.shims().is_empty(), "no shim seen");
    assert!(!fp.mounts().is_empty(), "no mount seen");
    assert!(!fp.cgroup_dirs().is_empty(), "no cgroup seen");
    assert!(fp.dir.is_dir());
    if fp.bridge.is_some() {
        assert!(!fp.cni_cache_files().is_empty(), "no CNI result cache seen");
    }
}

#[tokio::test]
async fn drop_with_running_pods_leaves_nothing() {
    let (node, pods) = busy_node().await;
    let fp = node.footprint();
    assert_footprint_present(&fp);
    let sockets = fp.shim_sockets();
    assert!(
        !sockets.is_empty() && sockets.iter().all(|s| s.exists()),
        "shim sockets {sockets:?}"
    );
    let cni_cache = fp.cni_cache_files();
    drop(pods);
    drop(node);
    assert_nothing_left(&fp, &sockets, &cni_cache);
}

#[tokio::test]
async fn drop_during_a_panic_leaves_nothing() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let (node, _pods) = busy_node().await;
        let _ = tx.send(node.footprint());
        panic!("test failure while the node runs");
    });
    let err = task.await.expect_err("task must panic");
    assert!(err.is_panic());
    let fp = rx.await.expect("footprint");
    assert!(fp.leaks().is_empty(), "leaks: {:#?}", fp.leaks());
}

#[tokio::test]
async fn drop_after_containerd_was_killed_leaves_nothing() {
    let (mut node, pods) = busy_node().await;
    let fp = node.footprint();
    let sockets = fp.shim_sockets();
    assert!(
        sockets.iter().all(|s| s.exists()),
        "shim sockets {sockets:?}"
    );
    let cni_cache = fp.cni_cache_files();
    node.stop_containerd().await;
    // Containers keep running in their shims without containerd.
    assert!(!fp.pod_processes().is_empty());
    assert!(!fp.shims().is_empty());
    drop(pods);
    drop(node);
    assert_nothing_left(&fp, &sockets, &cni_cache);
}

#[tokio::test]
async fn containerd_restarts_and_still_knows_the_pods() {
    let node = TestNode::start().await.expect("start node");
    let mut node = node;
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    let pod = driver
        .run_pod(
            &node,
            PodSpec::new("survivor")
                .grace_period(1)
                .container(ContainerSpec::new("s", &["sleep", "3600"])),
        )
        .await
        .expect("pod");
    node.stop_containerd().await;
    node.start_containerd().await.expect("restart containerd");
    let out = pod
        .exec_sync("s", &["echo", "back"], Duration::from_secs(10))
        .await
        .expect("exec after restart");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "back\n");
    pod.delete().await.expect("delete");
}

/// Set for the helper process of [`a_node_whose_test_process_died_is_swept`].
const HELPER_ENV: &str = "PODWARD_E2E_SWEEP_HELPER";

#[tokio::test]
#[ignore = "helper process of a_node_whose_test_process_died_is_swept; does nothing alone"]
async fn helper_node_then_hang() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    let (node, _pods) = busy_node().await;
    println!("NODE_DIR={}", node.dir().display());
    // Wait to be SIGKILLed by the parent test (this is the thing under test, not a sync point).
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test]
async fn a_node_whose_test_process_died_is_swept() {
    use tokio::io::AsyncBufReadExt;
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = tokio::process::Command::new(exe)
        .args([
            "helper_node_then_hang",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(HELPER_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn helper");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let dir = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("read helper") {
            if let Some(dir) = line.strip_prefix("NODE_DIR=") {
                return std::path::PathBuf::from(dir);
            }
        }
        panic!("helper exited without a node");
    })
    .await
    .expect("helper started a node");
    child.start_kill().expect("SIGKILL helper");
    child.wait().await.expect("reap helper");
    let fp = podward_e2e::Footprint::of_node_dir(&dir).expect("node dir name");
    // SIGKILL ran no Drop: containerd, shims and pods are still there.
    assert!(
        !fp.pod_processes().is_empty() && !fp.shims().is_empty(),
        "{:#?}",
        fp.leaks()
    );
    let sockets = fp.shim_sockets();
    let cni_cache = fp.cni_cache_files();
    // The next node's start sweeps it.
    let node = TestNode::start().await.expect("start node");
    assert!(
        fp.leaks().is_empty(),
        "leaks after sweep: {:#?}",
        fp.leaks()
    );
    assert!(
        sockets.iter().chain(&cni_cache).all(|s| !s.exists()),
        "shim sockets or CNI cache left: {sockets:?} {cni_cache:?}"
    );
    drop(node);
}

/// No leak (processes, shims, mounts, cgroups), and none of the shim sockets and CNI cache
/// entries seen while the node ran left on disk.
fn assert_nothing_left(
    fp: &podward_e2e::Footprint,
    sockets: &[std::path::PathBuf],
    cni_cache: &[std::path::PathBuf],
) {
    assert!(fp.leaks().is_empty(), "leaks: {:#?}", fp.leaks());
    let left: Vec<_> = sockets
        .iter()
        .chain(cni_cache)
        .filter(|s| s.exists())
        .collect();
    assert!(left.is_empty(), "shim sockets or CNI cache left: {left:?}");
}
