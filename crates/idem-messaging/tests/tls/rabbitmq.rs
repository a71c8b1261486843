//! RabbitMQ over TLS.
