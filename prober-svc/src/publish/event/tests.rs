use super::*;

fn event(kind: EventKind) -> Event {
    Event {
        pod_uid: "u".into(),
        pod_name: "p".into(),
        pod_namespace: "ns".into(),
        container_name: "web".into(),
        container_id: "c1".into(),
        init_container: false,
        probe: ProbeType::Liveness,
        at_ns: 1,
        kind,
    }
}

#[test]
fn kubelets_texts_for_what_it_records_and_nothing_for_results_and_kill_records() {
    assert_eq!(
        killing_message("web", ProbeType::Liveness),
        "Container web failed liveness probe, will be restarted"
    );
    assert_eq!(
        killing_message("web", ProbeType::Startup),
        "Container web failed startup probe, will be restarted"
    );
    let recorded = |kind| {
        event(kind)
            .recorded()
            .map(|r| (r.warning, r.reason, r.message))
    };
    assert_eq!(
        recorded(EventKind::Killing {
            message: killing_message("web", ProbeType::Liveness)
        }),
        Some((
            false,
            "Killing",
            "Container web failed liveness probe, will be restarted".into()
        ))
    );
    assert_eq!(
        recorded(EventKind::Probed(Outcome::Failure(
            "HTTP probe failed with statuscode: 500".into()
        ))),
        Some((
            true,
            "Unhealthy",
            "Liveness probe failed: HTTP probe failed with statuscode: 500".into()
        ))
    );
    assert_eq!(
        recorded(EventKind::Probed(Outcome::Errored(
            "strconv.Atoi: parsing \"http\": invalid syntax".into()
        ))),
        Some((
            true,
            "Unhealthy",
            "Liveness probe errored and resulted in unknown state: strconv.Atoi: parsing \"http\": invalid syntax".into()
        ))
    );
    assert_eq!(
        recorded(EventKind::Probed(Outcome::Warning(
            "Probe terminated redirects, Response body: x".into()
        ))),
        Some((
            true,
            "ProbeWarning",
            "Liveness probe warning: Probe terminated redirects, Response body: x".into()
        ))
    );
    assert_eq!(
        recorded(EventKind::PreStopFailed),
        Some((true, "FailedPreStopHook", "PreStopHook failed".into()))
    );
    let kill = event(EventKind::Kill(Kill {
        container_id: "c1".into(),
        probe: ProbeType::Liveness,
        message: killing_message("web", ProbeType::Liveness),
        output: "HTTP probe failed with statuscode: 500".into(),
        grace_seconds: 30,
        issued_at_ns: 1,
        error: None,
    }));
    assert!(kill.on_watch() && kill.recorded().is_none());
    assert_eq!(kill.output(), "HTTP probe failed with statuscode: 500");
    let result = event(EventKind::Result {
        result: ProbeResult::Failure,
        output: "refused".into(),
    });
    assert!(result.on_watch() && result.recorded().is_none());
    assert_eq!(result.output(), "refused");
    assert!(!event(EventKind::PreStopFailed).on_watch());
}

#[test]
fn probes_taken_over_is_a_normal_pod_event_naming_what_moved_per_container() {
    let ev = event(EventKind::ProbesTakenOver(vec![
        MovedProbes {
            container: "proxy".into(),
            probes: vec![ProbeType::Readiness],
        },
        MovedProbes {
            container: "app".into(),
            probes: vec![ProbeType::Liveness, ProbeType::Startup],
        },
    ]));
    assert_eq!(
        ev.recorded(),
        Some(Recorded {
            warning: false,
            reason: REASON_PROBES_TAKEN_OVER,
            message: "Probes taken over by podward (moved from the pod spec into podward.io/probes; kubelet does not run them): container proxy: readinessProbe; container app: livenessProbe, startupProbe".into(),
        })
    );
    assert!(!ev.on_watch());
    assert_eq!(ev.output(), "");
}
