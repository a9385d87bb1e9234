//! How numbers, durations and table cells are written in report.md. The validator parses what
//! these functions write, so the two must agree (see `validate::parse_number`).

/// About three significant digits, thousands separators; values of 1,000 and more are shown
/// whole (rounding them further would hide measured digits). Never called with NaN/inf: the
/// callers write "—" and the reason instead.
pub fn number(value: f64) -> String {
    debug_assert!(value.is_finite(), "number() called with {value}");
    if !value.is_finite() {
        return "—".to_string();
    }
    if value == 0.0 {
        return "0".to_string();
    }
    let magnitude = value.abs();
    if magnitude < 1e-3 {
        return format!("{value:.2e}");
    }
    if magnitude >= 999.5 {
        return grouped_integer(value.round());
    }
    let mut decimals = decimals_for(magnitude);
    let mut rounded = round_to(value, decimals);
    // 9.996 rounds to 10.00: write it with the decimals of its new magnitude.
    let again = decimals_for(rounded.abs());
    if again < decimals {
        decimals = again;
        rounded = round_to(value, decimals);
    }
    if rounded.abs() >= 999.5 {
        return grouped_integer(rounded);
    }
    format!("{rounded:.decimals$}")
}

/// Decimals that give three significant digits for a magnitude in [1e-3, 1000).
fn decimals_for(magnitude: f64) -> usize {
    let exponent = magnitude.log10().floor() as i32;
    (2 - exponent).clamp(0, 5) as usize
}

fn round_to(value: f64, decimals: usize) -> f64 {
    let scale = 10f64.powi(decimals as i32);
    (value * scale).round() / scale
}

/// `1234567` → `1,234,567`.
fn grouped_integer(value: f64) -> String {
    let digits = crate::workload::data::group_digits(value.abs().round() as u64);
    if value < 0.0 {
        format!("-{digits}")
    } else {
        digits
    }
}

/// An axis tick: like `number`, without trailing zeros (`0.0900` → `0.09`, `1.00` → `1`).
pub fn tick(value: f64) -> String {
    if !value.is_finite() {
        return String::new();
    }
    let text = number(value);
    if text.contains('.') && !text.contains('e') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A spread (fraction of the median) as a percentage: `3.1` or `42`.
pub fn percent(fraction: f64) -> String {
    let pct = fraction * 100.0;
    if pct < 10.0 {
        format!("{pct:.1}")
    } else {
        grouped_integer(pct.round())
    }
}

/// `1.23×`.
pub fn ratio(value: f64) -> String {
    format!("{}×", number(value))
}

/// An x value as it is named in a row label: thread counts stay integers.
pub fn x_value(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        if x.abs() >= 1000.0 {
            grouped_integer(x)
        } else {
            format!("{}", x as i64)
        }
    } else {
        number(x)
    }
}

/// `12.3 s`, `2 min 05 s`, `1 h 02 min`.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "unknown".to_string();
    }
    if seconds < 60.0 {
        return format!("{} s", number(seconds));
    }
    let whole = seconds.round() as u64;
    if whole < 3600 {
        format!("{} min {:02} s", whole / 60, whole % 60)
    } else {
        format!("{} h {:02} min", whole / 3600, (whole % 3600) / 60)
    }
}

/// Text safe inside a Markdown table cell: pipes escaped, line breaks as `<br>`.
pub fn cell(text: &str) -> String {
    text.replace('|', "\\|")
        .replace("\r\n", "<br>")
        .replace('\n', "<br>")
}

/// Text as an inline code span, whatever backticks it holds.
pub fn code(text: &str) -> String {
    let mut longest_run = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest_run = longest_run.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest_run + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A name safe as a file name: workload ids already are; anything else becomes `_`.
pub fn file_stem(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Footnote markers for one table: each distinct reason gets a letter, written once below the
/// table, so a column of "not measured" cells stays narrow. Peers with the same reason share
/// one note.
#[derive(Default)]
pub struct Notes {
    /// (reason, the peers it applies to; empty for a note about no peer in particular).
    items: Vec<(String, Vec<String>)>,
}

impl Notes {
    /// The marker for `text`, `(a)`, `(b)`, …, `(z)`, `(aa)`, … (same text, same marker).
    pub fn mark(&mut self, text: &str) -> String {
        self.marker(text, None)
    }

    /// The marker for `reason` as it applies to `peer`; written `**peer**, **other**: reason`.
    pub fn mark_for(&mut self, peer: &str, reason: &str) -> String {
        self.marker(reason, Some(peer))
    }

    fn marker(&mut self, text: &str, peer: Option<&str>) -> String {
        let index = match self
            .items
            .iter()
            .position(|(t, peers)| t == text && peers.is_empty() == peer.is_none())
        {
            Some(i) => i,
            None => {
                self.items.push((text.to_string(), Vec::new()));
                self.items.len() - 1
            }
        };
        if let Some(peer) = peer {
            let peers = &mut self.items[index].1;
            if !peers.iter().any(|p| p == peer) {
                peers.push(peer.to_string());
            }
        }
        format!("({})", letters(index))
    }

    /// The notes as a Markdown list (empty when there are none).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.items.is_empty() {
            return out;
        }
        out.push('\n');
        for (i, (text, peers)) in self.items.iter().enumerate() {
            if peers.is_empty() {
                out.push_str(&format!("- ({}) {}\n", letters(i), text));
            } else {
                let who: Vec<String> = peers.iter().map(|p| format!("**{p}**")).collect();
                out.push_str(&format!(
                    "- ({}) {}: {}\n",
                    letters(i),
                    who.join(", "),
                    text
                ));
            }
        }
        out
    }
}

/// 0 → a, 25 → z, 26 → aa.
fn letters(mut index: usize) -> String {
    let mut out = Vec::new();
    loop {
        out.push(b'a' + (index % 26) as u8);
        if index < 26 {
            break;
        }
        index = index / 26 - 1;
    }
    out.reverse();
    String::from_utf8(out).expect("ascii letters")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_three_significant_digits_and_separators() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(1.2345), "1.23");
        assert_eq!(number(12.345), "12.3");
        assert_eq!(number(123.45), "123");
        assert_eq!(number(999.4), "999");
        assert_eq!(number(999.6), "1,000");
        assert_eq!(number(9.996), "10.0");
        assert_eq!(number(0.012345), "0.0123");
        assert_eq!(number(12345.6), "12,346");
        assert_eq!(number(-1234567.0), "-1,234,567");
        assert_eq!(number(0.0000123), "1.23e-5");
        assert_eq!(tick(0.09), "0.09");
        assert_eq!(tick(1.0), "1");
        assert_eq!(tick(4.5), "4.5");
        assert_eq!(tick(20_000.0), "20,000");
        assert_eq!(percent(0.031), "3.1");
        assert_eq!(percent(0.42), "42");
        assert_eq!(ratio(2.5), "2.50×");
        assert_eq!(x_value(8.0), "8");
        assert_eq!(x_value(4096.0), "4,096");
        assert_eq!(duration(151.0), "2 min 31 s");
        assert_eq!(duration(3.25), "3.25 s");
    }

    #[test]
    fn cells_and_markers() {
        assert_eq!(cell("a|b\nc"), "a\\|b<br>c");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(letters(0), "a");
        assert_eq!(letters(25), "z");
        assert_eq!(letters(26), "aa");
        assert_eq!(letters(27), "ab");
        let mut notes = Notes::default();
        assert_eq!(notes.mark("x"), "(a)");
        assert_eq!(notes.mark("y"), "(b)");
        assert_eq!(notes.mark("x"), "(a)");
        assert_eq!(notes.mark_for("tmpfs", "y"), "(c)");
        assert_eq!(notes.mark_for("ext4-ram", "y"), "(c)");
        assert_eq!(
            notes.render(),
            "\n- (a) x\n- (b) y\n- (c) **tmpfs**, **ext4-ram**: y\n"
        );
    }
}
