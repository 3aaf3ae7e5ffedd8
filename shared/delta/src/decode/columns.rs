//! Reading and checking the columns of a batch: a cursor over a sparse column, and the
//! checks of lengths, table offsets, indexes and address bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ne_proto::ingest as pb;

use super::super::{DeltaError, Table};

/// Reads a sparse column in step with the items that use it.
pub(super) struct Cursor<'a, T> {
    column: &'static str,
    items: &'a [T],
    at: usize,
}

impl<'a, T: Copy> Cursor<'a, T> {
    pub(super) fn new(column: &'static str, items: &'a [T]) -> Self {
        Cursor {
            column,
            items,
            at: 0,
        }
    }

    pub(super) fn next(&mut self) -> Result<T, DeltaError> {
        let item = self
            .items
            .get(self.at)
            .copied()
            .ok_or(DeltaError::ColumnShort {
                column: self.column,
            })?;
        self.at += 1;
        Ok(item)
    }

    pub(super) fn left(&self) -> usize {
        self.items.len() - self.at
    }

    pub(super) fn finish(self) -> Result<(), DeltaError> {
        match self.left() {
            0 => Ok(()),
            left => Err(DeltaError::ColumnLeftOver {
                column: self.column,
                left,
            }),
        }
    }
}

/// Fails unless a dense column has one element per item.
pub(super) fn dense<T>(
    column: &'static str,
    items: &[T],
    expected: usize,
) -> Result<(), DeltaError> {
    if items.len() == expected {
        Ok(())
    } else {
        Err(DeltaError::ColumnLength {
            column,
            expected,
            got: items.len(),
        })
    }
}

pub(super) fn check_base(table: Table, base: u32, len: usize) -> Result<(), DeltaError> {
    if base as usize == len {
        Ok(())
    } else {
        Err(DeltaError::OutOfStep {
            table,
            expected: len as u64,
            got: u64::from(base),
        })
    }
}

pub(super) fn check_room(
    table: Table,
    len: usize,
    adding: usize,
    limit: usize,
) -> Result<(), DeltaError> {
    if adding <= limit.saturating_sub(len) {
        Ok(())
    } else {
        Err(DeltaError::TableFull { table, limit })
    }
}

pub(super) fn out_of_range(table: Table, index: impl Into<i128>, len: usize) -> DeltaError {
    DeltaError::IndexOutOfRange {
        table,
        index: index.into(),
        len,
    }
}

/// Reads an address of `form` (IPV4 or IPV6 only) from `bytes`.
pub(super) fn read_ip(
    column: &'static str,
    form: i32,
    bytes: &mut &[u8],
) -> Result<IpAddr, DeltaError> {
    let short = DeltaError::ColumnShort {
        column: "addresses",
    };
    match pb::AddressForm::try_from(form) {
        Ok(pb::AddressForm::Ipv4) => {
            let (head, rest) = bytes.split_first_chunk::<4>().ok_or(short)?;
            *bytes = rest;
            Ok(IpAddr::V4(Ipv4Addr::from(*head)))
        }
        Ok(pb::AddressForm::Ipv6) => {
            let (head, rest) = bytes.split_first_chunk::<16>().ok_or(short)?;
            *bytes = rest;
            Ok(IpAddr::V6(Ipv6Addr::from(*head)))
        }
        _ => Err(DeltaError::BadValue {
            column,
            value: i64::from(form),
        }),
    }
}
