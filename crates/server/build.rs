//! Embeds the built web UI (`ui/dist`, made by `npm --prefix ui run build`) into the server when it
//! exists. Without it the server still runs and says at `/` how to build the UI.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(catena_ui)");
    let dist = Path::new("../../ui/dist");
    if dist.join("index.html").is_file() {
        println!("cargo::rustc-cfg=catena_ui");
        println!("cargo::rerun-if-changed=../../ui/dist");
    } else {
        // Noticed when `ui/dist` appears (the whole folder is watched, as a missing path would
        // rerun this script on every build).
        println!("cargo::rerun-if-changed=../../ui");
    }
}
