//! Integration tests of the real binaries live in `tests/`.
