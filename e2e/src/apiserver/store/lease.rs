//! `coordination.k8s.io/v1` Leases, as kube-apiserver answers them: what the prober's node-lease
//! renewer and the sentinel (leader election, the node leases' list and watch) send.
//!
//! - `POST` of a name that exists is `409 AlreadyExists`.
//! - `PUT` carries the `metadata.resourceVersion` it read: a different current version is
//!   `409 Conflict` ("the object has been modified"), as the registry's optimistic lock answers;
//!   a `PUT` without one is an unconditional update (leases allow it). A `PUT` of a missing
//!   lease that names a version is `404 NotFound` (nothing to update); without one it creates
//!   (leases allow create-on-update). The name in the body must be the URL's (`400`).
//! - `GET` of a missing lease is `404 NotFound`; lists take `labelSelector` (`key`, `!key`,
//!   `key=value`, `key!=value`, comma-joined) and `limit`/`continue`.
//! - The server keeps `uid` and `creationTimestamp`, and sets `namespace` and a new
//!   `resourceVersion` on every write; every write is a watch event.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Change, Failure, Scope, Store, status};

const GROUP_RESOURCE: &str = "leases.coordination.k8s.io";

/// A label selector (equality-based and existence requirements, ANDed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Selector(Vec<Requirement>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    Absent(String),
    Equals(String, String),
    Differs(String, String),
}

impl Selector {
    /// Parses a `labelSelector` query value ("" selects everything).
    pub(crate) fn parse(text: &str) -> Result<Selector, String> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::Differs(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::Absent(k.trim().to_owned())
            } else if part.contains(' ') || part.contains('(') {
                return Err(format!("unable to parse requirement: {part:?}"));
            } else {
                Requirement::Exists(part.to_owned())
            };
            out.push(req);
        }
        Ok(Selector(out))
    }

    /// Whether `labels` satisfy every requirement.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::Absent(k) => !labels.contains_key(k),
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::Differs(k, v) => labels.get(k) != Some(v),
        })
    }
}

fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn not_found(name: &str) -> Failure {
    (
        404,
        status(
            404,
            "NotFound",
            &format!("{GROUP_RESOURCE} \"{name}\" not found"),
        ),
    )
}

/// The RFC 3339 time now, whole seconds (`creationTimestamp`).
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil: (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

impl Store {
    /// Lease `namespace/name`.
    pub(crate) fn get_lease(&self, namespace: &str, name: &str) -> Result<Value, Failure> {
        self.leases
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| not_found(name))
    }

    /// A `LeaseList` page: the leases of `namespace` (every namespace when `None`) that
    /// `selector` matches, `limit` items after the `cont` offset.
    pub(crate) fn list_leases(
        &self,
        namespace: Option<&str>,
        selector: &Selector,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> Value {
        let skip: usize = cont.and_then(|c| c.parse().ok()).unwrap_or(0);
        let matching: Vec<&Value> = self
            .leases
            .iter()
            .filter(|((ns, _), l)| {
                namespace.is_none_or(|w| w == ns) && selector.matches(&labels_of(l))
            })
            .map(|(_, l)| l)
            .collect();
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let items: Vec<Value> = matching
            .iter()
            .skip(skip)
            .take(limit)
            .map(|l| (*l).clone())
            .collect();
        let mut meta = json!({"resourceVersion": self.rv.to_string()});
        if matching.len() > skip.saturating_add(items.len()) {
            meta["continue"] = json!((skip + items.len()).to_string());
        }
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
               "metadata": meta, "items": items})
    }

    /// `POST`: a new lease in `namespace`.
    pub(crate) fn create_lease(
        &mut self,
        namespace: &str,
        mut lease: Value,
    ) -> Result<(Value, Change), Failure> {
        let Some(name) = lease["metadata"]["name"].as_str().map(str::to_owned) else {
            return Err((422, status(422, "Invalid", "metadata.name: Required value")));
        };
        let key = (namespace.to_owned(), name.clone());
        if self.leases.contains_key(&key) {
            return Err((
                409,
                status(
                    409,
                    "AlreadyExists",
                    &format!("{GROUP_RESOURCE} \"{name}\" already exists"),
                ),
            ));
        }
        if lease["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
        {
            return Err((
                500,
                status(
                    500,
                    "InternalError",
                    "resourceVersion should not be set on objects to be created",
                ),
            ));
        }
        self.rv += 1;
        let rv = self.rv;
        lease["apiVersion"] = json!("coordination.k8s.io/v1");
        lease["kind"] = json!("Lease");
        lease["metadata"]["namespace"] = json!(namespace);
        lease["metadata"]["uid"] = json!(format!("lease-{namespace}-{name}-{rv}"));
        lease["metadata"]["creationTimestamp"] = json!(now_rfc3339());
        lease["metadata"]["resourceVersion"] = json!(rv.to_string());
        let change = self.lease_change("ADDED", &lease);
        self.leases.insert(key, lease.clone());
        Ok((lease, change))
    }

    /// `PUT`: replaces lease `namespace/name` if `lease` carries its current resource version.
    pub(crate) fn replace_lease(
        &mut self,
        namespace: &str,
        name: &str,
        mut lease: Value,
    ) -> Result<(Value, Change), Failure> {
        if let Some(body_name) = lease["metadata"]["name"].as_str()
            && body_name != name
        {
            return Err((
                400,
                status(
                    400,
                    "BadRequest",
                    &format!(
                        "the name of the object ({body_name}) does not match the name on the URL ({name})"
                    ),
                ),
            ));
        }
        let wanted = lease["metadata"]["resourceVersion"]
            .as_str()
            .filter(|r| !r.is_empty())
            .map(str::to_owned);
        let key = (namespace.to_owned(), name.to_owned());
        let Some(current) = self.leases.get(&key) else {
            if wanted.is_some() {
                return Err(not_found(name));
            }
            lease["metadata"]["name"] = json!(name);
            return self.create_lease(namespace, lease);
        };
        if let Some(want) = wanted
            && current["metadata"]["resourceVersion"].as_str() != Some(want.as_str())
        {
            return Err((
                409,
                status(
                    409,
                    "Conflict",
                    &format!(
                        "Operation cannot be fulfilled on {GROUP_RESOURCE} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                    ),
                ),
            ));
        }
        let (uid, created) = (
            current["metadata"]["uid"].clone(),
            current["metadata"]["creationTimestamp"].clone(),
        );
        self.rv += 1;
        lease["apiVersion"] = json!("coordination.k8s.io/v1");
        lease["kind"] = json!("Lease");
        lease["metadata"]["name"] = json!(name);
        lease["metadata"]["namespace"] = json!(namespace);
        lease["metadata"]["uid"] = uid;
        lease["metadata"]["creationTimestamp"] = created;
        lease["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let change = self.lease_change("MODIFIED", &lease);
        self.leases.insert(key, lease.clone());
        Ok((lease, change))
    }

    /// `DELETE`: removes lease `namespace/name`.
    pub(crate) fn delete_lease(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<(Value, Change), Failure> {
        let Some(mut lease) = self.leases.remove(&(namespace.to_owned(), name.to_owned())) else {
            return Err(not_found(name));
        };
        self.rv += 1;
        lease["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let change = self.lease_change("DELETED", &lease);
        Ok((lease, change))
    }

    fn lease_change(&mut self, ty: &str, lease: &Value) -> Change {
        let scope = Scope::Lease {
            namespace: lease["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            labels: labels_of(lease),
        };
        self.record_as(ty, lease, scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selectors_match_as_the_api_server_does() {
        let l = labels(&[("podward.io/node-lease", "true"), ("zone", "a")]);
        let yes = [
            "",
            "podward.io/node-lease",
            "zone=a",
            "zone==a",
            "zone!=b,!other",
        ];
        for s in yes {
            assert!(Selector::parse(s).expect(s).matches(&l), "{s}");
        }
        for s in [
            "other",
            "zone=b",
            "zone!=a",
            "!zone",
            "podward.io/node-lease,zone=b",
        ] {
            assert!(!Selector::parse(s).expect(s).matches(&l), "{s}");
        }
        assert!(Selector::parse("zone in (a)").is_err());
    }

    #[test]
    fn a_stale_version_conflicts_and_a_missing_lease_is_not_found() {
        let mut s = Store::new(100);
        let (l, _) = s
            .create_lease("podward", json!({"metadata": {"name": "n1"}, "spec": {}}))
            .expect("create");
        let rv = l["metadata"]["resourceVersion"].clone();
        let again = s.create_lease("podward", json!({"metadata": {"name": "n1"}}));
        assert_eq!(again.expect_err("exists").0, 409);
        let (l2, _) = s
            .replace_lease("podward", "n1", l.clone())
            .expect("replace");
        assert_ne!(l2["metadata"]["resourceVersion"], rv);
        assert_eq!(l2["metadata"]["uid"], l["metadata"]["uid"]);
        let (code, st) = s
            .replace_lease("podward", "n1", l.clone())
            .expect_err("stale");
        assert_eq!((code, st["reason"].as_str()), (409, Some("Conflict")));
        let mut other = l;
        other["metadata"]["name"] = json!("n2");
        let (code, st) = s
            .replace_lease("podward", "n2", other)
            .expect_err("missing");
        assert_eq!((code, st["reason"].as_str()), (404, Some("NotFound")));
        assert_eq!(s.get_lease("podward", "n2").expect_err("missing").0, 404);
        assert_eq!(now_rfc3339().len(), 20);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }
}
