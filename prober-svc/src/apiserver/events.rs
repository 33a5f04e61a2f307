//! kubelet's events (`Unhealthy`, `ProbeWarning`, `Killing`, `FailedPreStopHook`) through
//! kube-rs's event recorder (`events.k8s.io/v1`), which aggregates repeats into one event series
//! per (pod, container, reason): a probe failing every second is one object whose count grows.
//!
//! In front of it, kubelet's spam filter (client-go's `EventSourceObjectSpamFilter`): per
//! container and reason, [`SPAM_BURST`] events, then one per [`SPAM_REFILL`]; so a probe that
//! fails for hours costs a bounded number of API writes, not one per probe.
//!
//! Publishing never waits: events go into a bounded queue ([`QUEUE`]) that one task drains; a
//! full queue drops (and counts) the event. The recorder's writes go through the event client,
//! whose own token bucket (`--event-qps`/`--event-burst`, kubelet's flags) keeps events from
//! starving the readiness-gate writes.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::metrics::ApiMetrics;
use crate::event::{Event, EventSink, Recorded};

/// Events waiting for the recorder, at most.
pub const QUEUE: usize = 4096;
/// Events per (container, reason) before the spam filter holds them back (client-go's 25).
pub const SPAM_BURST: f64 = 25.0;
/// One more event per (container, reason) this often once the burst is spent (client-go's
/// `defaultSpamQPS` of 1/300).
pub const SPAM_REFILL: Duration = Duration::from_secs(300);
/// The `reportingController` of every event.
pub const REPORTING_CONTROLLER: &str = "podward-prober";
/// The API's limit on an event's `note`.
pub const MAX_NOTE_BYTES: usize = 1024;

/// The [`EventSink`] side: queues what kubelet's recorder would record.
#[derive(Clone)]
pub struct EventQueue {
    tx: mpsc::Sender<Event>,
    metrics: ApiMetrics,
}

impl EventQueue {
    /// A queue and the receiver [`run`] drains.
    pub fn new(metrics: ApiMetrics) -> (Self, mpsc::Receiver<Event>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (Self { tx, metrics }, rx)
    }
}

impl EventSink for EventQueue {
    fn publish(&self, event: &Event) {
        if event.recorded().is_none() {
            return;
        }
        if self.tx.try_send(event.clone()).is_err() {
            self.metrics.events.with_label_values(&["dropped"]).inc();
        }
    }
}

/// The recorder of node `node` over `client` (`reportingInstance` is the node, as kubelet's).
pub fn recorder(client: kube::Client, node: &str) -> Recorder {
    Recorder::new(
        client,
        Reporter {
            controller: REPORTING_CONTROLLER.to_owned(),
            instance: Some(node.to_owned()),
        },
    )
}

/// Publishes queued events through `recorder` until `shutdown` resolves.
pub async fn run(
    mut rx: mpsc::Receiver<Event>,
    recorder: Recorder,
    metrics: ApiMetrics,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut spam = SpamFilter::default();
    let mut failing = false;
    loop {
        let ev = tokio::select! {
            () = &mut shutdown => return,
            ev = rx.recv() => match ev { Some(ev) => ev, None => return },
        };
        let Some(rec) = ev.recorded() else { continue };
        if !spam.allow(&ev, rec.reason) {
            metrics.events.with_label_values(&["filtered"]).inc();
            continue;
        }
        let (kube_event, reference) = to_kube(&ev, rec);
        match recorder.publish(&kube_event, &reference).await {
            Ok(()) => {
                metrics.events.with_label_values(&["sent"]).inc();
                failing = false;
            }
            Err(e) => {
                metrics.events.with_label_values(&["failed"]).inc();
                if failing {
                    tracing::debug!(error = %e, "cannot record a Kubernetes event");
                } else {
                    tracing::warn!(error = %e, pod = %ev.pod_name, namespace = %ev.pod_namespace,
                        "cannot record a Kubernetes event; events are lost until the API answers");
                    failing = true;
                }
            }
        }
    }
}

/// The kube-rs event and the object it is about: the pod, narrowed to the container as kubelet
/// does (`fieldPath: spec.containers{web}`).
pub fn to_kube(ev: &Event, rec: Recorded) -> (KubeEvent, ObjectReference) {
    let list = if ev.init_container {
        "initContainers"
    } else {
        "containers"
    };
    let reference = ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        name: Some(ev.pod_name.clone()),
        namespace: Some(ev.pod_namespace.clone()),
        uid: Some(ev.pod_uid.clone()),
        field_path: Some(format!("spec.{list}{{{}}}", ev.container_name)),
        ..ObjectReference::default()
    };
    let action = match rec.reason {
        crate::event::REASON_KILLING => "Kill",
        crate::event::REASON_FAILED_PRE_STOP_HOOK => "PreStopHook",
        _ => "Probe",
    };
    let mut note = rec.message;
    if note.len() > MAX_NOTE_BYTES {
        let mut end = MAX_NOTE_BYTES;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    let event = KubeEvent {
        type_: if rec.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: rec.reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    (event, reference)
}

/// client-go's per-object spam filter, keyed by (pod UID, container, reason).
#[derive(Default)]
pub struct SpamFilter {
    buckets: HashMap<(String, String, &'static str), (f64, Instant)>,
}

impl SpamFilter {
    /// Whether `ev` (with `reason`) may go out now; takes a token if so.
    pub fn allow(&mut self, ev: &Event, reason: &'static str) -> bool {
        let now = Instant::now();
        let per_sec = 1.0 / SPAM_REFILL.as_secs_f64();
        if self.buckets.len() >= 4 * QUEUE {
            // Forget keys that have refilled completely: they behave as new ones.
            self.buckets.retain(|_, (tokens, at)| {
                *tokens + now.saturating_duration_since(*at).as_secs_f64() * per_sec < SPAM_BURST
            });
        }
        let key = (ev.pod_uid.clone(), ev.container_name.clone(), reason);
        let (tokens, at) = self.buckets.entry(key).or_insert((SPAM_BURST, now));
        *tokens =
            (*tokens + now.saturating_duration_since(*at).as_secs_f64() * per_sec).min(SPAM_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, Probed};
    use crate::spec::ProbeType;

    fn failed(uid: &str) -> Event {
        Event {
            pod_uid: uid.into(),
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
            container_name: "c".into(),
            container_id: "c1".into(),
            init_container: false,
            probe: ProbeType::Liveness,
            at_ns: 0,
            kind: EventKind::Probed(Probed::Failed("x".into())),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_spam_filter_lets_25_through_then_one_per_five_minutes_per_container_and_reason() {
        let mut f = SpamFilter::default();
        let ev = failed("u");
        let passed = (0..100).filter(|_| f.allow(&ev, "Unhealthy")).count();
        assert_eq!(passed, 25);
        assert!(f.allow(&ev, "Killing"), "another reason has its own budget");
        assert!(
            f.allow(&failed("v"), "Unhealthy"),
            "another pod has its own budget"
        );
        tokio::time::advance(Duration::from_secs(299)).await;
        assert!(!f.allow(&ev, "Unhealthy"));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(f.allow(&ev, "Unhealthy"), "one more after five minutes");
        assert!(!f.allow(&ev, "Unhealthy"));
    }
}
