//! After an acting pass the prober is told which of its pods are gone (kubelet's
//! `probeManager.CleanupPods`): the pods it probes minus those in a runtime list taken after its
//! answer. A dry run tells it nothing, and a prober that is down changes nothing.

#[path = "support/fake.rs"]
mod fake;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fake::{FakeNode, RecordingActuator, reconciler, sandbox};
use parking_lot::Mutex;
use podward_api::prober::v1::prober_server::{Prober, ProberServer};
use podward_api::prober::v1::{
    CleanupPodsRequest, CleanupPodsResponse, PodStatus, ProbeEvent, StatusRequest, StatusResponse,
    WatchRequest,
};
use podward_housekeeper::act::prober_link::ProberLink;
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::sources::runtime::RuntimeView;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

#[derive(Clone, Default)]
struct FakeProber {
    pods: Vec<String>,
    cleaned: Arc<Mutex<Vec<Vec<String>>>>,
}

type Events = Pin<Box<dyn tokio_stream::Stream<Item = Result<ProbeEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Prober for FakeProber {
    async fn status(&self, _r: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let pods = self
            .pods
            .iter()
            .map(|u| PodStatus {
                pod_uid: u.clone(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(StatusResponse { pods }))
    }

    type WatchStream = Events;

    async fn watch(&self, _r: Request<WatchRequest>) -> Result<Response<Events>, Status> {
        Err(Status::unimplemented("watch"))
    }

    async fn cleanup_pods(
        &self,
        r: Request<CleanupPodsRequest>,
    ) -> Result<Response<CleanupPodsResponse>, Status> {
        let gone = r.into_inner().gone_pod_uids;
        self.cleaned.lock().push(gone.clone());
        Ok(Response::new(CleanupPodsResponse {
            removed_pod_uids: gone,
        }))
    }
}

#[tokio::test]
async fn gone_pods_are_sent_to_the_prober_after_an_acting_pass() {
    let node = FakeNode::new();
    node.set_runtime(RuntimeView {
        sandboxes: vec![sandbox("s1", "alive", 0, true)],
        containers: vec![],
        ..Default::default()
    });
    let sock = node.root().join("prober.sock");
    let prober = FakeProber {
        pods: vec!["alive".into(), "gone-b".into(), "gone-a".into()],
        ..Default::default()
    };
    let cleaned = prober.cleaned.clone();
    let listener = tokio::net::UnixListener::bind(&sock).expect("bind");
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ProberServer::new(prober))
            .serve_with_incoming(UnixListenerStream::new(listener)),
    );
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    let r = r.with_prober(ProberLink::new(&sock));

    r.pass(Mode::DryRun).await;
    assert!(
        cleaned.lock().is_empty(),
        "a dry run tells the prober nothing"
    );
    r.pass(Mode::Act).await;
    assert_eq!(
        cleaned.lock().as_slice(),
        [vec!["gone-a".to_owned(), "gone-b".to_owned()]]
    );
    server.abort();
}

#[tokio::test]
async fn a_prober_that_is_down_changes_nothing() {
    let node = FakeNode::new();
    node.leave_pod(fake::U1);
    let act = Arc::new(RecordingActuator::default());
    let (r, _clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    let r = r.with_prober(ProberLink::new(&node.root().join("nobody.sock")));
    r.pass(Mode::Act).await;
    let (p, _) = r.pass(Mode::Act).await;
    assert!(p.sources_ok);
    assert_eq!(act.calls().len(), 3, "{:?}", act.calls());
}
