//! The calls the safe crates do not wrap (soundly): `sendmmsg(2)`, to send a batch of UDP
//! replies in one call (nix wraps it, but reading its result count walks address storage
//! that a send never fills), and the `IP_MTU_DISCOVER` socket option. With the admin crate's
//! `memory`, one of the two modules of the workspace that may use `unsafe`.
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
/// [`crate::dns::wire::MAX_UDP_PAYLOAD`] (1232 bytes, which fits the 1280-byte IPv6 minimum
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

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::os::fd::AsFd;
    use std::time::Duration;

    use super::*;

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
        let reply = vec![7u8; crate::dns::wire::MAX_UDP_PAYLOAD as usize];
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
