//! Decoders from source bytes to [`crate::flow::FlowRecord`].
