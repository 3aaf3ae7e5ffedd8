//! The endpoints of a node's flows repeat: every flow of a pod carries the same
//! `Flow.source` or `Flow.destination` bytes (identity, namespace, labels, pod name,
//! workloads). [`EndpointCache`] reads each distinct body once with [`scan::endpoint`]
//! and finds it again by its bytes, so a flow between known endpoints costs a hash and a
//! comparison per endpoint instead of a walk over a dozen fields.
//!
//! The cache is exact: an entry is keyed by the whole body, the walk is a pure function
//! of those bytes, and only bodies the walk accepted are stored, so a hit answers exactly
//! what the walk would (valid UTF-8 included). It is bounded in entries and bytes and
//! simply emptied when full: a miss costs a walk, never a wrong answer.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use super::scan::{self, Bail, NoLabels};
use crate::hubble::{EndpointFields, LabelSummary, WorkloadFields};
use ne_flow::flow::Reserved;

/// At most this many endpoints are cached…
const MAX_ENTRIES: usize = 8192;
/// …holding at most this many bytes of bodies.
const MAX_BYTES: usize = 4 << 20;

/// Endpoint bodies already walked, and what the walk read from them.
#[derive(Debug, Default)]
pub(super) struct EndpointCache {
    index: HashMap<Box<[u8]>, u32, RandomState>,
    entries: Vec<Known>,
    bytes: usize,
}

/// One walked endpoint, owned.
#[derive(Debug)]
pub(super) struct Known {
    identity: u32,
    namespace: Option<Box<str>>,
    pod_name: Option<Box<str>>,
    /// The first workload's name and kind.
    workload: Option<[Option<Box<str>>; 2]>,
    any_label: bool,
    reserved: Option<Reserved>,
    label_namespace: Option<Box<str>>,
}

impl Known {
    fn of(e: &EndpointFields<'_, NoLabels<'_>>) -> Self {
        let own = |s: Option<&str>| s.map(Box::from);
        Known {
            identity: e.identity,
            namespace: own(e.namespace),
            pod_name: own(e.pod_name),
            workload: e.workload.as_ref().map(|w| [own(w.name), own(w.kind)]),
            any_label: e.summary.any,
            reserved: e.summary.reserved,
            label_namespace: own(e.summary.namespace),
        }
    }

    /// The fields, as the walk returned them.
    pub(super) fn fields(&self) -> EndpointFields<'_, NoLabels<'_>> {
        EndpointFields {
            identity: self.identity,
            namespace: self.namespace.as_deref(),
            pod_name: self.pod_name.as_deref(),
            labels: std::iter::empty(),
            summary: LabelSummary {
                any: self.any_label,
                reserved: self.reserved,
                namespace: self.label_namespace.as_deref(),
            },
            workload: self.workload.as_ref().map(|[name, kind]| WorkloadFields {
                name: name.as_deref(),
                kind: kind.as_deref(),
            }),
        }
    }
}

impl EndpointCache {
    /// Makes room for `n` new entries, emptying the cache if it could overflow; indexes
    /// returned after this call stay valid for `n` calls of [`EndpointCache::resolve`].
    pub(super) fn reserve(&mut self, n: usize) {
        if self.entries.len() + n > MAX_ENTRIES || self.bytes > MAX_BYTES {
            self.index.clear();
            self.entries.clear();
            self.bytes = 0;
        }
    }

    /// The entry of the endpoint `body`, walked and stored if it is new; a body the walk
    /// does not accept is a [`Bail`].
    pub(super) fn resolve(&mut self, body: &[u8]) -> Result<u32, Bail> {
        if let Some(&i) = self.index.get(body) {
            return Ok(i);
        }
        let mut fields = scan::blank_endpoint();
        scan::endpoint(body, &mut fields)?;
        let i = u32::try_from(self.entries.len()).map_err(|_| Bail)?;
        self.entries.push(Known::of(&fields));
        self.index.insert(body.into(), i);
        self.bytes += body.len();
        Ok(i)
    }

    /// An entry returned by [`EndpointCache::resolve`].
    pub(super) fn get(&self, i: u32) -> &Known {
        &self.entries[i as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_stay_valid_for_the_reserved_calls_and_the_cache_stays_bounded() {
        let mut cache = EndpointCache::default();
        let body = |n: u32| {
            // Endpoint.namespace (3) = "ns-<n>".
            let ns = format!("ns-{n}");
            let mut b = vec![0x1a, ns.len() as u8];
            b.extend_from_slice(ns.as_bytes());
            b
        };
        for n in 0..3 * MAX_ENTRIES as u32 {
            cache.reserve(2);
            let (a, b) = (body(n), body(n + 1));
            let (ia, ib) = (cache.resolve(&a).unwrap(), cache.resolve(&b).unwrap());
            assert_eq!(
                cache.get(ia).namespace.as_deref(),
                Some(&*format!("ns-{n}"))
            );
            assert_eq!(
                cache.get(ib).namespace.as_deref(),
                Some(&*format!("ns-{}", n + 1))
            );
            assert!(cache.entries.len() <= MAX_ENTRIES);
            assert_eq!(cache.entries.len(), cache.index.len());
        }
        // A body the walk rejects is not stored.
        let before = cache.entries.len();
        assert!(cache.resolve(&[0x1a, 0x02, 0xff, 0xfe]).is_err());
        assert_eq!(cache.entries.len(), before);
    }
}
