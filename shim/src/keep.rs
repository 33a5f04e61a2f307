//! What the index keeps of a CRI object: the fields the Lifecycle API's subscribers and the
//! shim's own logic read, each under a bound a pod author cannot pass.
//!
//! Everything else a pod author writes into a request — the environment (`envFrom` a
//! ConfigMap reaches megabytes), mounts, devices, every annotation and label nobody reads — is
//! skipped on the wire while the message is read ([`prune`]), so it is never decoded, stored,
//! published or cloned. What is read, by whom:
//! - labels: kubelet's `io.kubernetes.pod.{name,namespace,uid}` and
//!   `io.kubernetes.container.name` (the pod UID is the key every subscriber joins on), and
//!   `podward.io/*`;
//! - annotations: `io.kubernetes.container.ports` and `io.kubernetes.pod.terminationGracePeriod`
//!   (the prober's port names and grace), and `podward.io/*` (the prober's `podward.io/probes`);
//! - the environment: only the variables an exec probe can expand, i.e. the `$(NAME)`
//!   references in the pod's `podward.io/probes` annotation ([`env_names`]).
//!
//! A kept field past its bound is left out and the object is marked truncated
//! (`Sandbox.truncated`, `Container.truncated`, `podward_shim_index_truncated_total`), never
//! dropped: the pod's lifecycle is still published, without the field that was too large.

pub mod prune;

use std::collections::BTreeSet;

use podward_api::labels;

/// Bytes of the `podward.io/probes` annotation kept: the API server's limit on a pod's
/// annotations all together (`TotalAnnotationSizeLimitB`, 256 KiB), so a pod the API server
/// accepted is never cut.
pub const PROBES_BYTES: usize = 256 * 1024;
/// Bytes of the `io.kubernetes.container.ports` annotation kept (kubelet's JSON of the
/// container's ports, ~60 bytes a port: about 130 ports).
pub const PORTS_BYTES: usize = 8 * 1024;
/// Bytes of any other kept label or annotation value (kubelet writes names, UIDs and numbers).
pub const VALUE_BYTES: usize = 4 * 1024;
/// Bytes of one object's kept labels and annotations, keys and values together.
pub const MAPS_BYTES: usize = PROBES_BYTES + PORTS_BYTES + 16 * 1024;
/// Bytes of one container's kept environment (names and values of the variables its pod's
/// probes reference).
pub const ENV_BYTES: usize = 16 * 1024;
/// Bytes of an ID, a name, a namespace, a UID, an IP or a runtime handler (kubelet's are
/// DNS names and UUIDs well under this).
pub const NAME_BYTES: usize = 1024;
/// Bytes of an image reference, a container's exit reason or its message (kubelet caps a
/// termination message at 4 KiB).
pub const TEXT_BYTES: usize = 4 * 1024;
/// Longest label or annotation key compared: every kept key is shorter.
pub const KEY_BYTES: usize = 256;

/// The bound on a label value with this key, if the label is kept.
pub fn label_bound(key: &[u8]) -> Option<usize> {
    let kept = [
        labels::POD_NAME,
        labels::POD_NAMESPACE,
        labels::POD_UID,
        labels::CONTAINER_NAME,
    ];
    if kept.iter().any(|k| k.as_bytes() == key) || key.starts_with(b"podward.io/") {
        Some(VALUE_BYTES)
    } else {
        None
    }
}

/// The bound on an annotation value with this key, if the annotation is kept.
pub fn annotation_bound(key: &[u8]) -> Option<usize> {
    if key == labels::PODWARD_PROBES.as_bytes() {
        Some(PROBES_BYTES)
    } else if key == labels::CONTAINER_PORTS.as_bytes() {
        Some(PORTS_BYTES)
    } else if key == labels::POD_TERMINATION_GRACE_PERIOD.as_bytes()
        || key.starts_with(b"podward.io/")
    {
        Some(VALUE_BYTES)
    } else {
        None
    }
}

/// The environment variables an exec probe of this pod can expand: every `$(NAME)` in any
/// string of the `podward.io/probes` annotation's JSON (whichever container or field it is in:
/// a name kept needlessly costs its bytes, a name missed would change a probe's command). Not
/// JSON, or no annotation: none.
pub fn env_names(probes: Option<&str>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let Some(json) = probes else {
        return names;
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(json) else {
        return names;
    };
    let mut stack = vec![&value];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::String(s) => references(s, &mut names),
            serde_json::Value::Array(a) => stack.extend(a),
            serde_json::Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    names
}

/// Adds the names of `s`'s `$(NAME)` references (`$$` escapes a `$`, as the prober's
/// expansion reads it).
fn references(s: &str, names: &mut BTreeSet<String>) {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] != b'$' {
            i += 1;
            continue;
        }
        match bytes[i + 1] {
            b'$' => i += 2,
            b'(' => match bytes[i + 2..].iter().position(|&b| b == b')') {
                Some(close) => {
                    let name = &s[i + 2..i + 2 + close];
                    if !name.is_empty() {
                        names.insert(name.to_owned());
                    }
                    i += close + 3;
                }
                None => return,
            },
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_the_probes_references() {
        let probes = r#"{"app":{"liveness":{"exec":{"command":["sh","-c","test $(A) = $(B_2) && echo $$(C) $(D"]}}}}"#;
        let names = env_names(Some(probes));
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            vec!["A".to_owned(), "B_2".to_owned()]
        );
        assert!(env_names(Some("{not json $(A)")).is_empty());
        assert!(env_names(None).is_empty());
    }

    #[test]
    fn only_the_keys_subscribers_read_are_kept() {
        assert_eq!(label_bound(b"io.kubernetes.pod.uid"), Some(VALUE_BYTES));
        assert_eq!(label_bound(b"io.kubernetes.pod.something"), None);
        assert_eq!(label_bound(b"app"), None);
        assert_eq!(annotation_bound(b"podward.io/probes"), Some(PROBES_BYTES));
        assert_eq!(
            annotation_bound(b"io.kubernetes.container.ports"),
            Some(PORTS_BYTES)
        );
        assert_eq!(annotation_bound(b"io.kubernetes.container.hash"), None);
        assert_eq!(annotation_bound(b"example.com/big"), None);
    }
}
