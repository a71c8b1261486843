//! The storage edge: script replies and record fields as idem's types.

use std::time::Duration;

use bytes::Bytes;
use idem_core::{
    Acquisition, Census, FencingToken, Fingerprint, Lease, Listed, Outcome, Posted, Record,
    RecordState, Scope, StateFilter, StoreError, Timestamp,
};
use redis::Value;

use crate::Error;

/// The `s` field of a record.
const PROCESSING: &[u8] = b"1";
const COMPLETED: &[u8] = b"2";

fn unexpected() -> StoreError {
    StoreError::corrupted(Error::UnexpectedReply)
}

/// An integer reply.
fn uint(value: &Value) -> Result<u64, StoreError> {
    match value {
        Value::Int(n) => u64::try_from(*n).map_err(|_| unexpected()),
        _ => Err(unexpected()),
    }
}

/// A bulk string, or `None` for a missing field.
fn bytes(value: &Value) -> Result<Option<&[u8]>, StoreError> {
    match value {
        Value::BulkString(bytes) => Ok(Some(bytes)),
        Value::Nil => Ok(None),
        _ => Err(unexpected()),
    }
}

/// A field that a record in `state` must have.
fn required<'v>(
    value: &'v Value,
    state: &'static str,
    field: &'static str,
) -> Result<&'v [u8], StoreError> {
    bytes(value)?.ok_or_else(|| StoreError::corrupted(Error::MissingField { state, field }))
}

/// A field holding a decimal number.
fn number(value: &Value, state: &'static str, field: &'static str) -> Result<u64, StoreError> {
    let text = required(value, state, field)?;
    std::str::from_utf8(text)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| StoreError::corrupted(Error::InvalidField(field)))
}

fn outcome(value: &Value) -> Result<Outcome, StoreError> {
    let bytes = required(value, "completed", "r")?;
    Outcome::decode(bytes).map_err(StoreError::corrupted)
}

/// The reply of `lua/acquire.lua`.
pub(crate) fn acquisition(reply: &Value) -> Result<Acquisition, StoreError> {
    let Value::Array(items) = reply else {
        return Err(unexpected());
    };
    match items.as_slice() {
        [Value::Int(1), token, until, took_over] => Ok(Acquisition::Acquired(Lease {
            token: FencingToken::new(uint(token)?),
            until: Timestamp::from_millis(uint(until)?),
            took_over: match uint(took_over)? {
                0 => false,
                1 => true,
                _ => return Err(unexpected()),
            },
        })),
        [Value::Int(2), stored] => outcome(stored).map(Acquisition::Completed),
        [Value::Int(3), retry_after] => Ok(Acquisition::InFlight {
            retry_after: Duration::from_millis(uint(retry_after)?),
        }),
        [Value::Int(4)] => Ok(Acquisition::Mismatch),
        _ => Err(unexpected()),
    }
}

/// The reply of the holder-only scripts (`complete`, `release`): 1, or 0 for a lost lease.
pub(crate) fn held(reply: &Value) -> Result<(), StoreError> {
    match uint(reply)? {
        1 => Ok(()),
        0 => Err(StoreError::LeaseLost),
        _ => Err(unexpected()),
    }
}

/// The reply of `lua/renew.lua`: the new end of the lease, or nil for a lost lease.
pub(crate) fn renewed(reply: &Value) -> Result<Timestamp, StoreError> {
    match reply {
        Value::Nil => Err(StoreError::LeaseLost),
        until => uint(until).map(Timestamp::from_millis),
    }
}

/// A 0-or-1 reply (`forget`, `purge`).
pub(crate) fn flag(reply: &Value) -> Result<bool, StoreError> {
    match uint(reply)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(unexpected()),
    }
}

/// The reply of `append_part` (`lua/parts.lua`): {1} stored (now or before), {0} for a lost
/// lease, {2, next} for an index past the next part's.
pub(crate) fn appended(reply: &Value, given: u32) -> Result<(), StoreError> {
    let Value::Array(items) = reply else {
        return Err(unexpected());
    };
    match items.as_slice() {
        [Value::Int(1)] => Ok(()),
        [Value::Int(0)] => Err(StoreError::LeaseLost),
        [Value::Int(2), next] => Err(StoreError::PartOutOfOrder {
            next: u32::try_from(uint(next)?).map_err(|_| unexpected())?,
            given,
        }),
        _ => Err(unexpected()),
    }
}

/// The reply of `read_parts` (`lua/parts.lua`): the parts, in order.
pub(crate) fn parts(reply: Value) -> Result<Vec<Bytes>, StoreError> {
    let Value::Array(items) = reply else {
        return Err(unexpected());
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::BulkString(part) => Ok(Bytes::from(part)),
            _ => Err(unexpected()),
        })
        .collect()
}

/// A count (`purge_parts`).
pub(crate) fn count(reply: &Value) -> Result<usize, StoreError> {
    usize::try_from(uint(reply)?).map_err(|_| unexpected())
}

/// The reply of `lua/get.lua`: nil, or the fields s, f, t, c, e, l, d, r.
pub(crate) fn record(reply: &Value) -> Result<Option<Record>, StoreError> {
    match reply {
        Value::Nil => Ok(None),
        Value::Array(fields) => fields_of(fields).map(Some),
        _ => Err(unexpected()),
    }
}

/// A record from its fields s, f, t, c, e, l, d, r.
fn fields_of(fields: &[Value]) -> Result<Record, StoreError> {
    let [s, f, t, c, e, l, d, r] = fields else {
        return Err(unexpected());
    };
    let state = match required(s, "stored", "s")? {
        PROCESSING => "processing",
        COMPLETED => "completed",
        other => {
            let code = String::from_utf8_lossy(other).into_owned();
            return Err(StoreError::corrupted(Error::UnknownState(code)));
        }
    };
    let token = FencingToken::new(number(t, state, "t")?);
    let state = match state {
        "processing" => RecordState::Processing {
            token,
            lease_until: Timestamp::from_millis(number(l, state, "l")?),
        },
        _ => RecordState::Completed {
            token,
            outcome: outcome(r)?,
            completed_at: Timestamp::from_millis(number(d, state, "d")?),
        },
    };
    let fingerprint = Fingerprint::try_from(required(f, state.name(), "f")?)
        .map_err(|_| StoreError::corrupted(Error::InvalidField("f")))?;
    Ok(Record {
        fingerprint,
        created_at: Timestamp::from_millis(number(c, state.name(), "c")?),
        expires_at: Timestamp::from_millis(number(e, state.name(), "e")?),
        state,
    })
}

/// The code of a state in the `s` field, as a listing filters on it.
pub(crate) fn state_code(state: StateFilter) -> &'static [u8] {
    match state {
        StateFilter::Processing => PROCESSING,
        StateFilter::Completed => COMPLETED,
    }
}

/// What `lua/list.lua` read in one `SCAN` step.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// The time of the server that read them (or of the manual clock).
    pub(crate) now: Timestamp,
    /// How many of the step's records past the cursor's position the listing admits.
    pub(crate) admitted: u64,
    /// The position of the last record returned (the first 64 bits of its key's digest), or 0.
    pub(crate) last: u64,
    /// The admitted records asked for.
    pub(crate) records: Vec<Listed>,
}

/// The reply of `lua/list.lua`: now, how many records past the position were admitted, the
/// position of the last one returned (hex, or nil), then the fields s, f, t, c, e, l, d, r, a, k
/// of each one returned.
pub(crate) fn found(reply: &Value) -> Result<Found, StoreError> {
    let Value::Array(items) = reply else {
        return Err(unexpected());
    };
    let [now, admitted, last, records @ ..] = items.as_slice() else {
        return Err(unexpected());
    };
    let records = records
        .iter()
        .map(|fields| {
            let Value::Array(fields) = fields else {
                return Err(unexpected());
            };
            let [record @ .., a, k] = fields.as_slice() else {
                return Err(unexpected());
            };
            let record = fields_of(record)?;
            Ok(Listed {
                scope: Scope::from_bytes(digest(a, record.state.name(), "a")?),
                key_sha256: digest(k, record.state.name(), "k")?,
                record,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Found {
        now: Timestamp::from_millis(uint(now)?),
        admitted: uint(admitted)?,
        last: match last {
            Value::BulkString(hex) => std::str::from_utf8(hex)
                .ok()
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                .ok_or_else(unexpected)?,
            _ => 0,
        },
        records,
    })
}

/// A 32-byte field.
fn digest(value: &Value, state: &'static str, field: &'static str) -> Result<[u8; 32], StoreError> {
    required(value, state, field)?
        .try_into()
        .map_err(|_| StoreError::corrupted(Error::InvalidField(field)))
}

/// The reply of `lua/census.lua`: the processing and completed records of one `SCAN` step, and
/// the oldest processing one's `created_at` (nil when there is none).
pub(crate) fn census(reply: &Value) -> Result<Census, StoreError> {
    let Value::Array(items) = reply else {
        return Err(unexpected());
    };
    let [processing, completed, oldest] = items.as_slice() else {
        return Err(unexpected());
    };
    Ok(Census {
        processing: uint(processing)?,
        completed: uint(completed)?,
        oldest_processing: match oldest {
            Value::Nil => None,
            oldest => Some(Timestamp::from_millis(uint(oldest)?)),
        },
    })
}

/// The reply of `lua/census_board.lua`: whether the claim or the post succeeded, how long a
/// waiting claimant waits, and the census posted before the call.
pub(crate) fn census_board(reply: &Value) -> Result<(bool, Duration, Option<Posted>), StoreError> {
    let Value::Array(items) = reply else {
        return Err(unexpected());
    };
    let [yes, retry_after, at, next, processing, completed, oldest] = items.as_slice() else {
        return Err(unexpected());
    };
    let millis = |value: &Value| -> Result<Option<u64>, StoreError> {
        bytes(value)?
            .map(|text| {
                std::str::from_utf8(text)
                    .ok()
                    .and_then(|text| text.parse().ok())
                    .ok_or_else(unexpected)
            })
            .transpose()
    };
    let posted = match (millis(at)?, millis(next)?) {
        (Some(at), Some(next)) => Some(Posted {
            census: Census {
                processing: millis(processing)?.unwrap_or(0),
                completed: millis(completed)?.unwrap_or(0),
                oldest_processing: millis(oldest)?.map(Timestamp::from_millis),
            },
            at: Timestamp::from_millis(at),
            next: Timestamp::from_millis(next),
        }),
        _ => None,
    };
    Ok((
        uint(yes)? == 1,
        Duration::from_millis(uint(retry_after)?),
        posted,
    ))
}

#[cfg(test)]
mod tests {
    use idem_core::{DecodeError, StoredResponse};

    use super::*;

    fn bulk(text: impl AsRef<[u8]>) -> Value {
        Value::BulkString(text.as_ref().to_vec())
    }

    fn completed_fields(response: Value) -> Vec<Value> {
        vec![
            bulk("2"),
            bulk([7; 32]),
            bulk("42"),
            bulk("1000"),
            bulk("9000"),
            Value::Nil,
            bulk("1500"),
            response,
        ]
    }

    #[test]
    fn acquisitions_are_read_from_tagged_arrays() {
        let reply = Value::Array(vec![
            Value::Int(1),
            Value::Int(7),
            Value::Int(99),
            Value::Int(1),
        ]);
        assert_eq!(
            acquisition(&reply).unwrap(),
            Acquisition::Acquired(Lease {
                token: FencingToken::new(7),
                until: Timestamp::from_millis(99),
                took_over: true
            })
        );
        let stored = StoredResponse::new(201).body("done");
        let reply = Value::Array(vec![Value::Int(2), bulk(stored.encode())]);
        assert_eq!(
            acquisition(&reply).unwrap(),
            Acquisition::Completed(stored.into())
        );
        let reply = Value::Array(vec![Value::Int(3), Value::Int(250)]);
        assert_eq!(
            acquisition(&reply).unwrap(),
            Acquisition::InFlight {
                retry_after: Duration::from_millis(250)
            }
        );
        assert_eq!(
            acquisition(&Value::Array(vec![Value::Int(4)])).unwrap(),
            Acquisition::Mismatch
        );
        for bad in [Value::Nil, Value::Array(vec![Value::Int(5)]), Value::Int(1)] {
            let error = acquisition(&bad).unwrap_err();
            assert!(
                matches!(error, StoreError::Corrupted(_)),
                "{bad:?}: {error:?}"
            );
        }
    }

    #[test]
    fn appends_and_reads_of_parts_are_read_from_their_replies() {
        let array = |items: Vec<Value>| Value::Array(items);
        assert_eq!(appended(&array(vec![Value::Int(1)]), 3).unwrap(), ());
        assert!(matches!(
            appended(&array(vec![Value::Int(0)]), 3),
            Err(StoreError::LeaseLost)
        ));
        assert!(matches!(
            appended(&array(vec![Value::Int(2), Value::Int(1)]), 3),
            Err(StoreError::PartOutOfOrder { next: 1, given: 3 })
        ));
        for bad in [
            Value::Int(1),
            array(vec![Value::Int(2)]),
            array(vec![Value::Int(2), Value::Int(-1)]),
        ] {
            assert!(
                matches!(appended(&bad, 0), Err(StoreError::Corrupted(_))),
                "{bad:?}"
            );
        }

        let read = parts(array(vec![bulk("a"), bulk("")])).unwrap();
        assert_eq!(read, [Bytes::from_static(b"a"), Bytes::new()]);
        assert_eq!(parts(array(vec![])).unwrap(), Vec::<Bytes>::new());
        assert!(matches!(
            parts(array(vec![Value::Nil])),
            Err(StoreError::Corrupted(_))
        ));
    }

    #[test]
    fn a_completed_record_is_read_field_by_field() {
        let stored = StoredResponse::new(200).body("ok");
        let record = record(&Value::Array(completed_fields(bulk(stored.encode()))))
            .unwrap()
            .unwrap();
        assert_eq!(
            record,
            Record {
                fingerprint: Fingerprint::from_bytes([7; 32]),
                created_at: Timestamp::from_millis(1000),
                expires_at: Timestamp::from_millis(9000),
                state: RecordState::Completed {
                    token: FencingToken::new(42),
                    outcome: stored.into(),
                    completed_at: Timestamp::from_millis(1500),
                },
            }
        );
        assert_eq!(super::record(&Value::Nil).unwrap(), None);
    }

    /// The source of the `Corrupted` error that reading `fields` gives.
    fn corruption(fields: Vec<Value>) -> Box<dyn std::error::Error + Send + Sync> {
        match record(&Value::Array(fields)) {
            Err(StoreError::Corrupted(source)) => source,
            other => panic!("expected Corrupted, got {other:?}"),
        }
    }

    #[test]
    fn unreadable_records_are_corrupted_with_a_typed_source() {
        let valid = || bulk(StoredResponse::new(200).encode());

        let source = corruption(completed_fields(bulk("IDR")));
        assert_eq!(source.downcast_ref(), Some(&DecodeError::Truncated));

        let source = corruption(completed_fields(Value::Nil));
        assert!(
            matches!(
                source.downcast_ref(),
                Some(Error::MissingField {
                    state: "completed",
                    field: "r"
                })
            ),
            "{source:?}"
        );

        let mut fields = completed_fields(valid());
        fields[0] = bulk("7");
        let source = corruption(fields);
        assert!(
            matches!(source.downcast_ref(), Some(Error::UnknownState(s)) if s == "7"),
            "{source:?}"
        );

        let mut fields = completed_fields(valid());
        fields[4] = bulk("soon");
        let source = corruption(fields);
        assert!(
            matches!(source.downcast_ref(), Some(Error::InvalidField("e"))),
            "{source:?}"
        );
    }

    #[test]
    fn listed_records_carry_their_scope_and_key_digest() {
        let stored = StoredResponse::new(200).body("ok");
        let listed = |a: Value| {
            let mut fields = completed_fields(bulk(stored.encode()));
            fields.extend([a, bulk([9; 32])]);
            found(&Value::Array(vec![
                Value::Int(5000),
                Value::Int(3),
                bulk(*b"00ff00ff00ff00ff"),
                Value::Array(fields),
            ]))
        };
        let reply = listed(bulk([4; 32])).unwrap();
        assert_eq!(
            (reply.now, reply.admitted, reply.last),
            (Timestamp::from_millis(5000), 3, 0x00ff_00ff_00ff_00ff)
        );
        let [record] = reply.records.as_slice() else {
            panic!("one record: {reply:?}");
        };
        assert_eq!(
            (record.scope, record.key_sha256, record.record.created_at),
            (
                Scope::from_bytes([4; 32]),
                [9; 32],
                Timestamp::from_millis(1000)
            )
        );
        for bad in [bulk([4; 31]), Value::Nil] {
            let error = listed(bad.clone()).unwrap_err();
            assert!(
                matches!(error, StoreError::Corrupted(_)),
                "{bad:?}: {error:?}"
            );
        }
    }

    #[test]
    fn census_replies_count_and_name_the_oldest() {
        let counted = |oldest| census(&Value::Array(vec![Value::Int(2), Value::Int(5), oldest]));
        assert_eq!(
            counted(Value::Int(1234)).unwrap(),
            Census {
                processing: 2,
                completed: 5,
                oldest_processing: Some(Timestamp::from_millis(1234)),
            }
        );
        assert_eq!(counted(Value::Nil).unwrap().oldest_processing, None);
        assert!(census(&Value::Int(1)).is_err());
    }

    #[test]
    fn holder_replies_map_to_lease_lost() {
        assert!(matches!(held(&Value::Int(1)), Ok(())));
        assert!(matches!(held(&Value::Int(0)), Err(StoreError::LeaseLost)));
        assert!(matches!(renewed(&Value::Nil), Err(StoreError::LeaseLost)));
        assert_eq!(renewed(&Value::Int(5)).unwrap(), Timestamp::from_millis(5));
        assert_eq!(
            (flag(&Value::Int(0)).unwrap(), flag(&Value::Int(1)).unwrap()),
            (false, true)
        );
    }
}
