//! `podward-prober migrate` on real-shaped manifests: every kind's pod template is migrated as
//! the webhook migrates a pod (probes as written), a second run changes nothing, and `--revert`
//! gives back the original objects.

use podward_prober::kubernetes::admission::takeover::{Policy, SkipReason};
use podward_prober::kubernetes::migrate::{Outcome, rewrite};
use serde_json::{Value, json};

const WORKLOADS: &str = include_str!("migrate_fixtures/workloads.yaml");

fn policy() -> Policy {
    Policy {
        gate_condition: "podward.io/ready".to_owned(),
        node_selector: Some(("podward.io/node".to_owned(), "true".to_owned())),
    }
}

/// Every document of `yaml` as JSON (maps compared without regard to key order).
fn docs(yaml: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|d| {
            let v: serde_norway::Value = serde::Deserialize::deserialize(d).expect("YAML");
            serde_json::to_value(v).expect("JSON")
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn annotation(template: &Value, key: &str) -> Value {
    let text = template["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} missing in {template}"));
    serde_json::from_str(text).expect("annotation JSON")
}

#[test]
fn each_kind_is_migrated_as_the_webhook_would_and_the_rest_passes_through() {
    let (out, report) = rewrite(WORKLOADS, &policy(), false).expect("migrate");
    let before = docs(WORKLOADS);
    let after = docs(&out);
    assert_eq!(after.len(), before.len());
    let outcomes: Vec<(&str, &Outcome)> = report.iter().map(|(o, r)| (o.as_str(), r)).collect();
    assert_eq!(
        outcomes,
        vec![
            ("Deployment/web", &Outcome::Changed),
            ("StatefulSet/db", &Outcome::Changed),
            (
                "DaemonSet/node-agent",
                &Outcome::Skipped(SkipReason::ProbeNamesHost)
            ),
            ("CronJob/report", &Outcome::Changed),
            ("Job/once", &Outcome::Skipped(SkipReason::NoProbes)),
            ("Pod/liveness-exec", &Outcome::Changed),
        ]
    );
    // The Deployment: exactly the docs' "After" (operations.md §5) plus the node label.
    let web = &after[0]["spec"]["template"];
    assert_eq!(
        annotation(web, "podward.io/probes"),
        json!({
            "web": {
                "startupProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "failureThreshold": 30, "periodSeconds": 2},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 5}
            },
            "worker": {"livenessProbe": {"exec": {"command": ["/bin/check", "--quick"]}, "timeoutSeconds": 3}}
        })
    );
    assert_eq!(
        web["spec"]["readinessGates"],
        json!([{"conditionType": "podward.io/ready"}])
    );
    assert_eq!(
        web["spec"]["nodeSelector"],
        json!({"podward.io/node": "true"})
    );
    assert_eq!(
        web["spec"]["containers"],
        json!([
            {"name": "web", "image": "registry.example/web:1.4", "ports": [{"name": "http", "containerPort": 8080}]},
            {"name": "worker", "image": "registry.example/worker:1.4"}
        ])
    );
    // The StatefulSet: the sidecar's probe moves, the plain init container is untouched, its
    // own gate, selector and annotations stay beside podward's.
    let db = &after[2]["spec"]["template"];
    assert_eq!(
        annotation(db, "podward.io/probes"),
        json!({"backup-agent": {"readinessProbe": {"grpc": {"port": 9090}}},
               "postgres": {"readinessProbe": {"exec": {"command": ["pg_isready", "-U", "postgres"]}, "initialDelaySeconds": 5}}})
    );
    assert_eq!(
        db["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
    assert_eq!(
        db["spec"]["readinessGates"],
        json!([{"conditionType": "example.com/replicated"}, {"conditionType": "podward.io/ready"}])
    );
    assert_eq!(
        db["spec"]["nodeSelector"],
        json!({"kubernetes.io/os": "linux", "podward.io/node": "true"})
    );
    assert_eq!(
        db["spec"]["initContainers"][0],
        before[2]["spec"]["template"]["spec"]["initContainers"][0]
    );
    // Unchanged documents are the same objects.
    assert_eq!(after[1], before[1], "the Service");
    assert_eq!(
        after[3], before[3],
        "the DaemonSet whose probe names a host"
    );
    assert_eq!(after[5], before[5], "the Job without probes");
    // The CronJob and the List's Pod: liveness only, no gate.
    let cron = &after[4]["spec"]["jobTemplate"]["spec"]["template"];
    assert!(cron["spec"].get("readinessGates").is_none());
    assert!(cron["spec"]["containers"][0].get("livenessProbe").is_none());
    let pod = &after[6]["items"][0];
    assert_eq!(
        annotation(pod, "podward.io/probes-moved"),
        json!({"containers": {"liveness": ["livenessProbe"]}, "nodeSelector": {"podward.io/node": "true"}})
    );
}

#[test]
fn migrating_twice_changes_nothing_and_revert_gives_back_the_original_objects() {
    let (once, _) = rewrite(WORKLOADS, &policy(), false).expect("migrate");
    let (twice, report) = rewrite(&once, &policy(), false).expect("migrate again");
    assert_eq!(twice, once, "idempotent, byte for byte");
    assert!(
        report.iter().all(|(_, o)| *o != Outcome::Changed),
        "{report:?}"
    );
    let (reverted, report) = rewrite(&once, &policy(), true).expect("revert");
    assert_eq!(docs(&reverted), docs(WORKLOADS));
    assert_eq!(
        report
            .iter()
            .filter(|(_, o)| *o == Outcome::Changed)
            .count(),
        4
    );
    // Reverting what has nothing to revert changes nothing either.
    let (again, _) = rewrite(&reverted, &policy(), true).expect("revert again");
    assert_eq!(docs(&again), docs(WORKLOADS));
}

#[test]
fn keys_keep_their_order_and_a_hand_made_annotation_reverts_too() {
    let (once, _) = rewrite(WORKLOADS, &policy(), false).expect("migrate");
    let replicas = once.find("replicas: 3").expect("replicas");
    let selector = once.find("selector:").expect("selector");
    assert!(
        replicas < selector,
        "the Deployment's spec keeps its order:\n{once}"
    );
    // The docs' hand-made "After" (no podward.io/probes-moved): --revert restores the blocks
    // and drops the gate.
    let hand = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    metadata:
      labels: {app: web}
      annotations:
        podward.io/probes: '{"web": {"livenessProbe": {"tcpSocket": {"port": 8080}}}}'
    spec:
      readinessGates: [{conditionType: podward.io/ready}]
      containers:
        - name: web
          image: registry.example/web:1.4
"#;
    let (out, _) = rewrite(hand, &policy(), true).expect("revert");
    assert_eq!(
        docs(&out)[0]["spec"]["template"],
        json!({"metadata": {"labels": {"app": "web"}},
               "spec": {"containers": [{"name": "web", "image": "registry.example/web:1.4",
                                         "livenessProbe": {"tcpSocket": {"port": 8080}}}]}})
    );
    assert!(rewrite("kind: [unclosed", &policy(), false).is_err());
}

#[test]
fn the_command_line_rewrites_a_file_and_reports_each_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (input, migrated, reverted) = (
        dir.path().join("in.yaml"),
        dir.path().join("migrated.yaml"),
        dir.path().join("reverted.yaml"),
    );
    std::fs::write(&input, WORKLOADS).expect("write");
    let run = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_podward-prober"))
            .arg("migrate")
            .args(args)
            .output()
            .expect("run podward-prober migrate");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stderr).expect("utf8")
    };
    let report = run(&[
        "-f".as_ref(),
        input.as_ref(),
        "-o".as_ref(),
        migrated.as_ref(),
    ]);
    assert!(report.contains("Deployment/web: changed"), "{report}");
    assert!(
        report.contains("DaemonSet/node-agent: unchanged (probe_names_host)"),
        "{report}"
    );
    let text = std::fs::read_to_string(&migrated).expect("read");
    assert!(text.contains("podward.io/probes"), "{text}");
    run(&[
        "--revert".as_ref(),
        "-f".as_ref(),
        migrated.as_ref(),
        "-o".as_ref(),
        reverted.as_ref(),
    ]);
    assert_eq!(
        docs(&std::fs::read_to_string(&reverted).expect("read")),
        docs(WORKLOADS)
    );
}
