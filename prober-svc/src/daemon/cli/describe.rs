//! `status --pod NS/NAME`'s second part: the pod as `kubectl describe pod` would print it if
//! kubelet ran the annotation's probes — each container's `Ready`, its `Liveness:`,
//! `Readiness:` and `Startup:` lines, the `ContainersReady` condition, and the events kubelet
//! would have recorded for the last probe and kill — so that a podward-probed pod can be read
//! side by side with a kubelet-probed one.

use std::fmt::Write;

use podward_api::prober::v1 as api;

/// `kubectl describe`'s label of a probe type.
fn label(ty: i32) -> &'static str {
    match api::ProbeType::try_from(ty) {
        Ok(api::ProbeType::Liveness) => "Liveness",
        Ok(api::ProbeType::Readiness) => "Readiness",
        Ok(api::ProbeType::Startup) => "Startup",
        _ => "Probe",
    }
}

/// kubelet's `Killing` text of the last kill (its reason field holds that text).
fn killing(k: &api::Kill) -> String {
    k.reason.clone()
}

/// Every pod of `status` as `kubectl describe` would show it with kubelet probing.
pub fn render_describe(status: &api::StatusResponse) -> String {
    let mut out = String::new();
    for pod in &status.pods {
        let _ = writeln!(
            out,
            "As `kubectl describe pod -n {} {}` would show it if kubelet ran these probes:",
            pod.pod_namespace, pod.pod_name
        );
        let _ = writeln!(out, "Name:         {}", pod.pod_name);
        let _ = writeln!(out, "Namespace:    {}", pod.pod_namespace);
        let _ = writeln!(out, "Containers:");
        let mut containers: Vec<&api::ContainerStatus> = pod.containers.iter().collect();
        containers.sort_by(|a, b| a.name.cmp(&b.name));
        let mut events: Vec<(&str, &str, String)> = Vec::new();
        for c in &containers {
            let _ = writeln!(out, "  {}:", c.name);
            if !c.container_id.is_empty() {
                let _ = writeln!(out, "    Container ID:   containerd://{}", c.container_id);
            }
            let _ = writeln!(out, "    Ready:          {}", title(c.ready));
            let _ = writeln!(out, "    Started:        {}", title(c.started));
            for p in &c.probes {
                let name = format!("{}:", label(p.r#type));
                let _ = writeln!(out, "    {name:<15} {}", p.describe);
                if !p.last_error.is_empty() {
                    events.push((
                        "Warning",
                        "Unhealthy",
                        format!(
                            "{} probe errored and resulted in unknown state: {}",
                            label(p.r#type),
                            p.last_error
                        ),
                    ));
                } else if p.last_probe_result == api::ProbeResult::Failure as i32 {
                    events.push((
                        "Warning",
                        "Unhealthy",
                        format!("{} probe failed: {}", label(p.r#type), p.last_output),
                    ));
                }
            }
            if let Some(k) = &c.last_kill {
                events.push(("Normal", "Killing", killing(k)));
            }
        }
        let all_ready = containers.iter().all(|c| c.ready);
        let _ = writeln!(out, "Conditions:");
        let _ = writeln!(out, "  Type              Status");
        let _ = writeln!(out, "  ContainersReady   {}", title(all_ready));
        let _ = writeln!(out, "  Ready             {}", title(all_ready));
        if !pod.spec_errors.is_empty() {
            let _ = writeln!(
                out,
                "  (podward.io/probes has {} error(s): a gated pod is held not ready, reason ProbeSpecInvalid)",
                pod.spec_errors.len()
            );
        }
        if events.is_empty() {
            let _ = writeln!(out, "Events:            <none>");
        } else {
            let _ = writeln!(out, "Events:");
            let _ = writeln!(out, "  Type     Reason     From            Message");
            let _ = writeln!(out, "  ----     ------     ----            -------");
            for (ty, reason, message) in events {
                let _ = writeln!(out, "  {ty:<8} {reason:<10} podward-prober  {message}");
            }
        }
    }
    out
}

fn title(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_container_reads_as_kubectl_describe_with_its_probe_lines_and_events() {
        let status = api::StatusResponse {
            pods: vec![api::PodStatus {
                pod_uid: "u".into(),
                pod_name: "cart".into(),
                pod_namespace: "shop".into(),
                containers: vec![api::ContainerStatus {
                    name: "app".into(),
                    container_id: "c0ffee".into(),
                    started: true,
                    ready: false,
                    live: false,
                    probes: vec![api::ProbeStatus {
                        r#type: api::ProbeType::Liveness as i32,
                        last_probe_result: api::ProbeResult::Failure as i32,
                        last_output: "HTTP probe failed with statuscode: 404".into(),
                        describe: "http-get http://:8080/healthz delay=0s timeout=1s period=10s #success=1 #failure=3".into(),
                        ..Default::default()
                    }],
                    kills: 1,
                    last_kill: Some(api::Kill {
                        reason: "Container app failed liveness probe, will be restarted".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                spec_errors: vec![],
            }],
        };
        let text = render_describe(&status);
        for want in [
            "As `kubectl describe pod -n shop cart` would show it if kubelet ran these probes:",
            "  app:\n    Container ID:   containerd://c0ffee\n    Ready:          False\n",
            "    Liveness:       http-get http://:8080/healthz delay=0s timeout=1s period=10s #success=1 #failure=3\n",
            "  ContainersReady   False\n",
            "  Warning  Unhealthy  podward-prober  Liveness probe failed: HTTP probe failed with statuscode: 404\n",
            "  Normal   Killing    podward-prober  Container app failed liveness probe, will be restarted\n",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
    }
}
