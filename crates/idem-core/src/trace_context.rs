//! The W3C trace context of the execution that stored a response.

use std::{fmt, str::FromStr};

/// A [W3C trace context](https://www.w3.org/TR/trace-context/) (`traceparent`, version `00`):
/// the trace and the span of the execution that stored a response, kept with it so that a
/// replay's span can link to the trace that ran the operation.
///
/// # Examples
///
/// ```
/// use idem_core::TraceContext;
///
/// let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// let context: TraceContext = header.parse()?;
/// assert!(context.sampled());
/// assert_eq!(context.trace_id()[0], 0x4b);
/// assert_eq!(context.to_string(), header);
/// # Ok::<(), idem_core::InvalidTraceContext>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

/// Why a `traceparent` or a trace context's ids are not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, ids not all zero)")]
pub struct InvalidTraceContext;

impl TraceContext {
    /// The context of span `span_id` in trace `trace_id`, with the trace `flags` (`0x01`:
    /// sampled). An id of all zeroes is invalid, as W3C says.
    pub fn new(
        trace_id: [u8; 16],
        span_id: [u8; 8],
        flags: u8,
    ) -> Result<Self, InvalidTraceContext> {
        if trace_id == [0; 16] || span_id == [0; 8] {
            return Err(InvalidTraceContext);
        }
        Ok(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The trace's id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The span's id.
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// The trace flags.
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// Whether the trace was sampled (flag `0x01`).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

impl FromStr for TraceContext {
    type Err = InvalidTraceContext;

    /// Parses a `traceparent` header's value of version `00`.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let mut parts = value.split('-');
        let (Some("00"), Some(trace), Some(span), Some(flags), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(InvalidTraceContext);
        };
        let [flags] = hex::<1>(flags)?;
        Self::new(hex(trace)?, hex(span)?, flags)
    }
}

impl fmt::Display for TraceContext {
    /// The `traceparent` header's value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        self.trace_id
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))?;
        f.write_str("-")?;
        self.span_id.iter().try_for_each(|b| write!(f, "{b:02x}"))?;
        write!(f, "-{:02x}", self.flags)
    }
}

/// `N` bytes from `2N` lowercase hex digits.
fn hex<const N: usize>(digits: &str) -> Result<[u8; N], InvalidTraceContext> {
    let digits = digits.as_bytes();
    if digits.len() != 2 * N {
        return Err(InvalidTraceContext);
    }
    let nibble = |d: u8| match d {
        b'0'..=b'9' => Ok(d - b'0'),
        b'a'..=b'f' => Ok(d - b'a' + 10),
        _ => Err(InvalidTraceContext),
    };
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_and_written_back_exactly() {
        let header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        let context: TraceContext = header.parse().unwrap();
        assert_eq!(
            context.trace_id(),
            [
                0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80,
                0x31, 0x9c
            ]
        );
        assert_eq!(
            context.span_id(),
            [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31]
        );
        assert_eq!(context.flags(), 0);
        assert!(!context.sampled());
        assert_eq!(context.to_string(), header);
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in [
            "",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333g-01",
        ] {
            assert_eq!(
                bad.parse::<TraceContext>(),
                Err(InvalidTraceContext),
                "{bad:?}"
            );
        }
    }
}
