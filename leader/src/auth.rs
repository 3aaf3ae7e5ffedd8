//! Who may stream to the leader: agents present their projected ServiceAccount token
//! (audience `network-enforcer`) as `authorization: Bearer …`; the leader checks it with a
//! `TokenReview` and accepts only the configured ServiceAccounts. Answers are cached for a
//! minute per token, so a reconnecting fleet does not hammer the API server.
//!
//! A token kubelet projects into a pod is bound to that pod, and the review names the pod
//! and its node. Such a token speaks for its own node only ([`Identity::admits`]): an agent
//! cannot stream as another node's agent, whatever its `Hello` says.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use tokio::sync::Mutex;
use tonic::Status;

/// The audience agents' tokens must be minted for.
pub const AUDIENCE: &str = "network-enforcer";

/// How long a review's answer is reused.
const CACHE_TTL: Duration = Duration::from_secs(60);
/// Most tokens remembered (the cache is emptied when full).
const CACHE_MAX: usize = 4096;

/// Why a stream was refused: the gRPC status to answer and the metric label.
#[derive(Debug)]
pub struct Refusal {
    pub status: Status,
    pub reason: &'static str,
}

/// The review's extra field naming the pod a bound token was issued for.
pub const POD_NAME: &str = "authentication.kubernetes.io/pod-name";
/// The review's extra field naming the node of that pod.
pub const NODE_NAME: &str = "authentication.kubernetes.io/node-name";

/// Who a stream's token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The authenticated user (`system:serviceaccount:<namespace>:<name>`).
    pub user: String,
    /// The pod a bound token was issued for, when the token is bound to one.
    pub pod: Option<String>,
    /// That pod's node, when it had one.
    pub node: Option<String>,
}

impl Identity {
    /// A user whose token is bound to no pod.
    pub fn unbound(user: impl Into<String>) -> Self {
        Identity {
            user: user.into(),
            pod: None,
            node: None,
        }
    }

    /// Whether an agent with this identity may say it is `agent_id` on `node`: a token bound
    /// to a pod on a node speaks for that node only, under the node's or the pod's name.
    /// `Err` says what does not match. A token bound to no node (minted by hand with the
    /// TokenRequest API) is trusted for any node, as its ServiceAccount is.
    pub fn admits(&self, node: &str, agent_id: &str) -> Result<(), String> {
        let Some(own) = &self.node else {
            return Ok(());
        };
        if node != own {
            return Err(format!(
                "the token belongs to a pod on node {own:?}, but the Hello says node {node:?}"
            ));
        }
        if agent_id != own && Some(agent_id) != self.pod.as_deref() {
            let pod = self.pod.as_deref().unwrap_or_default();
            return Err(format!(
                "agent id {agent_id:?} is neither the token's node {own:?} nor its pod {pod:?} \
                 (leave --agent-id unset)"
            ));
        }
        Ok(())
    }
}

/// Checks a stream's credentials.
#[tonic::async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// Who the stream's token belongs to, or why the stream is refused.
    async fn authenticate(&self, bearer: Option<&str>) -> Result<Identity, Refusal>;
}

/// Accepts every stream (`--insecure-ingest`, development only).
#[derive(Debug)]
pub struct Insecure;

#[tonic::async_trait]
impl Authenticator for Insecure {
    async fn authenticate(&self, _: Option<&str>) -> Result<Identity, Refusal> {
        Ok(Identity::unbound("anonymous"))
    }
}

/// A review's answer: who the token belongs to, or why it was not accepted (a metric label).
type Answer = Result<Identity, &'static str>;

/// Reviews tokens with the API server and accepts the listed ServiceAccounts.
pub struct TokenReviews {
    reviews: kube::Api<TokenReview>,
    /// `system:serviceaccount:<namespace>:<name>` of the agents.
    allowed: Vec<String>,
    cache: Mutex<HashMap<String, (Answer, Instant)>>,
}

impl std::fmt::Debug for TokenReviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviews")
            .field("allowed", &self.allowed)
            .finish_non_exhaustive()
    }
}

impl TokenReviews {
    /// Accepts tokens of `service_accounts` (`namespace:name` each).
    pub fn new(client: kube::Client, service_accounts: &[String]) -> Self {
        TokenReviews {
            reviews: kube::Api::all(client),
            allowed: service_accounts
                .iter()
                .map(|sa| format!("system:serviceaccount:{sa}"))
                .collect(),
            cache: Mutex::default(),
        }
    }

    /// Who a token belongs to (`Err` with the reason when the review says no).
    async fn review(&self, token: &str) -> Result<Answer, Status> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: Some(vec![AUDIENCE.to_owned()]),
            },
            ..TokenReview::default()
        };
        let answer = self
            .reviews
            .create(&kube::api::PostParams::default(), &review)
            .await
            .map_err(|e| Status::unavailable(format!("cannot review the token: {e}")))?;
        let status = answer.status.unwrap_or_default();
        let user = status.user.unwrap_or_default();
        let (Some(true), Some(name)) = (status.authenticated, user.username) else {
            return Ok(Err("unauthenticated"));
        };
        let mut extra = user.extra.unwrap_or_default();
        // A binding field names one pod or node; any other shape is refused, not ignored,
        // since ignoring it would trust the token for every node.
        let mut single = |key: &str| match extra.remove(key) {
            None => Ok(None),
            Some(mut values) if values.len() == 1 && !values[0].is_empty() => Ok(values.pop()),
            Some(_) => Err("unauthenticated"),
        };
        let (pod, node) = match (single(POD_NAME), single(NODE_NAME)) {
            (Ok(pod), Ok(node)) => (pod, node),
            (Err(reason), _) | (_, Err(reason)) => return Ok(Err(reason)),
        };
        Ok(Ok(Identity {
            user: name,
            pod,
            node,
        }))
    }
}

#[tonic::async_trait]
impl Authenticator for TokenReviews {
    async fn authenticate(&self, bearer: Option<&str>) -> Result<Identity, Refusal> {
        let Some(token) = bearer.filter(|t| !t.is_empty()) else {
            return Err(Refusal {
                status: Status::unauthenticated("a bearer token is required"),
                reason: "unauthenticated",
            });
        };
        let cached = {
            let cache = self.cache.lock().await;
            cache
                .get(token)
                .filter(|(_, at)| at.elapsed() < CACHE_TTL)
                .map(|(answer, _)| answer.clone())
        };
        let answer = match cached {
            Some(answer) => answer,
            None => {
                let answer = self.review(token).await.map_err(|status| Refusal {
                    status,
                    reason: "review_failed",
                })?;
                let mut cache = self.cache.lock().await;
                if cache.len() >= CACHE_MAX {
                    cache.clear();
                }
                cache.insert(token.to_owned(), (answer.clone(), Instant::now()));
                answer
            }
        };
        match answer {
            Ok(identity) if self.allowed.contains(&identity.user) => Ok(identity),
            Ok(identity) => Err(Refusal {
                status: Status::permission_denied(format!(
                    "{} may not stream edges",
                    identity.user
                )),
                reason: "forbidden",
            }),
            Err(reason) => Err(Refusal {
                status: Status::unauthenticated("the token was not accepted"),
                reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Identity;

    fn bound(pod: &str, node: &str) -> Identity {
        Identity {
            user: "system:serviceaccount:ne:agent".to_owned(),
            pod: Some(pod.to_owned()),
            node: Some(node.to_owned()),
        }
    }

    #[test]
    fn a_bound_token_speaks_for_its_own_node_only() {
        let identity = bound("agent-x7k2p", "worker-1");
        assert_eq!(identity.admits("worker-1", "worker-1"), Ok(()));
        assert_eq!(identity.admits("worker-1", "agent-x7k2p"), Ok(()));

        let other_node = identity.admits("worker-2", "worker-2").unwrap_err();
        assert!(other_node.contains("\"worker-1\"") && other_node.contains("\"worker-2\""));
        let other_agent = identity.admits("worker-1", "worker-2").unwrap_err();
        assert!(
            other_agent.contains("agent id \"worker-2\""),
            "{other_agent}"
        );
        assert!(identity.admits("worker-1", "").is_err());
    }

    #[test]
    fn a_token_bound_to_no_node_is_trusted_as_its_service_account_is() {
        let identity = Identity::unbound("system:serviceaccount:ne:agent");
        assert_eq!(identity.admits("worker-2", "anything"), Ok(()));
        // A pod not yet scheduled has no node: its token binds no node either.
        let unscheduled = Identity {
            node: None,
            ..bound("agent-x7k2p", "unused")
        };
        assert_eq!(unscheduled.admits("worker-2", "worker-2"), Ok(()));
    }
}
