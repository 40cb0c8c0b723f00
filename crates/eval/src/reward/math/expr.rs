//! Exact values of numeric answers: integers, decimals (and Python's `1e-05` float notation),
//! `a/b`, `\frac{a}{b}` and `\frac12`, unary signs, `+ - * /`, `^` with an integer exponent,
//! parentheses and braces, all as big rationals so `0.5`, `1/2` and `\frac{2}{4}` are one value.
//!
//! Every path is bounded: the text's length, the nesting depth and the size of every
//! intermediate value are capped, so `10^999999999` or ten thousand open parentheses are
//! refused at once instead of eating memory or the stack.

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};

/// Longest cleaned text read as a number (real answers are far shorter).
const MAX_TEXT: usize = 4096;
/// Deepest nesting of groups and signs.
const MAX_DEPTH: usize = 64;
/// Most bits (numerator plus denominator) of any value along the way: about 4,900 digits.
const MAX_BITS: u64 = 1 << 14;

/// What a cleaned answer is as a number.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Numeric {
    Value(BigRational),
    /// Made only of number syntax but not a number: `1/0`, `\frac{1}{2`, `2^{1/2}`, a value
    /// past the size cap. Such an answer is wrong whatever it is compared with.
    Malformed,
    /// Not number syntax at all (words, variables, sets): compared as a string.
    Text,
}

/// The value of a cleaned answer (see `clean`), or why it has none.
pub(super) fn evaluate(text: &str) -> Numeric {
    let text = without_thousands_separators(text);
    if text.len() > MAX_TEXT || !looks_numeric(&text) {
        return Numeric::Text;
    }
    let mut parser = Parser {
        s: text.as_bytes(),
        pos: 0,
        depth: 0,
    };
    match parser.expr() {
        Ok(value) if parser.pos == parser.s.len() => Numeric::Value(value),
        _ => Numeric::Malformed,
    }
}

/// Whether `text` is one number written with thousands separators (`-1,234,567.5`). Commas
/// anywhere else separate the items of a tuple.
pub(super) fn is_thousands(text: &str) -> bool {
    let body = text.strip_prefix('-').unwrap_or(text);
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let mut groups = int.split(',');
    let first_ok = groups
        .next()
        .is_some_and(|g| (1..=3).contains(&g.len()) && g.bytes().all(|b| b.is_ascii_digit()));
    let rest: Vec<&str> = groups.collect();
    first_ok
        && !rest.is_empty()
        && rest
            .iter()
            .all(|g| g.len() == 3 && g.bytes().all(|b| b.is_ascii_digit()))
        && frac.bytes().all(|b| b.is_ascii_digit())
}

fn without_thousands_separators(text: &str) -> std::borrow::Cow<'_, str> {
    if is_thousands(text) {
        text.replace(',', "").into()
    } else {
        text.into()
    }
}

/// Only digits, operators, groups, `\frac` and the `e` of float notation, with a digit
/// somewhere: anything else is not a number.
fn looks_numeric(text: &str) -> bool {
    let s = text.as_bytes();
    let mut i = 0;
    let mut digit = false;
    while i < s.len() {
        let b = s[i];
        if s[i..].starts_with(b"\\frac") && !s.get(i + 5).is_some_and(u8::is_ascii_alphabetic) {
            i += 5;
            continue;
        }
        let ok = match b {
            b'0'..=b'9' => {
                digit = true;
                true
            }
            b'.' | b'+' | b'-' | b'*' | b'/' | b'^' | b'(' | b')' | b'{' | b'}' => true,
            b'e' | b'E' => float_exponent_at(s, i).is_some(),
            _ => false,
        };
        if !ok {
            return false;
        }
        i += 1;
    }
    digit
}

/// When `s[at]` is the `e` of `1e5`, `2.5E-3` (a digit or point before it, digits after an
/// optional sign), where the exponent's digits start and end.
fn float_exponent_at(s: &[u8], at: usize) -> Option<(usize, usize)> {
    let before = at.checked_sub(1).map(|i| s[i])?;
    if !(before.is_ascii_digit() || before == b'.') {
        return None;
    }
    let mut start = at + 1;
    if matches!(s.get(start), Some(b'+' | b'-')) {
        start += 1;
    }
    let digits = s[start.min(s.len())..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    (digits > 0).then_some((start, start + digits))
}

/// A malformed number: the reason does not matter, the answer is wrong.
struct Malformed;

type Eval = Result<BigRational, Malformed>;

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let found = self.peek() == Some(b);
        if found {
            self.pos += 1;
        }
        found
    }

    fn expect(&mut self, b: u8) -> Result<(), Malformed> {
        if self.eat(b) { Ok(()) } else { Err(Malformed) }
    }

    /// Runs `f` one level deeper, refusing past the depth cap (recursion uses the stack).
    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Eval) -> Eval {
        if self.depth >= MAX_DEPTH {
            return Err(Malformed);
        }
        self.depth += 1;
        let value = f(self);
        self.depth -= 1;
        value
    }

    /// expr := term (('+' | '-') term)*
    fn expr(&mut self) -> Eval {
        self.nested(|p| {
            let mut value = p.term()?;
            loop {
                if p.eat(b'+') {
                    value = bounded(value + p.term()?)?;
                } else if p.eat(b'-') {
                    value = bounded(value - p.term()?)?;
                } else {
                    return Ok(value);
                }
            }
        })
    }

    /// term := unary (('*' | '/') unary)*
    fn term(&mut self) -> Eval {
        let mut value = self.unary()?;
        loop {
            if self.eat(b'*') {
                value = bounded(value * self.unary()?)?;
            } else if self.eat(b'/') {
                let divisor = self.unary()?;
                if divisor.is_zero() {
                    return Err(Malformed);
                }
                value = bounded(value / divisor)?;
            } else {
                return Ok(value);
            }
        }
    }

    /// unary := ('-' | '+') unary | power. A sign binds looser than `^`: `-2^2` is -4.
    fn unary(&mut self) -> Eval {
        self.nested(|p| {
            if p.eat(b'-') {
                Ok(-p.unary()?)
            } else if p.eat(b'+') {
                p.unary()
            } else {
                p.power()
            }
        })
    }

    /// power := atom ('^' unary)?, right-associative. The exponent is read whole (`2^10` is
    /// 1024, as a model writing plain text means, not LaTeX's `2^1` then `0`).
    fn power(&mut self) -> Eval {
        let base = self.atom()?;
        if !self.eat(b'^') {
            return Ok(base);
        }
        let exponent = self.unary()?;
        power(base, &exponent)
    }

    /// atom := '(' expr ')' | '{' expr '}' | '\frac' arg arg | number
    fn atom(&mut self) -> Eval {
        match self.peek() {
            Some(b'(') => self.group(b')'),
            Some(b'{') => self.group(b'}'),
            Some(b'\\') => {
                // `looks_numeric` let no other command through.
                self.pos += "\\frac".len();
                let numerator = self.frac_arg()?;
                let denominator = self.frac_arg()?;
                if denominator.is_zero() {
                    return Err(Malformed);
                }
                bounded(numerator / denominator)
            }
            Some(b) if b.is_ascii_digit() || b == b'.' => self.number(),
            _ => Err(Malformed),
        }
    }

    fn group(&mut self, close: u8) -> Eval {
        self.pos += 1;
        let value = self.expr()?;
        self.expect(close)?;
        Ok(value)
    }

    /// A `\frac` argument: a braced expression, or one digit (`\frac12`).
    fn frac_arg(&mut self) -> Eval {
        match self.peek() {
            Some(b'{') => self.group(b'}'),
            Some(b) if b.is_ascii_digit() => {
                self.pos += 1;
                Ok(BigRational::from_integer(BigInt::from(b - b'0')))
            }
            _ => Err(Malformed),
        }
    }

    /// digits ['.' digits] [('e' | 'E') ['+' | '-'] digits], at least one digit.
    fn number(&mut self) -> Eval {
        let digits_from =
            |p: &Self, i: usize| p.s[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        let int_start = self.pos;
        let int_len = digits_from(self, int_start);
        self.pos += int_len;
        let mut frac = &self.s[0..0];
        if self.eat(b'.') {
            let frac_len = digits_from(self, self.pos);
            frac = &self.s[self.pos..self.pos + frac_len];
            self.pos += frac_len;
        }
        if int_len + frac.len() == 0 {
            return Err(Malformed);
        }
        let mut mantissa = self.s[int_start..int_start + int_len].to_vec();
        mantissa.extend_from_slice(frac);
        let mantissa = BigInt::parse_bytes(&mantissa, 10).ok_or(Malformed)?;
        let mut exponent = -i64::try_from(frac.len()).map_err(|_| Malformed)?;
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let (start, end) = float_exponent_at(self.s, self.pos).ok_or(Malformed)?;
            let digits = std::str::from_utf8(&self.s[start..end]).map_err(|_| Malformed)?;
            // Longer than this is past the size cap anyway.
            let magnitude: i64 = if digits.len() > 9 {
                return Err(Malformed);
            } else {
                digits.parse().map_err(|_| Malformed)?
            };
            exponent += if self.s[start - 1] == b'-' {
                -magnitude
            } else {
                magnitude
            };
            self.pos = end;
        }
        let ten = BigRational::from_integer(BigInt::from(10));
        let scale = power(ten, &BigRational::from_integer(BigInt::from(exponent)))?;
        bounded(BigRational::from_integer(mantissa) * scale)
    }
}

/// `base ^ exponent` for an integer exponent, refused when the result would pass the size cap.
fn power(base: BigRational, exponent: &BigRational) -> Eval {
    if !exponent.is_integer() {
        return Err(Malformed);
    }
    let e = exponent.to_integer().to_i64().ok_or(Malformed)?;
    if base.is_zero() {
        return match e {
            0 => Ok(BigRational::one()),
            e if e > 0 => Ok(base),
            _ => Err(Malformed),
        };
    }
    if base.abs().is_one() {
        let odd = e % 2 != 0;
        return Ok(if odd { base } else { BigRational::one() });
    }
    // |base| != 1 has at least one bit beyond the first in numerator or denominator, so the
    // result has about |e| times the base's bits.
    let bits = base.numer().bits() + base.denom().bits();
    let size = bits.saturating_mul(e.unsigned_abs());
    if size > 2 * MAX_BITS {
        return Err(Malformed);
    }
    let e = i32::try_from(e).map_err(|_| Malformed)?;
    bounded(base.pow(e))
}

fn bounded(value: BigRational) -> Eval {
    if value.numer().bits() + value.denom().bits() > MAX_BITS {
        Err(Malformed)
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn value(text: &str) -> BigRational {
        match evaluate(text) {
            Numeric::Value(v) => v,
            other => panic!("{text:?} gave {other:?}"),
        }
    }

    fn ratio(n: i64, d: i64) -> BigRational {
        BigRational::new(BigInt::from(n), BigInt::from(d))
    }

    #[test]
    fn values() {
        assert_eq!(value("1/2"), ratio(1, 2));
        assert_eq!(value("0.5"), ratio(1, 2));
        assert_eq!(value("-0.50"), ratio(-1, 2));
        assert_eq!(value(".25"), ratio(1, 4));
        assert_eq!(value("5."), ratio(5, 1));
        assert_eq!(value("\\frac{2}{4}"), ratio(1, 2));
        assert_eq!(value("\\frac12"), ratio(1, 2));
        assert_eq!(value("\\frac{-3}{6}"), ratio(-1, 2));
        assert_eq!(value("-\\frac{1}{3}"), ratio(-1, 3));
        assert_eq!(value("2^10"), ratio(1024, 1));
        assert_eq!(value("2^{-2}"), ratio(1, 4));
        assert_eq!(value("2^3^2"), ratio(512, 1));
        assert_eq!(value("-2^2"), ratio(-4, 1));
        assert_eq!(value("(1+2)*3-4/2"), ratio(7, 1));
        assert_eq!(value("{1+1}^{3}"), ratio(8, 1));
        assert_eq!(value("1,234,567"), ratio(1_234_567, 1));
        assert_eq!(value("1e3"), ratio(1000, 1));
        assert_eq!(value("2.5E-3"), ratio(1, 400));
        assert_eq!(value("1e+02"), ratio(100, 1));
        assert_eq!(value("0^0"), ratio(1, 1));
        assert_eq!(value("(-1)^{1000001}"), ratio(-1, 1));
    }

    #[test]
    fn malformed_numbers() {
        for text in [
            "1/0",
            "\\frac{1}{0}",
            "0^{-1}",
            "\\frac{1}{2",
            "(1+2",
            "1+2)",
            "2^{1/2}",
            "-",
            "1+",
            "2(3)",
            "..5",
            "\\frac{}{2}",
            "1,2",
        ] {
            assert!(
                matches!(evaluate(text), Numeric::Malformed | Numeric::Text),
                "{text:?}"
            );
        }
        assert_eq!(evaluate("1/0"), Numeric::Malformed);
        assert_eq!(evaluate("x+1"), Numeric::Text);
        assert_eq!(evaluate("2e"), Numeric::Text);
        assert_eq!(evaluate("e^2"), Numeric::Text);
        assert_eq!(evaluate("\\sqrt{2}"), Numeric::Text);
        assert_eq!(evaluate(""), Numeric::Text);
        assert_eq!(evaluate("()"), Numeric::Text, "no digit");
        assert_eq!(evaluate("(1"), Numeric::Malformed);
    }

    #[test]
    fn hostile_sizes_are_refused_quickly() {
        let started = Instant::now();
        for text in [
            "10^999999999".to_string(),
            "10^{999999999999999999999999}".to_string(),
            "1e999999999".to_string(),
            "(10^4000)^4000".to_string(),
            "7^(7^(7^7))".to_string(),
            format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000)),
            format!("{}1", "-".repeat(10_000)),
            format!("{}^2", "9".repeat(3000)),
            format!("{}^4*{}^4", "9".repeat(700), "9".repeat(700)),
        ] {
            assert!(
                !matches!(evaluate(&text), Numeric::Value(_)),
                "{}",
                &text[..text.len().min(40)]
            );
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(
            value("2^100"),
            BigRational::from_integer(BigInt::from(2).pow(100u32))
        );
    }
}
