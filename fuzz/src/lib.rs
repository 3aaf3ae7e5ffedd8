//! What the fuzz targets share.

/// The messages of a fuzz input: each behind a 2-byte little-endian length, the last one
/// taking what is left when its length runs past the end.
pub fn frames(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        let message = match data {
            [lo, hi, tail @ ..] => {
                let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
                let (message, rest) = tail.split_at(len);
                data = rest;
                message
            }
            _ => std::mem::take(&mut data),
        };
        Some(message)
    })
}

/// A table's entries in key order, to compare two tables.
pub fn entries(table: &ne_flow::table::FlowTable) -> Vec<ne_flow::table::EdgeSnapshot> {
    let mut s = table.snapshot();
    s.sort_by_key(ne_flow::table::EdgeSnapshot::key);
    s
}
