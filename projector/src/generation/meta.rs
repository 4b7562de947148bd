//! A generation's layout (`shared::layout`): how its keys are laid out, recorded in its meta and beside
//! every primary's positions, so that a build never reads or writes a generation it does not understand.

use shared::connection::Connection;
use shared::Keyspace;

use crate::store::position;

/// The layout of a generation (`shared::layout`): its meta's field or, when Redis lost that (the meta is on
/// one primary of a cluster), the one every primary records beside its positions
/// ([`position::layout`]); none for a generation written before either existed, which is layout 1.
/// Read as layout 1, a generation of a later one would get its owners as keys beside its owners' fields.
pub async fn layout(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<Option<String>> {
    let field: Option<String> =
        redis::cmd("HGET").arg(keys.meta()).arg(shared::layout::FIELD).query_async(conn).await?;
    match field {
        Some(field) => Ok(Some(field)),
        None => position::layout(conn, keys).await,
    }
}

/// The layout of `keys`'s generation, when this build reads it; else the one line that says why not.
pub async fn check_layout(conn: &mut Connection, keys: &Keyspace) -> Result<u32, crate::Error> {
    let field = layout(conn, keys).await?;
    Ok(shared::layout::check(keys.generation(), field.as_deref(), "projector")?)
}

/// Writes `layout` back into the generation's meta when Redis lost it there (so that the API, which reads
/// the meta alone, reads it too). Returns whether it was missing.
pub async fn restore_layout(conn: &mut Connection, keys: &Keyspace, layout: u32) -> redis::RedisResult<bool> {
    let mut restore = redis::cmd("HSETNX");
    restore.arg(keys.meta()).arg(shared::layout::FIELD).arg(layout);
    let written: i64 = redis::from_redis_value(conn.query_all(&[restore]).await?.remove(0))?;
    Ok(written == 1)
}

/// Writes the layout of a new generation into its meta, before anything else of it: no reader ever finds
/// the generation without it.
pub async fn write_layout(conn: &mut Connection, keys: &Keyspace, layout: u32) -> redis::RedisResult<()> {
    redis::cmd("HSET").arg(keys.meta()).arg(shared::layout::FIELD).arg(layout.to_string()).query_async(conn).await
}
