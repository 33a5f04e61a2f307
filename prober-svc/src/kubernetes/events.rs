//! kubelet's events (`Unhealthy`, `ProbeWarning`, `Killing`, `FailedPreStopHook`) as kubelet's
//! recorder (client-go's `tools/record`) writes them: core `v1` events, correlated by
//! [`super::correlate`] (identical notes are one object whose count grows, different notes are
//! different events, a tenth similar note makes a "(combined from similar events)" event, a per-pod
//! spam filter), created with POST and bumped with a strategic-merge PATCH of `count`,
//! `lastTimestamp` and `message`. A bumped event that expired in the meantime (`404`) is created
//! anew, as client-go does.
//!
//! Why core `v1` rather than `events.k8s.io/v1` (kube-rs's `Recorder`): the combined event must
//! carry the latest note, and `events.k8s.io/v1` makes an event's note immutable after creation;
//! core `v1` is also what kubelet writes, so `kubectl describe pod` reads the same fields. An API
//! server that answers a core `v1` create with `404` (one that serves only `events.k8s.io/v1`)
//! gets kube-rs's `Recorder` from then on: the same correlated notes, but a series' note stays the
//! first one's there.
//!
//! A write that gets no answer (transport, timeout) is tried again, up to [`MAX_TRIES`] times
//! (kubelet's `maxTriesPerEvent`), [`RETRY_SLEEP`] apart (the first sleep randomised, so nodes
//! do not retry in step); any status answer (`4xx`, `429`, `5xx`) is final, as in client-go's
//! `recordToSink`. Meanwhile later events wait in the queue. Messages are as long as kubelet's
//! (its 10 KiB of probe output, [`MAX_NOTE_BYTES`]).
//!
//! Publishing never waits: events go into a bounded queue ([`QUEUE`]) that one task drains; a
//! full queue drops (and counts) the event. Writes go through the event client, whose own token
//! bucket (`--event-qps`/`--event-burst`, kubelet's flags) keeps events from starving the
//! readiness-gate writes.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use rand::Rng;
use tokio::sync::mpsc;

use super::correlate::{Correlated, Correlator, Involved, Note, Verdict};
use super::metrics::ApiMetrics;
use crate::publish::event::{Event, EventSink, Recorded};

/// Events waiting for the recorder, at most.
pub const QUEUE: usize = 4096;
/// The `source.component` and `reportingComponent` of every event (kubelet's is `kubelet`).
pub const COMPONENT: &str = "podward-prober";
/// The longest message of a core `v1` event: kubelet's probe output cap (10 KiB, which its
/// legacy events carry whole: the API server sets no limit on a core `v1` event's message)
/// plus room for the longest text kubelet puts before it. Longer messages, which kubelet could
/// not write, are cut here.
pub const MAX_NOTE_BYTES: usize = 11 * 1024;
/// The API server's limit on an `events.k8s.io/v1` event's note (`NoteLengthLimit`): notes
/// of the fallback recorder are cut to it.
pub const EVENTS_V1_NOTE_BYTES: usize = 1024;
/// Tries of one event write before it is given up (client-go's `maxTriesPerEvent`).
pub const MAX_TRIES: u32 = 12;
/// Sleep between tries (client-go's `defaultSleepDuration`; the first one is a random fraction).
pub const RETRY_SLEEP: Duration = Duration::from_secs(10);

/// How the recorder writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderConfig {
    /// This node's name: `source.host` and `reportingInstance`, as kubelet's.
    pub node: String,
    /// Tries of one write, at most.
    pub max_tries: u32,
    /// Sleep between tries.
    pub retry_sleep: Duration,
}

impl RecorderConfig {
    /// client-go's retry policy for node `node`.
    pub fn new(node: &str) -> Self {
        Self {
            node: node.to_owned(),
            max_tries: MAX_TRIES,
            retry_sleep: RETRY_SLEEP,
        }
    }
}

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

/// Writes queued events through `client` until `shutdown` resolves.
pub async fn run(
    mut rx: mpsc::Receiver<Event>,
    client: kube::Client,
    config: RecorderConfig,
    metrics: ApiMetrics,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut correlator = Correlator::default();
    let mut failing = false;
    let mut fallback = Fallback::new(client.clone(), &config.node);
    let mut core = true;
    loop {
        let ev = tokio::select! {
            () = &mut shutdown => return,
            ev = rx.recv() => match ev { Some(ev) => ev, None => return },
        };
        let Some(rec) = ev.recorded() else { continue };
        let correlated = match correlator.correlate(note(&ev, rec)) {
            Verdict::Write(c) => c,
            Verdict::Filtered => {
                metrics.events.with_label_values(&["filtered"]).inc();
                continue;
            }
        };
        let Some((outcome, tries)) = deliver(
            &correlated,
            &client,
            &config,
            &mut fallback,
            &mut core,
            shutdown.as_mut(),
        )
        .await
        else {
            return;
        };
        match outcome {
            Ok(()) => {
                metrics.events.with_label_values(&["sent"]).inc();
                failing = false;
            }
            Err(e) => {
                metrics.events.with_label_values(&["failed"]).inc();
                if failing {
                    tracing::debug!(error = %e, "cannot record a Kubernetes event");
                } else {
                    tracing::warn!(error = %e, pod = %ev.pod_name, namespace = %ev.pod_namespace, tries,
                        "cannot record a Kubernetes event; it is lost");
                    failing = true;
                }
            }
        }
    }
}

/// Writes one correlated event: client-go's tries (the first retry after a random share of the
/// sleep, then the whole sleep) while the error is [`retriable`]; once a server answers that it
/// has no core `v1` events, through `fallback` (`events.k8s.io/v1`) from then on (`core` turns
/// false). The outcome and the tries it took; `None` when `shutdown` resolved first.
async fn deliver(
    correlated: &Correlated,
    client: &kube::Client,
    config: &RecorderConfig,
    fallback: &mut Fallback,
    core: &mut bool,
    mut shutdown: Pin<&mut impl Future<Output = ()>>,
) -> Option<(Result<(), kube::Error>, u32)> {
    let api: kube::Api<CoreEvent> =
        kube::Api::namespaced(client.clone(), event_namespace(&correlated.involved));
    let mut tries = 0;
    let outcome = loop {
        tries += 1;
        let written = if *core {
            write(&api, correlated, &config.node).await
        } else {
            fallback.publish(correlated).await
        };
        match written {
            Ok(()) => break Ok(()),
            Err(e) if tries < config.max_tries && retriable(&e) => {
                tracing::debug!(error = %e, tries, "event write failed; trying again");
                let sleep = if tries == 1 {
                    config.retry_sleep.mul_f64(rand::rng().random::<f64>())
                } else {
                    config.retry_sleep
                };
                tokio::select! {
                    () = shutdown.as_mut() => return None,
                    () = tokio::time::sleep(sleep) => {}
                }
            }
            Err(e) => break Err(e),
        }
    };
    let outcome = match outcome {
        // The create itself was not found: no core `v1` events on this server.
        Err(kube::Error::Api(s)) if *core && s.code == 404 => {
            let published = fallback.publish(correlated).await;
            if published.is_ok() {
                tracing::info!(
                    "the API server has no core v1 events; recording events.k8s.io/v1 events"
                );
                *core = false;
            }
            published
        }
        other => other,
    };
    Some((outcome, tries))
}

/// Whether client-go's `recordToSink` would try the write again: only when the request got no
/// answer from the server (transport, timeout). Any status answer is final there (`recordEvent`
/// drops the event on a `StatusError`, `429` and `5xx` included: "will not retry!").
fn retriable(e: &kube::Error) -> bool {
    !matches!(e, kube::Error::Api(_))
}

/// One write of `c`: a new event, or the bump of an earlier one (created anew if it expired).
async fn write(api: &kube::Api<CoreEvent>, c: &Correlated, node: &str) -> Result<(), kube::Error> {
    write_from(api, c, COMPONENT, node).await
}

/// One write of `c` reported by `component` on `instance`: client-go's create, or its
/// strategic-merge patch of `count`, `lastTimestamp` and `message` (created anew if it expired).
pub async fn write_from(
    api: &kube::Api<CoreEvent>,
    c: &Correlated,
    component: &str,
    instance: &str,
) -> Result<(), kube::Error> {
    if c.count > 1 {
        // client-go's two-way strategic merge patch of the fields a repeat changes.
        let patch = serde_json::json!({
            "count": c.count,
            "lastTimestamp": time(c.last_ns),
            "message": c.message,
        });
        match api
            .patch(&c.name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    api.create(
        &PostParams::default(),
        &core_event_from(c, component, instance),
    )
    .await
    .map(|_| ())
}

/// kube-rs's recorder (`events.k8s.io/v1`), for a server without core `v1` events. Its series
/// are keyed without the note, so each correlated event gets a recorder of its own: a different
/// note is a new event there too, a repeat bumps its own series.
struct Fallback {
    client: kube::Client,
    reporter: Reporter,
    recorders: std::collections::HashMap<String, Recorder>,
}

impl Fallback {
    fn new(client: kube::Client, node: &str) -> Self {
        Self {
            client,
            reporter: Reporter {
                controller: COMPONENT.to_owned(),
                instance: Some(node.to_owned()),
            },
            recorders: std::collections::HashMap::new(),
        }
    }

    async fn publish(&mut self, c: &Correlated) -> Result<(), kube::Error> {
        if c.count == 1 || !self.recorders.contains_key(&c.name) {
            // Bounded as the correlator's caches are; a forgotten series starts a new event.
            if self.recorders.len() >= QUEUE {
                self.recorders.clear();
            }
            let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
            self.recorders.insert(c.name.clone(), recorder);
        }
        let Some(recorder) = self.recorders.get(&c.name) else {
            return Ok(());
        };
        let action = match c.reason {
            crate::publish::event::REASON_KILLING => "Kill",
            crate::publish::event::REASON_FAILED_PRE_STOP_HOOK => "PreStopHook",
            _ => "Probe",
        };
        let event = KubeEvent {
            type_: if c.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: c.reason.to_owned(),
            note: Some(cut(c.message.clone(), EVENTS_V1_NOTE_BYTES)),
            action: action.to_owned(),
            secondary: None,
        };
        recorder.publish(&event, &reference(&c.involved)).await
    }
}

/// The object an event is about: the pod, narrowed to the container.
fn reference(involved: &Involved) -> ObjectReference {
    let pod = involved.kind == "Pod";
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some(involved.kind.to_owned()),
        name: Some(involved.name.clone()),
        namespace: pod.then(|| involved.namespace.clone()),
        uid: Some(involved.uid.clone()),
        field_path: Some(involved.field_path.clone()).filter(|f| !f.is_empty()),
        ..ObjectReference::default()
    }
}

/// The namespace of an event about `involved`: the pod's; `default` for a cluster-scoped
/// object, as client-go's recorder puts it.
pub fn event_namespace(involved: &Involved) -> &str {
    if involved.kind == "Pod" {
        &involved.namespace
    } else {
        "default"
    }
}

/// The core `v1` event kubelet's `makeEvent` builds for `c`.
pub fn core_event(c: &Correlated, node: &str) -> CoreEvent {
    core_event_from(c, COMPONENT, node)
}

/// The core `v1` event client-go's `makeEvent` builds for `c`, reported by `component` on
/// `instance`.
pub fn core_event_from(c: &Correlated, component: &str, instance: &str) -> CoreEvent {
    CoreEvent {
        metadata: ObjectMeta {
            name: Some(c.name.clone()),
            namespace: Some(event_namespace(&c.involved).to_owned()),
            ..ObjectMeta::default()
        },
        involved_object: reference(&c.involved),
        reason: Some(c.reason.to_owned()),
        message: Some(c.message.clone()),
        first_timestamp: Some(time(c.first_ns)),
        last_timestamp: Some(time(c.last_ns)),
        count: Some(c.count),
        type_: Some(if c.warning { "Warning" } else { "Normal" }.to_owned()),
        source: Some(EventSource {
            component: Some(component.to_owned()),
            host: Some(instance.to_owned()),
        }),
        reporting_component: Some(component.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        ..CoreEvent::default()
    }
}

fn time(ns: i64) -> Time {
    Time(Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// `message` cut to at most `max` bytes, on a character boundary.
fn cut(mut message: String, max: usize) -> String {
    if message.len() > max {
        let mut end = max;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    message
}

/// The note kubelet's recorder makes of `ev`: the pod, narrowed to the container as kubelet does
/// (`spec.containers{web}`, `spec.initContainers{side}`), the message cut to [`MAX_NOTE_BYTES`].
pub fn note(ev: &Event, rec: Recorded) -> Note {
    let list = if ev.init_container {
        "initContainers"
    } else {
        "containers"
    };
    let message = cut(rec.message, MAX_NOTE_BYTES);
    Note {
        involved: Involved {
            kind: "Pod",
            uid: ev.pod_uid.clone(),
            namespace: ev.pod_namespace.clone(),
            name: ev.pod_name.clone(),
            // An event about the pod as a whole (an annotation that does not parse) names no
            // container.
            field_path: if ev.container_name.is_empty() {
                String::new()
            } else {
                format!("spec.{list}{{{}}}", ev.container_name)
            },
        },
        warning: rec.warning,
        reason: rec.reason,
        message,
        at_ns: ev.at_ns,
    }
}
