//! `podward.housekeeper.v1.Housekeeper`: `Plan` (what the next pass would do, and why, and whether
//! the daemon will act on it; changes nothing), `Reconcile` (a pass now; dry-run if the request or
//! the daemon says so) and `Status`.

use std::sync::Arc;

use podward_api::housekeeper::v1::housekeeper_server::Housekeeper;
use podward_api::housekeeper::v1::{
    PlanRequest, PlanResponse, ReconcileRequest, ReconcileResponse, StatusRequest, StatusResponse,
};
use podward_api::wire::announced;
use tonic::{Request, Response, Status};

use crate::act::Actuator;
use crate::reconcile::{Mode, Reconciler};
use crate::sources::Sources;

/// The API over one reconciler.
pub struct Service<S, A> {
    reconciler: Arc<Reconciler<S, A>>,
    dry_run: bool,
}

impl<S, A> Service<S, A> {
    /// Serves `reconciler`; with `dry_run`, `Reconcile` never acts.
    pub fn new(reconciler: Arc<Reconciler<S, A>>, dry_run: bool) -> Self {
        Self {
            reconciler,
            dry_run,
        }
    }
}

#[tonic::async_trait]
impl<S: Sources, A: Actuator> Housekeeper for Service<S, A> {
    async fn plan(&self, _req: Request<PlanRequest>) -> Result<Response<PlanResponse>, Status> {
        let (mut plan, _) = self.reconciler.pass(Mode::Preview).await;
        // A preview never acts, but the question is what the daemon's next pass will do.
        plan.dry_run = self.dry_run;
        plan.preview = true;
        Ok(announced(PlanResponse { plan: Some(plan) }, &[]))
    }

    async fn reconcile(
        &self,
        req: Request<ReconcileRequest>,
    ) -> Result<Response<ReconcileResponse>, Status> {
        let mode = if req.get_ref().dry_run || self.dry_run {
            Mode::DryRun
        } else {
            Mode::Act
        };
        let (plan, took) = self.reconciler.pass(mode).await;
        Ok(announced(
            ReconcileResponse {
                plan: Some(plan),
                duration_ns: i64::try_from(took.as_nanos()).unwrap_or(i64::MAX),
            },
            &[],
        ))
    }

    async fn status(
        &self,
        _req: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        Ok(announced(self.reconciler.status().await, &[]))
    }
}
