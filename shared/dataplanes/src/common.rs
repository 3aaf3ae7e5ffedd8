//! Helpers shared by the decoders: borrowed strings, lenient JSON scalars (enums and
//! int64s as strings or numbers), `key=value` labels, addresses, and the Calico endpoint
//! rules used by both Goldmane and Felix flow logs.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};
use std::ops::Deref;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::DecodeError;
use ne_flow::flow::{Labels, Protocol, Str, Timestamp, labels};

/// A JSON string that borrows from the input when it has no escapes. (Serde's own
/// `Cow<str>` always allocates inside sequences.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CowStr<'a>(pub Cow<'a, str>);

impl Deref for CowStr<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for CowStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = CowStr<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

/// An optional string that is absent, `null`, empty or Calico's `-` placeholder.
pub(crate) fn present<'s>(s: &'s Option<CowStr<'_>>) -> Option<&'s str> {
    s.as_deref().filter(|v| !v.is_empty() && *v != "-")
}

/// A protobuf enum as JSON: its name (protojson) or its number (Go `encoding/json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EnumVal<'a> {
    Name(CowStr<'a>),
    Num(i64),
}

impl EnumVal<'_> {
    /// Matches the name case-insensitively or the number.
    pub(crate) fn is(&self, name: &str, num: i64) -> bool {
        match self {
            EnumVal::Name(n) => n.eq_ignore_ascii_case(name),
            EnumVal::Num(v) => *v == num,
        }
    }

    /// The value as text, for error messages.
    pub(crate) fn text(&self) -> String {
        match self {
            EnumVal::Name(n) => n.to_string(),
            EnumVal::Num(v) => v.to_string(),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for EnumVal<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = EnumVal<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an enum name or number")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(EnumVal::Name(CowStr(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(EnumVal::Name(CowStr(Cow::Owned(v.to_owned()))))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(EnumVal::Num(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                i64::try_from(v)
                    .map(EnumVal::Num)
                    .map_err(|_| E::custom("enum number out of range"))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A protobuf int64: a JSON number or a decimal string (protojson).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FlexInt(pub i64);

impl<'de> Deserialize<'de> for FlexInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = FlexInt;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or a decimal string")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(FlexInt(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                i64::try_from(v)
                    .map(FlexInt)
                    .map_err(|_| E::custom(format!("integer {v} out of range")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse()
                    .map(FlexInt)
                    .map_err(|_| E::custom(format!("{v:?} is not an integer")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A time as the flow sources give it: RFC 3339 text, Unix seconds (number or decimal
/// string), or a protobuf `{seconds, nanos}` object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TimeVal<'a> {
    Text(CowStr<'a>),
    Parts { seconds: i64, nanos: i64 },
}

impl TimeVal<'_> {
    pub(crate) fn resolve(&self) -> Result<Timestamp, DecodeError> {
        match self {
            TimeVal::Text(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s
                .parse::<i64>()
                .map(Timestamp::from_secs)
                .map_err(|_| DecodeError::BadValue {
                    field: "time",
                    value: s.to_string(),
                }),
            TimeVal::Text(s) => parse_time(s),
            TimeVal::Parts { seconds, nanos } => {
                Ok(ne_flow::time::from_secs_nanos(*seconds, *nanos))
            }
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for TimeVal<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = TimeVal<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a timestamp")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(TimeVal::Text(CowStr(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(TimeVal::Text(CowStr(Cow::Owned(v.to_owned()))))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(TimeVal::Parts {
                    seconds: v,
                    nanos: 0,
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                let seconds = i64::try_from(v).map_err(|_| E::custom("timestamp out of range"))?;
                Ok(TimeVal::Parts { seconds, nanos: 0 })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut seconds, mut nanos) = (0, 0);
                while let Some(key) = map.next_key::<CowStr<'a>>()? {
                    match &*key {
                        "seconds" => seconds = map.next_value::<FlexInt>()?.0,
                        "nanos" => nanos = map.next_value::<FlexInt>()?.0,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(TimeVal::Parts { seconds, nanos })
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// Parses an RFC 3339 time into a [`DecodeError::BadTimestamp`] on failure.
pub(crate) fn parse_time(s: &str) -> Result<Timestamp, DecodeError> {
    ne_flow::time::parse_rfc3339(s).map_err(|reason| DecodeError::BadTimestamp {
        value: s.to_owned(),
        reason,
    })
}

/// `key=value` labels as Calico gives them: a list, Whisker's `" | "`-joined string, or
/// the flow log's `{"labels": [...]}` object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum LabelList<'a> {
    #[default]
    None,
    List(Vec<CowStr<'a>>),
    Joined(CowStr<'a>),
}

impl LabelList<'_> {
    /// The labels as key/value pairs; a label without `=` has an empty value.
    pub(crate) fn to_labels(&self) -> Labels {
        match self {
            LabelList::None => Labels::from([]),
            LabelList::List(items) => kv_labels(items.iter().map(|s| &**s)),
            LabelList::Joined(s) => kv_labels(s.split(" | ")),
        }
    }

    /// The value of label `key`, if present.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        fn find<'s>(s: &'s str, key: &str) -> Option<&'s str> {
            s.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v)
        }
        match self {
            LabelList::None => None,
            LabelList::List(items) => items.iter().find_map(|s| find(s, key)),
            LabelList::Joined(s) => s.split(" | ").find_map(|s| find(s, key)),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for LabelList<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = LabelList<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of key=value labels")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(LabelList::None)
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(LabelList::Joined(CowStr(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(LabelList::Joined(CowStr(Cow::Owned(v.to_owned()))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(8).min(64));
                while let Some(item) = seq.next_element::<CowStr<'a>>()? {
                    items.push(item);
                }
                Ok(LabelList::List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = LabelList::None;
                while let Some(key) = map.next_key::<CowStr<'a>>()? {
                    if &*key == "labels" {
                        out = map.next_value()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// Builds [`Labels`] from `key=value` strings (empty items skipped).
pub(crate) fn kv_labels<'s>(items: impl Iterator<Item = &'s str>) -> Labels {
    labels(
        items
            .filter(|s| !s.is_empty())
            .map(|s| match s.split_once('=') {
                Some((k, v)) => (Str::from(k), Str::from(v)),
                None => (Str::from(s), Str::from("")),
            }),
    )
}

/// Parses `ip:port` (`[v6]:port` for IPv6).
pub(crate) fn parse_addr(field: &'static str, value: &str) -> Result<SocketAddr, DecodeError> {
    value.parse().map_err(|_| DecodeError::BadAddress {
        field,
        value: value.to_owned(),
    })
}

/// Parses an IP address; empty means absent.
pub(crate) fn parse_ip(
    field: &'static str,
    value: Option<&str>,
) -> Result<Option<IpAddr>, DecodeError> {
    match value {
        None | Some("") => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| DecodeError::BadIp {
            field,
            value: v.to_owned(),
        }),
    }
}

/// A port number, checked to fit `u16`.
pub(crate) fn port(field: &'static str, value: i64) -> Result<u16, DecodeError> {
    u16::try_from(value).map_err(|_| DecodeError::BadPort { field, value })
}

/// A protocol given by name (`tcp`, `TCP`) or IANA number (`6`).
pub(crate) fn protocol(s: &str) -> Protocol {
    match s.parse::<u8>() {
        Ok(6) => Protocol::Tcp,
        Ok(17) => Protocol::Udp,
        Ok(132) => Protocol::Sctp,
        Ok(1 | 58) => Protocol::Icmp,
        Ok(_) => Protocol::Other,
        Err(_) => Protocol::parse(s),
    }
}

/// A policy reference `namespace/name` (`name` for cluster-scoped policies).
pub(crate) fn policy_ref(namespace: Option<&str>, name: &str) -> Option<Str> {
    match (namespace.filter(|n| !n.is_empty() && *n != "-"), name) {
        (_, "") => None,
        (Some(ns), name) => Some(Str::from(format!("{ns}/{name}"))),
        (None, name) => Some(Str::from(name)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn list(items: &[&'static str]) -> LabelList<'static> {
        LabelList::List(items.iter().map(|s| CowStr(Cow::Borrowed(*s))).collect())
    }

    #[test]
    fn label_list_shapes() {
        let joined = LabelList::Joined(CowStr(Cow::Borrowed("app=web | tier=a=b | bare")));
        let l = joined.to_labels();
        assert_eq!(l.len(), 3);
        assert_eq!((&*l[0].0, &*l[0].1), ("app", "web"));
        assert_eq!((&*l[1].0, &*l[1].1), ("bare", ""));
        assert_eq!((&*l[2].0, &*l[2].1), ("tier", "a=b"));
        assert_eq!(joined.get("tier"), Some("a=b"));
        let wrapped: LabelList<'_> = serde_json::from_str(r#"{"labels":["a=1"],"x":2}"#).unwrap();
        assert_eq!(wrapped.get("a"), Some("1"));
        let null: LabelList<'_> = serde_json::from_str("null").unwrap();
        assert_eq!(null, LabelList::None);
    }

    #[test]
    fn lenient_scalars() {
        assert_eq!(
            serde_json::from_str::<FlexInt>(r#""8503""#).unwrap(),
            FlexInt(8503)
        );
        assert_eq!(serde_json::from_str::<FlexInt>("-3").unwrap(), FlexInt(-3));
        assert!(serde_json::from_str::<FlexInt>("18446744073709551615").is_err());
        assert!(serde_json::from_str::<FlexInt>(r#""8x""#).is_err());
        let e: EnumVal<'_> = serde_json::from_str("2").unwrap();
        assert!(e.is("Dst", 2));
        let e: EnumVal<'_> = serde_json::from_str(r#""dst""#).unwrap();
        assert!(e.is("Dst", 2));
        let t: TimeVal<'_> = serde_json::from_str(r#"{"seconds":"10","nanos":5}"#).unwrap();
        assert_eq!(t.resolve(), Ok(Timestamp(10_000_000_005)));
        let t: TimeVal<'_> = serde_json::from_str(r#""1764970845""#).unwrap();
        assert_eq!(t.resolve(), Ok(Timestamp::from_secs(1_764_970_845)));
    }

    #[test]
    fn addresses_and_ports() {
        assert_eq!(parse_addr("a", "[fe80::1]:443").map(|a| a.port()), Ok(443));
        assert!(matches!(
            parse_addr("dst.addr", "10.xx.xx.xx:40422"),
            Err(DecodeError::BadAddress { .. })
        ));
        assert!(matches!(
            parse_addr("dst.addr", ""),
            Err(DecodeError::BadAddress { .. })
        ));
        assert_eq!(port("p", 65535), Ok(65535));
        assert_eq!(
            port("p", 65536),
            Err(DecodeError::BadPort {
                field: "p",
                value: 65536
            })
        );
        assert_eq!(protocol("6"), Protocol::Tcp);
        assert_eq!(protocol("udp"), Protocol::Udp);
        assert_eq!(protocol("icmp6"), Protocol::Icmp);
        assert_eq!(protocol("112"), Protocol::Other);
    }
}
