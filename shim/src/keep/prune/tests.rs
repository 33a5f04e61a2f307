use std::collections::{BTreeSet, HashMap};

use podward_api::cri;
use podward_api::labels;
use prost::Message;

use super::*;
use crate::keep::PORTS_BYTES;

fn names(n: &[&str]) -> BTreeSet<String> {
    n.iter().map(|s| (*s).to_owned()).collect()
}

fn create_request(envs: Vec<cri::KeyValue>, annotations: HashMap<String, String>) -> Vec<u8> {
    cri::CreateContainerRequest {
        pod_sandbox_id: "sb".into(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 2,
            }),
            image: Some(cri::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            command: vec!["sleep".into()],
            envs,
            mounts: vec![cri::Mount {
                container_path: "/data".into(),
                ..Default::default()
            }],
            labels: HashMap::from([
                (labels::POD_UID.to_owned(), "u1".to_owned()),
                ("app".to_owned(), "x".repeat(1000)),
            ]),
            annotations,
            ..Default::default()
        }),
        sandbox_config: Some(cri::PodSandboxConfig {
            hostname: "h".into(),
            ..Default::default()
        }),
    }
    .encode_to_vec()
}

fn kv(k: &str, v: &str) -> cri::KeyValue {
    cri::KeyValue {
        key: k.into(),
        value: v.into(),
    }
}

#[test]
fn a_create_request_keeps_only_what_subscribers_read() {
    let big = "v".repeat(1 << 20);
    let envs = vec![kv("A", "1"), kv("BIG", &big), kv("B", "2")];
    let annotations = HashMap::from([
        (labels::CONTAINER_PORTS.to_owned(), "[]".to_owned()),
        ("example.com/blob".to_owned(), big.clone()),
    ]);
    let raw = create_request(envs, annotations);
    let p = prune(&raw[..], CREATE_CONTAINER_REQUEST, &names(&["B"])).expect("prunes");
    assert!(!p.truncated);
    assert!(p.bytes.len() < 300, "{} bytes kept", p.bytes.len());
    let q = cri::CreateContainerRequest::decode(&p.bytes[..]).expect("decodes");
    assert_eq!(q.pod_sandbox_id, "sb");
    assert!(q.sandbox_config.is_none());
    let c = q.config.expect("config");
    assert_eq!(c.metadata.expect("md").attempt, 2);
    assert_eq!(c.image.expect("image").image, "busybox");
    assert_eq!(c.envs, vec![kv("B", "2")]);
    assert!(c.mounts.is_empty() && c.command.is_empty());
    assert_eq!(
        c.labels,
        HashMap::from([(labels::POD_UID.to_owned(), "u1".to_owned())])
    );
    assert_eq!(
        c.annotations,
        HashMap::from([(labels::CONTAINER_PORTS.to_owned(), "[]".to_owned())])
    );
}

#[test]
fn no_probe_references_keep_no_environment() {
    let raw = create_request(vec![kv("A", "1")], HashMap::new());
    let p = prune(&raw[..], CREATE_CONTAINER_REQUEST, &BTreeSet::new()).expect("prunes");
    let q = cri::CreateContainerRequest::decode(&p.bytes[..]).expect("decodes");
    assert!(q.config.expect("config").envs.is_empty());
}

#[test]
fn a_kept_field_past_its_bound_marks_the_entry_truncated_not_dropped() {
    let big_env = "e".repeat(ENV_BYTES + 1);
    let raw = create_request(
        vec![kv("A", &big_env), kv("B", "2")],
        HashMap::from([(
            labels::CONTAINER_PORTS.to_owned(),
            "p".repeat(PORTS_BYTES + 1),
        )]),
    );
    let p = prune(&raw[..], CREATE_CONTAINER_REQUEST, &names(&["A", "B"])).expect("prunes");
    assert!(p.truncated);
    let c = cri::CreateContainerRequest::decode(&p.bytes[..])
        .expect("decodes")
        .config
        .expect("config");
    assert_eq!(c.envs, vec![kv("B", "2")]);
    assert!(c.annotations.is_empty());
    assert_eq!(c.metadata.expect("md").name, "app");
}

#[test]
fn a_list_reports_the_ids_of_its_truncated_items() {
    let item = |id: &str, probes: usize| cri::PodSandbox {
        id: id.into(),
        state: 1,
        created_at: 7,
        annotations: HashMap::from([
            (labels::PODWARD_PROBES.to_owned(), "p".repeat(probes)),
            ("other".to_owned(), "o".into()),
        ]),
        ..Default::default()
    };
    let raw = cri::ListPodSandboxResponse {
        items: vec![item("a", 10), item("b", PROBES_BYTES + 1)],
    }
    .encode_to_vec();
    let p = prune(&raw[..], LIST_POD_SANDBOX_RESPONSE, &BTreeSet::new()).expect("prunes");
    assert_eq!(p.truncated_ids, vec!["b".to_owned()]);
    let l = cri::ListPodSandboxResponse::decode(&p.bytes[..]).expect("decodes");
    assert_eq!(l.items.len(), 2);
    assert_eq!(l.items[0].annotations.len(), 1);
    assert!(l.items[1].annotations.is_empty());
    assert_eq!((l.items[1].state, l.items[1].created_at), (1, 7));
}

#[test]
fn a_status_keeps_the_ip_and_the_network_mode_and_drops_info() {
    let raw = cri::PodSandboxStatusResponse {
        status: Some(cri::PodSandboxStatus {
            id: "s".into(),
            network: Some(cri::PodSandboxNetworkStatus {
                ip: "10.0.0.1".into(),
                additional_ips: vec![cri::PodIp {
                    ip: "fd00::1".into(),
                }],
            }),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace {
                    options: Some(cri::NamespaceOption {
                        network: 2,
                        ..Default::default()
                    }),
                }),
            }),
            ..Default::default()
        }),
        info: HashMap::from([("info".to_owned(), "x".repeat(4096))]),
        ..Default::default()
    }
    .encode_to_vec();
    let p = prune(&raw[..], POD_SANDBOX_STATUS_RESPONSE, &BTreeSet::new()).expect("prunes");
    let s = cri::PodSandboxStatusResponse::decode(&p.bytes[..]).expect("decodes");
    assert!(s.info.is_empty());
    let st = s.status.expect("status");
    let n = st.network.expect("network");
    assert_eq!((n.ip.as_str(), n.additional_ips.len()), ("10.0.0.1", 1));
    let net = st.linux.and_then(|l| l.namespaces).and_then(|n| n.options);
    assert_eq!(net.map(|o| o.network), Some(2));
}

#[test]
fn junk_is_refused_and_a_map_value_is_found_by_key() {
    assert!(
        prune(
            &[0x0a, 0xff, 0x01][..],
            LIST_POD_SANDBOX_RESPONSE,
            &BTreeSet::new()
        )
        .is_err()
    );
    let raw = cri::ContainerStatusResponse {
        info: HashMap::from([
            ("info".to_owned(), "{}".to_owned()),
            ("other".to_owned(), "o".to_owned()),
        ]),
        ..Default::default()
    }
    .encode_to_vec();
    assert_eq!(
        map_value(&raw[..], 2, "info").expect("walks"),
        Some(b"{}".to_vec())
    );
    assert_eq!(map_value(&raw[..], 2, "none").expect("walks"), None);
}
