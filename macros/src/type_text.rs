//! A type as a person writes it (`Limits<usize>`, `HashMap<String, u32>`), for the parameters
//! type that `catalog describe` shows; `stringify!` would space every token
//! (`Limits < usize >`).

use quote::ToTokens;

/// `ty` written the usual way: no spaces around `<`, `>`, `::`, inside brackets and parentheses,
/// after `&` or between a name and its parenthesised arguments; one space after `,` and `;`.
pub fn type_text(ty: &syn::Type) -> String {
    tidy(&ty.to_token_stream().to_string())
}

fn tidy(spaced: &str) -> String {
    let mut text = spaced.to_owned();
    for (from, to) in [
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ::", "::"),
        (":: ", "::"),
        (" ,", ","),
        (" ;", ";"),
        ("[ ", "["),
        (" ]", "]"),
        ("( ", "("),
        (" )", ")"),
        ("& ", "&"),
    ] {
        text = text.replace(from, to);
    }
    // The arguments of `Fn(u32)` and `fn(u32)` follow the name directly.
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let before_paren = c == ' ' && chars.peek() == Some(&'(');
        let after_name = out.ends_with(|p: char| p.is_alphanumeric() || p == '_');
        if !(before_paren && after_name) {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(source: &str) -> String {
        type_text(&syn::parse_str(source).expect("a type"))
    }

    #[test]
    fn types_print_as_written() {
        assert_eq!(text("Limits<usize>"), "Limits<usize>");
        assert_eq!(
            text("std::collections::HashMap<String, Vec<u8>>"),
            "std::collections::HashMap<String, Vec<u8>>"
        );
        assert_eq!(text("&'static str"), "&'static str");
        assert_eq!(text("[u8; 4]"), "[u8; 4]");
        assert_eq!(text("(u32, u64)"), "(u32, u64)");
        assert_eq!(text("Box<dyn Fn(u32) -> u32>"), "Box<dyn Fn(u32) -> u32>");
        assert_eq!(text("Plain"), "Plain");
    }
}
