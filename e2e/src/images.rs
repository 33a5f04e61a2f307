//! The test images, built once per machine into a cache and reused by every test.
//!
//! Inputs are Debian's static `/bin/busybox` and `e2e/assets/pause.c`; the cache key is a hash
//! of both plus [`FORMAT_VERSION`], so a new busybox or an edited pause.c rebuilds. Concurrent
//! test processes serialise on a file lock; the tarballs are written to a temporary name and
//! renamed, so a reader never sees half an image.

mod layout;
mod rootfs;

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use self::rootfs::BUSYBOX_BINARY;
use crate::error::HarnessError;
use crate::lock::FileLock;

/// A busybox image built from Debian's `busybox-static`: `sh`, `cat`, `sleep`, `httpd`, `nc`, ...
pub const BUSYBOX_IMAGE: &str = "podward.test/busybox:latest";
/// A tiny static pause image (`e2e/assets/pause.c`), used as every sandbox's image.
pub const PAUSE_IMAGE: &str = "podward.test/pause:latest";

/// Bump when the image layout code changes, so stale caches are not reused.
const FORMAT_VERSION: &str = "podward-e2e-images/1";

/// The pause program's source.
const PAUSE_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/pause.c");

/// The image cache directory: `$PODWARD_E2E_IMAGE_CACHE`, else
/// `<workspace>/target/podward-e2e-images`. It is shared by every engineer's target dir on the
/// machine, which is the point.
pub fn image_cache_dir() -> PathBuf {
    match std::env::var_os("PODWARD_E2E_IMAGE_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("target")
            .join("podward-e2e-images"),
    }
}

/// The built image tarballs (OCI archives), ready for `ctr images import` or `skopeo copy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageSet {
    /// OCI archive of [`crate::images::BUSYBOX_IMAGE`] (ref name `latest`).
    pub busybox: PathBuf,
    /// OCI archive of [`crate::images::PAUSE_IMAGE`] (ref name `latest`).
    pub pause: PathBuf,
    /// Whether this call built the tarballs (false: they came from the cache).
    pub built: bool,
}

impl ImageSet {
    /// Returns the cached images, building them first when missing or out of date.
    /// Blocking (file lock, gcc): call it from `spawn_blocking` in async code.
    pub fn ensure() -> Result<ImageSet, HarnessError> {
        Self::ensure_in(&image_cache_dir())
    }

    /// [`ImageSet::ensure`] with an explicit cache directory.
    pub fn ensure_in(cache: &Path) -> Result<ImageSet, HarnessError> {
        let key = input_key()?;
        let busybox = cache.join(format!("busybox-{key}.oci.tar"));
        let pause = cache.join(format!("pause-{key}.oci.tar"));
        if busybox.is_file() && pause.is_file() {
            return Ok(ImageSet {
                busybox,
                pause,
                built: false,
            });
        }
        let _lock = FileLock::acquire(&cache.join(".lock"))?;
        // Another process may have built them while we waited for the lock.
        if busybox.is_file() && pause.is_file() {
            return Ok(ImageSet {
                busybox,
                pause,
                built: false,
            });
        }
        let work = tempfile::Builder::new()
            .prefix(".build-")
            .tempdir_in(cache)
            .map_err(HarnessError::io("create build dir in", cache))?;
        let bb_layer = rootfs::busybox_layer(work.path())?;
        write_image(&bb_layer, &rootfs::busybox_config(), &busybox, work.path())?;
        let pause_layer = rootfs::pause_layer(Path::new(PAUSE_SOURCE), work.path())?;
        write_image(&pause_layer, &rootfs::pause_config(), &pause, work.path())?;
        remove_stale(cache, &key);
        tracing::info!(cache = %cache.display(), %key, "built e2e images");
        Ok(ImageSet {
            busybox,
            pause,
            built: true,
        })
    }
}

/// Packs one image and renames it into place atomically.
fn write_image(
    layer: &Path,
    config: &rootfs::ImageConfig,
    dest: &Path,
    work: &Path,
) -> Result<(), HarnessError> {
    let tmp = work.join("image.tar");
    layout::write_oci_archive(layer, config, &tmp)?;
    std::fs::rename(&tmp, dest).map_err(HarnessError::io("rename into place", dest))
}

/// Removes tarballs of older inputs so the cache does not grow forever.
fn remove_stale(cache: &Path, key: &str) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".oci.tar") && !name.contains(key) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Hash of everything an image is built from.
fn input_key() -> Result<String, HarnessError> {
    let mut h = Sha256::new();
    h.update(FORMAT_VERSION.as_bytes());
    for path in [Path::new(BUSYBOX_BINARY), Path::new(PAUSE_SOURCE)] {
        let bytes = std::fs::read(path).map_err(HarnessError::io("read image input", path))?;
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(hex::encode(&h.finalize()[..8]))
}
