//! The endpoints of a walked flow (`Flow.source` = 8, `Flow.destination` = 9): their
//! fields merged over occurrences as protobuf specifies, and their labels, summarised
//! while they are validated and iterated again, in place, for the owned record.

use super::wire::Reader;
use crate::DecodeError;
use crate::hubble::{EndpointFields, LabelSummary, WorkloadFields};

/// One endpoint (`Flow.source` = 8 or `Flow.destination` = 9), merged over occurrences.
#[derive(Default)]
pub(super) struct EndpointAcc<'a> {
    occurrences: u32,
    /// The last occurrence's body (the labels of a single occurrence are read from it).
    last: Option<Reader<'a>>,
    identity: u32,
    namespace: Option<&'a str>,
    pod_name: Option<&'a str>,
    workload: Option<(Option<&'a str>, Option<&'a str>)>,
    /// The labels of all occurrences, summarised as they are validated.
    summary: LabelSummary<'a>,
}

impl<'a> EndpointAcc<'a> {
    pub(super) fn merge(&mut self, body: Reader<'a>) -> Result<(), DecodeError> {
        self.occurrences += 1;
        self.last = Some(body.clone());
        let mut m = body;
        while let Some(f) = m.next_field()? {
            match f.number {
                2 => self.identity = f.uint32("Endpoint.identity")?,
                3 => self.namespace = Some(f.str("Endpoint.namespace")?),
                4 => self.summary.add(f.str("Endpoint.labels")?),
                5 => self.pod_name = Some(f.str("Endpoint.pod_name")?),
                6 if self.workload.is_none() => {
                    let mut w = f.message("Endpoint.workloads")?;
                    let (mut name, mut kind) = (None, None);
                    while let Some(f) = w.next_field()? {
                        match f.number {
                            1 => name = Some(f.str("Workload.name")?),
                            2 => kind = Some(f.str("Workload.kind")?),
                            _ => {}
                        }
                    }
                    self.workload = Some((name, kind));
                }
                6 => {
                    f.message("Endpoint.workloads")?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The borrowed fields; `flow` is the flow's body, re-read for the labels when the
    /// endpoint occurs more than once.
    pub(super) fn fields(&self, flow: &Reader<'a>, number: u32) -> EndpointFields<'a, Labels<'a>> {
        let labels = match (&self.last, self.occurrences) {
            (Some(body), 1) => Labels {
                outer: Reader::empty(),
                outer_number: number,
                inner: body.clone(),
            },
            _ => Labels {
                outer: flow.clone(),
                outer_number: number,
                inner: Reader::empty(),
            },
        };
        EndpointFields {
            identity: self.identity,
            namespace: self.namespace,
            pod_name: self.pod_name,
            labels,
            summary: self.summary,
            workload: self
                .workload
                .map(|(name, kind)| WorkloadFields { name, kind }),
        }
    }
}

/// The labels (`Endpoint.labels` = 4) of one endpoint: those of its current body, then
/// those of each further occurrence of field `outer_number` in `outer`. Everything was
/// validated by [`EndpointAcc::merge`], so a read error here only ends the iteration.
#[derive(Clone, Debug)]
pub(super) struct Labels<'a> {
    outer: Reader<'a>,
    outer_number: u32,
    inner: Reader<'a>,
}

impl<'a> Iterator for Labels<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        loop {
            while let Some(f) = self.inner.next_field().ok()? {
                if f.number == 4
                    && f.is_bytes()
                    && let Ok(label) = f.str("Endpoint.labels")
                {
                    return Some(label);
                }
            }
            let body = loop {
                let f = self.outer.next_field().ok()??;
                if f.number == self.outer_number {
                    break f.message("Flow.endpoint").ok()?;
                }
            };
            self.inner = body;
        }
    }
}
