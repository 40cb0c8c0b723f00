//! Which addresses the page fetcher refuses. A model writes the URLs `<crawl_page>` opens, and
//! model-written text can come from any page it read: without this rule, a page saying "now read
//! http://127.0.0.1:8080/admin" would reach the services on the user's own machine and network.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` is not a public internet address, or `None` when it is one.
pub fn private_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4_kind(v4);
            }
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("a loopback address (this machine)")
            } else if v6.is_unspecified() {
                Some("the unspecified address (this machine)")
            } else if first & 0xfe00 == 0xfc00 {
                Some("a private network address (unique local)")
            } else if first & 0xffc0 == 0xfe80 {
                Some("a link-local address")
            } else if v6.is_multicast() {
                Some("a multicast address")
            } else if let Some(v4) = embedded_v4(v6) {
                v4_kind(v4)
            } else if v6.segments()[..3] == [0x64, 0xff9b, 1] {
                Some("a local-use NAT64 address (a private network's translator)")
            } else {
                None
            }
        }
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("a loopback address (this machine)")
    } else if ip.is_unspecified() || a == 0 {
        Some("the unspecified address (this machine)")
    } else if ip.is_private() {
        Some("a private network address")
    } else if ip.is_link_local() {
        Some("a link-local address (cloud metadata services live here)")
    } else if a == 100 && (64..128).contains(&b) {
        Some("a carrier-grade NAT address")
    } else if ip.is_broadcast() || ip.is_multicast() {
        Some("a broadcast or multicast address")
    } else {
        None
    }
}

/// The IPv4 address inside an IPv6 address that carries one in its last 32 bits and reaches
/// it: `::a.b.c.d` (IPv4-compatible, deprecated but still turned into IPv4 by some stacks),
/// `::ffff:0:a.b.c.d` (IPv4-translated, SIIT) and `64:ff9b::a.b.c.d` (the well-known NAT64
/// prefix). `::` and `::1` are not among them: they are IPv6's own.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let carries = matches!(
        s[..6],
        [0, 0, 0, 0, 0, 0] | [0, 0, 0, 0, 0xffff, 0] | [0x64, 0xff9b, 0, 0, 0, 0]
    );
    let [.., a, b, c, d] = ip.octets();
    (carries && !ip.is_loopback() && !ip.is_unspecified()).then_some(Ipv4Addr::new(a, b, c, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_and_its_networks_are_private_and_the_internet_is_not() {
        for refused in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            // IPv4-compatible, IPv4-translated and local-use NAT64 (RFC 8215).
            "::127.0.0.1",
            "::10.0.0.1",
            "::ffff:0:127.0.0.1",
            "::ffff:0:192.168.0.1",
            "64:ff9b:1::1",
            "64:ff9b:1::808:808",
            "64:ff9b:1:ffff::1",
        ] {
            let ip: IpAddr = refused.parse().unwrap();
            assert!(private_kind(ip).is_some(), "{refused} should be refused");
        }
        for allowed in [
            "1.1.1.1",
            "93.184.216.34",
            "2606:4700::1111",
            "64:ff9b::101:101",
            "::ffff:0:1.1.1.1",
            "64:ff9b:2::1",
        ] {
            let ip: IpAddr = allowed.parse().unwrap();
            assert_eq!(private_kind(ip), None, "{allowed} should be allowed");
        }
    }
}
