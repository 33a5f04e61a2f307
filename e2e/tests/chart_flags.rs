//! The Helm chart against the real daemons: every template is rendered by Helm's own engine
//! (`charts/tests/render.py`, helm-sdkpy) with the default values and with every option on, and the
//! rendered DaemonSet is checked against what the built binaries accept:
//! - every `--flag` in a container's args appears in that binary's `--help`;
//! - the binary's own clap parser accepts the rendered args (`<bin> <args...> --help` exits 0, and
//!   clap parses every value before it reaches `--help`);
//! - no flag is given twice (clap rejects that at start-up);
//! - the mounts, security settings and probes the chart promises (docs/operations.md).
//!
//! Also runs `helm lint --strict` (`charts/tests/lint.py`). Needs `python3` with `helm-sdkpy`
//! (`pip install --ignore-requires-python helm-sdkpy`) and PyYAML.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[path = "support/chart.rs"]
mod support;
use support::{Render, container, repo, strs};

/// Renders the chart with `values_file` (None = defaults) and returns the objects and NOTES.txt.
fn render(values_file: Option<&str>) -> (Vec<Value>, String) {
    let mut r = Render::defaults();
    if let Some(v) = values_file {
        r = r.values(v);
    }
    let out = r.run();
    (out.objects, out.notes)
}

fn find<'a>(objects: &'a [Value], kind: &str) -> Option<&'a Value> {
    objects.iter().find(|o| o["kind"] == kind)
}

fn kinds(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .filter_map(|o| o["kind"].as_str().map(str::to_owned))
        .collect()
}

/// `--flag` tokens of a help text.
fn flags_in(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|t| t.starts_with("--") && t.len() > 2)
        .map(str::to_owned)
        .collect()
}

/// `--flag` of an argument (`--flag=value` or `--flag`), if it is one.
fn flag_of(arg: &str) -> Option<&str> {
    arg.starts_with("--")
        .then(|| arg.split('=').next().unwrap_or(arg))
}

/// What a container runs: the binary to ask for `--help`, and its help text.
fn help_of(container: &Value) -> (String, String) {
    let command = strs(&container["command"]);
    let (what, out) = match command.as_slice() {
        [sh, script] if sh == "/bin/sh" && script.ends_with("install-shim.sh") => {
            let path = repo().join("deploy/install-shim.sh");
            let out = Command::new("sh")
                .arg(&path)
                .arg("--help")
                .output()
                .expect("install-shim.sh --help");
            ("install-shim.sh".to_owned(), out)
        }
        [bin] => {
            let name = Path::new(bin)
                .file_name()
                .and_then(|n| n.to_str())
                .expect("binary name")
                .to_owned();
            let path = podward_e2e::bin_path(&name);
            let out = Command::new(&path)
                .arg("--help")
                .output()
                .unwrap_or_else(|e| panic!("run {} --help: {e}", path.display()));
            (name, out)
        }
        other => panic!("unexpected container command {other:?}"),
    };
    assert!(
        out.status.success(),
        "{what} --help failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (what, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every container of the DaemonSet (init containers first).
fn containers(ds: &Value) -> Vec<Value> {
    let spec = &ds["spec"]["template"]["spec"];
    let mut all: Vec<Value> = spec["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    all.extend(spec["containers"].as_array().cloned().unwrap_or_default());
    all
}

/// Replaces kubelet's `$(VAR)` expansions with what kubelet would put there (the node IP).
fn expand(arg: &str) -> String {
    arg.replace("$(PODWARD_HOST_IP)", "10.1.2.3")
}

/// The core check: args vs `--help`, duplicates, and the binary's own parser.
fn check_args_against_binaries(ds: &Value) {
    let mut checked = 0;
    for c in containers(ds) {
        let name = c["name"].as_str().expect("container name").to_owned();
        let (bin, help) = help_of(&c);
        let known = flags_in(&help);
        let args = strs(&c["args"]);
        let mut seen = BTreeMap::new();
        for arg in &args {
            let Some(flag) = flag_of(arg) else { continue };
            assert!(
                known.contains(flag),
                "container {name}: {flag} (from {arg:?}) is not in `{bin} --help`; it lists {known:?}"
            );
            *seen.entry(flag.to_owned()).or_insert(0) += 1;
            checked += 1;
        }
        let dups: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            dups.is_empty(),
            "container {name}: flags given twice {dups:?}"
        );
        // Environment variables that configure the daemon must be ones it reads.
        for env in c["env"].as_array().cloned().unwrap_or_default() {
            let var = env["name"].as_str().unwrap_or_default();
            if var.starts_with("PODWARD_") && var != "PODWARD_HOST_IP" {
                assert!(
                    help.contains(var),
                    "container {name}: env {var} is not read by {bin}"
                );
            }
        }
        if bin.starts_with("podward-") {
            // clap parses (and validates) every value before it acts on the trailing --help.
            let path = podward_e2e::bin_path(&bin);
            let out = Command::new(&path)
                .args(args.iter().map(|a| expand(a)))
                .arg("--help")
                .output()
                .expect("run binary with the rendered args");
            assert!(
                out.status.success(),
                "container {name}: {bin} rejects the rendered args {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert!(
        checked >= 20,
        "only {checked} flags checked: the render lost the args"
    );
}

fn volume_host_paths(ds: &Value) -> BTreeMap<String, String> {
    ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .filter_map(|v| {
            Some((
                v["name"].as_str()?.to_owned(),
                v["hostPath"]["path"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

fn arg_value(c: &Value, flag: &str) -> Option<String> {
    let prefix = format!("{flag}=");
    strs(&c["args"])
        .iter()
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
}

/// mountPath -> (host path, mountPropagation, readOnly)
fn mounts(ds: &Value, c: &Value) -> BTreeMap<String, (String, String, bool)> {
    let host = volume_host_paths(ds);
    c["volumeMounts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        // The API token is no host path (check_token_only_in_prober checks it).
        .filter(|m| m["name"] != "prober-api-token")
        .map(|m| {
            let vol = m["name"].as_str().expect("mount name");
            let hp = host
                .get(vol)
                .unwrap_or_else(|| panic!("mount {vol} has no hostPath volume"))
                .clone();
            let prop = m["mountPropagation"].as_str().unwrap_or("None").to_owned();
            (
                m["mountPath"].as_str().expect("mountPath").to_owned(),
                (hp, prop, m["readOnly"] == true),
            )
        })
        .collect()
}

fn check_probes(c: &Value, loopback: bool) {
    let port_name = c["ports"][0]["name"].as_str().expect("admin port name");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{}: {probe}", c["name"]);
        assert_eq!(get["port"], port_name, "{}: {probe} port", c["name"]);
        if loopback {
            assert_eq!(
                get["host"], "127.0.0.1",
                "{}: admin binds loopback, probe must too",
                c["name"]
            );
        } else {
            assert!(
                get["host"].is_null(),
                "{}: probe should target the pod (= node) IP",
                c["name"]
            );
        }
    }
}

#[test]
fn chart_defaults_render_match_the_daemons_and_keep_their_promises() {
    let (objects, notes) = render(None);
    assert_eq!(
        kinds(&objects),
        BTreeSet::from(
            [
                "ClusterRole",
                "ClusterRoleBinding",
                "DaemonSet",
                // The sentinel and the node lease (chart_sentinel.rs checks them).
                "Deployment",
                // podward's own API priority level (charts/tests/policies.py checks them).
                "FlowSchema",
                "PriorityLevelConfiguration",
                // The sentinel's (chart_sentinel.rs).
                "PodDisruptionBudget",
                "Role",
                "RoleBinding",
                "ServiceAccount",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding"
            ]
            .map(str::to_owned)
        )
    );
    let ds = find(&objects, "DaemonSet").expect("DaemonSet");
    check_args_against_binaries(ds);

    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(
        pod["hostPID"], true,
        "the housekeeper signals PIDs read from cgroup.procs"
    );
    check_token_only_in_prober(ds);
    let prober = container(ds, "prober");
    assert_eq!(
        arg_value(prober, "--node-name").as_deref(),
        Some("$(NODE_NAME)")
    );
    let node_env = prober["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "NODE_NAME")
        .expect("NODE_NAME");
    assert_eq!(
        node_env["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName",
        "the node name from the downward API"
    );
    assert_eq!(
        arg_value(prober, "--readiness-gate-condition").as_deref(),
        Some("podward.io/ready")
    );
    // The daemon's own defaults, said explicitly: a probe naming a host cannot reach the node's
    // loopback or the cloud metadata address unless the operator chooses so.
    assert_eq!(
        arg_value(prober, "--probe-host-policy").as_deref(),
        Some("deny-local")
    );
    assert_eq!(arg_value(prober, "--exec-standby").as_deref(), Some("true"));
    check_prober_rbac(&objects);
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert!(
        pod["tolerations"]
            .as_array()
            .expect("tolerations")
            .iter()
            .any(|t| t["operator"] == "Exists")
    );
    assert!(
        pod["initContainers"].is_null(),
        "the shim installer is opt-in"
    );
    let names: Vec<_> = pod["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(names, vec!["prober", "housekeeper"]);
    assert!(
        !volume_host_paths(ds)
            .values()
            .any(|p| p == "/proc" || p == "/var/lib/kubelet" || p == "/"),
        "no /proc, whole kubelet root or host root mount: {:?}",
        volume_host_paths(ds)
    );

    let prober = container(ds, "prober");
    let pm = mounts(ds, prober);
    assert_eq!(
        pm.keys().cloned().collect::<Vec<_>>(),
        vec!["/run/containerd", "/run/podward"]
    );
    assert!(
        pm["/run/containerd"].2,
        "containerd's socket dir is read-only for the prober"
    );
    assert_eq!(
        prober["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    assert!(prober["securityContext"]["capabilities"]["add"].is_null());
    assert!(prober["securityContext"]["privileged"].is_null());
    assert_eq!(
        arg_value(prober, "--admin-addr").as_deref(),
        Some("127.0.0.1:9642")
    );
    assert_eq!(
        arg_value(prober, "--node-ip").as_deref(),
        Some("$(PODWARD_HOST_IP)")
    );
    check_probes(prober, true);

    let hk = container(ds, "housekeeper");
    assert_eq!(
        arg_value(hk, "--dry-run").as_deref(),
        Some("true"),
        "dry run on a first install"
    );
    assert_eq!(
        arg_value(hk, "--admin-addr").as_deref(),
        Some("127.0.0.1:9643")
    );
    let hm = mounts(ds, hk);
    let pods_dir = format!(
        "{}/pods",
        arg_value(hk, "--kubelet-root").expect("--kubelet-root")
    );
    let (host, prop, _) = &hm[&pods_dir];
    assert_eq!(
        (host.as_str(), prop.as_str()),
        ("/var/lib/kubelet/pods", "HostToContainer")
    );
    let cg = arg_value(hk, "--cgroup-root").expect("--cgroup-root");
    assert_eq!(hm[&cg].0, "/sys/fs/cgroup");
    assert_eq!(hm[&cg].1, "HostToContainer");
    // The cgroup driver is decided from the node (docs/housekeeper.md); for the systemd driver the
    // host's system bus directory is mounted read-only and the flag points at its socket.
    assert_eq!(arg_value(hk, "--cgroup-driver").as_deref(), Some("auto"));
    let bus = arg_value(hk, "--systemd-bus").expect("--systemd-bus");
    let bus_dir = bus
        .strip_prefix("unix:path=")
        .and_then(|p| p.strip_suffix("/system_bus_socket"))
        .unwrap_or_else(|| panic!("a socket path in the mounted directory: {bus}"));
    assert_eq!(
        hm[bus_dir],
        ("/run/dbus".to_owned(), "None".to_owned(), true)
    );
    let logs = arg_value(hk, "--log-root").expect("--log-root");
    assert_eq!(
        hm[&logs].0, "/var/log/pods",
        "log dirs mounted at the path the daemon walks"
    );
    assert_eq!(
        arg_value(hk, "--mountinfo").as_deref(),
        Some("/proc/1/mountinfo")
    );
    let caps = strs(&hk["securityContext"]["capabilities"]["add"]);
    assert!(
        caps.contains(&"KILL".to_owned()) && !caps.contains(&"SYS_ADMIN".to_owned()),
        "{caps:?}"
    );
    check_probes(hk, true);
    for c in [prober, hk] {
        assert!(
            c["resources"]["requests"]["cpu"].is_string(),
            "{}: cpu request",
            c["name"]
        );
        assert!(
            c["resources"]["limits"]["memory"].is_string(),
            "{}: memory limit",
            c["name"]
        );
    }
    assert!(
        notes.contains("DRY RUN"),
        "NOTES must say the housekeeper is in dry run:\n{notes}"
    );
    assert!(
        notes.contains("podward-housekeeper plan"),
        "NOTES must say how to read a plan"
    );
}

/// RBAC: exactly what the prober's Kubernetes API side uses (pods get/list/watch, pods/status
/// patch, events create/patch), no wildcards, nothing else.
/// The prober uses the Kubernetes API by default (readiness gate, events, pod spec): its
/// container, and no other, gets the service-account token (a projected, pod-bound one).
fn check_token_only_in_prober(ds: &Value) {
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(
        pod["automountServiceAccountToken"], false,
        "no token in every container"
    );
    let token = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "prober-api-token")
        .expect("the token volume");
    let sources = token["projected"]["sources"].as_array().expect("sources");
    assert!(
        sources
            .iter()
            .any(|s| s["serviceAccountToken"]["path"] == "token")
    );
    assert!(
        sources
            .iter()
            .any(|s| s["configMap"]["name"] == "kube-root-ca.crt")
    );
    let all: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| pod[*k].as_array().into_iter().flatten())
        .collect();
    let with_token: Vec<&str> = all
        .iter()
        .filter(|c| {
            c["volumeMounts"].as_array().into_iter().flatten().any(|m| {
                m["name"] == "prober-api-token"
                    || m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
            })
        })
        .map(|c| c["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(with_token, ["prober"], "the token goes to the prober alone");
}

fn check_prober_rbac(objects: &[Value]) {
    let role = objects
        .iter()
        .find(|o| {
            o["kind"] == "ClusterRole"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-prober"))
        })
        .expect("the prober's ClusterRole");
    let mut got: Vec<(String, String, Vec<String>)> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .flat_map(|rule| {
            let groups = strs(&rule["apiGroups"]);
            let verbs = strs(&rule["verbs"]);
            strs(&rule["resources"]).into_iter().flat_map(move |r| {
                let verbs = verbs.clone();
                groups
                    .clone()
                    .into_iter()
                    .map(move |g| (g, r.clone(), verbs.clone()))
            })
        })
        .collect();
    got.sort();
    let want = |g: &str, r: &str, v: &[&str]| {
        (
            g.to_owned(),
            r.to_owned(),
            v.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        got,
        [
            want("", "events", &["create", "patch"]),
            want("", "nodes", &["get"]),
            want("", "pods", &["get", "list", "watch"]),
            want("", "pods/status", &["patch"]),
        ]
    );
    let k = kinds(objects);
    // Namespaced Roles only for the leases (the node lease, the sentinel's), never a duplicate
    // of the ClusterRole's rules.
    for r in objects.iter().filter(|o| o["kind"] == "Role") {
        for rule in r["rules"].as_array().expect("rules") {
            assert_eq!(strs(&rule["resources"]), ["leases"], "{r}");
        }
    }
    assert!(k.contains("ValidatingAdmissionPolicy"), "own node only");
    let of = |kind: &str| -> Vec<&Value> { objects.iter().filter(|o| o["kind"] == kind).collect() };
    let messages: Vec<String> = of("ValidatingAdmissionPolicy")
        .iter()
        .flat_map(|p| p["spec"]["validations"].as_array().into_iter().flatten())
        .map(|v| {
            v["message"]
                .as_str()
                .or(v["messageExpression"].as_str())
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    for want in [
        "only its own condition in a pod's status.conditions",
        "(not status.phase)",
        "(not status.containerStatuses)",
        "(not metadata.labels)",
        "lacks ",
        "declared both in a container's spec and in podward.io/probes",
    ] {
        assert!(
            messages.iter().any(|m| m.contains(want)),
            "{want:?} not among {messages:?}"
        );
    }
    let actions: Vec<Value> = of("ValidatingAdmissionPolicyBinding")
        .iter()
        .map(|b| b["spec"]["validationActions"].clone())
        .collect();
    assert!(
        actions.contains(&serde_json::json!(["Deny"]))
            && actions.contains(&serde_json::json!(["Warn"])),
        "the own-node policy denies, the annotation check warns at creation: {actions:?}"
    );
}

#[test]
fn chart_all_options_render_match_the_daemons() {
    let (objects, notes) = render(Some("charts/tests/values-all-on.yaml"));
    let k = kinds(&objects);
    for want in [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
        "PrometheusRule",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(k.contains(want), "{want} missing from {k:?}");
    }
    let ds = find(&objects, "DaemonSet").expect("DaemonSet");
    check_args_against_binaries(ds);
    let pod = &ds["spec"]["template"]["spec"];
    check_token_only_in_prober(ds);
    check_prober_rbac(&objects);

    // The installer writes only the two host directories it mounts.
    let init = &pod["initContainers"][0];
    assert_eq!(init["name"], "shim-installer");
    let im = mounts(ds, init);
    assert_eq!(im["/host/usr/local/bin"].0, "/usr/local/bin");
    assert_eq!(im["/host/etc/systemd/system"].0, "/etc/systemd/system");
    assert_eq!(im.len(), 2);
    assert!(
        !strs(&init["args"]).iter().any(|a| a.contains("kubelet")),
        "the installer never touches kubelet"
    );

    let hk = container(ds, "housekeeper");
    assert_eq!(arg_value(hk, "--dry-run").as_deref(), Some("false"));
    assert_eq!(
        arg_value(hk, "--remove-exited-containers").as_deref(),
        Some("true")
    );
    assert_eq!(arg_value(hk, "--cgroup-driver").as_deref(), Some("systemd"));
    assert_eq!(hk["securityContext"]["privileged"], true);
    let hm = mounts(ds, hk);
    assert_eq!(
        hm["/var/lib/kubelet-alt/pods"].0,
        "/var/lib/kubelet-alt/pods"
    );
    assert_eq!(hm["/var/log/pods-alt"].0, "/var/log/pods-alt");
    let prober = container(ds, "prober");
    assert_eq!(arg_value(prober, "--node-ip").as_deref(), Some("10.0.0.7"));
    assert_eq!(
        arg_value(prober, "--exec-standby").as_deref(),
        Some("false")
    );
    assert_eq!(
        arg_value(prober, "--probe-host-policy").as_deref(),
        Some("allow")
    );
    for c in [prober, hk] {
        let addr = arg_value(c, "--admin-addr").expect("--admin-addr");
        assert!(
            addr.starts_with("$(PODWARD_HOST_IP):"),
            "scraped admin binds the node IP: {addr}"
        );
        let env = c["env"].as_array().expect("env");
        assert!(env.iter().any(|e| e["name"] == "PODWARD_HOST_IP"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"));
        check_probes(c, false);
    }

    // Every ServiceMonitor endpoint names a port of the Service it selects.
    let svc = find(&objects, "Service").expect("Service");
    let ports: BTreeSet<_> = svc["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    let sm = find(&objects, "ServiceMonitor").expect("ServiceMonitor");
    for ep in sm["spec"]["endpoints"].as_array().expect("endpoints") {
        let port = ep["port"].as_str().expect("endpoint port");
        assert!(
            ports.contains(port),
            "ServiceMonitor port {port} not in Service ports {ports:?}"
        );
    }
    assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
    assert!(
        notes.contains("ACTS on its plan"),
        "NOTES must warn when dry run is off:\n{notes}"
    );
}

#[test]
fn flag_check_rejects_what_the_binaries_do_not_know() {
    // The checks above would be vacuous if help parsing found every token or clap ignored values.
    let bin = podward_e2e::bin_path("podward-housekeeper");
    let help = String::from_utf8_lossy(
        &Command::new(&bin)
            .arg("--help")
            .output()
            .expect("help")
            .stdout,
    )
    .into_owned();
    let known = flags_in(&help);
    assert!(
        known.contains("--dry-run") && !known.contains("--definitely-not-a-flag"),
        "{known:?}"
    );
    let bad = Command::new(&bin)
        .args(["--admin-addr=not-an-address", "--help"])
        .output()
        .expect("run");
    assert!(
        !bad.status.success(),
        "clap must reject a bad value before --help"
    );
    let twice = Command::new(&bin)
        .args(["--interval=1s", "--interval=2s", "--help"])
        .output()
        .expect("run");
    assert!(
        !twice.status.success(),
        "clap must reject a flag given twice"
    );
    let plan = Command::new(&bin)
        .args(["plan", "--help"])
        .output()
        .expect("run");
    assert!(
        plan.status.success(),
        "NOTES.txt and the docs tell operators to run `plan`"
    );
}

#[test]
fn helm_lint_strict_passes() {
    let out = Command::new("python3")
        .arg(repo().join("charts/tests/lint.py"))
        .output()
        .expect("run python3 charts/tests/lint.py");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helm lint --strict failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("0 at WARNING or above"), "{text}");
}
