//! One module per subcommand.

pub mod assets;
pub mod bench;
pub mod distill;
pub mod doctor;
pub mod eval;
pub mod index;
pub mod mcp;
pub mod models;
pub mod run;
pub mod samples;
pub mod sandbox;
pub mod serve;
pub mod sessions;
pub mod synth;
pub mod train;
pub mod worker;
