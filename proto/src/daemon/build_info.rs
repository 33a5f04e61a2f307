//! `podward_<daemon>_build_info`: one constant gauge (value 1) whose labels say which build runs,
//! in the shape of Kubernetes' own `kubernetes_build_info`, so a fleet-wide query such as
//! `count by (version) (podward_prober_build_info)` shows a rollout's progress and a debug build
//! that slipped into production stands out.

use prometheus::{IntGaugeVec, Opts, Registry};

/// Set by `deploy/build-release.sh` (the git commit the binaries were built from); read at compile
/// time, so a rebuild with another commit changes the label.
const REVISION: Option<&str> = option_env!("PODWARD_BUILD_REVISION");

/// The labels of one build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildInfo {
    /// The daemon's crate version (`CARGO_PKG_VERSION` of the binary's crate).
    pub version: String,
    /// The git commit, or `unknown` when the build did not say.
    pub revision: String,
    /// The CPU architecture, in Kubernetes' spelling (`amd64`, `arm64`), to match node labels.
    pub arch: String,
    /// `release` or `debug` (a debug build is several times slower).
    pub profile: String,
}

impl BuildInfo {
    /// The running build of a daemon whose crate version is `version`.
    pub fn current(version: &str) -> Self {
        Self {
            version: version.to_owned(),
            revision: REVISION
                .filter(|r| !r.is_empty())
                .unwrap_or("unknown")
                .to_owned(),
            arch: kube_arch(std::env::consts::ARCH).to_owned(),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_owned(),
        }
    }
}

/// Rust's architecture names in the spelling of the `kubernetes.io/arch` node label.
fn kube_arch(rust: &str) -> &str {
    match rust {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// Registers `podward_<daemon>_build_info{version,revision,arch,profile} 1` in `registry` for a
/// daemon whose crate version is `version` (pass `env!("CARGO_PKG_VERSION")`). A registration
/// failure (the family is already there) is logged, never fatal: a daemon must not refuse to
/// start over a label gauge.
pub fn register(registry: &Registry, daemon: &str, version: &str) {
    if let Err(e) = try_register(registry, daemon, &BuildInfo::current(version)) {
        tracing::warn!(error = %e, daemon, "cannot register the build_info metric");
    }
}

fn try_register(
    registry: &Registry,
    daemon: &str,
    info: &BuildInfo,
) -> Result<(), prometheus::Error> {
    let gauge = IntGaugeVec::new(
        Opts::new(
            format!("podward_{daemon}_build_info"),
            format!("Constant 1, labelled with the build of podward-{daemon} that is running."),
        ),
        &["version", "revision", "arch", "profile"],
    )?;
    gauge
        .with_label_values(&[&info.version, &info.revision, &info.arch, &info.profile])
        .set(1);
    registry.register(Box::new(gauge))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, TextEncoder};

    fn text(registry: &Registry) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut buf)
            .expect("encode");
        String::from_utf8(buf).expect("utf-8")
    }

    #[test]
    fn build_info_is_one_series_with_the_build_labels() {
        let registry = Registry::new();
        register(&registry, "prober", "1.2.3");
        let text = text(&registry);
        let info = BuildInfo::current("1.2.3");
        let line = format!(
            "podward_prober_build_info{{arch=\"{}\",profile=\"{}\",revision=\"{}\",version=\"1.2.3\"}} 1",
            info.arch, info.profile, info.revision
        );
        assert!(text.contains(&line), "{line} not in:\n{text}");
        assert!(text.contains("# TYPE podward_prober_build_info gauge"));
        assert_eq!(text.matches("podward_prober_build_info{").count(), 1);
    }

    #[test]
    fn arch_uses_the_node_label_spelling() {
        assert_eq!(kube_arch("x86_64"), "amd64");
        assert_eq!(kube_arch("aarch64"), "arm64");
        assert_eq!(kube_arch("riscv64"), "riscv64");
        let here = BuildInfo::current("0.0.0").arch;
        assert!(!here.contains('_'), "{here}");
    }

    #[test]
    fn registering_twice_keeps_the_first_and_does_not_panic() {
        let registry = Registry::new();
        register(&registry, "shim", "1.0.0");
        register(&registry, "shim", "2.0.0");
        let text = text(&registry);
        assert!(text.contains("version=\"1.0.0\""), "{text}");
        assert!(!text.contains("version=\"2.0.0\""), "{text}");
    }
}
