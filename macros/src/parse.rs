//! Splits the attribute's arguments into positional and `key = value` pieces, without judging
//! them: every judgement (and every error) belongs to `validate`.

use proc_macro2::{Ident, Punct, Spacing, TokenStream, TokenTree};

/// One comma-separated argument of the attribute, as written.
pub enum RawArg {
    /// `key = value`; the value is every token up to the next top-level comma.
    KeyValue {
        /// The key.
        key: Ident,
        /// The value's tokens (possibly empty).
        value: TokenStream,
    },
    /// A lone identifier, such as `commits` without a value or an unquoted name.
    Bare(Ident),
    /// Anything else: a literal (the policy name) or stray tokens.
    Positional(TokenStream),
    /// A comma with nothing before it.
    Empty(Punct),
}

/// Splits `args` at top-level commas. Commas inside groups and inside `<...>` (generic
/// arguments of a `parameters` type) do not split.
pub fn parse_args(args: TokenStream) -> Vec<RawArg> {
    let mut out = Vec::new();
    let mut current: Vec<TokenTree> = Vec::new();
    let mut angle_depth = 0usize;
    let mut previous_was_joint_dash = false;
    for tree in args {
        if let TokenTree::Punct(punct) = &tree {
            let c = punct.as_char();
            match c {
                ',' if angle_depth == 0 => {
                    if current.is_empty() {
                        out.push(RawArg::Empty(punct.clone()));
                    } else {
                        out.push(classify(std::mem::take(&mut current)));
                    }
                    previous_was_joint_dash = false;
                    continue;
                }
                '<' => angle_depth += 1,
                '>' if !previous_was_joint_dash => angle_depth = angle_depth.saturating_sub(1),
                _ => {}
            }
            previous_was_joint_dash = c == '-' && punct.spacing() == Spacing::Joint;
        } else {
            previous_was_joint_dash = false;
        }
        current.push(tree);
    }
    if !current.is_empty() {
        out.push(classify(current));
    }
    out
}

fn classify(trees: Vec<TokenTree>) -> RawArg {
    match trees.as_slice() {
        [TokenTree::Ident(key), TokenTree::Punct(eq), rest @ ..]
            if eq.as_char() == '=' && eq.spacing() == Spacing::Alone =>
        {
            RawArg::KeyValue {
                key: key.clone(),
                value: rest.iter().cloned().collect(),
            }
        }
        [TokenTree::Ident(ident)] => RawArg::Bare(ident.clone()),
        _ => RawArg::Positional(trees.into_iter().collect()),
    }
}
