//! The controller's errors, each with a bounded `error_type` for the
//! `leader_reconcile_errors_total{controller, error_type}` label.

use kube::runtime::reflector::store::WriterDropped;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot ask the API server whether Istio's AuthorizationPolicy CRD is served")]
    Discovery(#[source] kube::Error),
    #[error("a cluster cache stopped before its first list")]
    CacheStopped(#[source] WriterDropped),
    #[error("{kind} {verb} failed")]
    Write {
        kind: &'static str,
        verb: &'static str,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// Why it failed, bounded for a metric label.
    pub fn error_type(&self) -> &'static str {
        match self {
            Error::Discovery(e) | Error::Write { source: e, .. } => kube_error_type(e),
            Error::CacheStopped(_) => "cache_stopped",
        }
    }
}

/// The bounded type of a kube error: the HTTP status that matters to an operator, or the
/// transport.
pub fn kube_error_type(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(s) if s.code == 409 => "conflict",
        kube::Error::Api(s) if s.code == 404 => "not_found",
        kube::Error::Api(s) if s.code == 403 => "forbidden",
        kube::Error::Api(s) if s.code == 422 => "invalid",
        kube::Error::Api(s) if s.code == 429 => "throttled",
        kube::Error::Api(_) => "api",
        _ => "transport",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..kube::core::Status::default()
        }))
    }

    #[test]
    fn error_types_are_bounded_and_name_the_status() {
        let write = |code| Error::Write {
            kind: "NetworkPolicy",
            verb: "apply",
            source: api(code),
        };
        let types: Vec<_> = [409, 404, 403, 422, 429, 500]
            .into_iter()
            .map(|c| write(c).error_type())
            .collect();
        assert_eq!(
            types,
            [
                "conflict",
                "not_found",
                "forbidden",
                "invalid",
                "throttled",
                "api"
            ]
        );
        assert_eq!(Error::Discovery(api(403)).error_type(), "forbidden");
        assert_eq!(write(409).to_string(), "NetworkPolicy apply failed");
    }
}
