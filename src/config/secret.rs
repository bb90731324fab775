//! Secret references: a literal value, `env:NAME` or `file:/path`.

use secrecy::{ExposeSecret, SecretString};

/// Resolves one reference. The error message never contains the secret itself.
pub fn resolve_secret(reference: &SecretString) -> Result<SecretString, String> {
    let raw = reference.expose_secret();
    if let Some(var) = raw.strip_prefix("env:") {
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(v.into()),
            Ok(_) => Err(format!("names environment variable {var}, which is empty")),
            Err(_) => Err(format!(
                "names environment variable {var}, which is not set"
            )),
        }
    } else if let Some(path) = raw.strip_prefix("file:") {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("names file {path}, which cannot be read: {e}"))?;
        // Files written by editors and `echo` end with a newline that is not part of the secret.
        let trimmed = text.trim_end_matches(['\n', '\r']);
        if trimmed.is_empty() {
            return Err(format!("names file {path}, which is empty"));
        }
        Ok(trimmed.to_owned().into())
    } else if raw.is_empty() {
        Err("is empty".into())
    } else {
        Ok(reference.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_literal_file_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        std::fs::write(&path, "from-file\n").unwrap();
        let r = |s: &str| resolve_secret(&SecretString::from(s.to_owned()));
        assert_eq!(r("lit").unwrap().expose_secret(), "lit");
        assert_eq!(
            r(&format!("file:{}", path.display()))
                .unwrap()
                .expose_secret(),
            "from-file"
        );
        assert!(r("env:HOOKGATE_TEST_SURELY_UNSET_VAR").is_err());
        assert!(r("").is_err());
        assert!(r("file:/nonexistent/hookgate").is_err());
    }
}
