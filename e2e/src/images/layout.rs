//! Writes an OCI image layout as a tar archive (what `ctr images import` and
//! `skopeo copy oci-archive:` read): `oci-layout`, `index.json`, and the layer, config and
//! manifest blobs under `blobs/sha256/`.

use std::io::Read;
use std::path::Path;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::rootfs::ImageConfig;
use crate::error::HarnessError;

const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// The image's reference name inside the archive; the importer adds the repository.
pub(crate) const REF_NAME: &str = "latest";

/// Packs the single-layer image (`layer` is an uncompressed tar) into an OCI archive at `dest`.
pub(crate) fn write_oci_archive(
    layer: &Path,
    config: &ImageConfig,
    dest: &Path,
) -> Result<(), HarnessError> {
    let (layer_digest, layer_size) = digest_file(layer)?;
    let arch = oci_arch();
    let config_json = serde_json::to_vec(&json!({
        "architecture": arch,
        "os": "linux",
        "created": "2023-11-14T22:13:20Z",
        "config": {
            "Env": config.env,
            "Entrypoint": if config.entrypoint.is_empty() { serde_json::Value::Null } else { json!(config.entrypoint) },
            "Cmd": if config.cmd.is_empty() { serde_json::Value::Null } else { json!(config.cmd) },
            "WorkingDir": "/",
        },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer_digest}")] },
        "history": [{ "created_by": "podward-e2e harness", "created": "2023-11-14T22:13:20Z" }],
    }))?;
    let config_digest = digest_bytes(&config_json);
    let manifest_json = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": CONFIG_MEDIA_TYPE,
            "digest": format!("sha256:{config_digest}"),
            "size": config_json.len(),
        },
        "layers": [{
            "mediaType": LAYER_MEDIA_TYPE,
            "digest": format!("sha256:{layer_digest}"),
            "size": layer_size,
        }],
    }))?;
    let manifest_digest = digest_bytes(&manifest_json);
    let index_json = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": MANIFEST_MEDIA_TYPE,
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest_json.len(),
            "platform": { "architecture": arch, "os": "linux" },
            "annotations": { "org.opencontainers.image.ref.name": REF_NAME },
        }],
    }))?;

    let io = |e| HarnessError::io("write OCI archive", dest)(e);
    let file = std::fs::File::create(dest).map_err(HarnessError::io("create", dest))?;
    let mut tar = tar::Builder::new(file);
    append(&mut tar, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#).map_err(io)?;
    append(&mut tar, "index.json", &index_json).map_err(io)?;
    let mut h = file_header(layer_size);
    let layer_file = std::fs::File::open(layer).map_err(HarnessError::io("open", layer))?;
    tar.append_data(&mut h, format!("blobs/sha256/{layer_digest}"), layer_file)
        .map_err(io)?;
    append(
        &mut tar,
        &format!("blobs/sha256/{config_digest}"),
        &config_json,
    )
    .map_err(io)?;
    append(
        &mut tar,
        &format!("blobs/sha256/{manifest_digest}"),
        &manifest_json,
    )
    .map_err(io)?;
    let file = tar.into_inner().map_err(io)?;
    file.sync_all().map_err(io)
}

/// OCI's name for this machine's architecture.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn file_header(size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(size);
    h.set_mtime(0);
    h
}

fn append(tar: &mut tar::Builder<std::fs::File>, path: &str, data: &[u8]) -> std::io::Result<()> {
    let mut h = file_header(data.len() as u64);
    tar.append_data(&mut h, path, data)
}

fn digest_bytes(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// sha256 and size of a file, streamed.
fn digest_file(path: &Path) -> Result<(String, u64), HarnessError> {
    let mut f = std::fs::File::open(path).map_err(HarnessError::io("open", path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(HarnessError::io("read", path))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        h.update(&buf[..n]);
    }
    Ok((hex::encode(h.finalize()), size))
}
