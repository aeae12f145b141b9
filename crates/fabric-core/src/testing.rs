//! Test support for providers (feature `testing`): a global allocator that
//! counts the calling thread's allocations, for "the data path allocates
//! nothing" tests.
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: fabric_core::testing::CountingAlloc = fabric_core::testing::CountingAlloc;
//! let before = fabric_core::testing::CountingAlloc::count();
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting allocations and reallocations per
/// thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

impl CountingAlloc {
    /// How many allocations and reallocations this thread has made.
    pub fn count() -> u64 {
        ALLOCS.with(Cell::get)
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a plain thread-local without a destructor.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's guarantees on `layout` are passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
