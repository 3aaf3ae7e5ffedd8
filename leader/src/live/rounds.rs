//! The leader's rounds: every flush interval, while this replica leads, what changed in the
//! merged index goes through the controller's pipeline (or, without a controller, through
//! learning alone), and the proposals go to `--output` when they changed.

use std::future::Future;
use std::time::Duration;

use ne_crds::WorkloadNetworkPolicyProposal;
use ne_policy::resolve::RecordOnly;

use super::leadership::Leader;
use crate::controller::Controller;
use crate::ingest::{IndexHandle, Leadership};
use crate::learning::Learning;
use crate::output;

/// The leader's rounds: every flush interval, while this replica leads, what changed in
/// the merged index goes through the controller (or, without one, through learning alone)
/// and the proposals to `--output`.
pub(super) struct Rounds {
    pub(super) index: IndexHandle,
    pub(super) controller: Option<Controller>,
    pub(super) learning: Learning,
    pub(super) output: Option<String>,
}

impl Rounds {
    pub(super) async fn run(
        &mut self,
        every: Duration,
        leadership: &Leader,
        stop: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let mut ticker = tokio::time::interval(every);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = &mut stop => return Ok(()),
            }
            if leadership.is_leader() {
                self.round(leadership).await?;
            }
        }
    }

    async fn round(&mut self, leadership: &Leader) -> anyhow::Result<()> {
        self.learning.take(self.index.changes().await?);
        // The proposals, resolved against the cluster; without a controller, as the agents
        // resolved them (a resolver that never changes: generation 0).
        let changed = match self.controller.as_mut() {
            Some(controller) => {
                controller
                    .round(&mut self.learning, leadership)
                    .await
                    .changed
            }
            None => {
                let changed = self.learning.learn(&RecordOnly, 0);
                if changed {
                    for what in self.learning.learned().unrendered() {
                        tracing::warn!(allow_list = %what, "cannot render a proposal; the others are written");
                    }
                }
                changed
            }
        };
        if changed {
            let edges = self.learning.traffic().edges.len();
            report_proposals(
                self.learning.learned().proposals(),
                edges,
                self.output.as_deref(),
            );
        }
        Ok(())
    }
}

/// Logs that the proposals changed and writes them to `output`. A proposal that cannot be
/// written is logged; the leader goes on. Called only on a change: a round that learns what
/// the last one did serialises nothing.
fn report_proposals(
    proposals: &[WorkloadNetworkPolicyProposal],
    edges: usize,
    output: Option<&str>,
) {
    tracing::info!(edges, proposals = proposals.len(), "proposals changed");
    if let Some(output) = output
        && let Err(error) = output::write_proposals(proposals, output)
    {
        tracing::warn!(
            error = format!("{error:#}"),
            "cannot write the proposals to --output"
        );
    }
}
