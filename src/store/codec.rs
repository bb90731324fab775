//! The values the two schemas store differently, as types that encode and decode for both:
//! PostgreSQL keeps ids as `uuid` and times as `timestamptz`; SQLite keeps ids as TEXT and
//! times as INTEGER milliseconds since the epoch. A statement that binds and reads these
//! types is one text for both databases.

use chrono::{DateTime, TimeZone, Utc};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentValue, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Encode, Postgres, Sqlite, Type};
use uuid::Uuid;

use crate::domain::{EventId, JobId};

/// An id column: `uuid` on PostgreSQL, its hyphenated text on SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Id(pub Uuid);

/// A time column: `timestamptz` on PostgreSQL, INTEGER milliseconds on SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct At(pub DateTime<Utc>);

impl From<EventId> for Id {
    fn from(id: EventId) -> Self {
        Self(id.as_uuid())
    }
}

impl From<JobId> for Id {
    fn from(id: JobId) -> Self {
        Self(id.as_uuid())
    }
}

impl From<Id> for EventId {
    fn from(id: Id) -> Self {
        EventId::from_uuid(id.0)
    }
}

impl From<Id> for JobId {
    fn from(id: Id) -> Self {
        JobId::from_uuid(id.0)
    }
}

impl From<At> for DateTime<Utc> {
    fn from(t: At) -> Self {
        t.0
    }
}

/// Milliseconds since the epoch, as SQLite stores a time.
pub(crate) fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn from_millis(ms: i64) -> Result<DateTime<Utc>, super::StoreError> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| super::StoreError::Corrupt(format!("timestamp {ms} out of range")))
}

pub(crate) fn parse_uuid(s: &str) -> Result<Uuid, super::StoreError> {
    Uuid::parse_str(s).map_err(|_| super::StoreError::Corrupt(format!("bad uuid {s:?}")))
}

impl Type<Postgres> for Id {
    fn type_info() -> PgTypeInfo {
        <Uuid as Type<Postgres>>::type_info()
    }
}

impl<'q> Encode<'q, Postgres> for Id {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <Uuid as Encode<'q, Postgres>>::encode_by_ref(&self.0, buf)
    }
}

impl<'r> Decode<'r, Postgres> for Id {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        <Uuid as Decode<'r, Postgres>>::decode(value).map(Self)
    }
}

impl Type<Sqlite> for Id {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Sqlite> for Id {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        <String as Encode<'q, Sqlite>>::encode(self.0.to_string(), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for Id {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<'r, Sqlite>>::decode(value)?;
        Ok(Self(Uuid::parse_str(text)?))
    }
}

impl Type<Postgres> for At {
    fn type_info() -> PgTypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
}

impl<'q> Encode<'q, Postgres> for At {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <DateTime<Utc> as Encode<'q, Postgres>>::encode_by_ref(&self.0, buf)
    }
}

impl<'r> Decode<'r, Postgres> for At {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        <DateTime<Utc> as Decode<'r, Postgres>>::decode(value).map(Self)
    }
}

impl Type<Sqlite> for At {
    fn type_info() -> SqliteTypeInfo {
        <i64 as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <i64 as Type<Sqlite>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Sqlite> for At {
    fn encode_by_ref(&self, buf: &mut Vec<SqliteArgumentValue<'q>>) -> Result<IsNull, BoxDynError> {
        <i64 as Encode<'q, Sqlite>>::encode(millis(self.0), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for At {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        let ms = <i64 as Decode<'r, Sqlite>>::decode(value)?;
        Ok(Self(from_millis(ms)?))
    }
}
