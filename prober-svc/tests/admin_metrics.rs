//! The prober daemon in-process (`run_with`, no shim or containerd: the pod is handed to its
//! manager) probing a real TCP listener: its admin endpoint serves exactly kubelet's probe
//! families on `/metrics/probes`, keeps them on `/metrics` unless `metrics_with_probes` is off,
//! and `status` renders what its real API answers.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use podward_api::test_util::eventually;
use podward_prober::daemon::cli::{PodRef, status_command};
use podward_prober::daemon::{Config, Options, Parts};
use podward_prober::model::{ContainerInfo, PodInfo, RunState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// `GET path` on the admin endpoint: (status line, body).
async fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8(buf).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

/// The families a text page declares (`# TYPE` lines).
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// Family names of every sample line (histogram suffixes folded into their family).
fn sample_families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(|n| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .filter(|base| base.starts_with("prober_probe_duration"))
                .unwrap_or(n)
                .to_owned()
        })
        .collect()
}

/// A pod `default/web` whose container `app` has TCP liveness and readiness probes on `port`.
fn web_pod(port: u16) -> PodInfo {
    let probes = serde_json::json!({"app": {
        "livenessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
        "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
    }});
    let now = podward_api::time::now_ns();
    let app = ContainerInfo {
        id: "c0ffee".into(),
        name: "app".into(),
        attempt: 0,
        state: RunState::Running,
        created_at_ns: now - 2,
        started_at_ns: now - 1,
        ports: Vec::new().into(),
        env: Vec::new().into(),
        pod_grace_seconds: Some(30),
        stop_requested_at_ns: 0,
    };
    PodInfo {
        uid: "uid-web".into(),
        name: "web".into(),
        namespace: "default".into(),
        sandbox_id: "sb-web".into(),
        sandbox_created_at_ns: now - 3,
        ip: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        probes_annotation: Some(probes.to_string()),
        stop_requested_at_ns: 0,
        api: None,
        containers: [("c0ffee".to_owned(), Arc::new(app))].into(),
    }
}

/// Runs the prober until `check` returns, with a probed pod whose probes have succeeded.
async fn with_prober<F>(metrics_with_probes: bool, check: F)
where
    F: AsyncFnOnce(&Parts, &Config),
{
    let dir = tempfile::tempdir().expect("tempdir");
    let target = TcpListener::bind("127.0.0.1:0").await.expect("bind target");
    let port = target.local_addr().expect("addr").port();
    let accept = tokio::spawn(async move {
        while let Ok((s, _)) = target.accept().await {
            drop(s);
        }
    });
    let config = Config {
        socket: dir.path().join("prober.sock"),
        shim_socket: dir.path().join("no-shim.sock"),
        common: podward_api::daemon::config::Common {
            containerd_socket: dir.path().join("no-containerd.sock"),
            ..podward_api::daemon::config::Common::with_admin_port(0)
        },
        node_ip: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        metrics_with_probes,
        ..Config::default()
    };
    let (parts_tx, parts_rx) = tokio::sync::oneshot::channel();
    let options = Options {
        on_start: Some(Box::new(move |parts| {
            let _ = parts_tx.send(parts);
        })),
        ..Options::default()
    };
    let stop = podward_api::daemon::stop::Stop::new();
    let prober = tokio::spawn(podward_prober::daemon::run_with(
        config.clone(),
        options,
        stop.stopped(),
    ));
    let parts = parts_rx.await.expect("the prober started");
    parts.manager.update_pod(web_pod(port));
    let series = parts.metrics.series().clone();
    eventually(
        "both probes to succeed",
        Duration::from_secs(20),
        async || series.totals().0 >= 2,
    )
    .await;
    check(&parts, &config).await;
    stop.trigger();
    prober.await.expect("join").expect("the prober ran");
    accept.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_probes_serves_exactly_kubelets_families_and_metrics_keeps_them() {
    with_prober(true, async |parts: &Parts, _: &Config| {
        let (status, probes) = get(parts.admin_addr, "/metrics/probes").await;
        assert_eq!(status, "HTTP/1.0 200 OK", "{probes}");
        let kubelets: BTreeSet<String> = [
            "process_start_time_seconds",
            "prober_probe_total",
            "prober_probe_duration_seconds",
        ]
        .map(str::to_owned)
        .into();
        assert_eq!(families(&probes), kubelets, "{probes}");
        assert_eq!(sample_families(&probes), kubelets, "{probes}");
        assert!(
            probes.lines().any(|l| l.starts_with("prober_probe_total{")
                && l.contains("pod=\"web\"")
                && l.contains("probe_type=\"Readiness\"")
                && l.contains("result=\"successful\"")),
            "{probes}"
        );

        let (_, metrics) = get(parts.admin_addr, "/metrics").await;
        let on_metrics = families(&metrics);
        for name in [
            "prober_probe_total",
            "prober_probe_duration_seconds",
            "podward_prober_workers",
            "podward_prober_build_info",
            "process_resident_memory_bytes",
        ] {
            assert!(
                on_metrics.contains(name),
                "{name} not on /metrics: {on_metrics:?}"
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_without_probes_leaves_them_to_metrics_probes_only() {
    with_prober(false, async |parts: &Parts, _: &Config| {
        let (_, metrics) = get(parts.admin_addr, "/metrics").await;
        assert!(
            !metrics.contains("prober_probe_"),
            "probe series on /metrics: {metrics}"
        );
        assert!(metrics.contains("podward_prober_workers"), "{metrics}");
        let (_, probes) = get(parts.admin_addr, "/metrics/probes").await;
        assert!(probes.contains("prober_probe_total{"), "{probes}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_renders_the_real_apis_answer() {
    with_prober(true, async |_: &Parts, config: &Config| {
        let web: PodRef = "default/web".parse().expect("pod");
        let table = status_command(&config.socket, Some(&web), false)
            .await
            .expect("status");
        assert!(
            table.starts_with("1 pod, 1 container, 2 probes: all started, ready and live\n"),
            "{table}"
        );
        for probe in ["Liveness", "Readiness"] {
            let row = table
                .lines()
                .find(|l| l.starts_with("default/web") && l.contains(probe))
                .unwrap_or_else(|| panic!("no {probe} row:\n{table}"));
            let cells: Vec<&str> = row
                .split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect();
            assert_eq!(
                cells[1..7],
                ["app", probe, "yes", "yes", "yes", "Success"],
                "{row}"
            );
            assert!(
                cells[7].starts_with("Success ") && cells[7].ends_with(" ago"),
                "{row}"
            );
        }
        let json = status_command(&config.socket, Some(&web), true)
            .await
            .expect("status --json");
        let v: serde_json::Value = serde_json::from_str(&json).expect("json");
        assert_eq!(v["pods"][0]["pod_uid"], "uid-web");
        assert_eq!(
            v["pods"][0]["containers"][0]["probes"][0]["type"],
            "READINESS"
        );
        let other: PodRef = "default/db".parse().expect("pod");
        let e = status_command(&config.socket, Some(&other), false)
            .await
            .expect_err("not probed");
        assert!(
            e.to_string().contains("pod default/db is not probed here"),
            "{e}"
        );
    })
    .await;
}

/// A lease setting that cannot work (renewing no sooner than the lease lasts) stops the start
/// before anything is bound: the error names the flag, and no API socket file is left behind
/// for the next start or an operator to trip over.
#[tokio::test]
async fn an_impossible_lease_setting_stops_the_start_and_leaves_no_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config {
        socket: dir.path().join("prober.sock"),
        shim_socket: dir.path().join("no-shim.sock"),
        common: podward_api::daemon::config::Common {
            containerd_socket: dir.path().join("no-containerd.sock"),
            ..podward_api::daemon::config::Common::with_admin_port(0)
        },
        node_ip: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        node_name: Some("node-a".into()),
        node_lease_renew_interval_seconds: 40,
        node_lease_duration_seconds: 40,
        ..Config::default()
    };
    let started = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = started.clone();
    let options = Options {
        on_start: Some(Box::new(move |_| {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
        })),
        ..Options::default()
    };
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        podward_prober::daemon::run_with(config.clone(), options, std::future::pending()),
    )
    .await
    .expect("the start ends instead of running");
    let e = result.expect_err("an impossible lease setting is refused");
    assert!(
        e.to_string()
            .contains("--node-lease-renew-interval-seconds"),
        "the error names the flag: {e}"
    );
    assert!(
        !started.load(std::sync::atomic::Ordering::SeqCst),
        "nothing was handed out as started"
    );
    assert!(
        !config.socket.exists(),
        "no API socket file left at {}",
        config.socket.display()
    );
}
