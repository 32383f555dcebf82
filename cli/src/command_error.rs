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
    /// The replay ran, but the simulated workers and the router disagree: a bug in this
    /// program, not in the input.
    #[error("error: {message}\n")]
    Inconsistent {
        /// Which invariants failed.
        message: String,
    },
    /// The output could not be written.
    #[error("error: cannot write the output: {0}\n")]
    Output(#[from] std::io::Error),
}

impl CommandError {
    /// The exit status: 1 ([`EXIT_BUILD_PROBLEM`](crate::EXIT_BUILD_PROBLEM)) when the program
    /// itself is at fault, 2 ([`EXIT_INVALID_INPUT`](crate::EXIT_INVALID_INPUT)) otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::Inconsistent { .. } => crate::EXIT_BUILD_PROBLEM,
            _ => crate::EXIT_INVALID_INPUT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_of_the_program_exits_1_and_bad_input_exits_2() {
        let inconsistent = CommandError::Inconsistent {
            message: "x".into(),
        };
        assert_eq!(inconsistent.exit_code(), 1);
        let replay = CommandError::Replay {
            message: "x".into(),
        };
        assert_eq!(replay.exit_code(), 2);
        let config = CommandError::Config {
            rendered: "x".into(),
        };
        assert_eq!(config.exit_code(), 2);
    }
}
