//! Package names and Package Refs (`bundle_package.md` §6).
//!
//! A name is `name` or `@scope/name`; each part is 1 to 63 lowercase
//! ASCII letters, digits and `-`, starting with a letter and not ending
//! with `-`. These rules are also what keeps a name safe as a path: the
//! registry and the installer turn names into folders, so a name can
//! never hold `..`, a separator other than the one `/` after a scope, or
//! a character that folds into another on a case-insensitive disk.

use crate::error::PackageError;
use goondan_config::BASE_PACKAGE;

/// The longest part (scope or name).
const MAX_PART: usize = 63;

/// Checks `name` against the naming rules.
pub fn check_name(name: &str) -> Result<(), PackageError> {
    let invalid = |problem: &str| PackageError::NameInvalid {
        name: name.to_string(),
        problem: problem.to_string(),
    };
    let parts: Vec<&str> = match name.strip_prefix('@') {
        Some(scoped) => match scoped.split_once('/') {
            Some((scope, rest)) => vec![scope, rest],
            None => return Err(invalid("a scoped name is `@scope/name`")),
        },
        None => vec![name],
    };
    for part in parts {
        if part.is_empty() || part.len() > MAX_PART {
            return Err(invalid("each part has 1 to 63 characters"));
        }
        if !part.starts_with(|c: char| c.is_ascii_lowercase()) {
            return Err(invalid("each part starts with a lowercase letter"));
        }
        if part.ends_with('-') {
            return Err(invalid("a part may not end with `-`"));
        }
        if !part
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(invalid(
                "only lowercase letters, digits and `-` are allowed",
            ));
        }
    }
    Ok(())
}

/// Checks that `name` may come from a registry: valid, and not the
/// built-in `@goondan/base`, which no registry can replace.
pub fn check_registry_name(name: &str) -> Result<(), PackageError> {
    check_name(name)?;
    if name == BASE_PACKAGE {
        return Err(PackageError::NameInvalid {
            name: name.to_string(),
            problem: format!("{BASE_PACKAGE} is built into gdn and cannot come from a registry"),
        });
    }
    Ok(())
}

/// The last part of a name (`tools` for `@acme/tools`), used in tarball
/// file names.
pub fn bare_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// A Package Ref as typed: `@scope/name`, `name@1.2.0`, `@scope/name@^1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageRef {
    /// The package name.
    pub name: String,
    /// The version, range or dist-tag after `@`, if any.
    pub selector: Option<String>,
}

impl PackageRef {
    /// Parses and checks a Package Ref.
    pub fn parse(text: &str) -> Result<PackageRef, PackageError> {
        let (name, selector) = match text.rfind('@') {
            Some(0) | None => (text, None),
            Some(at) => (&text[..at], Some(text[at + 1..].to_string())),
        };
        check_registry_name(name)?;
        if selector.as_deref() == Some("") {
            return Err(PackageError::VersionInvalid {
                name: name.to_string(),
                text: String::new(),
                what: "range",
            });
        }
        Ok(PackageRef {
            name: name.to_string(),
            selector,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rules() {
        for good in ["tools", "@acme/tools", "a1-b2", "@a/b"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Tools",
            "@acme",
            "@acme/",
            "@/x",
            "../x",
            "@acme/../x",
            "a/b",
            "-a",
            "a-",
            "a_b",
            "a.b",
            "@acme/tools/x",
            "1abc",
            "tööls",
        ] {
            assert_eq!(
                check_name(bad).unwrap_err().code(),
                "E_PKG_NAME_INVALID",
                "{bad}"
            );
        }
        assert!(check_name(&"a".repeat(64)).is_err());
        assert!(check_registry_name("@goondan/base").is_err());
    }

    #[test]
    fn refs_split_name_and_selector() {
        let cases = [
            ("@acme/tools", "@acme/tools", None),
            ("@acme/tools@1.2.0", "@acme/tools", Some("1.2.0")),
            ("tools@^1", "tools", Some("^1")),
            ("tools@latest", "tools", Some("latest")),
        ];
        for (text, name, selector) in cases {
            let parsed = PackageRef::parse(text).unwrap();
            assert_eq!(parsed.name, name);
            assert_eq!(parsed.selector.as_deref(), selector);
        }
        assert!(PackageRef::parse("tools@").is_err());
        assert_eq!(bare_name("@acme/tools"), "tools");
    }
}
