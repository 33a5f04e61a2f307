//! Choosing containerd's snapshotter: overlayfs where overlay mounts work (the usual case),
//! else native (copies; slower, but works on any filesystem, e.g. an overlay root).

use std::path::Path;

/// `overlayfs` if an overlay mount works under `dir`, else `native`.
pub(super) fn detect(dir: &Path) -> &'static str {
    let sub = ["lower", "upper", "work", "merged"].map(|s| dir.join(s));
    if sub.iter().any(|d| std::fs::create_dir_all(d).is_err()) {
        return "native";
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        sub[0].display(),
        sub[1].display(),
        sub[2].display()
    );
    let mounted = nix::mount::mount(
        Some("overlay"),
        &sub[3],
        Some("overlay"),
        nix::mount::MsFlags::empty(),
        Some(opts.as_str()),
    );
    let result = match mounted {
        Ok(()) => {
            let _ = nix::mount::umount2(&sub[3], nix::mount::MntFlags::MNT_DETACH);
            "overlayfs"
        }
        Err(e) => {
            tracing::warn!(error = %e, "overlay mount failed; using the native snapshotter");
            "native"
        }
    };
    let _ = std::fs::remove_dir_all(dir);
    result
}
