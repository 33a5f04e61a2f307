//! Client stacks other than tonic/hyper through the shim: gRPC's C core (Python `grpcio`; it
//! sends `:authority` = the percent-encoded socket path, which a terminating HTTP/2 proxy
//! rejected) and gRPC-Go (kubelet's own stack, built offline from Debian's Go packages). The
//! same conformance cases run directly against containerd and through the shim must give
//! identical outcomes (codes, messages, shapes; IDs masked), and with containerd down both say
//! `UNAVAILABLE`.

#[path = "shim_support.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use podward_e2e::{PodSpec, TestNode};
use support::InProcShim;
use tonic_prost::prost::Message;

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
        .flat_map(|reg| {
            std::fs::read_dir(reg.path())
                .into_iter()
                .flatten()
                .flatten()
        })
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

/// The gRPC-Go client (`e2e/clients/go/main.go`), built once per target dir in GOPATH mode
/// against Debian's Go packages in /usr/share/gocode (no module proxy, no network), with
/// runtime.v1 stubs from protoc-gen-go / protoc-gen-go-grpc.
fn go_client() -> PathBuf {
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cri-go");
    let bin = work.join("cri-conformance");
    let main = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/go/main.go");
    let fresh = |b: &Path| {
        let (Ok(b), Ok(m)) = (std::fs::metadata(b), std::fs::metadata(&main)) else {
            return false;
        };
        b.modified().ok() >= m.modified().ok()
    };
    if fresh(&bin) {
        return bin;
    }
    let stubs = work.join("gopath/src/k8s.io/cri-api/pkg/apis/runtime/v1");
    let pkg = work.join("gopath/src/podward-cri-client");
    let generated = work.join("generated");
    for d in [&stubs, &pkg, &generated] {
        std::fs::create_dir_all(d).expect("go work dirs");
    }
    let proto = cri_proto();
    let st = Command::new("protoc")
        .current_dir(proto.parent().expect("proto dir"))
        .arg("-I.")
        .arg(format!("--go_out={}", generated.display()))
        .arg(format!("--go-grpc_out={}", generated.display()))
        .arg("v1.proto")
        .status()
        .expect("protoc with protoc-gen-go and protoc-gen-go-grpc (scripts/install-deps.sh)");
    assert!(st.success(), "protoc for the Go stubs failed: {st}");
    for f in ["v1.pb.go", "v1_grpc.pb.go"] {
        std::fs::copy(
            generated.join("k8s.io/cri-api/pkg/apis/runtime/v1").join(f),
            stubs.join(f),
        )
        .expect("copy stub");
    }
    std::fs::copy(&main, pkg.join("main.go")).expect("copy main.go");
    let out = Command::new("go")
        .current_dir(&pkg)
        .env("GO111MODULE", "off")
        .env(
            "GOPATH",
            format!("{}:/usr/share/gocode", work.join("gopath").display()),
        )
        .env("GOCACHE", work.join("cache"))
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .output()
        .expect("go (Debian golang-go; scripts/install-deps.sh)");
    assert!(
        out.status.success(),
        "building the gRPC-Go client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
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
