//! Nothing to call: this crate exists for its dependency lists (see its Cargo.toml). The CLI and
//! the desktop app depend on it so that each shared crate is built with the features the whole
//! workspace asks for, and `./catena`, `./catena desktop` and `./scripts/test.sh` reuse what the
//! one before them compiled (docs/ARCHITECTURE.md, "One build for every command").
