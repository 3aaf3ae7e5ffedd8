//! The real `ne-agent` binary: replay a capture, read `/metrics`, `/readyz` and `/healthz`
//! over HTTP, stop it with SIGTERM. Synchronised on the agent's own log lines.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};

fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the agent");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn replays_a_capture_and_serves_its_metrics() {
    let capture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/hubble.jsonl");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_ne-agent"))
        .args(["--source", "file", "--file"])
        .arg(&capture)
        .args(["--metrics-address", "127.0.0.1:0", "--log-format", "json"])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ne-agent");
    let mut log = BufReader::new(agent.stderr.take().unwrap()).lines();
    let mut address = None;
    for line in log.by_ref() {
        let line = line.unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if event["fields"]["message"] == "ne-agent started" {
            address = event["fields"]["address"].as_str().map(str::to_owned);
        }
        if event["fields"]["message"] == "capture replayed" {
            assert_eq!(event["fields"]["edges"], 24);
            break;
        }
    }
    let address = address.expect("the agent logs its metrics address");

    let (status, text) = get(&address, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(
        metric(
            &text,
            "network_enforcer_agent_flows_received_total{source=\"file\"}"
        ),
        Some(152.0)
    );
    assert_eq!(
        metric(
            &text,
            "network_enforcer_agent_flows_dropped_total{reason=\"reply\"}"
        ),
        Some(53.0)
    );
    assert_eq!(
        metric(&text, "network_enforcer_agent_scraper_lag_seconds_count"),
        Some(152.0)
    );
    assert_eq!(get(&address, "/readyz").0, 200);
    assert_eq!(get(&address, "/healthz").0, 200);
    assert_eq!(get(&address, "/nope").0, 404);

    let killed = Command::new("kill")
        .args(["-TERM", &agent.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let rest: Vec<String> = log.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("shutting down")), "{rest:?}");
    assert!(agent.wait().unwrap().success());
}
