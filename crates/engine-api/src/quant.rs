//! The quantisations Catena makes, by llama.cpp's names; `catena-engine` maps them to llama.cpp's
//! file types.

use serde::{Deserialize, Serialize};

/// The quantisations `catena models import` offers. Serialised by llama.cpp's name (`Q4_K_M`):
/// a quantisation crosses the pipe to the quantiser's child process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QuantType {
    /// No quantisation: the converter's F16 file as it is.
    F16,
    Q8_0,
    #[serde(rename = "Q5_K_M")]
    Q5KM,
    #[serde(rename = "Q4_K_M")]
    Q4KM,
}

impl QuantType {
    pub const ALL: [QuantType; 4] = [
        QuantType::Q4KM,
        QuantType::Q5KM,
        QuantType::Q8_0,
        QuantType::F16,
    ];

    /// `Q4_K_M`, `q4_k_m`, ...
    pub fn parse(name: &str) -> Option<QuantType> {
        QuantType::ALL
            .into_iter()
            .find(|q| q.name().eq_ignore_ascii_case(name))
    }

    /// The name llama.cpp and the catalog use.
    pub fn name(self) -> &'static str {
        match self {
            QuantType::F16 => "F16",
            QuantType::Q8_0 => "Q8_0",
            QuantType::Q5KM => "Q5_K_M",
            QuantType::Q4KM => "Q4_K_M",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantisations_are_named_as_llama_cpp_names_them() {
        assert_eq!(QuantType::parse("q4_k_m"), Some(QuantType::Q4KM));
        assert_eq!(QuantType::parse("Q8_0"), Some(QuantType::Q8_0));
        assert_eq!(QuantType::parse("f16"), Some(QuantType::F16));
        assert_eq!(QuantType::parse("Q3_K_S"), None);
        assert_eq!(QuantType::Q5KM.name(), "Q5_K_M");
    }
}
