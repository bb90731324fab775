//! The provider definitions available to sources: those built into the binary, plus any
//! in the configured `providers_dir`, which add to or replace them by name.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::definition::{parse_definition, DefinitionError, ProviderDefinition};

/// Definitions shipped in `providers/`, compiled in so the binary needs no data files.
const EMBEDDED: &[(&str, &str)] = &[
    (
        "providers/stripe.toml",
        include_str!("../../providers/stripe.toml"),
    ),
    (
        "providers/github.toml",
        include_str!("../../providers/github.toml"),
    ),
    (
        "providers/standard-webhooks.toml",
        include_str!("../../providers/standard-webhooks.toml"),
    ),
    (
        "providers/shopify.toml",
        include_str!("../../providers/shopify.toml"),
    ),
    (
        "providers/slack.toml",
        include_str!("../../providers/slack.toml"),
    ),
    (
        "providers/hmac-sha256.toml",
        include_str!("../../providers/hmac-sha256.toml"),
    ),
];

#[derive(Debug, Clone, Default)]
pub struct ProviderRegistry {
    by_name: BTreeMap<String, Arc<ProviderDefinition>>,
}

impl ProviderRegistry {
    pub fn builtin() -> Result<Self, DefinitionError> {
        let mut registry = Self::default();
        for (origin, text) in EMBEDDED {
            registry.add(parse_definition(origin, text)?);
        }
        Ok(registry)
    }

    /// Built-in definitions, then every `*.toml` in `dir` (sorted by file name).
    pub fn load(dir: Option<&Path>) -> Result<Self, DefinitionError> {
        let mut registry = Self::builtin()?;
        let Some(dir) = dir else {
            return Ok(registry);
        };
        let io = |source| DefinitionError::Io {
            path: dir.display().to_string(),
            source,
        };
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(io)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(io)?
            .into_iter()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).map_err(|source| DefinitionError::Io {
                path: path.display().to_string(),
                source,
            })?;
            registry.add(parse_definition(&path.display().to_string(), &text)?);
        }
        Ok(registry)
    }

    fn add(&mut self, def: ProviderDefinition) {
        let def = Arc::new(def);
        // A replacement drops the aliases of the definition it replaces.
        self.by_name.retain(|_, d| d.name != def.name);
        for alias in &def.aliases {
            self.by_name.insert(alias.clone(), def.clone());
        }
        self.by_name.insert(def.name.clone(), def);
    }

    pub fn get(&self, name: &str) -> Option<&Arc<ProviderDefinition>> {
        self.by_name.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}
