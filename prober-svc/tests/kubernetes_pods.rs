//! The node's pod reflector at the HTTP boundary: the exact list and watch requests, bookmarks,
//! a dropped connection, `410 Gone`, paged lists and the API being down.

#[path = "support/apiserver.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use podward_prober::kubernetes::metrics::ApiMetrics;
use podward_prober::kubernetes::pods::{PodSink, reflect};
use podward_prober::model::api_pod::{ApiPod, ConditionStatus};
use serde_json::json;
use support::*;
use tokio::sync::oneshot;

/// Records what the reflector hands over.
#[derive(Default)]
struct Sink {
    pods: Mutex<BTreeMap<String, ApiPod>>,
    deleted: Mutex<Vec<String>>,
}

impl PodSink for Sink {
    fn apply(&self, pod: ApiPod) {
        self.pods.lock().insert(pod.uid.clone(), pod);
    }
    fn delete(&self, uid: &str) {
        self.pods.lock().remove(uid);
        self.deleted.lock().push(uid.to_owned());
    }
    fn known(&self) -> Vec<String> {
        self.pods.lock().keys().cloned().collect()
    }
}

impl Sink {
    fn uids(&self) -> Vec<String> {
        self.known()
    }
}

struct Running {
    sink: Arc<Sink>,
    metrics: ApiMetrics,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

fn start(client: kube::Client, sink: Arc<Sink>) -> Running {
    let metrics = ApiMetrics::new(None).expect("metrics");
    let (stop, stopped) = oneshot::channel::<()>();
    let (s, m) = (sink.clone(), metrics.clone());
    let task = tokio::spawn(async move {
        let api: kube::Api<Pod> = kube::Api::all(client);
        reflect(api, "node-a", "podward.io/ready", &*s, &m, async {
            let _ = stopped.await;
        })
        .await;
    });
    Running {
        sink,
        metrics,
        stop: Some(stop),
        task,
    }
}

impl Running {
    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

/// kubelet's reflector lists at `resourceVersion=0`: from the API server's watch cache, not a
/// quorum read of every pod in etcd.
fn list_query() -> BTreeMap<String, String> {
    [
        ("fieldSelector", "spec.nodeName=node-a"),
        ("resourceVersion", "0"),
        ("resourceVersionMatch", "NotOlderThan"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn watch_query(rv: &str) -> BTreeMap<String, String> {
    [
        ("watch", "true"),
        ("timeoutSeconds", "290"),
        ("fieldSelector", "spec.nodeName=node-a"),
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", rv),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn lists_the_nodes_pods_then_watches_from_the_list_and_resumes_from_the_last_bookmark_after_a_dropped_connection()
 {
    let (client, mut api) = mock();
    let r = start(client, Arc::new(Sink::default()));

    let list = api.next().await;
    assert_eq!(
        (list.method.as_str(), list.path.as_str()),
        ("GET", "/api/v1/pods")
    );
    assert_eq!(list.query, list_query());
    list.reply(
        200,
        pod_list(
            "100",
            vec![
                pod(
                    "web",
                    "u-web",
                    "90",
                    true,
                    Some(("True", "2026-11-23T09:00:00Z")),
                ),
                pod("batch", "u-batch", "95", false, None),
            ],
            None,
        ),
    );

    let watch = api.next().await;
    assert_eq!(
        (watch.method.as_str(), watch.path.as_str()),
        ("GET", "/api/v1/pods")
    );
    assert_eq!(watch.query, watch_query("100"));
    let feed = watch.stream();
    eventually("the listed pods", || {
        r.sink.uids() == vec!["u-batch", "u-web"]
    })
    .await;
    assert_eq!(r.metrics.synced.get(), 1);
    {
        let pods = r.sink.pods.lock();
        let web = &pods["u-web"];
        assert!(web.gated);
        assert_eq!(
            web.condition.as_ref().map(|c| c.status),
            Some(ConditionStatus::True)
        );
        assert!(!pods["u-batch"].gated);
    }
    feed.event(
        "MODIFIED",
        pod(
            "web",
            "u-web",
            "120",
            true,
            Some(("False", "2026-11-23T09:05:00Z")),
        ),
    )
    .await;
    feed.bookmark("150").await;
    eventually("the modification", || {
        r.sink.pods.lock()["u-web"]
            .condition
            .as_ref()
            .map(|c| c.status)
            == Some(ConditionStatus::False)
    })
    .await;
    feed.cut().await;

    // The watcher resumes where the bookmark left it: no relist, nothing deleted.
    let rewatch = api.next().await;
    assert_eq!(rewatch.query, watch_query("150"));
    let feed = rewatch.stream();
    assert!(r.sink.deleted.lock().is_empty());
    feed.event("DELETED", pod("batch", "u-batch", "160", false, None))
        .await;
    eventually("the deletion", || r.sink.uids() == vec!["u-web"]).await;
    r.stop().await;
}

#[tokio::test]
async fn a_410_gone_relists_and_deletes_what_the_new_list_lacks_only_once_it_is_complete() {
    let (client, mut api) = mock();
    let r = start(client, Arc::new(Sink::default()));
    api.next().await.reply(
        200,
        pod_list(
            "10",
            vec![
                pod("a", "u-a", "5", true, None),
                pod("b", "u-b", "6", true, None),
            ],
            None,
        ),
    );
    let feed = api.next().await.stream();
    eventually("two pods", || r.sink.uids().len() == 2).await;
    feed.event(
        "ERROR",
        status(
            410,
            "Expired",
            "too old resource version: 10 (2000)",
            json!({}),
        ),
    )
    .await;

    // Relist (at resourceVersion 0 again), in two pages; the pod missing from it goes only
    // after the last page.
    let page1 = api.next().await;
    assert_eq!(page1.query, list_query());
    page1.reply(
        200,
        pod_list(
            "",
            vec![pod("a", "u-a", "2001", true, None)],
            Some("next-page"),
        ),
    );
    // A server that pages anyway is followed (a continue token replaces the version).
    let page2 = api.next().await;
    let q: BTreeMap<String, String> = [
        ("fieldSelector", "spec.nodeName=node-a"),
        ("continue", "next-page"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(page2.query, q);
    assert!(
        r.sink.deleted.lock().is_empty(),
        "nothing deleted before the list is complete"
    );
    page2.reply(
        200,
        pod_list("2005", vec![pod("c", "u-c", "2003", true, None)], None),
    );
    let watch = api.next().await;
    assert_eq!(watch.query, watch_query("2005"));
    let _feed = watch.stream();
    eventually("the relisted view", || r.sink.uids() == vec!["u-a", "u-c"]).await;
    assert_eq!(r.sink.deleted.lock().clone(), vec!["u-b".to_owned()]);
    r.stop().await;
}

#[tokio::test]
async fn the_api_down_is_retried_with_backoff_and_the_last_view_stays() {
    let (client, mut api) = mock();
    let r = start(client, Arc::new(Sink::default()));
    let first = api.next().await;
    let t0 = tokio::time::Instant::now();
    first.reply_status(503, "ServiceUnavailable", "etcdserver: leader changed", &[]);
    let second = api.next().await;
    assert!(
        t0.elapsed() >= Duration::from_millis(500),
        "backoff between attempts"
    );
    assert_eq!(r.metrics.synced.get(), 0);
    second.drop_connection();
    api.next().await.reply(
        200,
        pod_list("7", vec![pod("a", "u-a", "5", true, None)], None),
    );
    let feed = api.next().await.stream();
    eventually("the pod", || r.sink.uids() == vec!["u-a"]).await;
    assert_eq!(r.metrics.synced.get(), 1);

    // Down again: the re-watch fails; the view is kept (no pod "disappears"), the failure is
    // counted, and the view stays synced (kube-rs resumes from its version, without a relist).
    let before = r.metrics.watch_errors.get();
    feed.cut().await;
    api.next()
        .await
        .reply_status(503, "ServiceUnavailable", "down", &[]);
    eventually("the failure noticed", || {
        r.metrics.watch_errors.get() > before
    })
    .await;
    assert_eq!(r.metrics.synced.get(), 1);
    assert!(r.metrics.watch_last_error.get() > 0);
    assert_eq!(r.sink.uids(), vec!["u-a"]);
    assert!(r.sink.deleted.lock().is_empty());
    r.stop().await;
}
