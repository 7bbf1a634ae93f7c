//! The calls to glibc's allocator that both binaries make: fewer arenas, large blocks mapped on
//! their own, and handing freed pages back (after a table load, and from the operator's
//! scavenger). None has a safe wrapper, so this is, with the resolver's socket calls, one of
//! the two modules of the workspace that may use `unsafe`. All are no-ops off glibc.
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

/// Free bytes the allocator's arenas hold (glibc's `mallinfo2().fordblks`); `None` off glibc.
/// It walks the arenas' free lists under their locks: milliseconds for a heap of hundreds of
/// MiB, which is why only the scavenger asks, every few seconds.
pub fn free_bytes() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallinfo2 only reads the allocator's own statistics; it takes no pointers.
    return Some(unsafe { libc::mallinfo2() }.fordblks);
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// When the scavenger trims: once the arenas hold `at_least` more free bytes than after the
/// last trim. A trim hands back whole free pages only; what it cannot (free blocks smaller
/// than a page, between live ones) stays counted as free, so the baseline is the free bytes a
/// trim left, not zero: otherwise a fragmented heap would be trimmed at every look, for
/// nothing.
#[derive(Debug)]
pub struct TrimPolicy {
    at_least: usize,
    baseline: usize,
}

impl TrimPolicy {
    pub fn new(at_least: usize) -> Self {
        TrimPolicy {
            at_least,
            baseline: 0,
        }
    }

    /// Takes the free bytes seen now; true when it is time to trim.
    pub fn observe(&mut self, free: usize) -> bool {
        if free >= self.baseline.saturating_add(self.at_least) {
            self.baseline = free;
            true
        } else {
            // Free memory was used again: a later burst counts from here.
            self.baseline = self.baseline.min(free);
            false
        }
    }
}

/// Hands memory freed by bursts of work back to the system in the background, as Go's
/// scavenger does: a thread looks every `every` and trims when the arenas hold `at_least`
/// more free bytes than after its last trim ([`TrimPolicy`]). For the operator, whose bursts
/// (the first lists, a first start's status writes, a takeover, a standby dropping its
/// outputs) come from many tasks with no one place to trim after. Off glibc it starts nothing.
pub fn spawn_scavenger(every: std::time::Duration, at_least: usize) -> std::io::Result<()> {
    if free_bytes().is_none() {
        return Ok(());
    }
    let mut policy = TrimPolicy::new(at_least);
    std::thread::Builder::new()
        .name("scavenger".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                if free_bytes().is_some_and(|free| policy.observe(free)) {
                    release_free_memory();
                }
            }
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_trimmed_once_and_fragments_left_are_not_trimmed_again() {
        const MIB: usize = 1 << 20;
        let mut policy = TrimPolicy::new(4 * MIB);
        assert!(!policy.observe(3 * MIB), "below the threshold");
        assert!(policy.observe(20 * MIB), "a burst freed 20 MiB");
        // The trim could not hand back 12 MiB of small holes: they stay free, untrimmed.
        assert!(!policy.observe(20 * MIB));
        assert!(!policy.observe(23 * MIB), "3 MiB more is not a burst");
        // Some free memory is used again, then a new burst frees 4 MiB past that.
        assert!(!policy.observe(14 * MIB));
        assert!(policy.observe(18 * MIB));
    }

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
