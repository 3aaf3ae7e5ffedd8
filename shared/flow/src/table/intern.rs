//! Reference-counted interning, one [`Interner`] per value kind and table shard.
//!
//! A value stored once is named by a `u32` handle; every table entry that uses it holds
//! one reference, and the last release frees the slot for reuse. Handles stay valid as
//! long as the caller holds a reference, so a shard's entries can carry 4-byte handles
//! instead of the endpoints' strings, labels and addresses.
//!
//! The interner does no hashing of its own: callers pass the hash of the value, computed
//! from a borrowed view, which must be the same for a view and the value it equals. The
//! hash is stored beside the value, so growing the index and releasing a value never hash
//! again, and callers can combine stored hashes into other keys (`Interner::hash`).

use hashbrown::HashTable;

/// Values and their reference counts. Not synchronised: the owning shard's lock guards it.
#[derive(Debug)]
pub(super) struct Interner<T> {
    /// Slot numbers, hashed by their values.
    index: HashTable<u32>,
    slots: Vec<Slot<T>>,
    /// Freed slots, reused before the vector grows.
    free: Vec<u32>,
}

#[derive(Debug)]
struct Slot<T> {
    /// `None` once freed.
    value: Option<T>,
    hash: u64,
    refs: u32,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            index: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Interner<T> {
    /// The handle of the value `eq` accepts among those hashed to `hash`.
    pub(super) fn find(&self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<u32> {
        self.index.find(hash, |&h| eq(self.get(h))).copied()
    }

    /// The value behind a handle the caller holds a reference to.
    pub(super) fn get(&self, handle: u32) -> &T {
        self.slots[handle as usize]
            .value
            .as_ref()
            .expect("an interned handle is used only while referenced")
    }

    /// The hash a value was stored under.
    pub(super) fn hash(&self, handle: u32) -> u64 {
        self.slots[handle as usize].hash
    }

    /// Takes one reference to the value `eq` accepts, storing `make()` first if there is
    /// none.
    pub(super) fn acquire(
        &mut self,
        hash: u64,
        eq: impl FnMut(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> u32 {
        if let Some(handle) = self.find(hash, eq) {
            let slot = &mut self.slots[handle as usize];
            slot.refs += 1;
            return handle;
        }
        let slot = Slot {
            value: Some(make()),
            hash,
            refs: 1,
        };
        let handle = match self.free.pop() {
            Some(handle) => {
                self.slots[handle as usize] = slot;
                handle
            }
            None => {
                let handle = u32::try_from(self.slots.len())
                    .ok()
                    .filter(|&h| h != u32::MAX)
                    .expect("the table's capacity bounds the interned values below u32::MAX");
                self.slots.push(slot);
                handle
            }
        };
        let slots = &self.slots;
        self.index
            .insert_unique(hash, handle, |&h| slots[h as usize].hash);
        handle
    }

    /// Drops one reference; the last one frees the slot.
    pub(super) fn release(&mut self, handle: u32) {
        let slot = &mut self.slots[handle as usize];
        slot.refs -= 1;
        if slot.refs > 0 {
            return;
        }
        slot.value = None;
        if let Ok(found) = self.index.find_entry(slot.hash, |&h| h == handle) {
            found.remove();
        } else {
            unreachable!("a referenced value is indexed under its hash");
        }
        self.free.push(handle);
    }

    /// Values held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(s: &str) -> u64 {
        // Deliberately weak, so that values collide and equality decides.
        s.len() as u64
    }

    fn acquire(i: &mut Interner<String>, s: &str) -> u32 {
        i.acquire(hash(s), |v| v == s, || s.to_owned())
    }

    #[test]
    fn a_value_lives_while_referenced_and_its_slot_is_reused_after() {
        let mut i = Interner::default();
        let a = acquire(&mut i, "aa");
        let b = acquire(&mut i, "bb");
        assert_ne!(a, b, "equal hashes, different values");
        assert_eq!(acquire(&mut i, "aa"), a);
        assert_eq!(i.len(), 2);
        i.release(a);
        assert_eq!(
            i.find(hash("aa"), |v| v == "aa"),
            Some(a),
            "one reference left"
        );
        i.release(a);
        assert_eq!(i.find(hash("aa"), |v| v == "aa"), None);
        assert_eq!(i.len(), 1);
        let c = acquire(&mut i, "ccc");
        assert_eq!(c, a, "the freed slot is reused");
        assert_eq!(i.get(c), "ccc");
        assert_eq!(i.get(b), "bb");
    }

    #[test]
    fn many_values_grow_the_index_and_all_stay_found() {
        let mut i = Interner::default();
        let handles: Vec<u32> = (0..1000).map(|n| acquire(&mut i, &n.to_string())).collect();
        for (n, &h) in handles.iter().enumerate() {
            let s = n.to_string();
            assert_eq!(i.find(hash(&s), |v| *v == s), Some(h));
        }
        for &h in &handles {
            i.release(h);
        }
        assert_eq!(i.len(), 0);
    }
}
