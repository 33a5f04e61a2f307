//! Index state machine tests: every observation kind, ordering and the merge rules.

use std::collections::HashMap;

use podward_api::cri;
use podward_api::shim::v1::{
    ContainerEventKind as CK, ContainerState, Delivery, SandboxEventKind as SK, SandboxState,
};

use super::entries::{ContainerScan, Index, SandboxScan};
use super::lists::LIST_GRACE_NS;
use super::observation::{Change, Observation};

/// A List's send time well after every call of these tests (past the grace a List lacking an
/// entry is given).
const LATER: i64 = 10 * LIST_GRACE_NS;

fn sandbox_config(name: &str, attempt: u32, host_net: bool) -> cri::PodSandboxConfig {
    let mut labels = HashMap::new();
    labels.insert("io.kubernetes.pod.uid".to_owned(), format!("uid-{name}"));
    let mut annotations = HashMap::new();
    annotations.insert("podward.io/probes".to_owned(), "{}".to_owned());
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.to_owned(),
            uid: format!("uid-{name}"),
            namespace: "ns".to_owned(),
            attempt,
        }),
        labels,
        annotations,
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: if host_net {
                        cri::NamespaceMode::Node as i32
                    } else {
                        0
                    },
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(name: &str, attempt: u32) -> cri::ContainerConfig {
    let mut labels = HashMap::new();
    labels.insert("io.kubernetes.pod.uid".to_owned(), "uid-p".to_owned());
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.to_owned(),
            attempt,
        }),
        image: Some(cri::ImageSpec {
            image: "busybox".to_owned(),
            ..Default::default()
        }),
        envs: vec![
            cri::KeyValue {
                key: "B".into(),
                value: "2".into(),
            },
            cri::KeyValue {
                key: "A".into(),
                value: "1".into(),
            },
        ],
        labels,
        ..Default::default()
    }
}

fn run(idx: &mut Index, id: &str, delivery: Delivery) -> Vec<Change> {
    idx.apply(Observation::SandboxRun {
        config: sandbox_config("p", 0, true),
        runtime_handler: String::new(),
        sandbox_id: id.to_owned(),
        delivery,
        at_ns: 100,
    })
}

fn create(idx: &mut Index, id: &str, delivery: Delivery) -> Vec<Change> {
    idx.apply(Observation::ContainerCreate {
        sandbox_id: "s1".into(),
        config: container_config("web", 0),
        container_id: id.to_owned(),
        delivery,
        at_ns: 200,
    })
}

fn kinds(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|c| match c {
            Change::Sandbox(k, s) => format!("{}:{}", k.as_str_name(), s.id),
            Change::Container(k, c) => format!("{}:{}", k.as_str_name(), c.id),
        })
        .collect()
}

#[test]
fn full_lifecycle_emits_ordered_events() {
    let mut idx = Index::new();
    let mut all = Vec::new();
    all.extend(run(&mut idx, "s1", Delivery::Delivered));
    all.extend(create(&mut idx, "c1", Delivery::Delivered));
    all.extend(idx.apply(Observation::ContainerStart {
        id: "c1".into(),
        at_ns: 300,
    }));
    all.extend(idx.apply(Observation::ContainerStop {
        id: "c1".into(),
        timeout_seconds: 30,
        requested_at_ns: 400,
        completed: false,
    }));
    all.extend(idx.apply(Observation::TaskExit {
        container_id: "c1".into(),
        exit_code: 137,
        exited_at_ns: 450,
    }));
    all.extend(idx.apply(Observation::ContainerStop {
        id: "c1".into(),
        timeout_seconds: 30,
        requested_at_ns: 460,
        completed: true,
    }));
    all.extend(idx.apply(Observation::SandboxStop {
        id: "s1".into(),
        requested_at_ns: 500,
        completed: true,
    }));
    all.extend(idx.apply(Observation::ContainerRemove { id: "c1".into() }));
    all.extend(idx.apply(Observation::SandboxRemove { id: "s1".into() }));
    assert_eq!(
        kinds(&all),
        vec![
            "SANDBOX_EVENT_CREATED:s1",
            "CONTAINER_EVENT_CREATED:c1",
            "CONTAINER_EVENT_STARTED:c1",
            "CONTAINER_EVENT_UPDATED:c1",
            "CONTAINER_EVENT_EXITED:c1",
            "SANDBOX_EVENT_STOPPED:s1",
            "CONTAINER_EVENT_REMOVED:c1",
            "SANDBOX_EVENT_REMOVED:s1",
        ]
    );
    let Change::Container(_, exited) = &all[4] else {
        panic!("not a container change")
    };
    assert_eq!(exited.exit_code, 137);
    assert_eq!(exited.finished_at_ns, 450);
    assert_eq!(exited.stop_requested_at_ns, 400);
    assert_eq!(exited.stop_timeout_seconds, 30);
    assert_eq!(exited.pod_uid, "uid-p");
    let envs: Vec<(&str, &str)> = exited
        .envs
        .iter()
        .map(|kv| (&*kv.key, &*kv.value))
        .collect();
    assert_eq!(
        envs,
        vec![("B", "2"), ("A", "1")],
        "declaration order is kept"
    );
    assert_eq!(idx.sandbox_count() + idx.container_count(), 0);
}

#[test]
fn sandbox_from_run_keeps_metadata_annotations_and_network_mode() {
    let mut idx = Index::new();
    run(&mut idx, "s1", Delivery::Delivered);
    let s = idx.sandbox("s1").expect("indexed");
    assert_eq!(
        (s.name.as_str(), s.namespace.as_str(), s.uid.as_str()),
        ("p", "ns", "uid-p")
    );
    assert!(s.host_network);
    assert_eq!(
        s.annotations.get("podward.io/probes").map(String::as_str),
        Some("{}")
    );
    assert_eq!(s.run_delivery, Delivery::Delivered as i32);
    assert_eq!(s.state, SandboxState::Ready as i32);
}

#[test]
fn undelivered_run_and_create_emit_undelivered() {
    let mut idx = Index::new();
    let ch = run(&mut idx, "s1", Delivery::Undelivered);
    assert_eq!(
        kinds(&ch),
        vec!["SANDBOX_EVENT_CREATED:s1", "SANDBOX_EVENT_UNDELIVERED:s1"]
    );
    let ch = create(&mut idx, "c1", Delivery::Undelivered);
    assert_eq!(
        kinds(&ch),
        vec![
            "CONTAINER_EVENT_CREATED:c1",
            "CONTAINER_EVENT_UNDELIVERED:c1"
        ]
    );
    assert_eq!(
        idx.container("c1").expect("c1").create_delivery,
        Delivery::Undelivered as i32
    );
}

#[test]
fn abandoned_run_is_recognised_when_its_sandbox_shows_up_in_a_list() {
    let mut idx = Index::new();
    let md = sandbox_config("p", 1, true).metadata.expect("md");
    assert!(
        idx.apply(Observation::SandboxRunAbandoned {
            metadata: md.clone()
        })
        .is_empty()
    );
    let listed = cri::PodSandbox {
        id: "s9".into(),
        metadata: Some(md),
        state: cri::PodSandboxState::SandboxReady as i32,
        created_at: 5,
        ..Default::default()
    };
    let ch = idx.apply(Observation::SandboxList {
        items: vec![listed.clone()],
        complete: true,
        listed_at_ns: LATER,
    });
    assert_eq!(
        kinds(&ch),
        vec!["SANDBOX_EVENT_CREATED:s9", "SANDBOX_EVENT_UNDELIVERED:s9"]
    );
    // Another sandbox of the same pod with a different attempt is not the abandoned one.
    let mut other = listed;
    other.id = "s10".into();
    if let Some(m) = other.metadata.as_mut() {
        m.attempt = 2;
    }
    let ch = idx.apply(Observation::SandboxList {
        items: vec![other],
        complete: false,
        listed_at_ns: LATER,
    });
    assert_eq!(kinds(&ch), vec!["SANDBOX_EVENT_CREATED:s10"]);
}

#[test]
fn complete_list_removes_vanished_entries_but_filtered_list_does_not() {
    let mut idx = Index::new();
    run(&mut idx, "s1", Delivery::Delivered);
    create(&mut idx, "c1", Delivery::Delivered);
    let ch = idx.apply(Observation::ContainerList {
        items: vec![],
        complete: false,
        listed_at_ns: LATER,
    });
    assert!(ch.is_empty());
    let ch = idx.apply(Observation::ContainerList {
        items: vec![],
        complete: true,
        listed_at_ns: LATER,
    });
    assert_eq!(kinds(&ch), vec!["CONTAINER_EVENT_REMOVED:c1"]);
    let ch = idx.apply(Observation::SandboxList {
        items: vec![],
        complete: true,
        listed_at_ns: LATER,
    });
    assert_eq!(kinds(&ch), vec!["SANDBOX_EVENT_REMOVED:s1"]);
}

#[test]
fn a_list_sent_before_an_entry_was_known_to_exist_never_removes_it() {
    let mut idx = Index::new();
    // RunPodSandbox and CreateContainer completed at 100 and 200: a List sent at 150 may have
    // been answered before the sandbox was in containerd's store, and one sent at 50 before
    // either.
    run(&mut idx, "s1", Delivery::Delivered);
    create(&mut idx, "c1", Delivery::Delivered);
    let stale = |listed_at_ns| Observation::SandboxList {
        items: vec![],
        complete: true,
        listed_at_ns,
    };
    assert!(idx.apply(stale(50)).is_empty());
    assert!(
        idx.apply(stale(100)).is_empty(),
        "sent as the call completed"
    );
    let ch = idx.apply(Observation::ContainerList {
        items: vec![],
        complete: true,
        listed_at_ns: 150,
    });
    assert!(ch.is_empty(), "{:?}", kinds(&ch));
    // Listed by a List sent at 900: a List sent at 800, answered after it, is older news.
    let listed = cri::PodSandbox {
        id: "s1".into(),
        state: cri::PodSandboxState::SandboxReady as i32,
        ..Default::default()
    };
    idx.apply(Observation::SandboxList {
        items: vec![listed],
        complete: false,
        listed_at_ns: 900,
    });
    assert!(idx.apply(stale(800)).is_empty());
    // containerd's List can leave out a sandbox for a moment after its RunPodSandbox returned:
    // a List lacking it is believed only once the entry was last known to exist a while before.
    assert!(idx.apply(stale(901)).is_empty());
    assert!(idx.apply(stale(900 + LIST_GRACE_NS)).is_empty());
    assert!(idx.sandbox("s1").is_some() && idx.container("c1").is_some());
    let ch = idx.apply(stale(901 + LIST_GRACE_NS));
    assert_eq!(
        kinds(&ch),
        vec!["CONTAINER_EVENT_REMOVED:c1", "SANDBOX_EVENT_REMOVED:s1"]
    );
}

#[test]
fn stale_list_does_not_undo_an_exit_and_identical_list_is_silent() {
    let mut idx = Index::new();
    run(&mut idx, "s1", Delivery::Delivered);
    create(&mut idx, "c1", Delivery::Delivered);
    idx.apply(Observation::ContainerStart {
        id: "c1".into(),
        at_ns: 1,
    });
    idx.apply(Observation::TaskExit {
        container_id: "c1".into(),
        exit_code: 1,
        exited_at_ns: 9,
    });
    let c = idx.container("c1").expect("c1").clone();
    let listed = cri::Container {
        id: "c1".into(),
        pod_sandbox_id: "s1".into(),
        metadata: Some(cri::ContainerMetadata {
            name: "web".into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        }),
        state: cri::ContainerState::ContainerRunning as i32,
        created_at: c.created_at_ns,
        labels: c.labels.clone(),
        annotations: c.annotations.clone(),
        ..Default::default()
    };
    let ch = idx.apply(Observation::ContainerList {
        items: vec![listed],
        complete: true,
        listed_at_ns: LATER,
    });
    assert!(ch.is_empty(), "{:?}", kinds(&ch));
    assert_eq!(
        idx.container("c1").expect("c1").state,
        ContainerState::Exited as i32
    );
    // A repeated exit event changes nothing.
    let ch = idx.apply(Observation::TaskExit {
        container_id: "c1".into(),
        exit_code: 1,
        exited_at_ns: 9,
    });
    assert!(ch.is_empty());
}

#[test]
fn exit_seen_first_in_a_list_is_completed_by_the_event() {
    let mut idx = Index::new();
    create(&mut idx, "c1", Delivery::Delivered);
    let c = idx.container("c1").expect("c1").clone();
    let listed = cri::Container {
        id: "c1".into(),
        pod_sandbox_id: "s1".into(),
        metadata: Some(cri::ContainerMetadata {
            name: "web".into(),
            attempt: 0,
        }),
        state: cri::ContainerState::ContainerExited as i32,
        labels: c.labels.clone(),
        annotations: c.annotations.clone(),
        ..Default::default()
    };
    let ch = idx.apply(Observation::ContainerList {
        items: vec![listed],
        complete: false,
        listed_at_ns: LATER,
    });
    assert_eq!(kinds(&ch), vec!["CONTAINER_EVENT_EXITED:c1"]);
    let ch = idx.apply(Observation::TaskExit {
        container_id: "c1".into(),
        exit_code: 3,
        exited_at_ns: 77,
    });
    assert_eq!(kinds(&ch), vec!["CONTAINER_EVENT_EXITED:c1"]);
    assert_eq!(idx.container("c1").expect("c1").exit_code, 3);
}

#[test]
fn sandbox_status_brings_ip_and_oom_marks_container() {
    let mut idx = Index::new();
    run(&mut idx, "s1", Delivery::Delivered);
    create(&mut idx, "c1", Delivery::Delivered);
    let status = cri::PodSandboxStatus {
        id: "s1".into(),
        metadata: sandbox_config("p", 0, false).metadata,
        state: cri::PodSandboxState::SandboxReady as i32,
        created_at: 100,
        network: Some(cri::PodSandboxNetworkStatus {
            ip: "10.0.0.5".into(),
            additional_ips: vec![cri::PodIp {
                ip: "fd00::5".into(),
            }],
        }),
        labels: idx.sandbox("s1").expect("s1").labels.clone(),
        annotations: idx.sandbox("s1").expect("s1").annotations.clone(),
        ..Default::default()
    };
    let ch = idx.apply(Observation::SandboxStatus {
        status,
        host_network: Some(false),
    });
    assert_eq!(kinds(&ch), vec!["SANDBOX_EVENT_UPDATED:s1"]);
    let s = idx.sandbox("s1").expect("s1");
    assert_eq!(s.pod_ip, "10.0.0.5");
    assert_eq!(s.additional_ips, vec!["fd00::5".to_owned()]);
    assert_eq!(
        s.run_delivery,
        Delivery::Delivered as i32,
        "status keeps delivery"
    );
    let ch = idx.apply(Observation::TaskOom {
        container_id: "c1".into(),
    });
    assert_eq!(kinds(&ch), vec!["CONTAINER_EVENT_OOM:c1"]);
    assert!(idx.container("c1").expect("c1").oom_killed);
    // The sandbox's own task exiting makes it NOTREADY.
    let ch = idx.apply(Observation::TaskExit {
        container_id: "s1".into(),
        exit_code: 0,
        exited_at_ns: 1,
    });
    assert_eq!(kinds(&ch), vec!["SANDBOX_EVENT_STOPPED:s1"]);
    // Deleting the sandbox's containerd record removes it and its containers.
    let ch = idx.apply(Observation::ContainerDeleted { id: "s1".into() });
    assert_eq!(
        kinds(&ch),
        vec!["CONTAINER_EVENT_REMOVED:c1", "SANDBOX_EVENT_REMOVED:s1"]
    );
}

#[test]
fn rebuild_replaces_but_keeps_delivery_and_stop_requests() {
    let mut idx = Index::new();
    run(&mut idx, "s1", Delivery::Undelivered);
    run(&mut idx, "s2", Delivery::Delivered);
    idx.apply(Observation::SandboxStop {
        id: "s1".into(),
        requested_at_ns: 42,
        completed: false,
    });
    let mut s1 = idx.sandbox("s1").expect("s1").clone();
    s1.run_delivery = Delivery::Unknown as i32;
    s1.stop_requested_at_ns = 0;
    let ch = idx.apply(Observation::Rebuilt {
        sandboxes: vec![s1],
        containers: vec![],
    });
    assert_eq!(kinds(&ch), vec!["SANDBOX_EVENT_REMOVED:s2"]);
    let s1 = idx.sandbox("s1").expect("s1");
    assert_eq!(s1.run_delivery, Delivery::Undelivered as i32);
    assert_eq!(s1.stop_requested_at_ns, 42);
    let snap = idx.snapshot(7, "inst", true, false, 1);
    assert_eq!(snap.sandboxes.len(), 1);
    assert_eq!(snap.seq, 7);
}

#[test]
fn unknown_ids_are_ignored() {
    let mut idx = Index::new();
    for obs in [
        Observation::ContainerStart {
            id: "x".into(),
            at_ns: 1,
        },
        Observation::ContainerRemove { id: "x".into() },
        Observation::SandboxRemove { id: "x".into() },
        Observation::TaskExit {
            container_id: "x".into(),
            exit_code: 1,
            exited_at_ns: 1,
        },
        Observation::TaskOom {
            container_id: "x".into(),
        },
        Observation::ContainerDeleted { id: "x".into() },
    ] {
        assert!(idx.apply(obs).is_empty());
    }
    let _ = SK::SandboxEventUpdated;
    let _ = CK::ContainerEventUpdated;
}

#[test]
fn a_relist_removes_only_what_existed_before_it_listed() {
    let mut idx = Index::new();
    run(&mut idx, "old", Delivery::Delivered);
    run(&mut idx, "new", Delivery::Delivered);
    let created = |id: &str| idx.sandbox(id).expect("sandbox").created_at_ns;
    let (old_at, new_at) = (created("old"), created("new"));
    // Listed between the two: neither is in the list. "old" is gone; "new" was seen on an
    // observed connection after the list was taken and stays.
    let listed_at_ns = new_at.max(old_at) + LIST_GRACE_NS + 1;
    idx.sandboxes.get_mut("new").expect("new").created_at_ns = listed_at_ns;
    let ch = idx.apply(Observation::Relisted {
        sandboxes: vec![],
        containers: vec![],
        sandbox_ids: Default::default(),
        container_ids: Default::default(),
        listed_at_ns,
    });
    assert_eq!(kinds(&ch), vec!["SANDBOX_EVENT_REMOVED:old"]);
    assert!(idx.sandbox("new").is_some());
    // Listed and known as listed: no Status needed; listed in another state: read whole.
    let listed = |state| cri::PodSandbox {
        id: "new".into(),
        state,
        ..Default::default()
    };
    assert!(idx.knows_sandbox(&listed(cri::PodSandboxState::SandboxReady as i32)));
    assert!(!idx.knows_sandbox(&listed(cri::PodSandboxState::SandboxNotready as i32)));
}

#[test]
fn the_scan_views_read_the_fields_of_the_messages_they_stand_for() {
    use podward_api::shim::v1::{Container, Sandbox};
    use prost::Message;
    let c = Container {
        id: "c".into(),
        sandbox_id: "s".into(),
        pod_uid: "u".into(),
        labels: HashMap::from([("k".into(), "v".into())]),
        annotations: HashMap::from([("big".into(), "a".repeat(1 << 16))]),
        state: ContainerState::Exited as i32,
        created_at_ns: 7,
        started_at_ns: 8,
        finished_at_ns: 10,
        stop_requested_at_ns: 9,
        ..Container::default()
    };
    let view = ContainerScan::decode(&*c.encode_to_vec()).unwrap_or_default();
    assert_eq!(
        view,
        ContainerScan {
            sandbox_id: "s".into(),
            state: ContainerState::Exited as i32,
            created_at_ns: 7,
            finished_at_ns: 10,
        }
    );
    let s = Sandbox {
        id: "s".into(),
        uid: "u".into(),
        state: SandboxState::Notready as i32,
        created_at_ns: 11,
        annotations: HashMap::from([("k".into(), "v".into())]),
        ..Sandbox::default()
    };
    let view = SandboxScan::decode(&*s.encode_to_vec()).unwrap_or_default();
    assert_eq!(
        view,
        SandboxScan {
            state: SandboxState::Notready as i32,
            created_at_ns: 11,
        }
    );
}

#[test]
fn removing_a_sandbox_removes_its_containers_and_no_other() {
    let mut idx = Index::new();
    run(&mut idx, "s1", Delivery::Delivered);
    run(&mut idx, "s2", Delivery::Delivered);
    create(&mut idx, "c1", Delivery::Delivered);
    idx.apply(Observation::ContainerCreate {
        sandbox_id: "s2".into(),
        config: container_config("other", 0),
        container_id: "c2".into(),
        delivery: Delivery::Delivered,
        at_ns: 300,
    });
    let ch = idx.apply(Observation::SandboxRemove { id: "s1".into() });
    assert_eq!(
        kinds(&ch),
        vec!["CONTAINER_EVENT_REMOVED:c1", "SANDBOX_EVENT_REMOVED:s1"]
    );
    assert!(idx.container("c2").is_some());
    assert!(idx.sandbox("s2").is_some());
}
