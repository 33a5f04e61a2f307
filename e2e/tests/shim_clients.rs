//! Client stacks other than tonic/hyper through the shim: gRPC's C core (Python `grpcio`) sends
//! `:authority` = the percent-encoded socket path, which a terminating HTTP/2 proxy rejected.
//! The same conformance cases run directly against containerd and through the shim must give
//! identical outcomes (codes, messages, shapes; IDs masked), and with containerd down both say
//! `UNAVAILABLE`.

#[path = "shim_support.rs"]
mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use podward_api::cri;
use podward_e2e::{BUSYBOX_IMAGE, PodSpec, TestNode};
use tonic_prost::prost::Message;
use support::InProcShim;

/// The k8s-cri crate's `v1.proto` in cargo's registry (the crate is a dependency, so cargo has
/// unpacked it).
fn cri_proto() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let src = home.join("registry/src");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
        .flatten()
        .flat_map(|reg| std::fs::read_dir(reg.path()).into_iter().flatten().flatten())
        .filter(|d| d.file_name().to_string_lossy().starts_with("k8s-cri-0.11."))
        .map(|d| d.path().join("proto/v1.proto"))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| panic!("no k8s-cri-0.11.*/proto/v1.proto under {}", src.display()))
}

/// Python stubs for runtime.v1, generated once per target dir with grpcio-tools.
fn python_stubs() -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cri-python");
    if out.join("v1_pb2_grpc.py").exists() {
        return out;
    }
    std::fs::create_dir_all(&out).expect("stubs dir");
    let proto = cri_proto();
    let dir = proto.parent().expect("proto dir");
    let st = Command::new("python3")
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("-I{}", dir.display()))
        .arg(format!("--python_out={}", out.display()))
        .arg(format!("--grpc_python_out={}", out.display()))
        .arg(&proto)
        .status()
        .expect("python3 -m grpc_tools.protoc (pip grpcio-tools; scripts/install-deps.sh)");
    assert!(st.success(), "protoc for the Python stubs failed: {st}");
    out
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/cri_conformance.py")
}

fn container_config() -> cri::ContainerConfig {
    let mut labels = HashMap::new();
    labels.insert("io.kubernetes.container.name".to_owned(), "main".to_owned());
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: "main".into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: BUSYBOX_IMAGE.into(),
            ..Default::default()
        }),
        command: vec!["sleep".into(), "3600".into()],
        labels,
        log_path: "main/0.log".into(),
        ..Default::default()
    }
}

/// Runs the Python cases against `socket`: (case, outcome) in order.
fn run_python(stubs: &Path, socket: &Path, args: &[String]) -> Vec<(String, String)> {
    let out = Command::new("python3")
        .arg(script())
        .arg(stubs)
        .arg(socket)
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "cri_conformance.py failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(c, o)| (c.to_owned(), o.to_owned()))
        .collect()
}

#[tokio::test]
async fn python_grpcio_c_core_gets_the_same_answers_through_the_shim_as_direct() {
    let stubs = tokio::task::spawn_blocking(python_stubs)
        .await
        .expect("stubs");
    let mut node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let sandbox = PodSpec::new("pyconf")
        .namespace("conformance")
        .uid("uid-pyconf")
        .sandbox_config(&node)
        .expect("sandbox config");
    let args = vec![
        hex::encode(sandbox.encode_to_vec()),
        hex::encode(container_config().encode_to_vec()),
    ];
    let direct_sock = node.containerd_socket();
    let shim_sock = shim.cri.clone();
    let (s1, a1) = (stubs.clone(), args.clone());
    let direct = tokio::task::spawn_blocking(move || run_python(&s1, &direct_sock, &a1))
        .await
        .expect("direct");
    let (s2, a2) = (stubs.clone(), args.clone());
    let proxied = tokio::task::spawn_blocking(move || run_python(&s2, &shim_sock, &a2))
        .await
        .expect("via shim");
    for ((case, d), (_, p)) in direct.iter().zip(&proxied) {
        eprintln!("grpcio {case}:\n  direct: {d}\n  shim:   {p}");
    }
    assert_eq!(direct, proxied, "C-core client: direct vs through the shim");
    let get = |c: &str| {
        direct
            .iter()
            .find(|(k, _)| k == c)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    // The runs really exercised the runtime: not two identical failures.
    assert!(get("version").starts_with("ok:containerd"), "{direct:#?}");
    assert!(get("exec_sync.exit_code").ends_with(" 7"), "{direct:#?}");
    assert!(get("exec_sync.big_output").starts_with("ok:4194304 bytes"), "{direct:#?}");
    assert!(get("exec_sync.deadline").starts_with("err:DEADLINE_EXCEEDED"), "{direct:#?}");
    assert!(get("unknown.method").starts_with("err:UNIMPLEMENTED"), "{direct:#?}");
    assert!(
        shim.metrics_text()
            .contains("podward_shim_observe_errors_total 0"),
        "the reader followed the C-core client's HTTP/2"
    );

    // containerd down: the same code both ways.
    node.stop_containerd().await;
    let down = vec![String::new(), String::new(), "absent".to_owned()];
    let direct_sock = node.containerd_socket();
    let shim_sock = shim.cri.clone();
    let (s1, a1) = (stubs.clone(), down.clone());
    let direct = tokio::task::spawn_blocking(move || run_python(&s1, &direct_sock, &a1))
        .await
        .expect("direct");
    let proxied = tokio::task::spawn_blocking(move || run_python(&stubs, &shim_sock, &down))
        .await
        .expect("via shim");
    eprintln!("containerd down: direct {direct:?}\n  shim {proxied:?}");
    let codes = |v: &[(String, String)]| -> Vec<String> {
        v.iter()
            .map(|(c, o)| format!("{c} {}", o.split(':').take(2).collect::<Vec<_>>().join(":")))
            .collect()
    };
    assert_eq!(codes(&direct), codes(&proxied));
    assert!(
        direct.iter().all(|(_, o)| o.starts_with("err:UNAVAILABLE")),
        "{direct:?}"
    );
    shim.stop().await;
}
