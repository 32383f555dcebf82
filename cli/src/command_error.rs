//! Why a subcommand failed, already worded for people.

/// A subcommand's failure; its message is what the user sees on standard error.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The configuration is invalid: the rendered error with its snippet.
    #[error("{rendered}")]
    Config {
        /// The error rendered with the file's snippet and caret.
        rendered: String,
    },
    /// No linked policy has the name asked for.
    #[error("error: {message}\n")]
    UnknownPolicy {
        /// What was asked and what is linked.
        message: String,
    },
    /// A replay could not run (unreadable trace, bad cluster parameter, unwritable report).
    #[error("error: {message}\n")]
    Replay {
        /// What went wrong and what to do.
        message: String,
    },
    /// The service could not start or stopped with an error.
    #[error("error: {message}\n")]
    Serve {
        /// What went wrong and what to do.
        message: String,
    },
    /// The output could not be written.
    #[error("error: cannot write the output: {0}\n")]
    Output(#[from] std::io::Error),
}
