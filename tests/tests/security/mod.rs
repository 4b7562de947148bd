//! Redis over TLS, and the least-privilege Redis users the project ships.

mod acl;
mod tls;
