//! The scripts' replies: an array whose first element names the outcome.

use ::redis::Value;
use bytes::Bytes;

use super::RedisStoreError;

/// A script's reply: its tag and the values after it.
#[derive(Debug)]
pub(super) struct Reply {
    pub(super) tag: String,
    values: Vec<Value>,
}

impl Reply {
    pub(super) fn parse(value: Value) -> Result<Self, RedisStoreError> {
        let Value::Array(mut values) = value else {
            return Err(RedisStoreError::Reply(format!("not an array: {value:?}")));
        };
        if values.is_empty() {
            return Err(RedisStoreError::Reply("an empty array".to_owned()));
        }
        let tag = match values.remove(0) {
            Value::BulkString(b) => String::from_utf8(b)
                .map_err(|e| RedisStoreError::Reply(format!("a tag that is not text: {e}")))?,
            other => return Err(RedisStoreError::Reply(format!("no tag: {other:?}"))),
        };
        Ok(Self { tag, values })
    }

    /// How many values follow the tag.
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    fn get(&self, i: usize) -> Result<&Value, RedisStoreError> {
        self.values.get(i).ok_or_else(|| {
            RedisStoreError::Reply(format!("`{}` without its value {}", self.tag, i + 1))
        })
    }

    /// Value `i` as raw bytes (a nil is empty).
    pub(super) fn bytes(&self, i: usize) -> Result<Bytes, RedisStoreError> {
        match self.get(i)? {
            Value::BulkString(b) => Ok(Bytes::copy_from_slice(b)),
            Value::Nil => Ok(Bytes::new()),
            Value::Int(n) => Ok(Bytes::from(n.to_string())),
            other => Err(self.wrong(i, other)),
        }
    }

    /// Value `i` as text.
    pub(super) fn text(&self, i: usize) -> Result<String, RedisStoreError> {
        let bytes = self.bytes(i)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| {
            RedisStoreError::Reply(format!("`{}`: value {} is not text", self.tag, i + 1))
        })
    }

    /// Value `i` as an integer, sent as one or as its digits.
    pub(super) fn int(&self, i: usize) -> Result<i64, RedisStoreError> {
        match self.get(i)? {
            Value::Int(n) => Ok(*n),
            Value::BulkString(b) => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| self.wrong(i, &Value::BulkString(b.clone()))),
            other => Err(self.wrong(i, other)),
        }
    }

    /// Value `i` as an HTTP status code.
    pub(super) fn status(&self, i: usize) -> Result<u16, RedisStoreError> {
        let n = self.int(i)?;
        u16::try_from(n)
            .ok()
            .filter(|s| (100..=999).contains(s))
            .ok_or_else(|| self.wrong(i, &Value::Int(n)))
    }

    /// The reply of a fenced write: true when it was made.
    pub(super) fn done(&self) -> Result<bool, RedisStoreError> {
        match self.tag.as_str() {
            "done" => Ok(true),
            "fenced" | "gone" => Ok(false),
            _ => Err(self.unexpected()),
        }
    }

    pub(super) fn unexpected(&self) -> RedisStoreError {
        RedisStoreError::Reply(format!("the outcome `{}`", self.tag))
    }

    fn wrong(&self, i: usize, value: &Value) -> RedisStoreError {
        RedisStoreError::Reply(format!("`{}`: value {} is {value:?}", self.tag, i + 1))
    }
}
