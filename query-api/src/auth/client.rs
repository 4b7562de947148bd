//! Who sent a request, for the throttle of unknown keys: the connection's peer, or, behind a proxy the
//! operator trusts (`TRUSTED_PROXIES`), the address that proxy says it forwarded for. An IPv6 client is
//! its /64, the block one host is usually given, so that rotating addresses within it does not escape.
//!
//! `X-Forwarded-For` is read from its right: each trusted proxy appends the address it received from, so
//! the last address that is not a trusted proxy is the first one no trusted proxy vouches for beyond. A
//! client can write anything to the left of it, never to its right.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::http::HeaderMap;
use ipnet::IpNet;

/// A client as throttled: an IPv4 address, or an IPv6 address's /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Client(IpAddr);

impl Client {
    /// The client at `address`.
    pub fn of(address: IpAddr) -> Self {
        match address.to_canonical() {
            IpAddr::V6(v6) => {
                let block = u128::from(v6) & !((1u128 << 64) - 1);
                Client(IpAddr::V6(Ipv6Addr::from(block)))
            }
            v4 => Client(v4),
        }
    }

    /// The client of a request from `peer` with `headers`; without a peer (a request not from a TCP
    /// connection), the one client `0.0.0.0`.
    pub fn from_request(peer: Option<SocketAddr>, headers: &HeaderMap, trusted: &[IpNet]) -> Self {
        let Some(peer) = peer.map(|peer| peer.ip().to_canonical()) else {
            return Client(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        };
        let is_trusted = |address: &IpAddr| trusted.iter().any(|net| net.contains(address));
        if !is_trusted(&peer) {
            return Client::of(peer);
        }
        let forwarded: Vec<IpAddr> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(|address| address.trim().parse::<IpAddr>().map(|a| a.to_canonical()))
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        // A header that does not parse is the client's word, not a proxy's: the proxy itself is the client.
        let client = forwarded.iter().rev().find(|address| !is_trusted(address)).or(forwarded.first());
        Client::of(client.copied().unwrap_or(peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(forwarded: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in forwarded {
            headers.append("x-forwarded-for", value.parse().unwrap());
        }
        headers
    }

    fn client(peer: &str, forwarded: &[&str], trusted: &[&str]) -> String {
        let trusted: Vec<IpNet> = trusted.iter().map(|t| t.parse().unwrap()).collect();
        let peer: SocketAddr = peer.parse().unwrap();
        Client::from_request(Some(peer), &headers(forwarded), &trusted).0.to_string()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        assert_eq!(client("203.0.113.7:5000", &["198.51.100.1"], &[]), "203.0.113.7");
        assert_eq!(client("203.0.113.7:5000", &["198.51.100.1"], &["10.0.0.0/8"]), "203.0.113.7");
    }

    #[test]
    fn behind_trusted_proxies_the_client_is_the_last_address_no_proxy_vouches_beyond() {
        let trusted = ["10.0.0.0/8"];
        assert_eq!(client("10.0.0.2:80", &["198.51.100.1"], &trusted), "198.51.100.1");
        // A client that forges the left of the header changes nothing.
        assert_eq!(client("10.0.0.2:80", &["1.2.3.4, 198.51.100.1, 10.0.0.9"], &trusted), "198.51.100.1");
        assert_eq!(client("10.0.0.2:80", &["1.2.3.4", "198.51.100.1"], &trusted), "198.51.100.1");
        // Only proxies in the header: the first of them; no header, or garbage: the proxy itself.
        assert_eq!(client("10.0.0.2:80", &["10.0.0.7, 10.0.0.8"], &trusted), "10.0.0.7");
        assert_eq!(client("10.0.0.2:80", &[], &trusted), "10.0.0.2");
        assert_eq!(client("10.0.0.2:80", &["not an address"], &trusted), "10.0.0.2");
    }

    #[test]
    fn an_ipv6_client_is_its_slash_64_and_a_mapped_ipv4_is_the_ipv4() {
        assert_eq!(client("[2001:db8:1:2:3:4:5:6]:443", &[], &[]), "2001:db8:1:2::");
        assert_eq!(client("[2001:db8:1:2:ffff::1]:443", &[], &[]), "2001:db8:1:2::");
        assert_eq!(client("[::ffff:203.0.113.7]:443", &[], &[]), "203.0.113.7");
    }
}
