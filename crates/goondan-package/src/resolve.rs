//! Dependency resolution (`bundle_package.md` §7): from the bundle's
//! ranges and the registry's metadata to one exact version per package.
//!
//! One version per package name, the highest that satisfies every range
//! that asks for it. When no single version satisfies them all, resolution
//! stops with [`PackageError::VersionConflict`] naming every requirer;
//! it never picks one silently (§7.2). A cycle is
//! [`PackageError::CircularDependency`] (§7.1).
//!
//! The resolver is pure: it asks for metadata it does not have
//! ([`Step::NeedMetadata`]) and the caller fetches it, so the rules are
//! tested without a registry.

use crate::error::PackageError;
use crate::metadata::PackageMetadata;
use goondan_config::lockfile::{package_key, LockedPackage, Lockfile};
use std::collections::{BTreeMap, BTreeSet};

/// Who asks for a package: the bundle, or another package's version.
const ROOT: &str = "the bundle";

/// A resolved tree: package name to its exact version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// Name to version.
    pub versions: BTreeMap<String, semver::Version>,
}

/// What [`resolve`] needs next, or its answer.
#[derive(Debug)]
pub enum Step {
    /// Fetch these packages' metadata and call again.
    NeedMetadata(Vec<String>),
    /// The tree.
    Done(Resolution),
}

/// One requirement: who asks for which range.
struct Requirement {
    requirer: String,
    range_text: String,
    range: semver::VersionReq,
}

fn parse_range(name: &str, text: &str) -> Result<semver::VersionReq, PackageError> {
    semver::VersionReq::parse(text).map_err(|_| PackageError::VersionInvalid {
        name: name.to_string(),
        text: text.to_string(),
        what: "range",
    })
}

/// Resolves `root` (name to range) against `known` metadata.
pub fn resolve(
    root: &BTreeMap<String, String>,
    known: &BTreeMap<String, PackageMetadata>,
) -> Result<Step, PackageError> {
    let mut chosen: BTreeMap<String, semver::Version> = BTreeMap::new();
    // Each round chooses versions for every package the current choice
    // reaches; a new choice can change what is reached, so repeat until
    // nothing changes. Each round only moves to versions that satisfy
    // more of the graph, and a bound stops a pathological registry.
    for _ in 0..64 {
        let requirements = requirements(root, &chosen, known)?;
        let missing: Vec<String> = requirements
            .keys()
            .filter(|name| !known.contains_key(*name))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Ok(Step::NeedMetadata(missing));
        }
        let mut next = BTreeMap::new();
        for (name, asks) in &requirements {
            next.insert(name.clone(), choose(name, asks, &known[name])?);
        }
        if next == chosen {
            check_acyclic(&chosen, known)?;
            return Ok(Step::Done(Resolution { versions: chosen }));
        }
        chosen = next;
    }
    Err(PackageError::VersionConflict {
        name: root.keys().next().cloned().unwrap_or_default(),
        requirements: vec!["the ranges do not settle on one version per package".into()],
    })
}

/// Every requirement reachable from the root through `chosen`.
fn requirements(
    root: &BTreeMap<String, String>,
    chosen: &BTreeMap<String, semver::Version>,
    known: &BTreeMap<String, PackageMetadata>,
) -> Result<BTreeMap<String, Vec<Requirement>>, PackageError> {
    let mut out: BTreeMap<String, Vec<Requirement>> = BTreeMap::new();
    let mut queue: Vec<(String, String, String)> = root
        .iter()
        .map(|(name, range)| (ROOT.to_string(), name.clone(), range.clone()))
        .collect();
    let mut expanded = BTreeSet::new();
    while let Some((requirer, name, range_text)) = queue.pop() {
        crate::name::check_registry_name(&name)?;
        let range = parse_range(&name, &range_text)?;
        out.entry(name.clone()).or_default().push(Requirement {
            requirer,
            range_text,
            range,
        });
        let Some(version) = chosen.get(&name) else {
            continue;
        };
        if !expanded.insert(name.clone()) {
            continue;
        }
        let Some(metadata) = known
            .get(&name)
            .and_then(|metadata| metadata.versions.get(&version.to_string()))
        else {
            continue;
        };
        for (dependency, range) in &metadata.dependencies {
            queue.push((
                package_key(&name, &version.to_string()),
                dependency.clone(),
                range.clone(),
            ));
        }
    }
    Ok(out)
}

/// The highest published version every requirement accepts.
fn choose(
    name: &str,
    asks: &[Requirement],
    metadata: &PackageMetadata,
) -> Result<semver::Version, PackageError> {
    let published: Vec<semver::Version> = metadata
        .versions
        .keys()
        .filter_map(|text| semver::Version::parse(text).ok())
        .collect();
    if let Some(best) = published
        .iter()
        .filter(|version| asks.iter().all(|ask| ask.range.matches(version)))
        .max()
    {
        return Ok(best.clone());
    }
    let mut distinct: Vec<&str> = asks.iter().map(|ask| ask.range_text.as_str()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let each_alone_matches = asks
        .iter()
        .all(|ask| published.iter().any(|version| ask.range.matches(version)));
    if distinct.len() > 1 && each_alone_matches {
        return Err(PackageError::VersionConflict {
            name: name.to_string(),
            requirements: asks
                .iter()
                .map(|ask| format!("{} requires {name}@{}", ask.requirer, ask.range_text))
                .collect(),
        });
    }
    let unmet = asks
        .iter()
        .find(|ask| !published.iter().any(|version| ask.range.matches(version)))
        .unwrap_or(&asks[0]);
    Err(PackageError::NoMatchingVersion {
        name: name.to_string(),
        range: unmet.range_text.clone(),
        available: if published.is_empty() {
            "none".into()
        } else {
            published
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        },
    })
}

/// Refuses a cycle among the chosen versions.
fn check_acyclic(
    chosen: &BTreeMap<String, semver::Version>,
    known: &BTreeMap<String, PackageMetadata>,
) -> Result<(), PackageError> {
    let edges = |name: &str| -> Vec<String> {
        chosen
            .get(name)
            .and_then(|version| known.get(name)?.versions.get(&version.to_string()))
            .map(|metadata| metadata.dependencies.keys().cloned().collect())
            .unwrap_or_default()
    };
    // Iterative depth-first search with an explicit path.
    let mut done = BTreeSet::new();
    for start in chosen.keys() {
        if done.contains(start) {
            continue;
        }
        let mut path: Vec<(String, Vec<String>)> = vec![(start.clone(), edges(start))];
        while let Some((_, pending)) = path.last_mut() {
            match pending.pop() {
                Some(next) => {
                    if let Some(position) = path.iter().position(|(name, _)| *name == next) {
                        let mut cycle: Vec<String> = path[position..]
                            .iter()
                            .map(|(name, _)| name.clone())
                            .collect();
                        cycle.push(next);
                        return Err(PackageError::CircularDependency { cycle });
                    }
                    if !done.contains(&next) {
                        let next_edges = edges(&next);
                        path.push((next, next_edges));
                    }
                }
                None => {
                    if let Some((name, _)) = path.pop() {
                        done.insert(name);
                    }
                }
            }
        }
    }
    Ok(())
}

/// The lockfile of a resolution.
pub fn to_lockfile(resolution: &Resolution, known: &BTreeMap<String, PackageMetadata>) -> Lockfile {
    let mut lockfile = Lockfile::default();
    for (name, version) in &resolution.versions {
        let text = version.to_string();
        let Some(metadata) = known.get(name).and_then(|m| m.versions.get(&text)) else {
            continue;
        };
        let dependencies = metadata
            .dependencies
            .keys()
            .filter_map(|dependency| {
                resolution
                    .versions
                    .get(dependency)
                    .map(|version| (dependency.clone(), version.to_string()))
            })
            .collect();
        lockfile.packages.insert(
            package_key(name, &text),
            LockedPackage {
                version: text,
                resolved: metadata.dist.tarball.clone(),
                integrity: metadata.dist.integrity.clone(),
                dependencies,
            },
        );
    }
    lockfile
}

/// Whether `lockfile` already answers `root`: every root range accepts a
/// locked version and every locked edge has an entry. Then installing
/// needs no metadata at all, which is what makes a lockfile install
/// reproducible.
pub fn lockfile_satisfies(
    lockfile: &Lockfile,
    root: &BTreeMap<String, String>,
) -> Result<bool, PackageError> {
    for (name, range_text) in root {
        let range = parse_range(name, range_text)?;
        let accepted = lockfile.versions_of(name).any(|locked| {
            semver::Version::parse(&locked.version).is_ok_and(|version| range.matches(&version))
        });
        if !accepted {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{Dist, VersionMetadata};

    /// `(name, version, [(dependency, range)])`, one per published version.
    type Published<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

    fn registry(entries: &[Published<'_>]) -> BTreeMap<String, PackageMetadata> {
        let mut known: BTreeMap<String, PackageMetadata> = BTreeMap::new();
        for (name, version, dependencies) in entries {
            let metadata = known
                .entry(name.to_string())
                .or_insert_with(|| PackageMetadata {
                    name: name.to_string(),
                    description: String::new(),
                    access: "public".into(),
                    versions: BTreeMap::new(),
                    dist_tags: BTreeMap::new(),
                });
            metadata.versions.insert(
                version.to_string(),
                VersionMetadata {
                    version: version.to_string(),
                    dependencies: dependencies
                        .iter()
                        .map(|(n, r)| (n.to_string(), r.to_string()))
                        .collect(),
                    deprecated: String::new(),
                    dist: Dist {
                        tarball: format!("http://127.0.0.1/{name}-{version}.tgz"),
                        shasum: String::new(),
                        integrity: format!("sha512-{name}{version}"),
                    },
                },
            );
        }
        known
    }

    fn root(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(n, r)| (n.to_string(), r.to_string()))
            .collect()
    }

    fn done(step: Step) -> BTreeMap<String, String> {
        match step {
            Step::Done(resolution) => resolution
                .versions
                .into_iter()
                .map(|(n, v)| (n, v.to_string()))
                .collect(),
            Step::NeedMetadata(names) => panic!("needs {names:?}"),
        }
    }

    #[test]
    fn picks_the_highest_version_every_range_accepts() {
        let known = registry(&[
            ("app-kit", "1.0.0", &[("util", "^0.5.0")]),
            ("app-kit", "1.1.0", &[("util", "^0.5.1")]),
            ("other", "2.0.0", &[("util", "~0.5.0")]),
            ("util", "0.5.0", &[]),
            ("util", "0.5.2", &[]),
            ("util", "0.6.0", &[]),
        ]);
        let versions =
            done(resolve(&root(&[("app-kit", "^1.0.0"), ("other", "^2")]), &known).unwrap());
        assert_eq!(versions["app-kit"], "1.1.0");
        assert_eq!(versions["util"], "0.5.2");
        let lockfile = to_lockfile(
            &Resolution {
                versions: versions
                    .iter()
                    .map(|(n, v)| (n.clone(), semver::Version::parse(v).unwrap()))
                    .collect(),
            },
            &known,
        );
        assert_eq!(
            lockfile.packages["app-kit@1.1.0"].dependencies["util"],
            "0.5.2"
        );
        assert!(lockfile_satisfies(&lockfile, &root(&[("app-kit", "^1.0.0")])).unwrap());
        assert!(!lockfile_satisfies(&lockfile, &root(&[("app-kit", "^2.0.0")])).unwrap());
    }

    #[test]
    fn conflicting_ranges_stop_with_a_report() {
        // §7.2's example: base needs core-utils ^0.5, toolkit needs ^1.0.
        let known = registry(&[
            ("base-kit", "1.0.0", &[("core-utils", "^0.5.0")]),
            ("toolkit", "2.0.0", &[("core-utils", "^1.0.0")]),
            ("core-utils", "0.5.2", &[]),
            ("core-utils", "1.0.0", &[]),
        ]);
        let error = resolve(&root(&[("base-kit", "^1"), ("toolkit", "^2")]), &known).unwrap_err();
        assert_eq!(error.code(), "E_PKG_VERSION_CONFLICT");
        let text = error.to_string();
        assert!(
            text.contains("base-kit@1.0.0 requires core-utils@^0.5.0"),
            "{text}"
        );
        assert!(
            text.contains("toolkit@2.0.0 requires core-utils@^1.0.0"),
            "{text}"
        );
    }

    #[test]
    fn cycles_and_missing_versions_are_refused() {
        let known = registry(&[
            ("a", "1.0.0", &[("b", "^1")]),
            ("b", "1.0.0", &[("a", "^1")]),
        ]);
        let error = resolve(&root(&[("a", "^1")]), &known).unwrap_err();
        assert_eq!(error.code(), "E_PKG_CIRCULAR_DEP");
        assert!(error.to_string().contains("a -> b -> a"), "{error}");
        let error = resolve(&root(&[("b", "^2")]), &known).unwrap_err();
        assert_eq!(error.code(), "E_PKG_NOT_FOUND");
        assert!(matches!(
            resolve(&root(&[("c", "^1")]), &known).unwrap(),
            Step::NeedMetadata(names) if names == ["c"]
        ));
    }
}
