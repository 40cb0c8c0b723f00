//! Which verifier a task from a verl parquet file calls for, by its `data_source` (PROTOCOL.md §5).

use super::TaskKind;

/// The verifier a verl `data_source` calls for. Names are matched by the benchmark words they
/// contain, math first (so `math_qa` style names stay math), then code, then QA; anything else
/// is math, whose check falls back to string equality.
pub fn kind_of_source(data_source: &str) -> TaskKind {
    const MATH: &[&str] = &["math", "aime", "amc", "gsm"];
    const CODE: &[&str] = &["code", "livecodebench", "codecontests", "taco", "apps"];
    const QA: &[&str] = &[
        "hotpot",
        "musique",
        "2wiki",
        "nq",
        "triviaqa",
        "bamboogle",
        "qa",
    ];
    let source = data_source.to_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| source.contains(w));
    if any(MATH) {
        TaskKind::Math
    } else if any(CODE) {
        TaskKind::Code
    } else if any(QA) {
        TaskKind::Qa
    } else {
        TaskKind::Math
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_sources_pick_their_verifier() {
        for (source, kind) in [
            ("lighteval/MATH", TaskKind::Math),
            ("aime24", TaskKind::Math),
            ("AMC23", TaskKind::Math),
            ("openai/gsm8k", TaskKind::Math),
            ("livecodebench_v5", TaskKind::Code),
            ("deepmind/code_contests", TaskKind::Code),
            ("codecontests", TaskKind::Code),
            ("BAAI/TACO", TaskKind::Code),
            ("codeparrot/apps", TaskKind::Code),
            ("hotpotqa", TaskKind::Qa),
            ("musique", TaskKind::Qa),
            ("2wikimultihopqa", TaskKind::Qa),
            ("nq", TaskKind::Qa),
            ("triviaqa", TaskKind::Qa),
            ("bamboogle", TaskKind::Qa),
            ("my_qa_set", TaskKind::Qa),
            ("synthetic", TaskKind::Math),
            ("", TaskKind::Math),
        ] {
            assert_eq!(kind_of_source(source), kind, "{source}");
        }
    }
}
