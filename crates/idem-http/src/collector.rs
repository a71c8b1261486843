//! [`Collector`]: a body's chunks gathered into one buffer as they arrive.

use bytes::{Bytes, BytesMut};

/// The bytes of a body read chunk by chunk, held in one buffer. A lone chunk is kept as it
/// came. From the second on, the chunks are copied into one buffer, allocated for the whole
/// body when its length is known (else grown as they come), and each is dropped once copied: a
/// chunk shares its allocation with the HTTP stack's read buffer, which cannot be reused while
/// the chunk lives, so that chunks kept to the end would each hold a read buffer of their own.
#[derive(Debug)]
pub(crate) struct Collector {
    data: Data,
    /// The body's length, when known (0 when not).
    expected: usize,
}

#[derive(Debug, Default)]
enum Data {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Collector {
    /// A collector for a body of `expected` bytes (0 when its length is unknown).
    pub(crate) fn new(expected: usize) -> Self {
        Self {
            data: Data::Empty,
            expected,
        }
    }

    /// Adds the next chunk.
    pub(crate) fn push(&mut self, chunk: Bytes) {
        self.data = match std::mem::take(&mut self.data) {
            Data::Empty => Data::One(chunk),
            Data::One(first) => {
                let len = first.len() + chunk.len();
                let mut all = BytesMut::with_capacity(len.max(self.expected));
                all.extend_from_slice(&first);
                all.extend_from_slice(&chunk);
                Data::Many(all)
            }
            Data::Many(mut all) => {
                all.extend_from_slice(&chunk);
                Data::Many(all)
            }
        };
    }

    /// The bytes collected so far.
    pub(crate) fn len(&self) -> usize {
        match &self.data {
            Data::Empty => 0,
            Data::One(data) => data.len(),
            Data::Many(data) => data.len(),
        }
    }

    /// The whole body.
    pub(crate) fn into_bytes(self) -> Bytes {
        match self.data {
            Data::Empty => Bytes::new(),
            Data::One(data) => data,
            Data::Many(data) => data.freeze(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_length_is_allocated_once_and_a_lone_chunk_is_not_copied() {
        let mut known = Collector::new(6);
        known.push(Bytes::from_static(b"ab"));
        known.push(Bytes::from_static(b"cd"));
        let Data::Many(all) = &known.data else {
            panic!("two chunks are copied into one buffer");
        };
        assert_eq!(all.capacity(), 6);
        known.push(Bytes::from_static(b"ef"));
        assert_eq!(known.len(), 6);
        assert_eq!(known.into_bytes(), "abcdef");

        let lone = Bytes::from_static(b"lone");
        let mut one = Collector::new(4);
        one.push(lone.clone());
        assert_eq!(one.into_bytes().as_ptr(), lone.as_ptr());

        let mut unknown = Collector::new(0);
        for chunk in ["a", "b", "c"] {
            unknown.push(Bytes::from_static(chunk.as_bytes()));
        }
        assert_eq!(unknown.into_bytes(), "abc");
        assert_eq!(Collector::new(0).into_bytes(), "");
    }
}
