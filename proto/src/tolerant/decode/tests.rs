use std::collections::HashMap;

use proptest::prelude::*;
use prost::Message;

use super::*;
use crate::cri;

/// Replaces `marker` (ASCII, so the lengths on the wire stay right) by `with`, same length.
fn poison(bytes: &[u8], marker: &str, with: &[u8]) -> Vec<u8> {
    assert_eq!(
        marker.len(),
        with.len(),
        "same length keeps every length prefix valid"
    );
    let pos = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .expect("marker in the message");
    let mut out = bytes.to_vec();
    out[pos..pos + with.len()].copy_from_slice(with);
    out
}

fn sandbox(id: &str, annotations: &[(&str, &str)]) -> cri::PodSandbox {
    cri::PodSandbox {
        id: id.to_owned(),
        metadata: Some(cri::PodSandboxMetadata {
            name: format!("pod-{id}"),
            uid: format!("uid-{id}"),
            namespace: "default".to_owned(),
            attempt: 0,
        }),
        state: cri::PodSandboxState::SandboxReady as i32,
        created_at: 7,
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    }
}

#[test]
fn one_invalid_annotation_value_costs_that_value_and_keeps_every_sandbox() {
    let list = cri::ListPodSandboxResponse {
        items: vec![
            sandbox("a", &[("x", "1")]),
            sandbox("b", &[("bad", "caf-MARK"), ("good", "kept")]),
            sandbox("c", &[]),
        ],
    };
    let bytes = poison(&list.encode_to_vec(), "caf-MARK", b"caf\xe9\xff\xfe!!");
    assert!(
        cri::ListPodSandboxResponse::decode(&bytes[..]).is_err(),
        "prost alone refuses the whole List"
    );
    let d = decode::<cri::ListPodSandboxResponse, _>(&bytes[..]).expect("tolerant decode");
    let ids: Vec<&str> = d.message.items.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"], "every sandbox, in order");
    let b = &d.message.items[1];
    assert_eq!(b.annotations["bad"], "caf\u{fffd}\u{fffd}\u{fffd}!!");
    assert_eq!(b.annotations["good"], "kept");
    assert_eq!(b.metadata.as_ref().map(|m| m.uid.as_str()), Some("uid-b"));
    assert_eq!(d.repairs.len(), 1, "{:?}", d.repairs);
    let r = &d.repairs[0];
    assert_eq!(r.action, Action::Replaced);
    assert_eq!(r.object_id.as_deref(), Some("b"));
    assert!(r.reason.contains("PodSandbox.annotations"), "{r}");
    assert!(!d.dropped_any());
}

#[test]
fn invalid_strings_in_names_labels_and_statuses_are_repaired_where_they_are() {
    let mut c = cri::Container {
        id: "c1".to_owned(),
        pod_sandbox_id: "s1".to_owned(),
        metadata: Some(cri::ContainerMetadata {
            name: "nameMARK".to_owned(),
            attempt: 2,
        }),
        labels: HashMap::from([("k".to_owned(), "lblMARK".to_owned())]),
        ..Default::default()
    };
    c.image_ref = "img".to_owned();
    let list = cri::ListContainersResponse {
        containers: vec![c],
    };
    let bytes = poison(&list.encode_to_vec(), "nameMARK", b"name\xc3(\x80\x80");
    let bytes = poison(&bytes, "lblMARK", b"lbl\xf0\x28\x8c\x28");
    let d = decode::<cri::ListContainersResponse, _>(&bytes[..]).expect("decode");
    let c = &d.message.containers[0];
    assert_eq!(c.id, "c1");
    assert!(
        c.metadata
            .as_ref()
            .is_some_and(|m| m.name.starts_with("name\u{fffd}"))
    );
    assert!(c.labels["k"].starts_with("lbl\u{fffd}"));
    assert_eq!(c.metadata.as_ref().map(|m| m.attempt), Some(2));

    let status = cri::PodSandboxStatusResponse {
        status: Some(cri::PodSandboxStatus {
            id: "s1".to_owned(),
            annotations: HashMap::from([("p".to_owned(), "valMARK".to_owned())]),
            network: Some(cri::PodSandboxNetworkStatus {
                ip: "10.0.0.9".to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let bytes = poison(&status.encode_to_vec(), "valMARK", b"val\xff\xff\xff\xff");
    let d = decode::<cri::PodSandboxStatusResponse, _>(&bytes[..]).expect("decode");
    let st = d.message.status.expect("status kept");
    assert_eq!(st.id, "s1");
    assert_eq!(st.network.map(|n| n.ip).as_deref(), Some("10.0.0.9"));
    assert_eq!(d.repairs[0].object_id.as_deref(), Some("s1"));

    let run = cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".to_owned(),
                uid: "u".to_owned(),
                namespace: "n".to_owned(),
                attempt: 0,
            }),
            annotations: HashMap::from([("podward.io/probes".to_owned(), "{MARK}".to_owned())]),
            ..Default::default()
        }),
        runtime_handler: "runc".to_owned(),
    };
    let bytes = poison(&run.encode_to_vec(), "MARK", b"\xff\xfe\xfd\xfc");
    let d = decode::<cri::RunPodSandboxRequest, _>(&bytes[..]).expect("decode");
    let cfg = d.message.config.expect("config kept");
    assert_eq!(cfg.metadata.map(|m| m.uid).as_deref(), Some("u"));
    assert_eq!(
        cfg.annotations["podward.io/probes"],
        "{\u{fffd}\u{fffd}\u{fffd}\u{fffd}}"
    );
    assert_eq!(d.message.runtime_handler, "runc");
}

#[test]
fn an_object_that_cannot_be_repaired_is_dropped_alone_and_named() {
    let list = cri::ListPodSandboxResponse {
        items: vec![sandbox("a", &[]), sandbox("b", &[]), sandbox("c", &[])],
    };
    let mut bytes = list.encode_to_vec();
    // Item "b": its `state` (field 4, a varint) becomes wire type 7, which protobuf does not have.
    let item = sandbox("b", &[]).encode_to_vec();
    let at = bytes
        .windows(item.len())
        .position(|w| w == item.as_slice())
        .expect("item b");
    let state_key = item.iter().position(|b| *b == (4 << 3)).expect("state key");
    bytes[at + state_key] = (4 << 3) | 7;
    let d = decode::<cri::ListPodSandboxResponse, _>(&bytes[..]).expect("decode");
    let ids: Vec<&str> = d.message.items.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["a", "c"]);
    assert!(d.dropped_any());
    assert_eq!(d.dropped_ids().collect::<Vec<_>>(), ["b"]);
}

#[test]
fn a_dropped_object_still_names_its_pod_uid_when_its_label_is_readable() {
    let mut b = sandbox("b", &[]);
    b.labels
        .insert(crate::labels::POD_UID.to_owned(), "uid-of-b".to_owned());
    b.runtime_handler = "RH".to_owned();
    let list = cri::ListPodSandboxResponse {
        items: vec![sandbox("a", &[]), b],
    };
    // `runtime_handler` (field 7, after the labels) gets wire type 7: the object is dropped.
    let bytes = poison(&list.encode_to_vec(), "\x3a\x02RH", b"\x3f\x02RH");
    let d = decode::<cri::ListPodSandboxResponse, _>(&bytes[..]).expect("decode");
    assert_eq!(d.message.items.len(), 1);
    let dropped: Vec<_> = d
        .repairs
        .iter()
        .filter(|r| r.action == Action::Dropped)
        .collect();
    assert_eq!(dropped.len(), 1, "{:?}", d.repairs);
    assert_eq!(dropped[0].object_id.as_deref(), Some("b"));
    assert_eq!(dropped[0].pod_uid.as_deref(), Some("uid-of-b"));
    // An object without the label (or with it unreadable) names no pod.
    let list = cri::ListPodSandboxResponse {
        items: vec![cri::PodSandbox {
            runtime_handler: "RH".to_owned(),
            ..sandbox("c", &[])
        }],
    };
    let bytes = poison(&list.encode_to_vec(), "\x3a\x02RH", b"\x3f\x02RH");
    let d = decode::<cri::ListPodSandboxResponse, _>(&bytes[..]).expect("decode");
    assert_eq!(d.repairs[0].object_id.as_deref(), Some("c"));
    assert_eq!(d.repairs[0].pod_uid, None);
}

#[test]
fn bytes_that_are_not_protobuf_are_an_error() {
    let list = cri::ListPodSandboxResponse {
        items: vec![sandbox("a", &[])],
    };
    let bytes = list.encode_to_vec();
    let truncated = &bytes[..bytes.len() - 3];
    assert!(decode::<cri::ListPodSandboxResponse, _>(truncated).is_err());
}

fn arb_sandbox() -> impl Strategy<Value = cri::PodSandbox> {
    (
        "[a-f0-9]{1,12}",
        proptest::collection::hash_map(".{0,8}", ".{0,16}", 0..4),
        any::<i64>(),
    )
        .prop_map(|(id, ann, created)| cri::PodSandbox {
            id,
            created_at: created,
            annotations: ann,
            metadata: Some(cri::PodSandboxMetadata::default()),
            ..Default::default()
        })
}

proptest! {
    #[test]
    fn well_formed_messages_decode_exactly_as_prost_decodes_them(
        items in proptest::collection::vec(arb_sandbox(), 0..6)
    ) {
        let list = cri::ListPodSandboxResponse { items };
        let bytes = list.encode_to_vec();
        let d = decode::<cri::ListPodSandboxResponse, _>(&bytes[..]).expect("decode");
        prop_assert_eq!(d.message, list);
        prop_assert!(d.repairs.is_empty());
    }

    #[test]
    fn any_corruption_keeps_every_object_whose_bytes_are_intact(
        items in proptest::collection::vec(arb_sandbox(), 1..6),
        victim in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let list = cri::ListPodSandboxResponse { items };
        let v = victim.index(list.items.len());
        // Corrupt bytes inside one item only (its length prefix stays right).
        let mut item = list.items[v].encode_to_vec();
        for (i, b) in &flips {
            if !item.is_empty() {
                let at = i.index(item.len());
                item[at] = *b;
            }
        }
        let mut bytes = Vec::new();
        for (i, it) in list.items.iter().enumerate() {
            let raw = if i == v { item.clone() } else { it.encode_to_vec() };
            bytes.extend_from_slice(&encode_ld(1, &raw));
        }
        let d = decode::<cri::ListPodSandboxResponse, _>(&bytes[..]).expect("decode never fails here");
        let ids: Vec<&str> = d.message.items.iter().map(|s| s.id.as_str()).collect();
        for (i, it) in list.items.iter().enumerate() {
            if i != v {
                prop_assert!(ids.contains(&it.id.as_str()), "{} lost: {:?}", it.id, d.repairs);
            }
        }
        prop_assert!(d.message.items.len() >= list.items.len() - 1);
    }
}
