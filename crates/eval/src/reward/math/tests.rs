use super::math_equivalent;
use std::time::{Duration, Instant};

fn same(a: &str, b: &str) -> bool {
    let forward = math_equivalent(a, b);
    assert_eq!(forward, math_equivalent(b, a), "not symmetric: {a:?} {b:?}");
    forward
}

#[test]
fn one_half_in_every_spelling() {
    let spellings = [
        "1/2",
        "0.5",
        "\\frac{1}{2}",
        "\\dfrac12",
        "\\tfrac{1}{2}",
        "\\frac{2}{4}",
        "\\boxed{\\frac{1}{2}}",
        "$\\frac{1}{2}$",
        "0.50",
        "5e-1",
        "\\left(\\frac{1}{2}\\right)",
        "{1}/{2}",
        "2^{-1}",
        "1 - \\frac{1}{2}",
    ];
    for a in spellings {
        for b in spellings {
            assert!(same(a, b), "{a:?} vs {b:?}");
        }
    }
    assert!(same("-0.50", "-\\frac{1}{2}"));
    assert!(same("-0.50", "\\frac{-1}{2}"));
    assert!(!same("-0.50", "0.5"));
}

#[test]
fn numbers_compare_by_value() {
    assert!(same("\\boxed{42}", "42.0"));
    assert!(same("\\boxed{1,000}", "1000"));
    assert!(same("1,234,567.50", "1234567.5"));
    assert!(same("1{,}000", "1000"));
    assert!(same("1\\,000", "1000"));
    assert!(same("50\\%", "50"));
    assert!(same("50%", "50"));
    assert!(same("90^\\circ", "90"));
    assert!(same("3 \\cdot 4", "12"));
    assert!(same("3 \\times 4", "12"));
    assert!(same("2^{10}", "1024"));
    assert!(same("\\text{ 7 }", "7"));
    assert!(same("1e3", "1000"));
    assert!(same("\u{2212}3", "-3"));
    assert!(!same("0.333", "1/3"));
    assert!(!same("0.3333333333", "\\frac{1}{3}"));
    assert!(!same("50\\%", "0.5"), "a percent sign is decoration");
    assert!(!same("12", "1,2"));
    assert!(!same("2", "3"));
}

#[test]
fn strings_must_match_after_normalising() {
    assert!(same("\\boxed{REDNUHTLICNEP}", "REDNUHTLICNEP"));
    assert!(same("\\boxed{\\text{NAEM}}", "NAEM"));
    assert!(same("'abc'", "abc"));
    assert!(same("x + 1", "x+1"));
    assert!(same("\\left[0, 1\\right)", "[0,1)"));
    assert!(!same("REDNUHTLICNEP", "rednuhtlicnep"));
    assert!(!same("\\boxed{abc}", "abd"));
    assert!(!same("\\sqrt{2}", "1.41421356"));
}

#[test]
fn tuples_compare_item_by_item() {
    assert!(same("(1, 2)", "1,2"));
    assert!(same("\\left( \\frac{1}{2}, 3 \\right)", "(0.5, 3)"));
    assert!(same("(1, x)", "1,x"));
    assert!(!same("(1, 2)", "(2, 1)"));
    assert!(
        !same("(1, 2)", "[1, 2]"),
        "both bracketed: the brackets must agree"
    );
    assert!(!same("(1, 2)", "(1, 2, 3)"));
    assert!(!same("(1, 2)", "12"));
    assert!(
        !same("(1,000)", "1000"),
        "in brackets, a comma separates items"
    );
    assert!(same("(1)+(2)", "3"), "two groups are not one bracket");
}

#[test]
fn malformed_and_empty_answers_are_wrong() {
    assert!(!same("1/0", "1/0"));
    assert!(!same("\\frac{1}{0}", "1"));
    assert!(!same("\\frac{1}{2", "1/2"));
    assert!(
        !same("\\boxed{12", "12"),
        "an unclosed box is not an answer"
    );
    assert!(!same("{{1}", "1"));
    assert!(!same("", ""));
    assert!(!same("  ", "0"));
    assert!(!same("$$", "$$"));
    assert!(!same("\\boxed{}", ""));
    assert!(!same("(,)", "(,)"));
}

#[test]
fn unicode_and_nested_boxes() {
    assert!(same("\\boxed{\\boxed{5}}", "5"));
    assert!(same("first \\boxed{4}, finally \\boxed{5}", "5"));
    assert!(same("Ελλάδα", "Ελλάδα"));
    assert!(same("\\boxed{日本}", "日本"));
    assert!(!same("日本", "中国"));
    assert!(!same("½", "1/2"), "vulgar fractions are not read");
    assert!(same("٣", "٣"));
}

#[test]
fn huge_inputs_answer_quickly() {
    let started = Instant::now();
    assert!(!same("10^999999999", "10^999999999"));
    assert!(!same("\\boxed{1e999999999}", "0"));
    assert!(!same("2^{2^{2^{2^{2^{2}}}}}", "0"));
    let deep = format!("{}1{}", "{".repeat(50_000), "}".repeat(50_000));
    assert!(!same(&deep, "1"));
    let wrappers = format!("{}1{}", "\\text{".repeat(20_000), "}".repeat(20_000));
    assert!(same(&wrappers, "1"));
    let long = "9".repeat(100_000);
    assert!(
        same(&long, &long),
        "too long for a number: compared as text"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_printed_number_is_found_among_the_words() {
    use super::printed_number;
    assert!(printed_number("\\boxed{1229}", "1229"));
    assert!(printed_number("\\boxed{1229}", "Primes below 10000: 1229."));
    assert!(printed_number("\\boxed{1,229}", "count=1229"));
    assert!(printed_number("1229", "[1229, 7]"));
    assert!(printed_number("\\boxed{\\frac{1}{2}}", "p = 0.5"));
    assert!(printed_number("\\boxed{-3}", "(-3)"));
    assert!(printed_number("\\boxed{1000}", "1e3"));
    // Not a word of its own, or not there at all.
    assert!(!printed_number("\\boxed{1229}", "12290"));
    assert!(!printed_number("\\boxed{1229}", "x1229"));
    assert!(!printed_number("\\boxed{7854}", "1229"));
    assert!(!printed_number("\\boxed{7854}", ""));
    // Answers that are not numbers are never found, even as words.
    assert!(!printed_number("\\boxed{yes}", "yes"));
    assert!(!printed_number("\\boxed{1/0}", "1/0"));
}

#[test]
fn the_last_line_is_read_when_it_shows_one_number() {
    use super::last_printed_number;
    assert_eq!(
        last_printed_number("checking...\nprimes: 1229\n\n"),
        Some("1229")
    );
    assert_eq!(last_printed_number("x = -2.5"), Some("-2.5"));
    assert_eq!(
        last_printed_number("1229\nTrue"),
        None,
        "the last line shows none"
    );
    assert_eq!(
        last_printed_number("1229 primes below 10000"),
        None,
        "which one?"
    );
    assert_eq!(last_printed_number("[2, 3, 5]"), None);
    assert_eq!(last_printed_number(""), None);
}
