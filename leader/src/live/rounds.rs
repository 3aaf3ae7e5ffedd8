//! The leader's rounds: every flush interval, while this replica leads, the merged index
//! goes through the controller's pipeline (or, without a controller, through learning
//! alone), and the round's proposals go to `--output`.

use std::future::Future;
use std::time::Duration;

use ne_crds::WorkloadNetworkPolicyProposal;
use ne_flow::edge::Provider;
use ne_policy::allowlist::LearnOptions;
use ne_policy::resolve::RecordOnly;

use super::leadership::Leader;
use crate::controller::Controller;
use crate::ingest::{IndexHandle, Leadership};
use crate::violations::detect::Traffic;
use crate::{learning, output};

/// The leader's rounds: every flush interval, while this replica leads, the merged index
/// goes through the controller (or, without one, through learning alone) and the
/// proposals to `--output`.
pub(super) struct Rounds {
    pub(super) index: IndexHandle,
    pub(super) controller: Option<Controller>,
    pub(super) provider: Provider,
    pub(super) options: LearnOptions,
    pub(super) output: Option<String>,
    /// The proposals last reported.
    pub(super) reported: Vec<WorkloadNetworkPolicyProposal>,
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
        let held = self.index.read().await?;
        let merged = &held.edges;
        let traffic = Traffic {
            edges: merged,
            denials: &held.denials,
            audits: &held.audits,
        };
        // The round's proposals, resolved against the cluster; without a controller, as
        // the agents resolved them.
        let proposals = match self.controller.as_mut() {
            Some(controller) => controller.round(traffic, leadership).await.proposals,
            None => {
                let learned = learning::learn(
                    learning::merged(merged),
                    &RecordOnly,
                    self.provider,
                    &self.options,
                );
                for what in &learned.unrendered {
                    tracing::warn!(allow_list = %what, "cannot render a proposal; the others are written");
                }
                learned.proposals
            }
        };
        if proposals != self.reported {
            report_proposals(&proposals, merged.len(), self.output.as_deref());
            self.reported = proposals;
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
