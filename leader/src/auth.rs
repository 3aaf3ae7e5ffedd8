//! Who may stream to the leader: agents present their projected ServiceAccount token
//! (audience `network-enforcer`) as `authorization: Bearer …`; the leader checks it with a
//! `TokenReview` and accepts only the configured ServiceAccounts. Answers are cached for a
//! minute per token, so a reconnecting fleet does not hammer the API server.

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

/// Checks a stream's credentials.
#[tonic::async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// The authenticated user name, or why the stream is refused.
    async fn authenticate(&self, bearer: Option<&str>) -> Result<String, Refusal>;
}

/// Accepts every stream (`--insecure-ingest`, development only).
#[derive(Debug)]
pub struct Insecure;

#[tonic::async_trait]
impl Authenticator for Insecure {
    async fn authenticate(&self, _: Option<&str>) -> Result<String, Refusal> {
        Ok("anonymous".to_owned())
    }
}

/// A review's answer: the user, or why the token was not accepted (a metric label).
type Answer = Result<String, &'static str>;

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

    /// The user a token belongs to (`Err` with the reason when the review says no).
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
        Ok(
            match (status.authenticated, status.user.and_then(|u| u.username)) {
                (Some(true), Some(user)) => Ok(user),
                _ => Err("unauthenticated"),
            },
        )
    }
}

#[tonic::async_trait]
impl Authenticator for TokenReviews {
    async fn authenticate(&self, bearer: Option<&str>) -> Result<String, Refusal> {
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
            Ok(user) if self.allowed.contains(&user) => Ok(user),
            Ok(user) => Err(Refusal {
                status: Status::permission_denied(format!("{user} may not stream edges")),
                reason: "forbidden",
            }),
            Err(reason) => Err(Refusal {
                status: Status::unauthenticated("the token was not accepted"),
                reason,
            }),
        }
    }
}
