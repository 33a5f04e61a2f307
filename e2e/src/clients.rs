//! CRI clients on other stacks than tonic, built from this machine's packages: the gRPC-Go client
//! (`e2e/clients/go/main.go`, kubelet's own stack) and the CRI proto their stubs come from.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::binaries::run_checked;
use crate::error::HarnessError;

/// The k8s-cri crate's `v1.proto` in cargo's registry (the crate is a dependency, so cargo has
/// unpacked it).
pub fn cri_proto() -> Result<PathBuf, HarnessError> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or_else(|| HarnessError::Invalid("neither CARGO_HOME nor HOME is set".into()))?;
    let src = home.join("registry/src");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&src)
        .map_err(HarnessError::io("read", &src))?
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
    found.pop().ok_or_else(|| {
        HarnessError::Invalid(format!(
            "no k8s-cri-0.11.*/proto/v1.proto under {}",
            src.display()
        ))
    })
}

/// The gRPC-Go client (`e2e/clients/go/main.go`), built into `work` unless a build newer than
/// its source is there: in GOPATH mode against Debian's Go packages in /usr/share/gocode (no
/// module proxy, no network), with runtime.v1 stubs from protoc-gen-go / protoc-gen-go-grpc
/// (`scripts/install-deps.sh` installs them all).
pub fn go_client(work: &Path) -> Result<PathBuf, HarnessError> {
    let bin = work.join("cri-client");
    let main = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/go/main.go");
    let fresh = match (std::fs::metadata(&bin), std::fs::metadata(&main)) {
        (Ok(b), Ok(m)) => b.modified().ok() >= m.modified().ok(),
        _ => false,
    };
    if fresh {
        return Ok(bin);
    }
    let stubs = work.join("gopath/src/k8s.io/cri-api/pkg/apis/runtime/v1");
    let pkg = work.join("gopath/src/podward-cri-client");
    let generated = work.join("generated");
    for d in [&stubs, &pkg, &generated] {
        std::fs::create_dir_all(d).map_err(HarnessError::io("create", d))?;
    }
    let proto = cri_proto()?;
    let proto_dir = proto.parent().unwrap_or(Path::new("."));
    run_checked(
        Command::new("protoc")
            .current_dir(proto_dir)
            .arg("-I.")
            .arg(format!("--go_out={}", generated.display()))
            .arg(format!("--go-grpc_out={}", generated.display()))
            .arg("v1.proto"),
    )?;
    for f in ["v1.pb.go", "v1_grpc.pb.go"] {
        let from = generated.join("k8s.io/cri-api/pkg/apis/runtime/v1").join(f);
        std::fs::copy(&from, stubs.join(f)).map_err(HarnessError::io("copy", &from))?;
    }
    std::fs::copy(&main, pkg.join("main.go")).map_err(HarnessError::io("copy", &main))?;
    run_checked(
        Command::new("go")
            .current_dir(&pkg)
            .env("GO111MODULE", "off")
            .env(
                "GOPATH",
                format!("{}:/usr/share/gocode", work.join("gopath").display()),
            )
            .env("GOCACHE", work.join("cache"))
            .args(["build", "-o"])
            .arg(&bin)
            .arg("."),
    )?;
    Ok(bin)
}
