//! The model catalog: which GGUF files Catena knows, where they come from and what they should be.
//!
//! The catalog ships inside the binary (`models/catalog.toml` at the repository root) so that
//! `catena models list` works offline; a user catalog (`<data>/catalog.toml`, same format) can add
//! entries, for instance a private mirror's fine-tunes. Entries are validated when loaded: a bad
//! digest or an unknown quantisation is an error naming the entry, never a surprise mid-download.

use crate::config::Paths;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The catalog shipped with Catena.
pub(crate) const SHIPPED: &str = include_str!("../../../models/catalog.toml");

/// Overrides the hub base URL of every `hub` source (a mirror serving the same paths).
pub(crate) const BASE_URL_ENV: &str = "CATENA_MODEL_BASE_URL";

/// The user's own catalog file, merged after the shipped one.
pub(crate) fn user_catalog_path(paths: &Paths) -> PathBuf {
    paths.data_dir.join("catalog.toml")
}

/// GGUF quantisations the catalog may name, with llama.cpp's bits per weight for Qwen2.5-sized
/// models (used to compute approximate sizes).
pub(crate) const QUANTS: &[(&str, f64)] = &[
    ("Q4_K_M", 4.85),
    ("Q5_K_M", 5.69),
    ("Q8_0", 8.5),
    ("Q4_0", 4.55),
    ("Q4_K_S", 4.58),
    ("Q5_K_S", 5.54),
    ("Q6_K", 6.56),
    ("F16", 16.0),
    ("BF16", 16.0),
];

/// Bits per weight of a known quantisation (case-insensitive name).
pub fn bits_per_weight(quant: &str) -> Option<f64> {
    QUANTS
        .iter()
        .find(|(q, _)| q.eq_ignore_ascii_case(quant))
        .map(|&(_, b)| b)
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("the model catalog {origin} is not valid TOML: {message}")]
    Parse { origin: String, message: String },
    #[error("the model catalog {origin}: entry `{id}`: {problem}")]
    Invalid {
        origin: String,
        id: String,
        problem: String,
    },
    #[error("cannot read the model catalog {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no model `{0}` in the catalog (see `catena models list`)")]
    Unknown(String),
    #[error("model `{id}` has no {quant} file; it has: {available}")]
    NoSuchQuant {
        id: String,
        quant: String,
        available: String,
    },
}

/// Where a model's files come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Source {
    /// A model hub repository: `{base_url}/{repo}/resolve/{revision}/{file}`.
    Hub {
        repo: String,
        #[serde(default = "main_revision")]
        revision: String,
    },
    /// A plain HTTPS folder: `{url}/{file}` (user catalogs, own servers).
    Url { url: String },
    /// Registry packages fetched by `catena assets` (the id of an asset in [`crate::assets`]).
    Registry { asset: String },
    /// A Hugging Face checkpoint (safetensors), not GGUF: `pull` fetches the repository at the
    /// revision and converts it into the entry's files (named `ID-QUANT.gguf`), as
    /// `catena models import FOLDER --name ID` does with a downloaded copy.
    Checkpoint {
        repo: String,
        #[serde(default = "main_revision")]
        revision: String,
    },
}

fn main_revision() -> String {
    "main".to_string()
}

/// One GGUF file of a model, in one quantisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogFile {
    pub quant: String,
    /// File name at the source and once installed.
    pub file: String,
    /// The exact size, where someone has seen the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Computed from the parameter count and the quantisation, where the exact size is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approx_size_bytes: Option<u64>,
    /// Lower-case hex sha256, where someone has seen the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl CatalogFile {
    /// The best size known: exact, else approximate.
    pub fn size(&self) -> Option<u64> {
        self.size_bytes.or(self.approx_size_bytes)
    }
}

/// A model of the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogEntry {
    pub id: String,
    pub name: String,
    pub description: String,
    /// The prompt profile the model was trained for (`catena run --profile`).
    pub profile: String,
    pub parameters: u64,
    /// Context length in tokens the model was trained with.
    pub context: u32,
    pub license: String,
    /// The original checkpoint these files were converted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backbone: Option<String>,
    /// Caveats worth showing the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub source: Source,
    pub files: Vec<CatalogFile>,
}

impl CatalogEntry {
    /// The file of `quant` (case-insensitive); with `None`, the first listed (the recommended one).
    pub fn file(&self, quant: Option<&str>) -> Result<&CatalogFile, CatalogError> {
        match quant {
            None => self.files.first(),
            Some(q) => self.files.iter().find(|f| f.quant.eq_ignore_ascii_case(q)),
        }
        .ok_or_else(|| CatalogError::NoSuchQuant {
            id: self.id.clone(),
            quant: quant.unwrap_or("any").to_string(),
            available: self
                .files
                .iter()
                .map(|f| f.quant.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The URL of `file` with hub sources rooted at `base_url`; `None` for registry and
    /// checkpoint sources.
    pub fn url(&self, file: &CatalogFile, base_url: &str) -> Option<String> {
        let base = base_url.trim_end_matches('/');
        match &self.source {
            Source::Hub { repo, revision } => {
                Some(format!("{base}/{repo}/resolve/{revision}/{}", file.file))
            }
            Source::Url { url } => Some(format!("{}/{}", url.trim_end_matches('/'), file.file)),
            Source::Registry { .. } | Source::Checkpoint { .. } => None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogToml {
    version: u32,
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default)]
    model: Vec<CatalogEntry>,
}

/// The merged catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    /// The default hub base URL (the shipped catalog's).
    pub base_url: String,
    pub entries: Vec<CatalogEntry>,
}

impl Catalog {
    /// The shipped catalog alone.
    pub fn shipped() -> Result<Catalog, CatalogError> {
        let toml = parse(SHIPPED, "shipped with Catena")?;
        let mut catalog = Catalog {
            base_url: toml
                .base_url
                .unwrap_or_else(|| "https://huggingface.co".into()),
            entries: Vec::new(),
        };
        catalog.add(toml.model, "shipped with Catena")?;
        Ok(catalog)
    }

    /// The shipped catalog plus the user's (`<data>/catalog.toml`), if there is one.
    pub fn load(paths: &Paths) -> Result<Catalog, CatalogError> {
        let mut catalog = Catalog::shipped()?;
        let path = user_catalog_path(paths);
        match std::fs::read_to_string(&path) {
            Ok(text) => catalog.add_file(&text, &path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(CatalogError::Io { path, source }),
        }
        Ok(catalog)
    }

    fn add_file(&mut self, text: &str, path: &Path) -> Result<(), CatalogError> {
        let origin = path.display().to_string();
        let toml = parse(text, &origin)?;
        self.add(toml.model, &origin)
    }

    fn add(&mut self, entries: Vec<CatalogEntry>, origin: &str) -> Result<(), CatalogError> {
        for entry in entries {
            validate(&entry, origin)?;
            if self.get(&entry.id).is_some() {
                return Err(invalid(origin, &entry.id, "the id is used twice"));
            }
            self.entries.push(entry);
        }
        Ok(())
    }

    /// The entry with this id (case-insensitive).
    pub fn get(&self, id: &str) -> Option<&CatalogEntry> {
        self.entries.iter().find(|e| e.id.eq_ignore_ascii_case(id))
    }

    /// Like [`Catalog::get`], as an error naming the id.
    pub fn entry(&self, id: &str) -> Result<&CatalogEntry, CatalogError> {
        self.get(id)
            .ok_or_else(|| CatalogError::Unknown(id.to_string()))
    }

    /// The largest AFM for `profile` whose recommended file fits in `memory` bytes with room for
    /// a working context (the file plus 2 GiB for KV cache and buffers), and has at most
    /// `max_parameters` (a 32B model fits in the RAM of many desktops but generates a token or two
    /// a second on their CPU). AFMs are the entries whose upstream checkpoint is PersonalAILab's.
    pub fn agent_that_fits(
        &self,
        profile: &str,
        memory: u64,
        max_parameters: u64,
    ) -> Option<(&CatalogEntry, &CatalogFile)> {
        const WORKING_ROOM: u64 = 2 << 30;
        self.entries
            .iter()
            .filter(|e| e.profile == profile && e.parameters <= max_parameters)
            .filter(|e| {
                e.upstream
                    .as_deref()
                    .is_some_and(|u| u.starts_with("PersonalAILab/"))
            })
            .filter_map(|e| Some((e, e.files.first()?)))
            .filter(|(_, f)| {
                f.size()
                    .is_some_and(|size| size.saturating_add(WORKING_ROOM) <= memory)
            })
            .max_by_key(|(e, _)| e.parameters)
    }
}

/// The hub base URL to use: the explicit one (a `--base-url` flag), else `CATENA_MODEL_BASE_URL`,
/// else the `mirror` setting, else the catalog's.
pub fn effective_base_url(
    explicit: Option<&str>,
    mirror: Option<&str>,
    catalog: &Catalog,
) -> String {
    let env = std::env::var(BASE_URL_ENV).ok().filter(|v| !v.is_empty());
    explicit
        .map(str::to_string)
        .or(env)
        .or(mirror.map(str::to_string))
        .unwrap_or_else(|| catalog.base_url.clone())
}

fn parse(text: &str, origin: &str) -> Result<CatalogToml, CatalogError> {
    let toml: CatalogToml = toml::from_str(text).map_err(|e| CatalogError::Parse {
        origin: origin.to_string(),
        message: e.to_string(),
    })?;
    if toml.version != 1 {
        return Err(CatalogError::Parse {
            origin: origin.to_string(),
            message: format!(
                "version {} is not supported (this Catena reads 1)",
                toml.version
            ),
        });
    }
    Ok(toml)
}

fn invalid(origin: &str, id: &str, problem: impl Into<String>) -> CatalogError {
    CatalogError::Invalid {
        origin: origin.to_string(),
        id: id.to_string(),
        problem: problem.into(),
    }
}

/// Whether `s` is 64 lower- or upper-case hex digits (a sha256).
pub(crate) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn validate(entry: &CatalogEntry, origin: &str) -> Result<(), CatalogError> {
    let id = &entry.id;
    let ok_id = catena_protocol::names::is_plain_name(id);
    if !ok_id {
        return Err(invalid(
            origin,
            id,
            "ids use letters, digits, '-', '_' and '.' only",
        ));
    }
    if entry.files.is_empty() {
        return Err(invalid(origin, id, "it lists no files"));
    }
    for file in &entry.files {
        if bits_per_weight(&file.quant).is_none() {
            let known: Vec<&str> = QUANTS.iter().map(|(q, _)| *q).collect();
            return Err(invalid(
                origin,
                id,
                format!(
                    "unknown quantisation {} (known: {})",
                    file.quant,
                    known.join(", ")
                ),
            ));
        }
        if !catena_protocol::names::is_file_name(&file.file) {
            return Err(invalid(
                origin,
                id,
                format!("{:?} is not a plain file name", file.file),
            ));
        }
        if let Some(sha) = &file.sha256
            && !is_sha256_hex(sha)
        {
            return Err(invalid(
                origin,
                id,
                format!("sha256 of {} must be 64 hex digits", file.file),
            ));
        }
        let dupes = entry
            .files
            .iter()
            .filter(|f| f.quant.eq_ignore_ascii_case(&file.quant))
            .count();
        if dupes > 1 {
            return Err(invalid(
                origin,
                id,
                format!("{} is listed twice", file.quant),
            ));
        }
    }
    match &entry.source {
        Source::Hub { repo, .. } | Source::Checkpoint { repo, .. }
            if repo.split('/').count() != 2 =>
        {
            Err(invalid(origin, id, "a hub repo is written owner/name"))
        }
        Source::Checkpoint { .. } => {
            // The files are what `catena models import --name ID --quant QUANT` installs.
            match entry
                .files
                .iter()
                .find(|f| f.file != format!("{id}-{}.gguf", f.quant))
            {
                Some(f) => Err(invalid(
                    origin,
                    id,
                    format!(
                        "a checkpoint's {} file must be named {id}-{}.gguf (what an import installs)",
                        f.quant, f.quant
                    ),
                )),
                None => Ok(()),
            }
        }
        Source::Url { url } if !(url.starts_with("https://") || url.starts_with("http://")) => {
            Err(invalid(origin, id, "a url source must be http(s)"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assets;

    #[test]
    fn the_shipped_catalog_parses_and_validates() {
        let catalog = Catalog::shipped().unwrap();
        // The twelve published AFM checkpoints, as the checkpoints they are.
        let mut afms = 0;
        for kind in [
            "code-7b", "code-32b", "web-7b", "web-32b", "mhqa-3b", "mhqa-7b",
        ] {
            for stage in ["sft", "rl"] {
                let id = format!("afm-{kind}-{stage}");
                let entry = catalog.entry(&id).unwrap();
                let quants: Vec<&str> = entry.files.iter().map(|f| f.quant.as_str()).collect();
                assert_eq!(quants, ["Q4_K_M", "Q5_K_M", "Q8_0"], "{id}");
                let Source::Checkpoint { repo, .. } = &entry.source else {
                    panic!("{id} is not a checkpoint source")
                };
                assert_eq!(Some(repo), entry.upstream.as_ref(), "{id}");
                assert!(repo.starts_with("PersonalAILab/AFM-"), "{id}");
                assert!(repo.ends_with(&format!("-{stage}")), "{id}");
                afms += 1;
            }
        }
        assert_eq!(afms, 12);
        let mhqa = catalog.entry("afm-mhqa-3b-sft").unwrap();
        assert_eq!(mhqa.license, "Qwen Research License");
        assert!(catalog.base_url.starts_with("https://"));
    }

    #[test]
    fn the_agent_that_fits_grows_with_memory() {
        let catalog = Catalog::shipped().unwrap();
        let any = u64::MAX;
        assert!(catalog.agent_that_fits("code", 4 << 30, any).is_none());
        let (small, _) = catalog.agent_that_fits("code", 16 << 30, any).unwrap();
        assert_eq!(small.id, "afm-code-7b-rl");
        let (large, _) = catalog.agent_that_fits("code", 64 << 30, any).unwrap();
        assert_eq!(large.id, "afm-code-32b-rl");
        let (capped, _) = catalog
            .agent_that_fits("code", 64 << 30, 8_000_000_000)
            .unwrap();
        assert_eq!(capped.id, "afm-code-7b-rl");
    }

    #[test]
    fn approximate_sizes_follow_the_stated_formula() {
        // The catalog says approx_size_bytes = parameters x bits per weight / 8; keep it true.
        let catalog = Catalog::shipped().unwrap();
        for entry in &catalog.entries {
            for file in &entry.files {
                let Some(approx) = file.approx_size_bytes else {
                    continue;
                };
                let bpw = bits_per_weight(&file.quant).unwrap();
                let expected = entry.parameters as f64 * bpw / 8.0;
                let ratio = approx as f64 / expected;
                assert!(
                    (0.999..1.001).contains(&ratio),
                    "{} {}",
                    entry.id,
                    file.quant
                );
            }
        }
    }

    #[test]
    fn registry_entries_match_the_pinned_assets() {
        let catalog = Catalog::shipped().unwrap();
        let mut seen = 0;
        for entry in &catalog.entries {
            let Source::Registry { asset } = &entry.source else {
                continue;
            };
            let pinned = [&assets::DEFAULT_MODEL, &assets::GEMMA_TEST_MODEL]
                .into_iter()
                .find(|a| a.id == asset)
                .unwrap_or_else(|| panic!("{} names unknown asset {asset}", entry.id));
            let file = &entry.files[0];
            assert_eq!(file.file, pinned.files[0].name);
            assert_eq!(file.sha256.as_deref(), Some(pinned.files[0].sha256));
            assert_eq!(file.size_bytes, Some(pinned.files[0].size));
            seen += 1;
        }
        assert_eq!(seen, 2);
    }

    #[test]
    fn hub_urls_use_the_base_url() {
        let mut catalog = Catalog::shipped().unwrap();
        let hub = "version = 1\n[[model]]\nid = \"mine-gguf\"\nname = \"M\"\ndescription = \"d\"\n\
                   profile = \"code\"\nparameters = 1\ncontext = 4096\nlicense = \"MIT\"\n\
                   source = { kind = \"hub\", repo = \"me/Mine-GGUF\" }\n\
                   [[model.files]]\nquant = \"Q8_0\"\nfile = \"mine-Q8_0.gguf\"\n";
        catalog.add_file(hub, Path::new("u.toml")).unwrap();
        let entry = catalog.entry("MINE-GGUF").unwrap();
        let file = entry.file(Some("q8_0")).unwrap();
        assert_eq!(
            entry.url(file, "http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080/me/Mine-GGUF/resolve/main/mine-Q8_0.gguf"
        );
        let err = entry.file(Some("Q2_K")).unwrap_err().to_string();
        assert!(err.contains("Q8_0"), "{err}");
        // A checkpoint has no file to download.
        let afm = catalog.entry("afm-code-7b-rl").unwrap();
        assert_eq!(afm.url(afm.file(None).unwrap(), "http://x"), None);
    }

    fn entry_toml(extra: &str) -> String {
        format!(
            "version = 1\n[[model]]\nid = \"mine\"\nname = \"Mine\"\ndescription = \"d\"\n\
             profile = \"code\"\nparameters = 1\ncontext = 4096\nlicense = \"MIT\"\n\
             source = {{ kind = \"url\", url = \"https://example.org/m\" }}\n{extra}"
        )
    }

    #[test]
    fn bad_entries_are_named() {
        let mut catalog = Catalog::shipped().unwrap();
        let bad_sha = entry_toml(
            "[[model.files]]\nquant = \"Q4_K_M\"\nfile = \"m.gguf\"\nsha256 = \"abc\"\n",
        );
        let err = catalog.add_file(&bad_sha, Path::new("u.toml")).unwrap_err();
        assert!(err.to_string().contains("64 hex"), "{err}");
        let bad_quant = entry_toml("[[model.files]]\nquant = \"Q9_Z\"\nfile = \"m.gguf\"\n");
        let err = catalog
            .add_file(&bad_quant, Path::new("u.toml"))
            .unwrap_err();
        assert!(err.to_string().contains("unknown quantisation"), "{err}");
        let bad_name = entry_toml("[[model.files]]\nquant = \"Q8_0\"\nfile = \"../m.gguf\"\n");
        assert!(catalog.add_file(&bad_name, Path::new("u.toml")).is_err());
        let good = entry_toml("[[model.files]]\nquant = \"Q8_0\"\nfile = \"m.gguf\"\n");
        catalog.add_file(&good, Path::new("u.toml")).unwrap();
        let err = catalog.add_file(&good, Path::new("u.toml")).unwrap_err();
        assert!(err.to_string().contains("used twice"), "{err}");
        let entry = catalog.entry("mine").unwrap();
        assert_eq!(
            entry.url(&entry.files[0], "ignored").unwrap(),
            "https://example.org/m/m.gguf"
        );
    }
}
