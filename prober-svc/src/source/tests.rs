//! Folding the shim's Watch stream into the manager: snapshot, incremental events, removal,
//! resync, and the fields the workers need (IP, probes, grace, ports, termination).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use podward_api::labels;
use podward_api::shim::v1 as shim;

use super::apply;
use super::index::NodeIndex;
use crate::clock::Clock;
use crate::publish::hub::Hub;
use crate::test_fakes::{self, Never};

const PROBES: &str = r#"{"app":{"readinessProbe":{"exec":{"command":["true"]}}}}"#;

fn sandbox(uid: &str, host_network: bool) -> shim::Sandbox {
    let mut annotations = HashMap::new();
    annotations.insert(labels::PODWARD_PROBES.to_owned(), PROBES.to_owned());
    shim::Sandbox {
        id: format!("sb-{uid}"),
        uid: uid.to_owned(),
        name: format!("pod-{uid}"),
        namespace: "ns".into(),
        pod_ip: if host_network {
            String::new()
        } else {
            "10.1.0.7".into()
        },
        host_network,
        annotations,
        created_at_ns: 1,
        ..Default::default()
    }
}

fn container(uid: &str, id: &str) -> shim::Container {
    let mut annotations = HashMap::new();
    annotations.insert(
        labels::POD_TERMINATION_GRACE_PERIOD.to_owned(),
        "45".to_owned(),
    );
    annotations.insert(
        labels::CONTAINER_PORTS.to_owned(),
        r#"[{"name":"http","containerPort":8080}]"#.to_owned(),
    );
    shim::Container {
        id: id.to_owned(),
        sandbox_id: format!("sb-{uid}"),
        pod_uid: uid.to_owned(),
        name: "app".into(),
        state: shim::ContainerState::Running as i32,
        annotations,
        envs: vec![shim::KeyValue {
            key: "A".into(),
            value: "1".into(),
        }],
        ..Default::default()
    }
}

/// A whole snapshot, as this build's shim sends one.
fn snapshot(sandboxes: Vec<shim::Sandbox>, containers: Vec<shim::Container>) -> shim::WatchEvent {
    snapshot_of(shim::Snapshot {
        sandboxes,
        containers,
        runtime_connected: true,
        complete: true,
        capabilities: vec![podward_api::wire::SHIM_SNAPSHOT_COMPLETE.to_owned()],
        ..Default::default()
    })
}

fn snapshot_of(s: shim::Snapshot) -> shim::WatchEvent {
    shim::WatchEvent {
        event: Some(shim::watch_event::Event::Snapshot(s)),
        ..Default::default()
    }
}

#[tokio::test]
async fn snapshot_events_and_resync_drive_the_manager() {
    let m = test_fakes::manager(
        Arc::new(Never),
        Arc::new(Never),
        &Hub::default(),
        Clock::system(),
    );
    let node_ip: IpAddr = "192.0.2.9".parse().expect("ip");
    let mut index = NodeIndex::new();
    apply(
        &mut index,
        snapshot(
            vec![sandbox("a", false), sandbox("b", true)],
            vec![container("a", "a1")],
        ),
        &m,
        node_ip,
    );
    let mut uids = m.registry().pod_uids();
    uids.sort();
    assert_eq!(uids, vec!["a", "b"]);
    // Pod b has no container yet: its probes wait for it without a worker.
    assert_eq!(m.registry().worker_count(), 1);
    let pod_a = index.pod("a").expect("pod a");
    assert_eq!(pod_a.ip, "10.1.0.7".parse().ok(), "pod IP");
    assert_eq!(
        index.pod("b").expect("pod b").ip,
        Some(node_ip),
        "host network: node IP"
    );
    let c = pod_a.current("app").expect("container");
    assert_eq!(c.pod_grace_seconds, Some(45));
    assert_eq!(c.ports[0].container_port, 8080);
    assert_eq!(&*c.env, &[("A".to_owned(), "1".to_owned())]);

    // A new instance arrives as an event; the status shows it as the current one.
    apply(
        &mut index,
        shim::WatchEvent {
            event: Some(shim::watch_event::Event::Container(shim::ContainerEvent {
                kind: shim::ContainerEventKind::ContainerEventCreated as i32,
                container: Some(shim::Container {
                    attempt: 1,
                    ..container("a", "a2")
                }),
            })),
            ..Default::default()
        },
        &m,
        node_ip,
    );
    let st = m.view().status(Some("a"));
    assert_eq!(st.pods[0].containers[0].container_id, "a2");

    // The sandbox goes: the pod and its worker go.
    apply(
        &mut index,
        shim::WatchEvent {
            event: Some(shim::watch_event::Event::Sandbox(shim::SandboxEvent {
                kind: shim::SandboxEventKind::SandboxEventRemoved as i32,
                sandbox: Some(sandbox("a", false)),
            })),
            ..Default::default()
        },
        &m,
        node_ip,
    );
    assert_eq!(m.registry().pod_uids(), vec!["b"]);

    // A resync snapshot replaces everything.
    apply(
        &mut index,
        snapshot(vec![sandbox("c", false)], vec![container("c", "c1")]),
        &m,
        node_ip,
    );
    assert_eq!(m.registry().pod_uids(), vec!["c"]);
    assert_eq!(m.registry().worker_count(), 1);
}

fn manager() -> crate::pods::manager::Manager {
    test_fakes::manager(
        Arc::new(Never),
        Arc::new(Never),
        &Hub::default(),
        Clock::system(),
    )
}

#[tokio::test]
async fn a_snapshot_before_the_shim_s_rebuild_drops_no_pod() {
    let m = manager();
    let ip: IpAddr = "192.0.2.9".parse().expect("ip");
    let mut index = NodeIndex::new();
    let whole = snapshot(vec![sandbox("a", false)], vec![container("a", "a1")]);
    assert!(apply(&mut index, whole, &m, ip));
    let before = m.view().status(Some("a")).pods[0].containers[0].clone();
    // A shim that has just started: connected, its index not rebuilt yet, so empty.
    let early = shim::Snapshot {
        runtime_connected: true,
        complete: false,
        capabilities: vec![podward_api::wire::SHIM_SNAPSHOT_COMPLETE.to_owned()],
        ..Default::default()
    };
    assert!(!apply(&mut index, snapshot_of(early), &m, ip), "not whole");
    assert_eq!(m.registry().pod_uids(), vec!["a"], "pod a kept");
    assert_eq!(m.registry().worker_count(), 1, "its worker kept");
    // A shim that lost containerd says so: not whole either.
    let blind = shim::Snapshot {
        complete: true,
        capabilities: vec![podward_api::wire::SHIM_SNAPSHOT_COMPLETE.to_owned()],
        ..Default::default()
    };
    assert!(!apply(&mut index, snapshot_of(blind), &m, ip));
    assert_eq!(m.registry().pod_uids(), vec!["a"]);
    // The rebuilt index: the same pod, the same worker (nothing restarted, nothing re-learned).
    let whole = snapshot(vec![sandbox("a", false)], vec![container("a", "a1")]);
    assert!(apply(&mut index, whole, &m, ip));
    let after = m.view().status(Some("a")).pods[0].containers[0].clone();
    assert_eq!(before.container_id, after.container_id);
    assert_eq!(m.registry().worker_count(), 1);
    // And a whole snapshot still drops what is gone.
    assert!(apply(&mut index, snapshot(vec![], vec![]), &m, ip));
    assert!(m.registry().pod_uids().is_empty());
}

#[tokio::test]
async fn an_older_shim_s_connected_snapshot_is_whole() {
    let m = manager();
    let ip: IpAddr = "192.0.2.9".parse().expect("ip");
    let mut index = NodeIndex::new();
    let old = shim::Snapshot {
        sandboxes: vec![sandbox("a", false)],
        runtime_connected: true,
        ..Default::default()
    };
    assert!(apply(&mut index, snapshot_of(old), &m, ip));
    let gone = shim::Snapshot {
        runtime_connected: true,
        ..Default::default()
    };
    assert!(apply(&mut index, snapshot_of(gone), &m, ip));
    assert!(m.registry().pod_uids().is_empty());
}

#[tokio::test]
async fn an_event_kind_from_a_newer_shim_is_no_action() {
    let m = manager();
    let ip: IpAddr = "192.0.2.9".parse().expect("ip");
    let mut index = NodeIndex::new();
    apply(
        &mut index,
        snapshot(vec![sandbox("a", false)], vec![container("a", "a1")]),
        &m,
        ip,
    );
    // Kind 99 about a new container and a new sandbox: neither is added.
    let unknown_container = shim::WatchEvent {
        event: Some(shim::watch_event::Event::Container(shim::ContainerEvent {
            kind: 99,
            container: Some(shim::Container {
                attempt: 1,
                ..container("a", "a2")
            }),
        })),
        ..Default::default()
    };
    assert!(!apply(&mut index, unknown_container, &m, ip));
    let unknown_sandbox = shim::WatchEvent {
        event: Some(shim::watch_event::Event::Sandbox(shim::SandboxEvent {
            kind: 99,
            sandbox: Some(sandbox("b", false)),
        })),
        ..Default::default()
    };
    apply(&mut index, unknown_sandbox, &m, ip);
    assert_eq!(m.registry().pod_uids(), vec!["a"], "no pod b");
    let st = m.view().status(Some("a"));
    assert_eq!(
        st.pods[0].containers[0].container_id, "a1",
        "a2 not applied"
    );
    // Unknown fields inside a known message decode and are ignored (prost skips them).
    use prost::Message;
    let mut bytes = snapshot(vec![sandbox("c", false)], vec![]).encode_to_vec();
    // Field 4000, varint 7: a field this build does not know, at the top level.
    bytes.extend_from_slice(&[0x80, 0xfa, 0x01, 0x07]);
    let ev = shim::WatchEvent::decode(bytes.as_slice()).expect("decodes");
    assert!(apply(&mut index, ev, &m, ip));
    assert_eq!(m.registry().pod_uids(), vec!["c"]);
}
