//! Transaction markers written into a partition, as a broker writes them when a transactional producer
//! commits: a control record that takes an offset and is never delivered to a consumer. The local
//! broker does not run transactions, so the marker is appended with a Kafka `Produce` request of its
//! own, encoded by `kafka-protocol` (librdkafka cannot write a control batch).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, RequestHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::env;

/// `Produce` v7: a request header of version 1, no tagged fields.
const PRODUCE_VERSION: i16 = 7;

/// Appends a transaction's commit marker to `topic`'s `partition`; returns its offset.
pub async fn append_commit_marker(topic: &str, partition: i32) -> i64 {
    let marker = Record {
        transactional: true,
        control: true,
        partition_leader_epoch: 0,
        producer_id: 4242,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: chrono::Utc::now().timestamp_millis(),
        // Control record key: version 0, type 1 (commit); value: version 0, coordinator epoch 0.
        key: Some(Bytes::from_static(&[0, 0, 0, 1])),
        value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
        headers: Default::default(),
        delete_horizon: false,
    };
    let mut batch = BytesMut::new();
    let options = RecordEncodeOptions { version: 2, compression: Compression::None };
    RecordBatchEncoder::encode(&mut batch, [&marker], &options).expect("encode the marker's batch");
    let data = PartitionProduceData::default().with_index(partition).with_records(Some(batch.freeze()));
    let topic_data = TopicProduceData::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partition_data(vec![data]);
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![topic_data]);
    let header = RequestHeader::default()
        .with_request_api_key(0)
        .with_request_api_version(PRODUCE_VERSION)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("end-to-end-markers")));
    let mut body = BytesMut::new();
    header.encode(&mut body, 1).expect("encode the request header");
    request.encode(&mut body, PRODUCE_VERSION).expect("encode the produce request");
    let mut frame = BytesMut::with_capacity(body.len() + 4);
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(&body);

    let brokers = env("KAFKA_BROKERS");
    let first = brokers.split(',').next().expect("a broker");
    let mut stream = tokio::net::TcpStream::connect(first).await.expect("connect to the broker");
    stream.write_all(&frame).await.expect("send the produce request");
    let length = stream.read_i32().await.expect("the response's length");
    let mut response = vec![0; length as usize];
    stream.read_exact(&mut response).await.expect("the response");
    let mut response = Bytes::from(response);
    let _correlation = response.get_i32();
    let response = ProduceResponse::decode(&mut response, PRODUCE_VERSION).expect("decode the produce response");
    let answer = &response.responses[0].partition_responses[0];
    assert_eq!(answer.error_code, 0, "the broker refused the marker on {topic}/{partition}");
    answer.base_offset
}
