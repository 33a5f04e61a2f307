//! docs/operations.md's procedures walked as written, with the commands and manifests taken from
//! the document's own fenced blocks (as `chart_kubeadm.rs` walks kubelet's repointing):
//! - reading `podward-prober status` under the chart: the doc's `kubectl exec` command, run with
//!   the real binary in the environment the chart gives the prober's container, against the e2e
//!   API stand-in: it reads the node lease in the release namespace and the sentinel's leader
//!   lease by the chart's name for it;
//! - migrating one workload (§5): the guide's Before and After manifests through the prober's
//!   annotation parse and its checks against the API's view of the pod (the real `Manager`): no
//!   spec error, every probe moved as it was, the readiness gate present;
//! - uninstalling (§3.2, each node): `deploy/tests/uninstall_walk.py` runs the doc's blocks on
//!   copies of kubeadm node layouts with the shim installed, and fails docs that get the order
//!   wrong.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;

use podward_e2e::apiserver::MockApiServer;
use podward_prober::clock::Clock;
use podward_prober::consequences::kill::Killer;
use podward_prober::metrics::Metrics;
use podward_prober::model::container_port::ContainerPort;
use podward_prober::model::outcome::Outcome;
use podward_prober::model::{ContainerInfo, PodInfo, RunState};
use podward_prober::pods::manager::{Manager, Settings};
use podward_prober::probing::runner::ProbeRunner;
use podward_prober::publish::event::{Event, EventKind, EventSink, Events};
use podward_prober::spec::{ProbeSpec, ProbeType};
use podward_prober::stopper::{StopError, Stopper};
use serde_json::{Value, json};

#[path = "support/chart.rs"]
mod support;
use support::{Render, container, md_section, read, repo};

// ---------------------------------------------------------------------------------------------
// Shared: the document's blocks.

/// The fenced blocks (language, body) of `text`, in order; indented fences (in list items)
/// included, their indentation removed.
fn fenced_blocks(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, usize, String)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None => {
                if let Some(lang) = trimmed.strip_prefix("```") {
                    open = Some((lang.trim().to_owned(), indent, String::new()));
                }
            }
            Some((lang, ind, body)) => {
                if trimmed.starts_with("```") {
                    out.push((std::mem::take(lang), std::mem::take(body)));
                    open = None;
                } else {
                    body.push_str(line.get(*ind..).unwrap_or(trimmed));
                    body.push('\n');
                }
            }
        }
    }
    out
}

/// The first fenced block of `lang` after the first line of `text` starting with `marker`.
fn block_after(text: &str, marker: &str, lang: &str) -> String {
    let at = text
        .lines()
        .position(|l| l.starts_with(marker))
        .unwrap_or_else(|| panic!("docs: no paragraph starting {marker:?}"));
    let rest: String = text.lines().skip(at).collect::<Vec<_>>().join("\n");
    fenced_blocks(&rest)
        .into_iter()
        .find(|(l, _)| l == lang)
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("docs: no ```{lang} block after {marker:?}"))
}

/// YAML documents as JSON (PyYAML, as the chart tests use).
fn yaml_to_json(yaml: &str) -> Value {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(yaml.as_bytes())?;
            child.wait_with_output()
        })
        .expect("python3 yaml");
    assert!(
        out.status.success(),
        "not YAML:\n{yaml}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

// ---------------------------------------------------------------------------------------------
// `podward-prober status` under the chart.

/// The doc's `kubectl -n NS exec <pod> -c CONTAINER -- podward-prober status` (the first one in
/// a `sh` block without further arguments): (namespace, container, command words).
fn status_command(doc: &str) -> (String, String, Vec<String>) {
    for (lang, body) in fenced_blocks(doc) {
        if lang != "sh" {
            continue;
        }
        for line in body.lines() {
            let line = line.split(" #").next().unwrap_or(line).trim();
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(dashes) = words.iter().position(|w| *w == "--") else {
                continue;
            };
            let command: Vec<String> = words[dashes + 1..].iter().map(|w| w.to_string()).collect();
            if words.first() != Some(&"kubectl")
                || !words.contains(&"exec")
                || command.first().map(String::as_str) != Some("podward-prober")
                || command.get(1).map(String::as_str) != Some("status")
                || command.len() != 2
            {
                continue;
            }
            let after = |flag: &str| {
                words[..dashes]
                    .iter()
                    .position(|w| *w == flag)
                    .and_then(|i| words.get(i + 1))
                    .map(|w| w.to_string())
                    .unwrap_or_else(|| panic!("{line}: no {flag}"))
            };
            return (after("-n"), after("-c"), command);
        }
    }
    panic!("docs: no `kubectl ... exec ... -- podward-prober status` in a sh block");
}

/// The doc's `helm install RELEASE charts/podward -n NS`: (release, namespace).
fn install_command(doc: &str) -> (String, String) {
    let section = md_section(doc, "### 1.4 Install the chart");
    for (_, body) in fenced_blocks(&section) {
        let flat = body.replace("\\\n", " ");
        let words: Vec<&str> = flat.split_whitespace().collect();
        if words.starts_with(&["helm", "install"]) {
            let ns = words
                .iter()
                .position(|w| *w == "-n" || *w == "--namespace")
                .and_then(|i| words.get(i + 1))
                .expect("helm install -n");
            return (words[2].to_owned(), (*ns).to_owned());
        }
    }
    panic!("docs: no helm install command in 1.4");
}

/// The container's environment as the kubelet would give it on node `node` (downward API
/// resolved); a source the walk cannot resolve fails it.
fn resolved_env(c: &Value, namespace: &str, node: &str) -> Vec<(String, String)> {
    c["env"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().expect("env name").to_owned();
            if let Some(v) = e["value"].as_str() {
                return (name, v.to_owned());
            }
            let field = e["valueFrom"]["fieldRef"]["fieldPath"]
                .as_str()
                .unwrap_or_else(|| panic!("env {name}: a source the walk cannot resolve: {e}"));
            let value = match field {
                "metadata.namespace" => namespace,
                "spec.nodeName" => node,
                "status.hostIP" | "status.podIP" => "127.0.0.1",
                other => panic!("env {name}: fieldRef {other} not resolved by the walk"),
            };
            (name, value.to_owned())
        })
        .collect()
}

fn lease(name: &str, holder: &str, duration: i32) -> Value {
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": {"podward.io/node-lease": "true"}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                 "acquireTime": now, "renewTime": now}
    })
}

/// Renders the chart as `release` in `namespace`, runs the doc's status command in the prober
/// container's environment against the API stand-in (leases where the chart's daemons write
/// them), and returns (stdout, the lease paths the command read).
async fn walk_status(doc: &str, release: &str, namespace: &str) -> (String, Vec<String>) {
    walk_status_with(doc, release, namespace, json!({})).await
}

/// [`walk_status`] with chart values `values`.
async fn walk_status_with(
    doc: &str,
    release: &str,
    namespace: &str,
    values: Value,
) -> (String, Vec<String>) {
    let (_, exec_container, command) = status_command(doc);
    // Built first when stale (minutes): the leases below must be fresh when status reads them.
    let binary = tokio::task::spawn_blocking(|| podward_e2e::bin_path("podward-prober"))
        .await
        .expect("join");
    let r = Render::defaults()
        .release(release, namespace)
        .set(values)
        .run();
    let ds = r.get("DaemonSet");
    let c = container(ds, &exec_container);
    let sentinel = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the sentinel's Deployment");
    let args: Vec<String> = support::strs(&container(sentinel, "sentinel")["args"]);
    let election = args
        .iter()
        .find_map(|a| a.strip_prefix("--election-lease="))
        .expect("the sentinel's --election-lease")
        .to_owned();
    let lease_ns = args
        .iter()
        .find_map(|a| a.strip_prefix("--namespace="))
        .expect("the sentinel's --namespace")
        .to_owned();

    let api = MockApiServer::start().await.expect("API stand-in");
    api.create_lease(&lease_ns, lease("node-a", "node-a", 40))
        .expect("node lease");
    api.create_lease(&lease_ns, lease(&election, "sentinel-0_ab", 15))
        .expect("leader lease");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = api.write_kubeconfig(dir.path()).expect("kubeconfig");

    let mut cmd = Command::new(binary);
    cmd.args(&command[1..]).env_clear();
    for (k, v) in resolved_env(c, namespace, "node-a") {
        cmd.env(k, v);
    }
    // What the pod has besides the chart's env: in-cluster credentials (here: the stand-in's
    // kubeconfig) and the prober's socket (absent here: status says so and still prints the
    // leases).
    cmd.env("PODWARD_PROBER_KUBECONFIG", &kubeconfig)
        .env("PODWARD_PROBER_SOCKET", dir.path().join("prober.sock"));
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("join")
        .expect("run podward-prober status");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot reach the prober"),
        "status should say the prober is absent: {stderr}"
    );
    let reads: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/leases"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    (stdout, reads)
}

#[tokio::test]
async fn status_under_the_chart_reads_the_leases_where_the_chart_keeps_them() {
    let doc = read("docs/operations.md");
    let (release, namespace) = install_command(&doc);
    let (exec_ns, _, _) = status_command(&doc);
    assert_eq!(
        exec_ns, namespace,
        "the status command runs in another namespace than the install"
    );
    let (out, reads) = walk_status(&doc, &release, &namespace).await;
    let node_path =
        format!("GET /apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/node-a");
    let leader_path = format!(
        "GET /apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{release}-sentinel"
    );
    assert!(
        reads.contains(&node_path) && reads.contains(&leader_path),
        "status read {reads:?}, not {node_path} and {leader_path}\n{out}"
    );
    assert!(
        out.contains(&format!(
            "Node lease {namespace}/node-a: holder node-a, last renewal "
        )) && out.contains(": current (expires in "),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Sentinel leader lease {namespace}/{release}-sentinel: leader sentinel-0_ab"
        )),
        "{out}"
    );
}

/// A release named otherwise: the sentinel's lease is `<release>-podward-sentinel`, and
/// `status` reads that one, not the binary's default name.
#[tokio::test]
async fn status_under_a_release_named_otherwise_reads_that_releases_sentinel_lease() {
    let doc = read("docs/operations.md");
    let (out, reads) = walk_status(&doc, "edge", "platform").await;
    assert!(
        reads.contains(
            &"GET /apis/coordination.k8s.io/v1/namespaces/platform/leases/edge-podward-sentinel"
                .to_owned()
        ),
        "{reads:?}\n{out}"
    );
    assert!(
        out.contains("Sentinel leader lease platform/edge-podward-sentinel: leader sentinel-0_ab"),
        "{out}"
    );
}

/// `nodeLease.durationSeconds=0`: the probers keep no lease, and `status` says so instead of
/// reporting a lease that will never be written.
#[tokio::test]
async fn status_under_a_chart_without_node_leases_says_they_are_off() {
    let doc = read("docs/operations.md");
    let (out, reads) = walk_status_with(
        &doc,
        "podward",
        "podward-system",
        json!({"nodeLease": {"durationSeconds": 0}}),
    )
    .await;
    assert!(
        out.contains("Node lease podward-system/node-a: off"),
        "{out}"
    );
    assert!(reads.is_empty(), "{reads:?}");
}

// ---------------------------------------------------------------------------------------------
// Migrating one workload (§5).

/// Answers every probe with success (the walk is about what the prober runs, not how).
struct Succeeds;

impl ProbeRunner for Succeeds {
    fn run<'a>(
        &'a self,
        _ty: ProbeType,
        _spec: &'a ProbeSpec,
        _host_ip: IpAddr,
        _container: &'a ContainerInfo,
    ) -> Pin<Box<dyn Future<Output = Outcome> + Send + 'a>> {
        Box::pin(async { Outcome::Success(String::new()) })
    }
}

/// A stopper that must never be called: a migrated workload's probes all succeed.
struct NeverStops;

impl Stopper for NeverStops {
    fn stop_container(
        &self,
        container_id: String,
        _grace_seconds: i64,
    ) -> Pin<Box<dyn Future<Output = Result<(), StopError>> + Send + '_>> {
        panic!("the walk's pod was killed: {container_id}")
    }
}

/// The Warning events the prober records on the pod (reason, message).
#[derive(Default)]
struct Warnings(parking_lot::Mutex<Vec<(String, String)>>);

impl EventSink for Warnings {
    fn publish(&self, event: &Event) {
        if let EventKind::AnnotationWarning { reason, message } = &event.kind {
            self.0.lock().push(((*reason).to_owned(), message.clone()));
        }
    }
}

/// The pod template of a manifest of the guide (a Deployment's `spec.template`).
fn template(manifest: &Value) -> &Value {
    let t = &manifest["spec"]["template"];
    assert!(
        t.is_object(),
        "the guide's manifest is not a whole Deployment (kubectl apply needs one): {manifest}"
    );
    t
}

const FIELDS: [&str; 3] = ["livenessProbe", "readinessProbe", "startupProbe"];

/// What the prober makes of a pod of the guide.
struct Seen {
    /// Spec errors, as `container field: message`.
    errors: Vec<String>,
    /// The Warning events recorded on the pod (reason, message).
    warnings: Vec<(String, String)>,
    /// Probe workers started.
    workers: usize,
    /// Whether the prober sees the pod gated on its condition (so it writes it).
    gated: bool,
}

/// The guide's After pod through the prober.
async fn through_the_prober(after: &Value) -> Seen {
    let t = template(after);
    let pod_json = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "default", "uid": "uid-web-0",
            "labels": t["metadata"]["labels"].clone(),
            "annotations": t["metadata"]["annotations"].clone(),
        },
        "spec": t["spec"].clone(),
        "status": {"phase": "Running"}
    });
    let pod: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(pod_json.clone()).expect("the template is a pod spec");
    let api = podward_prober::kubernetes::convert::api_pod(&pod, "podward.io/ready")
        .expect("the API's view of the pod");
    let gated = api.gated;
    let annotation = t["metadata"]["annotations"]["podward.io/probes"]
        .as_str()
        .map(str::to_owned);

    let clock = Clock::system();
    let warnings = Arc::new(Warnings::default());
    let events = Events::new(vec![warnings.clone() as Arc<dyn EventSink>]);
    let metrics = Arc::new(Metrics::unregistered().expect("metrics"));
    let killer = Killer::new(
        Arc::new(NeverStops),
        None,
        metrics.clone(),
        events.clone(),
        clock,
    );
    let manager = Manager::new(
        Arc::new(Succeeds),
        killer,
        events,
        metrics,
        clock,
        Settings::default(),
    );
    let now = podward_api::time::now_ns();
    let mut containers = BTreeMap::new();
    for (i, c) in t["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .enumerate()
    {
        let ports: Vec<ContainerPort> = c["ports"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|p| ContainerPort {
                name: p["name"].as_str().unwrap_or_default().to_owned(),
                container_port: p["containerPort"].as_i64().expect("containerPort") as i32,
                protocol: p["protocol"].as_str().unwrap_or("TCP").to_owned(),
            })
            .collect();
        let id = format!("c{i}");
        containers.insert(
            id.clone(),
            Arc::new(ContainerInfo {
                id: id.as_str().into(),
                name: c["name"].as_str().expect("name").to_owned(),
                attempt: 0,
                state: RunState::Running,
                created_at_ns: now,
                started_at_ns: now,
                ports: ports.into(),
                env: Vec::new().into(),
                pod_grace_seconds: None,
                stop_requested_at_ns: 0,
            }),
        );
    }
    manager.set_api_pod(api);
    manager.update_pod(PodInfo {
        uid: "uid-web-0".into(),
        name: "web-0".into(),
        namespace: "default".into(),
        sandbox_id: "sandbox-web-0".into(),
        sandbox_created_at_ns: now,
        ip: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        probes_annotation: annotation,
        stop_requested_at_ns: 0,
        containers,
        api: None,
    });
    let status = manager.view().status(Some("uid-web-0"));
    let errors: Vec<String> = status
        .pods
        .iter()
        .flat_map(|p| p.spec_errors.iter())
        .map(|e| format!("{} {}: {}", e.container, e.field, e.message))
        .collect();
    let workers = manager.registry().worker_count();
    manager.stop_all();
    let warnings = warnings.0.lock().clone();
    Seen {
        errors,
        warnings,
        workers,
        gated,
    }
}

#[tokio::test]
async fn migrating_one_workload_as_the_guide_says_leaves_no_spec_error_and_gates_the_pod() {
    let doc = read("docs/operations.md");
    let guide = md_section(&doc, "## 5. Migrating probes");
    let before = yaml_to_json(&block_after(&guide, "Before (", "yaml"));
    let after = yaml_to_json(&block_after(&guide, "After (", "yaml"));
    let (bt, at) = (template(&before), template(&after));

    // Every probe moved as it was: out of the container, into the annotation, same fields.
    let annotation: Value = serde_json::from_str(
        at["metadata"]["annotations"]["podward.io/probes"]
            .as_str()
            .expect("After has the podward.io/probes annotation"),
    )
    .expect("the annotation is JSON");
    let mut moved = 0;
    for c in bt["spec"]["containers"].as_array().expect("containers") {
        let name = c["name"].as_str().expect("name");
        let now = at["spec"]["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .find(|a| a["name"] == name)
            .unwrap_or_else(|| panic!("After lost container {name}"));
        for f in FIELDS {
            if c[f].is_null() {
                continue;
            }
            assert_eq!(
                annotation[name][f], c[f],
                "{name}.{f}: not moved into the annotation as it was"
            );
            assert!(
                now[f].is_null(),
                "{name}.{f}: still in the container (ProbeDeclaredTwice: kubelet runs it, podward does not)"
            );
            moved += 1;
        }
        assert_eq!(now["ports"], c["ports"], "{name}: ports kept");
    }
    assert_eq!(moved, 4, "the guide's example has four probes");

    let seen = through_the_prober(&after).await;
    assert!(
        seen.errors.is_empty() && seen.warnings.is_empty(),
        "the prober reports spec errors for the guide's After: {:?} {:?}",
        seen.errors,
        seen.warnings
    );
    assert_eq!(seen.workers, 4, "the prober runs all four probes");
    assert!(
        seen.gated,
        "After has no readinessGates the prober writes: no Service follows the readiness probe"
    );
}

/// The walk catches what the issue found: keeping the spec probes beside the annotation, and
/// an After without the gate, are both spec errors through the prober.
#[tokio::test]
async fn the_migration_walk_catches_probes_kept_in_both_places_and_a_missing_gate() {
    let doc = read("docs/operations.md");
    let guide = md_section(&doc, "## 5. Migrating probes");
    let before = yaml_to_json(&block_after(&guide, "Before (", "yaml"));
    let after = yaml_to_json(&block_after(&guide, "After (", "yaml"));

    let mut both = after.clone();
    both["spec"]["template"]["spec"]["containers"] =
        before["spec"]["template"]["spec"]["containers"].clone();
    let seen = through_the_prober(&both).await;
    assert!(
        seen.warnings.iter().any(|(r, _)| r == "ProbeDeclaredTwice") && !seen.errors.is_empty(),
        "{:?} {:?}",
        seen.errors,
        seen.warnings
    );

    let mut ungated = after;
    ungated["spec"]["template"]["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("readinessGates");
    let seen = through_the_prober(&ungated).await;
    assert!(
        !seen.gated
            && seen
                .warnings
                .iter()
                .any(|(r, _)| r == "ReadinessGateMissing")
            && seen.errors.iter().any(|e| e.contains("readinessProbe")),
        "{:?} {:?}",
        seen.errors,
        seen.warnings
    );
}

// ---------------------------------------------------------------------------------------------
// Uninstall (§3.2, each node).

fn uninstall_walk(docs: &Path) -> (bool, String) {
    let out = Command::new("python3")
        .arg(repo().join("deploy/tests/uninstall_walk.py"))
        .arg("--docs")
        .arg(docs)
        .output()
        .expect("run python3 deploy/tests/uninstall_walk.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn docs_with(from: &str, to: &str) -> tempfile::NamedTempFile {
    let doc = read("docs/operations.md");
    assert!(doc.contains(from), "docs no longer contain {from:?}");
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), doc.replacen(from, to, 1)).expect("write docs copy");
    file
}

#[test]
fn uninstalling_a_node_as_documented_leaves_kubelet_on_containerd_and_nothing_of_the_shim() {
    let (ok, out) = uninstall_walk(&repo().join("docs/operations.md"));
    assert!(ok, "{out}");
    assert!(out.contains("3 layout(s), 0 failure(s)"), "{out}");
    for layout in ["v1.30", "v1.34", "rpm-extra-args"] {
        assert!(
            out.contains(&format!(
                "{layout}: kubelet unix:///run/podward/cri.sock -> unix:///run/containerd/containerd.sock"
            )),
            "{layout}:\n{out}"
        );
    }
}

#[test]
fn the_uninstall_walk_fails_docs_that_stop_the_shim_before_kubelet_leaves_it() {
    let restart = "systemctl restart kubelet\n";
    let doc = read("docs/operations.md");
    let block_start = doc
        .find("<!-- walk: uninstall-node")
        .expect("the uninstall-node block");
    let disable_line = doc[block_start..]
        .lines()
        .find(|l| l.contains("systemctl disable --now podward-shim"))
        .expect("the shim's units stopped")
        .to_owned();
    let restart_line = doc[block_start..]
        .lines()
        .find(|l| l.ends_with(restart.trim_end()))
        .expect("kubelet restarted")
        .to_owned();
    let swapped = docs_with(
        &format!("{restart_line}\n{disable_line}\n"),
        &format!("{disable_line}\n{restart_line}\n"),
    );
    let (ok, out) = uninstall_walk(swapped.path());
    assert!(!ok, "{out}");
    assert!(
        out.contains("podward-shim.socket while kubelet runs on unix:///run/podward/cri.sock"),
        "{out}"
    );

    let kept = docs_with(&format!("{disable_line}\n"), "");
    let (ok, out) = uninstall_walk(kept.path());
    assert!(!ok, "{out}");
    assert!(out.contains("not disabled and stopped"), "{out}");
}
