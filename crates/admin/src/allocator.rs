//! The calls to glibc's allocator that both binaries make: fewer arenas, large blocks mapped on
//! their own, and handing freed pages back. None has a safe wrapper, so this is, with the
//! resolver's socket calls, one of the two modules of the workspace that may use `unsafe`. All
//! are no-ops off glibc.
#![allow(unsafe_code)]

/// Caps glibc's malloc arenas at `arenas` (its default is 8 per core). Each thread that
/// allocates may get an arena of its own, and memory freed in one arena serves no other: a
/// table or an index built on one runtime thread and dropped on another leaves its pages in an
/// arena no one allocates from again. Must run before other threads start, which is why
/// `lifecycle::runtime` calls it first.
pub fn limit_arenas(arenas: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    set(libc::M_ARENA_MAX, arenas.max(1));
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}

/// Keeps glibc from moving large blocks into the heap: from `bytes` up, a block is mapped on
/// its own and unmapped when freed. glibc's default raises that threshold to the size of the
/// largest block freed so far (up to 32 MiB), so that after the first large response (a page
/// of a list, a table ConfigMap) later ones were allocated in the heap, between small blocks
/// that live on. Measured at 10,000 groups: the operator leader 86 → 77 MiB, the resolver
/// unchanged (docs/benchmarks.md). Must run before other threads start, as
/// [`limit_arenas`].
pub fn map_large_blocks(bytes: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    set(libc::M_MMAP_THRESHOLD, bytes);
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = bytes;
}

/// Sets one of glibc's malloc parameters (values past `c_int` are capped).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set(param: libc::c_int, value: usize) {
    // SAFETY: mallopt only sets an allocator parameter; its callers run before other threads.
    unsafe {
        libc::mallopt(
            param,
            libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX),
        );
    }
}

/// Hands memory the allocator holds but no one uses back to the system. Loading a table
/// parses and builds far more than it keeps; glibc's malloc keeps the freed pages otherwise,
/// so the resident size would stay at the peak of the largest load.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_handed_back_is_allocated_again() {
        let kept: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 64 * 1024]).collect();
        drop(kept);
        release_free_memory();
        let again = vec![1u8; 1 << 20];
        assert_eq!(
            again.iter().map(|&b| usize::from(b)).sum::<usize>(),
            1 << 20
        );
    }
}
