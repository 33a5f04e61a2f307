//! Foundation: a real containerd runs a host-network busybox pod through the Driver; exec works;
//! delete leaves nothing behind; exited containers are restarted by the restart policy.

use std::time::Duration;

use podward_api::cri::{
    ContainerFilter, ListContainersRequest, ListPodSandboxRequest, PodSandboxFilter,
};
use podward_e2e::{ContainerSpec, Driver, PodSpec, RestartPolicy, TestNode};

#[tokio::test]
async fn pod_runs_execs_and_deletes_cleanly() {
    let node = TestNode::start().await.expect("start node");
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    let spec = PodSpec::new("hello")
        .grace_period(1)
        .container(ContainerSpec::new("main", &["sleep", "3600"]));
    let pod = driver.run_pod(&node, spec).await.expect("run pod");
    let sandbox_id = pod.sandbox_id().to_owned();

    let hi = pod
        .exec_sync("main", &["echo", "hi"], Duration::from_secs(10))
        .await
        .expect("exec echo");
    assert_eq!(hi.exit_code, 0);
    assert_eq!(String::from_utf8_lossy(&hi.stdout), "hi\n");
    let three = pod
        .exec_sync("main", &["sh", "-c", "exit 3"], Duration::from_secs(10))
        .await
        .expect("exec exit 3");
    assert_eq!(three.exit_code, 3);

    // The sandbox runs in the node's cgroup parent and in the host network namespace.
    let footprint = node.footprint();
    let procs = footprint.pod_processes();
    assert!(
        procs.iter().any(|(_, cmd)| cmd.contains("sleep 3600")),
        "container process not found in the node's cgroup parent: {procs:?}"
    );
    let host = pod
        .exec_sync("main", &["cat", "/proc/net/dev"], Duration::from_secs(10))
        .await
        .expect("exec cat");
    let host_dev = std::fs::read_to_string("/proc/net/dev").expect("read /proc/net/dev");
    let ifaces = |s: &str| -> Vec<String> {
        s.lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(|n| n.trim().to_owned())
            .collect()
    };
    assert_eq!(
        ifaces(&String::from_utf8_lossy(&host.stdout)),
        ifaces(&host_dev),
        "host network"
    );

    pod.delete().await.expect("delete pod");
    let mut rt = node.runtime_client().await;
    let sandboxes = rt
        .list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(PodSandboxFilter {
                id: sandbox_id.clone(),
                ..Default::default()
            }),
        })
        .await
        .expect("list sandboxes")
        .into_inner()
        .items;
    assert!(sandboxes.is_empty(), "sandbox still listed: {sandboxes:?}");
    let containers = rt
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                pod_sandbox_id: sandbox_id,
                ..Default::default()
            }),
        })
        .await
        .expect("list containers")
        .into_inner()
        .containers;
    assert!(
        containers.is_empty(),
        "containers still listed: {containers:?}"
    );
    // No pod process, no shim, no rootfs/shm mount: only containerd itself remains.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !footprint.shims().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        footprint.shims().is_empty(),
        "shims left: {:?}",
        footprint.shims()
    );
    assert!(
        footprint.pod_processes().is_empty(),
        "pod processes left: {:?}",
        footprint.pod_processes()
    );
    assert!(
        footprint.mounts().is_empty(),
        "mounts left: {:?}",
        footprint.mounts()
    );
    drop(node);
    assert!(
        footprint.leaks().is_empty(),
        "leaks: {:?}",
        footprint.leaks()
    );
}

#[tokio::test]
async fn exited_containers_restart_by_policy() {
    let node = TestNode::start().await.expect("start node");
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    let crash = ContainerSpec::new("crash", &["sh", "-c", "sleep 0.5; exit 1"]);
    let always = driver
        .run_pod(
            &node,
            PodSpec::new("always")
                .grace_period(1)
                .container(crash.clone()),
        )
        .await
        .expect("run always pod");
    let never = driver
        .run_pod(
            &node,
            PodSpec::new("never")
                .grace_period(1)
                .restart_policy(RestartPolicy::Never)
                .container(crash),
        )
        .await
        .expect("run never pod");

    always
        .wait_restart_count("crash", 2, Duration::from_secs(20))
        .await
        .expect("restarted twice");
    let seen = always.restart_counts_seen("crash");
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "not monotonic: {seen:?}"
    );
    assert_eq!(&seen[..3], &[0, 1, 2], "seen {seen:?}");
    let first_id = never.container_id("crash").expect("never: container id");

    // By now the Never pod's container has exited too (same command, started earlier than
    // the second restart); the driver must have decided not to restart it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !never.finished("crash") {
        assert!(
            std::time::Instant::now() < deadline,
            "Never pod's container not seen exiting"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(never.restart_count("crash"), 0);
    assert_eq!(never.restart_counts_seen("crash"), vec![0]);
    assert_eq!(never.container_id("crash"), Some(first_id));

    always.delete().await.expect("delete always");
    never.delete().await.expect("delete never");
}

#[tokio::test]
async fn pod_network_pod_gets_an_ip_the_host_can_reach() {
    let node = TestNode::start().await.expect("start node");
    let Some(subnet) = node.pod_subnet().map(str::to_owned) else {
        eprintln!(
            "!!! SKIPPED pod_network_pod_gets_an_ip_the_host_can_reach: CNI plugins not installed \
             (apt-get install containernetworking-plugins) !!!"
        );
        return;
    };
    let driver = Driver::connect(&node.containerd_socket())
        .await
        .expect("driver");
    let web = ContainerSpec::new(
        "web",
        &[
            "sh",
            "-c",
            "echo pod-ok > /tmp/index.html; exec httpd -f -p 8080 -h /tmp",
        ],
    );
    let pod = driver
        .run_pod(
            &node,
            PodSpec::new("net")
                .pod_network()
                .grace_period(1)
                .container(web),
        )
        .await
        .expect("run pod-network pod");
    let ip = pod.ip().await.expect("status").expect("pod has an IP");
    let prefix = subnet.trim_end_matches("0/24");
    assert!(ip.starts_with(prefix), "pod IP {ip} not in {subnet}");
    // The pod has its own network namespace: its interfaces are not the host's.
    let dev = pod
        .exec_sync("web", &["cat", "/proc/net/dev"], Duration::from_secs(10))
        .await
        .expect("exec");
    assert!(String::from_utf8_lossy(&dev.stdout).contains("eth0"));
    // The host reaches the pod's server on the pod IP (poll: httpd needs a moment to listen).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let body = loop {
        let addr = std::net::SocketAddr::new(ip.parse().expect("pod IP"), 8080);
        match podward_e2e::http_get(addr, "/index.html", Duration::from_secs(5)).await {
            Ok(body) => break body,
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "GET pod IP: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(
        body.starts_with("HTTP/1.") && body.contains(" 200 ") && body.ends_with("pod-ok\n"),
        "{body}"
    );
    pod.delete().await.expect("delete");
}
