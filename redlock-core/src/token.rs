//! The lock token: the random value stored under each key so that only its holder can extend or
//! release the lock.

use std::fmt;

use rand_core::CryptoRng;

use crate::error::ConfigError;

/// Random bytes in a generated token (the Redis page asks for 20 at least).
pub const TOKEN_ENTROPY_BYTES: usize = 24;
/// The longest caller-chosen token.
pub const MAX_TOKEN_LEN: usize = 512;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The value a lock writes under its keys. Generated tokens are 24 bytes from the injected
/// CSPRNG, printed as 32 URL-safe base64 characters; caller-chosen tokens are any 1 to
/// [`MAX_TOKEN_LEN`] bytes. `Debug` shows only the length: a token is a capability.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(Box<[u8]>);

impl Token {
    /// A fresh token from `rng` (which must be cryptographically secure: anyone who can guess a
    /// token can release the lock).
    pub fn generate<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let mut raw = [0u8; TOKEN_ENTROPY_BYTES];
        rng.fill_bytes(&mut raw);
        let mut text = Vec::with_capacity(TOKEN_ENTROPY_BYTES / 3 * 4);
        for chunk in raw.chunks_exact(3) {
            let n = u32::from(chunk[0]) << 16 | u32::from(chunk[1]) << 8 | u32::from(chunk[2]);
            for shift in [18, 12, 6, 0] {
                text.push(ALPHABET[(n >> shift & 63) as usize]);
            }
        }
        Self(text.into_boxed_slice())
    }

    /// A caller-chosen token (for example, one persisted to resume a lock after a restart).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, ConfigError> {
        let bytes = bytes.into();
        if bytes.is_empty() || bytes.len() > MAX_TOKEN_LEN {
            return Err(ConfigError::TokenLength {
                len: bytes.len(),
                max: MAX_TOKEN_LEN,
            });
        }
        Ok(Self(bytes.into_boxed_slice()))
    }

    /// This token with the round number appended (`<token>.<round>`): distinct per round, and
    /// as unguessable as the token itself.
    /// The placeholder token of commands that claim nothing (the trust command).
    pub(crate) fn trust() -> Self {
        Self(b"trust".to_vec().into())
    }

    pub(crate) fn for_round(&self, round: u32) -> Self {
        let mut bytes = self.0.to_vec();
        bytes.push(b'.');
        bytes.extend_from_slice(round.to_string().as_bytes());
        Self(bytes.into_boxed_slice())
    }

    /// The bytes stored in Redis.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::rng;

    #[test]
    fn generated_tokens_are_printable_and_long_enough() {
        let mut seeded = rng(7);
        let a = Token::generate(&mut seeded);
        let b = Token::generate(&mut seeded);
        assert_eq!(a.as_bytes().len(), 32);
        assert!(a.as_bytes().iter().all(|c| ALPHABET.contains(c)));
        assert_ne!(a, b);
        assert_eq!(
            a,
            Token::generate(&mut rng(7)),
            "a seed reproduces its tokens"
        );
    }

    #[test]
    fn caller_tokens_are_bounded() {
        assert!(Token::new(b"x".to_vec()).is_ok());
        assert_eq!(
            Token::new(Vec::new()),
            Err(ConfigError::TokenLength {
                len: 0,
                max: MAX_TOKEN_LEN
            })
        );
        assert!(Token::new(vec![0u8; MAX_TOKEN_LEN]).is_ok());
        assert!(Token::new(vec![0u8; MAX_TOKEN_LEN + 1]).is_err());
    }

    #[test]
    fn debug_hides_the_value() {
        let token = Token::new(b"secret-value".to_vec()).expect("valid");
        assert_eq!(format!("{token:?}"), "Token(12 bytes)");
    }
}
