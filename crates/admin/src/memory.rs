//! The process's memory, where the safe crates leave it alone: the calls to glibc's allocator
//! that both binaries make (fewer arenas, large blocks mapped on their own, freed pages handed
//! back after a table load and from the operator's scavenger; no-ops off glibc), and the
//! binary's own pages handed back once start-up is over ([`page_out_code`]; Linux only). None
//! has a safe wrapper, so this is, with the resolver's socket calls, one of the two modules of
//! the workspace that may use `unsafe`.
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

/// Hands the pages of this binary's code and constants back to the kernel and returns how
/// many bytes of mappings that covered. A resident size counts every page of the binary a
/// process has mapped, and the kernel maps code in windows around each page touched: a
/// resolver that parsed manifests, compiled a table and started its listeners keeps 9-13 MiB
/// of code mapped that it may never run again (the YAML parser, the compiler, the CEL
/// interpreter, decoding a whole first list, start-up's error paths).
///
/// Each of the binary's read-only mappings that holds only file pages (none copied on write,
/// as relocated constants are) is first paged out (`MADV_PAGEOUT`: the kernel reclaims what it
/// can of the pages only this process maps), then dropped from this process (`MADV_DONTNEED`:
/// the rest, pages a second resolver of the same binary maps too among them, stop being
/// mapped here). Nothing is lost: a page is read back from the file at its next use (a page
/// fault, from the page cache or the disk). What stays in the page cache is mapped by no
/// process (or by fewer): clean cache, the first memory the kernel takes back, where a mapped
/// page is held until reclaim unmaps it. Called once, when start-up is over, since code that
/// keeps running would only come back. On other systems it does nothing and returns 0.
pub fn page_out_code() -> std::io::Result<usize> {
    #[cfg(target_os = "linux")]
    {
        let smaps = std::fs::read_to_string("/proc/self/smaps")?;
        let mut advised = 0;
        for range in file_only_mappings(&smaps, page_out_code as *const () as usize) {
            for advice in [libc::MADV_PAGEOUT, libc::MADV_DONTNEED] {
                // SAFETY: the range is a whole read-only mapping of this binary, from the
                // kernel's own list, that holds no page copied on write: every page in it is
                // the file's, so neither advice changes what a read there returns.
                let done =
                    unsafe { libc::madvise(range.start as *mut libc::c_void, range.len(), advice) };
                if done != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            advised += range.len();
        }
        Ok(advised)
    }
    #[cfg(not(target_os = "linux"))]
    Ok(0)
}

/// How long after a binary has what it serves from (a resolver its first table, the operator
/// its first complete lists) start-up is taken to be over: listeners are bound, the first
/// round of checks and the compile after it have run.
pub const START_UP: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits [`START_UP`], then hands the binary's code back ([`page_out_code`], on the blocking
/// pool). A failure is only logged (a kernel before 5.4 has no `MADV_PAGEOUT`): the pages stay
/// mapped, as they did before.
pub async fn page_out_start_up_code() {
    tokio::time::sleep(START_UP).await;
    let done = tokio::task::spawn_blocking(page_out_code)
        .await
        .map_err(std::io::Error::other)
        .and_then(std::convert::identity);
    match done {
        Ok(bytes) => tracing::debug!(mapped_kib = bytes >> 10, "start-up code paged out"),
        Err(e) => tracing::debug!(error = %e, "could not page out the start-up code"),
    }
}

/// The address ranges of the read-only mappings of the file that holds `address` whose pages
/// are all the file's, from a `/proc/PID/smaps` listing: the mapping holding the address names
/// the file (device and inode); a mapping with write permission, or with anonymous pages
/// (copied on write, as the relocated constants after start-up), is left out.
fn file_only_mappings(smaps: &str, address: usize) -> Vec<std::ops::Range<usize>> {
    struct Mapping<'a> {
        range: std::ops::Range<usize>,
        writable: bool,
        file: (&'a str, &'a str),
        anonymous_kib: Option<u64>,
    }
    fn header(line: &str) -> Option<Mapping<'_>> {
        let mut fields = line.split_ascii_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let perms = fields.next()?;
        let _offset = fields.next()?;
        let file = (fields.next()?, fields.next()?);
        Some(Mapping {
            range: usize::from_str_radix(start, 16).ok()?..usize::from_str_radix(end, 16).ok()?,
            writable: perms.contains('w'),
            file,
            anonymous_kib: None,
        })
    }
    let mut mappings: Vec<Mapping<'_>> = Vec::new();
    for line in smaps.lines() {
        if let Some(anonymous) = line.strip_prefix("Anonymous:") {
            if let Some(last) = mappings.last_mut() {
                last.anonymous_kib = anonymous
                    .split_ascii_whitespace()
                    .next()
                    .and_then(|kib| kib.parse().ok());
            }
        } else if let Some(mapping) = header(line) {
            mappings.push(mapping);
        }
    }
    let Some(file) = mappings
        .iter()
        .find(|m| m.range.contains(&address))
        .map(|m| m.file)
        .filter(|&(_, inode)| inode != "0")
    else {
        return Vec::new();
    };
    mappings
        .into_iter()
        .filter(|m| m.file == file && !m.writable && m.anonymous_kib == Some(0))
        .map(|m| m.range)
        .collect()
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

    /// Four mappings of a binary (constants, code, relocated constants, data), the heap, libc.
    const SMAPS: &str = "\
55e6c221e000-55e6c272b000 r--p 00000000 fe:00 5527688                    /usr/bin/healthroute-resolver
Size:               5172 kB
Rss:                2456 kB
Anonymous:             0 kB
VmFlags: rd mr mw me
55e6c272b000-55e6c33a7000 r-xp 0050c000 fe:00 5527688                    /usr/bin/healthroute-resolver
Size:              12784 kB
Rss:                9348 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
55e6c33a7000-55e6c3456000 r--p 0118e000 fe:00 5527688                    /usr/bin/healthroute-resolver
Size:                700 kB
Anonymous:           700 kB
55e6c3456000-55e6c3459000 rw-p 01236000 fe:00 5527688                    /usr/bin/healthroute-resolver
Anonymous:            12 kB
55e6fb2d1000-55e6fb3e9000 rw-p 00000000 00:00 0                          [heap]
Anonymous:          1072 kB
7f21cab5d000-7f21cab83000 r--p 00000000 fe:00 131                        /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f21cab83000-7f21cacd9000 r-xp 00026000 fe:00 131                        /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             4 kB
7ffc8415e000-7ffc8417f000 rw-p 00000000 00:00 0                          [stack]
Anonymous:           108 kB
";

    #[test]
    fn only_the_binarys_read_only_file_pages_are_handed_back() {
        assert_eq!(
            file_only_mappings(SMAPS, 0x55e6c2800000),
            vec![
                0x55e6c221e000..0x55e6c272b000,
                0x55e6c272b000..0x55e6c33a7000
            ],
            "its constants and code; not its relocated constants, its data, the heap or libc"
        );
        assert_eq!(
            file_only_mappings(SMAPS, 0x7f21cab90000),
            vec![0x7f21cab5d000..0x7f21cab83000],
            "an address in libc names libc, whose code has a page copied on write"
        );
        assert!(
            file_only_mappings(SMAPS, 0x55e6fb2d2000).is_empty(),
            "anonymous memory names no file"
        );
        assert!(
            file_only_mappings(SMAPS, 0x1000).is_empty(),
            "no mapping holds it"
        );
        let no_counts = SMAPS.lines().filter(|l| !l.starts_with("Anonymous:"));
        assert!(
            file_only_mappings(&no_counts.collect::<Vec<_>>().join("\n"), 0x55e6c2800000)
                .is_empty(),
            "a mapping whose anonymous pages are not known is left alone"
        );
        assert!(file_only_mappings("not a smaps line\n", 0x1000).is_empty());
    }

    /// The binary's resident pages backed by files (`RssFile` of `/proc/self/status`), KiB.
    #[cfg(target_os = "linux")]
    fn rss_file_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let line = status
            .lines()
            .find(|l| l.starts_with("RssFile:"))
            .expect("RssFile");
        line.split_ascii_whitespace()
            .nth(1)
            .and_then(|kib| kib.parse().ok())
            .expect("a number")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn code_handed_back_leaves_the_resident_size_and_runs_again() {
        let before = rss_file_kib();
        let advised = page_out_code().expect("madvise");
        let after = rss_file_kib();
        assert!(advised > 0, "this test binary's code is mapped");
        assert!(
            after < before,
            "file-backed pages left: {before} KiB, then {after} KiB"
        );
        // What runs from here on is read back on demand, this parser included.
        assert_eq!(file_only_mappings(SMAPS, 0x55e6c2800000).len(), 2);
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
