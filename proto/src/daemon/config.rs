//! Layered configuration: built-in defaults < TOML file < environment < command-line flags.
//!
//! Each daemon declares a typed `Config` (serde, with defaults) and a clap `Args` whose fields are
//! all `Option` and carry `env = "PODWARD_..."`, so clap already resolves flag-over-env. This
//! module lays the `Some` values of `Args` over the file and deserialises the result into
//! `Config`, so unknown keys in the file are rejected with their name.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

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

/// Loads `C` from the optional TOML `file`, with `overrides` (the parsed flags and environment)
/// laid on top. Fields of `overrides` that serialise to nothing (`None`) leave the lower layers.
pub fn load<C, O>(file: Option<&Path>, overrides: &O) -> Result<C, ConfigError>
where
    C: DeserializeOwned,
    O: Serialize,
{
    let mut table = match file {
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
            message: e.to_string(),
        })
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
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Cfg {
        a: u32,
        b: String,
        nested: Nested,
    }
    #[derive(Debug, Deserialize, PartialEq, Default)]
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
    fn unknown_key_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "nope = 1\n").expect("write");
        let err = load::<Cfg, _>(Some(&f), &Over::default()).expect_err("must fail");
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
