//! No text makes a verifier panic: answers come from a model.

use super::*;
use proptest::prelude::*;

/// Text rich in what the math reader reacts to.
fn mathy() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            "[0-9]{1,4}",
            "[-+*/^.,eE()\\[\\]{}$% ]",
            Just("\\frac".to_string()),
            Just("\\dfrac".to_string()),
            Just("\\boxed{".to_string()),
            Just("\\text{".to_string()),
            Just("\\left(".to_string()),
            Just("\\right)".to_string()),
            Just("^\\circ".to_string()),
            Just("\\".to_string()),
            Just("10^{99999}".to_string()),
            "\\PC{1,3}",
        ],
        0..24,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #[test]
    fn math_equivalent_never_panics(a in mathy(), b in mathy()) {
        let forward = math_equivalent(&a, &b);
        prop_assert_eq!(forward, math_equivalent(&b, &a));
    }

    #[test]
    fn arbitrary_strings_never_panic(a in "\\PC*", b in "\\PC*") {
        let _ = math_equivalent(&a, &b);
        let f1 = qa_f1(&a, &b);
        prop_assert!((0.0..=1.0).contains(&f1));
        let _ = qa_exact_match(&a, &b);
        let _ = code_format_ok(&a);
        let _ = answer_program(&a);
    }

    #[test]
    fn an_answer_equals_itself_when_it_is_a_number(n in any::<i64>(), d in 1..10_000i64) {
        let text = format!("\\frac{{{n}}}{{{d}}}");
        let plain = format!("{n}/{d}");
        prop_assert!(math_equivalent(&text, &plain));
    }
}
