//! `LogsConfig::from_env`: every variable, its precedence, its default and its errors.

use super::*;

fn from(vars: &[(&str, &str)]) -> anyhow::Result<Option<LogsConfig>> {
    LogsConfig::from_env(env(vars), "ne-leader", &[("k8s.pod.name", "leader-0")])
}

fn configured(vars: &[(&str, &str)]) -> LogsConfig {
    from(vars)
        .unwrap_or_else(|e| panic!("{vars:?}: {e:#}"))
        .unwrap_or_else(|| panic!("{vars:?}: not configured"))
}

/// Variables as a test case lists them.
type Vars<'a> = &'a [(&'a str, &'a str)];

const ENDPOINT: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317");

#[test]
fn off_unless_an_endpoint_is_set_and_nothing_disables_it() {
    for vars in [
        vec![],
        vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")],
        vec![ENDPOINT, ("OTEL_SDK_DISABLED", "true")],
        vec![ENDPOINT, ("OTEL_SDK_DISABLED", "TRUE")],
        vec![ENDPOINT, ("OTEL_LOGS_EXPORTER", "none")],
        // The metrics endpoint is not the logs one.
        vec![("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c:4317")],
    ] {
        assert_eq!(from(&vars).unwrap(), None, "{vars:?}");
    }
    for vars in [
        vec![ENDPOINT],
        vec![ENDPOINT, ("OTEL_LOGS_EXPORTER", "otlp")],
        vec![ENDPOINT, ("OTEL_SDK_DISABLED", "false")],
        vec![ENDPOINT, ("OTEL_METRICS_EXPORTER", "none")],
    ] {
        configured(&vars);
    }
}

#[test]
fn defaults() {
    let c = configured(&[ENDPOINT]);
    assert_eq!(
        c,
        LogsConfig {
            export: ExportConfig {
                endpoint: "http://collector:4317".to_owned(),
                protocol: crate::otlp::Protocol::Grpc,
                headers: vec![],
                timeout: Duration::from_secs(10),
                tls: crate::tls::TlsFiles::default(),
                resource: vec![
                    ("service.name".to_owned(), "ne-leader".to_owned()),
                    ("k8s.pod.name".to_owned(), "leader-0".to_owned()),
                ],
            },
            schedule_delay: Duration::from_secs(1),
            max_queue_size: 2048,
            max_export_batch_size: 512,
            retry: Retry::default(),
        }
    );
}

#[test]
fn endpoints_by_protocol_and_precedence() {
    use crate::otlp::Protocol::{Grpc, HttpProtobuf};
    let cases: &[(Vars, &str, crate::otlp::Protocol)] = &[
        (&[ENDPOINT], "http://collector:4317", Grpc),
        (
            &[
                ENDPOINT,
                ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://logs:4317"),
            ],
            "http://logs:4317",
            Grpc,
        ),
        // HTTP: the generic endpoint is a base, the signal's path is appended.
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ],
            "http://collector:4318/v1/logs",
            HttpProtobuf,
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://gateway/otlp/"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ],
            "http://gateway/otlp/v1/logs",
            HttpProtobuf,
        ),
        // The signal-specific endpoint is used as is.
        (
            &[
                (
                    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
                    "http://collector:4318/ingest",
                ),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ],
            "http://collector:4318/ingest",
            HttpProtobuf,
        ),
        // The signal-specific protocol beats the generic one, both ways.
        (
            &[
                ENDPOINT,
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc"),
            ],
            "http://collector:4317",
            Grpc,
        ),
        (
            &[
                ENDPOINT,
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/protobuf"),
            ],
            "http://collector:4317/v1/logs",
            HttpProtobuf,
        ),
    ];
    for (vars, endpoint, protocol) in cases {
        let c = configured(vars);
        assert_eq!(
            (c.export.endpoint.as_str(), c.export.protocol),
            (*endpoint, *protocol),
            "{vars:?}"
        );
    }
}

#[test]
fn headers_timeout_batching_and_resource() {
    let c = configured(&[
        ENDPOINT,
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-ignored=1"),
        (
            "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
            "Authorization=Basic%20dXNlcjpw%3D%3D , x-tenant=net,",
        ),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "1"),
        ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "2500"),
        ("OTEL_BLRP_SCHEDULE_DELAY", "250"),
        ("OTEL_BLRP_MAX_QUEUE_SIZE", "100"),
        ("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "100"),
        ("OTEL_SERVICE_NAME", "enforcer-leader"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "k8s.cluster.name=prod, team=net%20ops",
        ),
    ]);
    assert_eq!(
        c.export.headers,
        [("authorization", "Basic dXNlcjpw=="), ("x-tenant", "net")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    assert_eq!(c.export.timeout, Duration::from_millis(2500));
    assert_eq!(c.schedule_delay, Duration::from_millis(250));
    assert_eq!((c.max_queue_size, c.max_export_batch_size), (100, 100));
    assert_eq!(
        c.export.resource,
        [
            ("service.name", "enforcer-leader"),
            ("k8s.pod.name", "leader-0"),
            ("k8s.cluster.name", "prod"),
            ("team", "net ops"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    let generic = configured(&[
        ENDPOINT,
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-a=1"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "30000"),
    ]);
    assert_eq!(generic.export.headers, [("x-a".to_owned(), "1".to_owned())]);
    assert_eq!(generic.export.timeout, Duration::from_secs(30));
}

#[test]
fn tls_files_signal_specific_first() {
    let pki = Pki::new("logs-config-tls");
    let https = ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317");
    let c = configured(&[
        https,
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.crt"),
        ("OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE", text(&pki.ca)),
        (
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            text(&pki.client_cert),
        ),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", text(&pki.client_key)),
    ]);
    assert_eq!(c.export.tls.ca.as_deref(), Some(pki.ca.as_path()));
    assert_eq!(
        c.export.tls.cert.as_deref(),
        Some(pki.client_cert.as_path())
    );
    assert_eq!(c.export.tls.key.as_deref(), Some(pki.client_key.as_path()));
    // A CA alone: server-authenticated TLS.
    let c = configured(&[https, ("OTEL_EXPORTER_OTLP_CERTIFICATE", text(&pki.ca))]);
    assert!(c.export.tls.enabled() && !c.export.tls.mutual());
}

#[test]
fn bad_values_name_their_variable() {
    let pki = Pki::new("logs-config-errors");
    std::fs::write(pki.path("empty.pem"), "").unwrap();
    let empty = pki.path("empty.pem");
    let https = ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317");
    let cases: &[(Vars, &str)] = &[
        (
            &[ENDPOINT, ("OTEL_LOGS_EXPORTER", "console")],
            "OTEL_LOGS_EXPORTER=console is not supported",
        ),
        (
            &[ENDPOINT, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
            "OTEL_EXPORTER_OTLP_PROTOCOL=http/json is not supported",
        ),
        (
            &[ENDPOINT, ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "thrift")],
            "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL=thrift is not supported",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "collector:4317")],
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=collector:4317 is not an http:// or https:// URL",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://bad host")],
            "OTEL_EXPORTER_OTLP_ENDPOINT=http://bad host is not a URL",
        ),
        (
            &[ENDPOINT, ("OTEL_EXPORTER_OTLP_HEADERS", "x-a=1,novalue")],
            "OTEL_EXPORTER_OTLP_HEADERS=x-a=1,novalue: \"novalue\" is not key=value",
        ),
        (
            &[ENDPOINT, ("OTEL_EXPORTER_OTLP_LOGS_HEADERS", "bad name=1")],
            "OTEL_EXPORTER_OTLP_LOGS_HEADERS=bad name=1: \"bad name\" is not a header name",
        ),
        (
            &[ENDPOINT, ("OTEL_EXPORTER_OTLP_HEADERS", "x-a=line%0Abreak")],
            "the value of x-a is not a header value",
        ),
        (
            &[ENDPOINT, ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "10s")],
            "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT=10s is not a whole number",
        ),
        (
            &[ENDPOINT, ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
            "OTEL_EXPORTER_OTLP_COMPRESSION=gzip is not supported",
        ),
        (
            &[ENDPOINT, ("OTEL_BLRP_SCHEDULE_DELAY", "-1")],
            "OTEL_BLRP_SCHEDULE_DELAY=-1 is not a whole number",
        ),
        (
            &[ENDPOINT, ("OTEL_BLRP_MAX_QUEUE_SIZE", "lots")],
            "OTEL_BLRP_MAX_QUEUE_SIZE=lots is not a whole number",
        ),
        (
            &[ENDPOINT, ("OTEL_BLRP_MAX_QUEUE_SIZE", "0")],
            "OTEL_BLRP_MAX_QUEUE_SIZE must be at least 1",
        ),
        (
            &[ENDPOINT, ("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "0")],
            "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE must be at least 1",
        ),
        (
            &[ENDPOINT, ("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "4096")],
            "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE=4096 is larger than OTEL_BLRP_MAX_QUEUE_SIZE=2048",
        ),
        (
            &[https],
            "https://collector:4317 is https: set OTEL_EXPORTER_OTLP_CERTIFICATE (or OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE)",
        ),
        (
            &[
                https,
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.crt"),
            ],
            "cannot read the CA bundle /nonexistent/ca.crt",
        ),
        (
            &[https, ("OTEL_EXPORTER_OTLP_CERTIFICATE", text(&empty))],
            "no certificate in the CA bundle",
        ),
        (
            &[
                https,
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", text(&pki.ca)),
                (
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                    text(&pki.client_cert),
                ),
            ],
            "mTLS needs both a client certificate and a key",
        ),
        (
            &[
                https,
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", text(&pki.ca)),
                (
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                    text(&pki.client_cert),
                ),
                ("OTEL_EXPORTER_OTLP_CLIENT_KEY", text(&empty)),
            ],
            "no private key in",
        ),
    ];
    for (vars, expected) in cases {
        let error = match from(vars) {
            Ok(c) => panic!("{vars:?} gave {c:?}"),
            Err(e) => format!("{e:#}"),
        };
        assert!(error.contains(expected), "{vars:?}: {error}");
    }
}
