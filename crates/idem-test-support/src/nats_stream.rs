//! [`NatsStream`]: a JetStream stream of the test's own.

use std::time::Duration;

use async_nats::jetstream::{self, stream};

/// A JetStream stream of the test's own (`IDEM_TEST_` and 16 hex digits) capturing one subject
/// of its own (`idem_test.` and the same digits), deleted when this is dropped.
#[derive(Debug)]
pub struct NatsStream {
    url: String,
    name: String,
    subject: String,
    jetstream: jetstream::Context,
}

impl NatsStream {
    /// Creates the stream on the server at `url`, with a duplicate window of `window`.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or the stream cannot be created.
    pub async fn create(url: &str, window: Duration) -> Self {
        let suffix = crate::unique_name("");
        let client = async_nats::connect(url)
            .await
            .expect("connect to the test server");
        let jetstream = jetstream::new(client);
        let (name, subject) = (format!("IDEM_TEST_{suffix}"), format!("idem_test.{suffix}"));
        let config = stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            duplicate_window: window,
            ..stream::Config::default()
        };
        // The server creates a stream's directory under its account's, which it removes with the
        // account's last stream: a stream created while another test deletes the last one can
        // find its parent gone ("error creating store for stream", 10049). Tried again, it is
        // created with its parent.
        let mut attempts = 0;
        loop {
            attempts += 1;
            match jetstream.create_stream(config.clone()).await {
                Ok(_) => break,
                Err(error) if attempts < 5 && error.to_string().contains("creating store") => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => panic!("create the test stream: {error}"),
            }
        }
        Self {
            url: url.to_owned(),
            name,
            subject,
            jetstream,
        }
    }

    /// The server's URL, as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The subject the stream captures.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The JetStream context the stream was created with.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// How many messages the stream stores.
    ///
    /// # Panics
    ///
    /// When the server does not answer.
    pub async fn stored(&self) -> u64 {
        let stream = self
            .jetstream
            .get_stream(&self.name)
            .await
            .expect("the stream of the test");
        stream
            .get_info()
            .await
            .expect("the stream's state")
            .state
            .messages
    }
}

impl Drop for NatsStream {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Drop is synchronous and may run inside a runtime: a thread with a runtime of its own.
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let client = async_nats::connect(url).await?;
                jetstream::new(client).delete_stream(name).await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
        })
        .join();
        if !matches!(deleted, Ok(Ok(()))) {
            eprintln!("could not delete the test stream {}", self.name);
        }
    }
}
