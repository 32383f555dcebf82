//! The bearer token that guards the admin routes: read from a file or the environment, and
//! compared in time that does not depend on where a guess first differs.

use std::path::{Path, PathBuf};

/// The environment variable holding the admin token when no token file is given.
pub const ADMIN_TOKEN_ENV: &str = "KV_ROUTER_ADMIN_TOKEN";

/// A secret that `Authorization: Bearer …` must present.
#[derive(Clone)]
pub struct AdminToken {
    secret: String,
}

/// Never printed: a token in a log would be a token leaked.
impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

/// Why no admin token could be had.
#[derive(Debug, thiserror::Error)]
pub enum AdminTokenError {
    /// The token file could not be read.
    #[error(
        "cannot read the admin token file {path}: {source}; check the path given to --admin-token-file"
    )]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file or variable holds only whitespace.
    #[error("the admin token from {origin} is empty; put a secret of at least one character there")]
    Empty {
        /// Where it came from (the file, or the variable).
        origin: String,
    },
    /// The token holds a character an HTTP header cannot carry.
    #[error(
        "the admin token from {origin} holds whitespace or a control character; a bearer token is one run of visible ASCII characters"
    )]
    NotAHeaderValue {
        /// Where it came from.
        origin: String,
    },
}

impl AdminToken {
    /// The token `secret`, surrounding whitespace (a file's final newline) removed.
    pub fn new(secret: &str, origin: &str) -> Result<Self, AdminTokenError> {
        let secret = secret.trim();
        if secret.is_empty() {
            return Err(AdminTokenError::Empty {
                origin: origin.to_owned(),
            });
        }
        if !secret.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(AdminTokenError::NotAHeaderValue {
                origin: origin.to_owned(),
            });
        }
        Ok(Self {
            secret: secret.to_owned(),
        })
    }

    /// The token in the file at `path`.
    pub fn from_file(path: &Path) -> Result<Self, AdminTokenError> {
        let text = std::fs::read_to_string(path).map_err(|source| AdminTokenError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        Self::new(&text, &path.display().to_string())
    }

    /// The token in [`ADMIN_TOKEN_ENV`], if the variable is set.
    pub fn from_env() -> Option<Result<Self, AdminTokenError>> {
        let value = std::env::var(ADMIN_TOKEN_ENV).ok()?;
        Some(Self::new(&value, ADMIN_TOKEN_ENV))
    }

    /// Whether `presented` is the token, comparing every byte whatever the first difference.
    pub fn matches(&self, presented: &str) -> bool {
        let (expected, presented) = (self.secret.as_bytes(), presented.as_bytes());
        let mut difference = expected.len() ^ presented.len();
        for (position, byte) in expected.iter().enumerate() {
            let other = presented.get(position).copied().unwrap_or(!byte);
            difference |= usize::from(byte ^ other);
        }
        difference == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_itself_only() {
        let token = AdminToken::new("s3cret-token\n", "test").expect("a token");
        assert!(token.matches("s3cret-token"));
        for wrong in ["", "s3cret-toke", "s3cret-token2", "S3cret-token", "x"] {
            assert!(!token.matches(wrong), "{wrong:?} matched");
        }
    }

    #[test]
    fn empty_and_unsendable_tokens_are_refused_with_their_origin() {
        let empty = AdminToken::new(" \n", "token.txt").unwrap_err().to_string();
        assert!(
            empty.contains("token.txt") && empty.contains("empty"),
            "{empty}"
        );
        let spaced = AdminToken::new("two words", "KV").unwrap_err().to_string();
        assert!(spaced.contains("visible ASCII"), "{spaced}");
        assert!(!format!("{:?}", AdminToken::new("abc", "x").unwrap()).contains("abc"));
    }
}
