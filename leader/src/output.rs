//! Proposals written out: one YAML stream (`-`, stdout) or one file per proposal in a
//! directory. Used by offline `learn` and by `run --output`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use ne_crds::WorkloadNetworkPolicyProposal;

/// YAML of proposals: one document each, separated by `---`.
pub fn to_yaml_stream(proposals: &[WorkloadNetworkPolicyProposal]) -> anyhow::Result<String> {
    let mut out = String::new();
    for p in proposals {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(p).context("cannot serialise a proposal as YAML")?);
    }
    Ok(out)
}

/// Writes proposals to `output`: a directory (one file each) or `-` (stdout).
pub fn write_proposals(
    proposals: &[WorkloadNetworkPolicyProposal],
    output: &str,
) -> anyhow::Result<()> {
    if output == "-" {
        std::io::stdout()
            .lock()
            .write_all(to_yaml_stream(proposals)?.as_bytes())?;
        return Ok(());
    }
    let dir = Path::new(output);
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut namespaces_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in proposals {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let namespace = p.metadata.namespace.as_deref().unwrap_or_default();
        namespaces_of.entry(name).or_default().insert(namespace);
    }
    for p in proposals {
        let name = p
            .metadata
            .name
            .as_deref()
            .context("a proposal has no name")?;
        // Names are unique per namespace only: `deployment-api-ingress` may exist in two
        // namespaces. Those files get the namespace in front (a namespace has no dots),
        // so that neither overwrites the other.
        let file = match p.metadata.namespace.as_deref() {
            Some(ns) if namespaces_of.get(name).is_some_and(|s| s.len() > 1) => {
                format!("{ns}.{name}.yaml")
            }
            _ => format!("{name}.yaml"),
        };
        let path = dir.join(file);
        let yaml = serde_saphyr::to_string(p).context("cannot serialise a proposal as YAML")?;
        std::fs::write(&path, yaml).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
