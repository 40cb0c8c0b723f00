//! Where models and runtimes come from and where they live: the folders ([`config`]), the pinned
//! assets fetched from the package registry ([`assets`]), the model catalog ([`catalog`]),
//! resumable verified downloads ([`download`], [`pull`]), small answers read within a deadline and
//! a cap ([`body`]), what is installed ([`installed`], [`listing`]) and the user's settings file
//! ([`settings`]).
//!
//! It moves and checks bytes; it does not load a model (the engine does) or run code (the sandbox
//! does).

pub mod assets;
pub mod body;
pub mod catalog;
pub mod config;
pub mod download;
mod files;
pub mod installed;
pub mod listing;
pub mod pull;
pub mod settings;
