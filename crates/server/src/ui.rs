//! The web UI at `/`: the files of `ui/dist`, embedded at build time (see build.rs). Paths that
//! are not files get `index.html`, so the UI's own routes survive a reload.

#[cfg(catena_ui)]
use axum::http::header;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};

#[cfg(catena_ui)]
static DIST: include_dir::Dir<'static> =
    include_dir::include_dir!("$CARGO_MANIFEST_DIR/../../ui/dist");

/// Serves one file of the UI.
pub async fn serve(uri: Uri) -> Response {
    #[cfg(catena_ui)]
    {
        let path = uri.path().trim_start_matches('/');
        let file = DIST.get_file(path).or_else(|| DIST.get_file("index.html"));
        match file {
            Some(file) => {
                let name = file.path().to_string_lossy();
                // Hashed asset names never change content; index.html must be re-read.
                let cache = if name.starts_with("assets/") {
                    "public, max-age=31536000, immutable"
                } else {
                    "no-cache"
                };
                (
                    [
                        (header::CONTENT_TYPE, content_type(&name)),
                        (header::CACHE_CONTROL, cache),
                    ],
                    file.contents(),
                )
                    .into_response()
            }
            None => (StatusCode::NOT_FOUND, "not found").into_response(),
        }
    }
    #[cfg(not(catena_ui))]
    {
        let _ = uri;
        (
            StatusCode::OK,
            axum::response::Html(
                "<!doctype html><title>Catena</title><h1>Catena is running</h1>\
                 <p>This build has no web UI inside. Build it with \
                 <code>npm --prefix ui ci &amp;&amp; npm --prefix ui run build</code>, then build \
                 catena again. The API is at <code>/v1</code>.</p>",
            ),
        )
            .into_response()
    }
}

/// The media type of a UI file, by extension (the few kinds a Vite build emits; not worth a crate).
#[cfg_attr(not(catena_ui), allow(dead_code))]
fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or_default() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" | "map" => "application/json",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn vite_outputs_get_their_types() {
        assert_eq!(
            super::content_type("assets/index-1a2b.js"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(
            super::content_type("index.html"),
            "text/html; charset=utf-8"
        );
        assert_eq!(super::content_type("x.unknown"), "application/octet-stream");
    }
}
