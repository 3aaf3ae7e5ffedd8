//! Bytes counted by the allocator, for the memory benches (`snapshot_memory`,
//! `flood_memory`): each installs `stats_alloc`'s instrumented allocator as its global one
//! and measures with [`held`].

use stats_alloc::{Region, StatsAlloc};

/// Net bytes allocated while `f` runs and still held after it, with what it returns.
pub fn held<T>(allocator: &StatsAlloc<std::alloc::System>, f: impl FnOnce() -> T) -> (T, i64) {
    let region = Region::new(allocator);
    let value = f();
    let s = region.change();
    // A reallocation's growth is already in `bytes_allocated` (its shrinking in
    // `bytes_deallocated`).
    (value, s.bytes_allocated as i64 - s.bytes_deallocated as i64)
}
