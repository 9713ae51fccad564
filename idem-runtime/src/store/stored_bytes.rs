//! The stored header block and body as read from a key row: [`Bytes`] that, on
//! PostgreSQL, point into the buffer sqlx read the row into, so that a replayed 1 MiB
//! body is the bytes received from the database and nothing else (issue 18). SQLite hands
//! its value over as a copy, which becomes the `Bytes` without another.

use bytes::Bytes;

/// A `bytea` / `BLOB` column, decoded without a copy where the driver allows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoredBytes(pub(crate) Bytes);

#[cfg(feature = "postgres")]
mod postgres {
    use bytes::Bytes;
    use sqlx::postgres::{PgTypeInfo, PgValue, PgValueFormat, PgValueRef};
    use sqlx::{Decode, Postgres, Type, Value as _, ValueRef};

    use super::StoredBytes;

    /// A column value that owns a share of its row's buffer (`ValueRef::to_owned` slices
    /// the row's `Bytes` rather than copying), lent to `Bytes::from_owner`.
    struct RowShare(PgValue);

    impl AsRef<[u8]> for RowShare {
        fn as_ref(&self) -> &[u8] {
            // Only built from a non-NULL value, so `as_bytes` succeeds.
            self.0.as_ref().as_bytes().unwrap_or_default()
        }
    }

    impl Type<Postgres> for StoredBytes {
        fn type_info() -> PgTypeInfo {
            <Vec<u8> as Type<Postgres>>::type_info()
        }

        fn compatible(ty: &PgTypeInfo) -> bool {
            <Vec<u8> as Type<Postgres>>::compatible(ty)
        }
    }

    impl<'r> Decode<'r, Postgres> for StoredBytes {
        fn decode(value: PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
            if value.format() == PgValueFormat::Text {
                // A simple query's hex text: decoding makes new bytes anyway.
                return <Vec<u8> as Decode<Postgres>>::decode(value).map(|v| Self(v.into()));
            }
            value.as_bytes()?; // NULL is an error here, as for `Vec<u8>`
            Ok(Self(Bytes::from_owner(RowShare(ValueRef::to_owned(
                &value,
            )))))
        }
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use sqlx::sqlite::{SqliteTypeInfo, SqliteValueRef};
    use sqlx::{Decode, Sqlite, Type};

    use super::StoredBytes;

    impl Type<Sqlite> for StoredBytes {
        fn type_info() -> SqliteTypeInfo {
            <Vec<u8> as Type<Sqlite>>::type_info()
        }

        fn compatible(ty: &SqliteTypeInfo) -> bool {
            <Vec<u8> as Type<Sqlite>>::compatible(ty)
        }
    }

    impl<'r> Decode<'r, Sqlite> for StoredBytes {
        fn decode(value: SqliteValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
            <Vec<u8> as Decode<Sqlite>>::decode(value).map(|v| Self(v.into()))
        }
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::StoredBytes;

    /// Two `bytea` values of one row come back as `Bytes` in one buffer, the second right
    /// after the first and the second's 4-byte length: the row as sqlx received it. A copy
    /// of either would sit in an allocation of its own.
    #[tokio::test]
    async fn postgres_values_are_shares_of_the_row() {
        let db = idem_testkit::TestDb::new().await;
        let pool = db.pool(1).await;
        let headers = vec![b'h'; 100];
        let body = vec![b'b'; 1024 * 1024];
        let (read_headers, read_body): (StoredBytes, StoredBytes) =
            sqlx::query_as("SELECT $1::bytea, $2::bytea")
                .bind(&headers)
                .bind(&body)
                .fetch_one(&pool)
                .await
                .expect("select");
        assert_eq!(read_headers.0, headers);
        assert_eq!(read_body.0, body);
        let after_headers = read_headers.0.as_ptr() as usize + read_headers.0.len();
        assert_eq!(read_body.0.as_ptr() as usize, after_headers + 4);
    }
}
