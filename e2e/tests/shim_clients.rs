//! Client stacks other than tonic/hyper through the shim: gRPC's C core (Python `grpcio`; it
//! sends `:authority` = the percent-encoded socket path, which a terminating HTTP/2 proxy
//! rejected) and gRPC-Go (kubelet's own stack, built offline from Debian's Go packages). The
//! same conformance cases run directly against containerd and through the shim must give
//! identical outcomes (codes, messages, shapes; IDs masked), and with containerd down both say
//! `UNAVAILABLE`.

#[path = "support/shim.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use podward_e2e::{PodSpec, TestNode};
use support::InProcShim;
use tonic_prost::prost::Message;

/// Python stubs for runtime.v1, generated once per target dir with grpcio-tools.
fn python_stubs() -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cri-python");
    if out.join("v1_pb2_grpc.py").exists() {
        return out;
    }
    std::fs::create_dir_all(&out).expect("stubs dir");
    let proto = podward_e2e::cri_proto().expect("the k8s-cri proto");
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

/// The gRPC-Go client, built once per target dir.
fn go_client() -> PathBuf {
    podward_e2e::go_client(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cri-go"))
        .expect("the gRPC-Go client (scripts/install-deps.sh installs its tools)")
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/cri_conformance.py")
}

/// A client stack: how to run its cases against a socket.
#[derive(Clone)]
enum Stack {
    /// Python grpcio with stubs in this directory.
    Python(PathBuf),
    /// The gRPC-Go binary.
    Go(PathBuf),
}

/// Runs the stack's cases against `socket`: (case, outcome) in order.
fn run_client(stack: &Stack, socket: &Path, args: &[String]) -> Vec<(String, String)> {
    let mut cmd = match stack {
        Stack::Python(stubs) => {
            let mut c = Command::new("python3");
            c.arg(script()).arg(stubs);
            c
        }
        Stack::Go(bin) => Command::new(bin),
    };
    let out = cmd.arg(socket).args(args).output().expect("client");
    assert!(
        out.status.success(),
        "conformance client failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(c, o)| (c.to_owned(), o.to_owned()))
        .collect()
}

/// The stack's cases direct and through the shim, then with containerd down; asserts both
/// agree. Returns the direct outcomes for stack-specific checks.
async fn direct_and_through_the_shim(stack: Stack, name: &str) -> Vec<(String, String)> {
    let mut node = TestNode::start().await.expect("node");
    let shim = InProcShim::start(&node).await;
    let sandbox = PodSpec::new(name)
        .namespace("conformance")
        .uid(&format!("uid-{name}"))
        .sandbox_config(&node)
        .expect("sandbox config");
    let args = vec![
        hex::encode(sandbox.encode_to_vec()),
        hex::encode(support::container_config().encode_to_vec()),
    ];
    let run = |socket: PathBuf, args: Vec<String>| {
        let stack = stack.clone();
        async move {
            tokio::task::spawn_blocking(move || run_client(&stack, &socket, &args))
                .await
                .expect("client task")
        }
    };
    let direct = run(node.containerd_socket(), args.clone()).await;
    let proxied = run(shim.cri.clone(), args).await;
    for ((case, d), (_, p)) in direct.iter().zip(&proxied) {
        eprintln!("{name} {case}:\n  direct: {d}\n  shim:   {p}");
    }
    assert_eq!(direct, proxied, "{name}: direct vs through the shim");
    assert!(
        shim.metrics_text()
            .contains("podward_shim_observe_errors_total 0"),
        "the reader followed the client's HTTP/2"
    );

    // containerd down: the same code both ways (the messages are each client's own).
    node.stop_containerd().await;
    let down = vec![String::new(), String::new(), "absent".to_owned()];
    let d = run(node.containerd_socket(), down.clone()).await;
    let p = run(shim.cri.clone(), down).await;
    eprintln!("{name} with containerd down: direct {d:?}\n  shim {p:?}");
    let codes = |v: &[(String, String)]| -> Vec<String> {
        v.iter()
            .map(|(c, o)| format!("{c} {}", o.split(':').take(2).collect::<Vec<_>>().join(":")))
            .collect()
    };
    assert_eq!(codes(&d), codes(&p));
    assert!(
        d.iter()
            .all(|(_, o)| o.to_ascii_lowercase().starts_with("err:unavailable")),
        "{d:?}"
    );
    shim.stop().await;
    direct
}

/// The runs really exercised the runtime (not two identical failures): each `(case, prefix or
/// suffix)` holds in the direct outcomes.
fn assert_exercised(direct: &[(String, String)], expect: &[(&str, &str)]) {
    for (case, want) in expect {
        let got = direct
            .iter()
            .find(|(k, _)| k == case)
            .map(|(_, o)| o.as_str())
            .unwrap_or_default();
        assert!(
            got.starts_with(want) || got.ends_with(want),
            "{case}: {got:?} lacks {want:?}"
        );
    }
}

#[tokio::test]
async fn python_grpcio_c_core_gets_the_same_answers_through_the_shim_as_direct() {
    let stubs = tokio::task::spawn_blocking(python_stubs)
        .await
        .expect("stubs");
    let direct = direct_and_through_the_shim(Stack::Python(stubs), "grpcio").await;
    assert_exercised(
        &direct,
        &[
            ("version", "ok:containerd"),
            ("exec_sync.exit_code", " 7"),
            ("exec_sync.big_output", "ok:4194304 bytes"),
            ("exec_sync.deadline", "err:DEADLINE_EXCEEDED"),
            ("unknown.method", "err:UNIMPLEMENTED"),
        ],
    );
}

#[tokio::test]
async fn grpc_go_gets_the_same_answers_through_the_shim_as_direct() {
    let bin = tokio::task::spawn_blocking(go_client)
        .await
        .expect("go client");
    let direct = direct_and_through_the_shim(Stack::Go(bin), "grpc-go").await;
    assert_exercised(
        &direct,
        &[
            ("version", "ok:containerd"),
            ("exec_sync.exit_code", " 7"),
            ("exec_sync.big_output", "ok:4194304 bytes"),
            ("exec_sync.deadline", "err:DeadlineExceeded"),
            ("exec_sync.cancelled", "err:Canceled"),
            ("unknown.method", "err:Unimplemented"),
        ],
    );
}
