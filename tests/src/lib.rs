//! Cross-crate tests of durlog live in `tests/`; this library is empty on purpose.
