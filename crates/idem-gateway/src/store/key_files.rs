//! The key files of `idem serve`: `--encryption-key-file` (the key ring that seals stored
//! responses) and `--digest-key-file` (the key of the digests in logs).
//!
//! Both are read once, at start-up; a file that cannot be used stops it with one line that
//! names the file and, for the key ring, the line.

use std::path::Path;

use base64::{Engine as _, engine::general_purpose::STANDARD};
use idem_core::{DIGEST_KEY_LEN, DigestKey, sealing::KeyRing};

use crate::error::KeyFileError;

/// Reads the key ring of `--encryption-key-file`.
pub(crate) fn key_ring(path: &Path) -> Result<KeyRing, KeyFileError> {
    read(path)?
        .parse()
        .map_err(|source| KeyFileError::EncryptionKeyFile {
            path: path.to_owned(),
            source,
        })
}

/// Reads the key of `--digest-key-file`: 32 bytes in standard base64, on one line.
pub(crate) fn digest_key(path: &Path) -> Result<DigestKey, KeyFileError> {
    let text = read(path)?;
    let invalid = |problem: String| KeyFileError::DigestKeyFile {
        path: path.to_owned(),
        problem,
    };
    let mut lines = text.lines().map(str::trim).filter(|line| !line.is_empty());
    let (Some(line), None) = (lines.next(), lines.next()) else {
        return Err(invalid(
            "expected one line: 32 random bytes in standard base64".into(),
        ));
    };
    let bytes = STANDARD
        .decode(line)
        .map_err(|_| invalid("the key is not standard base64".into()))?;
    let key: [u8; DIGEST_KEY_LEN] = bytes.as_slice().try_into().map_err(|_| {
        invalid(format!(
            "the key is {} bytes long; a digest key is {DIGEST_KEY_LEN} random bytes",
            bytes.len()
        ))
    })?;
    Ok(DigestKey::new(key))
}

fn read(path: &Path) -> Result<String, KeyFileError> {
    std::fs::read_to_string(path).map_err(|source| KeyFileError::ReadKeyFile {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_key_error(text: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digest.key");
        std::fs::write(&path, text).unwrap();
        let error = digest_key(&path).unwrap_err().to_string();
        error.replace(&path.display().to_string(), "PATH")
    }

    #[test]
    fn a_digest_key_is_32_bytes_of_base64_on_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digest.key");
        std::fs::write(&path, format!("{}\n", STANDARD.encode([3; 32]))).unwrap();
        assert_eq!(digest_key(&path).unwrap(), DigestKey::new([3; 32]));

        assert_eq!(
            digest_key_error(""),
            "invalid digest key file PATH: expected one line: 32 random bytes in standard base64"
        );
        assert_eq!(
            digest_key_error(&format!("{0}\n{0}\n", STANDARD.encode([3; 32]))),
            "invalid digest key file PATH: expected one line: 32 random bytes in standard base64"
        );
        assert_eq!(
            digest_key_error("not*base64"),
            "invalid digest key file PATH: the key is not standard base64"
        );
        assert_eq!(
            digest_key_error(&STANDARD.encode([3; 16])),
            "invalid digest key file PATH: the key is 16 bytes long; a digest key is 32 random bytes"
        );
    }

    #[test]
    fn a_missing_key_file_names_the_file() {
        let error = key_ring(Path::new("/nonexistent/keys")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot read the key file /nonexistent/keys"
        );
    }
}
