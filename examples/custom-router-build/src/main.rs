//! A router build of your own: the `kv-router` command line with one more policy.
//!
//! A catalog crate registers its policies when it is linked, so a build that links one needs
//! only `use my_catalog as _;` and `kv_router::run()`. A policy can also be registered by hand,
//! as below, before handing the registry to the command line:
//!
//! ```text
//! cargo run -p custom-router-build -- catalog describe session_warmup
//! cargo run -p custom-router-build -- check router.yaml
//! ```

use dynamo_kv_router::plugins::prelude::*;
use std::process::ExitCode;

// use my_catalog as _;   // link a catalog crate: its policies register themselves

/// Parameters of `session_warmup`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "dynamo_kv_router::schemars")]
struct WarmupConfig {
    /// Blocks of the session's context to warm.
    #[serde(default = "default_blocks")]
    blocks: usize,
}

fn default_blocks() -> usize {
    8
}

/// Asks the booked worker to warm the first blocks of the session's context.
struct SessionWarmup {
    config: WarmupConfig,
}

impl HintPolicy for SessionWarmup {
    fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        let Some(session) = context.session().session_id.as_deref() else {
            return Ok(Vec::new());
        };
        let blocks = context.sequence_hashes().len().min(self.config.blocks);
        Ok(vec![HintAction::new(
            "session.warmup",
            "1.0",
            serde_json::json!({ "session": session, "blocks": blocks }),
        )])
    }
}

fn main() -> ExitCode {
    let mut registry = match PolicyRegistry::linked() {
        Ok(registry) => registry,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let registered = registry.register_hint_policy(
        "session_warmup",
        Arc::new(|parameters| {
            let config: WarmupConfig = parameters.deserialize()?;
            Ok(HintPolicyConstructor::shared(SessionWarmup { config }))
        }),
        [],
    );
    let registered = registered.and_then(|()| {
        registry.describe(
            "session_warmup",
            "Asks the booked worker to warm the first blocks of the session's context.",
            Commitments::NONE,
        )
    });
    // Manual registrations describe their parameters by hand (`kv-router schema`, `catalog describe`).
    let registered = registered.and_then(|()| {
        registry.set_parameters_schema(
            "session_warmup",
            dynamo_kv_router::plugins::parameters_schema_of::<WarmupConfig>(),
        )
    });
    if let Err(error) = registered {
        eprintln!("error: {error}");
        return ExitCode::FAILURE;
    }
    kv_router::run_with_registry(&registry)
}
