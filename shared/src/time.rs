//! Timestamps: RFC 3339 parsing and formatting.
