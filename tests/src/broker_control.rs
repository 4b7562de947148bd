//! Orders to the suite's broker when it is the mock cluster (`demo-kafka` with a control port, the group
//! leg: docs/testing.md): the mock answers no `CreateTopics`, so a test's topics are created through
//! that port, and a broker fault is a broker taken down and up there.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

/// The control port's address, when the suite's broker (`KAFKA_BROKERS`) is the mock cluster.
pub fn address() -> Option<String> {
    std::env::var("MOCK_KAFKA_CONTROL").ok().filter(|a| !a.is_empty())
}

/// Sends one order (`create <topic> <partitions>`, `down <id>`, `up <id>`) and panics unless it is
/// carried out. It blocks (a loopback round trip): call it off the runtime's threads.
pub fn order(address: &str, order: &str) {
    let mut stream = TcpStream::connect(address).unwrap_or_else(|e| panic!("the mock's control port {address}: {e}"));
    stream.write_all(format!("{order}\n").as_bytes()).expect("order sent");
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).expect("the order's answer");
    assert_eq!(answer.trim_end(), "ok", "the mock refused {order:?}");
}
