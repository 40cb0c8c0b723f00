//! The one rule for names that become file or folder names. Every crate that turns a name given
//! by a user, a request, a catalog, a URL or a downloaded file into a path checks it here, so a
//! name that is safe in one place is safe in all of them.
//!
//! There are two kinds, and the difference is deliberate:
//!
//! - A **plain name** is one Catena's user chooses for something Catena creates: a model id, an
//!   index, an imported model or adapter, a training run's data or output. It is held to the
//!   narrow alphabet below, so it means the same on every file system and in every shell.
//! - A **foreign file name** is one someone else chose for a file Catena fetches or reads: a
//!   catalog entry's file, the last segment of a download URL, a shard named in a checkpoint's
//!   index, a weight file in a remote repository's listing. Those keep their spelling (a URL's
//!   `%20`, a `+`), so only what makes a name more than one path component is refused. A listing
//!   path with a `/` names a file in a subfolder: it is not a foreign file name and is not taken.

/// The longest plain name, in bytes: room for the suffixes Catena appends (`-Q4_K_M.gguf`,
/// `.part.json`) inside the 255 bytes file systems allow.
pub const MAX_PLAIN_NAME: usize = 128;

/// The longest foreign file name, in bytes, for the same reason as [`MAX_PLAIN_NAME`]; longer
/// because published file names carry model, size and quantisation.
pub const MAX_FILE_NAME: usize = 200;

/// Whether `c` may appear in a plain name: an ASCII letter or digit, `-`, `_` or `.`.
pub fn is_plain_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// Whether `name` is a plain name: 1 to [`MAX_PLAIN_NAME`] plain characters, not starting with a
/// dot (so never hidden, never `.` or `..`), hence never a path.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PLAIN_NAME
        && !name.starts_with('.')
        && name.chars().all(is_plain_char)
}

/// A plain name made from `text` (a folder's or a file's name): every other character becomes
/// `-`, leading dots are dropped and the result is cut to [`MAX_PLAIN_NAME`]. `None` when nothing
/// is left, so the caller picks its own fallback.
pub fn plain_name_from(text: &str) -> Option<String> {
    let replaced: String = text
        .chars()
        .map(|c| if is_plain_char(c) { c } else { '-' })
        .collect();
    // Only ASCII is left, so characters and bytes count alike.
    let name: String = replaced
        .trim_start_matches('.')
        .chars()
        .take(MAX_PLAIN_NAME)
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Whether `name` is a foreign file name Catena may create or open inside one folder: not empty,
/// at most [`MAX_FILE_NAME`] bytes, not hidden (so not `.` or `..`), and without `/`, `\` or NUL,
/// so it is exactly one path component on every platform.
pub fn is_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_FILE_NAME
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
}

/// The layer number in a tensor's name (`model.layers.N.` in a checkpoint, `blk.N.` in a GGUF
/// file), spelled as PyTorch and llama.cpp write it: decimal digits, no sign, no leading zero.
/// Any other spelling (`00`, `+0`) is refused, so a layer has one name and two tensors of a file
/// cannot both be read as the same one.
pub fn layer_number(text: &str) -> Option<usize> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_number_has_one_spelling() {
        assert_eq!(layer_number("0"), Some(0));
        assert_eq!(layer_number("27"), Some(27));
        for other in [
            "",
            "00",
            "07",
            "+1",
            "-0",
            " 1",
            "1 ",
            "1_0",
            "٣",
            "99999999999999999999999",
        ] {
            assert_eq!(layer_number(other), None, "{other:?}");
        }
    }

    /// Names no rule may accept: each could leave its folder, hide itself or not be a name.
    const HOSTILE: [&str; 10] = [
        "", ".", "..", "../x", "a/b", "a\\b", "a\0b", ".hidden", "/abs", "C:\\x",
    ];

    #[test]
    fn plain_names_are_narrow() {
        for ok in ["qwen2.5-0.5b", "my_index", "A1", "x.y.z", "-", "v1..2"] {
            assert!(is_plain_name(ok), "{ok:?} should be plain");
        }
        for bad in HOSTILE {
            assert!(!is_plain_name(bad), "{bad:?} is not plain");
        }
        for bad in ["a b", "é", "名前", "a:b", "a%20b", "a+b", "a\nb"] {
            assert!(!is_plain_name(bad), "{bad:?} is not plain");
        }
    }

    #[test]
    fn plain_names_have_a_length_limit() {
        assert!(is_plain_name(&"a".repeat(MAX_PLAIN_NAME)));
        assert!(!is_plain_name(&"a".repeat(MAX_PLAIN_NAME + 1)));
    }

    #[test]
    fn foreign_file_names_keep_their_spelling_but_stay_one_component() {
        for ok in [
            "model%20v2.gguf",
            "a+b.gguf",
            "é.safetensors",
            "a b.gguf",
            "x..y",
        ] {
            assert!(is_file_name(ok), "{ok:?} is one file name");
        }
        for bad in HOSTILE {
            assert!(!is_file_name(bad), "{bad:?} is not one file name");
        }
        assert!(is_file_name(&"a".repeat(MAX_FILE_NAME)));
        assert!(!is_file_name(&"a".repeat(MAX_FILE_NAME + 1)));
        // Bytes count, not characters: 101 two-byte characters are over the limit.
        assert!(!is_file_name(&"é".repeat(MAX_FILE_NAME / 2 + 1)));
    }

    #[test]
    fn a_plain_name_is_made_from_any_text() {
        assert_eq!(
            plain_name_from("Qwen2.5 0.5B (mine)").as_deref(),
            Some("Qwen2.5-0.5B--mine-")
        );
        assert_eq!(plain_name_from("..hidden").as_deref(), Some("hidden"));
        assert_eq!(plain_name_from("a/b\\c\0d").as_deref(), Some("a-b-c-d"));
        assert_eq!(plain_name_from("名前").as_deref(), Some("--"));
        assert_eq!(plain_name_from(""), None);
        assert_eq!(plain_name_from("..."), None);
        let long = plain_name_from(&"é".repeat(500)).unwrap_or_default();
        assert_eq!(long.len(), MAX_PLAIN_NAME);
        for text in ["a/../b", ".x y", "é", &"z".repeat(300)] {
            let made = plain_name_from(text).unwrap_or_default();
            assert!(is_plain_name(&made), "{text:?} made {made:?}");
        }
    }
}
