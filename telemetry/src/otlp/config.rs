//! The standard `OTEL_EXPORTER_OTLP_*` variables, read the same way for every signal
//! (metrics in [`super`], log events in [`crate::logs`]): a signal-specific variable
//! (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`) beats the generic one (`OTEL_EXPORTER_OTLP_ENDPOINT`).
//! Bad values are errors that name the variable, so a binary refuses to start instead of
//! exporting nowhere.

use std::time::Duration;

use anyhow::{Context, bail};
use hyper::header::{HeaderName, HeaderValue};

use super::signal::Signal;
use crate::tls::TlsFiles;

/// The wire protocol. `grpc` is the default (the OTel spec's default is `http/protobuf`;
/// ours stays `grpc`, which every collector's OTLP receiver accepts on 4317).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// Where and how one signal is exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportConfig {
    /// For gRPC the collector's address; for HTTP the full URL of the signal's path.
    pub endpoint: String,
    pub protocol: Protocol,
    /// Sent with every export (gRPC metadata or HTTP headers); names are lowercase.
    pub headers: Vec<(String, String)>,
    /// Per export request.
    pub timeout: Duration,
    pub tls: TlsFiles,
    /// Resource attributes, `service.name` first.
    pub resource: Vec<(String, String)>,
}

/// A variable lookup in which empty values count as unset.
pub(crate) struct Env<F>(pub F);

impl<F: Fn(&str) -> Option<String>> Env<F> {
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    /// `OTEL_EXPORTER_OTLP_<SIGNAL>_<suffix>`, else `OTEL_EXPORTER_OTLP_<suffix>`, with the
    /// name of the variable that was set (for error messages).
    fn otlp(&self, signal: &str, suffix: &str) -> Option<(String, String)> {
        [
            format!("OTEL_EXPORTER_OTLP_{signal}_{suffix}"),
            format!("OTEL_EXPORTER_OTLP_{suffix}"),
        ]
        .into_iter()
        .find_map(|name| self.get(&name).map(|v| (name, v)))
    }

    /// A whole number, `default` when unset.
    pub(crate) fn number(&self, name: &str, default: u64) -> anyhow::Result<u64> {
        match self.get(name) {
            Some(v) => v
                .trim()
                .parse()
                .with_context(|| format!("{name}={v} is not a whole number")),
            None => Ok(default),
        }
    }

    /// A number of milliseconds, `default_ms` when unset.
    pub(crate) fn millis(&self, name: &str, default_ms: u64) -> anyhow::Result<Duration> {
        self.number(name, default_ms)
            .map(Duration::from_millis)
            .with_context(|| format!("{name} is a number of milliseconds"))
    }
}

impl ExportConfig {
    /// Reads the export settings of signal `S`. `service` is the default `service.name`;
    /// `attributes` are resource attributes the binary knows (`k8s.pod.name`), before
    /// `OTEL_RESOURCE_ATTRIBUTES`. `Ok(None)` when the signal is not configured (no endpoint)
    /// or disabled (`OTEL_SDK_DISABLED=true`, `OTEL_<SIGNAL>_EXPORTER=none`).
    pub(crate) fn from_env<S: Signal>(
        env: &Env<impl Fn(&str) -> Option<String>>,
        service: &str,
        attributes: &[(&str, &str)],
    ) -> anyhow::Result<Option<Self>> {
        if env
            .get("OTEL_SDK_DISABLED")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        {
            return Ok(None);
        }
        let exporter = format!("OTEL_{}_EXPORTER", S::NAME);
        match env.get(&exporter).as_deref().map(str::trim) {
            Some("none") => return Ok(None),
            Some("otlp") | None => {}
            Some(other) => bail!("{exporter}={other} is not supported: use otlp or none"),
        }
        let Some((endpoint_var, endpoint)) = env.otlp(S::NAME, "ENDPOINT") else {
            return Ok(None);
        };
        let protocol = match env.otlp(S::NAME, "PROTOCOL") {
            None => Protocol::Grpc,
            Some((_, p)) if p.trim() == "grpc" => Protocol::Grpc,
            Some((_, p)) if p.trim() == "http/protobuf" => Protocol::HttpProtobuf,
            Some((name, p)) => {
                bail!("{name}={p} is not supported: use grpc or http/protobuf")
            }
        };
        let endpoint = endpoint.trim().to_owned();
        let uri: hyper::Uri = endpoint
            .parse()
            .with_context(|| format!("{endpoint_var}={endpoint} is not a URL"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            bail!("{endpoint_var}={endpoint} is not an http:// or https:// URL");
        }
        // Only the generic endpoint is a base URL; a signal-specific one is used as is.
        let endpoint = if protocol == Protocol::HttpProtobuf
            && endpoint_var == "OTEL_EXPORTER_OTLP_ENDPOINT"
        {
            format!("{}{}", endpoint.trim_end_matches('/'), S::HTTP_PATH)
        } else {
            endpoint
        };
        if let Some((name, c)) = env.otlp(S::NAME, "COMPRESSION")
            && c.trim() != "none"
        {
            bail!("{name}={c} is not supported: exports are not compressed");
        }
        let headers = match env.otlp(S::NAME, "HEADERS") {
            Some((name, list)) => parse_headers(&list).with_context(|| format!("{name}={list}"))?,
            None => Vec::new(),
        };
        let timeout = match env.otlp(S::NAME, "TIMEOUT") {
            Some((name, _)) => env.millis(&name, 0)?,
            None => Duration::from_secs(10),
        };
        let file = |suffix| env.otlp(S::NAME, suffix).map(|(_, v)| v.trim().into());
        let tls = TlsFiles {
            ca: file("CERTIFICATE"),
            cert: file("CLIENT_CERTIFICATE"),
            key: file("CLIENT_KEY"),
            server_name: None,
        };
        if endpoint.starts_with("https://") && !tls.enabled() {
            bail!(
                "{endpoint} is https: set OTEL_EXPORTER_OTLP_CERTIFICATE (or OTEL_EXPORTER_OTLP_{}_CERTIFICATE) to the CA that signed the collector's certificate",
                S::NAME
            );
        }
        if tls.enabled() {
            // Read and parse the files now: a wrong path fails at start, not at every export.
            tls.rustls_config()
                .context("the OTEL_EXPORTER_OTLP_*CERTIFICATE / *CLIENT_KEY files")?;
        }
        Ok(Some(ExportConfig {
            endpoint,
            protocol,
            headers,
            timeout,
            tls,
            resource: resource(env, service, attributes),
        }))
    }
}

/// `service.name`, then the binary's attributes, then `OTEL_RESOURCE_ATTRIBUTES`.
fn resource(
    env: &Env<impl Fn(&str) -> Option<String>>,
    service: &str,
    attributes: &[(&str, &str)],
) -> Vec<(String, String)> {
    let mut resource = vec![(
        "service.name".to_owned(),
        env.get("OTEL_SERVICE_NAME")
            .unwrap_or_else(|| service.to_owned()),
    )];
    for (k, v) in attributes {
        resource.push(((*k).to_owned(), (*v).to_owned()));
    }
    for pair in env
        .get("OTEL_RESOURCE_ATTRIBUTES")
        .iter()
        .flat_map(|v| v.split(','))
    {
        if let Some((k, v)) = pair.split_once('=') {
            resource.push((k.trim().to_owned(), percent_decode(v.trim())));
        }
    }
    resource
}

/// `k=v,k2=v2` with percent-encoded values, as HTTP header (and gRPC metadata) pairs.
fn parse_headers(list: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut headers = Vec::new();
    for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            bail!("{pair:?} is not key=value");
        };
        let value = percent_decode(v.trim());
        let name = HeaderName::from_bytes(k.trim().as_bytes())
            .with_context(|| format!("{:?} is not a header name", k.trim()))?;
        HeaderValue::from_str(&value)
            .with_context(|| format!("the value of {name} is not a header value"))?;
        headers.push((name.as_str().to_owned(), value));
    }
    Ok(headers)
}

/// `%XX` escapes decoded; a malformed escape or non-UTF-8 result is kept as written.
fn percent_decode(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let escaped = s
            .get(i + 1..i + 3)
            .filter(|h| s.as_bytes()[i] == b'%' && h.bytes().all(|c| c.is_ascii_hexdigit()))
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(s.as_bytes()[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
}
