//! The framing a schema-registry serializer puts around a message's value: Confluent's wire format, a zero
//! magic byte then a 4-byte big-endian schema id, before the serialized body. A producer that uses
//! Confluent's `KafkaJsonSchemaSerializer` writes the contract's JSON that way; the body is read as if it
//! came plain. Avro and Protobuf bodies in the same framing are not JSON and are refused, saying so.
//!
//! A plain value can never be mistaken for a framed one: JSON text never starts with a zero byte.

use super::Poison;

/// How a message's value was framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// The JSON itself, as the contract describes it.
    Plain,
    /// A schema registry's framing around JSON, with the schema id it names.
    SchemaRegistry { schema_id: u32 },
}

/// Confluent's wire format: the magic byte, then the schema id.
const MAGIC: u8 = 0;
const PREFIX: usize = 5;

/// The framing of `value`, and the bytes the event is to be read from.
pub fn unframe(value: &[u8]) -> Result<(Framing, &[u8]), Poison> {
    if value.first() != Some(&MAGIC) {
        return Ok((Framing::Plain, value));
    }
    let Some(id) = value.get(1..PREFIX) else {
        return Err(Poison("invalid envelope: a schema registry's magic byte without a 4-byte schema id".into()));
    };
    let schema_id = u32::from_be_bytes(id.try_into().expect("four bytes"));
    let body = &value[PREFIX..];
    match body.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        Some(b'{' | b'[') => Ok((Framing::SchemaRegistry { schema_id }, body)),
        _ => Err(Poison(format!(
            "a schema registry's framing (schema id {schema_id}) around a body that is not JSON: Avro and \
             Protobuf are not read, only JSON (plain, or framed by a JSON Schema serializer)"
        ))),
    }
}

/// The schema id `value` names, when a schema registry's framing holds JSON.
pub fn schema_id(value: &[u8]) -> Option<u32> {
    match unframe(value) {
        Ok((Framing::SchemaRegistry { schema_id }, _)) => Some(schema_id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(schema_id: u32, body: &[u8]) -> Vec<u8> {
        let mut value = vec![MAGIC];
        value.extend_from_slice(&schema_id.to_be_bytes());
        value.extend_from_slice(body);
        value
    }

    #[test]
    fn a_plain_value_is_read_whole() {
        for value in [&b"{\"a\":1}"[..], b" \n{}", b"not json", b"", b"\x01\x00\x00\x00\x07{}"] {
            assert_eq!(unframe(value), Ok((Framing::Plain, value)));
        }
    }

    #[test]
    fn a_framed_json_body_is_read_after_the_schema_id() {
        let value = framed(0x0102_0304, b"{\"a\":1}");
        assert_eq!(unframe(&value), Ok((Framing::SchemaRegistry { schema_id: 0x0102_0304 }, &b"{\"a\":1}"[..])));
        assert_eq!(schema_id(&value), Some(0x0102_0304));
        assert_eq!(schema_id(&framed(7, b"\r\n {}")), Some(7));
        assert_eq!(schema_id(b"{}"), None);
    }

    #[test]
    fn an_avro_or_protobuf_body_is_refused_naming_the_schema_id() {
        // Avro: a record's fields back to back, a string as its zigzag length then its bytes. Protobuf: the
        // message indexes (0 for the first message of the schema), then the fields' tags.
        for body in [&b"\x04e1\x1astudy.created"[..], b"\x00\x0a\x02e1", b""] {
            let reason = unframe(&framed(42, body)).unwrap_err().0;
            assert!(reason.contains("schema id 42") && reason.contains("Avro and Protobuf"), "{reason}");
        }
        assert_eq!(schema_id(&framed(42, b"\x00\x0a")), None);
    }

    #[test]
    fn a_magic_byte_without_a_whole_schema_id_is_poison() {
        for value in [&b"\x00"[..], b"\x00\x00\x00\x07"] {
            assert!(unframe(value).unwrap_err().0.contains("without a 4-byte schema id"));
        }
    }
}
