//! One module per subcommand.

pub mod assets;
pub mod bench;
pub mod run;
pub mod sandbox;
pub mod serve;
pub mod sessions;
pub mod worker;
