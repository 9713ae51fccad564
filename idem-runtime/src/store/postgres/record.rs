//! The record both PostgreSQL claims return an existing key row in (`CLAIM` and
//! `phased::CLAIM`, and their `SELECT_EXISTING`): a few flags, then the request's
//! columns and the response's head. The body is not in it: it is read beside the record,
//! as a share of the row's buffer (`StoredBytes`), where a record's fields are copies.

use sqlx::postgres::types::PgRecordDecoder;
use sqlx::postgres::{PgTypeInfo, PgValueRef};
use sqlx::{Decode, Postgres, Type};

use crate::store::KeyColumns;
use crate::store::stored_bytes::StoredBytes;

/// `ROW(<FLAGS booleans>, request_hash, method, path, state, response_status,
/// response_headers)`. The single-transaction claim has one flag (the retention ended),
/// the phased claim two (and no attempt holds the lease).
#[doc(hidden)]
#[derive(Debug)]
pub struct ExistingRecord<const FLAGS: usize> {
    pub(crate) flags: [bool; FLAGS],
    request_hash: Vec<u8>,
    method: String,
    path: String,
    state: String,
    response_status: Option<i16>,
    response_headers: Option<StoredBytes>,
}

impl<const FLAGS: usize> ExistingRecord<FLAGS> {
    /// The key row, with the body read beside the record.
    pub(crate) fn into_key(self, generation: i64, body: Option<StoredBytes>) -> KeyColumns {
        KeyColumns {
            request_hash: Some(self.request_hash),
            method: Some(self.method),
            path: Some(self.path),
            state: Some(self.state),
            response_status: self.response_status,
            response_headers: self.response_headers,
            response_body: body,
            generation,
        }
    }
}

/// An anonymous record, as sqlx's tuples are.
impl<const FLAGS: usize> Type<Postgres> for ExistingRecord<FLAGS> {
    fn type_info() -> PgTypeInfo {
        <(bool,) as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <(bool,) as Type<Postgres>>::compatible(ty)
    }
}

impl<'r, const FLAGS: usize> Decode<'r, Postgres> for ExistingRecord<FLAGS> {
    fn decode(value: PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let mut record = PgRecordDecoder::new(value)?;
        let mut flags = [false; FLAGS];
        for flag in &mut flags {
            *flag = record.try_decode()?;
        }
        Ok(Self {
            flags,
            request_hash: record.try_decode()?,
            method: record.try_decode()?,
            path: record.try_decode()?,
            state: record.try_decode()?,
            response_status: record.try_decode()?,
            response_headers: record.try_decode()?,
        })
    }
}
