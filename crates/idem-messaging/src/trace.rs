//! W3C trace context in a message's headers: kept by an enqueue, continued and rewritten by the
//! relay, continued by the inbox.
//!
//! With the `opentelemetry` feature, the headers are read and written through the application's
//! global propagator (`opentelemetry::global::set_text_map_propagator`; the W3C one writes
//! `traceparent` and `tracestate`), and a span's context is its `tracing-opentelemetry` one.
//! Without the feature, or while no propagator is set, or for a span that records nothing, no
//! header is read or written: the spans stay plain `tracing` spans.

pub(crate) use imp::{continue_from, forward, keep_current};

#[cfg(feature = "opentelemetry")]
mod imp {
    use std::marker::PhantomData;

    use opentelemetry::{
        Context,
        global::get_text_map_propagator,
        propagation::{Extractor, Injector},
        trace::TraceContextExt as _,
    };
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    /// Adds the current span's trace context to `headers`, unless they carry one already (a
    /// `traceparent`, for the W3C propagator): the producer's own context wins.
    pub(crate) fn keep_current(headers: &mut Vec<(String, String)>) {
        let span = Span::current();
        if span.is_disabled() {
            return;
        }
        let carried = get_text_map_propagator(|propagator| {
            propagator
                .fields()
                .any(|field| Pairs(headers).get(field).is_some())
        });
        if !carried {
            headers.extend(written(&span.context()));
        }
    }

    /// Makes `span` a child of the trace context `headers` carry (when valid), then puts `span`'s
    /// own context in `headers` in place of the propagator's fields: what a hop that passes a
    /// message on does.
    pub(crate) fn forward(span: &Span, headers: &mut Vec<(String, String)>) {
        if span.is_disabled() {
            return;
        }
        set_parent(span, &Pairs(headers));
        let context = written(&span.context());
        if context.is_empty() {
            return;
        }
        get_text_map_propagator(|propagator| {
            headers.retain(|(name, _)| {
                !propagator
                    .fields()
                    .any(|field| field.eq_ignore_ascii_case(name))
            });
        });
        headers.extend(context);
    }

    /// Makes `span` a child of the trace context in the headers that `header` reads by name (a
    /// received message's), when valid.
    pub(crate) fn continue_from<'a>(span: &Span, header: impl Fn(&str) -> Option<&'a str>) {
        if !span.is_disabled() {
            set_parent(span, &Lookup(header, PhantomData));
        }
    }

    fn set_parent(span: &Span, carrier: &dyn Extractor) {
        // From an empty context, so that a missing or invalid header gives no parent at all.
        let parent = get_text_map_propagator(|propagator| {
            propagator.extract_with_context(&Context::new(), carrier)
        });
        if parent.span().span_context().is_valid() {
            // Fails only for a span that has started, and these have not.
            let _ = span.set_parent(parent);
        }
    }

    /// The headers the propagator writes for `context`, empty values left out (a `tracestate`
    /// with nothing in it); none for a context without a valid span.
    fn written(context: &Context) -> Vec<(String, String)> {
        let mut fields = Fields(Vec::new());
        get_text_map_propagator(|propagator| propagator.inject_context(context, &mut fields));
        fields.0
    }

    /// A message's headers, read as W3C trace context is: names in any case, the last one of a
    /// name.
    struct Pairs<'a>(&'a [(String, String)]);

    impl Extractor for Pairs<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0
                .iter()
                .rev()
                .find(|(name, _)| name.eq_ignore_ascii_case(key))
                .map(|(_, value)| value.as_str())
        }

        fn keys(&self) -> Vec<&str> {
            self.0.iter().map(|(name, _)| name.as_str()).collect()
        }
    }

    /// Headers read one name at a time.
    struct Lookup<'a, F>(F, PhantomData<&'a str>);

    impl<'a, F: Fn(&str) -> Option<&'a str>> Extractor for Lookup<'a, F> {
        fn get(&self, key: &str) -> Option<&str> {
            (self.0)(key)
        }

        // No propagator of trace context needs the names.
        fn keys(&self) -> Vec<&str> {
            Vec::new()
        }
    }

    /// The fields a propagator writes, in the order it writes them.
    struct Fields(Vec<(String, String)>);

    impl Injector for Fields {
        fn set(&mut self, key: &str, value: String) {
            if !value.is_empty() {
                self.0.push((key.to_owned(), value));
            }
        }
    }
}

/// Without the `opentelemetry` feature: no header is read or written.
#[cfg(not(feature = "opentelemetry"))]
mod imp {
    use tracing::Span;

    pub(crate) fn keep_current(_: &mut Vec<(String, String)>) {}

    pub(crate) fn forward(_: &Span, _: &mut Vec<(String, String)>) {}

    pub(crate) fn continue_from<'a>(_: &Span, _: impl Fn(&str) -> Option<&'a str>) {}
}
