//! Strict decoding, as the API server's `fieldValidation=Strict` (the default of `kubectl apply`
//! since 1.27): a key the schema does not declare is an error naming its path, in the API
//! server's words (`unknown field "readinessProbe.periodSecond"`). A misspelled key would
//! otherwise be dropped in silence and its probe run with a default the author did not ask for
//! (`failureThresold: 10` becoming 3), or not run at all (`readinesProbe`).

use serde_json::Value;

/// Every field of a core `v1` `Container` (k8s.io/api 1.33, plus `restartPolicyRules`): a
/// whole container spec may be pasted into the annotation, and only the probe fields are read.
const CONTAINER_FIELDS: &[&str] = &[
    "args",
    "command",
    "env",
    "envFrom",
    "image",
    "imagePullPolicy",
    "lifecycle",
    "livenessProbe",
    "name",
    "ports",
    "readinessProbe",
    "resizePolicy",
    "resources",
    "restartPolicy",
    "restartPolicyRules",
    "securityContext",
    "startupProbe",
    "stdin",
    "stdinOnce",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "tty",
    "volumeDevices",
    "volumeMounts",
    "workingDir",
];

/// The API server's strict-decoding message for the key at `path`.
pub(super) fn unknown_field(path: &str) -> String {
    format!("unknown field {path:?}")
}

/// Whether `key` is a field of a container spec.
pub(super) fn is_container_field(key: &str) -> bool {
    CONTAINER_FIELDS.contains(&key)
}

/// Paths (rooted at `root`) of the keys of `raw` that decoding into the typed object left out:
/// `decoded` is that object serialised again, so a key of `raw` absent there (and not `null`,
/// which the API reads as absent) is one the schema does not declare. Arrays are followed
/// element by element (`httpGet.httpHeaders[0].nmae`).
pub(super) fn unknown_paths(root: &str, raw: &Value, decoded: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(root, raw, decoded, &mut out);
    out
}

fn walk(path: &str, raw: &Value, decoded: &Value, out: &mut Vec<String>) {
    match (raw, decoded) {
        (Value::Object(r), Value::Object(d)) => {
            for (k, v) in r {
                let here = format!("{path}.{k}");
                match d.get(k) {
                    Some(dv) => walk(&here, v, dv, out),
                    None if v.is_null() => {}
                    None => out.push(here),
                }
            }
        }
        (Value::Array(r), Value::Array(d)) => {
            for (i, (rv, dv)) in r.iter().zip(d).enumerate() {
                walk(&format!("{path}[{i}]"), rv, dv, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keys_the_decoded_object_lacks_are_unknown_with_their_paths() {
        let raw = json!({"httpGet": {"port": 80, "httpHeaders": [{"name": "a", "vaule": "b"}]},
                         "periodSecond": 1, "timeoutSeconds": null});
        let decoded = json!({"httpGet": {"port": 80, "httpHeaders": [{"name": "a", "value": ""}]}});
        assert_eq!(
            unknown_paths("livenessProbe", &raw, &decoded),
            vec![
                "livenessProbe.httpGet.httpHeaders[0].vaule".to_owned(),
                "livenessProbe.periodSecond".to_owned(),
            ]
        );
        assert_eq!(
            unknown_field("readinesProbe"),
            r#"unknown field "readinesProbe""#
        );
        assert!(is_container_field("image") && !is_container_field("readinesProbe"));
    }
}
