//! kubelet's name shapes: the only names the housekeeper ever turns into an action.
//!
//! Every name an action is built from comes from outside the housekeeper: directory entries under
//! the kubelet and log roots, cgroup names under `kubepods`, sandbox and container metadata from
//! CRI. kubelet itself trusts them (`listPodsFromDisk` takes any directory under `pods/` for a UID,
//! `parsePodUIDFromLogsDirectory` any last `_` field), so a root flag that points at the wrong
//! directory makes every entry in it an "orphan". The housekeeper accepts only the exact shapes
//! kubelet produces; anything else is [`Foreign`]: reported, never acted on (`docs/housekeeper.md`,
//! "Names the housekeeper acts on").
//!
//! Where a pod UID comes from (kubernetes/kubernetes):
//! - pods from the API: the API server sets `metadata.uid` on create (`FillObjectMetaSystemFields`
//!   in k8s.io/apiserver/pkg/registry/rest, `NewUUID` in k8s.io/apimachinery/pkg/util/uuid), the
//!   `String()` of a google/uuid (pborman/uuid in old releases): a lowercase 8-4-4-4-12 hex UUID.
//!   Version 4 today, version 1 before, so the version digit is not checked;
//! - static pods (file or URL source): `applyDefaults` in pkg/kubelet/config/common.go hashes the
//!   pod with md5 and `hex.EncodeToString`s it: 32 lowercase hex digits, also written to the
//!   `kubernetes.io/config.hash` annotation. The mirror pod's API UID never reaches the node;
//! - a static pod manifest that sets `metadata.uid` itself keeps it as written (`applyDefaults`
//!   hashes only an empty UID, and pod validation does not look at UIDs). Such a UID can be any
//!   string; it is treated as foreign, so that pod's leftovers are left to kubelet rather than
//!   guessed at.

use std::fmt;
use std::path::PathBuf;

/// Length of a UUID in its 8-4-4-4-12 text form.
const UUID_LEN: usize = 36;
/// Length of a static pod's config hash (md5, hex).
const CONFIG_HASH_LEN: usize = 32;
/// kubelet's `validation.DNS1123LabelMaxLength`.
const DNS1123_LABEL_MAX: usize = 63;
/// kubelet's `validation.DNS1123SubdomainMaxLength`.
const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// How much of a rejected name an error message quotes.
const QUOTE_MAX: usize = 64;

/// A pod UID in one of the shapes kubelet produces (see the module docs). The only way to get one
/// is [`PodUid::parse`], so a value of this type never holds `/`, `.`, `..` or anything else that
/// would change a path it is joined onto.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodUid(String);

impl PodUid {
    /// Accepts an API server UUID (`6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b`) or a static pod's config
    /// hash (`0123456789abcdef0123456789abcdef`), lowercase only, as kubelet writes them.
    pub fn parse(s: &str) -> Result<Self, NameError> {
        if is_uuid(s) || is_config_hash(s) {
            Ok(Self(s.to_owned()))
        } else {
            Err(NameError::Uid(quote(s)))
        }
    }

    /// The UID as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for PodUid {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<PodUid> for String {
    fn from(uid: PodUid) -> Self {
        uid.0
    }
}

fn is_lower_hex(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'f')
}

/// 8-4-4-4-12: dashes at 8, 13, 18 and 23, lowercase hex everywhere else.
fn is_uuid(s: &str) -> bool {
    s.len() == UUID_LEN
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => is_lower_hex(b),
        })
}

fn is_config_hash(s: &str) -> bool {
    s.len() == CONFIG_HASH_LEN && s.bytes().all(is_lower_hex)
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// One label of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, any length.
fn is_label_body(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_lower_alnum(first)
                && is_lower_alnum(last)
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// A namespace's shape: a DNS-1123 label (`IsDNS1123Label` in
/// k8s.io/apimachinery/pkg/util/validation).
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= DNS1123_LABEL_MAX && is_label_body(s)
}

/// A pod name's shape: a DNS-1123 subdomain (`IsDNS1123Subdomain`; pod validation's
/// `ValidatePodName`). Static pods too: kubelet appends `-<lowercased node name>` and validates.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= DNS1123_SUBDOMAIN_MAX && s.split('.').all(is_label_body)
}

/// A pod log directory name, `<namespace>_<name>_<uid>` (kubelet's `BuildPodLogsDirectory`), or the
/// legacy `<uid>` that `parsePodUIDFromLogsDirectory` still accepts (namespace and name empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogDirName {
    /// Pod namespace (empty for the legacy layout).
    pub namespace: String,
    /// Pod name (empty for the legacy layout).
    pub name: String,
    /// Pod UID.
    pub uid: PodUid,
}

/// Parses a log directory name. Namespaces and pod names are DNS names, so they hold no `_`, and a
/// kubelet log dir name splits into exactly three fields (or one, the legacy layout).
pub fn parse_log_dir_name(s: &str) -> Result<LogDirName, NameError> {
    let parts: Vec<&str> = s.split('_').collect();
    match parts.as_slice() {
        [uid] => Ok(LogDirName {
            namespace: String::new(),
            name: String::new(),
            uid: PodUid::parse(uid)?,
        }),
        [namespace, name, uid] => {
            let uid = PodUid::parse(uid)?;
            check_namespace_and_name(namespace, name)?;
            Ok(LogDirName {
                namespace: (*namespace).to_owned(),
                name: (*name).to_owned(),
                uid,
            })
        }
        _ => Err(NameError::LogDirShape(quote(s))),
    }
}

fn check_namespace_and_name(namespace: &str, name: &str) -> Result<(), NameError> {
    if !is_dns1123_label(namespace) {
        return Err(NameError::Namespace(quote(namespace)));
    }
    if !is_dns1123_subdomain(name) {
        return Err(NameError::PodName(quote(name)));
    }
    Ok(())
}

/// Checks the identity of a pod as CRI reports it (sandbox metadata, or a container's
/// `io.kubernetes.pod.uid` label with the namespace and name beside it): what kubelet writes there
/// comes from a validated pod, so anything else was not made by kubelet.
pub fn check_pod(namespace: &str, name: &str, uid: &str) -> Result<PodUid, NameError> {
    let uid = PodUid::parse(uid)?;
    check_namespace_and_name(namespace, name)?;
    Ok(uid)
}

/// Checks a container name from CRI metadata: kubelet's container names are DNS-1123 labels
/// (pod validation's `validateContainers`).
pub fn check_container_name(name: &str) -> Result<(), NameError> {
    if is_dns1123_label(name) {
        Ok(())
    } else {
        Err(NameError::ContainerName(quote(name)))
    }
}

/// Why a name is not one of kubelet's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not a UUID or a static pod's config hash.
    #[error(
        "{0} is not a pod UID (kubelet's are a UUID such as 6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b \
         or a static pod's 32-hex config hash, lowercase)"
    )]
    Uid(String),
    /// Not a DNS-1123 label.
    #[error("namespace {0} is not a DNS-1123 label")]
    Namespace(String),
    /// Not a DNS-1123 subdomain.
    #[error("pod name {0} is not a DNS-1123 subdomain")]
    PodName(String),
    /// Not a DNS-1123 label.
    #[error("container name {0} is not a DNS-1123 label")]
    ContainerName(String),
    /// Neither `<namespace>_<name>_<uid>` nor `<uid>`.
    #[error("{0} is not <namespace>_<name>_<uid> (or a legacy <uid>)")]
    LogDirShape(String),
}

/// A bounded, escaped quote of a hostile name for messages (control characters, newlines and
/// very long names must not reach a log line or a table as they are).
fn quote(s: &str) -> String {
    let mut short: String = s.chars().take(QUOTE_MAX).collect();
    if short.len() < s.len() {
        short.push('…');
    }
    format!("{short:?}")
}

/// An entry found under a root that is not in kubelet's shape: reported, never acted on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Foreign {
    /// The entry.
    pub path: PathBuf,
    /// Why it is not kubelet's.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b";
    const HASH: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn uids_are_uuids_or_config_hashes_in_lowercase_only() {
        assert_eq!(PodUid::parse(UUID).map(String::from), Ok(UUID.to_owned()));
        assert!(PodUid::parse(HASH).is_ok());
        // A version-1 UUID (older API servers) is still kubelet's.
        assert!(PodUid::parse("c2a1f0b6-0b9c-11e8-ba89-0ed5f89f718b").is_ok());
        for bad in [
            "",
            ".",
            "..",
            "/",
            "u1",
            "config",
            "not-a-uid",
            &UUID.to_uppercase(),
            &UUID[1..],
            &format!("{UUID}0"),
            &UUID.replace('-', "_"),
            &UUID.replacen('-', "", 1),
            "6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1g",
            "6b1aa4d46-d1f-4f65-ae2b-0e0ad1dc5b1b",
            &HASH[1..],
            &format!("{HASH}0"),
            "0123456789abcdef0123456789abcdeF",
            "0123456789abcdef/123456789abcdef",
            "0123456789abcdef0123456789abcde\u{e9}",
        ] {
            assert!(PodUid::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn dns_names_follow_kubernetes_validation() {
        for good in ["a", "kube-system", "a1", &"a".repeat(63)] {
            assert!(is_dns1123_label(good), "{good:?}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64), "ä"] {
            assert!(!is_dns1123_label(bad), "{bad:?}");
        }
        for good in [
            "web-0",
            "coredns-5d78c9869d-abcde",
            "a.b.c",
            "etcd-node-1.example",
        ] {
            assert!(is_dns1123_subdomain(good), "{good:?}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a..b",
            ".a",
            "a.",
            "a_b",
            "Web",
            &"a".repeat(254),
        ] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?}");
        }
    }

    #[test]
    fn log_dir_names_need_dns_namespace_and_name_and_a_uid() {
        let n = parse_log_dir_name(&format!("kube-system_coredns-5d78c9869d-abcde_{UUID}"))
            .expect("kubelet's");
        assert_eq!(
            (n.namespace.as_str(), n.name.as_str(), n.uid.as_str()),
            ("kube-system", "coredns-5d78c9869d-abcde", UUID)
        );
        let legacy = parse_log_dir_name(HASH).expect("legacy <uid>");
        assert_eq!((legacy.namespace.as_str(), legacy.uid.as_str()), ("", HASH));
        for bad in [
            "etc".to_owned(),
            "home".to_owned(),
            "u1".to_owned(),
            format!("ns_web-0_{UUID}_x"),
            format!("ns_{UUID}"),
            format!("Default_web-0_{UUID}"),
            format!("ns_web_0_{UUID}"),
            format!("ns_.._{UUID}"),
            format!("ns_web-0_{}", UUID.to_uppercase()),
            format!("_web-0_{UUID}"),
            "ns_web-0_uid".to_owned(),
        ] {
            assert!(parse_log_dir_name(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn messages_quote_hostile_names_escaped_and_bounded() {
        let e = PodUid::parse(&format!("a\nb{}", "x".repeat(500))).expect_err("not a uid");
        let msg = e.to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert!(msg.contains("\\n") && msg.len() < 300, "{msg}");
    }
}
