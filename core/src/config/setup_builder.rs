//! Turns a parsed configuration and a policy registry into a [`RouterSetup`]: every startup
//! check, and each policy constructed once per role.

use super::error::{ConfigError, ConfigProblem};
use super::parameter_tree::{ParameterNode, ParameterValue};
use super::position::Position;
use super::schema::{HintEntry, Located, RoleEntry, RouterConfig, ShadowEntry};
use crate::identity::Role;
use crate::plugins::name;
use crate::plugins::registry::{ConstructedHintPolicy, ConstructedSelectionPolicy};
use crate::plugins::{
    Commitments, HintPolicyEntry, ParameterError, ParameterErrorKind, Partition, PolicyEntry,
    PolicyParameters, PolicyRegistry, RegistryError,
};
use crate::setup::{HintOrigin, RoleHint, RolePolicies, RouterMode, RouterSetup, ShadowPolicies};
use std::collections::{BTreeMap, HashMap};

/// Tokens per KV block when the configuration has no `block_size`.
pub const DEFAULT_BLOCK_SIZE: u32 = 16;

/// Settings given outside the file that take precedence over it, such as `--router-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConfigOverrides {
    /// Replaces the file's `router_mode` before any check runs.
    pub router_mode: Option<RouterMode>,
}

/// Checks `config` (read from the file named `file`) against the rules of the configuration
/// and builds every role's policies from `registry`. The first violated rule, in file order,
/// is the error.
pub fn build_setup(
    file: &str,
    config: &RouterConfig,
    registry: &PolicyRegistry,
    overrides: &ConfigOverrides,
) -> Result<RouterSetup, ConfigError> {
    let fail = |position, problem| ConfigError::new(file, position, None, problem);
    let file_mode = match &config.router_mode {
        Some(mode) => Some(mode.value.parse::<RouterMode>().map_err(|_| {
            fail(
                mode.position,
                ConfigProblem::UnknownRouterMode {
                    value: mode.value.clone(),
                },
            )
        })?),
        None => None,
    };
    let router_mode = overrides.router_mode.or(file_mode).unwrap_or_default();
    let block_size = match &config.block_size {
        Some(size) if size.value == 0 => {
            return Err(fail(size.position, ConfigProblem::ZeroBlockSize));
        }
        Some(size) => size.value,
        None => DEFAULT_BLOCK_SIZE,
    };
    let builder = Builder {
        file,
        registry,
        router_mode,
        block_size,
    };
    let mut roles = BTreeMap::new();
    if let Some(selection) = &config.worker_selection {
        for (role, entry) in selection.value.roles() {
            roles.insert(role, builder.role(role, entry)?);
        }
    }
    if roles.is_empty() && router_mode == RouterMode::Kv {
        let position = config
            .worker_selection
            .as_ref()
            .map_or(Position::new(1, 1), |selection| selection.position);
        return Err(fail(position, ConfigProblem::NoRoles));
    }
    Ok(RouterSetup {
        router_mode,
        block_size,
        roles,
    })
}

struct Builder<'a> {
    file: &'a str,
    registry: &'a PolicyRegistry,
    router_mode: RouterMode,
    block_size: u32,
}

impl Builder<'_> {
    fn error(&self, position: Position, role: Role, problem: ConfigProblem) -> ConfigError {
        ConfigError::new(self.file, position, Some(role), problem)
    }

    /// The error for a `type` (at `path`) that the registry does not know as the kind asked for.
    fn unknown_policy(
        &self,
        role: Role,
        policy_type: &Located<String>,
        path: &str,
        source: RegistryError,
    ) -> ConfigError {
        let problem = ConfigProblem::UnknownPolicy {
            path: path.to_owned(),
            source,
        };
        self.error(policy_type.position, role, problem)
    }

    /// Builds one role's policies and its shadows, checking each startup rule in turn.
    fn role(&self, role: Role, entry: &Located<RoleEntry>) -> Result<RolePolicies, ConfigError> {
        let path = format!("worker_selection.{role}");
        let mut policies = self.policies(role, &path, entry)?;
        if let Some(list) = &entry.value.shadow {
            policies.shadows = self.shadows(role, &path, list)?;
        }
        Ok(policies)
    }

    /// The role's shadows, each built as a role entry is. Rules: shadows run on the KV path
    /// only, and their names (a `name`, else the type) are valid and unique in the role.
    fn shadows(
        &self,
        role: Role,
        path: &str,
        list: &Located<Vec<Located<ShadowEntry>>>,
    ) -> Result<Vec<ShadowPolicies>, ConfigError> {
        if self.router_mode != RouterMode::Kv && !list.value.is_empty() {
            return Err(self.error(
                list.position,
                role,
                ConfigProblem::ShadowOutsideKvMode {
                    path: format!("{path}.shadow"),
                    mode: self.router_mode,
                },
            ));
        }
        let mut shadows: Vec<ShadowPolicies> = Vec::with_capacity(list.value.len());
        let mut paths: Vec<String> = Vec::with_capacity(list.value.len());
        for (index, item) in list.value.iter().enumerate() {
            let item_path = format!("{path}.shadow[{index}]");
            let (name, position) = match &item.value.name {
                Some(name) => {
                    name::check_syntax(&name.value).map_err(|problem| {
                        self.error(
                            name.position,
                            role,
                            ConfigProblem::MalformedShadowName {
                                path: format!("{item_path}.name"),
                                name: name.value.clone(),
                                problem,
                            },
                        )
                    })?;
                    (name.value.clone(), name.position)
                }
                None => (item.value.policies.policy_type.value.clone(), item.position),
            };
            if let Some(first) = shadows.iter().position(|shadow| shadow.name == name) {
                return Err(self.error(
                    position,
                    role,
                    ConfigProblem::DuplicateShadowName {
                        path: item_path,
                        name,
                        other: paths[first].clone(),
                    },
                ));
            }
            let entry = Located {
                position: item.position,
                value: item.value.policies.clone(),
            };
            let policies = self.policies(role, &item_path, &entry)?;
            tracing::debug!(%role, shadow = %name, policy = %policies.selection_type, "constructed a shadow");
            shadows.push(ShadowPolicies { name, policies });
            paths.push(item_path);
        }
        Ok(shadows)
    }

    /// Builds the selection and hint policies of the entry at `path` (a role, or one of its
    /// shadows).
    fn policies(
        &self,
        role: Role,
        path: &str,
        entry: &Located<RoleEntry>,
    ) -> Result<RolePolicies, ConfigError> {
        let path = path.to_owned();
        let partition = Partition {
            role,
            block_size: self.block_size,
        };
        let selection = self.selection(role, &path, entry, &partition)?;
        let hints = match &entry.value.hints {
            Some(list) => self.listed_hints(role, &path, list, &partition)?,
            None if self.router_mode == RouterMode::Kv => {
                self.default_hints(role, &path, entry, &partition)?
            }
            None => Vec::new(),
        };
        if self.router_mode == RouterMode::Kv
            && selection.commitments.contains(Commitments::KV_COPY)
        {
            self.check_one_kv_copy_sender(role, &path, entry, &hints)?;
        }
        Ok(RolePolicies::new(
            entry.value.policy_type.value.clone(),
            selection,
            hints,
        ))
    }

    /// The role's worker-selection policy: a linked selection type, built from its parameters.
    fn selection(
        &self,
        role: Role,
        path: &str,
        entry: &Located<RoleEntry>,
        partition: &Partition,
    ) -> Result<ConstructedSelectionPolicy, ConfigError> {
        let entry_value = &entry.value;
        let policy_type = &entry_value.policy_type;
        let type_path = if policy_type.position == entry.position {
            path.to_owned()
        } else {
            format!("{path}.type")
        };
        let policy = self
            .registry
            .worker_selection_policy(&policy_type.value)
            .map_err(|source| self.unknown_policy(role, policy_type, &type_path, source))?;
        let selection = self.build_from_parameters(
            role,
            path,
            entry_value.parameters.as_ref(),
            policy_type.position,
            policy,
            |parameters| policy.construct_worker_selection(parameters, partition),
        )?;
        tracing::debug!(%role, policy = %policy_type.value, commitments = %selection.commitments, "constructed the worker-selection policy");
        Ok(selection)
    }

    /// Rule: a selection policy that commits KV copies needs exactly one hint that sends them.
    fn check_one_kv_copy_sender(
        &self,
        role: Role,
        path: &str,
        entry: &Located<RoleEntry>,
        hints: &[RoleHint],
    ) -> Result<(), ConfigError> {
        let senders: Vec<&RoleHint> = hints
            .iter()
            .filter(|hint| hint.constructed.commitments.contains(Commitments::KV_COPY))
            .collect();
        let (position, site_path) = match &entry.value.hints {
            Some(list) => (list.position, format!("{path}.hints")),
            None => (entry.position, path.to_owned()),
        };
        let selection = entry.value.policy_type.value.clone();
        let problem = match senders.len() {
            1 => return Ok(()),
            0 => ConfigProblem::MissingKvCopySender {
                path: site_path,
                selection,
                available: self.kv_copy_senders(),
            },
            count => ConfigProblem::SeveralKvCopySenders {
                path: site_path,
                selection,
                count,
                senders: senders
                    .iter()
                    .map(|hint| format!("`{}`", hint.label()))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
        };
        Err(self.error(position, role, problem))
    }

    fn kv_copy_senders(&self) -> String {
        let senders: Vec<String> = self
            .registry
            .entries()
            .filter(|entry| {
                entry.kind == crate::plugins::PolicyKind::Hint
                    && entry.commitments.contains(Commitments::KV_COPY)
            })
            .map(|entry| format!("`{}`", entry.name))
            .collect();
        if senders.is_empty() {
            "no linked hint policy declares KV_COPY: link one, such as `kv_fetch`".to_owned()
        } else {
            format!("linked: {}", senders.join(", "))
        }
    }

    /// The hints a role lists, in order, each checked and built.
    fn listed_hints(
        &self,
        role: Role,
        path: &str,
        list: &Located<Vec<Located<HintEntry>>>,
        partition: &Partition,
    ) -> Result<Vec<RoleHint>, ConfigError> {
        self.check_hints_allowed(role, path, list)?;
        let mut type_counts: HashMap<&str, usize> = HashMap::new();
        for item in &list.value {
            *type_counts
                .entry(item.value.policy_type.value.as_str())
                .or_default() += 1;
        }
        let mut labels: Vec<(&str, String)> = Vec::new();
        let mut hints = Vec::with_capacity(list.value.len());
        for (index, item) in list.value.iter().enumerate() {
            let entry_path = format!("{path}.hints[{index}]");
            let policy_type = &item.value.policy_type;
            let policy = self
                .registry
                .hint_policy(&policy_type.value)
                .map_err(|source| {
                    self.unknown_policy(role, policy_type, &format!("{entry_path}.type"), source)
                })?;
            let count = type_counts
                .get(policy_type.value.as_str())
                .copied()
                .unwrap_or(1);
            let (label, label_position) = self.hint_label(role, &entry_path, item, count)?;
            self.check_label_unique(role, &entry_path, label, label_position, &labels)?;
            labels.push((label, entry_path.clone()));
            hints.push(self.listed_hint(role, &entry_path, item, policy, partition)?);
        }
        Ok(hints)
    }

    /// Rule: hints run only on the KV path, so other modes list none.
    fn check_hints_allowed(
        &self,
        role: Role,
        path: &str,
        list: &Located<Vec<Located<HintEntry>>>,
    ) -> Result<(), ConfigError> {
        if self.router_mode == RouterMode::Kv || list.value.is_empty() {
            return Ok(());
        }
        let count = list.value.len();
        Err(self.error(
            list.position,
            role,
            ConfigProblem::HintsOutsideKvMode {
                path: format!("{path}.hints"),
                count,
                policies: if count == 1 {
                    "policy is"
                } else {
                    "policies are"
                },
                mode: self.router_mode,
            },
        ))
    }

    /// The hint's label and where it is written. Rules: a `name` is a valid name, and a type
    /// listed `type_count` > 1 times needs a `name` on each entry.
    fn hint_label<'h>(
        &self,
        role: Role,
        entry_path: &str,
        item: &'h Located<HintEntry>,
        type_count: usize,
    ) -> Result<(&'h str, Position), ConfigError> {
        let policy_type = &item.value.policy_type;
        match &item.value.name {
            Some(name) => {
                name::check_syntax(&name.value).map_err(|problem| {
                    self.error(
                        name.position,
                        role,
                        ConfigProblem::MalformedHintName {
                            path: format!("{entry_path}.name"),
                            name: name.value.clone(),
                            problem,
                        },
                    )
                })?;
                Ok((name.value.as_str(), name.position))
            }
            None if type_count > 1 => Err(self.error(
                item.position,
                role,
                ConfigProblem::UnnamedRepeatedHint {
                    path: entry_path.to_owned(),
                    policy: policy_type.value.clone(),
                    count: type_count,
                },
            )),
            None => Ok((policy_type.value.as_str(), item.position)),
        }
    }

    /// Rule: no two hints of a role share a label.
    fn check_label_unique(
        &self,
        role: Role,
        entry_path: &str,
        label: &str,
        position: Position,
        labels: &[(&str, String)],
    ) -> Result<(), ConfigError> {
        match labels.iter().find(|(existing, _)| *existing == label) {
            Some((_, other)) => Err(self.error(
                position,
                role,
                ConfigProblem::DuplicateHintName {
                    path: entry_path.to_owned(),
                    name: label.to_owned(),
                    other: other.clone(),
                },
            )),
            None => Ok(()),
        }
    }

    /// A listed hint built from its parameters.
    fn listed_hint(
        &self,
        role: Role,
        entry_path: &str,
        item: &Located<HintEntry>,
        policy: &HintPolicyEntry,
        partition: &Partition,
    ) -> Result<RoleHint, ConfigError> {
        let hint = &item.value;
        let constructed = self.build_from_parameters(
            role,
            entry_path,
            hint.parameters.as_ref(),
            item.position,
            policy,
            |parameters| policy.construct_hint(parameters, partition),
        )?;
        Ok(self.role_hint(
            role,
            policy,
            hint.name.as_ref(),
            HintOrigin::Listed,
            constructed,
        ))
    }

    /// The hints that run by default under the role's selection policy (no `hints` key).
    fn default_hints(
        &self,
        role: Role,
        path: &str,
        entry: &Located<RoleEntry>,
        partition: &Partition,
    ) -> Result<Vec<RoleHint>, ConfigError> {
        let selection_type = entry.value.policy_type.value.as_str();
        let mut hints = Vec::new();
        for policy in self.registry.default_hint_policies(selection_type) {
            let constructed = policy
                .construct_hint(PolicyParameters::empty(), partition)
                .map_err(|error| {
                    let problem = ConfigProblem::DefaultHintRejected {
                        path: path.to_owned(),
                        policy: policy.name.clone(),
                        selection: selection_type.to_owned(),
                        error,
                    };
                    self.error(entry.position, role, problem)
                })?;
            hints.push(self.role_hint(role, policy, None, HintOrigin::Default, constructed));
        }
        Ok(hints)
    }

    fn role_hint(
        &self,
        role: Role,
        policy: &PolicyEntry,
        name: Option<&Located<String>>,
        origin: HintOrigin,
        constructed: ConstructedHintPolicy,
    ) -> RoleHint {
        tracing::debug!(%role, policy = %policy.name, ?origin, commitments = %constructed.commitments, "constructed a hint policy");
        RoleHint {
            policy_type: policy.name.clone(),
            name: name.map(|name| name.value.clone()),
            origin,
            constructed,
        }
    }

    /// The entry's parameters for its provider; `parameters` must be a mapping (or empty).
    fn parameters(
        &self,
        role: Role,
        path: &str,
        node: Option<&ParameterNode>,
    ) -> Result<PolicyParameters, ConfigError> {
        let Some(node) = node else {
            return Ok(PolicyParameters::empty());
        };
        match &node.value {
            ParameterValue::Mapping(_) => Ok(PolicyParameters::new(node.to_json())),
            ParameterValue::Null => Ok(PolicyParameters::empty()),
            other => Err(self.error(
                node.position,
                role,
                ConfigProblem::ParametersNotMapping {
                    path: path.to_owned(),
                    found: other.kind(),
                },
            )),
        }
    }

    /// Reads the parameters of the entry at `entry_path` and builds its policy from them; a
    /// provider's rejection is reported at the offending field when it can be found.
    fn build_from_parameters<T>(
        &self,
        role: Role,
        entry_path: &str,
        node: Option<&ParameterNode>,
        fallback: Position,
        policy: &PolicyEntry,
        build: impl FnOnce(PolicyParameters) -> Result<T, ParameterError>,
    ) -> Result<T, ConfigError> {
        let parameters_path = format!("{entry_path}.parameters");
        let parameters = self.parameters(role, &parameters_path, node)?;
        build(parameters).map_err(|error| {
            // A bad value points at the value; a field the policy does not read, at its key.
            let position = node.map_or(fallback, |node| match error.kind() {
                ParameterErrorKind::Invalid => node.position_of(error.path()),
                ParameterErrorKind::UnknownField => node.field_position_of(error.path()),
            });
            self.error(
                position,
                role,
                ConfigProblem::Parameters {
                    error: error.under(&parameters_path),
                    policy: policy.name.clone(),
                },
            )
        })
    }
}
