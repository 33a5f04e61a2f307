//! Layered configuration: built-in defaults < TOML file < environment < command-line flags.
//!
//! Each daemon declares a typed `Config` (serde, with defaults) and a clap `Args` whose fields are
//! all `Option` and carry `env = "PODWARD_..."`, so clap already resolves flag-over-env. This
//! module lays the `Some` values of `Args` over the file and deserialises the result into
//! `Config`. A top-level key of the file that this build does not know is left out, not refused:
//! a key that a newer release added (or an older one had) must not stop a daemon across an
//! upgrade or a rollback; [`unknown_keys`] names each, with the nearest known key, for the
//! daemon to log once its logs are up. A known key with a wrong value, or an unknown key inside
//! a table, still fails the start.
//!
//! The settings all three daemons have are one struct, [`Common`], that each `Config` embeds with
//! `#[serde(flatten)]`: its keys stay top-level in the file, and the flags and environment
//! variables stay each daemon's own (their names and help differ per daemon).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::telemetry::LogFormat;
use crate::paths;

/// The settings every daemon has, under the same keys in each daemon's file.
///
/// Embedded with `#[serde(flatten)]`, so it has no `deny_unknown_fields` of its own (serde
/// rejects unknown keys at the embedding struct) and no `Default`: [`load`] lays the embedding
/// daemon's defaults under the file, so a daemon's own default (its admin port) is the one used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Common {
    /// containerd's socket (CRI and containerd's own API).
    pub containerd_socket: PathBuf,
    /// containerd namespace of the CRI plugin.
    pub containerd_namespace: String,
    /// Address of the admin endpoint (`/metrics`, `/healthz`, `/readyz`); keep it on loopback.
    pub admin_addr: SocketAddr,
    /// Log output format.
    pub log_format: LogFormat,
    /// Log filter (`RUST_LOG` syntax).
    pub log_level: String,
}

impl Common {
    /// The built-in defaults, with the admin endpoint on loopback at `admin_port` (each daemon
    /// has its own, so that all three can run on one node).
    pub fn with_admin_port(admin_port: u16) -> Self {
        Self {
            containerd_socket: PathBuf::from(paths::CONTAINERD_SOCKET),
            containerd_namespace: crate::labels::CONTAINERD_K8S_NAMESPACE.to_owned(),
            admin_addr: SocketAddr::from(([127, 0, 0, 1], admin_port)),
            log_format: LogFormat::Text,
            log_level: "info".to_owned(),
        }
    }
}

/// Errors while loading configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or has a wrong or unknown key.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the key.
        message: String,
    },
    /// A flag or environment value does not fit the config schema.
    #[error("invalid setting: {0}")]
    Override(String),
}

/// Loads `C` from `C::default()`, the optional TOML `file` over it, and `overrides` (the parsed
/// flags and environment) on top. Fields of `overrides` that serialise to nothing (`None`) leave
/// the lower layers.
///
/// The defaults are a layer of their own (rather than left to `#[serde(default)]`) because a
/// flattened struct such as [`Common`] would otherwise take its own defaults, not the daemon's.
pub fn load<C, O>(file: Option<&Path>, overrides: &O) -> Result<C, ConfigError>
where
    C: DeserializeOwned + Serialize + Default,
    O: Serialize,
{
    let mut table =
        toml::Table::try_from(C::default()).map_err(|e| ConfigError::Override(e.to_string()))?;
    let from_file = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_owned(),
                source,
            })?;
            toml::from_str::<toml::Table>(&text).map_err(|e| ConfigError::Parse {
                path: path.to_owned(),
                message: e.to_string(),
            })?
        }
        None => toml::Table::new(),
    };
    let known = known_keys::<C>();
    let from_file = from_file
        .into_iter()
        .filter(|(k, _)| known.is_empty() || known.iter().any(|n| n == k))
        .collect();
    merge(&mut table, from_file);
    let over =
        toml::Table::try_from(overrides).map_err(|e| ConfigError::Override(e.to_string()))?;
    merge(&mut table, over);
    let source = file
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from("<flags>"));
    toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::Parse {
            path: source,
            message: with_key_hint(e.to_string().trim_end(), &known_keys::<C>()),
        })
}

/// The top-level keys of `file` that `C` does not have (left out by [`load`]), each as a line for
/// the log: the key, and the nearest known key or the list of them. None without a file, or
/// when it cannot be read (then [`load`] has already said why).
pub fn unknown_keys<C: Serialize + Default>(file: Option<&Path>) -> Vec<String> {
    let Some(path) = file else {
        return Vec::new();
    };
    let Ok(table) = std::fs::read_to_string(path)
        .map_err(drop)
        .and_then(|t| toml::from_str::<toml::Table>(&t).map_err(drop))
    else {
        return Vec::new();
    };
    let known = known_keys::<C>();
    if known.is_empty() {
        return Vec::new();
    }
    table
        .keys()
        .filter(|k| !known.iter().any(|n| n == *k))
        .map(|k| {
            let shown: String = k.chars().take(MAX_HINTED_KEY).collect();
            let message = format!(
                "config file {}: unknown key `{shown}` ignored (a key of another release?)",
                path.display()
            );
            with_key_hint_for(&message, k, &known)
        })
        .collect()
}

/// The top-level keys of `C`, its optional ones included: serialised as JSON, where `None` is
/// `null`, rather than as TOML, which leaves it out.
fn known_keys<C: Serialize + Default>() -> Vec<String> {
    match serde_json::to_value(C::default()) {
        Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// The longest unknown key a nearest key is looked for: twice the longest key any daemon has.
const MAX_HINTED_KEY: usize = 64;

/// `message` with the nearest known key when it names an unknown one. serde names the keys it
/// expected itself, except for a struct that embeds another with `#[serde(flatten)]` (every
/// daemon's, for [`Common`]): there it says only "unknown field".
fn with_key_hint(message: &str, known: &[String]) -> String {
    let unknown = message
        .split_once("unknown field `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(key, _)| key);
    let Some(unknown) = unknown else {
        return message.to_owned();
    };
    if message.contains("expected") {
        return message.to_owned();
    }
    with_key_hint_for(message, unknown, known)
}

/// `message` about key `unknown`, with the nearest of `known` or the list of them.
fn with_key_hint_for(message: &str, unknown: &str, known: &[String]) -> String {
    if known.is_empty() {
        return message.to_owned();
    }
    // Only a key of about a known key's length can be a typo of one; a longer one would cost
    // its length times every key's in the comparison, for a suggestion nobody needs.
    let nearest = known
        .iter()
        .filter(|_| unknown.len() <= MAX_HINTED_KEY)
        .map(|k| (strsim::levenshtein(unknown, k), k))
        .min();
    match nearest {
        Some((distance, key)) if distance <= 3 => format!("{message}; did you mean `{key}`?"),
        _ => format!("{message}; the known keys are {}", known.join(", ")),
    }
}

fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Cfg {
        a: u32,
        b: String,
        nested: Nested,
    }
    #[derive(Debug, Deserialize, Serialize, PartialEq, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Nested {
        x: bool,
    }
    impl Default for Cfg {
        fn default() -> Self {
            Self {
                a: 1,
                b: "def".into(),
                nested: Nested::default(),
            }
        }
    }
    #[derive(Serialize, Default)]
    struct Over {
        #[serde(skip_serializing_if = "Option::is_none")]
        a: Option<u32>,
    }

    #[test]
    fn layers_defaults_file_and_overrides() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "a = 5\nb = \"file\"\n[nested]\nx = true\n").expect("write");
        let c: Cfg = load(Some(&f), &Over { a: Some(9) }).expect("load");
        assert_eq!(c.a, 9);
        assert_eq!(c.b, "file");
        assert!(c.nested.x);
        let c: Cfg = load(None, &Over::default()).expect("load");
        assert_eq!(c, Cfg::default());
    }

    #[test]
    fn an_unknown_key_is_left_out_and_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "nope = 1\na = 3\n").expect("write");
        let c: Cfg = load(Some(&f), &Over::default()).expect("starts");
        assert_eq!(c.a, 3, "the known keys still apply");
        let w = unknown_keys::<Cfg>(Some(&f));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("`nope`") && w[0].contains("ignored"), "{w:?}");
        assert!(unknown_keys::<Cfg>(None).is_empty());
        // A known key with a wrong value still fails.
        std::fs::write(&f, "a = \"three\"\n").expect("write");
        assert!(load::<Cfg, _>(Some(&f), &Over::default()).is_err());
    }

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Daemon {
        own: u32,
        optional: Option<String>,
        #[serde(flatten)]
        common: Common,
    }
    impl Default for Daemon {
        fn default() -> Self {
            Self {
                own: 1,
                optional: None,
                common: Common::with_admin_port(9999),
            }
        }
    }

    #[test]
    fn common_keys_stay_top_level_and_take_the_daemons_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "log_level = \"debug\"\nown = 2\n").expect("write");
        let d: Daemon = load(Some(&f), &Over::default()).expect("load");
        assert_eq!(d.own, 2);
        assert_eq!(d.common.log_level, "debug");
        assert_eq!(d.common.admin_addr.to_string(), "127.0.0.1:9999");
        let d: Daemon = load(None, &Over::default()).expect("load");
        assert_eq!(d, Daemon::default());
        std::fs::write(&f, "log_levle = \"debug\"\n").expect("write");
        load::<Daemon, _>(Some(&f), &Over::default()).expect("starts");
        let w = unknown_keys::<Daemon>(Some(&f));
        assert!(w[0].contains("log_levle"), "{w:?}");
    }

    #[test]
    fn a_mistyped_key_of_a_flattened_struct_gets_the_nearest_key_or_the_list() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.toml");
        let err_for = |text: &str| {
            std::fs::write(&f, text).expect("write");
            load::<Daemon, _>(Some(&f), &Over::default()).expect("starts");
            unknown_keys::<Daemon>(Some(&f)).join("\n")
        };
        // A key of the embedded `Common`, and an optional key (absent from the TOML defaults).
        let err = err_for("log_levle = \"debug\"\n");
        assert!(err.ends_with("did you mean `log_level`?"), "{err}");
        let err = err_for("optionl = \"x\"\n");
        assert!(err.ends_with("did you mean `optional`?"), "{err}");
        // Nothing near: every key is listed, the optional and the embedded ones too.
        let err = err_for("completely_different = 1\n");
        assert!(err.contains("the known keys are "), "{err}");
        for key in ["own", "optional", "containerd_socket", "log_level"] {
            assert!(err.contains(key), "{key} missing: {err}");
        }
    }

    #[test]
    fn a_huge_unknown_key_gets_the_list_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.toml");
        std::fs::write(&f, format!("{} = 1\n", "k".repeat(1 << 20))).expect("write");
        let started = std::time::Instant::now();
        load::<Daemon, _>(Some(&f), &Over::default()).expect("starts");
        let err = unknown_keys::<Daemon>(Some(&f)).join("\n");
        assert!(
            err.contains("the known keys are "),
            "{}",
            &err[err.len().saturating_sub(200)..]
        );
        assert!(err.len() < 4096, "the huge key is not repeated whole");
        assert!(!err.contains("did you mean"));
        // Compared with every key, a 1 MiB key takes seconds; skipped, it is parsing alone.
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn serdes_own_list_is_kept_where_it_gives_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "[nested]\ny = true\n").expect("write");
        let err = load::<Cfg, _>(Some(&f), &Over::default()).expect_err("must fail");
        let err = err.to_string();
        assert!(err.contains("expected"), "{err}");
        assert!(
            !err.contains("did you mean") && !err.contains("known keys"),
            "{err}"
        );
    }
}
