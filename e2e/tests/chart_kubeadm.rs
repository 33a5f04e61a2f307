//! docs/operations.md, "Point kubelet at the shim", walked on kubeadm node layouts by
//! `deploy/tests/kubeadm_walk.py` (copies of kubeadm-flags.env, /etc/default|sysconfig/kubelet,
//! config.yaml, instance-config.yaml and the 10-kubeadm.conf drop-in; the doc's blocks run as
//! written on each copy). The walk must pass on the real docs, and fail on docs that make the
//! mistakes an operator would otherwise find on a real node.

use std::path::Path;
use std::process::Command;

#[path = "support/chart.rs"]
mod support;
use support::{read, repo};

/// Runs the walk on `docs` (a path); (success, output).
fn walk(docs: &Path) -> (bool, String) {
    let out = Command::new("python3")
        .arg(repo().join("deploy/tests/kubeadm_walk.py"))
        .arg("--docs")
        .arg(docs)
        .output()
        .expect("run python3 deploy/tests/kubeadm_walk.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The docs with `from` replaced by `to` (which must occur), written to a temp file.
fn docs_with(from: &str, to: &str) -> tempfile::NamedTempFile {
    let doc = read("docs/operations.md");
    assert!(doc.contains(from), "docs no longer contain {from:?}");
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), doc.replacen(from, to, 1)).expect("write docs copy");
    file
}

#[test]
fn kubelet_repointing_as_documented_works_on_every_kubeadm_layout() {
    let (ok, out) = walk(&repo().join("docs/operations.md"));
    assert!(ok, "{out}");
    assert!(out.contains("3 layout(s), 0 failure(s)"), "{out}");
    for layout in ["v1.30", "v1.34", "rpm-extra-args"] {
        assert!(
            out.contains(&format!(
                "{layout}: unix:///var/run/containerd/containerd.sock -> unix:///run/podward/cri.sock"
            )) || out.contains(&format!(
                "{layout}: unix:///run/containerd/containerd.sock -> unix:///run/podward/cri.sock"
            )),
            "{layout} not walked from containerd to the shim:\n{out}"
        );
    }
}

/// The mistake the issue names: editing only config.yaml while kubeadm's flag wins.
#[test]
fn the_walk_fails_docs_that_edit_only_the_config_file() {
    let flags_loop = "for f in /var/lib/kubelet/kubeadm-flags.env /etc/default/kubelet /etc/sysconfig/kubelet; do";
    let docs = docs_with(flags_loop, "for f in /var/lib/kubelet/does-not-exist; do");
    let (ok, out) = walk(docs.path());
    assert!(
        !ok,
        "the walk passed docs that leave the flag alone:\n{out}"
    );
    assert!(
        out.contains("FAIL v1.30: after the repoint step kubelet would still use"),
        "{out}"
    );
    // The kubeadm >= 1.34 layout has no flag: config-only editing is right there.
    assert!(!out.contains("FAIL v1.34"), "{out}");
}

/// kubeadm >= 1.34 rebuilds config.yaml from instance-config.yaml on upgrade.
#[test]
fn the_walk_fails_docs_that_forget_instance_config() {
    let docs = docs_with(
        "for f in /var/lib/kubelet/config.yaml /var/lib/kubelet/instance-config.yaml; do",
        "for f in /var/lib/kubelet/config.yaml; do",
    );
    let (ok, out) = walk(docs.path());
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL v1.34: after the repoint step these still name another endpoint")
            && out.contains("instance-config.yaml"),
        "{out}"
    );
}

/// A flag edit that leaves the other flags alone is part of the contract.
#[test]
fn the_walk_fails_docs_that_damage_other_flags() {
    let docs = docs_with(
        r#"#--container-runtime-endpoint=$ENDPOINT#g"#,
        r#"#--container-runtime-endpoint=$ENDPOINT#g; s#--v=2##"#,
    );
    let (ok, out) = walk(docs.path());
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL rpm-extra-args: the repoint step changed other kubelet flags"),
        "{out}"
    );
}

/// The walk runs doc text as root: it must refuse a block that touches a path it cannot
/// redirect into its copy, rather than edit this machine.
#[test]
fn the_walk_refuses_blocks_that_touch_other_host_paths() {
    let docs = docs_with(
        "ENDPOINT=unix:///run/podward/cri.sock\n",
        "ENDPOINT=unix:///run/podward/cri.sock\ntouch /etc/kubernetes/podward-walk-must-not-create\n",
    );
    let (ok, out) = walk(docs.path());
    assert!(!ok, "{out}");
    assert!(out.contains("touches /etc/kubernetes"), "{out}");
    assert!(!Path::new("/etc/kubernetes/podward-walk-must-not-create").exists());
}
