//! The user's list of MCP servers: a Cursor-style `mcp.json`, so a file written for another MCP
//! host works here unchanged:
//!
//! ```json
//! {"mcpServers": {"filesystem": {"command": "npx", "args": ["-y", "PACKAGE", "/home/me/notes"]}}}
//! ```
//!
//! Only stdio servers (a `command`) are started; an entry with a `url` is refused by name, not
//! skipped, so the user learns why its tools are missing.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The largest `mcp.json` read: a list of servers is a few hundred bytes.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// At most this many servers are started for one run.
pub const MAX_SERVERS: usize = 16;

/// One server to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerEntry {
    /// The key in `mcpServers`; it names the server in prompts, errors and the timeline.
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    /// Set on top of Catena's own environment.
    pub env: BTreeMap<String, String>,
}

/// Why the list cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the MCP server list {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the MCP server list {path} is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("the MCP server list {path} is not a valid mcp.json: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("the MCP server list {path}: {problem}")]
    Invalid { path: PathBuf, problem: String },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    mcp_servers: BTreeMap<String, RawEntry>,
}

#[derive(Deserialize)]
struct RawEntry {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
}

/// Reads and checks `path`.
pub fn load(path: &Path) -> Result<Vec<ServerEntry>, ConfigError> {
    let read = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(read)?.len();
    if size > MAX_FILE_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(read)?;
    parse(&text).map_err(|(syntax, message)| match syntax {
        true => ConfigError::Syntax {
            path: path.to_path_buf(),
            message,
        },
        false => ConfigError::Invalid {
            path: path.to_path_buf(),
            problem: message,
        },
    })
}

/// The entries of an `mcp.json` text; on error, whether it was the JSON itself and what is wrong.
fn parse(text: &str) -> Result<Vec<ServerEntry>, (bool, String)> {
    let file: File = serde_json::from_str(text).map_err(|e| (true, e.to_string()))?;
    if file.mcp_servers.len() > MAX_SERVERS {
        return Err((
            false,
            format!(
                "{} servers are listed; at most {MAX_SERVERS} are started",
                file.mcp_servers.len()
            ),
        ));
    }
    file.mcp_servers
        .into_iter()
        .map(|(name, raw)| entry(name, raw).map_err(|problem| (false, problem)))
        .collect()
}

fn entry(name: String, raw: RawEntry) -> Result<ServerEntry, String> {
    if !valid_name(&name) {
        return Err(format!(
            "the server name {name:?} must be 1 to 64 letters, digits, `-` or `_`"
        ));
    }
    let command = match (raw.command, raw.url) {
        (Some(command), _) if !command.trim().is_empty() => command,
        (_, Some(_)) => {
            return Err(format!(
                "server `{name}` is reached by URL; only servers started with a `command` \
                 (stdio) are supported here"
            ));
        }
        _ => return Err(format!("server `{name}` has no `command`")),
    };
    Ok(ServerEntry {
        name,
        command,
        args: raw.args,
        env: raw.env,
    })
}

/// Names the model and the prompt see: plain, short, no room for markup.
pub(crate) fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_style_file_is_read() {
        let servers = parse(
            r#"{"mcpServers": {
                "filesystem": {"command": "npx", "args": ["-y", "pkg", "/tmp/x"]},
                "git": {"command": "uvx", "env": {"GIT_DIR": "/repo"}, "disabled": false}
            }}"#,
        )
        .unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].name, "filesystem");
        assert_eq!(servers[0].args, ["-y", "pkg", "/tmp/x"]);
        assert_eq!(servers[1].env["GIT_DIR"], "/repo");
    }

    #[test]
    fn what_cannot_be_started_is_said() {
        let url = parse(r#"{"mcpServers": {"remote": {"url": "http://127.0.0.1:9/mcp"}}}"#);
        assert!(
            url.unwrap_err()
                .1
                .contains("only servers started with a `command`")
        );
        let empty = parse(r#"{"mcpServers": {"x": {"command": " "}}}"#);
        assert!(empty.unwrap_err().1.contains("has no `command`"));
        let name = parse(r#"{"mcpServers": {"a b<": {"command": "x"}}}"#);
        assert!(name.unwrap_err().1.contains("server name"));
        let (syntax, _) = parse("{").unwrap_err();
        assert!(syntax);
        let (syntax, _) = parse(r#"{"servers": {}}"#).unwrap_err();
        assert!(syntax, "a file without mcpServers is not an mcp.json");
        let many: Vec<String> = (0..=MAX_SERVERS)
            .map(|i| format!(r#""s{i}": {{"command": "x"}}"#))
            .collect();
        let many = parse(&format!(r#"{{"mcpServers": {{{}}}}}"#, many.join(",")));
        assert!(many.unwrap_err().1.contains("at most"));
    }

    #[test]
    fn a_huge_or_missing_file_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mcp.json");
        assert!(matches!(load(&path), Err(ConfigError::Read { .. })));
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(MAX_FILE_BYTES + 1).unwrap();
        assert!(matches!(load(&path), Err(ConfigError::TooLarge { .. })));
    }
}
