//! An append-only table whose entries are found by a caller-computed hash: the encoder's
//! string, endpoint and edge tables.
//!
//! Entries with equal hashes form a chain through `next`, newest first, so lookups
//! compare against the caller's borrowed value and never build an owned key.

use std::collections::HashMap;

use foldhash::fast::RandomState;

/// No entry (end of a chain).
const NONE: u32 = u32::MAX;

/// Append-only, hash-chained table; entry `i` has index `i` on the wire.
#[derive(Debug)]
pub(super) struct Interner<T> {
    items: Vec<T>,
    /// For each entry, the next older entry with the same hash, or [`NONE`].
    next: Vec<u32>,
    /// The newest entry of each hash.
    heads: HashMap<u64, u32, RandomState>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            items: Vec::new(),
            next: Vec::new(),
            heads: HashMap::default(),
        }
    }
}

impl<T> Interner<T> {
    /// The index of the entry with hash `hash` for which `eq` holds.
    pub(super) fn find(&self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<u32> {
        let mut at = *self.heads.get(&hash)?;
        while at != NONE {
            let i = at as usize;
            if eq(&self.items[i]) {
                return Some(at);
            }
            at = self.next[i];
        }
        None
    }

    /// Appends `item` (which the caller found absent) and returns its index. The caller
    /// keeps the table under [`super::Limits::MAX`] entries, so the index fits a `u32`.
    pub(super) fn push(&mut self, hash: u64, item: T) -> u32 {
        let index = self.items.len() as u32;
        let older = self.heads.insert(hash, index).unwrap_or(NONE);
        self.items.push(item);
        self.next.push(older);
        index
    }

    /// The entry at `index` (which `find` or `push` returned).
    pub(super) fn get(&self, index: u32) -> &T {
        &self.items[index as usize]
    }

    /// The entry at `index`, mutably.
    pub(super) fn get_mut(&mut self, index: u32) -> &mut T {
        &mut self.items[index as usize]
    }

    /// Number of entries.
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// Forgets every entry (keeps the allocations).
    pub(super) fn clear(&mut self) {
        self.items.clear();
        self.next.clear();
        self.heads.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_hashes_chain_and_are_told_apart_by_eq() {
        let mut t = Interner::default();
        assert_eq!(t.push(7, "a"), 0);
        assert_eq!(t.push(7, "b"), 1);
        assert_eq!(t.push(8, "c"), 2);
        assert_eq!(t.find(7, |s| *s == "a"), Some(0));
        assert_eq!(t.find(7, |s| *s == "b"), Some(1));
        assert_eq!(t.find(7, |s| *s == "c"), None, "wrong hash, not found");
        assert_eq!(t.find(9, |_| true), None);
        *t.get_mut(2) = "d";
        assert_eq!(*t.get(2), "d");
        t.clear();
        assert_eq!((t.len(), t.find(7, |_| true)), (0, None));
        assert_eq!(t.push(7, "z"), 0, "indexes start over");
    }
}
