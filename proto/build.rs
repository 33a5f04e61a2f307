//! Compiles podward's own protos. CRI and containerd protos come from `k8s-cri` and
//! `containerd-client`, which run protoc themselves (Debian's `protobuf-compiler`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "podward/shim/v1/lifecycle.proto",
        "podward/prober/v1/prober.proto",
        "podward/housekeeper/v1/housekeeper.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .type_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        .compile_protos(&protos, &["."])?;
    Ok(())
}
