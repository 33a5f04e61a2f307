//! Shared helpers of the chart tests (included with `#[path]` by each `chart_*.rs` and
//! `docs_walk.rs`): rendering `charts/podward` with Helm's own engine
//! (`charts/tests/render.py`, helm-sdkpy) and reading the rendered objects and the docs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// The registry every render passes: the chart has no default (podward publishes no images).
pub(crate) const REGISTRY: &str = "registry.example/podward";

/// The repository root.
pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A file of the repository, as text.
pub(crate) fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// One render of the chart: values files, values merged last, and what the API stand-in reports.
#[derive(Default)]
pub(crate) struct Render {
    values_files: Vec<String>,
    set: Value,
    kube_version: Option<String>,
    namespace_labels: Option<Value>,
    existing: Vec<Value>,
    no_registry: bool,
    release: Option<(String, String)>,
}

/// What Helm produced.
pub(crate) struct Rendered {
    /// The manifest's objects, in Helm's install order.
    pub(crate) objects: Vec<Value>,
    /// NOTES.txt.
    pub(crate) notes: String,
}

impl Rendered {
    /// The first object of `kind`.
    pub(crate) fn find(&self, kind: &str) -> Option<&Value> {
        self.objects.iter().find(|o| o["kind"] == kind)
    }

    /// The first object of `kind`, or a panic naming what was rendered.
    pub(crate) fn get(&self, kind: &str) -> &Value {
        self.find(kind).unwrap_or_else(|| {
            let kinds: Vec<_> = self.objects.iter().map(|o| o["kind"].clone()).collect();
            panic!("no {kind} rendered; got {kinds:?}")
        })
    }
}

impl Render {
    /// The chart's defaults (plus the required registry).
    pub(crate) fn defaults() -> Self {
        Self {
            set: json!({}),
            ..Self::default()
        }
    }

    /// Adds a values file (relative to the repository root).
    pub(crate) fn values(mut self, file: &str) -> Self {
        self.values_files.push(file.to_owned());
        self
    }

    /// Merges `values` last (like `--set-json`).
    pub(crate) fn set(mut self, values: Value) -> Self {
        merge(&mut self.set, values);
        self
    }

    /// The Kubernetes version the API stand-in reports.
    pub(crate) fn kube_version(mut self, v: &str) -> Self {
        self.kube_version = Some(v.to_owned());
        self
    }

    /// The release namespace exists with these labels (what the chart's `lookup` sees).
    pub(crate) fn namespace_labels(mut self, labels: Value) -> Self {
        self.namespace_labels = Some(labels);
        self
    }

    /// These objects exist already (an earlier release's: what the chart's `lookup` finds).
    pub(crate) fn existing(mut self, objects: Vec<Value>) -> Self {
        self.existing = objects;
        self
    }

    /// Installs as release `name` into `namespace` (default: `podward` into `podward-system`).
    pub(crate) fn release(mut self, name: &str, namespace: &str) -> Self {
        self.release = Some((name.to_owned(), namespace.to_owned()));
        self
    }

    /// Leaves `image.registry` unset.
    pub(crate) fn without_registry(mut self) -> Self {
        self.no_registry = true;
        self
    }

    /// Renders; `Err(stderr)` when Helm refused.
    pub(crate) fn try_run(&self) -> Result<Rendered, String> {
        let mut cmd = Command::new("python3");
        cmd.arg(repo().join("charts/tests/render.py"));
        for f in &self.values_files {
            cmd.arg("--values").arg(repo().join(f));
        }
        let mut set = if self.no_registry {
            json!({})
        } else {
            json!({"image": {"registry": REGISTRY}})
        };
        merge(&mut set, self.set.clone());
        cmd.arg("--set-json").arg(set.to_string());
        if let Some(v) = &self.kube_version {
            cmd.arg("--kube-version").arg(v);
        }
        if let Some(l) = &self.namespace_labels {
            cmd.arg("--namespace-labels").arg(l.to_string());
        }
        if !self.existing.is_empty() {
            cmd.arg("--existing")
                .arg(Value::from(self.existing.clone()).to_string());
        }
        if let Some((name, namespace)) = &self.release {
            cmd.arg("--release")
                .arg(name)
                .arg("--namespace")
                .arg(namespace);
        }
        let out = cmd.output().expect("run python3 charts/tests/render.py");
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let v: Value = serde_json::from_slice(&out.stdout).expect("render.py prints JSON");
        let objects = v["objects"].as_array().expect("objects").clone();
        assert!(!objects.is_empty(), "the chart rendered nothing");
        Ok(Rendered {
            objects,
            notes: v["notes"].as_str().unwrap_or_default().to_owned(),
        })
    }

    /// Renders, panicking with Helm's message when it refuses.
    pub(crate) fn run(&self) -> Rendered {
        self.try_run()
            .unwrap_or_else(|e| panic!("render failed:\n{e}"))
    }
}

/// Deep-merges `src` into `dst` (objects key by key, anything else replaced).
fn merge(dst: &mut Value, src: Value) {
    match (dst, src) {
        (Value::Object(d), Value::Object(s)) => {
            for (k, v) in s {
                merge(d.entry(k).or_insert(Value::Null), v);
            }
        }
        (d, s) => *d = s,
    }
}

/// The strings of a JSON array (empty when it is not one).
pub(crate) fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A container of the DaemonSet's pod template.
pub(crate) fn container<'a>(ds: &'a Value, name: &str) -> &'a Value {
    ds["spec"]["template"]["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// The section of a Markdown file that starts at the heading containing `title` and ends at the
/// next heading of the same or a higher level.
pub(crate) fn md_section(doc: &str, title: &str) -> String {
    let mut out = String::new();
    let mut level = 0;
    for line in doc.lines() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        let is_heading = hashes > 0 && line[hashes..].starts_with(' ');
        if level == 0 {
            if is_heading && line.contains(title) {
                level = hashes;
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        if is_heading && hashes <= level {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    assert!(!out.is_empty(), "no section {title:?}");
    out
}

/// The rows of the first Markdown table in `text`, as trimmed cells (header and separator
/// skipped).
pub(crate) fn md_table(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with('|'))
        .take_while(|l| l.trim_start().starts_with('|'))
        .skip(2)
        .map(|l| {
            let l = l.trim();
            let inner = l.strip_prefix('|').unwrap_or(l);
            let inner = inner.strip_suffix('|').unwrap_or(inner);
            // `\|` is a pipe inside a cell (e.g. in a regex).
            let mut cells = vec![String::new()];
            let mut chars = inner.chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '\\' if chars.peek() == Some(&'|') => {
                        cells.last_mut().expect("a cell").push('|');
                        chars.next();
                    }
                    '|' => cells.push(String::new()),
                    c => cells.last_mut().expect("a cell").push(c),
                }
            }
            cells.into_iter().map(|c| c.trim().to_owned()).collect()
        })
        .collect()
}
