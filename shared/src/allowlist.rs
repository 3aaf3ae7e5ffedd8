//! TODO(session): filled in by the module owner.
