//! A model hub repository's files at a revision, as the hub's API lists them
//! (`GET {base}/api/models/{repo}/tree/{revision}`), and which of them a conversion needs.
//!
//! Each entry names its file, its size and a digest: large files are stored in Git LFS and listed
//! with the sha256 of their content (`lfs.oid`); small ones are plain git blobs, listed with
//! their git object id (the SHA-1 of `blob {len}\0` followed by the content). Every file Catena
//! fetches is checked against one of the two.

use crate::ImportError;
use catena_hub::body::{Deadline, read_capped};
use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};
use std::time::Duration;

/// One file of a repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoFile {
    pub path: String,
    pub size: u64,
    pub digest: FileDigest,
}

/// What a file's bytes must hash to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "hex", rename_all = "snake_case")]
pub enum FileDigest {
    /// The sha256 of the content (a Git LFS file).
    Sha256(String),
    /// The git blob id: SHA-1 over `blob {len}\0` and the content.
    GitBlob(String),
}

/// The git blob id of `content`, lower-case hex.
pub fn git_blob_id(content: &[u8]) -> String {
    let mut hash = Sha1::new();
    hash.update(format!("blob {}\0", content.len()).as_bytes());
    hash.update(content);
    hex::encode(hash.finalize())
}

/// The files of the listing a conversion reads, config first; the rest of the repository (model
/// cards, PyTorch `.bin` copies, training logs) is not fetched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Needed {
    pub config: RepoFile,
    /// Tokenizer files and the shard index.
    pub small: Vec<RepoFile>,
    /// The safetensors weights.
    pub weights: Vec<RepoFile>,
}

impl Needed {
    /// Every file, config first, weights last.
    pub fn all(&self) -> impl Iterator<Item = &RepoFile> {
        std::iter::once(&self.config)
            .chain(&self.small)
            .chain(&self.weights)
    }

    pub fn weight_bytes(&self) -> u64 {
        self.weights.iter().map(|f| f.size).sum()
    }
}

/// Files read besides the weights when present; `tokenizer.json` and `tokenizer_config.json` are
/// required.
const SMALL_FILES: [&str; 4] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "model.safetensors.index.json",
];

/// Picks what a conversion needs from `files` (the top level of a repository). A repository
/// without weights, config or tokenizer is refused here, before anything is downloaded.
pub fn needed(repo: &str, files: &[RepoFile]) -> Result<Needed, ImportError> {
    let find = |name: &str| files.iter().find(|f| f.path == name).cloned();
    let missing = |name: &str| ImportError::MissingFile {
        repo: repo.to_string(),
        file: name.to_string(),
    };
    let config = find("config.json").ok_or_else(|| missing("config.json"))?;
    for required in ["tokenizer.json", "tokenizer_config.json"] {
        if find(required).is_none() {
            return Err(missing(required));
        }
    }
    let small = SMALL_FILES.iter().filter_map(|n| find(n)).collect();
    let mut weights: Vec<RepoFile> = files
        .iter()
        .filter(|f| {
            f.path.ends_with(".safetensors") && catena_protocol::names::is_file_name(&f.path)
        })
        .cloned()
        .collect();
    weights.sort_by(|a, b| a.path.cmp(&b.path));
    if weights.is_empty() {
        return Err(ImportError::NoWeights {
            repo: repo.to_string(),
        });
    }
    Ok(Needed {
        config,
        small,
        weights,
    })
}

/// One entry of the hub's tree listing.
#[derive(Deserialize)]
struct TreeEntry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    oid: Option<String>,
    #[serde(default)]
    lfs: Option<LfsEntry>,
}

#[derive(Deserialize)]
struct LfsEntry {
    oid: String,
    size: u64,
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Parses one page of the tree listing into files (folders are skipped). An entry without a
/// digest this code can check is an error: nothing unverifiable is fetched.
pub fn parse_tree(json: &[u8]) -> Result<Vec<RepoFile>, String> {
    let entries: Vec<TreeEntry> =
        serde_json::from_slice(json).map_err(|e| format!("not a file listing: {e}"))?;
    let mut files = Vec::new();
    for entry in entries.into_iter().filter(|e| e.kind == "file") {
        let (size, digest) = match (entry.lfs, entry.oid) {
            (Some(lfs), _) if is_hex(&lfs.oid, 64) => {
                (lfs.size, FileDigest::Sha256(lfs.oid.to_ascii_lowercase()))
            }
            (None, Some(oid)) if is_hex(&oid, 40) => {
                (entry.size, FileDigest::GitBlob(oid.to_ascii_lowercase()))
            }
            _ => {
                return Err(format!(
                    "`{}` is listed without a usable digest",
                    entry.path
                ));
            }
        };
        files.push(RepoFile {
            path: entry.path,
            size,
            digest,
        });
    }
    Ok(files)
}

/// The next page of a paginated listing, from a `Link: <url>; rel="next"` header.
fn next_page(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let link = headers.get(reqwest::header::LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

/// A page of a listing may take this long, connection to last byte.
const LISTING_TIME: Duration = Duration::from_secs(30);
/// A page of a listing larger than this is refused: a repository's top level lists a few dozen
/// files, a few KiB of JSON.
const LISTING_MAX_BYTES: u64 = 4 << 20;
/// A listing of more files than this, over all its pages, is refused (each page is capped, but
/// a hub could send a hundred of them).
const MAX_FILES: usize = 10_000;

/// The files at the top level of `repo` at `revision`, from the hub at `base`.
pub async fn list(
    client: &reqwest::Client,
    base: &str,
    repo: &str,
    revision: &str,
) -> Result<Vec<RepoFile>, ImportError> {
    let mut url = format!(
        "{}/api/models/{repo}/tree/{revision}",
        base.trim_end_matches('/')
    );
    let mut files = Vec::new();
    // A repository's top level has a few dozen files; a bound keeps a looping server finite.
    for _ in 0..100 {
        let listing_error = |reason: String| ImportError::Listing {
            repo: repo.to_string(),
            url: url.clone(),
            reason,
        };
        let deadline = Deadline::after(LISTING_TIME);
        let response = deadline
            .run(client.get(&url).send())
            .await
            .map_err(|e| listing_error(format!("the answer was {e}")))?
            .map_err(|e| listing_error(e.to_string()))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(ImportError::NotFound {
                repo: repo.to_string(),
                revision: revision.to_string(),
            });
        }
        if !status.is_success() {
            return Err(listing_error(format!("the hub answered {status}")));
        }
        let next = next_page(response.headers());
        let body = read_capped(response, LISTING_MAX_BYTES, &deadline)
            .await
            .map_err(|e| listing_error(format!("the answer was {e}")))?;
        files.extend(parse_tree(&body).map_err(listing_error)?);
        if files.len() > MAX_FILES {
            return Err(listing_error(format!(
                "it lists more than {MAX_FILES} files"
            )));
        }
        match next {
            Some(next) => url = next,
            None => return Ok(files),
        }
    }
    Err(ImportError::Listing {
        repo: repo.to_string(),
        url,
        reason: "the listing did not end after 100 pages".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    fn file(path: &str, size: u64) -> RepoFile {
        RepoFile {
            path: path.into(),
            size,
            digest: FileDigest::Sha256(SHA.into()),
        }
    }

    #[test]
    fn the_git_blob_id_is_gits() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            git_blob_id(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        // The empty blob.
        assert_eq!(git_blob_id(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    }

    #[test]
    fn lfs_files_carry_their_sha256_and_small_ones_their_blob_id() {
        let json = format!(
            r#"[{{"type":"file","oid":"ce013625030ba8dba906f756967f9e9ca394464a","size":6,"path":"config.json"}},
               {{"type":"directory","oid":"0","size":0,"path":"images"}},
               {{"type":"file","oid":"0123456789012345678901234567890123456789","size":134,"path":"model.safetensors",
                 "lfs":{{"oid":"{}","size":1934567890,"pointerSize":134}}}}]"#,
            SHA.to_uppercase()
        );
        let files = parse_tree(json.as_bytes()).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(
            files[0].digest,
            FileDigest::GitBlob("ce013625030ba8dba906f756967f9e9ca394464a".into())
        );
        assert_eq!(files[1].size, 1934567890);
        assert_eq!(files[1].digest, FileDigest::Sha256(SHA.into()));
        let bad = r#"[{"type":"file","oid":"xyz","size":3,"path":"a.json"}]"#;
        assert!(parse_tree(bad.as_bytes()).unwrap_err().contains("a.json"));
        assert!(parse_tree(b"{}").is_err());
    }

    #[test]
    fn a_conversion_needs_config_tokenizer_and_weights() {
        let mut files = vec![
            file("config.json", 1),
            file("tokenizer.json", 2),
            file("tokenizer_config.json", 3),
            file("model-00002-of-00002.safetensors", 10),
            file("model-00001-of-00002.safetensors", 20),
            file("model.safetensors.index.json", 4),
            file("README.md", 5),
            file("pytorch_model.bin", 6),
            file("sub/model.safetensors", 7),
            file("..\\evil.safetensors", 8),
        ];
        let needed = needed("o/r", &files).unwrap();
        assert_eq!(needed.config.path, "config.json");
        assert_eq!(needed.small.len(), 3);
        let weights: Vec<_> = needed.weights.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            weights,
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"
            ]
        );
        assert_eq!(needed.weight_bytes(), 30);
        assert_eq!(needed.all().count(), 6);

        files.retain(|f| f.path != "tokenizer.json");
        let err = super::needed("o/r", &files).unwrap_err();
        assert!(err.to_string().contains("tokenizer.json"), "{err}");
        let no_weights = vec![
            file("config.json", 1),
            file("tokenizer.json", 2),
            file("tokenizer_config.json", 3),
        ];
        assert!(matches!(
            super::needed("o/r", &no_weights),
            Err(ImportError::NoWeights { .. })
        ));
    }

    #[test]
    fn the_next_page_comes_from_the_link_header() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::LINK,
            "<https://hub.test/api/models/o/r/tree/main?cursor=abc>; rel=\"next\""
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_page(&headers).as_deref(),
            Some("https://hub.test/api/models/o/r/tree/main?cursor=abc")
        );
        headers.insert(
            reqwest::header::LINK,
            "<https://x/prev>; rel=\"prev\"".parse().unwrap(),
        );
        assert_eq!(next_page(&headers), None);
    }
}
