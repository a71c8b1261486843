//! Responses of unknown length, streamed to their first client while they are recorded.
//!
//! [`tee`] splits such a response in two: the client's response, whose body yields each chunk as
//! the inner service produces it, and a [`Recording`], which reads the inner body (in the
//! engine's task for the rest of the execution, so that a client that goes away stops nothing),
//! hands each chunk to the client (and to the duplicates that joined it, see [`live`](crate::live))
//! and keeps up to the stored-response limit for the store. The
//! client's body ends only once the engine has recorded the outcome ([`Ending::send`]): a client
//! that read a whole response and retries gets it replayed. A body that fails before its end
//! ends the client's response with an error, never with a clean end that would look whole.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;
use idem_core::{Store, StoredResponse};
use tokio::sync::{mpsc, oneshot};

use crate::{
    ResponseBody,
    body::End,
    capture::{add_trailers, not_stored, stored_whole},
    follow::Appender,
    live::Live,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The chunks read ahead of a client that has not taken them yet.
const READ_AHEAD: usize = 8;

/// Splits `response` into the client's response, streamed, and its [`Recording`], which keeps up
/// to `limit` bytes for the store, waits at most `stall` for a client to take a chunk, and hands
/// each chunk to the duplicates that joined it, if it is `live`.
pub(crate) fn tee<B: http_body::Body>(
    response: Response<B>,
    limit: usize,
    stall: Duration,
    live: Option<Arc<Live>>,
) -> (Response<ResponseBody<B>>, Recording<B>) {
    let (parts, body) = response.into_parts();
    let (chunks, received) = mpsc::channel(READ_AHEAD);
    let (end, ended) = oneshot::channel();
    let hint = body.size_hint();
    let head = Head {
        status: parts.status,
        headers: parts.headers.clone(),
    };
    let streamed = ResponseBody::streamed(Vec::new(), received, ended, hint, None);
    let client = Response::from_parts(parts, streamed);
    let recording = Recording {
        head,
        body,
        chunks: Some(chunks),
        end,
        limit,
        stall,
        live,
    };
    (client, recording)
}

/// The recording side of a [`tee`]d response.
pub(crate) struct Recording<B> {
    head: Head,
    body: B,
    /// `None` once the client has gone away.
    chunks: Option<mpsc::Sender<Bytes>>,
    end: oneshot::Sender<End>,
    limit: usize,
    stall: Duration,
    live: Option<Arc<Live>>,
}

/// A response's status and headers, kept for the store.
struct Head {
    status: StatusCode,
    headers: HeaderMap,
}

/// How the client's response ends, sent once the outcome is recorded.
pub(crate) struct Ending {
    end: oneshot::Sender<End>,
    how: End,
}

impl Ending {
    /// How the response ends.
    pub(crate) fn end(&self) -> &End {
        &self.how
    }

    /// Ends the client's response (if it is still there).
    pub(crate) fn send(self) {
        let _ = self.end.send(self.how);
    }
}

impl<B> Recording<B>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// The status of the response.
    pub(crate) fn status(&self) -> StatusCode {
        self.head.status
    }

    /// Reads the body to its end, handing each chunk to the client while it is there: the
    /// response to store (the whole response, or a response-not-stored problem when it was larger
    /// than the limit) and the client's ending; or the body's error and an ending that passes it
    /// on.
    ///
    /// With an `appender`, the head and each chunk also go to the store, for duplicates on other
    /// instances to follow ([`follow`](crate::follow)), until the stream passes the limit.
    pub(crate) async fn record<St: Store>(
        self,
        mut appender: Option<&mut Appender<St>>,
    ) -> Result<(StoredResponse, Ending), (BoxError, Ending)> {
        let Self {
            head,
            body,
            mut chunks,
            end,
            limit,
            stall,
            live,
        } = self;
        // The chunks kept for the store, each copied out of the read buffer it came in, and their
        // length; `None` once they passed the limit.
        let mut kept: Option<(Vec<Bytes>, usize)> = Some((Vec::new(), 0));
        let mut trailers: Option<HeaderMap> = None;
        let mut body = std::pin::pin!(body);
        loop {
            // The body's own error is not `Send`: it is boxed before anything else is awaited.
            let next = body.frame().await.map(|frame| frame.map_err(Into::into));
            let Some(frame) = next else { break };
            let frame = match frame {
                Ok(frame) => frame,
                Err(error) => {
                    let error: BoxError = error;
                    let message = error.to_string();
                    let how = Err(message.into());
                    return Err((error, Ending { end, how }));
                }
            };
            match frame.into_data() {
                Ok(chunk) => {
                    // Copied out of its read buffer when kept, so as not to hold the buffer.
                    let chunk = if kept.is_some() || live.is_some() {
                        Bytes::copy_from_slice(&chunk)
                    } else {
                        chunk
                    };
                    let was_kept = kept.is_some();
                    if let Some((chunks, len)) = &mut kept {
                        *len += chunk.len();
                        chunks.push(chunk.clone());
                        if *len > limit {
                            kept = None;
                        }
                    }
                    if let Some(live) = &live {
                        live.push(&chunk, kept.is_some());
                    }
                    if let Some(client) = &chunks {
                        let sent = tokio::time::timeout(stall, client.send(chunk.clone())).await;
                        if !matches!(sent, Ok(Ok(()))) {
                            // Gone, or not reading: the recording goes on without it.
                            chunks = None;
                        }
                    }
                    // After the client has the chunk: the store's round trip delays only the
                    // next read.
                    if let Some(appender) = appender.as_deref_mut() {
                        match (was_kept, kept.is_some()) {
                            (_, true) => appender.chunk(&chunk).await,
                            (true, false) => appender.over().await,
                            (false, false) => {}
                        }
                    }
                }
                Err(frame) => {
                    if let Ok(more) = frame.into_trailers() {
                        add_trailers(&mut trailers, more);
                    }
                }
            }
        }
        let stored = match kept {
            Some((chunks, len)) => stored_whole(
                head.status,
                &head.headers,
                concat(chunks, len),
                trailers.as_ref(),
            ),
            None => not_stored(head.status, &head.headers, limit),
        };
        Ok((
            stored,
            Ending {
                end,
                how: Ok(trailers),
            },
        ))
    }
}

/// `chunks`, of `len` bytes in all, as one buffer: a lone chunk as it is.
fn concat(mut chunks: Vec<Bytes>, len: usize) -> Bytes {
    if chunks.len() <= 1 {
        return chunks.pop().unwrap_or_default();
    }
    let mut all = bytes::BytesMut::with_capacity(len);
    for chunk in chunks {
        all.extend_from_slice(&chunk);
    }
    all.freeze()
}
