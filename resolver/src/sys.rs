//! The calls the safe crates do not wrap (soundly): `sendmmsg(2)`, to send a batch of UDP
//! replies in one call (nix wraps it, but reading its result count walks address storage
//! that a send never fills), the `IP_MTU_DISCOVER` socket option, glibc's `malloc_trim(3)`
//! and `mallopt(3)`, and `madvise(2)` to unmap start-up code. This is the only module of the
//! workspace that may use `unsafe`.
#![allow(unsafe_code)]

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::sys::socket::{SockaddrLike, SockaddrStorage};

/// Most datagrams one [`send_batch`] call takes.
pub const MAX_BATCH: usize = 64;

/// Sends `datagrams[i].0` to `datagrams[i].1`, in order, in as few `sendmmsg` calls as the
/// kernel allows ([`MAX_BATCH`] per call at most). A datagram that fails is reported to
/// `on_error` with its index and skipped; the rest are still sent. Returns how many went out.
pub fn send_batch(
    fd: BorrowedFd<'_>,
    datagrams: &[(&[u8], &SockaddrStorage)],
    mut on_error: impl FnMut(usize, io::Error),
) -> usize {
    datagrams
        .chunks(MAX_BATCH)
        .enumerate()
        .map(|(c, chunk)| send_chunk(fd, chunk, |i, e| on_error(c * MAX_BATCH + i, e)))
        .sum()
}

fn send_chunk(
    fd: BorrowedFd<'_>,
    datagrams: &[(&[u8], &SockaddrStorage)],
    mut on_error: impl FnMut(usize, io::Error),
) -> usize {
    debug_assert!(datagrams.len() <= MAX_BATCH);
    let iovs: [IoSlice<'_>; MAX_BATCH] =
        std::array::from_fn(|i| IoSlice::new(datagrams.get(i).map_or(&[][..], |d| d.0)));
    // SAFETY: an all-zero mmsghdr is a valid value (null pointers, zero lengths).
    let mut headers: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    for (i, (header, (_, addr))) in headers.iter_mut().zip(datagrams).enumerate() {
        let h = &mut header.msg_hdr;
        h.msg_name = addr.as_ptr().cast_mut().cast();
        // The family's own length (SockaddrStorage::len is the whole storage's).
        h.msg_namelen = addr
            .as_sockaddr_in()
            .map(SockaddrLike::len)
            .or_else(|| addr.as_sockaddr_in6().map(SockaddrLike::len))
            .unwrap_or_else(|| addr.len());
        // IoSlice is ABI-compatible with iovec on Unix (documented by std).
        h.msg_iov = (&iovs[i] as *const IoSlice<'_>).cast_mut().cast();
        h.msg_iovlen = 1;
    }
    let mut next = 0;
    let mut sent = 0;
    while next < datagrams.len() {
        let count = (datagrams.len() - next) as libc::c_uint;
        // SAFETY: headers[next..next + count] are initialised above; each points at an
        // address and an iovec that outlive this call, with their true lengths. The kernel
        // writes only msg_len in each header.
        let n = unsafe { libc::sendmmsg(fd.as_raw_fd(), headers[next..].as_mut_ptr(), count, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The first datagram of the remainder failed: skip it, send the rest.
            on_error(next, e);
            next += 1;
        } else if n == 0 {
            // Nothing sent and no error: do not spin on it.
            on_error(next, io::Error::other("sendmmsg sent nothing"));
            next += 1;
        } else {
            next += n as usize;
            sent += n as usize;
        }
    }
    sent
}

/// Makes every datagram `fd` sends go out unfragmented: the IPv4 Don't Fragment bit is
/// set and neither family fragments at the sender (`IP_PMTUDISC_PROBE`): a reply that does
/// not fit the interface fails to send instead. Path MTU reports (ICMP "fragmentation
/// needed", which anyone can forge) are ignored, so no per-client state builds up.
///
/// This is what RFC 9715 asks of DNS responders, and it costs nothing: replies never exceed
/// [`crate::wire::MAX_UDP_PAYLOAD`] (1232 bytes, which fits the 1280-byte IPv6 minimum
/// MTU with its headers). It is also cheaper: with DF set the kernel leaves the IPv4
/// identification at 0 instead of hashing the destination into a table of counters shared
/// by every core (`__ip_select_ident`, 4.4% of the resolver's CPU under load before this).
pub fn set_dont_fragment(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<()> {
    let (level, name) = mtu_discover_option(ipv6);
    let value = if ipv6 {
        libc::IPV6_PMTUDISC_PROBE
    } else {
        libc::IP_PMTUDISC_PROBE
    };
    // SAFETY: the value is a c_int that outlives the call, passed with its true length.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The level and name of the path-MTU discovery option of the socket's family.
fn mtu_discover_option(ipv6: bool) -> (libc::c_int, libc::c_int) {
    if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER)
    }
}

/// The socket's `IP_MTU_DISCOVER` (or `IPV6_MTU_DISCOVER`) mode.
#[cfg(test)]
pub fn mtu_discover_mode(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<libc::c_int> {
    let (level, name) = mtu_discover_option(ipv6);
    let mut value: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len outlive the call; len is value's size, which the kernel honours.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Caps glibc's malloc arenas at `arenas` (its default is 8 per core). Each thread that
/// allocates may get an arena of its own, and memory freed in one arena serves no other: the
/// table builds on one thread and is dropped on another, so extra arenas only keep pages. The
/// resolver allocates nothing per query on its fast path, so fewer arenas cost no contention
/// that matters. Must run before the runtime's threads start. A no-op elsewhere.
pub fn limit_malloc_arenas(arenas: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before other threads run.
    unsafe {
        libc::mallopt(
            libc::M_ARENA_MAX,
            libc::c_int::try_from(arenas.max(1)).unwrap_or(libc::c_int::MAX),
        );
    }
}

/// Hands memory the allocator holds but no one uses back to the system. Loading a table
/// parses and builds far more than it keeps; glibc's malloc keeps the freed pages otherwise,
/// so the resident size would stay at the peak of the largest load. A no-op elsewhere.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Unmaps the pages of the read-only file mappings of the process (its code and read-only
/// data, and the shared libraries') that hold no private copy, and returns how many KiB were
/// resident in them. The pages stay in the page cache: what runs afterwards maps its pages
/// back with a minor fault (no disk read while the cache keeps them), so only the code in use
/// stays resident.
///
/// Why: the kernel maps a file's cached pages 64 KiB around each fault, so start-up (argument
/// parsing, configuration, the kube client, the first table's parse and compile) leaves most
/// of the 12 MiB of code resident, and the resident size counts it for as long as the process
/// lives; so does each table change (the compiler, the table's parse and build). Called a
/// second after the tables stop changing. Only mappings without a private copy
/// (`Anonymous: 0 kB` in `/proc/self/smaps`) are touched: for them `MADV_DONTNEED` discards
/// nothing the file does not hold. A no-op elsewhere than Linux.
pub fn release_code_pages() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return 0;
        };
        let mut released = 0;
        for m in read_only_file_mappings(&smaps) {
            // SAFETY: the range is a whole mapping of this process, read-only, file-backed and
            // without private pages: dropping its pages loses nothing, and any later access
            // faults them back in from the page cache.
            let rc =
                unsafe { libc::madvise(m.start as *mut libc::c_void, m.len, libc::MADV_DONTNEED) };
            if rc == 0 {
                released += m.rss_kib;
            }
        }
        released
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// A mapping [`release_code_pages`] may drop.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    len: usize,
    rss_kib: u64,
}

/// The mappings of an smaps text that are file-backed, not writable, not locked and hold no
/// anonymous (private, modified) page.
fn read_only_file_mappings(smaps: &str) -> Vec<Mapping> {
    struct Current {
        mapping: Option<Mapping>,
        anonymous: bool,
        locked: bool,
    }
    let mut out = Vec::new();
    let mut current: Option<Current> = None;
    let finish = |c: Option<Current>, out: &mut Vec<Mapping>| {
        if let Some(Current {
            mapping: Some(m),
            anonymous: false,
            locked: false,
        }) = c
        {
            out.push(m);
        }
    };
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else {
            continue;
        };
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            // A mapping's header: range, permissions, offset, device, inode, path.
            finish(current.take(), &mut out);
            let perms = fields.next().unwrap_or("");
            let inode = fields.nth(2).unwrap_or("0");
            let path = fields.next().unwrap_or("");
            let wanted = perms.starts_with('r')
                && !perms.contains('w')
                && inode != "0"
                && path.starts_with('/')
                && end > start;
            current = Some(Current {
                mapping: wanted.then_some(Mapping {
                    start,
                    len: end - start,
                    rss_kib: 0,
                }),
                anonymous: false,
                locked: false,
            });
            continue;
        }
        let Some(c) = current.as_mut() else {
            continue;
        };
        let value = fields
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        match first {
            "Rss:" => {
                if let Some(m) = c.mapping.as_mut() {
                    m.rss_kib = value;
                }
            }
            "Anonymous:" => c.anonymous = value > 0,
            "Locked:" => c.locked = value > 0,
            "VmFlags:" => {
                c.locked |= line
                    .split_whitespace()
                    .any(|f| matches!(f, "lo" | "io" | "pf"))
            }
            _ => {}
        }
    }
    finish(current, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::os::fd::AsFd;
    use std::time::Duration;

    use super::*;

    #[test]
    fn only_read_only_file_mappings_without_private_pages_are_released() {
        let smaps = "\
55d0c0000000-55d0c0100000 r--p 00000000 fd:01 42   /usr/bin/healthroute-resolver
Rss:                1024 kB
Anonymous:             0 kB
Locked:                0 kB
VmFlags: rd mr mw me
55d0c0100000-55d0c0200000 r-xp 00100000 fd:01 42   /usr/bin/healthroute-resolver
Rss:                 900 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
55d0c0200000-55d0c0210000 r--p 00200000 fd:01 42   /usr/bin/healthroute-resolver
Rss:                  64 kB
Anonymous:            64 kB
VmFlags: rd mr mw me ac
55d0c0210000-55d0c0214000 rw-p 00210000 fd:01 42   /usr/bin/healthroute-resolver
Rss:                  16 kB
Anonymous:            16 kB
55d0c1000000-55d0c2000000 rw-p 00000000 00:00 0    [heap]
Rss:                2048 kB
Anonymous:          2048 kB
7f0000000000-7f0000001000 r-xp 00000000 fd:01 77   /usr/lib/libc.so.6
Rss:                   4 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me lo
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0    [vdso]
Rss:                   8 kB
Anonymous:             0 kB
";
        let found = read_only_file_mappings(smaps);
        assert_eq!(
            found,
            [
                Mapping {
                    start: 0x55d0c0000000,
                    len: 0x100000,
                    rss_kib: 1024
                },
                Mapping {
                    start: 0x55d0c0100000,
                    len: 0x100000,
                    rss_kib: 900
                },
            ],
            "not the relocated data (private pages), the writable data, the heap, a locked \
             mapping or the vDSO"
        );
        // This process's own mappings: released, and the code still runs.
        let _ = release_code_pages();
        assert!(
            !read_only_file_mappings(
                &std::fs::read_to_string("/proc/self/smaps").unwrap_or_default()
            )
            .is_empty()
        );
    }

    #[test]
    fn dont_fragment_sockets_still_deliver() {
        let server = UdpSocket::bind("127.0.0.1:0").expect("bind");
        set_dont_fragment(server.as_fd(), false).expect("IPv4 option");
        assert_eq!(
            mtu_discover_mode(server.as_fd(), false).expect("read back"),
            libc::IP_PMTUDISC_PROBE
        );
        let client = UdpSocket::bind("127.0.0.1:0").expect("bind");
        client
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        // A full-size reply (the largest the resolver sends) still goes out whole.
        let reply = vec![7u8; crate::wire::MAX_UDP_PAYLOAD as usize];
        let to = SockaddrStorage::from(client.local_addr().expect("addr"));
        let sent = send_batch(server.as_fd(), &[(&reply, &to)], |i, e| {
            panic!("datagram {i}: {e}")
        });
        assert_eq!(sent, 1);
        let mut buf = [0u8; 2048];
        let (n, _) = client.recv_from(&mut buf).expect("received");
        assert_eq!(&buf[..n], &reply[..]);
        if let Ok(v6) = UdpSocket::bind("[::1]:0") {
            set_dont_fragment(v6.as_fd(), true).expect("IPv6 option");
            assert_eq!(
                mtu_discover_mode(v6.as_fd(), true).expect("read back"),
                libc::IPV6_PMTUDISC_PROBE
            );
        }
    }

    #[test]
    fn sends_every_datagram_to_its_own_address_in_order() {
        let server = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = UdpSocket::bind("[::1]:0").ok(); // IPv6 may be missing in a sandbox
        let to_a = SockaddrStorage::from(a.local_addr().expect("addr"));
        let server6 = UdpSocket::bind("[::1]:0").ok();
        let mut batch: Vec<(&[u8], &SockaddrStorage)> = vec![(b"one", &to_a), (b"two", &to_a)];
        let sent = send_batch(server.as_fd(), &batch, |i, e| panic!("datagram {i}: {e}"));
        assert_eq!(sent, 2);
        a.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut buf = [0u8; 16];
        for want in [&b"one"[..], b"two"] {
            let (n, from) = a.recv_from(&mut buf).expect("received");
            assert_eq!(&buf[..n], want);
            assert_eq!(from, server.local_addr().expect("addr"));
        }
        // An IPv6 destination on an IPv4 socket fails alone; the datagram after it still goes.
        if let (Some(b), Some(_)) = (b, server6) {
            let to_b = SockaddrStorage::from(b.local_addr().expect("addr"));
            batch = vec![(b"bad", &to_b), (b"three", &to_a)];
            let mut failed = Vec::new();
            let sent = send_batch(server.as_fd(), &batch, |i, _| failed.push(i));
            assert_eq!((sent, failed), (1, vec![0]));
            let (n, _) = a.recv_from(&mut buf).expect("received");
            assert_eq!(&buf[..n], b"three");
        }
    }
}
