//! The operator's path through the chart, rendered by Helm's own engine (a real `helm install`
//! against an API stand-in, `charts/tests/render.py`) and checked against docs/operations.md:
//! images, Kubernetes version, Pod Security, seccomp, sizing, architectures, upgrades, and the
//! chart's references into the docs.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{Value, json};

#[path = "support/chart.rs"]
mod support;
use support::{REGISTRY, Render, container, md_section, md_table, read, repo, strs};

/// Capabilities Pod Security `baseline` allows to be added (pod-security-admission,
/// `capabilities_baseline`).
const BASELINE_CAPS: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Why a pod spec is not admissible under Pod Security `baseline`: one entry per violation, named
/// by the field (the checks of pod-security-admission's baseline policy that this chart can hit).
fn baseline_violations(pod: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[field] == true {
            out.insert(field.to_owned());
        }
    }
    if pod["volumes"]
        .as_array()
        .is_some_and(|vs| vs.iter().any(|v| v["hostPath"].is_object()))
    {
        out.insert("hostPath".to_owned());
    }
    for c in all_containers(pod) {
        if c["securityContext"]["privileged"] == true {
            out.insert("privileged".to_owned());
        }
        for cap in strs(&c["securityContext"]["capabilities"]["add"]) {
            if !BASELINE_CAPS.contains(&cap.as_str()) {
                out.insert(cap);
            }
        }
    }
    out
}

/// The pod's containers and init containers.
fn all_containers(pod: &Value) -> Vec<Value> {
    ["containers", "initContainers"]
        .iter()
        .flat_map(|k| pod[*k].as_array().cloned().unwrap_or_default())
        .collect()
}

fn pod_spec(r: &support::Rendered) -> Value {
    r.get("DaemonSet")["spec"]["template"]["spec"].clone()
}

/// `"512Mi"` etc. in bytes.
fn quantity(q: &str) -> f64 {
    let (num, unit) = q.split_at(q.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(q.len()));
    let n: f64 = num
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("quantity {q}"));
    n * match unit.trim() {
        "Ki" | "KiB" => 1024.0,
        "Mi" | "MiB" => 1024.0 * 1024.0,
        "Gi" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "" => 1.0,
        other => panic!("unit {other} in {q}"),
    }
}

#[test]
fn chart_needs_a_registry_and_pulls_the_images_build_images_names() {
    let err = Render::defaults()
        .without_registry()
        .try_run()
        .err()
        .expect("an install without image.registry must fail");
    assert!(
        err.contains("image.registry is required") && err.contains("deploy/build-images.sh"),
        "{err}"
    );

    let r = Render::defaults()
        .values("charts/tests/values-all-on.yaml")
        .run();
    let pod = pod_spec(&r);
    let mut refs: BTreeSet<String> = ["prober", "housekeeper"]
        .iter()
        .map(|n| {
            container(r.get("DaemonSet"), n)["image"]
                .as_str()
                .expect("image")
                .to_owned()
        })
        .collect();
    refs.insert(
        pod["initContainers"][0]["image"]
            .as_str()
            .expect("installer image")
            .to_owned(),
    );
    let out = Command::new(repo().join("deploy/build-images.sh"))
        .arg(format!("--registry={REGISTRY}"))
        .arg("--print-names")
        .output()
        .expect("deploy/build-images.sh --print-names");
    assert!(out.status.success());
    let built: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert_eq!(
        refs, built,
        "the chart pulls exactly what build-images.sh builds"
    );
    let chart = read("charts/podward/Chart.yaml");
    assert!(
        built.iter().all(|b| chart.contains(&format!(
            "appVersion: \"{}\"",
            b.rsplit(':').next().unwrap_or_default()
        ))),
        "images are tagged with the chart's appVersion: {built:?}"
    );
    // The image names are the ones the docs list.
    let docs = md_section(
        &read("docs/operations.md"),
        "### 1.1 Build and push the images",
    );
    for b in &built {
        let name = b.trim_start_matches(REGISTRY).trim_start_matches('/');
        let name = name.split(':').next().unwrap_or_default();
        assert!(
            docs.contains(&format!("`<registry>/{name}:<tag>`")),
            "{name} missing from the docs' image table"
        );
    }
}

#[test]
fn kube_version_floor_covers_the_admission_policy() {
    let chart = read("charts/podward/Chart.yaml");
    let floor = chart
        .lines()
        .find_map(|l| l.strip_prefix("kubeVersion:"))
        .expect("kubeVersion in Chart.yaml")
        .trim()
        .trim_matches('"')
        .trim_start_matches(">=")
        .to_owned();
    let mut parts = floor.split(['.', '-']);
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).expect("major");
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).expect("minor");

    let r = Render::defaults()
        .values("charts/tests/values-all-on.yaml")
        .run();
    let vap = r.get("ValidatingAdmissionPolicy");
    assert_eq!(vap["apiVersion"], "admissionregistration.k8s.io/v1");
    assert!(
        (major, minor) >= (1, 30),
        "ValidatingAdmissionPolicy v1 is GA in 1.30, the chart allows {floor}"
    );
    let err = Render::defaults()
        .kube_version("1.29.9")
        .try_run()
        .err()
        .expect("Helm must refuse a 1.29 cluster");
    assert!(err.contains("kubeVersion"), "{err}");
    Render::defaults().kube_version("1.30.0").run();
}

#[test]
fn pod_security_privileged_is_needed_checked_and_documented() {
    // What the rendered pod really needs, from the pod itself.
    let r = Render::defaults().run();
    let violations = baseline_violations(&pod_spec(&r));
    for want in ["hostNetwork", "hostPID", "hostPath"] {
        assert!(violations.contains(want), "{violations:?}");
    }
    let docs = read("docs/operations.md");
    let psa = md_section(&docs, "### 1.3 Pod Security");
    for v in &violations {
        assert!(
            psa.contains(v.as_str()),
            "docs, Pod Security: the pod needs privileged because of {v}, which it does not name"
        );
    }
    // The real reach of the pod, stated plainly.
    for fact in ["Secret", "service-account token", "root on every node"] {
        assert!(psa.contains(fact), "docs, Pod Security, must say: {fact}");
    }

    // The chart refuses a namespace whose enforced level would reject every pod.
    for level in ["baseline", "restricted"] {
        let err = Render::defaults()
            .namespace_labels(json!({"pod-security.kubernetes.io/enforce": level}))
            .try_run()
            .err()
            .unwrap_or_else(|| panic!("install into a {level} namespace must fail"));
        assert!(
            err.contains(&format!("\"{level}\""))
                && err.contains("kubectl label namespace podward-system pod-security.kubernetes.io/enforce=privileged"),
            "{err}"
        );
    }
    for labels in [
        json!({"pod-security.kubernetes.io/enforce": "privileged"}),
        json!({"kubernetes.io/metadata.name": "podward-system"}),
    ] {
        Render::defaults().namespace_labels(labels).run();
    }

    // The docs label the namespace before installing, and NOTES say how to fix it.
    let label =
        "kubectl label namespace podward-system pod-security.kubernetes.io/enforce=privileged";
    let at_label = docs.find(label).expect("docs label the namespace");
    let at_install = docs
        .find("helm install podward charts/podward -n podward-system")
        .expect("docs install into podward-system");
    assert!(
        at_label < at_install,
        "label the namespace before helm install"
    );
    assert!(r.notes.contains(label), "NOTES:\n{}", r.notes);
}

#[test]
fn pods_run_with_the_runtime_default_seccomp_profile() {
    for r in [
        Render::defaults().run(),
        Render::defaults()
            .values("charts/tests/values-all-on.yaml")
            .run(),
    ] {
        let pod = pod_spec(&r);
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        for c in all_containers(&pod) {
            assert!(
                c["securityContext"]["seccompProfile"].is_null(),
                "{}: must not override the pod's profile",
                c["name"]
            );
        }
    }
    let psa = md_section(&read("docs/operations.md"), "### 1.3 Pod Security");
    assert!(psa.contains("RuntimeDefault"));
}

#[test]
fn memory_limits_cover_the_documented_rss() {
    let r = Render::defaults().run();
    let ds = r.get("DaemonSet");
    let sizing = md_section(&read("docs/operations.md"), "## 8. Sizing");
    let rows = md_table(&sizing);
    assert!(rows.len() >= 3, "sizing table not read: {rows:?}");
    // The figures come from the table of current figures at the top of docs/benchmarks.md (the
    // newest measurement of each), which the sizing table cites by row.
    let benchmarks = md_section(&read("docs/benchmarks.md"), "## Current figures");
    let current = md_table(&benchmarks);
    let mut covered = BTreeSet::new();
    for row in rows {
        let (name, rss, req_lim) = (&row[0], &row[2], &row[3]);
        let cited: usize = row[4]
            .split("\"Current figures\", row ")
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "{name}: {:?} cites no row of docs/benchmarks.md, \"Current figures\"",
                    row[4]
                )
            });
        let cited_row = current
            .iter()
            .find(|r| r[0] == cited.to_string())
            .unwrap_or_else(|| {
                panic!("{name}: no row {cited} in docs/benchmarks.md, \"Current figures\"")
            });
        assert!(
            cited_row[2].contains(rss.as_str()),
            "{name}: {rss} is not the figure of row {cited}: {:?}",
            cited_row[2]
        );
        assert!(
            cited_row[4].contains('`') || cited_row[4].starts_with("the same"),
            "row {cited} gives no command: {:?}",
            cited_row[4]
        );
        let date: Vec<char> = cited_row[5].chars().take(10).collect();
        assert!(
            date.len() == 10
                && date.iter().enumerate().all(|(i, c)| if i == 4 || i == 7 {
                    *c == '-'
                } else {
                    c.is_ascii_digit()
                }),
            "row {cited}: no date: {:?}",
            cited_row[5]
        );
        let c = container(ds, name);
        let res = &c["resources"];
        let limit = res["limits"]["memory"].as_str().expect("memory limit");
        let request = res["requests"]["memory"].as_str().expect("memory request");
        assert!(
            quantity(limit) >= quantity(rss),
            "{name}: limit {limit} below the documented RSS {rss}"
        );
        assert_eq!(
            req_lim,
            &format!("{request} / {limit}"),
            "{name}: docs' request / limit vs the chart's"
        );
        covered.insert(name.clone());
    }
    assert_eq!(
        covered,
        BTreeSet::from(["housekeeper".to_owned(), "prober".to_owned()])
    );
}

#[test]
fn node_selector_names_an_architecture_the_images_are_built_for() {
    let r = Render::defaults().run();
    let arch = pod_spec(&r)["nodeSelector"]["kubernetes.io/arch"]
        .as_str()
        .expect("nodeSelector kubernetes.io/arch")
        .to_owned();
    let out = Command::new(repo().join("deploy/build-images.sh"))
        .arg(format!("--arch={arch}"))
        .arg("--print-names")
        .output()
        .expect("build-images.sh");
    assert!(out.status.success(), "build-images.sh cannot build {arch}");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .all(|l| l.ends_with(&arch))
    );
    let bad = Command::new(repo().join("deploy/build-images.sh"))
        .args(["--arch=s390x", "--print-names"])
        .output()
        .expect("build-images.sh");
    assert!(
        !bad.status.success(),
        "an unsupported architecture is refused"
    );
    let docs = md_section(
        &read("docs/operations.md"),
        "### 1.1 Build and push the images",
    );
    assert!(docs.contains(&format!("`kubernetes.io/arch: {arch}`")));
    // The sentinel runs the prober's image: the same architecture.
    let sentinel = r
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the sentinel's Deployment");
    assert_eq!(
        sentinel["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/arch"],
        arch.as_str(),
        "the sentinel's nodeSelector must keep it off nodes its image cannot run on"
    );
    // Its own selector still wins where it names an architecture.
    let own = Render::defaults()
        .set(json!({"sentinel": {"nodeSelector": {"kubernetes.io/arch": "arm64"}}}))
        .run();
    let sentinel = own
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the sentinel's Deployment");
    assert_eq!(
        sentinel["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/arch"],
        "arm64"
    );
}

#[test]
fn upgrades_never_use_reuse_values() {
    let docs = read("docs/operations.md");
    let notes = [
        Render::defaults().run().notes,
        Render::defaults()
            .set(json!({"housekeeper": {"dryRun": false}}))
            .run()
            .notes,
    ];
    let mut commands = 0;
    for text in std::iter::once(docs.as_str()).chain(notes.iter().map(String::as_str)) {
        for (i, _) in text.match_indices("helm upgrade ") {
            let cmd: String = text[i..]
                .chars()
                .take_while(|c| *c != '`' && *c != '\n')
                .collect();
            assert!(
                !cmd.contains(" --reuse-values"),
                "{cmd}: --reuse-values ignores new chart defaults"
            );
            assert!(
                cmd.contains("--reset-then-reuse-values") || cmd.contains(" -f "),
                "{cmd}: say which values to keep"
            );
            commands += 1;
        }
    }
    assert!(commands >= 4, "only {commands} helm upgrade commands found");
    let upgrade = md_section(&docs, "## 2. Upgrade");
    assert!(upgrade.contains("--reset-then-reuse-values") && upgrade.contains("values file"));
}

/// The DaemonSet an earlier install of release `podward` left, as the API server holds it.
fn installed_daemonset(name: &str, selector_name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": "podward-system",
            "labels": {
                "app.kubernetes.io/managed-by": "Helm",
                "app.kubernetes.io/instance": "podward",
                "app.kubernetes.io/part-of": "podward",
            },
            "annotations": {
                "meta.helm.sh/release-name": "podward",
                "meta.helm.sh/release-namespace": "podward-system",
            },
        },
        "spec": {"selector": {"matchLabels": {
            "app.kubernetes.io/name": selector_name,
            "app.kubernetes.io/instance": "podward",
        }}},
    })
}

#[test]
fn a_renamed_release_is_refused_before_it_replaces_every_nodes_daemonset() {
    let docs = read("docs/operations.md");
    // nameOverride alone renames the DaemonSet: Helm would delete the running one.
    let err = Render::defaults()
        .set(json!({"nameOverride": "pw"}))
        .existing(vec![installed_daemonset("podward", "podward")])
        .try_run()
        .err()
        .expect("a renamed DaemonSet must be refused");
    assert!(
        err.contains("podward-system/podward") && err.contains("podward-pw"),
        "{err}"
    );
    assert!(
        err.contains("helm get values podward -n podward-system"),
        "{err}"
    );
    // With the full name pinned it changes the immutable selector instead.
    let err = Render::defaults()
        .set(json!({"nameOverride": "pw", "fullnameOverride": "podward"}))
        .existing(vec![installed_daemonset("podward", "podward")])
        .try_run()
        .err()
        .expect("a changed selector must be refused");
    assert!(
        err.contains("immutable") && err.contains(r#""app.kubernetes.io/name":"pw""#),
        "{err}"
    );
    assert!(
        docs.lines()
            .any(|l| l.starts_with('#') && l.contains("Names and selectors are fixed at install")),
        "the message's section exists"
    );
    // The same values pass, and another release's DaemonSet is none of this one's business.
    Render::defaults()
        .existing(vec![installed_daemonset("podward", "podward")])
        .run();
    let mut other = installed_daemonset("other", "other");
    other["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("other");
    Render::defaults().existing(vec![other]).run();
}

#[test]
fn chart_references_into_the_docs_name_real_sections() {
    let docs = read("docs/operations.md");
    let headings: Vec<&str> = docs.lines().filter(|l| l.starts_with('#')).collect();
    let mut files = vec![repo().join("charts/podward/values.yaml")];
    for e in std::fs::read_dir(repo().join("charts/podward/templates")).expect("templates") {
        files.push(e.expect("entry").path());
    }
    let mut checked = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        // `docs/operations.md, "Title"` and `docs/operations.md ("Title")`, across a line break.
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for (i, _) in flat.match_indices("docs/operations.md") {
            let rest =
                flat[i + "docs/operations.md".len()..].trim_start_matches([',', ' ', '(', '#']);
            let rest = rest.trim_start_matches('\\');
            let Some(rest) = rest.strip_prefix('"') else {
                continue;
            };
            let title: String = rest
                .chars()
                .take_while(|c| *c != '"' && *c != '\\')
                .collect();
            assert!(
                headings.iter().any(|h| h.contains(&title)),
                "{}: docs/operations.md has no section {title:?}",
                f.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} references found");
}

#[test]
fn the_prober_probe_host_policy_and_exec_standby_take_only_what_the_prober_parses() {
    // What a careless `--set` or values file sends: a value the prober would refuse at start-up
    // (a crash loop on every node), caught by the chart's schema before anything is installed.
    let bad = [
        json!({"prober": {"probeHostPolicy": "Allow"}}),
        json!({"prober": {"probeHostPolicy": "deny-local "}}),
        json!({"prober": {"probeHostPolicy": "allow,deny"}}),
        json!({"prober": {"probeHostPolicy": ""}}),
        json!({"prober": {"probeHostPolicy": null}}),
        json!({"prober": {"execStandby": null}}),
        json!({"prober": {"execStandby": "no"}}),
        json!({"prober": {"execStandby": "false"}}),
        json!({"prober": {"execStandby": 0}}),
    ];
    for values in bad {
        let field = if values["prober"].get("execStandby").is_some() {
            "execStandby"
        } else {
            "probeHostPolicy"
        };
        let err = Render::defaults()
            .set(values.clone())
            .try_run()
            .err()
            .unwrap_or_else(|| panic!("{values} must be refused"));
        assert!(err.contains(field), "{values}: {err}");
    }
    for (values, flag) in [
        (
            json!({"prober": {"probeHostPolicy": "deny"}}),
            "--probe-host-policy=deny",
        ),
        (
            json!({"prober": {"execStandby": false}}),
            "--exec-standby=false",
        ),
    ] {
        let r = Render::defaults().set(values).run();
        let ds = r
            .objects
            .iter()
            .find(|o| o["kind"] == "DaemonSet")
            .expect("DaemonSet");
        let args = ds["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
        assert!(args.contains(flag), "{flag} not in {args}");
    }
}

#[test]
fn a_null_value_is_refused_rather_than_rendered_as_an_empty_flag() {
    // Helm deletes a key set to null (`--set x=null`, `x: ~` in a values file), defaults
    // included: a value the chart renders into a flag would become `--flag=`, which the daemon
    // refuses at start-up on every node. The schema requires each of them instead.
    let rendered_into_flags = [
        ("", "containerdNamespace"),
        ("sockets", "dir"),
        ("sockets", "shim"),
        ("sockets", "prober"),
        ("sockets", "housekeeper"),
        ("sockets", "containerd"),
        ("logging", "format"),
        ("logging", "level"),
        ("prober", "adminPort"),
        ("prober", "kubeVersion"),
        ("prober", "pollIntervalSeconds"),
        ("prober", "execMode"),
        ("prober", "execStandby"),
        ("prober", "probeHostPolicy"),
        ("housekeeper", "adminPort"),
        ("housekeeper", "dryRun"),
        ("housekeeper", "removeExitedContainers"),
        ("housekeeper", "interval"),
        ("housekeeper", "orphanGrace"),
        ("housekeeper", "cgroupDriver"),
        ("housekeeper", "systemdBusDir"),
        ("housekeeper", "kubeletCgroupRoot"),
        ("housekeeper", "cgroupRoot"),
        ("housekeeper", "kubeletRoot"),
        ("housekeeper", "logRoot"),
        ("housekeeper", "hostPID"),
        ("housekeeper", "privileged"),
    ];
    for (section, key) in rendered_into_flags {
        let values = if section.is_empty() {
            json!({ key: null })
        } else {
            json!({ section: { key: null } })
        };
        let err = Render::defaults()
            .set(values.clone())
            .try_run()
            .err()
            .unwrap_or_else(|| panic!("{values} must be refused"));
        assert!(
            err.contains(&format!("missing property '{key}'")),
            "{values}: {err}"
        );
    }
}
