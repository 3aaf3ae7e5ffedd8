//! The ztunnel fast path ([`record_line`]) against the exact path ([`record_line_exact`]: `decode_line` then
//! `FlowTable::record_flow`): generated lines of every shape, the real captures, and the
//! byte-level parsers against the ones they stand in for.

use std::net::SocketAddr;

use proptest::prelude::*;

use super::fast::fast;
use super::scan::{addr, find_eq_or_sep, find_quote, find_sep, ipv4_port, plain, time};
use super::*;
use crate::{Format, LineDecoder};
use ne_flow::edge::{EdgeSkip, Provider};
use ne_flow::table::{EdgeSnapshot, FlowTable, RecordOutcome};
use ne_flow::time::parse_rfc3339;

fn sorted(table: &FlowTable) -> Vec<EdgeSnapshot> {
    let mut s = table.snapshot();
    s.sort_by_key(EdgeSnapshot::key);
    s
}

/// Records every payload twice (the second pass finds known keys) on two tables, fast
/// and slow, asserting the same answer each time and the same tables at the end;
/// returns how many payloads the fast path decided without the slow path.
fn same_as_slow(payloads: &[Vec<u8>], provider: Provider, capacity: usize) -> usize {
    let (fast_table, slow_table) = (FlowTable::new(capacity), FlowTable::new(capacity));
    let scratch = FlowTable::new(capacity);
    let mut decided = 0;
    for p in payloads.iter().chain(payloads) {
        let got = record_line(&fast_table, p, provider);
        let want = record_line_exact(&slow_table, p, provider);
        assert_eq!(got, want, "{}", String::from_utf8_lossy(p));
        let trimmed = p.trim_ascii();
        decided += usize::from(!trimmed.is_empty() && fast(&scratch, trimmed, provider).is_some());
    }
    assert_eq!(sorted(&fast_table), sorted(&slow_table));
    assert_eq!(fast_table.dropped(), slow_table.dropped());
    decided / 2
}

// ---------------------------------------------------------------------------------------
// Generated lines

fn one_of(items: &'static [&'static str]) -> BoxedStrategy<String> {
    prop::sample::select(items).prop_map(str::to_owned).boxed()
}

/// A timestamp as ztunnel writes it (microseconds, UTC).
fn arb_ztunnel_time() -> BoxedStrategy<String> {
    (
        0u32..4,
        1u32..=12,
        1u32..=28,
        0u32..24,
        0u32..60,
        0u32..60,
        0u32..1_000_000,
    )
        .prop_map(|(y, mo, d, h, mi, s, us)| {
            format!("{}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}Z", 2024 + y)
        })
        .boxed()
}

/// Timestamps: mostly ztunnel's own, then other RFC 3339 spellings and broken ones.
fn arb_time() -> BoxedStrategy<String> {
    let canonical = arb_ztunnel_time();
    let any = (
        prop::sample::select(&[1969u32, 1970, 2024, 2199, 2200, 2262, 2263, 9999][..]),
        0u32..=13,
        0u32..=32,
        0u32..=24,
        0u32..=60,
        0u32..=61,
        one_of(&[
            "",
            ".1",
            ".123456",
            ".123456789",
            ".1234567890",
            ".",
            ".12a",
        ]),
        one_of(&["T", "t", "T", "x"]),
        one_of(&["Z", "z", "+02:00", "-00:30", "", "+2"]),
    )
        .prop_map(|(y, mo, d, h, mi, s, frac, t, zone)| {
            format!("{y:04}-{mo:02}-{d:02}{t}{h:02}:{mi:02}:{s:02}{frac}{zone}")
        });
    prop_oneof![6 => canonical, 3 => any, 1 => Just(String::new())].boxed()
}

fn arb_value(key: &str) -> BoxedStrategy<String> {
    match key {
        "src.addr" | "dst.addr" | "dst.hbone_addr" => one_of(&[
            "10.244.1.11:48696",
            "10.244.2.21:15008",
            "10.244.2.21:8080",
            "10.244.0.5:9080",
            "[fd00::9]:5432",
            "[fd00::9]:15008",
            "142.251.209.46:443",
            "0.0.0.0:0",
            "10.xx.xx.xx:40422",
            "010.1.2.3:80",
            "1.2.3.4:080",
            "1.2.3.4:65536",
            "256.1.1.1:1",
            "",
            ":80",
            "1.2.3.4",
        ]),
        "src.workload" | "dst.workload" => {
            one_of(&["web-7d4f9c6b8d-k2x7p", "api-5c8b", "db-0", "-", ""])
        }
        "src.namespace" | "dst.namespace" => one_of(&["shop", "default", "-", ""]),
        "src.identity" | "dst.identity" => one_of(&[
            "spiffe://cluster.local/ns/shop/sa/web",
            "spiffe://cluster.local/ns/shop/sa/api",
            "cluster.local/ns/x/sa/y",
            "spiffe://",
            "-",
            "",
        ]),
        "direction" => one_of(&["inbound", "outbound", "inbound", "outbound", "sideways", ""]),
        "error" => one_of(&[
            "connection closed due to policy rejection: explicitly denied by: db/deny",
            "connection closed due to policy rejection",
            "http status: 401 Unauthorized",
            "io error: Connection refused (os error 111)",
            "-",
            "",
        ]),
        _ => one_of(&["5117", "794ms", "x=y", "api.shop.svc.cluster.local", "a b"]),
    }
}

/// One `k=v` field (or a stray word), with its leading separator: bare or quoted values,
/// escapes, unterminated quotes, odd spacing.
fn arb_field() -> BoxedStrategy<String> {
    let key = one_of(&[
        "src.addr",
        "src.workload",
        "src.namespace",
        "src.identity",
        "dst.addr",
        "dst.hbone_addr",
        "dst.workload",
        "dst.namespace",
        "dst.identity",
        "direction",
        "error",
        "dst.service",
        "bytes_sent",
        "duration",
        "src.protocol",
        "",
    ]);
    let sep = one_of(&[" ", " ", "\t", "  ", ""]);
    (key, sep)
        .prop_flat_map(|(key, sep)| {
            let quoting = prop_oneof![
                8 => Just(0u8), // bare
                8 => Just(1),   // quoted
                1 => Just(2),   // quoted, with an escape
                1 => Just(3),   // quote never closed
                1 => Just(4),   // a word without `=`
            ];
            let escape = one_of(&[r#"\""#, r"\\", r"\u{e9}", r"\n", r"\u{zz}", r"\u"]);
            (
                Just(key.clone()),
                Just(sep),
                arb_value(&key),
                quoting,
                escape,
            )
        })
        .prop_map(|(key, sep, value, quoting, escape)| match quoting {
            0 => format!("{sep}{key}={value}"),
            1 => format!("{sep}{key}=\"{value}\""),
            2 => {
                let cut = value.len() / 2;
                format!("{sep}{key}=\"{}{escape}{}\"", &value[..cut], &value[cut..])
            }
            3 => format!("{sep}{key}=\"{value}"),
            _ => format!("{sep}{value}"),
        })
        .boxed()
}

/// A learnable inbound field set (so that tables fill and keys repeat).
fn arb_inbound() -> BoxedStrategy<String> {
    (
        one_of(&["web-7d4f9c6b8d-k2x7p", "api-5c8b"]),
        one_of(&["api-5c8b", "db-0"]),
        one_of(&["10.244.2.21:15008", "[fd00::9]:15008"]),
        one_of(&["10.244.2.21:8080", "10.244.2.21:5432", "[fd00::9]:9090"]),
    )
        .prop_map(|(src, dst, addr, hbone)| {
            format!(
                " src.addr=10.244.1.11:48696 src.workload=\"{src}\" src.namespace=\"shop\" \
                 src.identity=\"spiffe://cluster.local/ns/shop/sa/{src}\" dst.addr={addr} \
                 dst.hbone_addr={hbone} dst.workload=\"{dst}\" dst.namespace=\"shop\" \
                 direction=\"inbound\" bytes_sent=1 duration=\"2ms\""
            )
        })
        .boxed()
}

/// Text lines of every shape, some with random byte edits, and a few JSON lines.
fn arb_line() -> BoxedStrategy<Vec<u8>> {
    let sep = || one_of(&["\t", " ", "\t", "  ", " \t"]);
    let head = (
        arb_time(),
        sep(),
        one_of(&[
            "info", "info", "INFO", "error", "warn", "debug", "Info", "bogus", "",
        ]),
        sep(),
        one_of(&[
            "access",
            "access",
            "access",
            "access:",
            "xds",
            "state:proxy{wl=a}:inbound{id=1 peer=1.2.3.4:5}:",
            "state:proxy{wl=ns/pod}:inbound{id=1 peer=10.0.0.9:4000}",
            "state",
            "ztunnel::state",
            "acc{ess",
            ":",
        ]),
        sep(),
        one_of(&[
            "connection complete",
            "connection complete",
            "connection complete",
            "connection  complete",
            "connection\tcomplete",
            "connection opened",
            "connection failed",
            "connection complete extra",
            "connection",
            "dry-run: deny policy match",
            "dry-run: no allow policies match",
            "deny policy match",
            "",
        ]),
    )
        .prop_map(|(t, s1, level, s2, target, s3, message)| {
            let t = if t.is_empty() { t } else { t + &s1 };
            format!("{t}{level}{s2}{target}{s3}{message}")
        });
    let fields = prop_oneof![
        2 => prop::collection::vec(arb_field(), 0..16).prop_map(|f| f.concat()),
        1 => arb_inbound(),
        1 => (arb_inbound(), prop::collection::vec(arb_field(), 0..4))
            .prop_map(|(a, b)| a + &b.concat()),
    ];
    let padding = one_of(&["", "", "", " ", "\t", "\r"]);
    let text = (head, fields, padding.clone(), padding)
        .prop_map(|(h, f, lead, trail)| format!("{lead}{h}{f}{trail}").into_bytes());
    let odd = prop::sample::select(
        &[
            0x0Bu8, 0x0C, b'\r', b'\n', 0xC3, 0xA9, 0xFF, 0x85, b'{', b'}', b'"', b'\\', b'=',
            b' ', b'\t', b'a', b'0', b':', b'.',
        ][..],
    );
    let edit = (
        any::<prop::sample::Index>(),
        prop_oneof![odd, any::<u8>()],
        0u8..3,
    );
    let edited = (text.clone(), prop::collection::vec(edit, 1..4)).prop_map(|(mut b, edits)| {
        for (at, byte, op) in edits {
            if b.is_empty() {
                break;
            }
            let i = at.index(b.len());
            match op {
                0 => b[i] = byte,
                1 => {
                    b.remove(i);
                }
                _ => b.insert(i, byte),
            }
        }
        b
    });
    let json = one_of(&[
        r#"{"level":"info","time":"2026-08-03T15:48:10.413052Z","scope":"access","message":"connection complete","src.addr":"10.244.0.5:34704","src.workload":"c","src.namespace":"default","src.identity":"spiffe://cluster.local/ns/default/sa/c","dst.addr":"10.244.1.5:15008","dst.hbone_addr":"10.244.1.5:18080","dst.workload":"s","dst.namespace":"default","direction":"inbound"}"#,
        r#"{"scope":"access","message":"connection complete","src.addr":"1.2.3.4:5","dst.addr":"10.0.0.1:80","direction":"inbound","error":"connection closed due to policy rejection"}"#,
        r#"{"scope":"ztunnel::state","message":"dry-run: no allow policies match"}"#,
        r#"{"time":"2026-08-11T10:45:04.121633Z","scope":"ztunnel::state","message":"dry-run: deny policy match","policy":"ns/p","proxy":{"wl":"ns/pod"},"inbound":{"peer":"10.0.0.9:4000"}}"#,
        r#"{"scope":"access""#,
    ])
    .prop_map(String::into_bytes);
    prop_oneof![12 => text, 4 => edited, 1 => json].boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Line for line the fast path answers like the slow path (errors, skips, outcomes,
    /// times, denials), and both tables end up with the same entries, first edges,
    /// counts and times. A small capacity makes the tables fill up and drop.
    #[test]
    fn fast_path_records_like_the_slow_path(
        lines in prop::collection::vec(arb_line(), 1..24),
        provider in prop::sample::select(&[Provider::Istio, Provider::Istio, Provider::Cilium][..]),
        capacity in prop_oneof![3 => Just(1usize << 10), 1 => 0usize..3],
    ) {
        same_as_slow(&lines, provider, capacity);
    }

    /// Lines in ztunnel's own shape never need the slow path, learnable or not.
    #[test]
    fn common_lines_take_the_fast_path(
        time in arb_ztunnel_time(),
        fields in arb_inbound(),
        outbound in any::<bool>(),
    ) {
        let mut line = format!("{time}\tinfo\taccess\tconnection complete\t{}", fields.trim_start());
        if outbound {
            line = line.replace("inbound", "outbound");
        }
        let lines = [line.into_bytes()];
        prop_assert_eq!(same_as_slow(&lines, Provider::Istio, 16), 1);
    }

    /// Whatever the fast time parser reads, `parse_rfc3339` reads the same.
    #[test]
    fn time_agrees_with_rfc3339(t in arb_time()) {
        if let Some(ts) = time(t.as_bytes()) {
            prop_assert_eq!(parse_rfc3339(&t), Ok(ts));
        }
    }

    /// Whatever the fast address parser reads, `SocketAddr::from_str` reads the same, and
    /// `addr` is `SocketAddr::from_str`.
    #[test]
    fn addresses_agree_with_std(
        s in prop_oneof![
            "[0-9]{1,4}\\.[0-9]{1,4}\\.[0-9]{1,4}\\.[0-9]{1,4}:[0-9]{1,6}",
            "[0-9.:\\[\\]a-f%]{0,24}",
        ],
        v4 in any::<std::net::SocketAddrV4>(),
    ) {
        if let Some(a) = ipv4_port(s.as_bytes()) {
            prop_assert_eq!(s.parse::<SocketAddr>(), Ok(a));
        }
        prop_assert_eq!(addr(s.as_bytes()), s.parse::<SocketAddr>().ok());
        let canonical = v4.to_string();
        prop_assert_eq!(ipv4_port(canonical.as_bytes()), Some(SocketAddr::V4(v4)));
    }

    /// The word-at-a-time searches find what a byte loop finds, in [`plain`] lines.
    #[test]
    fn searches_agree_with_byte_loops(
        bytes in prop::collection::vec(
            prop::sample::select(&[b' ', b'\t', b'=', b'"', b'!', b'>', b'#', b']', b'-', b'a', b'~'][..]),
            0..40,
        ).prop_filter("plain", |b| plain(b)),
        at in 0usize..42,
    ) {
        let naive = |is: &dyn Fn(u8) -> bool| {
            bytes.get(at..).and_then(|r| r.iter().position(|&b| is(b))).map_or(bytes.len(), |i| at + i)
        };
        prop_assert_eq!(find_sep(&bytes, at), naive(&|b| b == b' ' || b == b'\t'));
        prop_assert_eq!(
            find_eq_or_sep(&bytes, at),
            naive(&|b| b == b'=' || b == b' ' || b == b'\t')
        );
        prop_assert_eq!(find_quote(&bytes, at), naive(&|b| b == b'"'));
    }

    /// `plain` is "printable ASCII or TAB, but no backslash".
    #[test]
    fn plain_is_printable_ascii_or_tab(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        let want = bytes
            .iter()
            .all(|&b| b != b'\\' && (b == b'\t' || (b' '..=b'~').contains(&b)));
        prop_assert_eq!(plain(&bytes), want);
    }
}

#[test]
fn times_in_ztunnel_shape_are_read_fast() {
    for t in [
        "2025-12-01T10:00:07.889297Z",
        "2024-02-29T23:59:60.000001Z",
        "2026-08-03T15:47:26Z",
        "2026-08-03T15:47:26.1Z",
        "2026-08-03T15:47:26.123456789Z",
        "1970-01-01T00:00:00Z",
        "2199-12-31T23:59:59.999999999Z",
    ] {
        assert_eq!(time(t.as_bytes()).map(Ok), Some(parse_rfc3339(t)), "{t}");
    }
    for t in [
        "2025-02-29T10:00:07Z",
        "2025-12-01t10:00:07Z",
        "2025-12-01T10:00:07+00:00",
        "2025-12-01T10:00:07.1234567890Z",
        "2025-12-01T10:00:07.Z",
        "2200-01-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
        "2025-12-01T24:00:00Z",
    ] {
        assert_eq!(time(t.as_bytes()), None, "{t}");
    }
}

// ---------------------------------------------------------------------------------------
// Real captures

fn real(name: &str) -> String {
    let path = format!("{}/../../testdata/real/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn payloads(text: &str) -> Vec<Vec<u8>> {
    let mut cri = LineDecoder::new(Format::Ztunnel);
    text.lines()
        .filter_map(|l| cri.payload(l.as_bytes()).map(|p| p.into_owned()))
        .collect()
}

/// Every real ztunnel line (text, JSON, fragments) and the bundled CRI-framed example:
/// the same answers and tables as the slow path, under each provider's rules.
#[test]
fn real_lines_record_like_the_slow_path() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/flows/ztunnel.log"
    ))
    .unwrap();
    let real_text = payloads(&real("ztunnel-access.log"));
    for provider in [Provider::Istio, Provider::Cilium] {
        // ztunnel-access.log has 53 lines: 47 access lines, 3 of them policy rejections
        // (denials, decoded by the slow path), and 6 `state:proxy{…}` lines (span
        // fields in the header: the slow path groups them; 2 are dry-run denials). The fast path decides the
        // other 44 itself, tab- or space-separated, with or without a time, quoted or
        // bare values, errors that are not policy rejections.
        assert_eq!(
            same_as_slow(&real_text, provider, 1 << 10),
            44,
            "{provider:?}"
        );
        for file in ["ztunnel-access-json.log", "ztunnel-access-fragments.log"] {
            same_as_slow(&payloads(&real(file)), provider, 1 << 10);
        }
        // The example: 86 CRI lines, 78 payloads once `P` pieces are joined. The slow
        // path decides 2: an `xds{id=3}` span line and a policy rejection.
        let cri = payloads(&example);
        assert_eq!(cri.len(), 78);
        assert_eq!(same_as_slow(&cri, provider, 1 << 10), 76, "{provider:?}");
    }
}

/// A known edge is counted and timed from the line alone; a new one is the slow path's
/// edge.
#[test]
fn known_edges_are_counted_from_the_line() {
    let line = |t: &str, port: u16| {
        format!(
            "{t}\tinfo\taccess\tconnection complete\tsrc.addr=10.244.1.11:48696 \
             src.workload=\"web-1\" src.namespace=\"shop\" \
             src.identity=\"spiffe://cluster.local/ns/shop/sa/web\" \
             dst.addr=10.244.2.21:15008 dst.hbone_addr=10.244.2.21:{port} \
             dst.workload=\"api-1\" dst.namespace=\"shop\" direction=\"inbound\""
        )
    };
    let table = FlowTable::new(8);
    let first = line("2025-12-01T10:00:07.889297Z", 8080);
    let later = line("2025-12-01T10:00:09.5Z", 8080);
    let earlier = line("2025-12-01T10:00:01Z", 8080);
    let outcome = |l: &str| match record_line(&table, l.as_bytes(), Provider::Istio) {
        Ok(ZtunnelRecorded::Flow { time, outcome }) => (time, outcome),
        other => panic!("{other:?}"),
    };
    let t0 = parse_rfc3339("2025-12-01T10:00:07.889297Z").unwrap();
    assert_eq!(outcome(&first), (Some(t0), Ok(RecordOutcome::Inserted)));
    assert_eq!(outcome(&later).1, Ok(RecordOutcome::Updated));
    assert_eq!(outcome(&earlier).1, Ok(RecordOutcome::Updated));
    let [entry] = &table.snapshot()[..] else {
        panic!("one entry")
    };
    assert_eq!(entry.count, 3);
    assert_eq!(
        entry.first_seen,
        parse_rfc3339("2025-12-01T10:00:01Z").unwrap()
    );
    assert_eq!(
        entry.last_seen,
        parse_rfc3339("2025-12-01T10:00:09.5Z").unwrap()
    );
    let Ok(Decoded::Record(r)) = decode(first.as_bytes()) else {
        panic!("decodes")
    };
    assert_eq!(
        entry.edge,
        ne_flow::edge::derive(&r, Provider::Istio).unwrap()
    );
    assert_eq!(entry.edge.port, 8080);
    // Outbound: not learned under Istio, learned under Cilium's rules.
    let out = first.replace("inbound", "outbound");
    assert_eq!(
        outcome(&out),
        (Some(t0), Err(EdgeSkip::DirectionNotLearned))
    );
    assert_eq!(
        record_line(&table, out.as_bytes(), Provider::Cilium),
        Ok(ZtunnelRecorded::Flow {
            time: Some(t0),
            outcome: Ok(RecordOutcome::Inserted)
        })
    );
}
