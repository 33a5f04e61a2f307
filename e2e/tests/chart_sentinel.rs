//! The chart's sentinel and node lease, rendered by Helm's own engine (`charts/tests/render.py`):
//!
//! - the sentinel Deployment (two replicas by default) runs `podward-prober sentinel` with
//!   arguments the built binary's own parser accepts, each flag once;
//! - its pods carry their own name label, so neither the DaemonSet's selector nor its metrics
//!   Service can pick them up;
//! - RBAC is exactly what it uses (pods get/list, pods/status patch, events create/patch; leases
//!   in the release namespace), the prober's node lease likewise (get/create/update), and an
//!   admission policy narrows each (own node's lease; the gate's condition to False only);
//! - the prober's DaemonSet passes the lease flags; `sentinel.enabled=false` drops the sentinel;
//! - the replicas run on distinct nodes (required anti-affinity), roll one at a time with no
//!   surge, and a PodDisruptionBudget lets a drain take only one of them at a time.

use std::process::Command;

use serde_json::{Value, json};

#[path = "support/chart.rs"]
mod support;
use support::{Render, container, strs};

fn named<'a>(objects: &'a [Value], kind: &str, suffix: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(suffix))
        })
        .unwrap_or_else(|| panic!("no {kind} named *{suffix}"))
}

fn rules(role: &Value) -> Vec<(String, String, Vec<String>)> {
    let mut got: Vec<_> = role["rules"]
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
    got
}

fn want(g: &str, r: &str, v: &[&str]) -> (String, String, Vec<String>) {
    (
        g.to_owned(),
        r.to_owned(),
        v.iter().map(|v| (*v).to_owned()).collect(),
    )
}

#[test]
fn the_sentinel_deployment_runs_what_the_binary_accepts_with_exactly_its_rbac() {
    let r = Render::defaults().run();
    let dep = named(&r.objects, "Deployment", "-sentinel");
    assert_eq!(dep["spec"]["replicas"], 2);
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(strs(&c["command"]), ["/usr/local/bin/podward-prober"]);
    let args: Vec<String> = strs(&c["args"])
        .into_iter()
        .map(|a| {
            a.replace("$(POD_NAME)", "podward-sentinel-0")
                .replace("$(POD_IP)", "127.0.0.1")
        })
        .collect();
    assert!(args.contains(&"sentinel".to_owned()), "{args:?}");
    let flags: Vec<&str> = args
        .iter()
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split('=').next().unwrap_or(a))
        .collect();
    let mut unique = flags.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), flags.len(), "a flag given twice: {flags:?}");
    // The binary's own parser: with every rendered flag it gets as far as the kubeconfig.
    let out = Command::new(podward_e2e::bin_path("podward-prober"))
        .args(&args)
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run podward-prober sentinel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("kubeconfig /nonexistent/kubeconfig"),
        "the rendered arguments must parse: {stderr}"
    );

    // Its own pod labels: the DaemonSet's selector and metrics Service never match them.
    let pod_labels = &dep["spec"]["template"]["metadata"]["labels"];
    let ds = r.get("DaemonSet");
    let ds_sel = ds["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector");
    assert!(
        !ds_sel.iter().all(|(k, v)| &pod_labels[k] == v),
        "the DaemonSet's selector matches the sentinel's pods: {pod_labels}"
    );

    let sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("sa");
    assert!(sa.ends_with("-sentinel"), "its own ServiceAccount: {sa}");
    assert_eq!(
        rules(named(&r.objects, "ClusterRole", "-sentinel")),
        [
            want("", "events", &["create", "patch"]),
            want("", "nodes", &["get"]),
            want("", "pods", &["get", "list"]),
            want("", "pods/status", &["patch"]),
        ]
    );
    assert_eq!(
        rules(named(&r.objects, "Role", "-sentinel")),
        [want(
            "coordination.k8s.io",
            "leases",
            &["get", "list", "watch", "create", "update"]
        )]
    );
    assert_eq!(
        rules(named(&r.objects, "Role", "-node-lease")),
        [want(
            "coordination.k8s.io",
            "leases",
            &["get", "create", "update"]
        )]
    );
    let lease_policy = named(&r.objects, "ValidatingAdmissionPolicy", "-own-node-lease");
    let text = lease_policy.to_string();
    assert!(text.contains("request.name == variables.node"), "{text}");
    let only_false = named(
        &r.objects,
        "ValidatingAdmissionPolicy",
        "-sentinel-only-not-ready",
    );
    let text = only_false.to_string();
    assert!(text.contains("c.status == 'False'"), "{text}");
    assert!(text.contains("'podward.io/ready'"), "{text}");

    let prober = container(ds, "prober");
    let args = strs(&prober["args"]);
    for flag in [
        "--lease-namespace=",
        "--node-lease-renew-interval-seconds=10",
        "--node-lease-duration-seconds=50",
    ] {
        assert!(args.iter().any(|a| a.starts_with(flag)), "{flag}: {args:?}");
    }
}

#[test]
fn the_sentinel_can_be_turned_off() {
    let r = Render::defaults()
        .set(json!({"sentinel": {"enabled": false}}))
        .run();
    assert!(r.find("Deployment").is_none());
    assert!(r.objects.iter().all(|o| {
        !o["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .ends_with("-sentinel")
    }),);
}

#[test]
fn a_drain_or_a_rollout_never_takes_every_sentinel_replica() {
    let r = Render::defaults().run();
    let dep = named(&r.objects, "Deployment", "-sentinel");
    let selector = &dep["spec"]["selector"]["matchLabels"];
    let pod = &dep["spec"]["template"]["spec"];
    let required =
        &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(required[0]["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(&required[0]["labelSelector"]["matchLabels"], selector);
    // A surge replica could find no free node under required anti-affinity: none is made.
    assert_eq!(
        dep["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})
    );
    let pdb = named(&r.objects, "PodDisruptionBudget", "-sentinel");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], selector);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert!(
        pdb["spec"].get("minAvailable").is_none(),
        "minAvailable would block a drain with one replica"
    );

    // A one-node cluster: preferred spreading, no budget.
    let r = Render::defaults()
        .set(
            json!({"sentinel": {"replicas": 1, "antiAffinity": "preferred",
                                 "podDisruptionBudget": {"enabled": false}}}),
        )
        .run();
    let dep = named(&r.objects, "Deployment", "-sentinel");
    let anti = &dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    assert!(
        anti.get("requiredDuringSchedulingIgnoredDuringExecution")
            .is_none(),
        "{anti}"
    );
    assert_eq!(
        anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert!(r.find("PodDisruptionBudget").is_none());

    // The values schema refuses what the API server would.
    for bad in [
        json!({"antiAffinity": "spread"}),
        json!({"podDisruptionBudget": {"maxUnavailable": 0}}),
    ] {
        let err = Render::defaults()
            .set(json!({"sentinel": bad}))
            .try_run()
            .err()
            .unwrap_or_else(|| panic!("{bad} must be refused"));
        assert!(err.contains("sentinel"), "{err}");
    }
}
